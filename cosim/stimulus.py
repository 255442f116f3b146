"""What the testbench does to the board, cycle by cycle: the stimulus a bare build replays.

A job run with a :class:`StimulusRecorder` on its testbench writes down every action the host
takes on the board, stamped with the clock cycle it happens at: the reset release, each CSR bus
transfer (with the data a read returned), and every backdoor write into an SRAM or the DRAM.
The chip is deterministic, so replaying those actions at the same cycles reproduces the run
exactly. :mod:`cosim.limit` replays them on a plain Verilator build of the same Verilog with a
small Verilog driver (no VPI, no cocotb, no Python) to measure what the simulator alone can do;
the driver checks every read against the recorded data, so a replay that drifted is caught.

The file is text, one event per line, ``<cycle> <kind> <a hex> <b hex>``, in the order the
actions happened (cycles never decrease):

====  ===================  ======================  ===========================
kind  action               a                       b
====  ===================  ======================  ===========================
0     end of the replay    0                       0
1     CSR write            register address        data
2     CSR read             register address        the data the read returned
3     reset released       0                       0
5     reset asserted       0                       0
4     DRAM row write       row                     the row (``ROW_BYTES`` bytes)
16+r  SRAM word write      word index              the word (region ``r``)
====  ===================  ======================  ===========================

Actions happen at falling clock edges (where the testbench acts); cycle ``n`` is the falling
edge at ``n`` clock periods.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["StimulusRecorder", "StimulusError", "KIND_END", "KIND_CSR_WRITE", "KIND_CSR_READ", "KIND_RESET", "KIND_RESET_ASSERT",
           "KIND_DRAM", "KIND_SRAM"]

KIND_END = 0
KIND_CSR_WRITE = 1
KIND_CSR_READ = 2
KIND_RESET = 3
KIND_DRAM = 4
KIND_RESET_ASSERT = 5
KIND_SRAM = 16  # + the memory's window region (rtl/memories.py)


class StimulusError(RuntimeError):
    """The run did something the replay cannot reproduce (an action off a clock edge)."""


class StimulusRecorder:
    """Collects the board stimulus of one run (see the module docstring); cheap enough to leave
    on while the harness is measured (a tuple per action)."""

    def __init__(self, period_ns: int):
        self.period_ns = period_ns
        self.events: list[list] = []

    def cycle(self, now_ns: int) -> int:
        if now_ns % self.period_ns:
            raise StimulusError(f"an action at {now_ns} ns is not on a falling clock edge (every {self.period_ns} ns): "
                                "a replay could not apply it at the same point of the cycle")
        return now_ns // self.period_ns

    def _at(self, now_ns: int) -> int:
        c = self.cycle(now_ns)
        if self.events and c < self.events[-1][0]:
            raise StimulusError(f"actions out of order: cycle {c} after cycle {self.events[-1][0]}")
        return c

    def _add(self, now_ns: int, kind: int, a: int, b: int) -> list:
        ev = [self._at(now_ns), kind, a, b]
        self.events.append(ev)
        return ev

    def reset_released(self, now_ns: int) -> None:
        self._add(now_ns, KIND_RESET, 0, 0)

    def reset_asserted(self, now_ns: int) -> None:
        self._add(now_ns, KIND_RESET_ASSERT, 0, 0)

    def csr(self, now_ns: int, addr: int, wdata: int, write: bool) -> list:
        """A transfer starting now; for a read, fill in ``ev[3]`` with the data once it is known."""
        return self._add(now_ns, KIND_CSR_WRITE if write else KIND_CSR_READ, addr, wdata if write else 0)

    def sram(self, now_ns: int, region: int, start: int, words) -> None:
        c = self._at(now_ns)
        kind = KIND_SRAM + int(region)
        self.events.extend([c, kind, start + i, int(w)] for i, w in enumerate(words))

    def dram(self, now_ns: int, first_row: int, rows) -> None:
        c = self._at(now_ns)
        self.events.extend([c, KIND_DRAM, first_row + i, int(w)] for i, w in enumerate(rows))

    def write(self, path: Path, end_ns: int) -> int:
        """Write the events and the end marker; return the last cycle the replay must run."""
        end = self.cycle(end_ns)
        with open(path, "w") as f:
            for c, kind, a, b in self.events:
                f.write(f"{c} {kind} {a:x} {b:x}\n")
            f.write(f"{end} {KIND_END} 0 0\n")
        return end
