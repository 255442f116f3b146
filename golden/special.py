"""Bit-exact references of the vector unit's special functions: the integer / fixed-point
algorithms of docs/numerics.md ("Special functions"), step for step, vectorised in numpy uint64.

Every multiply here is at most 32 x 32 bits (or 24 x 32), so it is exact in uint64; every shift
right truncates. Nothing goes through float32 ``np.exp`` (which is not correctly rounded) or
float64: the RTL computes the same integers and must agree bit for bit. :func:`ulp_error`
measures an implementation against float64, the way libm is measured.
"""

from __future__ import annotations

import numpy as np

__all__ = ["exp_bits", "EXP_TABLE", "EXP_CONSTANTS", "ulp_error", "EXP_RANGE", "SPECIAL_FUNCTIONS", "domain_chunks",
           "measure_chunk", "merge"]

CANONICAL_NAN = 0x7FC00000
POS_INF = 0x7F800000
U64 = np.uint64
MASK32 = (1 << 32) - 1

# log2(e) in two parts: LOG2E_HI * 2**-31 + LOG2E_LO * 2**-63 (the low part keeps |x| * log2(e)
# exact to 2**-32 at |x| near 128, where one 32-bit constant would be off by 2**-25); ln 2 and
# 1/3 in Q.32. Made from exact decimal expansions (below), not from floats.


def _exact_constants():
    """The constants from exact decimal expansions (Python ints; no float rounding)."""
    from fractions import Fraction

    # log2(e) and ln(2) to 60 digits
    log2e = Fraction("1.44269504088896340735992468100189213742664595415298593413544940693")
    ln2 = Fraction("0.693147180559945309417232121458176568075500134360255254120680009493")
    hi = int(log2e * 2**31)
    lo = round((log2e * 2**31 - hi) * 2**32)
    return hi, lo, round(ln2 * 2**32), round(Fraction(2**32, 3))


LOG2E_HI, LOG2E_LO, LN2_Q32, ONE_THIRD_Q32 = _exact_constants()


def _exp_table() -> tuple[int, ...]:
    """T[i] = round(2**(i/64) * 2**31), i = 0..63, computed exactly with integer roots."""
    from math import isqrt

    out = []
    for i in range(64):
        # 2**(i/64) * 2**31 = (2**(i + 64*31))**(1/64): the 64th root by six square roots of a
        # scaled integer, carrying 40 guard bits
        v = 2 ** (i + 64 * 31) << (64 * 40)
        for _ in range(6):
            v = isqrt(v)
        q, r = divmod(v, 1 << 40)
        out.append(q + (1 if r >= (1 << 39) else 0))
    return tuple(out)


EXP_TABLE = _exp_table()
EXP_CONSTANTS = {"LOG2E_HI": LOG2E_HI, "LOG2E_LO": LOG2E_LO, "LN2_Q32": LN2_Q32, "ONE_THIRD_Q32": ONE_THIRD_Q32}
# inputs whose results are normal fp32 numbers: below, exp flushes to +0; above, it is +Inf
EXP_RANGE = (-87.33654, 88.72283)


def exp_bits(x) -> np.ndarray:
    """exp of fp32 bit patterns (uint32 array) -> fp32 bit patterns, by the documented algorithm."""
    x = np.asarray(x, np.uint32).astype(U64)
    sign = x >> U64(31)
    e = (x >> U64(23)) & U64(0xFF)
    frac = x & U64(0x7FFFFF)
    nan = (e == 255) & (frac != 0)
    # 1. |x| * log2(e) in fixed point with 32 fraction bits (Y), from the 24-bit significand m
    #    (subnormal x: m without the hidden bit, the same weight as e = 1)
    m = np.where(e == 0, frac, frac | U64(1 << 23))
    big = e >= 134  # |x| >= 128: +Inf or +0 outright
    # |x| = m * 2**(E - 150) with E = max(e, 1), so Y = (m * LOG2E_HI) >> (149 - E) (a shift of 16
    # or more below |x| = 128), plus the low part's (m * LOG2E_LO) >> (181 - E)
    s = U64(149) - np.minimum(np.maximum(e, U64(1)), U64(133))
    p_hi = m * U64(LOG2E_HI)
    p_lo = m * U64(LOG2E_LO)
    y = _shr(p_hi, s) + _shr(p_lo, s + U64(32))
    # 2. y_signed = +-y: n = floor, f = fraction (32 bits)
    neg = sign == 1
    n = np.where(neg, -((y + U64(MASK32)) >> U64(32)).astype(np.int64), (y >> U64(32)).astype(np.int64))
    f = np.where(neg, (U64(0) - y) & U64(MASK32), y & U64(MASK32))
    # 3. 2**f = T[f >> 26] * 2**r, r = low 26 bits (< 2**-6), 2**r by a cubic in u = r * ln 2
    i = (f >> U64(26)).astype(np.int64)
    r = f & U64((1 << 26) - 1)
    u = (r * U64(LN2_Q32)) >> U64(32)
    u2 = (u * u) >> U64(33)  # u**2 / 2
    u3 = (((u2 * u) >> U64(32)) * U64(ONE_THIRD_Q32)) >> U64(32)  # u**3 / 6
    p = (U64(1 << 32) + u + u2 + u3) >> U64(1)  # Q.31
    t = np.array(EXP_TABLE, dtype=U64)[i]
    mant = t * p  # Q.62, in [1, 2) (or a hair above: normalised below)
    # 4. round to 24 significant bits, nearest even; exponent n
    top = (mant >> U64(63)) != 0
    shift = np.where(top, U64(40), U64(39))
    n = n + top.astype(np.int64)
    q = mant >> shift
    rem = mant & ((U64(1) << shift) - U64(1))
    half = U64(1) << (shift - U64(1))
    q = q + ((rem > half) | ((rem == half) & ((q & U64(1)) == 1))).astype(U64)
    carry = q >> U64(24)  # rounding up to 2**24
    n = n + carry.astype(np.int64)
    q = np.where(carry != 0, q >> U64(1), q)
    biased = n + 127
    out = ((biased.clip(0, 255).astype(U64)) << U64(23)) | (q & U64(0x7FFFFF))
    out = np.where(biased >= 255, U64(POS_INF), out)
    out = np.where(biased <= 0, U64(0), out)  # results below 2**-126 flush to +0
    out = np.where(big & ~neg, U64(POS_INF), out)
    out = np.where(big & neg, U64(0), out)
    out = np.where(nan, U64(CANONICAL_NAN), out)  # +-Inf are 'big': +Inf -> +Inf, -Inf -> +0
    return out.astype(np.uint32)


def _shr(v: np.ndarray, s: np.ndarray) -> np.ndarray:
    """v >> s with shifts of 64 or more giving 0 (numpy leaves those undefined)."""
    s = np.asarray(s, U64)
    return np.where(s >= U64(64), U64(0), v >> np.minimum(s, U64(63)))


def ulp_error(result_bits: np.ndarray, reference: np.ndarray) -> np.ndarray:
    """|result - reference| in units of the fp32 ulp at the reference (float64 reference values).

    The ulp of a value v is 2**(floor(log2 |v|) - 23), never below 2**-149.
    """
    res = np.asarray(result_bits, np.uint32).view(np.float32).astype(np.float64)
    ref = np.asarray(reference, np.float64)
    mag = np.abs(ref)
    ex = np.floor(np.log2(np.where(mag > 0, mag, 1.0)))
    ulp = np.exp2(np.maximum(ex - 23, -149))
    with np.errstate(invalid="ignore"):
        return np.abs(res - ref) / ulp


# ---- measuring an implementation against float64 (the way libm is measured) --------------------

SPECIAL_FUNCTIONS = {"exp": (exp_bits, np.exp, EXP_RANGE)}  # name -> (bits -> bits, float64 ref, range)
CHUNK = 1 << 22


def domain_chunks(name: str, stride: int = 1) -> list[tuple[int, int, int]]:
    """The fp32 bit patterns of ``name``'s documented range as (first, stop, stride) pieces of
    about CHUNK patterns each (the positive and the negative half separately)."""
    lo, hi = SPECIAL_FUNCTIONS[name][2]
    pieces = []
    halves = []
    if hi >= 0:
        halves.append((0, int(np.float32(hi).view(np.uint32)) + 1))
    if lo < 0:
        halves.append((1 << 31, int(np.float32(lo).view(np.uint32)) + 1))
    for first, stop in halves:
        step = CHUNK * stride
        for a in range(first, stop, step):
            pieces.append((a, min(stop, a + step), stride))
    return pieces


def measure_chunk(name: str, piece: tuple[int, int, int]) -> dict:
    """Max ulp error (and where), count and how many are correctly rounded, over one piece."""
    fn, ref_fn, _ = SPECIAL_FUNCTIONS[name]
    first, stop, stride = piece
    xs = np.arange(first, stop, stride, dtype=np.uint64).astype(np.uint32)
    with np.errstate(over="ignore", under="ignore"):
        ref = ref_fn(xs.view(np.float32).astype(np.float64))
    err = ulp_error(fn(xs), ref)
    i = int(np.argmax(err))
    return {"count": int(len(xs)), "max_ulp": float(err[i]), "worst_x": float(xs.view(np.float32)[i]),
            "worst_bits": int(xs[i]), "over_half": int((err > 0.5).sum())}


def merge(results: list[dict]) -> dict:
    """One summary of measure_chunk results."""
    worst = max(results, key=lambda r: r["max_ulp"])
    count = sum(r["count"] for r in results)
    over = sum(r["over_half"] for r in results)
    return {"count": count, "max_ulp": worst["max_ulp"], "worst_x": worst["worst_x"], "worst_bits": worst["worst_bits"],
            "correctly_rounded": 1 - over / count if count else 1.0}
