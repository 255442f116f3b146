"""Row softmax on the reduction and vector units: ``softmax(dev, x)`` -> fp32 (R, C).

Per chunk of rows (as many as the accumulator SRAM holds with two scratch words each), one DMA
brings the rows in (row-major words, the padding lanes -Inf), then for every row REDUCE FMAX
into its max word, VEC FSUB with that max as a scalar, one VEC EXP over the whole chunk,
REDUCE FSUM per row, one VEC RECIP over the chunk's sums, VEC FMUL with the row's reciprocal,
and one DMA out. golden/softmax.py's ``softmax_rows`` is the same sequence in numpy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from golden.softmax import NEG_INF, row_words
from rtl.isa import ReduceOp, VecB, VecOp, dma_load, dma_store, reduce, vec
from rtl.memories import Region
from workarounds import Mitigations, Unit

from .dma_stream import SEM
from .stats import KernelStats, Measure
from .validate import check_matrix

if TYPE_CHECKING:
    from cosim.device import KernelDevice

__all__ = ["softmax", "softmax_stream", "softmax_compute_cycles"]

SOFTMAX_UNITS = (Unit.REDUCE, Unit.CMDPROC, Unit.DMA)
MAX_COUNT = 0xFFFF


def softmax_stream(n: int, wpr: int, load_signal: int, done_signal: int) -> list[int]:
    """The commands of one chunk of ``n`` rows of ``wpr`` words at ACC word 0, behind a load
    that signals ``load_signal``; the last one signals ``done_signal`` (the caller adds the
    DMAs). Scratch: the max words at ``n * wpr``, the sums (then reciprocals) after them."""
    words = n * wpr
    mx, sm = words, words + n
    out = []
    for r in range(n):
        out.append(reduce(ReduceOp.FMAX, src=r * wpr, count=wpr, dst=mx + r, wait=load_signal if r == 0 else None))
    for r in range(n):
        out.append(vec(VecOp.FSUB, a=r * wpr, b=mx + r, b_form=VecB.SCALAR, count=wpr, dst=r * wpr))
    out.append(vec(VecOp.EXP, a=0, count=words, dst=0))
    for r in range(n):
        out.append(reduce(ReduceOp.FSUM, src=r * wpr, count=wpr, dst=sm + r))
    out.append(vec(VecOp.RECIP, a=sm, count=n, dst=sm))
    for r in range(n):
        out.append(vec(VecOp.FMUL, a=r * wpr, b=sm + r, b_form=VecB.SCALAR, count=wpr, dst=r * wpr,
                       signal=done_signal if r == n - 1 else None))
    return out


def softmax_compute_cycles(cfg, rows: int, wpr: int) -> int:
    """The units' busy cycles if nothing waited: per row two REDUCEs and two VECs of ``wpr``
    words, plus the chunk-wide EXP and RECIP (each command's fixed pipeline cycles included)."""
    red = cfg.reduce_busy_cycles(wpr)
    return rows * (2 * red + 2 * (wpr + 2) + (wpr + 1) + 1) + 4


async def softmax(dev: KernelDevice, x: np.ndarray, *, mitigations: Mitigations,
                  budget_cycles: int | None = None) -> tuple[np.ndarray, KernelStats]:
    """Softmax of every row of an fp32 matrix on the chip; returns ``(fp32 (R, C), stats)``.

    Non-finite inputs follow the arithmetic: a +Inf in a row makes the row NaN (Inf - Inf), a
    row of -Inf only is NaN (0 * Inf); -Inf entries elsewhere give 0.
    """
    x = check_matrix("x", x, (np.float32,), "fp32 logits, shape (R, C)")
    cfg = dev.config
    if not cfg.vector:
        raise ValueError("softmax needs the vector unit; this chip was built with vector=False")
    lanes, depth = cfg.lanes, cfg.acc_depth
    rows, cols = x.shape
    w = row_words(x, lanes, NEG_INF)
    wpr = w.shape[1]
    per_chunk = min(rows, depth // (wpr + 2), MAX_COUNT // max(wpr, 1))
    if per_chunk < 1:
        raise ValueError(f"a row of {cols} values ({wpr} words) and its two scratch words do not fit the "
                         f"accumulator SRAM ({depth} words); at most {(depth - 2) * lanes} values per row")
    out = np.zeros_like(w)
    host = {"commands": 0, "chunks": 0, "bytes_staged": 0}
    async with Measure(dev, "softmax", rows * wpr, {"shape": [rows, cols], "host": host},
                       compulsory_bytes=8 * rows * cols, useful_macs=0,
                       compute_cycles=softmax_compute_cycles(cfg, rows, wpr)) as meas:
        for r0 in range(0, rows, per_chunk):
            n = min(per_chunk, rows - r0)
            words = np.ascontiguousarray(w[r0:r0 + n]).reshape(-1, lanes)
            await dev.wait_idle(budget_cycles)
            dev.dram.reset()
            src = dev.dram.alloc(words.nbytes, "rows")
            dst = dev.dram.alloc(words.nbytes, "result")
            dev.dram_write(src, words.astype("<u4"))
            host["bytes_staged"] += words.nbytes
            cmds = [dma_load(Region.ACC, sram=0, dram=src.addr, words=n * wpr, signal=SEM["AUX"])]
            cmds += softmax_stream(n, wpr, SEM["AUX"], SEM["AUX_FREE"])
            cmds.append(dma_store(sram=0, dram=dst.addr, words=n * wpr, wait=SEM["AUX_FREE"]))
            host["commands"] += len(cmds)
            host["chunks"] += 1
            await dev.submit(cmds, budget_cycles)
            await dev.wait_idle(budget_cycles)
            out[r0:r0 + n] = dev.dram_read(dst).view("<u4").reshape(n, wpr, lanes)
        await dev.check_no_error()
    meas.stats.add_errata(mitigations.report(SOFTMAX_UNITS))
    return out.reshape(rows, -1)[:, :cols].copy().view(np.float32), meas.stats
