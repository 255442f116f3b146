"""Tests for ``golden/mx.py`` (the FP8/FP4 MX matrix-engine golden), from docs/numerics.md.

Expected values never come from the code under test. They are one of:

* hand-computed literals (bit patterns worked out in the comments);
* ``ml_dtypes`` decodes of element codes (an independent implementation of the formats);
* exact ``fractions.Fraction`` arithmetic rounded by :func:`ref_rne32_bits`, a rounding
  reference written differently from the golden (it searches the binade with Fraction
  comparisons and rounds ``floor`` + remainder, where the golden uses ``bit_length`` and a
  unified bit formula);
* numpy float32 arithmetic (IEEE RNE with subnormals, checked in :func:`test_numpy_fp32_sanity`),
  used only where it rounds exactly once.

Random tests use ``numpy.random.default_rng(seed)`` with the seed in the test id and in every
assertion message together with the command that re-runs that case, or hypothesis (which prints
the falsifying example and a ``@reproduce_failure`` blob).
"""

from __future__ import annotations

import math
import re
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from golden import mx
from golden.mx import (
    FORMATS,
    block_sum,
    decode,
    element_parts,
    fp32_add_bits,
    ideal_matmul,
    mx_matmul,
    mx_matmul_bits,
    round_to_fp32_bits,
)

PROPERTY = settings(max_examples=1000, deadline=None, print_blob=True)

NAN32 = 0x7FC00000
INF32 = 0x7F800000
NINF32 = 0xFF800000
MAX32 = 0x7F7FFFFF
NEG0 = 0x80000000

ML_DTYPES = {
    "e4m3": ml_dtypes.float8_e4m3fn,
    "e5m2": ml_dtypes.float8_e5m2,
    "e2m1": ml_dtypes.float4_e2m1fn,
}
# Exponent of the integer unit of a product, 2 - 2B - 2M, worked out by hand from the table.
UNIT_EXP = {"e4m3": 2 - 14 - 6, "e5m2": 2 - 30 - 4, "e2m1": 2 - 2 - 2}
FMTS = ["e4m3", "e5m2", "e2m1"]

# A few e4m3 codes (s.eeee.mmm, bias 7): 1.0 = 0.0111.000, 256 = 0.1111.000, 448 = 0.1111.110.
E4M3_ONE, E4M3_256, E4M3_448, E4M3_NEG448 = 0x38, 0x78, 0x7E, 0xFE
E4M3_2M4 = 0x18  # 2^-4 = 0.0011.000
E4M3_MINSUB, E4M3_NEG_MINSUB = 0x01, 0x81  # +-2^-9


def repro(test: str, seed: int | None = None) -> str:
    sel = f"{test}[{seed}]" if seed is not None else test
    return (f"seed={seed}; reproduce: cd /work/main && python -m pytest "
            f"'tests/test_golden_mx.py::{sel}' -q")


# ==========================================================================
# Independent references
# ==========================================================================


def pow2(k: int) -> Fraction:
    return Fraction(2**k) if k >= 0 else Fraction(1, 2**-k)


def f32_bits(x: float) -> int:
    """Bit pattern of np.float32(x) for a float64 x (one RNE rounding)."""
    with np.errstate(over="ignore"):
        return int(np.array([x], dtype=np.float64).astype(np.float32).view(np.uint32)[0])


def ref_rne32_bits(q: Fraction) -> int:
    """binary32 RNE of an exact rational; +0 for an exact zero, sign kept on underflow."""
    if q == 0:
        return 0
    neg = q < 0
    a = -q if neg else q
    e = a.numerator.bit_length() - a.denominator.bit_length()
    while pow2(e) > a:
        e -= 1
    while pow2(e + 1) <= a:
        e += 1
    qe = max(e - 23, -149)  # quantum exponent: 24 significant bits or the subnormal step
    scaled = a / pow2(qe)
    fl = math.floor(scaled)
    frac = scaled - fl
    if frac > Fraction(1, 2) or (frac == Fraction(1, 2) and fl % 2 == 1):
        fl += 1
    val = fl * pow2(qe)
    if val >= pow2(128):
        bits = INF32
    else:
        bits = f32_bits(float(val))  # val has <= 24 significant bits: float64 and fp32 exact
        assert Fraction(float(np.array([bits], np.uint32).view(np.float32)[0])) == val
    return bits | (NEG0 if neg else 0)


def ref_decode(codes: np.ndarray, fmt: str) -> np.ndarray:
    c = codes & 0x0F if fmt == "e2m1" else codes
    return c.view(ML_DTYPES[fmt]).astype(np.float64)


def finite_codes(rng: np.random.Generator, shape: tuple[int, ...], fmt: str) -> np.ndarray:
    """Random uint8 codes that decode (per ml_dtypes) to finite values."""
    pool = np.arange(256, dtype=np.uint8)
    pool = pool[np.isfinite(ref_decode(pool, fmt))]
    return rng.choice(pool, size=shape).astype(np.uint8)


def f32_add_ref(x: int, y: int) -> int:
    with np.errstate(all="ignore"):
        r = np.array([x], np.uint32).view(np.float32) + np.array([y], np.uint32).view(np.float32)
    return NAN32 if np.isnan(r[0]) else int(r.view(np.uint32)[0])


def ref_matmul_bits(a: np.ndarray, b: np.ndarray, sa: np.ndarray, sb: np.ndarray, fmt: str,
                    chunks: list[int] | None = None) -> np.ndarray:
    """Second implementation of the spec: Fractions of ml_dtypes values + numpy float32 adds.

    Specials are found with float64 products (IEEE: inf*0 = nan, signs of inf products).
    """
    av, bv = ref_decode(a, fmt), ref_decode(b, fmt)
    M, K = a.shape
    N = b.shape[1]
    chunks = chunks or [K]
    out = np.zeros((M, N), np.uint32)
    for i in range(M):
        for j in range(N):
            C = None
            k_start = 0
            for clen in chunks:
                acc = None
                k = k_start
                while k < k_start + clen:
                    k_end = min(k + 32, k_start + clen)
                    g = k // 32
                    with np.errstate(invalid="ignore"):
                        prods = av[i, k:k_end] * bv[k:k_end, j]
                    if sa[i, g] == 0xFF or sb[g, j] == 0xFF or np.isnan(prods).any() or (
                            np.isposinf(prods).any() and np.isneginf(prods).any()):
                        r = np.float32(np.nan)
                    elif np.isinf(prods).any():
                        r = np.float32(prods[np.isinf(prods)][0])
                    else:
                        q = sum((Fraction(float(x)) * Fraction(float(y))
                                 for x, y in zip(av[i, k:k_end], bv[k:k_end, j])), Fraction(0))
                        q *= pow2(int(sa[i, g]) - 127) * pow2(int(sb[g, j]) - 127)
                        r = np.array([ref_rne32_bits(q)], np.uint32).view(np.float32)[0]
                    with np.errstate(all="ignore"):
                        acc = r if acc is None else np.float32(acc + r)
                    k = k_end
                with np.errstate(all="ignore"):
                    C = acc if C is None else np.float32(C + acc)
                k_start += clen
            bits = int(np.array([C], np.float32).view(np.uint32)[0])
            out[i, j] = NAN32 if np.isnan(C) else bits
    return out


def hexs(x: np.ndarray) -> str:
    return np.array2string(np.asarray(x), formatter={"int": lambda v: f"{int(v):#010x}"})


# ==========================================================================
# environment sanity: numpy float32 is an IEEE RNE reference here
# ==========================================================================


def test_numpy_fp32_sanity() -> None:
    one_sub = np.array([1], np.uint32).view(np.float32)
    assert (one_sub + one_sub).view(np.uint32)[0] == 2  # no flush-to-zero / DAZ
    # 1 + 2^-24 is a tie -> even (1.0); 1 + 3*2^-24 -> 1 + 2^-22
    assert np.float32(1) + np.float32(2.0**-24) == np.float32(1)
    assert np.float32(1) + np.float32(3 * 2.0**-24) == np.float32(1 + 2.0**-22)


# ==========================================================================
# formats and decoding
# ==========================================================================


def test_formats_table() -> None:
    assert {k: (f.ebits, f.mbits, f.bias, f.has_inf, f.has_nan, f.max)
            for k, f in FORMATS.items()} == {
        "e4m3": (4, 3, 7, False, True, 448.0),
        "e5m2": (5, 2, 15, True, True, 57344.0),
        "e2m1": (2, 1, 1, False, False, 6.0),
    }
    with pytest.raises(AttributeError):
        FORMATS["e4m3"].bias = 8  # type: ignore[misc]


@pytest.mark.parametrize("fmt", FMTS)
def test_decode_all_codes_vs_ml_dtypes(fmt: str) -> None:
    codes = np.arange(256, dtype=np.uint8)
    got = decode(codes, fmt)
    ref = ref_decode(codes, fmt)
    assert got.dtype == np.float64 and got.shape == (256,)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(ref))
    ok = ~np.isnan(ref)
    np.testing.assert_array_equal(got[ok], ref[ok])
    np.testing.assert_array_equal(np.signbit(got[ok]), np.signbit(ref[ok]))  # -0 codes
    assert np.nanmax(got[np.isfinite(got)]) == FORMATS[fmt].max


def test_decode_specials_and_shape() -> None:
    e4 = decode(np.array([[0x7F, 0xFF], [0x7E, 0xFE]], np.uint8), "e4m3")
    assert e4.shape == (2, 2)
    assert np.isnan(e4[0]).all() and list(e4[1]) == [448.0, -448.0]
    e5 = decode(np.array([0x7C, 0xFC, 0x7D, 0x7F, 0x7B, 0x01], np.uint8), "e5m2")
    assert e5[0] == np.inf and e5[1] == -np.inf and np.isnan(e5[2:4]).all()
    assert e5[4] == 57344.0 and e5[5] == 2.0**-16
    # e2m1: high nibble ignored (ml_dtypes would read 0xF7 as -6).
    assert list(decode(np.array([0xF7, 0x07, 0x81, 0x0F], np.uint8), "e2m1")) == [6, 6, 0.5, -6]


@pytest.mark.parametrize("fmt", FMTS)
def test_element_parts_all_codes(fmt: str) -> None:
    f = FORMATS[fmt]
    ref = ref_decode(np.arange(256, dtype=np.uint8), fmt)
    for code in range(256):
        s, sig, ee, kind = element_parts(code, fmt)
        v = ref[code]
        assert kind == ("nan" if np.isnan(v) else "inf" if np.isinf(v) else "finite"), code
        assert 1 <= ee < 2**f.ebits and 0 <= sig < 2 ** (f.mbits + 1), code
        if kind == "finite":
            assert Fraction((-1) ** s * sig) * pow2(ee - f.bias - f.mbits) == Fraction(v), code
        assert s == int(np.signbit(v)) or kind == "nan", code
    # ee = max(e, 1), sig has the implicit bit only for e != 0 (subnormal 2^-9 and min normal)
    assert element_parts(0x01, "e4m3") == (0, 1, 1, "finite")
    assert element_parts(0x08, "e4m3") == (0, 8, 1, "finite")
    assert element_parts(0x80, "e4m3") == (1, 0, 1, "finite")


@pytest.mark.parametrize(
    ("call", "exc", "msg"),
    [
        (lambda: decode(np.zeros(3, np.int8), "e4m3"), TypeError, "dtype uint8"),
        (lambda: decode([1, 2], "e4m3"), TypeError, "uint8 numpy.ndarray"),
        (lambda: decode(np.zeros(3, np.uint8), "e3m2"), ValueError, "unknown element format"),
        (lambda: element_parts(256, "e4m3"), ValueError, "[0, 255]"),
        (lambda: element_parts(1.0, "e4m3"), TypeError, "code must be an int"),
    ],
)
def test_decode_errors(call, exc, msg) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(exc, match=re.escape(msg)):
        call()


# ==========================================================================
# round_to_fp32_bits
# ==========================================================================


@pytest.mark.parametrize(
    ("S", "exp2", "bits"),
    [
        (0, 0, 0x00000000),
        (0, -500, 0x00000000),
        (1, 0, 0x3F800000),
        (-3, 1, 0xC0C00000),
        # ties to even: 2^24 + 1 -> 2^24 (down), 2^24 + 3 -> 2^24 + 4 (up)
        (2**24 + 1, 0, 0x4B800000),
        (2**24 + 3, 0, 0x4B800002),
        (-(2**24 + 1), 0, 0xCB800000),
        (-(2**24 + 3), 0, 0xCB800002),
        (2**25 + 2, 0, 0x4C000000),
        (2**25 + 6, 0, 0x4C000002),
        # just off the tie
        (2**25 + 3, 0, 0x4C000001),
        (2**26 + 5, 0, 0x4C800001),  # quantum 4: 5 > 2 -> up
        # subnormals: 2^-149 is code 1; half of it ties to 0 (even); just above rounds up
        (1, -149, 0x00000001),
        (1, -150, 0x00000000),
        (2**40 + 1, -190, 0x00000001),
        (3, -151, 0x00000001),
        (3, -150, 0x00000002),  # 1.5 ulp -> 2 (even)
        (5, -151, 0x00000001),  # 1.25 ulp -> 1
        (2**23 - 1, -149, 0x007FFFFF),  # largest subnormal
        (2**24 - 1, -150, 0x00800000),  # (2^23 - 1/2) ulp ties up to min normal 2^-126
        (1, -126, 0x00800000),
        (1, -127, 0x00400000),
        # largest finite and the overflow threshold 2^128 * (1 - 2^-25) = (2^25 - 1) * 2^103
        (2**24 - 1, 104, 0x7F7FFFFF),
        (2**25 - 1, 103, INF32),
        (-(2**25 - 1), 103, NINF32),
        (2**26 - 3, 102, 0x7F7FFFFF),  # threshold - 2^102
        ((2**25 - 1) * 2**300 - 1, 103 - 300, 0x7F7FFFFF),
        ((2**25 - 1) * 2**300 + 1, 103 - 300, INF32),
        (1, 128, INF32),
        (1, 127, 0x7F000000),
        # huge S, negative exponent: 1 + exactly half an ulp is a tie (even -> 1.0); one more
        # unit rounds up. float(S) would round to the tie first (double rounding -> 1.0).
        (2**200, -200, 0x3F800000),
        (2**200 + 2**176, -200, 0x3F800000),
        (2**200 + 2**176 + 1, -200, 0x3F800001),
        (-(2**200 + 3 * 2**176), -200, 0xBF800002),
        # a nonzero value that rounds to zero keeps its sign (the spec makes only an *exact*
        # zero +0; IEEE RNE underflow of a negative value is -0)
        (-1, -150, NEG0),
        (-1, -400, NEG0),
    ],
)
def test_round_to_fp32_bits_cases(S: int, exp2: int, bits: int) -> None:
    got = round_to_fp32_bits(S, exp2)
    assert got == bits, f"S={S} exp2={exp2}: got {got:#010x}, want {bits:#010x}"
    assert got == ref_rne32_bits(S * pow2(exp2))  # the Fraction reference agrees


def test_round_double_rounding_trap_is_real() -> None:
    # The case above really is a trap: going through float64 gives a different answer.
    S = 2**200 + 2**176 + 1
    assert f32_bits(float(S) * 2.0**-200) == 0x3F800000
    assert round_to_fp32_bits(S, -200) == 0x3F800001


@PROPERTY
@given(S=st.integers(-(2**90), 2**90), exp2=st.integers(-330, 160))
@example(S=2**24 + 1, exp2=-150)
@example(S=-(2**25 - 1), exp2=103)
def test_round_to_fp32_bits_vs_fraction(S: int, exp2: int) -> None:
    assert round_to_fp32_bits(S, exp2) == ref_rne32_bits(S * pow2(exp2))


@PROPERTY
@given(S=st.integers(-(2**53), 2**53), exp2=st.integers(-220, 120))
def test_round_to_fp32_bits_vs_numpy(S: int, exp2: int) -> None:
    # |S| <= 2^53 and 2^exp2 >= 2^-220: S * 2^exp2 is exact in float64, so np.float32 rounds once.
    want = f32_bits(math.ldexp(float(S), exp2))
    if S == 0:
        want = 0
    assert round_to_fp32_bits(S, exp2) == want


def test_round_errors() -> None:
    with pytest.raises(TypeError, match="S must be an int"):
        round_to_fp32_bits(1.0, 0)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="exp2 must be an int"):
        round_to_fp32_bits(1, 0.5)  # type: ignore[arg-type]


# ==========================================================================
# fp32_add_bits
# ==========================================================================


def _interesting_bits(rng: np.random.Generator, n: int) -> np.ndarray:
    u = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)
    kind = rng.integers(0, 6, n)
    sign = (rng.integers(0, 2, n).astype(np.uint32) << 31).astype(np.uint32)
    frac = u & 0x7FFFFF
    u = np.where(kind == 1, sign | frac, u)  # subnormals / zeros
    u = np.where(kind == 2, sign | 0x7F800000, u)  # infinities
    u = np.where(kind == 3, sign | 0x7F800000 | np.maximum(frac, 1), u)  # NaNs with payloads
    u = np.where(kind == 4, sign | (rng.integers(120, 135, n).astype(np.uint32) << 23) | frac, u)
    u = np.where(kind == 5, sign | (rng.integers(250, 255, n).astype(np.uint32) << 23) | frac, u)
    return u.astype(np.uint32)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_fp32_add_bits_vs_numpy(seed: int) -> None:
    rng = np.random.default_rng(seed)
    x = _interesting_bits(rng, 4000)
    y = _interesting_bits(rng, 4000)
    # near-cancellation: y = -x with a perturbed last bits, and exact negation
    y[:500] = (x[:500] ^ 0x80000000) + rng.integers(0, 3, 500).astype(np.uint32)
    y[500:700] = x[500:700] ^ 0x80000000
    for xi, yi in zip(x.tolist(), y.tolist()):
        got = fp32_add_bits(xi, yi)
        want = f32_add_ref(xi, yi)
        assert got == want, (f"{xi:#010x} + {yi:#010x}: got {got:#010x} want {want:#010x}; "
                             + repro("test_fp32_add_bits_vs_numpy", seed))


@pytest.mark.parametrize(
    ("x", "y", "z"),
    [
        (0x00000000, 0x00000000, 0x00000000),
        (NEG0, NEG0, NEG0),  # -0 + -0 = -0
        (0x00000000, NEG0, 0x00000000),
        (NEG0, 0x00000000, 0x00000000),
        (0x3F800000, 0xBF800000, 0x00000000),  # x + (-x) = +0
        (0xBF800000, 0x3F800000, 0x00000000),
        (0x00000001, 0x80000001, 0x00000000),
        (0xFF7FFFFF, 0x7F7FFFFF, 0x00000000),
        (NEG0, 0xC0000000, 0xC0000000),  # -0 + x = x
        (NEG0, 0x00000005, 0x00000005),
        (0x00000001, 0x00000001, 0x00000002),  # subnormal, no flush
        (0x007FFFFF, 0x00000001, 0x00800000),  # into the normal range
        (INF32, NINF32, NAN32),
        (NINF32, INF32, NAN32),
        (INF32, 0xFF7FFFFF, INF32),
        (NINF32, NINF32, NINF32),
        (0xFFC00001, 0x3F800000, NAN32),  # NaN payload/sign -> canonical
        (0x3F800000, 0x7F800001, NAN32),
        (MAX32, MAX32, INF32),
        (0xFF7FFFFF, 0xFF7FFFFF, NINF32),
        (MAX32, 0x73000000, INF32),  # max + 2^103: tie, max is odd -> rounds up to Inf
        (MAX32, 0x72FFFFFF, MAX32),  # a bit less: stays max
        (0x4B800000, 0x3F800000, 0x4B800000),  # 2^24 + 1 -> 2^24 (tie to even)
        (0x4B800001, 0x3F800000, 0x4B800002),  # (2^24 + 2) + 1 -> 2^24 + 4 (tie to even)
    ],
)
def test_fp32_add_bits_cases(x: int, y: int, z: int) -> None:
    assert fp32_add_bits(x, y) == z
    assert f32_add_ref(x, y) == z  # the literal agrees with numpy, too


def test_fp32_add_errors() -> None:
    with pytest.raises(ValueError, match=re.escape("[0, 0xFFFFFFFF]")):
        fp32_add_bits(-1, 0)
    with pytest.raises(ValueError, match="y must be a 32-bit pattern"):
        fp32_add_bits(0, 2**32)
    with pytest.raises(TypeError, match="x must be an int"):
        fp32_add_bits(1.0, 0)  # type: ignore[arg-type]


# ==========================================================================
# block_sum
# ==========================================================================


@pytest.mark.parametrize("fmt", FMTS)
@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_block_sum_vs_fraction(fmt: str, seed: int) -> None:
    rng = np.random.default_rng(seed)
    for trial in range(25):
        n = int(rng.integers(1, 33))
        a = finite_codes(rng, (n,), fmt)
        b = finite_codes(rng, (n,), fmt)
        S, special = block_sum(a, b, fmt)
        exact = sum((Fraction(float(x)) * Fraction(float(y))
                     for x, y in zip(ref_decode(a, fmt), ref_decode(b, fmt))), Fraction(0))
        assert special is None
        assert isinstance(S, int)
        assert S * pow2(UNIT_EXP[fmt]) == exact, (
            f"trial {trial}: a={a.tolist()} b={b.tolist()}; "
            + repro("test_block_sum_vs_fraction", f"{seed}-{fmt}"))


def test_block_sum_widest_case() -> None:
    # 32 products of the largest e5m2 value: 57344^2 * 32 = 7^2 * 2^58 * 32 units of 2^-32
    a = np.full(32, 0x7B, np.uint8)
    S, sp = block_sum(a, a, "e5m2")
    assert sp is None and S == 49 * 2**63 and S.bit_length() == 69
    S, sp = block_sum(a, a ^ 0x80, "e5m2")
    assert sp is None and S == -49 * 2**63


@pytest.mark.parametrize(
    ("fmt", "a", "b", "special"),
    [
        ("e4m3", [0x7F, 0x38], [0x00, 0x38], "nan"),  # NaN times zero is NaN
        ("e4m3", [0x38, 0x38], [0xFF, 0x38], "nan"),  # negative-sign NaN code
        ("e4m3", [0x7E], [0x7E], None),  # 448 is finite
        ("e5m2", [0x7C, 0x3C], [0x00, 0x3C], "nan"),  # Inf * 0
        ("e5m2", [0x7C, 0x3C], [0x80, 0x3C], "nan"),  # Inf * -0
        ("e5m2", [0x7C], [0x3C], "+inf"),
        ("e5m2", [0xFC], [0x3C], "-inf"),
        ("e5m2", [0xFC], [0xBC], "+inf"),
        ("e5m2", [0x7C], [0x01], "+inf"),  # Inf * smallest subnormal
        ("e5m2", [0x7C, 0x7C], [0x7C, 0xFC], "nan"),  # Inf*Inf = +Inf and Inf*-Inf = -Inf
        ("e5m2", [0x7C, 0xFC], [0x3C, 0x3C], "nan"),  # +Inf and -Inf in one block
        ("e5m2", [0x7C, 0x7C], [0x3C, 0x7C], "+inf"),  # two +Inf
        ("e5m2", [0x7D, 0x3C], [0x3C, 0x3C], "nan"),  # NaN code
        ("e5m2", [0x7C, 0x7E], [0x3C, 0x3C], "nan"),  # NaN beats Inf
        ("e5m2", [0x7B, 0x7C], [0x7B, 0x3C], "+inf"),  # finite max plus Inf
        ("e2m1", [0x07, 0xFF], [0x07, 0x0F], None),  # e2m1 has no specials
    ],
)
def test_block_sum_specials(fmt: str, a: list[int], b: list[int], special: str | None) -> None:
    S, sp = block_sum(np.array(a, np.uint8), np.array(b, np.uint8), fmt)
    assert sp == special
    if special is None:
        exact = sum((Fraction(float(x)) * Fraction(float(y)) for x, y in
                     zip(ref_decode(np.array(a, np.uint8), fmt),
                         ref_decode(np.array(b, np.uint8), fmt))), Fraction(0))
        assert S * pow2(UNIT_EXP[fmt]) == exact
    else:
        assert S == 0


def test_block_sum_errors() -> None:
    z = np.zeros(4, np.uint8)
    with pytest.raises(ValueError, match="same length"):
        block_sum(z, np.zeros(5, np.uint8), "e4m3")
    with pytest.raises(ValueError, match="1..32 K steps"):
        block_sum(np.zeros(33, np.uint8), np.zeros(33, np.uint8), "e4m3")
    with pytest.raises(ValueError, match="must be 1-D"):
        block_sum(np.zeros((2, 2), np.uint8), z, "e4m3")
    with pytest.raises(TypeError, match="dtype uint8"):
        block_sum(z.astype(np.int16), z, "e4m3")


# ==========================================================================
# mx_matmul_bits
# ==========================================================================


def unit_scales(M: int, K: int, N: int) -> tuple[np.ndarray, np.ndarray]:
    nblk = -(-K // 32)
    return np.full((M, nblk), 127, np.uint8), np.full((nblk, N), 127, np.uint8)


@pytest.mark.parametrize("fmt", FMTS)
@pytest.mark.parametrize("seed", [10, 11])
def test_matmul_unit_scales_vs_reference(fmt: str, seed: int) -> None:
    rng = np.random.default_rng(seed)
    M, K, N = 4, 200, 3  # 7 blocks, the last one short (8 steps)
    a = finite_codes(rng, (M, K), fmt)
    b = finite_codes(rng, (K, N), fmt)
    sa, sb = unit_scales(M, K, N)
    got = mx_matmul_bits(a, b, sa, sb, fmt)
    want = ref_matmul_bits(a, b, sa, sb, fmt)
    assert got.dtype == np.uint32 and got.shape == (M, N)
    assert np.array_equal(got, want), (
        f"\ngot  {hexs(got)}\nwant {hexs(want)}\n"
        + repro("test_matmul_unit_scales_vs_reference", f"{seed}-{fmt}"))


@pytest.mark.parametrize("fmt", FMTS)
@pytest.mark.parametrize("seed", [20, 21])
def test_matmul_random_scales_chunks_specials_vs_reference(fmt: str, seed: int) -> None:
    rng = np.random.default_rng(seed)
    M, K, N = 3, 136, 4
    chunks = [64, 32, 40]
    a = finite_codes(rng, (M, K), fmt)
    b = finite_codes(rng, (K, N), fmt)
    if fmt != "e2m1":  # sprinkle NaN / Inf codes (where the format has them)
        for arr in (a, b):
            mask = rng.random(arr.shape) < 0.004
            arr[mask] = rng.choice([0x7F, 0xFF] if fmt == "e4m3" else [0x7C, 0xFC, 0x7E],
                                   size=int(mask.sum()))
    nblk = -(-K // 32)
    # spread of exponents that exercises subnormal results and overflow
    sa = rng.integers(0, 255, (M, nblk)).astype(np.uint8)
    sb = rng.integers(0, 255, (nblk, N)).astype(np.uint8)
    sa[rng.random(sa.shape) < 0.5] = 127
    sb[rng.random(sb.shape) < 0.05] = 0xFF
    got = mx_matmul_bits(a, b, sa, sb, fmt, chunks=chunks)
    want = ref_matmul_bits(a, b, sa, sb, fmt, chunks)
    assert np.array_equal(got, want), (
        f"\ngot  {hexs(got)}\nwant {hexs(want)}\n"
        + repro("test_matmul_random_scales_chunks_specials_vs_reference", f"{seed}-{fmt}"))


@pytest.mark.parametrize("fmt", ["e4m3", "e5m2"])
@pytest.mark.parametrize("seed", [30, 31])
def test_matmul_single_block_matches_block_sum(fmt: str, seed: int) -> None:
    # With one block per output and unit scales, C = RNE32(block value) or the special value.
    rng = np.random.default_rng(seed)
    M, K, N = 5, 17, 6
    a = rng.integers(0, 256, (M, K)).astype(np.uint8)
    b = rng.integers(0, 256, (K, N)).astype(np.uint8)
    a[rng.random(a.shape) < 0.2] = 0  # zeros, for Inf * 0
    sa, sb = unit_scales(M, K, N)
    got = mx_matmul_bits(a, b, sa, sb, fmt)
    for i in range(M):
        for j in range(N):
            S, sp = block_sum(a[i], b[:, j], fmt)
            want = {"nan": NAN32, "+inf": INF32, "-inf": NINF32}.get(
                sp, ref_rne32_bits(S * pow2(UNIT_EXP[fmt])))
            assert got[i, j] == want, f"({i},{j}) " + repro(
                "test_matmul_single_block_matches_block_sum", f"{seed}-{fmt}")


def _order_case(K: int = 96) -> tuple[np.ndarray, ...]:
    """Three blocks with r_0 = 2^24, r_1 = 1, r_2 = 1 (e4m3, M = N = 1)."""
    a = np.zeros((1, K), np.uint8)
    b = np.zeros((K, 1), np.uint8)
    for k in (0, 32, 64):
        a[0, k] = b[k, 0] = E4M3_ONE
    sa, sb = unit_scales(1, K, 1)
    sa[0, 0] = 127 + 24  # block 0 value 1 * 1 * 2^24
    return a, b, sa, sb


def test_matmul_accumulation_order_matters() -> None:
    a, b, sa, sb = _order_case()
    got = int(mx_matmul_bits(a, b, sa, sb, "e4m3")[0, 0])
    # spec order: (2^24 (+) 1) = 2^24 (tie to even), (+) 1 = 2^24
    assert got == 0x4B800000
    # other plausible orders give 2^24 + 2 (0x4B800001): they are really different
    r = [0x4B800000, 0x3F800000, 0x3F800000]
    assert f32_add_ref(r[0], f32_add_ref(r[1], r[2])) == 0x4B800001  # right-to-left
    assert ref_rne32_bits(Fraction(2**24 + 2)) == 0x4B800001  # exact sum, rounded once
    assert got == ref_matmul_bits(a, b, sa, sb, "e4m3")[0, 0]


def test_matmul_block_sum_is_exact_inside_a_block() -> None:
    # The same three values inside ONE block are summed exactly: 2^24 + 2.
    # Block scale 2^8: 256*256*2^8 = 2^24 and (2^-4 * 2^-4) * 2^8 = 1 (twice).
    a = np.zeros((1, 32), np.uint8)
    b = np.zeros((32, 1), np.uint8)
    a[0, 0] = b[0, 0] = E4M3_256
    a[0, 5] = b[5, 0] = a[0, 9] = b[9, 0] = E4M3_2M4
    sa, sb = unit_scales(1, 32, 1)
    sa[0, 0] = 127 + 8
    assert mx_matmul_bits(a, b, sa, sb, "e4m3")[0, 0] == 0x4B800001


def test_matmul_chunks_change_the_order() -> None:
    a, b, sa, sb = _order_case()
    # [64, 32]: C = (2^24 (+) 1) (+) 1 = 2^24, same association as one MATMUL
    assert mx_matmul_bits(a, b, sa, sb, "e4m3", chunks=[64, 32])[0, 0] == 0x4B800000
    # [32, 64]: C = 2^24 (+) (1 (+) 1) = 2^24 + 2
    assert mx_matmul_bits(a, b, sa, sb, "e4m3", chunks=[32, 64])[0, 0] == 0x4B800001
    assert mx_matmul_bits(a, b, sa, sb, "e4m3", chunks=[32, 32, 32])[0, 0] == 0x4B800000


@pytest.mark.parametrize("seed", [40, 41, 42])
def test_matmul_chunks_accumulate_semantics(seed: int) -> None:
    rng = np.random.default_rng(seed)
    for fmt, K, chunks in (("e4m3", 96, [64, 32]), ("e5m2", 72, [32, 40]),
                           ("e2m1", 52, [32, 20])):
        M, N = 3, 5
        a = finite_codes(rng, (M, K), fmt)
        b = finite_codes(rng, (K, N), fmt)
        nblk = -(-K // 32)
        sa = rng.integers(110, 145, (M, nblk)).astype(np.uint8)
        sb = rng.integers(110, 145, (nblk, N)).astype(np.uint8)
        got = mx_matmul_bits(a, b, sa, sb, fmt, chunks=chunks)
        c0, k0 = chunks[0], chunks[0] // 32
        C0 = mx_matmul_bits(a[:, :c0], b[:c0], sa[:, :k0], sb[:k0], fmt)
        C1 = mx_matmul_bits(a[:, c0:], b[c0:], sa[:, k0:], sb[k0:], fmt)
        want = np.array([[fp32_add_bits(int(C0[i, j]), int(C1[i, j])) for j in range(N)]
                         for i in range(M)], np.uint32)
        msg = f"{fmt} chunks={chunks}; " + repro("test_matmul_chunks_accumulate_semantics", seed)
        assert np.array_equal(got, want), msg
        # the numpy float32 add agrees (C_old first)
        with np.errstate(all="ignore"):
            alt = (C0.view(np.float32) + C1.view(np.float32)).view(np.uint32)
        assert np.array_equal(np.where(np.isnan(alt.view(np.float32)), NAN32, alt), want), msg


@pytest.mark.parametrize("seed", [50, 51])
def test_matmul_scale_exponents(seed: int) -> None:
    rng = np.random.default_rng(seed)
    M, K, N = 4, 96, 4
    a = finite_codes(rng, (M, K), "e4m3")
    b = finite_codes(rng, (K, N), "e4m3")
    sa, sb = unit_scales(M, K, N)
    base = mx_matmul(a, b, sa, sb, "e4m3")
    msg = repro("test_matmul_scale_exponents", seed)
    # values are multiples of 2^-18 below 2^28: no subnormal / overflow after x2 or /2
    sa2 = sa.copy()
    sa2[1, :] += 1  # row 1 doubles
    sb2 = sb.copy()
    sb2[:, 2] -= 1  # column 2 halves
    got = mx_matmul(a, b, sa2, sb2, "e4m3")
    want = base.copy()
    want[1, :] *= 2
    want[:, 2] /= 2
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), msg
    # xa + 3 and xb - 3 cancel: X is an integer sum
    sa3, sb3 = sa.copy(), sb.copy()
    sa3 += 3
    sb3 -= 3
    assert np.array_equal(mx_matmul_bits(a, b, sa3, sb3, "e4m3"), base.view(np.uint32)), msg
    # scale 0xFF -> the row / column is NaN (canonical), others unchanged
    saN = sa.copy()
    saN[2, 1] = 0xFF
    sbN = sb.copy()
    sbN[2, 3] = 0xFF
    got = mx_matmul_bits(a, b, saN, sbN, "e4m3")
    want = base.view(np.uint32).copy()
    want[2, :] = NAN32
    want[:, 3] = NAN32
    assert np.array_equal(got, want), msg


def test_matmul_scale_extremes() -> None:
    a = np.array([[E4M3_ONE]], np.uint8)
    b = np.array([[E4M3_ONE]], np.uint8)
    nb = np.array([[E4M3_ONE ^ 0x80]], np.uint8)
    s = lambda x: np.array([[x]], np.uint8)  # noqa: E731
    assert mx_matmul_bits(a, b, s(0), s(127), "e4m3")[0, 0] == 0x00400000  # 2^-127 subnormal
    assert mx_matmul_bits(a, b, s(0), s(105), "e4m3")[0, 0] == 0x00000001  # 2^-149
    assert mx_matmul_bits(a, b, s(0), s(104), "e4m3")[0, 0] == 0x00000000  # 2^-150 tie -> 0
    assert mx_matmul_bits(a, nb, s(0), s(0), "e4m3")[0, 0] == NEG0  # underflow keeps sign
    assert mx_matmul_bits(a, b, s(254), s(254), "e4m3")[0, 0] == INF32  # 2^254
    assert mx_matmul_bits(a, b, s(254), s(127), "e4m3")[0, 0] == 0x7F000000  # 2^127
    zero = np.array([[0]], np.uint8)
    assert mx_matmul_bits(zero, nb, s(254), s(254), "e4m3")[0, 0] == 0  # exact zero: +0
    assert mx_matmul_bits(zero, b, s(0xFF), s(127), "e4m3")[0, 0] == NAN32


def test_matmul_specials_propagate() -> None:
    # e5m2, K = 64 (two blocks), M = 1, N = 4; 1.0 = 0x3C, +Inf = 0x7C, -Inf = 0xFC
    a = np.full((1, 64), 0x3C, np.uint8)
    b = np.full((64, 4), 0x3C, np.uint8)
    b[3, 0] = 0x7C  # column 0: +Inf in block 0 -> +Inf
    b[3, 1] = 0x7C
    b[40, 1] = 0xFC  # column 1: +Inf (block 0) + -Inf (block 1) -> NaN by fp32 add
    b[3, 2] = 0x7F  # column 2: NaN code (any sign/payload) -> canonical NaN
    b[40, 3] = 0xFC  # column 3: -Inf in block 1
    sa, sb = unit_scales(1, 64, 4)
    got = mx_matmul_bits(a, b, sa, sb, "e5m2")
    assert got.tolist() == [[INF32, NAN32, NAN32, NINF32]]
    a2 = a.copy()
    a2[0, 7] = 0x00  # 0 * Inf in column 0's block -> NaN
    b2 = b.copy()
    b2[7, 0] = 0x7C
    assert mx_matmul_bits(a2, b2, sa, sb, "e5m2")[0, 0] == NAN32
    assert np.array_equal(got, ref_matmul_bits(a, b, sa, sb, "e5m2"))


def test_matmul_max_operands_overflow() -> None:
    a = np.full((1, 32), E4M3_448, np.uint8)
    b = np.full((32, 2), E4M3_448, np.uint8)
    b[:, 1] = E4M3_NEG448
    sa = np.array([[127]], np.uint8)
    sb = np.array([[127, 127]], np.uint8)
    # 448 * 448 * 32 = 6422528 = 1.53125 * 2^22, exact in fp32
    assert mx_matmul_bits(a, b, sa, sb, "e4m3").tolist() == [[f32_bits(6422528.0),
                                                              f32_bits(-6422528.0)]]
    # X = 105: 1.53125 * 2^127 is finite; X = 106: 1.53125 * 2^128 overflows
    sa[0, 0] = 127 + 105
    assert mx_matmul_bits(a, b, sa, sb, "e4m3").tolist() == [[0x7F440000, 0xFF440000]]
    sa[0, 0] = 127 + 106
    assert mx_matmul_bits(a, b, sa, sb, "e4m3").tolist() == [[INF32, NINF32]]
    sa[0, 0] = 127 + 10
    sb[0, 0] = 127 - 31  # X = 10 - 31 = -21 -> 1.53125 * 2^1
    assert mx_matmul_bits(a, b, sa, sb, "e4m3")[0, 0] == f32_bits(3.0625)


def _threshold_block(extra: int | None) -> tuple[np.ndarray, ...]:
    """e4m3 block whose exact value is (2^25 - 1) * 2^-8 (+- 2^-18 with ``extra``).

    Terms 15 * 2^k for k = -8, -4, 0, 4, 8, 12 (a = 15 * 2^(ea - 10), code ea.111; b = 2^(eb - 7),
    code eb.000) sum to 2^16 - 2^-8; plus 256 * 256 = 2^16.
    """
    pairs = [(2, 7), (6, 7), (10, 7), (14, 7), (14, 11), (14, 15)]
    a = np.zeros((1, 32), np.uint8)
    b = np.zeros((32, 1), np.uint8)
    for k, (ea, eb) in enumerate(pairs):
        a[0, k] = (ea << 3) | 7
        b[k, 0] = eb << 3
    a[0, 6] = b[6, 0] = E4M3_256
    if extra is not None:  # +-2^-9 * 2^-9 = +-2^-18
        a[0, 7] = E4M3_MINSUB if extra > 0 else E4M3_NEG_MINSUB
        b[7, 0] = E4M3_MINSUB
    return a, b


@pytest.mark.parametrize(
    ("extra", "bits"),
    [(None, INF32), (-1, MAX32), (+1, INF32)],
    ids=["at-threshold", "just-below", "just-above"],
)
def test_matmul_overflow_threshold_exact(extra: int | None, bits: int) -> None:
    a, b = _threshold_block(extra)
    S, sp = block_sum(a[0], b[:, 0], "e4m3")
    delta = 0 if extra is None else extra
    assert sp is None and S * pow2(-18) == (2**25 - 1) * pow2(-8) + delta * pow2(-18)
    # X = 111: value = (2^25 - 1) * 2^103 = 2^128 * (1 - 2^-25), the spec's threshold
    sa = np.array([[127 + 111]], np.uint8)
    sb = np.array([[127]], np.uint8)
    assert mx_matmul_bits(a, b, sa, sb, "e4m3")[0, 0] == bits
    assert ref_matmul_bits(a, b, sa, sb, "e4m3")[0, 0] == bits
    # and negated
    an = a ^ np.where(a != 0, 0x80, 0).astype(np.uint8)
    assert mx_matmul_bits(an, b, sa, sb, "e4m3")[0, 0] == bits | NEG0


@pytest.mark.parametrize("seed", [60, 61])
def test_matmul_long_k_deterministic(seed: int) -> None:
    rng = np.random.default_rng(seed)
    M, K, N = 4, 1024, 4
    sa = rng.integers(100, 150, (M, K // 32)).astype(np.uint8)
    sb = rng.integers(100, 150, (K // 32, N)).astype(np.uint8)
    msg = repro("test_matmul_long_k_deterministic", seed)
    for fmt, chunks in (("e4m3", [512, 512]), ("e5m2", [K]), ("e2m1", [512, 256, 256])):
        a = finite_codes(rng, (M, K), fmt)
        b = finite_codes(rng, (K, N), fmt)
        r1 = mx_matmul_bits(a, b, sa, sb, fmt, chunks=chunks)
        r2 = mx_matmul_bits(a.copy(), b.copy(), sa.copy(), sb.copy(), fmt, chunks=chunks)
        assert r1.dtype == np.uint32 and r1.shape == (M, N), msg
        assert np.array_equal(r1, r2), msg
        assert np.array_equal(r1, ref_matmul_bits(a, b, sa, sb, fmt, chunks)), f"{fmt}: {msg}"
    # full random codes (NaN / Inf included): runs, and every NaN written is canonical
    a = rng.integers(0, 256, (M, K)).astype(np.uint8)
    b = rng.integers(0, 256, (K, N)).astype(np.uint8)
    for fmt in ("e4m3", "e5m2"):
        r = mx_matmul_bits(a, b, sa, sb, fmt)
        assert (~np.isnan(r.view(np.float32)) | (r == NAN32)).all(), msg


def test_matmul_speed_8x8x256() -> None:
    import time

    rng = np.random.default_rng(70)
    a = finite_codes(rng, (8, 256), "e5m2")
    b = finite_codes(rng, (256, 8), "e5m2")
    sa, sb = unit_scales(8, 256, 8)
    t = time.perf_counter()
    mx_matmul_bits(a, b, sa, sb, "e5m2")
    assert time.perf_counter() - t < 1.0


def test_mx_matmul_float_view_and_ideal() -> None:
    rng = np.random.default_rng(80)
    a = finite_codes(rng, (3, 64), "e4m3")
    b = finite_codes(rng, (64, 2), "e4m3")
    sa, sb = unit_scales(3, 64, 2)
    f = mx_matmul(a, b, sa, sb, "e4m3")
    assert f.dtype == np.float32
    assert np.array_equal(f.view(np.uint32), mx_matmul_bits(a, b, sa, sb, "e4m3"))
    av, bv = ref_decode(a, "e4m3"), ref_decode(b, "e4m3")
    ideal = ideal_matmul(av, bv)
    assert ideal.dtype == np.float64
    np.testing.assert_allclose(f, ideal, rtol=1e-6, atol=1e-6)
    assert ideal_matmul([[1, 2]], [[3], [4]]).tolist() == [[11.0]]
    with pytest.raises(ValueError, match="inner dimensions differ"):
        ideal_matmul(np.ones((2, 3)), np.ones((2, 3)))


def _ok_args(K: int = 64) -> dict:
    return dict(a_codes=np.zeros((2, K), np.uint8), b_codes=np.zeros((K, 3), np.uint8),
                a_scales=np.zeros((2, -(-K // 32)), np.uint8),
                b_scales=np.zeros((-(-K // 32), 3), np.uint8), fmt="e4m3")


@pytest.mark.parametrize(
    ("change", "exc", "msg"),
    [
        (dict(fmt="int8"), ValueError, "unknown element format 'int8'"),
        (dict(a_codes=np.zeros((2, 64), np.int8)), TypeError, "a_codes must have dtype uint8"),
        (dict(b_codes=np.zeros((63, 3), np.uint8)), ValueError, "inner dimensions differ"),
        (dict(a_scales=np.zeros((2, 3), np.uint8)), ValueError,
         "a_scales must have shape (M, ceil(K/32)) = (2, 2)"),
        (dict(b_scales=np.zeros((2, 2), np.uint8)), ValueError,
         "b_scales must have shape (ceil(K/32), N) = (2, 3)"),
        (dict(chunks=[40, 24]), ValueError, "chunks[0] = 40 is not a multiple of 32"),
        (dict(chunks=[32, 16]), ValueError, "sum to 48 but K = 64"),
        (dict(chunks=[64, 0]), ValueError, "chunks[1] must be a positive int"),
        (dict(chunks=[]), TypeError, "non-empty list"),
        (dict(a_codes=np.zeros(64, np.uint8)), ValueError, "a_codes must be 2-D"),
    ],
)
def test_matmul_errors(change: dict, exc: type, msg: str) -> None:
    kw = _ok_args()
    kw.update(change)
    with pytest.raises(exc, match=re.escape(msg)):
        mx_matmul_bits(kw.pop("a_codes"), kw.pop("b_codes"), kw.pop("a_scales"),
                       kw.pop("b_scales"), kw.pop("fmt"), **kw)


def test_module_surface() -> None:
    assert set(mx.__all__) >= {"FORMATS", "decode", "element_parts", "block_sum",
                               "round_to_fp32_bits", "fp32_add_bits", "mx_matmul_bits",
                               "mx_matmul", "ideal_matmul"}
    for name in mx.__all__:
        assert getattr(mx, name) is not None
