"""Device buffers in the board's DRAM: a small allocator and the handle kernels pass around.

DRAM is host memory (like a pinned buffer): the host fills and reads it through the simulator
backdoor (:meth:`cosim.device.Device.dram_write` / ``dram_read``), and the chip reaches it only
through its DMA. A :class:`Buffer` names a byte range; :class:`DramAllocator` hands them out
bump-style, aligned to 4 KiB by default so that a buffer's own page crossings are the ones its
shape makes (tests place buffers off the page on purpose with ``align``).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Buffer", "DramAllocator", "OutOfDram"]


class OutOfDram(MemoryError):
    """The board's DRAM cannot hold what a kernel asked for."""


@dataclass(frozen=True)
class Buffer:
    """``nbytes`` of DRAM from byte ``addr``; ``name`` is for messages and traces."""

    addr: int
    nbytes: int
    name: str = ""

    @property
    def end(self) -> int:
        return self.addr + self.nbytes


class DramAllocator:
    """Bump allocator over ``[0, size)``; :meth:`reset` frees everything at once."""

    def __init__(self, size: int, bus_bytes: int):
        self.size = size
        self.bus_bytes = bus_bytes
        self._next = 0
        self.buffers: list[Buffer] = []

    def alloc(self, nbytes: int, name: str = "", align: int = 4096, offset: int = 0) -> Buffer:
        """A new buffer of ``nbytes`` at ``offset`` bytes past an ``align`` boundary (both
        multiples of the bus width: the DMA moves whole beats)."""
        if not isinstance(nbytes, int) or nbytes < 1:
            raise ValueError(f"a buffer needs a positive byte count, not {nbytes!r}")
        if align < self.bus_bytes or align & (align - 1) or offset % self.bus_bytes or not 0 <= offset < align:
            raise ValueError(f"align must be a power of two >= the {self.bus_bytes}-byte bus and offset a multiple "
                             f"of the bus below it; got align={align}, offset={offset}")
        nbytes = -(-nbytes // self.bus_bytes) * self.bus_bytes
        start = -(-(self._next - offset) // align) * align + offset
        if start + nbytes > self.size:
            raise OutOfDram(f"{name or 'a buffer'} needs {nbytes:,} bytes of DRAM at {start:#x}, but the board's "
                            f"DRAM holds {self.size:,} bytes ({self.size - self._next:,} free); "
                            f"build a larger board (--dram-size) or a smaller problem")
        self._next = start + nbytes
        buf = Buffer(start, nbytes, name)
        self.buffers.append(buf)
        return buf

    def reset(self) -> None:
        self._next = 0
        self.buffers.clear()

    @property
    def used(self) -> int:
        return self._next
