"""Raw DMA streams for the DMA errata: the round trip a :class:`~workarounds.cells.DmaCell` runs.

Until the kernels move their data by DMA, the regression matrix needs a workload of its own
that meets the DMA errata's conditions: a 2D load from DRAM into the accumulator SRAM and a 2D
store back, synchronised by a semaphore, checked byte for byte against numpy (the spec: a DMA
copies bytes). ``firstlight/jobs/errata.py`` runs it like a kernel cell, through the submit
filter the matrix installed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from rtl.board import PAGE_BYTES
from rtl.isa import DmaQueue, dma_load, dma_store, dma_stride, nop
from rtl.memories import Region

from .cells import DmaCell
from .registry import Unit

__all__ = ["DmaStats", "address_tags", "page_buffer", "dma_round_trip"]

SEM_LOADED, SEM_DONE = 0, 1  # the load tells the store (queue wait) and the stream (NOP wait)
_UNTOUCHED = 0xA5  # what the destination holds where nothing may be written


@dataclass
class DmaStats:
    """What :func:`dma_round_trip` measured (the fields ``run_cell`` reports of a kernel)."""

    cycles: int
    mitigations: list[str] = field(default_factory=list)
    commands: int = 0  # after the submit filter


def address_tags(buf) -> np.ndarray:
    """Bytes for DRAM buffer ``buf`` in which every 4-byte group holds its own DRAM address
    (little endian): a word read from the wrong place says where it came from."""
    return (buf.addr + 4 * np.arange(buf.nbytes // 4, dtype=np.uint32)).astype("<u4").view(np.uint8)


def page_buffer(dev, nbytes: int, name: str):
    """Whole 4 KiB pages holding ``nbytes`` from a page start (a wrapped burst stays inside them)."""
    return dev.dram.alloc(-(-nbytes // PAGE_BYTES) * PAGE_BYTES, name, align=PAGE_BYTES)


async def dma_round_trip(dev, cell: DmaCell, rng: np.random.Generator, mit) -> tuple[np.ndarray, np.ndarray, DmaStats]:
    """Run ``cell`` and return ``(got, expected, stats)``: the destination pages as the chip left
    them and as the spec says (the rows copied, every other byte untouched)."""
    wb = dev.mem_width(Region.ACC) // 8
    row, pitch = cell.words * wb, cell.pitch * wb
    off = cell.offset * wb % PAGE_BYTES
    span = off + (cell.rows - 1) * pitch + row
    src, dst = page_buffer(dev, span, "dma cell source"), page_buffer(dev, span, "dma cell destination")
    data = rng.integers(0, 256, size=src.nbytes, dtype=np.uint8)
    want = np.full(dst.nbytes, _UNTOUCHED, np.uint8)
    for r in range(cell.rows):
        a = off + r * pitch
        want[a:a + row] = data[a:a + row]
    dev.dram_write(src, data)
    dev.dram_write(dst, np.full(dst.nbytes, _UNTOUCHED, np.uint8))
    cmds = [
        dma_stride(DmaQueue.LOAD, sram=cell.words, dram=pitch),
        dma_stride(DmaQueue.STORE, sram=cell.words, dram=pitch),
        dma_load(Region.ACC, sram=0, dram=src.addr + off, words=cell.words, rows=cell.rows, signal=SEM_LOADED,
                 signal2=SEM_DONE),
        dma_store(sram=0, dram=dst.addr + off, words=cell.words, rows=cell.rows, wait=SEM_LOADED),
        nop(wait=SEM_DONE),
    ]
    inserted0 = sum(mit.filter.insertions.values())
    p0 = await dev.read_perf()
    await dev.run(cmds)
    p1 = await dev.read_perf()
    await dev.check_no_error()
    got = dev.dram_read(dst)
    report = mit.report((Unit.DMA,))
    stats = DmaStats(cycles=(p1 - p0)["CYCLES"], mitigations=list(report["mitigations"]),
                     commands=len(cmds) + sum(mit.filter.insertions.values()) - inserted0)
    return got, want, stats
