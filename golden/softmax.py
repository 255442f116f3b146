"""Kernel goldens of softmax, LayerNorm and RMSNorm on the vector unit: the same operations in
the same order as the kernels (kernels/softmax.py, kernels/norms.py), from golden/vector.py's
bit-exact elementwise ops and fp32 row reductions, plus float64 references of the mathematics.

A row of C values sits in ceil(C / LANES) accumulator words; the padding lanes hold the value
that leaves every reduction unchanged (-Inf for the softmax row max, whose exp is then 0).
"""

from __future__ import annotations

import numpy as np

from .vector import floats, reduce_words, row_words, vector_op

__all__ = ["softmax_rows", "softmax_reference"]

NEG_INF = 0xFF800000


def softmax_rows(x: np.ndarray, lanes: int) -> np.ndarray:
    """Row softmax as the kernel computes it: m = FMAX over the row (tree, then word by word);
    y = x - m; e = exp(y) (golden/special.py's algorithm); l = FSUM of e; r = recip(l);
    out = e * r. A row of -Inf only gives NaN (0 * Inf), as -Inf - (-Inf) does."""
    w = row_words(np.asarray(x, np.float32), lanes, NEG_INF)
    m = reduce_words("fmax", w)  # (R,)
    e = vector_op("exp", vector_op("fsub", w, m[:, None, None]))
    inv = vector_op("recip", reduce_words("fsum", e))
    out = vector_op("fmul", e, inv[:, None, None])
    return floats(out.reshape(len(x), -1)[:, :x.shape[1]]).copy()


def softmax_reference(x: np.ndarray) -> np.ndarray:
    """The mathematics, in float64."""
    x = np.asarray(x, np.float64)
    z = np.exp(x - x.max(axis=1, keepdims=True))
    return z / z.sum(axis=1, keepdims=True)
