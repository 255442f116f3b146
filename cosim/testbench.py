"""The cocotb side of the testbench: clock, reset, and CSR bus transfers on the real simulator.

Runs inside the simulator process. Python wakes a handful of times per bus transfer and once
per wait for completion; it never runs once per clock cycle.
"""

from __future__ import annotations

from cocotb import simulator
from cocotb.clock import Clock
from cocotb.triggers import FallingEdge, First, ReadOnly, RisingEdge, Timer

__all__ = ["Testbench", "BusTimeout", "CLOCK_PERIOD_NS"]

CLOCK_PERIOD_NS = 10  # fixed by cosim/hdl/fl_tb.v
BUS_TIMEOUT_CYCLES = 65535  # the wrapper's bus watchdog (cosim/hdl/fl_tb.v)


class BusTimeout(RuntimeError):
    """The chip did not answer a CSR transfer in time."""


class Testbench:
    """Owns the DUT handles, the clock and reset.

    Parameters
    ----------
    dut : cocotb handle of ``fl_tb``
    clock : "hdl", "cpp" or "gpi"
        Who toggles ``clk``: the Verilog wrapper ("hdl"), the Verilator model's main ("cpp",
        cosim/hdl/fl_tb_main.cpp), or cocotb's ``Clock(impl="gpi")``, which this class starts
        (a build with ``FL_CLOCK_PORT``). The first two look the same from here.
    """

    def __init__(self, dut, clock: str = "hdl"):
        self.dut = dut
        self.clock = clock
        self.clk = dut.clk
        self.chip = dut.chip
        self._started = False
        precision = simulator.get_precision()  # a power of ten: -12 for the wrapper's 1 ps
        if precision > -9:
            raise ValueError(f"the simulator's time precision is 1e{precision} s; the testbench needs 1 ns or finer")
        self._steps_per_ns = 10 ** (-9 - precision)
        # True while the testbench sits at a falling clock edge it reached itself, with no time
        # passed since: handles may be written and a transfer may start without another wait.
        self._at_falling_edge = False
        # A cosim.stimulus.StimulusRecorder while the run is recorded for a replay (bench --limit).
        self.recorder = None

    async def start(self) -> None:
        if self._started:
            return
        if self.clock == "gpi":
            Clock(self.clk, CLOCK_PERIOD_NS, unit="ns", impl="gpi").start()
        for name in ("csr_we", "csr_re", "csr_addr", "csr_wdata"):
            getattr(self.dut, name).value = 0
        self.dut.rst.value = 1  # never let reset float: X would spread through every register
        self._started = True

    async def reset(self, cycles: int = 4) -> None:
        await self.start()
        await FallingEdge(self.clk)
        self.dut.rst.value = 1
        if self.recorder is not None:
            self.recorder.reset_asserted(self.now_ns())
        await self.wait_cycles(cycles)
        await FallingEdge(self.clk)
        self.dut.rst.value = 0
        if self.recorder is not None:
            self.recorder.reset_released(self.now_ns())
        await FallingEdge(self.clk)
        self._at_falling_edge = True

    async def wait_cycles(self, n: int) -> None:
        """Let the simulator run ``n`` clock periods without waking Python in between."""
        if n > 0:
            self._at_falling_edge = False
            await Timer(n * CLOCK_PERIOD_NS, "ns")

    def now_cycles(self) -> int:
        return self.now_ns() // CLOCK_PERIOD_NS

    async def transfer(self, addr: int, wdata: int = 0, write: bool = False) -> int:
        """One CSR bus transfer; returns the read data (0 for writes).

        Python wakes three times: when ``csr_ready`` rises, to read it settled, and at the next
        falling edge, where the strobe drops (and where the next transfer may start at once).
        """
        d = self.dut
        if not self._at_falling_edge:
            await FallingEdge(self.clk)
        self._at_falling_edge = False
        ev = None if self.recorder is None else self.recorder.csr(self.now_ns(), addr, wdata & 0xFFFFFFFF, write)
        d.csr_addr.value = addr
        d.csr_wdata.value = wdata & 0xFFFFFFFF
        strobe = d.csr_we if write else d.csr_re
        strobe.value = 1
        while True:
            await RisingEdge(d.csr_event)
            await ReadOnly()
            if str(d.csr_ready.value) == "1" or str(d.bus_timeout.value) == "1":
                break
        if str(d.csr_ready.value) != "1":
            await FallingEdge(self.clk)
            strobe.value = 0
            # One clock edge with the strobe low clears the wrapper's bus watchdog; without it
            # bus_timeout would still be high when the next transfer starts, csr_event would
            # never rise again and that transfer would wait forever.
            await FallingEdge(self.clk)
            self._at_falling_edge = True
            kind = "write" if write else "read"
            from rtl.csr_map import REGISTERS, WINDOW_DATA

            name = next((r.name for r in REGISTERS if r.addr == addr), None)
            # only a window write into ACC may wait on a busy unit; anything else no answer means a hung bus
            hint = ("a window write into ACC waits while a unit is busy; is the chip hung?"
                    if write and name in WINDOW_DATA else "the CSR bus is hung")
            raise BusTimeout(
                f"CSR {kind} of {name or 'no register'} (address 0x{addr:02x}) got no csr_ready within "
                f"{BUS_TIMEOUT_CYCLES} cycles ({hint})"
            )
        data = int(d.csr_rdata.value)
        if ev is not None and not write:
            ev[3] = data
        await FallingEdge(self.clk)
        strobe.value = 0
        self._at_falling_edge = True
        return data

    async def wait_signal_high(self, signal, budget_cycles: int) -> bool:
        """Wait until ``signal`` is 1, at most ``budget_cycles``; True if it rose in time.

        Returns at a falling clock edge, where the caller may write handles again.
        """
        ok = await self._settled_high(signal, budget_cycles)
        await FallingEdge(self.clk)
        self._at_falling_edge = True
        return ok

    async def _settled_high(self, signal, budget_cycles: int) -> bool:
        """Wait until ``signal`` reads 1 in the read-only phase (glitch-proof), within budget.

        Event-driven simulators report every intermediate value inside a time step, so an edge
        alone is not proof; a settled read is. Returns in the read-only phase.
        """
        deadline = self.now_ns() + budget_cycles * CLOCK_PERIOD_NS
        while True:
            await ReadOnly()
            if str(signal.value) == "1":  # X/Z count as not high
                return True
            left = deadline - self.now_ns()
            if left <= 0:
                return False
            edge = RisingEdge(signal)
            got = await First(edge, Timer(left, "ns"))
            if got is not edge:
                await ReadOnly()
                return str(signal.value) == "1"

    def now_ns(self) -> int:
        # The raw step count divided by whole steps per ns: cocotb's get_sim_time("ns") converts
        # through exact fractions, and the host's ring refills ask for the time at every poll.
        high, low = simulator.get_sim_time()
        return (high << 32 | low) // self._steps_per_ns
