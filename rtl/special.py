"""The vector unit's special functions as combinational Amaranth builders (fp32 bits in, fp32
bits out): exp by range reduction to 2**n * 2**f, 2**f from a 64-entry table and a cubic.

The algorithm, its integer widths and its error bound are in docs/numerics.md ("Special
functions"); golden/special.py is the reference that follows the same steps. The constants are
made here from exact decimal expansions and integer roots (not imported from golden/: the two
are written separately and must agree bit for bit).
"""

from __future__ import annotations

from fractions import Fraction
from math import isqrt

from amaranth.hdl import Array, Cat, Const, Module, Mux, Signal, signed

from .fp32 import CANONICAL_NAN, POS_INF, is_nan

__all__ = ["fp32_exp", "fp32_recip", "fp32_rsqrt", "EXP_TABLE", "RECIP_SEED", "RSQRT_SEED"]

_LOG2E = Fraction("1.44269504088896340735992468100189213742664595415298593413544940693")
_LN2 = Fraction("0.693147180559945309417232121458176568075500134360255254120680009493")
LOG2E_HI = int(_LOG2E * 2**31)  # log2(e) = LOG2E_HI * 2**-31 + LOG2E_LO * 2**-63
LOG2E_LO = round((_LOG2E * 2**31 - LOG2E_HI) * 2**32)
LN2_Q32 = round(_LN2 * 2**32)
ONE_THIRD_Q32 = round(Fraction(2**32, 3))


def _pow2_64ths() -> tuple[int, ...]:
    """round(2**(i/64) * 2**31) for i = 0..63: six integer square roots of 2**(i + 64*31)."""
    out = []
    for i in range(64):
        v = 2 ** (i + 64 * 31) << (64 * 40)  # 40 guard bits through the roots
        for _ in range(6):
            v = isqrt(v)
        q, r = divmod(v, 1 << 40)
        out.append(q + (r >= 1 << 39))
    return tuple(out)


EXP_TABLE = _pow2_64ths()


def fp32_exp(m: Module, x, name: str = "exp"):
    """exp(x): +Inf above the fp32 range, +0 where the result would be below 2**-126 (no
    subnormal results), exp(+-0) = 1, exp(-Inf) = +0, NaN -> canonical NaN."""
    sign, e, frac = x[31], x[23:31], x[0:23]
    mant24 = Cat(frac, e != 0)
    big = e >= 134  # |x| >= 128
    e_eff = Mux(e == 0, 1, Mux(e > 133, 133, e))
    s = Signal(8, name=f"{name}_s")  # 16..148
    m.d.comb += s.eq(149 - e_eff)
    # 1. Y = |x| * log2(e) with 32 fraction bits
    p_hi, p_lo = Signal(56, name=f"{name}_phi"), Signal(56, name=f"{name}_plo")
    m.d.comb += [p_hi.eq(mant24 * LOG2E_HI), p_lo.eq(mant24 * LOG2E_LO)]
    y = Signal(41, name=f"{name}_y")
    m.d.comb += y.eq((p_hi >> s) + (p_lo >> (s + 32)))
    # 2. +-Y = n + f: n = floor, f in [0, 1) with 32 bits
    up = Signal(10, name=f"{name}_ceil")
    m.d.comb += up.eq(Mux(sign, y + 0xFFFFFFFF, y) >> 32)
    n = Signal(signed(11), name=f"{name}_n")
    m.d.comb += n.eq(Mux(sign, -up.as_signed(), up.as_signed()))
    f = Signal(32, name=f"{name}_f")
    m.d.comb += f.eq(Mux(sign, (-y)[:32], y[:32]))
    # 3. 2**f = T[f[26:32]] * 2**r, 2**r ~ 1 + u + u**2/2 + u**3/6 with u = r * ln 2
    r = f[:26]
    u, u2, u3 = Signal(32, name=f"{name}_u"), Signal(32, name=f"{name}_u2"), Signal(32, name=f"{name}_u3")
    m.d.comb += [u.eq((r * LN2_Q32) >> 32), u2.eq((u * u) >> 33),
                 u3.eq((((u2 * u) >> 32) * ONE_THIRD_Q32) >> 32)]
    p = Signal(33, name=f"{name}_p")  # Q.31
    m.d.comb += p.eq(((1 << 32) + u + u2 + u3) >> 1)
    t = Signal(32, name=f"{name}_t")
    m.d.comb += t.eq(Array([Const(v, 32) for v in EXP_TABLE])[f[26:32]])
    mant = Signal(64, name=f"{name}_mant")  # Q.62
    m.d.comb += mant.eq(t * p)
    # 4. 24 significant bits, nearest even, exponent n
    frac23, off = _round_at(m, mant, 62, name)
    biased = Signal(signed(12), name=f"{name}_biased")
    m.d.comb += biased.eq(n + off + 127)
    normal = Cat(frac23, biased[:8])
    out = Signal(32, name=f"{name}_out")
    with m.If(is_nan(x)):
        m.d.comb += out.eq(CANONICAL_NAN)
    with m.Elif(big):
        m.d.comb += out.eq(Mux(sign, 0, POS_INF))
    with m.Elif(biased >= 255):
        m.d.comb += out.eq(POS_INF)
    with m.Elif(biased <= 0):
        m.d.comb += out.eq(0)
    with m.Else():
        m.d.comb += out.eq(normal)
    return out


# ---- reciprocal and reciprocal square root ----------------------------------------------------

def _recip_seed() -> tuple[int, ...]:
    """round(2**31 / (1 + (i + 0.5)/256)), i = 0..255."""
    return tuple(round(Fraction(2**31) / (1 + Fraction(2 * i + 1, 512))) for i in range(256))


def _rsqrt_seed() -> tuple[int, ...]:
    """round(2**31 / sqrt(w)) at w = (1 + (i + 0.5)/128) * 2**odd, index odd * 128 + i."""
    out = []
    for odd in (0, 1):
        for i in range(128):
            v = isqrt((2**62 * 256 << 40) // ((257 + 2 * i) << odd))
            q, r = divmod(v, 1 << 20)
            out.append(q + (r >= 1 << 19))
    return tuple(out)


RECIP_SEED = _recip_seed()
RSQRT_SEED = _rsqrt_seed()


def _round_at(m: Module, x, point: int, name: str):
    """x * 2**-point in [1, 4) -> (23 fraction bits, exponent offset 0..2), nearest even: the
    one rounding every special function ends with (exp: Q.62, recip and rsqrt: Q.31 in [0.5, 2),
    so their offset is one less)."""
    hi = point + 1  # the bit that says the value is in [2, 4)
    top = x[hi]
    q = Mux(top, x[hi - 23:hi + 1], x[hi - 24:hi])
    rnd = Mux(top, x[hi - 24], x[hi - 25])
    sticky = Mux(top, x[:hi - 24] != 0, x[:hi - 25] != 0)
    q2 = Signal(25, name=f"{name}_q")
    m.d.comb += q2.eq(q + (rnd & (sticky | q[0])))
    carry = q2[24]
    off = Signal(signed(3), name=f"{name}_off")  # signed: the callers subtract from it
    m.d.comb += off.eq(top + carry)
    return Mux(carry, 0, q2[:23]), off


def fp32_recip(m: Module, v, name: str = "recip"):
    """1/v: a seed from the top 8 fraction bits, two Newton steps in Q.31, one rounding.
    Subnormal inputs read as zero (+-Inf), results below 2**-126 flush to +-0, 1/+-Inf = +-0."""
    sign, e, frac = v[31], v[23:31], v[0:23]
    mant = Cat(frac, Const(1, 1))
    x = Signal(32, name=f"{name}_x0")
    m.d.comb += x.eq(Array([Const(c, 32) for c in RECIP_SEED])[frac[15:23]])
    for step in range(2):
        t = Signal(33, name=f"{name}_t{step}")
        m.d.comb += t.eq((1 << 32) - ((mant * x) >> 23))
        nx = Signal(32, name=f"{name}_x{step + 1}")
        m.d.comb += nx.eq((x * t) >> 31)
        x = nx
    f, off = _round_at(m, x, 30, name)  # Q.31 in [0.5, 2) is Q.30 in [1, 4)
    biased = Signal(signed(11), name=f"{name}_biased")
    m.d.comb += biased.eq(253 - e + off)
    out = Signal(32, name=f"{name}_out")
    with m.If(e == 255):
        m.d.comb += out.eq(Mux(frac != 0, CANONICAL_NAN, Cat(Const(0, 31), sign)))
    with m.Elif(e == 0):
        m.d.comb += out.eq(Cat(Const(POS_INF, 31), sign))
    with m.Elif(biased <= 0):
        m.d.comb += out.eq(Cat(Const(0, 31), sign))
    with m.Else():
        m.d.comb += out.eq(Cat(f, biased[:8], sign))
    return out


def fp32_rsqrt(m: Module, v, name: str = "rsqrt"):
    """1/sqrt(v): v = w * 2**(2p), w in [1, 4); a seed from the exponent's parity and the top 7
    fraction bits, two Newton steps in Q.31, one rounding. Subnormals read as zero:
    rsqrt(+-0) = +-Inf; negative numbers and NaN give the canonical NaN; rsqrt(+Inf) = +0."""
    sign, e, frac = v[31], v[23:31], v[0:23]
    k = Signal(signed(9), name=f"{name}_k")
    m.d.comb += k.eq(e - 127)
    odd = k[0]
    w = Signal(25, name=f"{name}_w")
    m.d.comb += w.eq(Mux(odd, Cat(Const(0, 1), frac, Const(1, 1)), Cat(frac, Const(1, 1))))
    y = Signal(32, name=f"{name}_y0")
    m.d.comb += y.eq(Array([Const(c, 32) for c in RSQRT_SEED])[Cat(frac[16:23], odd)])
    for step in range(2):
        y2 = Signal(32, name=f"{name}_sq{step}")
        m.d.comb += y2.eq((y * y) >> 31)
        t = Signal(34, name=f"{name}_t{step}")
        m.d.comb += t.eq((3 << 31) - ((w * y2) >> 23))
        ny = Signal(32, name=f"{name}_y{step + 1}")
        m.d.comb += ny.eq((y * t) >> 32)
        y = ny
    f, off = _round_at(m, y, 30, name)
    biased = Signal(signed(11), name=f"{name}_biased")
    m.d.comb += biased.eq(126 - (k >> 1) + off)
    out = Signal(32, name=f"{name}_out")
    with m.If(e == 0):
        m.d.comb += out.eq(Cat(Const(POS_INF, 31), sign))
    with m.Elif(sign | ((e == 255) & (frac != 0))):
        m.d.comb += out.eq(CANONICAL_NAN)
    with m.Elif(e == 255):
        m.d.comb += out.eq(0)
    with m.Else():
        m.d.comb += out.eq(Cat(f, biased[:8], Const(0, 1)))
    return out
