"""IEEE binary32 arithmetic as combinational Amaranth logic: exact-integer-to-fp32 rounding,
fp32 addition and multiplication (all round-to-nearest-even with full subnormals), and the
maximum / minimum of two fp32 values.

All are builders (functions that add logic to a module and return a Value), used by the
matrix engine's block-finalize stage and its write-back, and by the vector unit. The semantics
are in docs/numerics.md.
"""

from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Signal, signed, unsigned

__all__ = ["CANONICAL_NAN", "POS_INF", "round_to_fp32", "fp32_add", "fp32_mul", "fp32_max", "fp32_min", "is_nan"]

CANONICAL_NAN = 0x7FC00000
POS_INF = 0x7F800000


def _msb_index(m: Module, x: Signal, name: str) -> Signal:
    """Index of the highest set bit of ``x`` (0 when x == 0), as a priority encoder built as a
    tree: each level asks whether the upper half of what is left has a bit set and keeps that
    half if so (log2 levels of muxes, instead of a chain of one test per bit that a simulator
    walks bit by bit every cycle)."""
    n = max(2, len(x))
    levels = (n - 1).bit_length()
    v = Signal(1 << levels, name=f"{name}_v")
    m.d.comb += v.eq(x)
    bits = []
    for lvl in range(levels):
        half = 1 << (levels - 1 - lvl)
        upper = Signal(name=f"{name}_l{lvl}")
        m.d.comb += upper.eq(v[half:2 * half] != 0)
        nxt = Signal(half, name=f"{name}_v{lvl}")
        m.d.comb += nxt.eq(Mux(upper, v[half:2 * half], v[:half]))
        bits.append(upper)
        v = nxt
    idx = Signal(range(n), name=name)
    m.d.comb += idx.eq(Cat(*reversed(bits)))
    return idx


def round_to_fp32(m: Module, mag, neg, exp2, name: str = "cvt", nearest: bool = True, sticky_in=None):
    """fp32 bits of ``(-1)**neg * mag * 2**exp2`` rounded to nearest even (``nearest=False``:
    truncated toward zero, the rounding increment left out: only a defect builds that).

    ``mag`` is an unsigned integer Value, ``exp2`` a signed Value. An exact zero gives +0; a
    result at or beyond 2**128 * (1 - 2**-25) gives Inf.

    ``sticky_in``: the true magnitude is ``mag`` plus a nonzero fraction below its last bit
    (bits shifted out before, known nonzero). Only valid where the result's last place lies
    above ``mag``'s last bit, which holds whenever ``mag >= 2**25`` (the caller's promise): the
    fraction then only decides ties.

    Every shift is a right shift or stays within 55 bits, so for ``mag`` of up to 64 bits a
    simulator evaluates it in machine words.
    """
    w = len(mag)
    mag_s = Signal(w, name=f"{name}_mag")
    m.d.comb += mag_s.eq(mag)
    p = _msb_index(m, mag_s, f"{name}_p")
    e2 = Signal(signed(13), name=f"{name}_e2")
    m.d.comb += e2.eq(exp2)
    # Weight of the result's last place: 24 significant bits, but never below 2**-149.
    lsb = Signal(signed(14), name=f"{name}_lsb")
    m.d.comb += lsb.eq(Mux(p + e2 - 23 > -149, p + e2 - 23, -149))
    r = Signal(signed(15), name=f"{name}_r")  # right shift of mag (negative: left shift)
    m.d.comb += r.eq(lsb - e2)
    q = Signal(26, name=f"{name}_q")
    rnd = Signal(name=f"{name}_round")
    sticky = Signal(name=f"{name}_sticky")
    extra = Const(0) if sticky_in is None else sticky_in
    big = w + 2
    with m.If(r <= 0):
        # r >= p - 23 >= -23 and p <= 23 here (lsb <= e2 needs p <= 23, or the -149 floor with a
        # smaller p): mag < 2**24 and the left shift leaves it below 2**24
        m.d.comb += q.eq((mag_s[:24] << (-r).as_unsigned()[:5])[:26])
    with m.Elif(r >= big):
        m.d.comb += [q.eq(0), rnd.eq(0), sticky.eq((mag_s != 0) | extra)]
    with m.Else():
        ru = r.as_unsigned()[: (big - 1).bit_length()]
        ru1 = Signal(len(ru), name=f"{name}_ru1")
        m.d.comb += ru1.eq(ru - 1)
        below = Signal(w, name=f"{name}_below")  # ru1 ones: the bits under the rounding bit
        m.d.comb += below.eq(Const((1 << w) - 1, w) >> (w - ru1)[:len(ru)])
        m.d.comb += [
            q.eq((mag_s >> ru)[:26]),
            rnd.eq((mag_s >> ru1)[0]),
            sticky.eq(((mag_s & below) != 0) | extra),
        ]
    qr = Signal(26, name=f"{name}_qr")
    m.d.comb += qr.eq(q + (rnd & (sticky | q[0])) if nearest else q)
    bits = Signal(unsigned(40), name=f"{name}_bits")
    m.d.comb += bits.eq(((lsb + 149).as_unsigned()[:10] << 23) + qr)
    mag32 = Signal(31, name=f"{name}_mag32")
    m.d.comb += mag32.eq(Mux(mag_s == 0, 0, Mux(bits >= POS_INF, POS_INF, bits[:31])))
    out = Signal(32, name=f"{name}_out")
    m.d.comb += out.eq(Cat(mag32, neg & (mag_s != 0)))
    return out


def fp32_add(m: Module, a, b, name: str = "add", nearest: bool = True):
    """IEEE binary32 ``a + b`` (bit patterns in, bit pattern out), RNE, canonical NaN
    (``nearest=False``: the exact sum truncated instead, see :func:`round_to_fp32`)."""
    sa, ea, fa = a[31], a[23:31], a[0:23]
    sb, eb, fb = b[31], b[23:31], b[0:23]
    a_nan = (ea == 255) & (fa != 0)
    b_nan = (eb == 255) & (fb != 0)
    a_inf = (ea == 255) & (fa == 0)
    b_inf = (eb == 255) & (fb == 0)
    ma = Cat(fa, ea != 0)  # 24-bit significands, hidden bit for normals
    mb = Cat(fb, eb != 0)
    xa = Mux(ea == 0, 1, ea)
    xb = Mux(eb == 0, 1, eb)
    a_big = Signal(name=f"{name}_a_big")
    m.d.comb += a_big.eq(xa >= xb)
    diff = Signal(9, name=f"{name}_diff")
    m.d.comb += diff.eq(Mux(a_big, xa - xb, xb - xa))
    xmin = Mux(a_big, xb, xa)
    # Exact sum when the exponents are close; otherwise the smaller operand is below a quarter of
    # the larger one's last place and RNE returns the larger operand unchanged.
    sh = diff[:5]
    va = Signal(signed(52), name=f"{name}_va")
    vb = Signal(signed(52), name=f"{name}_vb")
    m.d.comb += [
        va.eq(Mux(a_big, ma << sh, ma)),
        vb.eq(Mux(a_big, mb, mb << sh)),
    ]
    total = Signal(signed(53), name=f"{name}_total")
    m.d.comb += total.eq(Mux(sa, -va, va) + Mux(sb, -vb, vb))
    neg = total < 0
    mag = Signal(52, name=f"{name}_tmag")
    m.d.comb += mag.eq(Mux(neg, -total, total))
    exact = round_to_fp32(m, mag, neg, xmin - 150, name=f"{name}_cvt", nearest=nearest)
    out = Signal(32, name=f"{name}_out")
    with m.If(a_nan | b_nan | (a_inf & b_inf & (sa != sb))):
        m.d.comb += out.eq(CANONICAL_NAN)
    with m.Elif(a_inf):
        m.d.comb += out.eq(a)
    with m.Elif(b_inf):
        m.d.comb += out.eq(b)
    with m.Elif(diff >= 26):
        m.d.comb += out.eq(Mux(a_big, a, b))
    with m.Elif(total == 0):
        m.d.comb += out.eq(Cat(Const(0, 31), sa & sb))  # x + (-x) = +0; -0 + -0 = -0
    with m.Else():
        m.d.comb += out.eq(exact)
    return out


def is_nan(x):
    """``x`` (fp32 bits) is a NaN."""
    return (x[23:31] == 255) & (x[0:23] != 0)


def fp32_mul(m: Module, a, b, name: str = "mul"):
    """IEEE binary32 ``a * b``, RNE, full subnormals, canonical NaN; the sign of a zero or
    infinite product is the XOR of the signs (``0 * Inf`` is NaN)."""
    sa, ea, fa = a[31], a[23:31], a[0:23]
    sb, eb, fb = b[31], b[23:31], b[0:23]
    a_inf = (ea == 255) & (fa == 0)
    b_inf = (eb == 255) & (fb == 0)
    a_zero = a[0:31] == 0
    b_zero = b[0:31] == 0
    sign = sa ^ sb
    # value = ma * 2**(xa - 150) * mb * 2**(xb - 150): the exact 48-bit product, rounded once
    ma = Cat(fa, ea != 0)
    mb = Cat(fb, eb != 0)
    xa = Mux(ea == 0, 1, ea)
    xb = Mux(eb == 0, 1, eb)
    prod = Signal(48, name=f"{name}_prod")
    m.d.comb += prod.eq(ma * mb)
    e2 = Signal(signed(11), name=f"{name}_e2")
    m.d.comb += e2.eq(xa + xb - 300)
    exact = round_to_fp32(m, prod, sign, e2, name=f"{name}_cvt")
    out = Signal(32, name=f"{name}_out")
    with m.If(is_nan(a) | is_nan(b) | (a_inf & b_zero) | (b_inf & a_zero)):
        m.d.comb += out.eq(CANONICAL_NAN)
    with m.Elif(a_inf | b_inf):
        m.d.comb += out.eq(Cat(Const(POS_INF, 31), sign))
    with m.Elif(prod == 0):
        m.d.comb += out.eq(Cat(Const(0, 31), sign))
    with m.Else():
        m.d.comb += out.eq(exact)
    return out


def _order_key(x):
    """A signed integer that orders non-NaN fp32 values as the reals do (-0 and +0 equal)."""
    mag = Cat(x[0:31], Const(0, 1)).as_signed()  # 32-bit, non-negative
    return Mux(x[31], -mag, mag)


def _pick(m: Module, a, b, larger: bool, name: str):
    ka, kb = Signal(signed(32), name=f"{name}_ka"), Signal(signed(32), name=f"{name}_kb")
    m.d.comb += [ka.eq(_order_key(a)), kb.eq(_order_key(b))]
    out = Signal(32, name=f"{name}_out")
    a_wins = (ka > kb) if larger else (ka < kb)
    b_wins = (kb > ka) if larger else (kb < ka)
    # equal keys: the same value, or +0 and -0 (maximum takes +0, minimum -0)
    tie = Mux(a[31] == (0 if larger else 1), a, b)
    with m.If(is_nan(a) | is_nan(b)):
        m.d.comb += out.eq(CANONICAL_NAN)
    with m.Else():
        m.d.comb += out.eq(Mux(a_wins, a, Mux(b_wins, b, tie)))
    return out


def fp32_max(m: Module, a, b, name: str = "max"):
    """IEEE 754-2019 ``maximum``: NaN if either is NaN (canonical), +0 above -0."""
    return _pick(m, a, b, True, name)


def fp32_min(m: Module, a, b, name: str = "min"):
    """IEEE 754-2019 ``minimum``: NaN if either is NaN (canonical), -0 below +0."""
    return _pick(m, a, b, False, name)
