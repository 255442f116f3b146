"""The special functions: RTL (Amaranth simulator) bit-exact against golden/special.py, and the
golden's error against float64 on a strided sample of its documented range (the exhaustive
measurement is `firstlight numerics --special`, quoted in docs/numerics.md)."""

# (no `from __future__ import annotations`: wiring.Component reads the annotations at class creation)

import numpy as np
import pytest
from amaranth.hdl import Module
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out
from amaranth.sim import Simulator

from conftest import SEED
from golden.special import EXP_RANGE, exp_bits, ulp_error
from rtl.special import fp32_exp

EXP_EDGES = np.array([0.0, -0.0, 1.0, -1.0, 1e-45, -1e-45, 1e-30, 88.72283, 88.72284, 88.7229, -87.33654,
                      -87.3365, -87.3366, -103.97, -104.0, 127.99, -127.99, 128.0, -128.0, 1e30, -1e30,
                      np.inf, -np.inf, np.nan, 0.5, np.log(2.0), -np.log(2.0), 2.0**-26, -2.0**-26,
                      2.0**-24, -2.0**-25], np.float32)


class _Unary(wiring.Component):
    x: In(32)
    y: Out(32)

    def __init__(self, builder):
        self._builder = builder
        super().__init__()

    def elaborate(self, platform):
        m = Module()
        m.d.comb += self.y.eq(self._builder(m, self.x))
        return m


def _run(builder, xs: np.ndarray) -> np.ndarray:
    dut = _Unary(builder)
    out = []

    async def tb(ctx):
        for v in xs:
            ctx.set(dut.x, int(v))
            await ctx.delay(1e-9)
            out.append(ctx.get(dut.y))

    sim = Simulator(dut)
    sim.add_testbench(tb)
    sim.run()
    return np.array(out, np.uint32)


def _exp_inputs(rng, n: int) -> np.ndarray:
    """Edges, uniform over the range, small magnitudes, and random bit patterns (NaNs, huge)."""
    lo, hi = EXP_RANGE
    parts = [EXP_EDGES, rng.uniform(lo - 1, hi + 1, n).astype(np.float32),
             (rng.standard_normal(n // 4) * 1e-4).astype(np.float32)]
    bits = [p.view(np.uint32) for p in parts] + [rng.integers(0, 2**32, n // 4, dtype=np.uint64).astype(np.uint32)]
    return np.concatenate(bits)


def test_rtl_exp_matches_golden():
    rng = np.random.default_rng([SEED, 70])
    xs = _exp_inputs(rng, 2000)
    got, want = _run(fp32_exp, xs), exp_bits(xs)
    bad = np.flatnonzero(got != want)
    assert not len(bad), (f"exp: {len(bad)} of {len(xs)} differ (reproduce with FIRSTLIGHT_SEED={SEED}); first "
                          f"(x, rtl, golden): {[(hex(xs[i]), hex(got[i]), hex(want[i])) for i in bad[:5]]}")


def test_exp_golden_error_bound_on_a_sample():
    """Every 1021st fp32 pattern in the documented range: at most the bound docs/numerics.md states."""
    lo, hi = EXP_RANGE
    pos = np.arange(0, np.float32(hi).view(np.uint32) + 1, 1021, dtype=np.uint64).astype(np.uint32)
    neg = np.arange(1 << 31, np.float32(lo).view(np.uint32) + 1, 1021, dtype=np.uint64).astype(np.uint32)
    xs = np.concatenate([pos, neg])
    err = ulp_error(exp_bits(xs), np.exp(xs.view(np.float32).astype(np.float64)))
    assert err.max() <= 0.53, f"exp max error {err.max():.4f} ulp at x={xs.view(np.float32)[err.argmax()]!r}"
    # flush and overflow outside the range, specials
    edge = exp_bits(np.array([np.float32(lo) - 0.01, np.float32(hi) + 0.01, -np.inf, np.inf, np.nan, -0.0],
                             np.float32).view(np.uint32))
    assert edge.tolist() == [0, 0x7F800000, 0, 0x7F800000, 0x7FC00000, 0x3F800000], [hex(v) for v in edge]


RECIP_EDGES = np.array([1.0, -1.0, 2.0, 0.5, 3.0, 1.5, 1.9999999, 1.0000001, 2.0**-126, 2.0**126, 2.0**127, 3e38,
                        -3e38, 1e-45, -1e-45, 0.0, -0.0, np.inf, -np.inf, np.nan, 4.0, 0.25, 7.0, 2.0**-125,
                        1.1754942e-38, 16.0, 1.0 / 3.0], np.float32)


@pytest.mark.parametrize("fn", ["recip", "rsqrt"])
def test_rtl_recip_rsqrt_match_golden(fn):
    from golden.special import recip_bits, rsqrt_bits
    from rtl.special import fp32_recip, fp32_rsqrt

    rng = np.random.default_rng([SEED, 71 if fn == "recip" else 72])
    xs = np.concatenate([RECIP_EDGES.view(np.uint32),
                         np.exp2(rng.uniform(-127, 128, 1500)).astype(np.float32).view(np.uint32),
                         rng.integers(0, 2**32, 600, dtype=np.uint64).astype(np.uint32)])
    builder, golden = {"recip": (fp32_recip, recip_bits), "rsqrt": (fp32_rsqrt, rsqrt_bits)}[fn]
    got, want = _run(builder, xs), golden(xs)
    bad = np.flatnonzero(got != want)
    assert not len(bad), (f"{fn}: {len(bad)} of {len(xs)} differ (reproduce with FIRSTLIGHT_SEED={SEED}); first "
                          f"(x, rtl, golden): {[(hex(xs[i]), hex(got[i]), hex(want[i])) for i in bad[:5]]}")


@pytest.mark.parametrize("fn", ["recip", "rsqrt"])
def test_recip_rsqrt_golden_error_bound_on_a_sample(fn):
    """Every 1021st positive normal input in range within the documented bound; powers of two
    (of four, for rsqrt) exact; the specials as documented."""
    from golden.special import SPECIAL_FUNCTIONS

    bits_fn, ref, (lo, hi) = SPECIAL_FUNCTIONS[fn]
    xs = np.arange(np.float32(lo).view(np.uint32), np.float32(hi).view(np.uint32), 1021,
                   dtype=np.uint64).astype(np.uint32)
    err = ulp_error(bits_fn(xs), ref(xs.view(np.float32).astype(np.float64)))
    assert err.max() <= 0.52, f"{fn} max error {err.max():.4f} ulp at x={xs.view(np.float32)[err.argmax()]!r}"
    exact = np.exp2(np.arange(-126, 126, 1 if fn == "recip" else 2, dtype=np.float64)).astype(np.float32)
    got = bits_fn(exact.view(np.uint32)).view(np.float32).astype(np.float64)
    want = 1 / exact.astype(np.float64) if fn == "recip" else 1 / np.sqrt(exact.astype(np.float64))
    assert np.array_equal(got, want.astype(np.float32).astype(np.float64)), f"{fn} of a power of {2 if fn == 'recip' else 4}"
    sp = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, -1.0, 1e-45], np.float32).view(np.uint32)
    want_sp = {"recip": [0x7F800000, 0xFF800000, 0, 0x80000000, 0x7FC00000, 0xBF800000, 0x7F800000],
               "rsqrt": [0x7F800000, 0xFF800000, 0, 0x7FC00000, 0x7FC00000, 0x7FC00000, 0x7F800000]}[fn]
    assert bits_fn(sp).tolist() == want_sp, [hex(v) for v in bits_fn(sp)]
