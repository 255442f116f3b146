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

__all__ = ["fp32_exp", "EXP_TABLE"]

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
    top = mant[63]
    q = Mux(top, mant[40:64], mant[39:63])
    rnd = Mux(top, mant[39], mant[38])
    sticky = Mux(top, mant[:39] != 0, mant[:38] != 0)
    q2 = Signal(25, name=f"{name}_q")
    m.d.comb += q2.eq(q + (rnd & (sticky | q[0])))
    carry = q2[24]
    biased = Signal(signed(12), name=f"{name}_biased")
    m.d.comb += biased.eq(n + top + carry + 127)
    normal = Cat(Mux(carry, 0, q2[:23]), biased[:8])
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
