"""Reference for the vector unit's elementwise operations, from the spec in docs/numerics.md.

Values travel as fp32 (or int32) *bit patterns* in ``uint32`` arrays, as they sit in the
accumulator SRAM. Arithmetic is numpy float32, which is IEEE binary32 with round to nearest
even and subnormals (numpy does not flush), so it is an implementation independent of the RTL;
what IEEE leaves open is pinned down here the way the chip documents it:

* every NaN result is the canonical quiet NaN ``0x7FC00000`` (numpy would keep a payload);
* ``fmax`` / ``fmin`` are IEEE 754-2019 ``maximum`` / ``minimum``: NaN if either input is NaN,
  and +0 is above -0 (numpy's ``maximum`` returns whichever zero comes first);
* ``relu(x)`` is ``x`` for x > 0 or x = +0 and +0 for every negative x and for -0; NaN stays NaN;
* ``i2f`` converts an int32 to the nearest fp32, ties to even;
* ``exp``, ``recip`` and ``rsqrt`` are golden/special.py's fixed-point algorithms (not numpy's).

``b`` broadcasts against ``a`` the numpy way: the vector unit's per-word (``vec``), per-lane
(one word for every word: ``lane``) and scalar (``scalar``) forms are all one call here.
"""

from __future__ import annotations

import numpy as np

from .special import exp_bits, recip_bits, rsqrt_bits

__all__ = ["VEC_OPS", "UNARY_OPS", "to_int8", "fold_words", "FP_REDUCE_OPS", "FP_REDUCE_IDENTITY", "reduce_words", "CANONICAL_NAN", "vector_op", "bits", "floats", "row_words"]

CANONICAL_NAN = 0x7FC00000
VEC_OPS = ("fadd", "fsub", "fmul", "fmax", "fmin", "i2f", "relu", "exp", "recip", "rsqrt", "deq", "expsub")
UNARY_OPS = ("i2f", "relu", "exp", "recip", "rsqrt")


def bits(x) -> np.ndarray:
    """fp32 values as their uint32 bit patterns."""
    return np.ascontiguousarray(np.asarray(x, np.float32)).view(np.uint32)


def row_words(x: np.ndarray, lanes: int, pad: int) -> np.ndarray:
    """(R, C) 32-bit values (fp32 or int32) -> (R, W, LANES) bit patterns, the way rows lie in
    the accumulator SRAM: ``ceil(C / LANES)`` words a row, padded with the bit pattern ``pad``."""
    x = np.ascontiguousarray(x)
    if x.dtype not in (np.float32, np.int32, np.uint32):
        x = x.astype(np.float32)
    r, c = x.shape
    w = -(-c // lanes)
    out = np.full((r, w * lanes), pad, np.uint32)
    out[:, :c] = x.view(np.uint32)
    return out.reshape(r, w, lanes)


def floats(b) -> np.ndarray:
    """uint32 bit patterns as fp32 values."""
    return np.ascontiguousarray(np.asarray(b, np.uint32)).view(np.float32)


def _canon(r: np.ndarray) -> np.ndarray:
    out = bits(r).copy()
    out[np.isnan(r)] = CANONICAL_NAN
    return out


def _order(x: np.ndarray) -> np.ndarray:
    """int64 keys that order non-NaN fp32 bit patterns as the reals (-0 == +0)."""
    x = x.astype(np.int64)
    mag = x & 0x7FFFFFFF
    return np.where(x >> 31 != 0, -mag, mag)


def _pick(a: np.ndarray, b: np.ndarray, larger: bool) -> np.ndarray:
    ka, kb = _order(a), _order(b)
    a_wins = ka > kb if larger else ka < kb
    b_wins = kb > ka if larger else kb < ka
    a_neg = (a >> 31) != 0
    tie = np.where(a_neg != larger, a, b)  # maximum of +-0 is +0, minimum -0
    out = np.where(a_wins, a, np.where(b_wins, b, tie)).astype(np.uint32)
    nan = np.isnan(floats(a)) | np.isnan(floats(b))
    out[nan] = CANONICAL_NAN
    return out


def vector_op(op: str, a, b=None) -> np.ndarray:
    """``op`` over fp32 bit patterns ``a`` (and ``b``, broadcast against ``a``); uint32 result
    of ``a``'s shape. ``i2f`` reads ``a`` as int32; the unary ops ignore ``b``."""
    if op not in VEC_OPS:
        raise ValueError(f"unknown vector op {op!r}; known: {', '.join(VEC_OPS)}")
    a = np.asarray(a, np.uint32)
    if op == "i2f":
        return bits(a.view(np.int32).astype(np.float32))  # numpy converts with ties to even
    if op in ("exp", "recip", "rsqrt"):  # golden/special.py: the documented fixed-point algorithms
        return {"exp": exp_bits, "recip": recip_bits, "rsqrt": rsqrt_bits}[op](a)
    if op == "relu":
        out = np.where((a >> 31) != 0, np.uint32(0), a).astype(np.uint32)
        out[np.isnan(floats(a))] = CANONICAL_NAN
        return out
    if b is None:
        raise ValueError(f"vector op {op!r} takes a second operand b")
    if op == "deq":  # the two steps, each rounded
        return vector_op("fmul", vector_op("i2f", a), b)
    if op == "expsub":
        return vector_op("exp", vector_op("fsub", a, b))
    b = np.broadcast_to(np.asarray(b, np.uint32), a.shape)
    if op in ("fmax", "fmin"):
        return _pick(a, np.ascontiguousarray(b), op == "fmax")
    fa, fb = floats(a), floats(np.ascontiguousarray(b))
    with np.errstate(all="ignore"):
        r = {"fadd": np.add, "fsub": np.subtract, "fmul": np.multiply}[op](fa, fb, dtype=np.float32)
    return _canon(r)


def to_int8(a, scale) -> np.ndarray:
    """The CVT_I8 conversion: int8 of the fp32 product a * scale (RNE, as fmul), rounded to the
    nearest integer with ties to even, saturated to [-128, 127]; NaN gives 0."""
    p = floats(vector_op("fmul", a, scale))
    with np.errstate(invalid="ignore"):
        q = np.clip(np.rint(p), -128, 127)
    return np.where(np.isnan(q), 0, q).astype(np.int8)


def fold_words(op: str, words) -> np.ndarray:
    """VEC with b FOLD: ``words`` (n, LANES) folded lane by lane, left to right, with ``op``."""
    w = np.asarray(words, np.uint32)
    acc = w[0].copy()
    for i in range(1, len(w)):
        acc = vector_op(op, acc, w[i])
    return acc


FP_REDUCE_OPS = ("fsum", "fmax")
FP_REDUCE_IDENTITY = {"fsum": 0x00000000, "fmax": 0xFF800000}  # +0 and -Inf


def reduce_words(op: str, words) -> np.ndarray:
    """fp32 reduction of each row of accumulator words ``(R, W, LANES)`` (bit patterns) to one
    value per row, in the reduction unit's order: within a word a pairwise tree (lane 0 with 1,
    2 with 3, then the pairs, ...), then word by word from the first (``total = total + word``).
    ``fsum`` adds with RNE; ``fmax`` is IEEE maximum (NaN if any input is NaN)."""
    if op not in FP_REDUCE_OPS:
        raise ValueError(f"unknown fp32 reduction {op!r}; known: {', '.join(FP_REDUCE_OPS)}")
    w = np.asarray(words, np.uint32)
    if w.ndim != 3 or w.shape[2] & (w.shape[2] - 1):
        raise ValueError(f"words must have shape (rows, words, lanes) with lanes a power of two, got {w.shape}")
    combine = (lambda x, y: vector_op("fadd", x, y)) if op == "fsum" else (lambda x, y: vector_op("fmax", x, y))
    level = w
    while level.shape[2] > 1:
        level = combine(np.ascontiguousarray(level[:, :, 0::2]), np.ascontiguousarray(level[:, :, 1::2]))
    per_word = level[:, :, 0]
    total = per_word[:, 0].copy()
    for j in range(1, per_word.shape[1]):
        total = combine(total, np.ascontiguousarray(per_word[:, j]))
    return total
