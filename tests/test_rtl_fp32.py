"""fp32 rounding and addition RTL (Amaranth simulator) against independent references.

Addition is checked against numpy float32 (IEEE RNE with subnormals); conversion against an
exact rational reference written here (no float64 on the way, which would double-round).
"""

# (no `from __future__ import annotations`: wiring.Component reads the annotations at class creation)

import struct
from fractions import Fraction

import numpy as np
import pytest
from amaranth.hdl import Module, Signal, signed
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out
from amaranth.sim import Simulator

from conftest import SEED
from rtl.fp32 import CANONICAL_NAN, fp32_add, round_to_fp32


class _Add(wiring.Component):
    a: In(32)
    b: In(32)
    y: Out(32)

    def elaborate(self, platform):
        m = Module()
        m.d.comb += self.y.eq(fp32_add(m, self.a, self.b))
        return m


class _Cvt(wiring.Component):
    mag: In(80)
    neg: In(1)
    e2: In(signed(13))
    y: Out(32)

    def elaborate(self, platform):
        m = Module()
        m.d.comb += self.y.eq(round_to_fp32(m, self.mag, self.neg, self.e2))
        return m


class _CvtSticky(wiring.Component):
    mag: In(64)
    neg: In(1)
    e2: In(signed(13))
    sticky: In(1)
    y: Out(32)

    def elaborate(self, platform):
        m = Module()
        m.d.comb += self.y.eq(round_to_fp32(m, self.mag, self.neg, self.e2, sticky_in=self.sticky))
        return m


def _run(dut, cases, setter):
    out = []

    async def tb(ctx):
        for c in cases:
            setter(ctx, dut, c)
            await ctx.delay(1e-9)
            out.append(ctx.get(dut.y))

    sim = Simulator(dut)
    sim.add_testbench(tb)
    sim.run()
    return out


def _f32_bits(x: np.float32) -> int:
    return int(np.array(x, np.float32).view(np.uint32))


def _ref_add(a: int, b: int) -> int:
    with np.errstate(all="ignore"):
        r = np.array([a], np.uint32).view(np.float32)[0] + np.array([b], np.uint32).view(np.float32)[0]
    return CANONICAL_NAN if np.isnan(r) else _f32_bits(r)


def _ref_round(mag: int, neg: int, e2: int) -> int:
    """Exact RNE of mag * 2**e2 to binary32 bits, by rationals."""
    if mag == 0:
        return 0
    v = Fraction(mag) * (Fraction(2) ** e2)
    # find exponent: largest k with 2**k <= v
    k = v.numerator.bit_length() - v.denominator.bit_length()
    if Fraction(2) ** k > v:
        k -= 1
    lsb = max(k - 23, -149)
    q = v / (Fraction(2) ** lsb)
    fl = q.numerator // q.denominator
    rem = q - fl
    if rem > Fraction(1, 2) or (rem == Fraction(1, 2) and fl % 2 == 1):
        fl += 1
    bits = ((lsb + 149) << 23) + fl
    bits = min(bits, 0x7F800000)
    return bits | (neg << 31)


SPECIAL = [0x00000000, 0x80000000, 0x00000001, 0x80000001, 0x007FFFFF, 0x00800000, 0x3F800000, 0xBF800000,
           0x7F7FFFFF, 0xFF7FFFFF, 0x7F800000, 0xFF800000, 0x7FC00000, 0x7F800001, 0x33800000, 0x34000000,
           0x4B800000, 0x3F800001, 0xB3800000]


def test_fp32_add_matches_ieee():
    rng = np.random.default_rng([SEED, 32])
    pairs = [(a, b) for a in SPECIAL for b in SPECIAL]
    raw = rng.integers(0, 2**32, size=(1500, 2), dtype=np.uint64)
    pairs += [(int(a), int(b)) for a, b in raw]
    # close exponents (cancellation, carries) and far ones (the >= 26 shortcut boundary)
    for _ in range(1500):
        e = int(rng.integers(1, 254))
        d = int(rng.integers(0, 30))
        a = (int(rng.integers(0, 2)) << 31) | (e << 23) | int(rng.integers(0, 2**23))
        b = (int(rng.integers(0, 2)) << 31) | (max(0, e - d) << 23) | int(rng.integers(0, 2**23))
        pairs.append((a, b))
    got = _run(_Add(), pairs, lambda ctx, d, c: (ctx.set(d.a, c[0]), ctx.set(d.b, c[1])))
    bad = [(hex(a), hex(b), hex(g), hex(_ref_add(a, b))) for (a, b), g in zip(pairs, got) if g != _ref_add(a, b)]
    assert not bad, f"{len(bad)} of {len(pairs)} wrong (seed {SEED}), first: {bad[:5]}"


def test_round_to_fp32_matches_exact_rounding():
    rng = np.random.default_rng([SEED, 33])
    cases = [(0, 0, 0), (1, 0, -149), (1, 0, -150), (3, 0, -151), (1, 1, -150), (2**24 + 1, 0, -24),
             (2**24 + 3, 0, -24), (2**25 - 1, 0, 103), (2**24 - 1, 0, 104), ((2**25 - 1), 0, 104),
             (2**79 + 2**55, 1, -200), (2**70 - 1, 0, 50), (5, 0, 300), (7, 1, -400)]
    for _ in range(2000):
        bits = int(rng.integers(1, 80))
        mag = int(rng.integers(0, 2**63)) >> max(0, 63 - bits)
        mag |= int(rng.integers(0, 2**16)) << 63 if bits > 63 else 0
        cases.append((mag % (1 << 80), int(rng.integers(0, 2)), int(rng.integers(-300, 200))))
    got = _run(_Cvt(), cases, lambda ctx, d, c: (ctx.set(d.mag, c[0]), ctx.set(d.neg, c[1]), ctx.set(d.e2, c[2])))
    bad = [(c, hex(g), hex(_ref_round(*c))) for c, g in zip(cases, got) if g != _ref_round(*c)]
    assert not bad, f"{len(bad)} of {len(cases)} wrong (seed {SEED}), first: {bad[:5]}"


def test_round_to_fp32_with_a_sticky_fraction_rounds_the_whole_value():
    """``sticky_in``: the magnitude is mag + a nonzero fraction (mag >= 2**25, the promise):
    the same bits as rounding mag + 2**-8 exactly, ties included (a tie with the fraction set is
    no tie)."""
    rng = np.random.default_rng([SEED, 35])
    cases = []
    for _ in range(1500):
        bits = int(rng.integers(26, 65))
        mag = (1 << (bits - 1)) | (int(rng.integers(0, 2**63)) >> (64 - bits))
        if rng.integers(0, 3) == 0:  # an exact tie below the last place, with or without the fraction
            cut = bits - 25
            mag = (mag >> cut << cut) | (1 << (cut - 1))
        cases.append((mag, int(rng.integers(0, 2)), int(rng.integers(-300, 120)), int(rng.integers(0, 2))))
    got = _run(_CvtSticky(), cases, lambda ctx, d, c: (ctx.set(d.mag, c[0]), ctx.set(d.neg, c[1]), ctx.set(d.e2, c[2]),
                                                      ctx.set(d.sticky, c[3])))

    def ref(mag, neg, e2, sticky):
        return _ref_round((mag << 8) | sticky, neg, e2 - 8)

    bad = [(c, hex(g), hex(ref(*c))) for c, g in zip(cases, got) if g != ref(*c)]
    assert not bad, f"{len(bad)} of {len(cases)} wrong (seed {SEED}), first: {bad[:5]}"


def test_reference_itself_agrees_with_float32_where_float64_is_exact():
    rng = np.random.default_rng([SEED, 34])
    for _ in range(500):
        mag, e2 = int(rng.integers(1, 2**53)), int(rng.integers(-200, 60))
        x = float(Fraction(mag) * Fraction(2) ** e2)  # exact: 53 bits, exponent in range
        with np.errstate(over="ignore"):
            assert _ref_round(mag, 0, e2) == _f32_bits(np.float32(x)), (mag, e2)


class _Bin(wiring.Component):
    """One two-input fp32 builder (fp32_mul, fp32_max, fp32_min) on its own."""

    a: In(32)
    b: In(32)
    y: Out(32)

    def __init__(self, builder):
        self._builder = builder
        super().__init__()

    def elaborate(self, platform):
        m = Module()
        m.d.comb += self.y.eq(self._builder(m, self.a, self.b))
        return m


def _binary_cases(seed: int, n: int = 1200):
    """SPECIAL x SPECIAL, random bit patterns, and pairs whose product lands near the subnormal
    and overflow boundaries (exponent sums around 127 and 254)."""
    rng = np.random.default_rng([SEED, seed])
    pairs = [(a, b) for a in SPECIAL for b in SPECIAL]
    raw = rng.integers(0, 2**32, size=(n, 2), dtype=np.uint64)
    pairs += [(int(a), int(b)) for a, b in raw]
    for _ in range(n):
        total = int(rng.integers(90, 290))  # ea + eb
        ea = int(rng.integers(max(0, total - 254), min(254, total) + 1))
        eb = total - ea
        a = (int(rng.integers(0, 2)) << 31) | (ea << 23) | int(rng.integers(0, 2**23))
        b = (int(rng.integers(0, 2)) << 31) | (eb << 23) | int(rng.integers(0, 2**23))
        pairs.append((a, b))
    return pairs


@pytest.mark.parametrize("op", ["fmul", "fmax", "fmin"])
def test_fp32_binary_ops_match_the_golden(op):
    from golden.vector import vector_op
    from rtl.fp32 import fp32_max, fp32_min, fp32_mul

    builder = {"fmul": fp32_mul, "fmax": fp32_max, "fmin": fp32_min}[op]
    pairs = _binary_cases({"fmul": 40, "fmax": 41, "fmin": 42}[op])
    got = _run(_Bin(builder), pairs, lambda ctx, d, c: (ctx.set(d.a, c[0]), ctx.set(d.b, c[1])))
    a = np.array([p[0] for p in pairs], np.uint32)
    b = np.array([p[1] for p in pairs], np.uint32)
    want = vector_op(op, a, b)
    bad = [(hex(x), hex(y), hex(g), hex(int(w))) for x, y, g, w in zip(a, b, got, want) if g != w]
    assert not bad, (f"{op}: {len(bad)} of {len(pairs)} wrong (reproduce with FIRSTLIGHT_SEED={SEED}), "
                     f"first (a, b, rtl, golden): {bad[:5]}")
