"""Tests for the host-side quantizers in ``golden/quant.py``.

Expected values come from outside the implementation: hand-computed literals, the element
decoding formula of ``docs/numerics.md`` evaluated with Python integers and ``Fraction``
(exact), ``ml_dtypes`` casts from float32 (for in-range values, where they are a correct RNE),
and the published reference points of ``/work/shared/NUMERICS.md``.

Randomised tests use ``numpy.random.default_rng(seed)`` with the seed in the test id and, on
failure, in the message with the command that re-runs that case; the one hypothesis property is
derandomized.
"""

from __future__ import annotations

import bisect
import dataclasses
import math
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from golden.quant import (
    FORMATS,
    RECIPES,
    Recipe,
    decode_elements,
    fp8_per_tensor,
    int8_dequantize,
    int8_symmetric,
    mx_dequantize,
    mx_quantize,
    pad_to_block,
    quantize_elements,
    recipe,
)

SEEDS = [20261130, 7]
SEED_ID = lambda s: f"seed={s}"  # noqa: E731


def repro(nodeid_suffix: str) -> str:
    """The command that re-runs one test case (for assertion messages)."""
    return f"reproduce: python -m pytest 'tests/test_quant.py::{nodeid_suffix}' -q"


# ----------------------------------------------------------------------------------------------
# Independent references, from docs/numerics.md with exact arithmetic
# ----------------------------------------------------------------------------------------------

# name: (E, M, B, max) as in the docs/numerics.md table
SPEC = {"e4m3": (4, 3, 7, 448), "e5m2": (5, 2, 15, 57344), "e2m1": (2, 1, 1, 6)}
EMAX_ELEM = {"e4m3": 8, "e5m2": 15, "e2m1": 2}
M_BITS = {f: SPEC[f][1] for f in SPEC}


def spec_decode(code: int, fmt: str) -> Fraction | float:
    """Value of a code per "Element decoding": ``(-1)^s * sig * 2^(ee - B - M)``."""
    e_bits, m_bits, bias, _ = SPEC[fmt]
    width = 1 + e_bits + m_bits
    code &= (1 << width) - 1
    s = code >> (width - 1)
    e, m = (code >> m_bits) & ((1 << e_bits) - 1), code & ((1 << m_bits) - 1)
    if fmt == "e4m3" and e == 15 and m == 7:
        return math.nan
    if fmt == "e5m2" and e == 31:
        return math.nan if m else (-math.inf if s else math.inf)
    ee = max(e, 1)
    sig = (int(e != 0) << m_bits) | m
    return (-1) ** s * Fraction(sig) * Fraction(2) ** (ee - bias - m_bits)


def _positive_table(fmt: str) -> tuple[list[Fraction], list[int]]:
    e_bits, m_bits, _, _ = SPEC[fmt]
    vals, codes = [], []
    for c in range(1 << (e_bits + m_bits)):
        v = spec_decode(c, fmt)
        if isinstance(v, Fraction):
            vals.append(v)
            codes.append(c)
    return vals, codes  # ascending: positive codes are ordered by value


TABLES = {f: _positive_table(f) for f in SPEC}


def ref_code(v: Fraction, negative: bool, fmt: str) -> int:
    """Saturating RNE of the exact value ``±v`` (v >= 0) to ``fmt``: nearest, ties to even code."""
    vals, codes = TABLES[fmt]
    e_bits, m_bits, _, top = SPEC[fmt]
    v = min(v, Fraction(top))
    hi = bisect.bisect_left(vals, v)
    if vals[hi] == v:
        c = codes[hi]
    else:
        lo = hi - 1
        d_lo, d_hi = v - vals[lo], vals[hi] - v
        if d_lo != d_hi:
            c = codes[lo] if d_lo < d_hi else codes[hi]
        else:
            c = codes[lo] if codes[lo] % 2 == 0 else codes[hi]
    return c | (int(negative) << (e_bits + m_bits))


def ref_codes_f32(x: np.ndarray, fmt: str) -> np.ndarray:
    flat = [ref_code(abs(Fraction(float(v))), bool(np.signbit(v)), fmt) for v in x.reshape(-1)]
    return np.array(flat, dtype=np.uint8).reshape(x.shape)


def ref_floor_log2(v: Fraction) -> int:
    e = v.numerator.bit_length() - v.denominator.bit_length()
    return e - 1 if Fraction(2) ** e > v else e


def ref_shared_exp(amax: float, fmt: str, rule: str) -> int:
    """Block exponent from the rule's definition, in exact rational arithmetic."""
    if amax == 0:
        return 0
    a = Fraction(amax)
    if rule == "floor":
        s = ref_floor_log2(a) - EMAX_ELEM[fmt]
    else:  # smallest s with a / 2^s <= max, i.e. ceil(log2(a / max))
        r = a / SPEC[fmt][3]
        c = ref_floor_log2(r)
        s = c if Fraction(2) ** c == r else c + 1
    return min(max(s, -127), 127)


def sqnr_db(x: np.ndarray, xq: np.ndarray) -> float:
    x = x.astype(np.float64)
    err = x - np.asarray(xq, dtype=np.float64)
    return float(10.0 * np.log10(np.sum(x * x) / np.sum(err * err)))


def f32(*v: float) -> np.ndarray:
    return np.array(v, dtype=np.float32)


def random_f32(rng: np.random.Generator, n: int, lo_exp: int, hi_exp: int) -> np.ndarray:
    """Random float32 with uniformly random 24-bit significands, exponents in [lo, hi)."""
    sig = rng.integers(1 << 23, 1 << 24, size=n).astype(np.float32)
    x = np.ldexp(sig, (rng.integers(lo_exp, hi_exp, size=n) - 23).astype(np.int32))
    return np.where(rng.random(n) < 0.5, -x, x).astype(np.float32)


def grid_points(fmt: str) -> tuple[np.ndarray, np.ndarray]:
    """All positive finite values and all midpoints between neighbours (exact in float32)."""
    vals = TABLES[fmt][0]
    pts = np.array([float(v) for v in vals], dtype=np.float32)
    mids = np.array([float((a + b) / 2) for a, b in zip(vals, vals[1:])], dtype=np.float32)
    assert all(Fraction(float(m)) == (a + b) / 2 for m, a, b in zip(mids, vals, vals[1:]))
    return pts, mids


# ----------------------------------------------------------------------------------------------
# Element formats
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["e4m3", "e5m2", "e2m1"])
def test_decode_elements_matches_spec_formula_for_every_code(fmt: str) -> None:
    width = 1 + SPEC[fmt][0] + SPEC[fmt][1]
    codes = np.arange(1 << width, dtype=np.uint8)
    got = decode_elements(codes, fmt)
    for c in codes.tolist():
        want = spec_decode(c, fmt)
        if isinstance(want, float) and math.isnan(want):
            assert math.isnan(got[c]), f"{fmt} code {c:#x}: expected NaN, got {got[c]}"
        else:
            assert got[c] == want, f"{fmt} code {c:#x}: expected {want}, got {got[c]}"
    if fmt == "e2m1":  # the hardware ignores the high nibble of an FP4 operand byte
        assert np.array_equal(decode_elements(codes | np.uint8(0xA0), fmt), got)


@pytest.mark.parametrize("fmt", ["e4m3", "e5m2", "e2m1"])
@pytest.mark.parametrize("seed", SEEDS, ids=SEED_ID)
def test_quantize_elements_bit_exact_vs_ml_dtypes_and_spec(fmt: str, seed: int) -> None:
    """In-range float32 values, every grid point, every midpoint (ties) and their neighbours."""
    rng = np.random.default_rng(seed)
    _, m_bits, bias, top = SPEC[fmt]
    emax = EMAX_ELEM[fmt]
    pts, mids = grid_points(fmt)
    up, down = np.nextafter(mids, np.float32(np.inf)), np.nextafter(mids, np.float32(0))
    rand = random_f32(rng, 6000, 1 - bias - m_bits - 3, emax + 1)
    x = np.concatenate([pts, -pts, mids, -mids, up, down, -up, rand, f32(-0.0, 1e-40, -1e-40)])
    x = x[np.abs(x) <= top].astype(np.float32)
    got = quantize_elements(x, fmt)
    via_ml = x.astype(FORMATS[fmt].dtype).view(np.uint8)  # correct for in-range float32 input
    spec = ref_codes_f32(x, fmt)
    for name, want in (("ml_dtypes", via_ml), ("spec reference", spec)):
        bad = np.flatnonzero(got != want)
        assert bad.size == 0, (
            f"{fmt} seed={seed}: {bad.size} codes differ from {name}, first x={x[bad[0]]!r} "
            f"got {got[bad[0]]:#x} want {want[bad[0]]:#x}; "
            + repro(f"test_quantize_elements_bit_exact_vs_ml_dtypes_and_spec[seed={seed}-{fmt}]")
        )


@pytest.mark.parametrize(
    ("fmt", "value", "code"),
    [
        ("e4m3", 1.0625, 0x38),  # tie between 1.0 (0x38) and 1.125 (0x39): even
        ("e4m3", 1.1875, 0x3A),  # tie between 1.125 (0x39) and 1.25 (0x3A): even
        ("e4m3", 2.0**-10, 0x00),  # half the smallest subnormal: tie to +0
        ("e4m3", 3 * 2.0**-10, 0x02),  # tie between 2^-9 (0x01) and 2^-8 (0x02)
        ("e5m2", 1.125, 0x3C),  # tie between 1.0 (0x3C) and 1.25 (0x3D)
        ("e5m2", 1.375, 0x3E),
        ("e2m1", 0.25, 0x0),  # tie between 0 and 0.5
        ("e2m1", 0.75, 0x2),  # tie between 0.5 (0x1) and 1.0 (0x2)
        ("e2m1", 2.5, 0x4),  # tie between 2 (0x4) and 3 (0x5)
        ("e2m1", 5.0, 0x6),  # tie between 4 (0x6) and 6 (0x7)
        ("e2m1", -5.0, 0xE),
    ],
)
def test_quantize_elements_ties_to_even(fmt: str, value: float, code: int) -> None:
    assert quantize_elements(f32(value), fmt)[0] == code


@pytest.mark.parametrize(
    ("fmt", "values", "codes"),
    [
        ("e4m3", [448, 449, 464, 465, 1e4, 3.4e38, -465, -3.4e38], [0x7E] * 6 + [0xFE] * 2),
        ("e5m2", [57344, 61440, 65536, 1e6, -1e30], [0x7B] * 4 + [0xFB]),
        ("e2m1", [6, 7, 100, -6.5, -1e9], [0x7] * 3 + [0xF] * 2),
    ],
)
def test_quantize_elements_saturates_at_and_beyond_max(fmt, values, codes) -> None:
    x = np.array(values, dtype=np.float32)
    assert quantize_elements(x, fmt).tolist() == codes
    # the trap this guards against: the plain ml_dtypes cast does not saturate
    if fmt != "e2m1":
        beyond = x.astype(FORMATS[fmt].dtype).astype(np.float64)[np.abs(x) > 1.1 * SPEC[fmt][3]]
        assert not np.isfinite(beyond).any()


def test_ml_dtypes_e4m3_cast_gives_nan_for_465_but_quantizer_gives_448() -> None:
    assert np.isnan(f32(465).astype(ml_dtypes.float8_e4m3fn).astype(np.float32)[0])
    assert quantize_elements(f32(465), "e4m3")[0] == 0x7E
    assert decode_elements(quantize_elements(f32(465), "e4m3"), "e4m3")[0] == 448


@settings(max_examples=300, deadline=None, derandomize=True, print_blob=True)
@given(hnp.arrays(np.float32, st.integers(1, 40), elements=st.floats(width=32, allow_nan=False,
                                                                       allow_infinity=False)))
def test_quantize_elements_property_any_finite_float32(x: np.ndarray) -> None:
    for fmt in SPEC:
        assert np.array_equal(quantize_elements(x, fmt), ref_codes_f32(x, fmt)), fmt


def test_quantize_elements_rejects_nan_naming_first_index() -> None:
    x = np.array([[1.0, 2.0, 3.0], [4.0, np.nan, np.nan]], dtype=np.float32)
    with pytest.raises(ValueError, match=r"^x has a NaN at index \(1, 1\) \(value nan\); the "
                                         r"quantizers accept finite values only"):
        quantize_elements(x, "e4m3")


@pytest.mark.parametrize("bad", [np.inf, -np.inf])
def test_quantize_elements_rejects_inf(bad: float) -> None:
    with pytest.raises(ValueError, match=r"x has an Inf at index \(2,\).*no finite scale"):
        quantize_elements(f32(0, 1, bad), "e5m2")


# ----------------------------------------------------------------------------------------------
# MX scales
# ----------------------------------------------------------------------------------------------


def one_block_per_row(amaxes: np.ndarray) -> np.ndarray:
    x = np.zeros((amaxes.size, 32), dtype=np.float32)
    x[:, 3] = amaxes
    x[:, 9] = -amaxes / 3
    return x


def test_floor_rule_exponent_just_below_powers_of_two() -> None:
    """Trap 1: float32 floor(log2(nextafter(2^k, 0))) says k; the exponent is k - 1."""
    ks = np.arange(-126, 128)
    powers = np.ldexp(np.float32(1), ks.astype(np.int32))
    below = np.nextafter(powers, np.float32(0))
    amaxes = np.concatenate([below, powers, f32(np.finfo(np.float32).max)])
    naive = np.floor(np.log2(amaxes)).astype(np.int64)
    exact = np.array([ref_floor_log2(Fraction(float(a))) for a in amaxes])
    assert (naive != exact).sum() > 100, "the trap must be live for this test to mean anything"
    for fmt in SPEC:
        _, scales = mx_quantize(one_block_per_row(amaxes), fmt, "floor")
        want = np.clip(exact - EMAX_ELEM[fmt], -127, 127) + 127
        bad = np.flatnonzero(scales[:, 0] != want)
        assert bad.size == 0, (
            f"{fmt}: amax {amaxes[bad[0]]!r} got {scales[bad[0], 0]}, want {want[bad[0]]}")
    # e.g. amax just below 16 (e4m3): floor(log2) = 3, shared_exp = 3 - 8 = -5, code 122
    _, s = mx_quantize(one_block_per_row(np.nextafter(f32(16), np.float32(0))), "e4m3", "floor")
    assert s[0, 0] == 122


@pytest.mark.parametrize("seed", SEEDS, ids=SEED_ID)
def test_scale_rules_match_exact_definition_over_wide_range(seed: int) -> None:
    rng = np.random.default_rng(seed)
    amaxes = np.concatenate([
        random_f32(rng, 600, -149, 128),  # includes float32 subnormals: clamp to code 0
        np.abs(random_f32(rng, 200, -3, 20)),
        f32(448, 448.00003, 57344, 6, 6.0000005, 1.5, 1.75, 1.7500001, 2.0**-118, 2.0**-140, 0),
    ])
    amaxes = np.abs(amaxes).astype(np.float32)
    for fmt in SPEC:
        for rule in ("floor", "rceil"):
            _, scales = mx_quantize(one_block_per_row(amaxes), fmt, rule)
            want = np.array([ref_shared_exp(float(a), fmt, rule) + 127 for a in amaxes])
            bad = np.flatnonzero(scales[:, 0] != want)
            assert bad.size == 0, (
                f"{fmt}/{rule} seed={seed}: amax {amaxes[bad[0]]!r} scale {scales[bad[0], 0]} "
                f"want {want[bad[0]]}; "
                + repro(f"test_scale_rules_match_exact_definition_over_wide_range[seed={seed}]")
            )
    assert 0 in scales and 0xFF not in scales


def test_all_zero_block_gets_scale_127_and_zero_elements() -> None:
    x = np.zeros((2, 64), dtype=np.float32)
    x[1, 32:] = 1.0
    x[0, 5] = -0.0
    for fmt in SPEC:
        codes, scales = mx_quantize(x, fmt, "rceil")
        assert scales[0].tolist() == [127, 127] and scales[1, 0] == 127
        assert (decode_elements(codes[:, :32], fmt) == 0).all()


def test_floor_clips_block_max_and_rceil_does_not_amax_500_e4m3() -> None:
    rng = np.random.default_rng(SEEDS[0])
    x = (rng.standard_normal((1, 32)) * 10).astype(np.float32)
    x[0, 0] = 500.0  # significand 500/256 = 1.95 > 448/256 = 1.75
    cf, sf = mx_quantize(x, "e4m3", "floor")
    cr, sr = mx_quantize(x, "e4m3", "rceil")
    assert sf.tolist() == [[127]] and sr.tolist() == [[128]]  # 2^0 vs 2^1
    assert cf[0, 0] == 0x7E  # 500 -> 448: clipped by 52
    assert cr[0, 0] == 0x78  # 500 / 2 = 250 -> 256, times 2 = 512: off by 12
    err_f = np.abs(mx_dequantize(cf, sf, "e4m3") - x)
    err_r = np.abs(mx_dequantize(cr, sr, "e4m3") - x)
    assert err_f[0, 0] == 52 and err_r[0, 0] == 12
    assert np.sum(err_r**2) < 0.2 * np.sum(err_f**2), (np.sum(err_r**2), np.sum(err_f**2))


@pytest.mark.parametrize("fmt", ["e4m3", "e5m2", "e2m1"])
@pytest.mark.parametrize("seed", SEEDS, ids=SEED_ID)
def test_rceil_never_saturates_floor_does(fmt: str, seed: int) -> None:
    rng = np.random.default_rng(seed)
    rows, k = 256, 256
    spread = np.ldexp(1.0, rng.integers(-60, 60, size=(rows, 1)))  # a different range per row
    x = (rng.standard_cauchy((rows, k)) * spread).astype(np.float32)
    top = SPEC[fmt][3]
    saturated = {}
    for rule in ("floor", "rceil"):
        _, scales = mx_quantize(x, fmt, rule)
        amax = np.abs(x.astype(np.float64)).reshape(rows, k // 32, 32).max(axis=2)
        ratio = np.ldexp(amax, 127 - scales.astype(np.int64))  # amax / 2^shared_exp, exact
        saturated[rule] = int((ratio > top).sum())
    msg = f"{fmt} seed={seed}: {saturated}; " + repro(
        f"test_rceil_never_saturates_floor_does[seed={seed}-{fmt}]")
    assert saturated["rceil"] == 0, msg
    assert saturated["floor"] > 0, msg  # the property is not vacuous on this data


# ----------------------------------------------------------------------------------------------
# MX round trip and SQNR
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("rule", ["floor", "rceil"])
@pytest.mark.parametrize("fmt", ["e4m3", "e5m2", "e2m1"])
@pytest.mark.parametrize("seed", SEEDS[:1], ids=SEED_ID)
def test_mx_round_trip_error_within_half_grid_step(fmt: str, rule: str, seed: int) -> None:
    """|x - x_hat| <= half the element grid step at |x| (times the block scale).

    Normal range (|x| / 2^s >= 2^emin, not saturated): <= 2^(floor(log2|x|) - M - 1), so the
    relative error is <= 2^-(M+1). Subnormal range: <= 2^(s + emin - M - 1). Saturated (floor
    rule only): exactly |x| - max * 2^s.
    """
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((64, 4096)).astype(np.float32)
    codes, scales = mx_quantize(x, fmt, rule)
    xh = mx_dequantize(codes, scales, fmt)
    _, m_bits, bias, top = SPEC[fmt]
    s = np.repeat(scales.astype(np.int64) - 127, 32, axis=1)
    ax = np.abs(x.astype(np.float64))
    v = np.ldexp(ax, -s)  # element magnitude in units of the block scale (exact)
    err = np.abs(x - xh)
    sat = v > top
    normal = (v >= 2.0 ** (1 - bias)) & ~sat
    sub = v < 2.0 ** (1 - bias)
    _, e = np.frexp(ax)
    tag = f"{fmt}/{rule} seed={seed}; " + repro(
        f"test_mx_round_trip_error_within_half_grid_step[seed={seed}-{fmt}-{rule}]")
    assert (err[normal] <= np.ldexp(1.0, e[normal] - 1 - m_bits - 1)).all(), tag
    rel = err[normal] / ax[normal]
    assert rel.max() <= 2.0 ** -(m_bits + 1), tag
    half = 2.0 ** -(m_bits + 1)  # the worst case is |x| = (1 + half) * 2^e: half / (1 + half)
    assert rel.max() > 0.99 * half / (1 + half), tag  # the bound is tight, not loose
    assert (err[sub] <= np.ldexp(1.0, s[sub] + (1 - bias) - m_bits - 1)).all(), tag
    assert np.array_equal(err[sat], ax[sat] - np.ldexp(float(top), s[sat])), tag
    assert (rule == "rceil") == (sat.sum() == 0), tag


def quantize_dequantize(x: np.ndarray, name: str) -> np.ndarray:
    r = recipe(name)
    if r.kind == "mx":
        return mx_dequantize(*mx_quantize(x, r.fmt, r.rule), r.fmt)
    if r.kind == "fp8":
        codes, scale = fp8_per_tensor(x, r.fmt)
        return decode_elements(codes, r.fmt) * scale
    axis = None if r.granularity == "tensor" else 0
    return int8_dequantize(*int8_symmetric(x, axis), axis)


# NUMERICS.md reference points for N(0,1) data vs float64 (tolerance 1.5 dB)
SQNR_REFERENCE = {
    "int8-tensor": 39.0,
    "fp8-e4m3-tensor": 31.5,
    "mxfp8-e4m3-floor": 30.6,
    "mxfp8-e4m3-rceil": 31.5,
    "mxfp4-e2m1-floor": 19.0,
    "mxfp4-e2m1-rceil": 19.0,
}


@pytest.fixture(scope="module")
def normal_64x4096() -> np.ndarray:
    return np.random.default_rng(SEEDS[0]).standard_normal((64, 4096)).astype(np.float32)


@pytest.fixture(scope="module")
def sqnr_all(normal_64x4096: np.ndarray) -> dict[str, float]:
    return {name: sqnr_db(normal_64x4096, quantize_dequantize(normal_64x4096, name))
            for name in RECIPES}


@pytest.mark.parametrize("name", list(SQNR_REFERENCE))
def test_sqnr_matches_published_reference_points(name: str, sqnr_all: dict[str, float]) -> None:
    got, ref = sqnr_all[name], SQNR_REFERENCE[name]
    assert abs(got - ref) <= 1.5, f"{name}: SQNR {got:.2f} dB, reference {ref} +- 1.5 dB"


def test_sqnr_relations_between_recipes(sqnr_all: dict[str, float]) -> None:
    q = sqnr_all
    assert q["mxfp8-e4m3-rceil"] > q["mxfp8-e4m3-floor"] + 0.5, q
    assert q["int8-channel"] >= q["int8-tensor"], q
    # one mantissa bit less (E5M2 vs E4M3) costs about 6 dB when nothing under/overflows
    for a, b in [("fp8-e4m3-tensor", "fp8-e5m2-tensor"), ("mxfp8-e4m3-rceil", "mxfp8-e5m2-rceil"),
                 ("mxfp8-e4m3-floor", "mxfp8-e5m2-floor")]:
        assert 4.5 <= q[a] - q[b] <= 7.5, (a, b, q)


def test_mxfp8_gemm_sqnr_k4096_reference_point() -> None:
    """NUMERICS.md: a K=4096 MXFP8 GEMM is ~27.6 dB (E4M3, OCP floor rule), A and B N(0,1)."""
    rng = np.random.default_rng(SEEDS[0])
    a = rng.standard_normal((32, 4096)).astype(np.float32)
    b = rng.standard_normal((4096, 32)).astype(np.float32)
    ah = mx_dequantize(*mx_quantize(a, "e4m3", "floor", axis=1), "e4m3", axis=1)
    bh = mx_dequantize(*mx_quantize(b, "e4m3", "floor", axis=0), "e4m3", axis=0)
    got = sqnr_db(a.astype(np.float64) @ b, ah @ bh)
    assert abs(got - 27.6) <= 1.5, f"GEMM SQNR {got:.2f} dB, reference 27.6 +- 1.5 dB"


# ----------------------------------------------------------------------------------------------
# Block axis
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", SEEDS, ids=SEED_ID)
def test_axis0_for_b_is_the_transpose_of_axis1_for_a(seed: int) -> None:
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((8, 128)).astype(np.float32)  # A (R, K)
    b = np.ascontiguousarray(a.T)  # B (K, N) holding the same K-vectors
    for fmt in SPEC:
        ca, sa = mx_quantize(a, fmt, "floor", axis=1)
        cb, sb = mx_quantize(b, fmt, "floor", axis=0)
        assert sa.shape == (8, 4) and sb.shape == (4, 8)
        assert np.array_equal(cb, ca.T) and np.array_equal(sb, sa.T), f"{fmt} seed={seed}"
        assert np.array_equal(mx_dequantize(cb, sb, fmt, axis=0), mx_dequantize(ca, sa, fmt).T)


@pytest.mark.parametrize("seed", SEEDS, ids=SEED_ID)
def test_blocks_follow_k_not_the_memory_layout(seed: int) -> None:
    """Trap 11: for a square B (K, N) the axis-0 and axis-1 blockings are different operands."""
    rng = np.random.default_rng(seed)
    b = rng.standard_normal((64, 64)).astype(np.float32)
    c0, s0 = mx_quantize(b, "e4m3", "floor", axis=0)
    c1, s1 = mx_quantize(b, "e4m3", "floor", axis=1)
    assert s0.shape == (2, 64) and s1.shape == (64, 2)
    assert not np.array_equal(mx_dequantize(c0, s0, "e4m3", axis=0), mx_dequantize(c1, s1, "e4m3"))
    # each axis-0 scale comes from 32 consecutive K rows of one column
    for kb in range(2):
        for n in range(64):
            amax = float(np.abs(b[32 * kb:32 * kb + 32, n]).max())
            assert s0[kb, n] == ref_shared_exp(amax, "e4m3", "floor") + 127
    # an outlier moves exactly one scale: the block that contains it along K
    spiked = b.copy()
    spiked[37, 5] = 1e4
    _, t0 = mx_quantize(spiked, "e4m3", "floor", axis=0)
    _, t1 = mx_quantize(spiked, "e4m3", "floor", axis=1)
    assert np.argwhere(t0 != s0).tolist() == [[1, 5]]  # K block 1 of column 5
    assert np.argwhere(t1 != s1).tolist() == [[37, 0]]  # row 37, K block 0


def test_pad_to_block_zero_pads_k_and_keeps_scales() -> None:
    rng = np.random.default_rng(SEEDS[0])
    a = rng.standard_normal((3, 40)).astype(np.float32)
    with pytest.raises(ValueError, match=r"K = x.shape\[1\] = 40 is not a multiple of the MX "
                                         r"block \(32\); zero-pad K with pad_to_block\(x, axis=1"):
        mx_quantize(a, "e4m3", "floor")
    p = pad_to_block(a, axis=1)
    assert p.shape == (3, 64) and p.dtype == np.float32
    assert np.array_equal(p[:, :40], a) and not p[:, 40:].any()
    codes, scales = mx_quantize(p, "e4m3", "floor")
    c_full, s_full = mx_quantize(np.ascontiguousarray(a[:, :32]), "e4m3", "floor")
    assert np.array_equal(codes[:, :32], c_full) and np.array_equal(scales[:, :1], s_full)
    tail_amax = np.abs(a[:, 32:]).max(axis=1)
    assert scales[:, 1].tolist() == [ref_shared_exp(float(t), "e4m3", "floor") + 127
                                     for t in tail_amax]
    assert pad_to_block(a.T, axis=0).shape == (64, 3)
    assert pad_to_block(p, axis=1).shape == (3, 64)


def test_mx_dequantize_e8m0_nan_code_and_exact_values() -> None:
    codes = np.array([[0x38] * 32 + [0x01] * 32], dtype=np.uint8)  # 1.0 and 2^-9 in E4M3
    scales = np.array([[0xFF, 0]], dtype=np.uint8)
    out = mx_dequantize(codes, scales, "e4m3")
    assert np.isnan(out[0, :32]).all()
    assert (out[0, 32:] == 2.0**-136).all()  # 2^-9 * 2^-127: an exact float64
    with pytest.raises(ValueError, match=r"scales shape \(1, 3\) does not match codes shape "
                                         r"\(1, 64\) with axis=1 and block=32: expected \(1, 2\)"):
        mx_dequantize(codes, np.zeros((1, 3), np.uint8), "e4m3")


# ----------------------------------------------------------------------------------------------
# Per-tensor FP8 and symmetric INT8
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["e4m3", "e5m2"])
@pytest.mark.parametrize("seed", SEEDS, ids=SEED_ID)
def test_fp8_per_tensor_is_rne_of_exact_quotient(fmt: str, seed: int) -> None:
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(3000) * 3).astype(np.float32)
    codes, scale = fp8_per_tensor(x, fmt)
    amax = float(np.abs(x).max())
    assert scale == amax / SPEC[fmt][3]
    assert codes[np.argmax(np.abs(x))] in (0x7E, 0xFE, 0x7B, 0xFB)  # amax -> +-max
    fs = Fraction(scale)
    want = np.array([ref_code(abs(Fraction(float(v))) / fs, bool(v < 0), fmt) for v in x])
    bad = np.flatnonzero(codes != want)
    assert bad.size == 0, (
        f"{fmt} seed={seed}: x={x[bad[0]]!r} got {codes[bad[0]]:#x} want {want[bad[0]]:#x}; "
        + repro(f"test_fp8_per_tensor_is_rne_of_exact_quotient[seed={seed}-{fmt}]"))


def test_fp8_per_tensor_float64_quotient_on_a_midpoint_is_rechecked_exactly() -> None:
    """amax 1: scale = fl(1/448); 0.046875 / scale rounds to exactly 21.0 in float64, a tie
    between 20 (even) and 22, but the real quotient is just above 21, so RNE gives 22."""
    x = f32(1.0, 0.046875)
    _, scale = fp8_per_tensor(x, "e4m3")
    assert 0.046875 / scale == 21.0 and Fraction(0.046875) / Fraction(scale) > 21
    codes, _ = fp8_per_tensor(x, "e4m3")
    assert codes.tolist() == [0x7E, 0x5B]  # 448, 22 (naive rint of 21.0 would give 0x5A = 20)


def test_fp8_per_tensor_all_zero_and_bad_format() -> None:
    codes, scale = fp8_per_tensor(np.zeros((4, 4), np.float32), "e4m3")
    assert scale == 1.0 and not codes.any()
    with pytest.raises(ValueError, match=r"format 'e2m1'; accepted: 'e4m3', 'e5m2'$"):
        fp8_per_tensor(f32(1.0), "e2m1")


def test_int8_symmetric_never_minus_128_and_ties_to_even() -> None:
    q, scale = int8_symmetric(f32(-10, 1, 5))
    assert q.dtype == np.int8 and q.tolist() == [-127, 13, 64] and scale == 10 / 127
    q, scale = int8_symmetric(f32(127, 2.5, 3.5, -2.5, 0.5, 1.5, -126.5))
    assert scale == 1.0 and q.tolist() == [127, 2, 4, -2, 0, 2, -126]
    rng = np.random.default_rng(SEEDS[0])
    x = (rng.standard_normal((16, 64)) - 0.7).astype(np.float32)  # skewed negative
    for axis in (None, 0, 1):
        q, _ = int8_symmetric(x, axis)
        assert q.min() == -127 and q.max() <= 127, axis


def test_int8_float64_quotient_on_a_tie_is_rechecked_exactly() -> None:
    """amax = float32(0.3): (amax/2) / fl(amax/127) is exactly 63.5 in float64 but the real
    quotient is just below, so RNE gives 63 (np.rint of the float64 quotient gives 64)."""
    amax = float(np.float32(0.3))
    scale = amax / 127
    assert (amax / 2) / scale == 63.5 and Fraction(amax / 2) / Fraction(scale) < Fraction(127, 2)
    q, s = int8_symmetric(f32(0.3, 0.15))
    assert s == scale and q.tolist() == [127, 63]


@pytest.mark.parametrize("seed", SEEDS, ids=SEED_ID)
def test_int8_per_channel_scales_and_outlier_channels(seed: int) -> None:
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((64, 256)).astype(np.float32)  # A (R, K)
    a[[3, 17, 40]] *= 100  # outlier rows
    q0, s0 = int8_symmetric(a, axis=0)  # one scale per row of A
    assert s0.shape == (64,) and s0.dtype == np.float64
    assert np.array_equal(s0, np.abs(a).max(axis=1).astype(np.float64) / 127)
    qt, st_ = int8_symmetric(a)
    assert isinstance(st_, float)
    per_channel = sqnr_db(a, int8_dequantize(q0, s0, axis=0))
    per_tensor = sqnr_db(a, int8_dequantize(qt, st_))
    # SQNR over the bulk rows (not the outliers, which dominate the total energy)
    bulk = np.setdiff1d(np.arange(64), [3, 17, 40])
    bulk_c = sqnr_db(a[bulk], int8_dequantize(q0, s0, axis=0)[bulk])
    bulk_t = sqnr_db(a[bulk], int8_dequantize(qt, st_)[bulk])
    msg = (f"seed={seed}: total {per_channel:.1f} vs {per_tensor:.1f}, bulk {bulk_c:.1f} vs "
           f"{bulk_t:.1f}; "
           + repro(f"test_int8_per_channel_scales_and_outlier_channels[seed={seed}]"))
    assert per_channel >= per_tensor and bulk_c > bulk_t + 20, msg
    b = np.ascontiguousarray(a.T)  # B (K, N): axis=1 is one scale per column
    q1, s1 = int8_symmetric(b, axis=1)
    assert np.array_equal(q1, q0.T) and np.array_equal(s1, s0)


def test_int8_zero_amax_gives_scale_one() -> None:
    q, s = int8_symmetric(np.zeros((2, 3), np.float32))
    assert s == 1.0 and not q.any()
    x = np.zeros((2, 3), np.float32)
    x[1] = [1, -2, 0.5]
    q, s = int8_symmetric(x, axis=0)
    assert s.tolist() == [1.0, 2 / 127] and q.tolist() == [[0, 0, 0], [64, -127, 32]]


# ----------------------------------------------------------------------------------------------
# Recipes
# ----------------------------------------------------------------------------------------------


def test_recipes_table() -> None:
    assert list(RECIPES) == [
        "int8-tensor", "int8-channel", "fp8-e4m3-tensor", "fp8-e5m2-tensor", "fp8-e4m3-cast", "fp8-e5m2-cast",
        "mxfp8-e4m3-floor", "mxfp8-e4m3-rceil", "mxfp8-e5m2-floor", "mxfp8-e5m2-rceil",
        "mxfp4-e2m1-floor", "mxfp4-e2m1-rceil",
    ]
    assert recipe("mxfp4-e2m1-rceil") == Recipe("mxfp4-e2m1-rceil", "mx", "e2m1", "block", "rceil")
    assert recipe("int8-channel").granularity == "channel" and recipe("int8-channel").rule is None
    for name, r in RECIPES.items():
        assert r.name == name
        if r.kind != "int8":
            assert r.fmt in name
    with pytest.raises(dataclasses.FrozenInstanceError):
        recipe("int8-tensor").fmt = "e4m3"  # type: ignore[misc]
    with pytest.raises(ValueError, match=r"recipe 'x': rule 'ceil' is not valid for kind 'mx'; "
                                         r"accepted: 'floor', 'rceil'"):
        Recipe("x", "mx", "e4m3", "block", "ceil")


# ----------------------------------------------------------------------------------------------
# Bad input
# ----------------------------------------------------------------------------------------------

X2 = np.ones((2, 32), dtype=np.float32)


@pytest.mark.parametrize(
    ("call", "exc", "pattern"),
    [
        (lambda: quantize_elements(X2, "e4m3fnuz"), ValueError,
         r"unknown element format 'e4m3fnuz'; accepted: 'e4m3', 'e5m2', 'e2m1'"),
        (lambda: mx_quantize(X2, "e3m4", "floor"), ValueError, r"unknown element format 'e3m4'"),
        (lambda: mx_quantize(X2, "e4m3", "ceil"), ValueError,
         r"unknown MX scale rule 'ceil'; accepted: 'floor' .* or 'rceil'"),
        (lambda: recipe("mxfp6"), ValueError,
         r"unknown quantization recipe 'mxfp6'; known: int8-tensor, int8-channel, .*"
         r"mxfp4-e2m1-rceil$"),
        (lambda: mx_quantize(np.ones((2, 48), np.float32), "e2m1", "rceil", axis=1), ValueError,
         r"is not a multiple of the MX block \(32\); zero-pad K with pad_to_block"),
        (lambda: mx_quantize(np.ones((48, 2), np.float32), "e2m1", "rceil", axis=0), ValueError,
         r"K = x.shape\[0\] = 48 .* pad_to_block\(x, axis=0, block=32\)"),
        (lambda: mx_quantize(X2, "e4m3", "floor", axis=2), ValueError, r"axis must be 1 .* or 0"),
        (lambda: mx_quantize(np.ones(64, np.float32), "e4m3", "floor"), ValueError,
         r"x must be 2-D \(rows, K\) or \(K, cols\), got shape \(64,\)"),
        (lambda: quantize_elements(np.ones(3), "e4m3"), TypeError,
         r"x must have dtype float32, not float64: .* rounded twice .* x.astype\(np.float32\)"),
        (lambda: mx_quantize(X2.astype(np.float64), "e4m3", "floor"), TypeError,
         r"dtype float32, not float64.*rounded twice"),
        (lambda: fp8_per_tensor(X2.astype(np.float16), "e4m3"), TypeError, r"not float16"),
        (lambda: int8_symmetric([1.0, 2.0]), TypeError,
         r"numpy.ndarray of dtype float32, not list"),
        (lambda: quantize_elements(np.zeros(0, np.float32), "e4m3"), ValueError,
         r"x is empty \(shape \(0,\)\); expected at least one element"),
        (lambda: mx_quantize(np.zeros((0, 32), np.float32), "e4m3", "floor"), ValueError,
         r"x is empty"),
        (lambda: fp8_per_tensor(np.zeros((3, 0), np.float32), "e5m2"), ValueError, r"x is empty"),
        (lambda: int8_symmetric(np.zeros(0, np.float32), None), ValueError, r"x is empty"),
        (lambda: int8_symmetric(X2, axis=2), ValueError,
         r"axis must be None \(per tensor\) or the channel axis, an integer in \[-2, 1\]"),
        (lambda: mx_quantize(np.full((1, 32), np.nan, np.float32), "e4m3", "rceil"), ValueError,
         r"x has a NaN at index \(0, 0\)"),
        (lambda: mx_dequantize(np.zeros((1, 32), np.int8), np.zeros((1, 1), np.uint8), "e4m3"),
         TypeError, r"codes must be a numpy.ndarray of dtype uint8, not int8"),
    ],
    ids=lambda v: "" if callable(v) or isinstance(v, (type, str)) else str(v),
)
def test_bad_input_is_rejected_with_a_useful_message(call, exc, pattern) -> None:
    with pytest.raises(exc, match=pattern):
        call()
