"""The board's build-time parameters: the DRAM behind the chip's AXI master port.

A :class:`BoardConfig` is resolved against the chip it serves (:meth:`BoardConfig.resolve`):
the DRAM model (``rtl/dram.py``) is elaborated from it, the chip's DMA checks descriptors
against it, and the chip publishes it in the ``DRAM0``/``DRAM1`` registers, where software (the
roofline, the kernels' allocator) reads it back with :meth:`BoardConfig.from_regs`. It is never
typed a second time.

Bandwidth is ``beats`` bus beats per ``period`` cycles, shared by reads and writes (one DRAM
channel). The default keeps the *ridge point* -- peak MACs per byte of DRAM bandwidth -- at
:data:`RIDGE_MACS_PER_BYTE` on every array size: 1 byte per cycle on the default 4x4 int8 array.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from fractions import Fraction

from .config import ChipConfig, log2

__all__ = ["BoardConfig", "RIDGE_MACS_PER_BYTE", "PAGE_BYTES", "MAX_BURST_BEATS"]

RIDGE_MACS_PER_BYTE = 16  # default ridge point: peak int8 MACs per cycle / DRAM bytes per cycle
PAGE_BYTES = 4096  # an AXI burst must not cross a 4 KiB boundary
MAX_BURST_BEATS = 16  # the DMA's longest burst (AXI4 INCR allows 256)
_MAX_PERIOD = 256


def _is_pow2(n) -> bool:
    return isinstance(n, int) and not isinstance(n, bool) and n > 0 and (n & (n - 1)) == 0


@dataclass(frozen=True)
class BoardConfig:
    """DRAM parameters of the board.

    Parameters
    ----------
    dram_bytes : int
        DRAM size (power of two, 4 KiB .. 16 MiB; default 4 MiB: a 256^3 GEMM and K = 128K fit).
    bus_bytes : int or None
        AXI data width in bytes (power of two, 2 .. the narrowest SRAM word of the chip, so that
        every SRAM word is a whole number of beats). None: the narrowest SRAM word.
    latency : int
        Cycles from an accepted read address to its first data beat (1 .. 1023).
    bandwidth : float or None
        Sustained DRAM bytes per cycle (reads and writes together), at most ``bus_bytes``.
        None: peak MACs per cycle / RIDGE_MACS_PER_BYTE (1 B/cycle on 4x4).
    beats, period : int
        The resolved bandwidth: ``beats`` beats per ``period`` cycles (set by :meth:`resolve`).
    """

    dram_bytes: int = 1 << 22
    bus_bytes: int | None = None
    latency: int = 32
    bandwidth: float | None = None
    beats: int = 0
    period: int = 0

    def resolve(self, chip: ChipConfig) -> "BoardConfig":
        """The concrete board for ``chip`` (defaults filled in, every value checked)."""
        narrow = min(chip.rows, chip.cols)  # bytes in the narrowest SRAM word (A, B, SA, SB)
        bus = narrow if self.bus_bytes is None else self.bus_bytes
        if not _is_pow2(bus) or not 2 <= bus <= narrow:
            raise ValueError(f"DRAM bus width must be a power of two from 2 to {narrow} bytes on a "
                             f"{chip.rows}x{chip.cols} array (the narrowest SRAM word), not {bus!r}")
        if not _is_pow2(self.dram_bytes) or not 4096 <= self.dram_bytes <= 1 << 24:
            raise ValueError(f"DRAM size must be a power of two from 4 KiB to 16 MiB, not {self.dram_bytes!r} bytes")
        if not isinstance(self.latency, int) or isinstance(self.latency, bool) or not 1 <= self.latency <= 1023:
            raise ValueError(f"DRAM latency must be an integer from 1 to 1023 cycles, not {self.latency!r}")
        bw = self.bandwidth
        if bw is None:
            bw = Fraction(chip.peak_macs_per_cycle, RIDGE_MACS_PER_BYTE)
        try:
            ratio = Fraction(bw).limit_denominator(_MAX_PERIOD) / bus
        except (TypeError, ValueError):
            raise ValueError(f"DRAM bandwidth must be a number of bytes per cycle, not {bw!r}") from None
        ratio = Fraction(ratio).limit_denominator(_MAX_PERIOD)
        if not 0 < ratio <= 1:
            raise ValueError(f"DRAM bandwidth must be above 0 and at most {bus} bytes per cycle (one {bus}-byte "
                             f"beat per cycle), not {float(bw):g}; the smallest step is {bus}/{_MAX_PERIOD} B/cycle")
        return replace(self, bus_bytes=bus, bandwidth=float(ratio * bus), beats=ratio.numerator,
                       period=ratio.denominator)

    # ---- derived ------------------------------------------------------------------------------
    @property
    def bus_bits(self) -> int:
        return 8 * self.bus_bytes

    @property
    def bytes_per_cycle(self) -> float:
        return self.beats * self.bus_bytes / self.period


    def ridge_point(self, chip: ChipConfig) -> float:
        """Peak MACs per DRAM byte: kernels below this intensity are memory-bound."""
        return chip.peak_macs_per_cycle / self.bytes_per_cycle

    def as_dict(self) -> dict:
        return {"dram_bytes": self.dram_bytes, "bus_bytes": self.bus_bytes, "latency": self.latency,
                "beats": self.beats, "period": self.period, "bytes_per_cycle": self.bytes_per_cycle}

    # ---- published registers ------------------------------------------------------------------
    def regs(self) -> dict[str, int]:
        """DRAM0/DRAM1 values (packed from the register map) that publish this board."""
        from .csr_map import REG

        return {
            "DRAM0": REG["DRAM0"].pack(log2_dram_bytes=log2(self.dram_bytes), log2_bus_bytes=log2(self.bus_bytes),
                                       latency=self.latency),
            "DRAM1": REG["DRAM1"].pack(beats=self.beats, period=self.period),
        }

    @classmethod
    def from_regs(cls, dram0: int, dram1: int) -> "BoardConfig":
        from .csr_map import REG

        f0, f1 = REG["DRAM0"].unpack(dram0), REG["DRAM1"].unpack(dram1)
        bus = 1 << f0["log2_bus_bytes"]
        beats, period = f1["beats"], f1["period"]
        if not period or not beats:
            raise ValueError(f"DRAM1 reads 0x{dram1:08x}: a board with no bandwidth")
        return cls(dram_bytes=1 << f0["log2_dram_bytes"], bus_bytes=bus, latency=f0["latency"],
                   bandwidth=beats * bus / period, beats=beats, period=period)
