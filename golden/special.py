"""Bit-exact references of the vector unit's special functions: the integer / fixed-point
algorithms of docs/numerics.md ("Special functions"), step for step, vectorised in numpy uint64.

Every multiply here is at most 32 x 32 bits (or 24 x 32), so it is exact in uint64; every shift
right truncates. Nothing goes through float32 ``np.exp`` (which is not correctly rounded) or
float64: the RTL computes the same integers and must agree bit for bit. :func:`ulp_error`
measures an implementation against float64, the way libm is measured.
"""

from __future__ import annotations

import numpy as np

__all__ = ["recip_bits", "rsqrt_bits", "RECIP_SEED", "RSQRT_SEED", "RECIP_RANGE", "RSQRT_RANGE", "exp_bits", "EXP_TABLE", "EXP_CONSTANTS", "ulp_error", "EXP_RANGE", "SPECIAL_FUNCTIONS", "domain_chunks",
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
    frac23, off = _round_at(mant, 62)
    biased = n + off + 127
    out = ((biased.clip(0, 255).astype(U64)) << U64(23)) | frac23
    out = np.where(biased >= 255, U64(POS_INF), out)
    out = np.where(biased <= 0, U64(0), out)  # results below 2**-126 flush to +0
    out = np.where(big & ~neg, U64(POS_INF), out)
    out = np.where(big & neg, U64(0), out)
    out = np.where(nan, U64(CANONICAL_NAN), out)  # +-Inf are 'big': +Inf -> +Inf, -Inf -> +0
    return out.astype(np.uint32)



# ---- reciprocal and reciprocal square root: a table seed and two Newton steps -----------------------

def _recip_seed() -> tuple[int, ...]:
    """S[i] = round(2**31 / (1 + (i + 0.5) / 256)): 1/m at the middle of the i-th 256th of [1, 2)."""
    from fractions import Fraction

    return tuple(round(Fraction(2**31) / (1 + Fraction(2 * i + 1, 512))) for i in range(256))


def _rsqrt_seed() -> tuple[int, ...]:
    """R[j], j = (odd exponent, 7 fraction bits): round(2**31 / sqrt(w)) at the middle of the
    j-th piece of w in [1, 2) (even) or [2, 4) (odd), by integer square roots."""
    from math import isqrt

    out = []
    for odd in (0, 1):
        for i in range(128):
            # w = (1 + (i + 0.5)/128) * 2**odd = (256 + 2i + 1) * 2**odd / 256
            num, den = (257 + 2 * i) << odd, 256
            # 2**31 / sqrt(num/den) = sqrt(2**62 * den / num), rounded
            v = isqrt((2**62 * den << 40) // num)  # 20 guard bits
            q, r = divmod(v, 1 << 20)
            out.append(q + (r >= 1 << 19))
    return tuple(out)


RECIP_SEED = _recip_seed()
RSQRT_SEED = _rsqrt_seed()
RECIP_RANGE = (2.0**-126, 2.0**126)  # |v| whose reciprocal is a normal number (measured on positives: sign is exact)
RSQRT_RANGE = (2.0**-126, float(np.finfo(np.float32).max))


def _round_at(x: np.ndarray, point: int) -> tuple[np.ndarray, np.ndarray]:
    """A value x * 2**-point in [1, 4) to (23 fraction bits, exponent offset): offset 0 for
    [1, 2), 1 for [2, 4), +1 more when rounding carries into the next binade. RNE. The one
    rounding every special function ends with (exp at Q.62; recip and rsqrt hold Q.31 in
    [0.5, 2), which is Q.30 in [1, 4), so their offset is one less)."""
    top = x >= U64(1 << (point + 1))
    shift = np.where(top, U64(point - 22), U64(point - 23))
    q = x >> shift
    rem = x & ((U64(1) << shift) - U64(1))
    half = U64(1) << (shift - U64(1))
    q = q + ((rem > half) | ((rem == half) & ((q & U64(1)) == 1))).astype(U64)
    carry = (q >> U64(24)) != 0
    frac = np.where(carry, U64(0), q & U64(0x7FFFFF))
    return frac, top.astype(np.int64) + carry.astype(np.int64)


def recip_bits(v) -> np.ndarray:
    """1/v of fp32 bit patterns: seed from the top 8 fraction bits, two Newton steps
    x' = x * (2 - m * x) in Q.31, one rounding. Subnormal inputs read as zero (+-Inf out);
    results below 2**-126 flush to +-0; 1/+-Inf = +-0; NaN -> canonical NaN."""
    v = np.asarray(v, np.uint32).astype(U64)
    sign = v >> U64(31)
    e = ((v >> U64(23)) & U64(0xFF)).astype(np.int64)
    frac = v & U64(0x7FFFFF)
    mant = frac | U64(1 << 23)  # m = mant * 2**-23 in [1, 2)
    x = np.array(RECIP_SEED, dtype=U64)[(frac >> U64(15)).astype(np.int64)]
    for _ in range(2):
        t = U64(1 << 32) - ((mant * x) >> U64(23))  # 2 - m*x in Q.31
        x = (x * t) >> U64(31)
    f, off = _round_at(x, 30)  # Q.31 in [0.5, 2) is Q.30 in [1, 4)
    biased = 253 - e + off  # 1/v = (1/m) * 2**(127 - e)
    out = (sign << U64(31)) | (biased.clip(0, 255).astype(U64) << U64(23)) | f
    out = np.where(biased <= 0, sign << U64(31), out)
    out = np.where(e == 0, (sign << U64(31)) | U64(POS_INF), out)
    out = np.where(e == 255, np.where(frac != 0, U64(CANONICAL_NAN), sign << U64(31)), out)
    return out.astype(np.uint32)


def rsqrt_bits(v) -> np.ndarray:
    """1/sqrt(v) of fp32 bit patterns: v = w * 2**(2p) with w in [1, 4), seed from (exponent
    parity, top 7 fraction bits), two Newton steps y' = y * (3 - w * y**2) / 2 in Q.31, one
    rounding. Subnormal inputs read as zero; rsqrt(+-0) = +-Inf, of a negative number or NaN
    the canonical NaN, of +Inf +0."""
    v = np.asarray(v, np.uint32).astype(U64)
    sign = v >> U64(31)
    e = ((v >> U64(23)) & U64(0xFF)).astype(np.int64)
    frac = v & U64(0x7FFFFF)
    k = e - 127
    odd = (k & 1).astype(U64)
    w = (frac | U64(1 << 23)) << odd  # w in Q.23: [1, 2) or [2, 4)
    y = np.array(RSQRT_SEED, dtype=U64)[((odd << U64(7)) | (frac >> U64(16))).astype(np.int64)]
    for _ in range(2):
        y2 = (y * y) >> U64(31)
        t = U64(3 << 31) - ((w * y2) >> U64(23))  # 3 - w*y**2 in Q.31
        y = (y * t) >> U64(32)  # and the halving
    f, off = _round_at(y, 30)
    biased = 126 - (k >> 1) + off  # 1/sqrt(v) = w**-0.5 * 2**-p, p = floor(k / 2)
    out = (biased.astype(U64) << U64(23)) | f
    zero = e == 0
    out = np.where(zero, (sign << U64(31)) | U64(POS_INF), out)
    out = np.where(~zero & (sign == 1), U64(CANONICAL_NAN), out)
    out = np.where((e == 255) & (sign == 0), np.where(frac != 0, U64(CANONICAL_NAN), U64(0)), out)
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

def _recip64(x):
    return 1.0 / x


def _rsqrt64(x):
    return 1.0 / np.sqrt(x)


# name -> (bits -> bits, float64 reference, documented range)
SPECIAL_FUNCTIONS = {"exp": (exp_bits, np.exp, EXP_RANGE), "recip": (recip_bits, _recip64, RECIP_RANGE),
                     "rsqrt": (rsqrt_bits, _rsqrt64, RSQRT_RANGE)}
CHUNK = 1 << 22


def domain_chunks(name: str, stride: int = 1) -> list[tuple[int, int, int]]:
    """The fp32 bit patterns of ``name``'s documented range as (first, stop, stride) pieces of
    about CHUNK patterns each (the positive and the negative half separately)."""
    lo, hi = SPECIAL_FUNCTIONS[name][2]
    pieces = []
    halves = []
    if hi >= 0:
        first = int(np.float32(lo).view(np.uint32)) if lo > 0 else 0
        halves.append((first, int(np.float32(hi).view(np.uint32)) + 1))
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
