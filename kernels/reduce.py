"""Row reductions on the reduction unit: ``reduce_rows(dev, x, op)`` -> int32 per row.

Each row is laid out as consecutive accumulator words (LANES values per word), padded with the
operation's identity. One REDUCE per row writes the result to lane 0 of a destination word and
the operation's identity to the other lanes, so a destination word can itself be reduced again:
rows too long for one pass are cut into segments whose partial words are reduced in a second
round (all arithmetic stays on the chip).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from rtl.isa import MAX_COUNT, ReduceOp, dma_load, dma_store, reduce
from rtl.memories import Region
from workarounds import Mitigations, Unit

from .dma_stream import SEM
from .stats import KernelStats, Measure
from .validate import check_matrix

if TYPE_CHECKING:  # the protocol of the device surface a kernel uses
    from cosim.device import KernelDevice

__all__ = ["reduce_rows", "IDENTITY", "OPS"]

OPS = {"sum": ReduceOp.SUM, "max": ReduceOp.MAX, "min": ReduceOp.MIN}
IDENTITY = {ReduceOp.SUM: 0, ReduceOp.MAX: -(2**31), ReduceOp.MIN: 2**31 - 1}


async def _reduce_word_rows(dev, rows: list[np.ndarray], op: ReduceOp, host: dict, budget,
                            even_sum: bool = False) -> list[np.ndarray]:
    """Reduce each entry (an (n_i, LANES) int32 block) to one word on the chip; returns the words.

    ``even_sum``: pad SUM blocks with a zero word to an even count (ReduceConstraints.even_sum_count).
    """
    depth = dev.config.acc_depth
    lanes = dev.config.lanes
    if even_sum and op == ReduceOp.SUM:
        zero = np.zeros((1, lanes), np.int32)
        rows = [np.concatenate([r, zero]) if len(r) % 2 else r for r in rows]
    results: list[np.ndarray] = []
    i = 0
    while i < len(rows):
        # Batch rows while their words plus one destination word each fit the accumulator SRAM.
        batch, used = [], 0
        while i < len(rows) and used + len(rows[i]) + 1 + len(batch) <= depth:
            batch.append(rows[i])
            used += len(rows[i])
            i += 1
        if not batch:
            raise AssertionError("segment longer than the accumulator SRAM")
        await dev.wait_idle(budget)
        # The batch goes into DRAM (host memory), into ACC by one DMA, is reduced there, and its
        # result words come back by one DMA: the REDUCEs wait for the load, the store for the
        # last REDUCE.
        dev.dram.reset()
        words = np.concatenate(batch).astype("<i4")
        src_buf = dev.dram.alloc(words.nbytes, "rows")
        dst_buf = dev.dram.alloc(len(batch) * lanes * 4, "results")
        dev.dram_write(src_buf, words)
        host["bytes_staged"] = host.get("bytes_staged", 0) + words.nbytes
        dst0 = used
        cmds = [dma_load(Region.ACC, sram=0, dram=src_buf.addr, words=used, signal=SEM["AUX"])]
        src = 0
        for r, block in enumerate(batch):
            last = r == len(batch) - 1
            cmds.append(reduce(op, src=src, count=len(block), dst=dst0 + r, wait=SEM["AUX"] if r == 0 else None,
                               signal=SEM["AUX_FREE"] if last else None))
            src += len(block)
        cmds.append(dma_store(sram=dst0, dram=dst_buf.addr, words=len(batch), wait=SEM["AUX_FREE"]))
        host["commands"] += len(cmds)
        await dev.submit(cmds, budget)
        await dev.wait_idle(budget)
        out = dev.dram_read(dst_buf).view("<i4").reshape(len(batch), lanes).astype(np.int32)
        results.extend(out)
    return results


async def reduce_rows(dev: KernelDevice, x: np.ndarray, op: str, *, mitigations: Mitigations,
                      budget_cycles: int | None = None) -> tuple[np.ndarray, KernelStats]:
    """Reduce every row of an int32 matrix with ``op`` in {"sum", "max", "min"} on the chip.

    SUM wraps modulo 2**32 like the hardware. Returns ``(values (R,), stats)``.
    """
    if op not in OPS:
        raise ValueError(f"op must be one of {', '.join(OPS)}, got {op!r}")
    x = check_matrix("x", x, (np.int32, np.int16, np.int8), "integer rows to reduce, shape (R, C)")
    x = x.astype(np.int32)
    rc = mitigations.reduce
    rop = OPS[op]
    # max_via_min (FL-RU-001: MAX folds from 0). ~x is an exact order-reversing map of int32,
    # so max(x) == ~min(~x): the chip runs MIN on complemented data.
    complement = rop == ReduceOp.MAX and rc.max_via_min
    if complement:
        x = ~x
        rop = ReduceOp.MIN
    lanes = dev.config.lanes
    depth = dev.config.acc_depth
    even_sum = rc.even_sum_count
    seg_words = min(MAX_COUNT, depth - 1) - (1 if even_sum else 0)
    rows_n, cols = x.shape
    wpr = -(-cols // lanes)
    padded = np.full((rows_n, wpr * lanes), IDENTITY[rop], np.int32)
    padded[:, :cols] = x
    host = {"words_loaded": 0, "commands": 0, "rounds": 0}
    # Roof: the reduction unit consumes one accumulator word per cycle.
    # Compulsory DRAM traffic: the rows once in, one int32 per row out.
    async with Measure(dev, "reduce", rows_n * wpr, {"shape": [rows_n, cols], "op": op, "host": host},
                       compulsory_bytes=4 * rows_n * cols + 4 * rows_n, useful_macs=rows_n * cols,
                       compute_cycles=rows_n * wpr) as meas:
        # Each row is a list of word blocks; rounds shrink long rows until one word is left.
        blocks = [padded[r].reshape(wpr, lanes) for r in range(rows_n)]
        while True:
            host["rounds"] += 1
            segs, owner = [], []
            for r, blk in enumerate(blocks):
                for s in range(0, len(blk), seg_words):
                    segs.append(blk[s:s + seg_words])
                    owner.append(r)
            words = await _reduce_word_rows(dev, segs, rop, host, budget_cycles, even_sum)
            merged: list[list[np.ndarray]] = [[] for _ in blocks]
            for r, w in zip(owner, words):
                merged[r].append(w)
            blocks = [np.stack(ws) for ws in merged]
            if all(len(b) == 1 for b in blocks):
                break
        await dev.check_no_error()
    meas.stats.add_errata(mitigations.report((Unit.REDUCE, Unit.CMDPROC, Unit.DMA)))
    result = np.array([b[0, 0] for b in blocks], dtype=np.int32)
    return (~result if complement else result), meas.stats
