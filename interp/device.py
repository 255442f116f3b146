""":class:`InterpDevice`: the Device API (cosim/device.py) over the numpy chip of interp/machine.py.

An unchanged kernel takes it where it takes a cocotb :class:`cosim.device.Device`: it implements
the :class:`cosim.device.KernelDevice` protocol and the rest of ``Device`` that kernels, the tile
runtime and ``workarounds.attach`` call (``board``, ``dram`` and the DRAM backdoor, the submit
filter, ``run``, ``soft_reset``, ``write_csr``). Its async methods complete at once: the stream
executes inside :meth:`submit`. Drive it with ``asyncio.run``::

    dev = InterpDevice(ChipConfig(), revision="B1")
    mit = workarounds.attach(dev)
    outs, stats = asyncio.run(run_spec(dev, spec, params, inputs, mitigations=mit))

Time is not modelled yet: :meth:`now_cycles` is always 0 and so are the perf counters that count
cycles (CYCLES, the busy and wait counters); the event counters that do not depend on timing
(MACS, DRAM_RD_BYTES, DRAM_WR_BYTES, VEC_ELEMS) count what the stream did.
"""

from __future__ import annotations

import time
from typing import Iterable, Sequence

import numpy as np

from cosim.buffers import Buffer, DramAllocator
from cosim.device import DeviceError, HostTiming, PerfSnapshot, SubmitHook
from rtl.board import BoardConfig
from rtl.config import ChipConfig
from rtl.csr_map import ID_MAGIC, PERF_COUNTERS, REG, SEMAPHORES, register
from rtl.isa import COMMAND_BITS, ErrCode
from rtl.memories import memory
from rtl.revisions import REVISIONS, revision as lookup_revision

from .errors import Deadlock, SemaphoresLeft, UnmodelledRevision
from .machine import Machine

__all__ = ["InterpDevice", "MODELLED_REVISIONS"]

MODELLED_REVISIONS = tuple(r.name for r in REVISIONS.values() if not r.defects)  # B1: no defect to model


def _checked_revision(name: str):
    rev = lookup_revision(name)
    if rev.defects:
        names = ", ".join(sorted(d.name for d in rev.defects))
        raise UnmodelledRevision(
            f"the interpreter does not model revision {rev.name}: its defects ({names}) change what the chip "
            f"computes or when, and the interpreter would silently compute the fixed chip instead. Run {rev.name} "
            f"on the RTL simulator, or interpret a revision without defects ({', '.join(MODELLED_REVISIONS)}).")
    return rev


class InterpDevice(SubmitHook):
    """A chip in numpy behind the Device API.

    Parameters
    ----------
    config : ChipConfig, optional
        The chip (default: ``ChipConfig()``).
    board : BoardConfig, optional
        The board (resolved against ``config``; default: ``BoardConfig()``).
    revision : str
        A revision without defects (``MODELLED_REVISIONS``: B1); any other raises
        :class:`~interp.errors.UnmodelledRevision` naming it and its defects.
    strict_semaphores : bool
        :meth:`wait_idle` raises :class:`~interp.errors.SemaphoresLeft` when the chip is idle
        with a semaphore count above zero (the tile compiler leaves every count at zero).
    dma_order : {"eager", "late", "random"}
        When a DMA that may go runs (:data:`interp.machine.DMA_ORDERS`): at once; loads as late
        as the stream allows (a unit that should have waited for a load reads the old words); or
        any head that may move, chosen by ``seed``. Each makes a different race visible in the
        output; the RTL's timing is one more.

    Attributes
    ----------
    machine : interp.machine.Machine
        The state: SRAMs, DRAM, semaphores, ERR.
    """

    def __init__(self, config: ChipConfig | None = None, board: BoardConfig | None = None, revision: str = "B1", *,
                 strict_semaphores: bool = True, dma_order: str = "eager", seed: int = 0):
        self.config = config or ChipConfig()
        b = board or BoardConfig()
        self.board = b if b.beats else b.resolve(self.config)
        self._rev = _checked_revision(revision)
        self.timing = HostTiming()
        self.strict_semaphores = strict_semaphores
        self.machine = Machine(self.config, self.board, dma_order, seed)
        self.dram = DramAllocator(self.board.dram_bytes, self.board.bus_bytes)
        self._scratch = 0
        self.watchdog_cycles = 1_000_000

    # ---- identity -------------------------------------------------------------------------------
    @property
    def revision(self) -> str:
        return self._rev.name

    @property
    def revision_code(self) -> int:
        return self._rev.code

    # ---- registers --------------------------------------------------------------------------------
    def _perf(self) -> dict[str, int]:
        return {name: self.machine.stats.get(name, 0) for name in PERF_COUNTERS}

    def _csr(self, name: str) -> int:
        m = self.machine
        if name == "ID":
            return ID_MAGIC
        if name == "REV":
            return self._rev.code
        caps = self.config.caps()  # CAPS0, CAPS1 and whatever else publishes the config
        if name in caps:
            return caps[name]
        if name in ("DRAM0", "DRAM1"):
            return self.board.regs()[name]
        if name == "ERR":
            return m.err_code
        if name.startswith("ERR_CMD"):
            return (m.err_cmd >> (32 * int(name[-1]))) & 0xFFFFFFFF
        if name == "ERR_COUNT":
            return m.err_count
        if name == "DONE_COUNT":
            return m.done_count & 0xFFFFFFFF
        if name == "SCRATCH":
            return self._scratch
        if name == "STATUS":
            return REG["STATUS"].pack(idle=int(not m.busy()), busy=int(m.busy()), err=int(m.err_code != 0))
        if name.startswith("SEM") and name[3:].isdigit():
            lo, hi = int(name[3]), int(name[4])
            return m.sems[lo] | m.sems[hi] << 16
        for counter, value in self._perf().items():
            if name == f"{counter}_LO":
                return value & 0xFFFFFFFF
            if name == f"{counter}_HI":
                return value >> 32
        raise NotImplementedError(f"the interpreter does not model register {name}; it models ID, REV, CAPS0/1, "
                                  "DRAM0/1, STATUS, ERR, ERR_CMD0..3, ERR_COUNT, DONE_COUNT, SCRATCH, the SEM pairs "
                                  "and the perf counters")

    async def read_csr(self, reg: str | int) -> int:
        name = reg if isinstance(reg, str) else next(r.name for r in REG.values() if r.addr == reg)
        return self._csr(register(name).name)

    async def write_csr(self, reg: str | int, value: int) -> None:
        name = register(reg if isinstance(reg, str) else next(r.name for r in REG.values() if r.addr == reg)).name
        if name == "SCRATCH":
            self._scratch = value & 0xFFFFFFFF
        elif name == "CTRL":
            f = REG["CTRL"].unpack(value)
            if f["soft_reset"]:
                self.machine.soft_reset()
                self.chip_was_reset()
            if f["clear_err"]:
                self.machine.clear_err()
            if f["clear_perf"]:
                self.machine.stats = dict.fromkeys(self.machine.stats, 0)
        else:
            raise NotImplementedError(f"the interpreter does not model writes to {name} (it models CTRL and SCRATCH)")

    async def read_perf(self) -> PerfSnapshot:
        return PerfSnapshot(self._perf())

    # ---- memories: the backdoor -------------------------------------------------------------------
    def mem_depth(self, region: int) -> int:
        return memory(int(region)).depth(self.config)

    def mem_width(self, region: int) -> int:
        return memory(int(region)).width(self.config)

    def _sram(self, region: int, start: int, count: int) -> np.ndarray:
        m = memory(int(region))
        depth = m.depth(self.config)
        if start < 0 or count < 0 or start + count > depth:
            raise IndexError(f"words [{start}, {start + count}) are outside SRAM {m.name} (depth {depth})")
        return self.machine.sram[m.name]

    def load_words(self, region: int, start: int, words: Iterable[int]) -> int:
        words = list(words)
        arr = self._sram(region, start, len(words))
        nb = arr.shape[1]
        mask = (1 << (8 * nb)) - 1
        raw = b"".join((int(w) & mask).to_bytes(nb, "little") for w in words)
        arr[start:start + len(words)] = np.frombuffer(raw, np.uint8).reshape(-1, nb)
        return len(words)

    def read_words(self, region: int, start: int, count: int) -> list[int]:
        arr = self._sram(region, start, count)
        return [int.from_bytes(arr[i].tobytes(), "little") for i in range(start, start + count)]

    # ---- DRAM: host memory ---------------------------------------------------------------------
    def _dram_range(self, addr: int, nbytes: int) -> None:
        bb = self.board.bus_bytes
        if addr < 0 or addr % bb or nbytes % bb or addr + nbytes > self.board.dram_bytes:
            raise IndexError(f"DRAM bytes [{addr:#x}, {addr + nbytes:#x}) are not whole {bb}-byte beats inside the "
                             f"{self.board.dram_bytes:,}-byte DRAM")

    def dram_write(self, addr: int | Buffer, data) -> int:
        """As :meth:`cosim.device.Device.dram_write`: bytes (or an array's raw bytes) from byte
        ``addr``, the last beat padded with zeros; returns the byte count."""
        addr = addr.addr if isinstance(addr, Buffer) else addr
        raw = np.frombuffer(data.tobytes() if isinstance(data, np.ndarray) else bytes(data), np.uint8)
        bb = self.board.bus_bytes
        padded = -(-len(raw) // bb) * bb
        self._dram_range(addr, padded)
        self.machine.dram[addr:addr + len(raw)] = raw
        self.machine.dram[addr + len(raw):addr + padded] = 0
        return len(raw)

    def dram_read(self, addr: int | Buffer, nbytes: int | None = None) -> np.ndarray:
        if isinstance(addr, Buffer):
            nbytes = addr.nbytes if nbytes is None else nbytes
            addr = addr.addr
        bb = self.board.bus_bytes
        self._dram_range(addr, -(-nbytes // bb) * bb)
        return self.machine.dram[addr:addr + nbytes].copy()

    # ---- command stream ----------------------------------------------------------------------------
    async def submit(self, commands: Sequence[int], budget_cycles: int | None = None) -> None:
        """Execute ``commands`` (through the submit filter, as the Device does) as far as they
        go; raises :class:`~interp.errors.Deadlock` if the stream's head can never issue."""
        commands = self.filtered(list(commands))
        t0 = time.perf_counter()
        try:
            self.machine.push(commands)
        finally:  # the machine's time counts as the simulator's (KernelStats.sim_wait_s)
            self.timing.sim_s += time.perf_counter() - t0

    async def run(self, commands: Sequence[int], budget_cycles: int | None = None) -> None:
        await self.submit(commands, budget_cycles)
        await self.wait_idle(budget_cycles)

    def now_cycles(self) -> int:
        """Always 0: the interpreter has no timing model yet (docs/interpret.md)."""
        return 0

    def default_budget(self) -> int:
        return self.watchdog_cycles

    async def wait_idle(self, budget_cycles: int | None = None) -> None:
        """Return once everything submitted has executed. A DMA queue whose head waits on a
        semaphore nothing will signal raises :class:`~interp.errors.Deadlock` (where the RTL's
        watchdog would fire); with ``strict_semaphores``, counts left above zero raise
        :class:`~interp.errors.SemaphoresLeft`."""
        m = self.machine
        if m.busy():
            raise Deadlock(m.describe_stuck(), m.stuck())
        self.chip_seen_idle()
        left = {i: c for i, c in enumerate(m.sems) if c}
        if left and self.strict_semaphores:
            who = ", ".join(f"semaphore {i} at {c} (last signalled by command {m.last_signal.get(i, '?')})"
                            for i, c in left.items())
            raise SemaphoresLeft(f"the chip is idle with semaphore counts above zero: {who}; a signal no wait took "
                                 "would release the next stream's wait early", left)

    async def soft_reset(self) -> None:
        await self.write_csr("CTRL", REG["CTRL"].pack(soft_reset=1, clear_err=1))

    async def check_no_error(self) -> None:
        m = self.machine
        if m.err_code:
            try:
                name = ErrCode(m.err_code).name
            except ValueError:
                name = "unknown"
            words = " ".join(f"ERR_CMD{i}=0x{(m.err_cmd >> 32 * i) & 0xFFFFFFFF:08x}" for i in range(COMMAND_BITS // 32))
            raise DeviceError(f"chip reports ERR={m.err_code} ({name}); {words}; ERR_COUNT={m.err_count}")

    async def dump_state(self) -> dict:
        """What :meth:`cosim.device.Device.dump_state` gives, from the model: the registers it
        holds, and each queue head that cannot move."""
        names = ["STATUS", "ERR", "ERR_CMD0", "ERR_CMD1", "ERR_CMD2", "ERR_CMD3", "ERR_COUNT", "DONE_COUNT",
                 *[f"SEM{2 * i}{2 * i + 1}" for i in range(SEMAPHORES // 2)]]
        return {"registers": {n: self._csr(n) for n in names}, "stuck": self.machine.stuck()}

    def semaphores(self) -> list[int]:
        """The semaphore counts now."""
        return list(self.machine.sems[:SEMAPHORES])
