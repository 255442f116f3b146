"""The memory table: every SRAM of the chip, declared once.

Each entry gives the SRAM's front-door window region (``MEM_ADDR.region``), its word width and
depth as functions of the :class:`~rtl.config.ChipConfig`, and its instance name (the Amaranth
submodule, which is also the Verilog array the simulator backdoor opens). The chip instantiates
one SRAM per entry and maps it into the window; the Device, fault injection, the bring-up
memory tests and the Verilator control file iterate this table. The units' own ports into an
SRAM are wired in ``rtl/chip.py``, the only other place a new region touches.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Callable

from .config import ChipConfig

__all__ = ["Memory", "MEMORIES", "MEM", "BY_REGION", "Region", "DATA_MEMORIES", "memory"]

_COMMAND_BITS = 128  # rtl.isa.COMMAND_BITS (checked there; isa imports Amaranth, this table does not)
_TRACE_ENTRY_BITS = 128  # rtl.trace.TRACE_ENTRY (checked there)


@dataclass(frozen=True)
class Memory:
    """One SRAM.

    Attributes
    ----------
    name : str
        Short name used everywhere (fault specs, reports): ``"A"``, ``"ACC"``...
    region : int
        Front-door window region, ``MEM_ADDR[31:28]``.
    instance : str
        Submodule name in the chip; the simulator backdoor opens the array of the same name.
    data : bool
        Holds kernel data (the errata matrix poisons these between cells).
    window_waits_for_units : bool
        Front-door writes wait while the engine or the reduction unit is busy (they share
        the SRAM's only write port).
    """

    name: str
    region: int
    instance: str
    doc: str
    width_of: Callable[[ChipConfig], int]
    depth_of: Callable[[ChipConfig], int]
    data: bool = True
    window_waits_for_units: bool = False

    def width(self, config: ChipConfig) -> int:
        """Bits in one word."""
        return self.width_of(config)

    def depth(self, config: ChipConfig) -> int:
        """Words."""
        return self.depth_of(config)

    def chunks(self, config: ChipConfig) -> int:
        """32-bit window chunks per word (a narrower word is one chunk)."""
        return max(1, self.width(config) // 32)

    def chunk_bits(self, config: ChipConfig) -> int:
        """Meaningful bits in one window chunk."""
        return min(32, self.width(config))

    @property
    def backdoor(self) -> str:
        """Name of the Verilog array under the chip instance (``fl_tb.chip.<backdoor>``)."""
        return self.instance


MEMORIES: tuple[Memory, ...] = (
    Memory("A", 0, "a_sram", "operand A: one K step of an A tile per word (ROWS int8)",
           lambda c: c.a_word_bits, lambda c: c.operand_depth),
    Memory("B", 1, "b_sram", "operand B: one K step of a B tile per word (COLS int8)",
           lambda c: c.b_word_bits, lambda c: c.operand_depth),
    Memory("ACC", 2, "acc_sram", "accumulators: one row of a C tile per word (LANES int32 or fp32)",
           lambda c: c.acc_word_bits, lambda c: c.acc_depth, window_waits_for_units=True),
    Memory("CMDQ", 3, "cmdq_sram", "command ring: one 128-bit command per entry",
           lambda c: _COMMAND_BITS, lambda c: c.cmdq_depth, data=False),
    Memory("SA", 4, "sa_sram", "A block scales (E8M0): ROWS codes per word, one word per 32 K steps",
           lambda c: 8 * c.rows, lambda c: c.scale_depth),
    Memory("SB", 5, "sb_sram", "B block scales (E8M0): COLS codes per word",
           lambda c: 8 * c.cols, lambda c: c.scale_depth),
    # Debug state, not kernel data: the chip writes it (rtl/trace.py), the host reads it back.
    # Its own build parameter (ChipConfig.trace_depth, published in TRACE_DEPTH): how many events
    # a run makes has nothing to do with the ring's depth (a 64^3 GEMM makes 1,688).
    Memory("TRACE", 6, "trace_sram", "trace buffer: one 128-bit event per entry (rtl/trace.py TRACE_ENTRY)",
           lambda c: _TRACE_ENTRY_BITS, lambda c: c.trace_depth, data=False),
)
MEM: dict[str, Memory] = {m.name: m for m in MEMORIES}
assert len({m.region for m in MEMORIES}) == len(MEMORIES), "two memories share a window region"
assert all(0 <= m.region < 16 for m in MEMORIES), "MEM_ADDR.region is 4 bits"

# The window region codes as an enum, generated from the table (Region.A == 0, ...).
Region = enum.IntEnum("Region", {m.name: m.region for m in MEMORIES})
Region.__doc__ = "Front-door window regions (MEM_ADDR.region), one per entry of MEMORIES."
Region.__module__ = __name__

BY_REGION: dict[int, Memory] = {m.region: m for m in MEMORIES}
DATA_MEMORIES: tuple[Memory, ...] = tuple(m for m in MEMORIES if m.data)


def memory(key: str | int) -> Memory:
    """Look a memory up by name (``"ACC"``, case-insensitive) or region number."""
    if isinstance(key, int):
        try:
            return BY_REGION[int(key)]
        except KeyError:
            raise KeyError(f"no memory in window region {key}; regions: "
                           + ", ".join(f"{m.region} ({m.name})" for m in MEMORIES)) from None
    try:
        return MEM[key.upper()]
    except KeyError:
        raise KeyError(f"unknown memory {key!r}; memories: {', '.join(MEM)}") from None
