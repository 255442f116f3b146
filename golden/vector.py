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

__all__ = ["VEC_OPS", "UNARY_OPS", "to_int8", "fold_words", "FP_REDUCE_OPS", "FP_REDUCE_IDENTITY", "reduce_words", "CANONICAL_NAN", "vector_op", "bits", "floats", "row_words", "BROADCASTS", "INT_INPUT_OPS", "INT_RESULT_OPS", "requant", "requant_params", "to_fp8", "FP8_MAX_CODE", "REQUANT_SCALE_RANGE"]

CANONICAL_NAN = 0x7FC00000
VEC_OPS = ("fadd", "fsub", "fmul", "fmax", "fmin", "i2f", "relu", "exp", "recip", "rsqrt", "deq", "expsub", "iadd",
           "requant")
BROADCASTS = ("none", "row", "col")  # b of a's shape, one value per row, one per column
INT_INPUT_OPS = ("i2f", "deq", "iadd", "requant")  # read a as int32
INT_RESULT_OPS = ("iadd", "requant")  # give int32 lanes (requant: int8 values, sign-extended)
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
    if op == "iadd":
        return (a.astype(np.uint64) + np.broadcast_to(np.asarray(b, np.uint32), a.shape)).astype(np.uint32)
    if op == "requant":
        return requant(a.view(np.int32), b).view(np.uint32)
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


REQUANT_SCALE_RANGE = (2.0**-40, 2.0**24)  # scales requant_params encodes: [low, high)


def requant(a, params) -> np.ndarray:
    """REQUANT: int32 ``a`` by parameter words ``params`` (uint32, broadcast against ``a``):
    bits 0-23 mult, 24-29 shift, 31 relu (30 ignored). The exact product a * mult rounded once,
    half away from zero, at ``shift`` bits, then clamped to [-128, 127] ([0, 127] with relu).
    int32 result of ``a``'s shape (the int8 values)."""
    a = np.asarray(a, np.int32).astype(np.int64)
    p = np.broadcast_to(np.asarray(params, np.uint32), a.shape).astype(np.int64)
    mult, shift, relu = p & 0xFFFFFF, (p >> 24) & 63, (p >> 31) & 1
    prod = a * mult  # |prod| < 2**55: exact in int64
    mag = np.abs(prod)
    # floor((mag + 2**(shift-1)) / 2**shift), as the quotient plus the bit below it (2**63 would
    # not fit an int64)
    q = (mag >> shift) + np.where(shift > 0, (mag >> np.maximum(shift - 1, 0)) & 1, 0)
    q = np.where(prod < 0, -q, q)
    return np.clip(q, np.where(relu == 1, 0, -128), 127).astype(np.int32)


def requant_params(scale, relu: bool = False) -> np.ndarray:
    """The REQUANT parameter word of each real scale s > 0: s = mult * 2**-shift with mult the
    nearest integer below 2**24 and shift in 0..63 as large as that allows (24 significant bits
    where s >= 2**-40). Scales outside REQUANT_SCALE_RANGE are refused."""
    s = np.asarray(scale, np.float64)
    lo, hi = REQUANT_SCALE_RANGE
    bad = ~((s >= lo) & (s < hi))
    if bad.any():
        raise ValueError(f"requantization scales must lie in [2**-40, 2**24); got {s[bad].ravel()[:4].tolist()}")
    shift = np.clip(23 - np.floor(np.log2(s)).astype(np.int64), 0, 63)
    mult = np.rint(np.ldexp(s, shift)).astype(np.int64)
    over = mult >= 1 << 24  # rounding reached 2**24: one bit less
    shift = np.where(over & (shift > 0), shift - 1, shift)
    mult = np.where(over, np.rint(np.ldexp(s, shift)).astype(np.int64), mult)
    if (mult >= 1 << 24).any():
        raise ValueError("a requantization scale rounds to 2**24 or more; scales must lie below 2**24")
    return (mult | (shift << 24) | (np.int64(bool(relu)) << 31)).astype(np.uint32)


def to_int8(a, scale) -> np.ndarray:
    """The CVT_I8 conversion: int8 of the fp32 product a * scale (RNE, as fmul), rounded to the
    nearest integer with ties to even, saturated to [-128, 127]; NaN gives 0."""
    p = floats(vector_op("fmul", a, scale))
    with np.errstate(invalid="ignore"):
        q = np.clip(np.rint(p), -128, 127)
    return np.where(np.isnan(q), 0, q).astype(np.int8)


FP8_MAX_CODE = {"e4m3": 0x7E, "e5m2": 0x7B}  # the largest finite magnitude's code
FP8_NAN = 0x7F


def to_fp8(a, scale, fmt: str) -> np.ndarray:
    """The CVT_F8 conversion: FP8 codes (uint8) of the fp32 product a * scale (RNE, as fmul),
    rounded to nearest even in ``fmt`` ("e4m3" or "e5m2", OCP; subnormals kept), saturating at
    the largest finite value (an infinite product too), NaN -> 0x7F with the product's sign.
    The rounding is golden.quant.quantize_elements'."""
    from .quant import quantize_elements

    if fmt not in FP8_MAX_CODE:
        raise ValueError(f"fmt must be 'e4m3' or 'e5m2', got {fmt!r}")
    p = vector_op("fmul", a, scale)
    sign = (p >> 31).astype(np.uint8) << 7
    f = floats(p)
    nan = np.isnan(f)
    finite = np.where(nan, np.float32(0), np.clip(f, np.float32(-3.4e38), np.float32(3.4e38)))  # Inf saturates
    codes = quantize_elements(finite.astype(np.float32), fmt)
    return np.where(nan, np.uint8(FP8_NAN) | sign, codes).astype(np.uint8)


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
