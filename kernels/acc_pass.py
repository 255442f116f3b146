"""One pass of a row kernel through the accumulator SRAM: words in by DMA, commands, words out.

The elementwise kernel (kernels/vector.py) works this way on a chunk of rows (the row kernels
are tile-language kernels, kernels/tiled/, double-buffered by the compiler): the host puts the chunk's words (and any constants) in DRAM, one DMA_LOAD brings them
to ACC word 0 and signals AUX, the kernel's commands run (the first waits AUX, the last signals
AUX_FREE), and one DMA_STORE takes ``out_words`` words from ACC word 0 back to DRAM. Chunks run
one after the other (the next chunk's load does not overlap this chunk's work yet).
"""

from __future__ import annotations

import numpy as np

from rtl.isa import Opcode, decode, dma_load, dma_store, sync_of, with_sync
from rtl.memories import Region

from .dma_stream import SEM

__all__ = ["acc_pass", "units_busy_cycles"]


async def acc_pass(dev, words: np.ndarray, body: list[int], out_words: int, host: dict,
                   budget_cycles: int | None = None) -> np.ndarray:
    """Run ``body`` on ``words`` ((N, LANES) uint32) loaded at ACC word 0; returns the first
    ``out_words`` ACC words afterwards, (out_words, LANES) uint32. ``body`` must not wait or
    signal AUX / AUX_FREE itself: its first command is made to wait for the load and its last
    to signal the store."""
    if not body:
        raise ValueError("acc_pass needs at least one command between the load and the store")
    if sync_of(body[0])["wait"] or sync_of(body[-1])["signal"]:
        raise ValueError("the first command of an acc_pass body must not wait and the last must not signal: "
                         "acc_pass adds the load's and the store's semaphores there")
    lanes = dev.config.lanes
    words = np.ascontiguousarray(words, np.uint32).reshape(-1, lanes)
    await dev.wait_idle(budget_cycles)
    dev.dram.reset()
    src = dev.dram.alloc(words.nbytes, "in")
    dst = dev.dram.alloc(out_words * lanes * 4, "out")
    dev.dram_write(src, words.astype("<u4"))
    body = list(body)
    body[0] = _resync(body[0], wait=SEM["AUX"])
    body[-1] = _resync(body[-1], signal=SEM["AUX_FREE"])
    cmds = [dma_load(Region.ACC, sram=0, dram=src.addr, words=len(words), signal=SEM["AUX"]), *body,
            dma_store(sram=0, dram=dst.addr, words=out_words, wait=SEM["AUX_FREE"])]
    host["commands"] = host.get("commands", 0) + len(cmds)
    host["chunks"] = host.get("chunks", 0) + 1
    host["bytes_staged"] = host.get("bytes_staged", 0) + words.nbytes
    await dev.submit(cmds, budget_cycles)
    await dev.wait_idle(budget_cycles)
    return dev.dram_read(dst).view("<u4").reshape(out_words, lanes).copy()


def _resync(cmd: int, **change) -> int:
    """``cmd`` with some of its semaphore fields replaced, the others kept."""
    s = sync_of(cmd)
    now = {k: (s[f"{k}_sem"] if s[k] else None) for k in ("wait", "signal", "signal2")}
    now.update(change)
    return with_sync(cmd, **now)


def units_busy_cycles(cfg, cmds: list[int]) -> int:
    """The reduction and vector units' busy cycles for ``cmds`` if nothing waited: a REDUCE of
    ``count`` words ``cfg.reduce_busy_cycles(count)``, a VEC ``count + 2`` (rtl/vector.py). The
    vector roof of a kernel (the two units run one at a time; kernels/roofline.py)."""
    total = 0
    for c in cmds:
        d = decode(c)
        if d["opcode"] == Opcode.REDUCE:
            total += cfg.reduce_busy_cycles(d["length"])
        elif d["opcode"] == Opcode.VEC:
            total += d["length"] + 2
    return total
