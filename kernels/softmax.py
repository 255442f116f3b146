"""Row softmax on the reduction and vector units: ``softmax(dev, x)`` -> fp32 (R, C).

Per chunk of rows (as many as the accumulator SRAM holds with two scratch words each), one DMA
brings the rows in (row-major words, the padding lanes -Inf; kernels/acc_pass.py), then for every row REDUCE FMAX
into its max word, VEC FSUB with that max as a scalar, one VEC EXP over the whole chunk,
REDUCE FSUM per row, one VEC RECIP over the chunk's sums, VEC FMUL with the row's reciprocal,
and one DMA out. golden/softmax.py's ``softmax_rows`` is the same sequence in numpy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from golden.softmax import NEG_INF
from golden.vector import row_words
from rtl.isa import MAX_COUNT, ReduceOp, VecB, VecOp, reduce, vec
from workarounds import Mitigations, Unit

from .acc_pass import acc_pass, chunked_busy_cycles
from .stats import KernelStats, Measure
from .validate import check_matrix, require_vector

if TYPE_CHECKING:
    from cosim.device import KernelDevice

__all__ = ["softmax", "softmax_stream"]

SOFTMAX_UNITS = (Unit.REDUCE, Unit.CMDPROC, Unit.DMA, Unit.VECTOR)


def softmax_stream(n: int, wpr: int) -> list[int]:
    """The commands of one chunk of ``n`` rows of ``wpr`` words at ACC word 0 (kernels/acc_pass.py
    adds the DMAs and their semaphores). Scratch: the max words at ``n * wpr``, the sums (then
    reciprocals) after them."""
    words = n * wpr
    mx, sm = words, words + n
    out = []
    for r in range(n):
        out.append(reduce(ReduceOp.FMAX, src=r * wpr, count=wpr, dst=mx + r))
    for r in range(n):
        out.append(vec(VecOp.FSUB, a=r * wpr, b=mx + r, b_form=VecB.SCALAR, count=wpr, dst=r * wpr))
    out.append(vec(VecOp.EXP, a=0, count=words, dst=0))
    for r in range(n):
        out.append(reduce(ReduceOp.FSUM, src=r * wpr, count=wpr, dst=sm + r))
    out.append(vec(VecOp.RECIP, a=sm, count=n, dst=sm))
    for r in range(n):
        out.append(vec(VecOp.FMUL, a=r * wpr, b=sm + r, b_form=VecB.SCALAR, count=wpr, dst=r * wpr))
    return out


async def softmax(dev: KernelDevice, x: np.ndarray, *, mitigations: Mitigations,
                  budget_cycles: int | None = None) -> tuple[np.ndarray, KernelStats]:
    """Softmax of every row of an fp32 matrix on the chip; returns ``(fp32 (R, C), stats)``.

    Non-finite inputs follow the arithmetic: a +Inf in a row makes the row NaN (Inf - Inf), a
    row of -Inf only is NaN (0 * Inf); -Inf entries elsewhere give 0.
    """
    x = check_matrix("x", x, (np.float32,), "fp32 logits, shape (R, C)")
    cfg = dev.config
    require_vector(cfg, "softmax")
    lanes, depth = cfg.lanes, cfg.acc_depth
    rows, cols = x.shape
    w = row_words(x, lanes, NEG_INF)
    wpr = w.shape[1]
    per_chunk = min(rows, depth // (wpr + 2), MAX_COUNT // max(wpr, 1))
    if per_chunk < 1:
        raise ValueError(f"a row of {cols} values ({wpr} words) and its two scratch words do not fit the "
                         f"accumulator SRAM ({depth} words); at most {(depth - 2) * lanes} values per row")
    out = np.zeros_like(w)
    host: dict = {}
    async with Measure(dev, "softmax", rows * wpr, {"shape": [rows, cols], "host": host},
                       compulsory_bytes=8 * rows * cols, useful_macs=0,
                       vector_cycles=_vector_cycles(cfg, rows, wpr, per_chunk)) as meas:
        for r0 in range(0, rows, per_chunk):
            n = min(per_chunk, rows - r0)
            words = np.ascontiguousarray(w[r0:r0 + n]).reshape(-1, lanes)
            got = await acc_pass(dev, words, softmax_stream(n, wpr), n * wpr, host, budget_cycles)
            out[r0:r0 + n] = got.reshape(n, wpr, lanes)
        await dev.check_no_error()
    meas.stats.add_errata(mitigations.report(SOFTMAX_UNITS))
    return out.reshape(rows, -1)[:, :cols].copy().view(np.float32), meas.stats


def _vector_cycles(cfg, rows: int, wpr: int, per_chunk: int) -> int:
    """The units' busy cycles over all chunks (the vector roof)."""
    return chunked_busy_cycles(cfg, rows, per_chunk, lambda n: softmax_stream(n, wpr))
