"""The vector unit: VEC(op, a, b, count, dst) over accumulator words, LANES fp32 lanes wide.

Word ``a + i`` and the second operand (word ``b + i``, word ``b`` for every ``i``, or lane 0 of
word ``b`` in every lane: ``VecB``) go through ``op`` lane by lane into word ``dst + i``. One
word per cycle: the unit has two read ports of its own into the accumulator SRAM (``a`` and
``b``), reads word ``i`` in one cycle, computes in the next (the fp32 datapath of
``rtl/fp32.py`` is combinational) and writes the registered result in the third. So ``dst ==
a`` (in place) is safe: a word is read before its result is written; a broadcast ``b`` is read
once, in the first cycle, so it may lie in the destination. The arithmetic is in
docs/numerics.md; ``golden/vector.py`` is its reference.
"""

from __future__ import annotations

from amaranth.hdl import Cat, Const, Instance, Module, Mux, Signal, signed
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from .config import ChipConfig
from .fp32 import CANONICAL_NAN, fp32_add, fp32_max, fp32_min, fp32_mul, is_nan, round_to_fp32
from .isa import REQUANT_PARAM, VecB, VecDst, VecOp
from .ports import acc_port_members
from .revisions import Defect
from .special import fp32_exp, fp32_recip, fp32_rsqrt

__all__ = ["LANE_MODULE", "VectorLane", "VectorUnit"]

LANE_MODULE = "fl_vec_lane"  # the module name of a lane in a Verilog build


def _to_int8(m: Module, v, name: str):
    """int8 of fp32 ``v``: nearest, ties to even; saturating at -128 and 127; NaN -> 0."""
    sign, e, frac = v[31], v[23:31], v[0:23]
    mant = Cat(frac, Const(1, 1))
    sh = Signal(5, name=f"{name}_sh")  # 150 - e for 126 <= e <= 133: 17..24
    m.d.comb += sh.eq(150 - Mux(e < 126, 126, Mux(e > 133, 133, e)))
    whole = Signal(9, name=f"{name}_whole")
    m.d.comb += whole.eq(mant >> sh)
    sh1 = Signal(5, name=f"{name}_sh1")
    m.d.comb += sh1.eq(sh - 1)
    rnd = (mant >> sh1)[0]
    sticky = (mant & ((Const(1, 25) << sh1) - 1)[:24]) != 0
    mag = Signal(10, name=f"{name}_mag")
    m.d.comb += mag.eq(Mux(e < 126, 0, whole + (rnd & (sticky | whole[0]))))
    big = e > 133  # |v| >= 256 (Inf included)
    out = Signal(8, name=f"{name}_i8")
    with m.If(is_nan(v)):
        m.d.comb += out.eq(0)
    with m.Elif(sign):
        m.d.comb += out.eq(Mux(big | (mag >= 128), 0x80, (-mag)[:8]))
    with m.Else():
        m.d.comb += out.eq(Mux(big | (mag >= 127), 127, mag[:8]))
    return out


# OCP FP8: (exponent bits, mantissa bits, bias, largest finite code); NaN is 0x7F in both
FP8_FORMATS = {"e4m3": (4, 3, 7, 0x7E), "e5m2": (5, 2, 15, 0x7B)}
FP8_NAN = 0x7F


def _to_fp8_format(m: Module, v, fmt: str, name: str):
    """FP8 code of fp32 ``v``: round to nearest even at the format's quantum (subnormals kept),
    saturating at the largest finite value (Inf included), NaN -> 0x7F (sign kept)."""
    _, man, bias, top = FP8_FORMATS[fmt]
    emin = 1 - bias
    sign, e, frac = v[31], v[23:31], v[0:23]
    mant24 = Cat(frac, e != 0)
    e_eff = Mux(e == 0, 1, e)
    # the quantum is 2**(max(E, emin) - man), E = e_eff - 127: shift mant24 right by
    # 23 - man + max(0, emin + 127 - e_eff), at most 26 (everything below the round bit)
    under = Signal(8, name=f"{name}_under")
    m.d.comb += under.eq(Mux(e_eff < emin + 127, emin + 127 - e_eff, 0))
    r = Signal(5, name=f"{name}_r")
    m.d.comb += r.eq(Mux(under > 26 - (23 - man), 26, 23 - man + under))
    r1 = Signal(5, name=f"{name}_r1")
    m.d.comb += r1.eq(r - 1)
    q = Signal(25, name=f"{name}_q")
    m.d.comb += q.eq(mant24 >> r)
    rnd = (mant24 >> r1)[0]
    sticky = (mant24 & ((Const(1, 26) << r1) - 1)[:24]) != 0
    qr = Signal(6, name=f"{name}_qr")
    m.d.comb += qr.eq(q + (rnd & (sticky | q[0])))
    # code = ((max(E, emin) + bias - 1) << man) + qr: a carry out of the mantissa steps the exponent
    ex = Signal(9, name=f"{name}_ex")  # max(E, emin) + bias - 1 >= 0
    m.d.comb += ex.eq(Mux(e_eff < emin + 127, 0, e_eff - 127 + bias - 1))
    code = Signal(12, name=f"{name}_code")
    m.d.comb += code.eq((ex << man) + qr)
    out = Signal(8, name=f"{name}_f8")
    with m.If(is_nan(v)):
        m.d.comb += out.eq(Cat(Const(FP8_NAN, 7), sign))
    with m.Elif(code > top):
        m.d.comb += out.eq(Cat(Const(top, 7), sign))
    with m.Else():
        m.d.comb += out.eq(Cat(code[:7], sign))
    return out


def _requant(m: Module, a, p, name: str):
    """int8 of int32 ``a`` by the REQUANT_PARAM word ``p``: the exact product a * mult, rounded
    half away from zero at bit ``shift`` (magnitude >> shift, plus the bit just below), saturated
    to [-128, 127] ([0, 127] with relu); sign-extended to 32 bits."""
    par = REQUANT_PARAM(p)
    prod = Signal(signed(56), name=f"{name}_prod")
    m.d.comb += prod.eq(a.as_signed() * par.mult)
    neg = prod[55]
    mag = Signal(56, name=f"{name}_mag")
    m.d.comb += mag.eq(Mux(neg, -prod, prod))
    sh1 = Signal(6, name=f"{name}_sh1")
    m.d.comb += sh1.eq(par.shift - 1)
    r = Signal(57, name=f"{name}_r")
    m.d.comb += r.eq((mag >> par.shift) + Mux(par.shift == 0, 0, (mag >> sh1)[0]))
    v = Signal(signed(8), name=f"{name}_v")
    with m.If(~neg):
        m.d.comb += v.eq(Mux(r > 127, 127, r[:8]))
    with m.Elif(par.relu):
        m.d.comb += v.eq(0)
    with m.Else():
        m.d.comb += v.eq(Mux(r > 128, -128, (-r)[:8]))
    out = Signal(32, name=f"{name}_rq")
    m.d.comb += out.eq(v)  # sign-extends
    return out


def _lane(m: Module, op: Signal, a, b, name: str, defects: frozenset[Defect] = frozenset(), e5m2=0):
    """One lane: every op's result, and the one ``op`` selects."""
    # one adder for FADD, FSUB and EXPSUB's difference: b's sign flipped for the subtractions
    negate_b = (op == VecOp.FSUB) | (op == VecOp.EXPSUB)
    add = sub = fp32_add(m, a, b ^ Mux(negate_b, 1 << 31, 0), name=f"{name}_add")
    # Defect VECTOR_EXPSUB_UNROUNDED: the fused path has a subtractor of its own, tapped before
    # the rounding increment
    exp_sub = (fp32_add(m, a, b ^ (1 << 31), name=f"{name}_xsub", nearest=False)
               if Defect.VECTOR_EXPSUB_UNROUNDED in defects else sub)
    neg = a[31]
    i2f = round_to_fp32(m, Mux(neg, -a.as_signed(), a)[:32], neg, 0, name=f"{name}_i2f")
    # the fused ops share the datapath: DEQ multiplies the converted int32, EXPSUB exponentiates the difference
    mul = fp32_mul(m, Mux(op == VecOp.DEQ, i2f, a), b, name=f"{name}_mul")
    mx = fp32_max(m, a, b, name=f"{name}_max")
    mn = fp32_min(m, a, b, name=f"{name}_min")
    relu = Mux(is_nan(a), CANONICAL_NAN, Mux(neg, 0, a))
    exp = fp32_exp(m, Mux(op == VecOp.EXPSUB, exp_sub, a), name=f"{name}_exp")
    recip = fp32_recip(m, a, name=f"{name}_recip")
    rsqrt = fp32_rsqrt(m, a, name=f"{name}_rsqrt")
    cvt_i8 = _to_int8(m, mul, name=f"{name}_cvt")  # of a * b
    cvt_f8 = Mux(e5m2, _to_fp8_format(m, mul, "e5m2", f"{name}_e5m2"), _to_fp8_format(m, mul, "e4m3", f"{name}_e4m3"))
    iadd = Signal(32, name=f"{name}_iadd")
    m.d.comb += iadd.eq(a + b)
    requant = _requant(m, a, b, name=f"{name}")
    out = Signal(32, name=f"{name}_out")
    with m.Switch(op):
        for code, value in ((VecOp.FADD, add), (VecOp.FSUB, sub), (VecOp.FMUL, mul), (VecOp.FMAX, mx),
                            (VecOp.FMIN, mn), (VecOp.I2F, i2f), (VecOp.RELU, relu), (VecOp.EXP, exp), (VecOp.RECIP, recip),
                            (VecOp.RSQRT, rsqrt), (VecOp.CVT_I8, cvt_i8), (VecOp.DEQ, mul), (VecOp.EXPSUB, exp),
                            (VecOp.IADD, iadd), (VecOp.REQUANT, requant), (VecOp.CVT_F8, cvt_f8)):
            with m.Case(code):
                m.d.comb += out.eq(value)
    return out


class VectorLane(wiring.Component):
    """One lane (combinational): ``out`` is ``op`` of ``a`` and ``b``.

    Why a component: the unit repeats it LANES times. A Verilog build converts it once, as
    :data:`LANE_MODULE`, and instances it in every lane (``VectorUnit(shared_lane=True)``), as
    the engine does its PE (rtl/pe.py): most of the default chip's elaboration was four copies
    of this logic."""

    def __init__(self, defects: frozenset[Defect] = frozenset()):
        self.defects = frozenset(defects)
        super().__init__({"op": In(4), "a": In(32), "b": In(32), "e5m2": In(1), "out": Out(32)})

    def elaborate(self, platform):
        m = Module()
        m.d.comb += self.out.eq(_lane(m, self.op, self.a, self.b, "lane", self.defects, self.e5m2))
        return m


class VectorUnit(wiring.Component):
    """Elementwise fp32 operations over consecutive accumulator words.

    Members
    -------
    start : In(1)
        Accept the VEC on ``op``, ``b_form``, ``a``, ``b``, ``count``, ``dst`` (only while not ``busy``).
    busy : Out(1)
        From ``start`` until the last result is written.
    started, finished : Out(1)
        Pulses: a VEC accepted; its last result being written.
    elems : Out(8)
        Lanes written this cycle (the VEC_ELEMS counter).
    b_rd_addr, b_rd_data
        The second read port (operand ``b``); ``acc_rd_*`` reads ``a``.
    """

    def __init__(self, config: ChipConfig, defects: frozenset[Defect] = frozenset(), shared_lane: bool = False):
        self.config = config
        self.defects = frozenset(defects)
        # Verilog builds: every lane an instance of LANE_MODULE, converted once (instanced_modules)
        self.shared_lane = shared_lane
        cw = (config.acc_depth - 1).bit_length()
        super().__init__(
            {
                "start": In(1),
                "op": In(4),
                "b_form": In(2),
                "dst_sram": In(2),  # VecDst
                "a": In(16),
                "b": In(16),
                "count": In(16),
                "dst": In(16),
                "e5m2": In(1),  # CVT_F8's format (0: E4M3)
                "busy": Out(1),
                "started": Out(1),
                "finished": Out(1),
                "elems": Out(8),
                "b_rd_addr": Out(cw),
                "b_rd_data": In(config.acc_word_bits),
                **acc_port_members(config),
                # conversions: words of LANES int8 into the A or B SRAM
                "op_wr_en": Out(1),
                "op_wr_b": Out(1),  # 1: B, 0: A
                "op_wr_addr": Out(16),
                "op_wr_data": Out(8 * config.lanes),
            }
        )

    def instanced_modules(self) -> dict:
        """Module name -> design of what this unit instances rather than contains (its lane, when
        shared): a netlist of it converts each once and appends it."""
        return {LANE_MODULE: VectorLane(self.defects)} if self.shared_lane else {}

    def _place_lane(self, m: Module, j: int, op, x, y, e5m2):
        """Lane ``j`` of ``op`` on ``x`` and ``y``: an instance of the shared module, or a submodule."""
        out = Signal(32, name=f"lane{j}_out")
        if self.shared_lane:
            m.submodules[f"lane{j}"] = Instance(LANE_MODULE, i_op=op, i_a=x, i_b=y, i_e5m2=e5m2, o_out=out)
        else:
            lane = m.submodules[f"lane{j}"] = VectorLane(self.defects)
            m.d.comb += [lane.op.eq(op), lane.a.eq(x), lane.b.eq(y), lane.e5m2.eq(e5m2), out.eq(lane.out)]
        return out

    def elaborate(self, platform):
        m = Module()
        lanes = self.config.lanes

        op, b_form, dst_sram, e5m2 = Signal(4), Signal(2), Signal(2), Signal()
        a_ptr, b_ptr, dst = Signal(16), Signal(16), Signal(16)
        left = Signal(17)
        running = Signal()
        with m.If(self.start & ~self.busy):
            m.d.sync += [op.eq(self.op), b_form.eq(self.b_form), dst_sram.eq(self.dst_sram), e5m2.eq(self.e5m2),
                         a_ptr.eq(self.a),
                         b_ptr.eq(self.b),
                         left.eq(self.count), dst.eq(self.dst), running.eq(1)]

        issue = Signal()
        m.d.comb += [issue.eq(running & (left != 0)), self.acc_rd_addr.eq(a_ptr), self.b_rd_addr.eq(b_ptr)]
        with m.If(issue):
            m.d.sync += [a_ptr.eq(a_ptr + 1), left.eq(left - 1)]
            with m.If(b_form == VecB.VECTOR):
                m.d.sync += b_ptr.eq(b_ptr + 1)

        # stage 1: the read data is here; compute, register the result
        v1, first1, last1 = Signal(), Signal(), Signal()
        count = Signal(16)
        with m.If(self.start & ~self.busy):
            m.d.sync += count.eq(self.count)
        m.d.sync += [v1.eq(issue), first1.eq(issue & (left == count)), last1.eq(issue & (left == 1))]
        # A broadcast b (LANE, SCALAR) is the word as read in the first cycle, held: a result
        # written over word b later does not change the operand.
        b_hold = Signal(len(self.b_rd_data))
        with m.If(v1 & first1):
            m.d.sync += b_hold.eq(self.b_rd_data)
        b_word = Mux((b_form == VecB.VECTOR) | first1, self.b_rd_data, b_hold)
        scalar = b_word[:32]
        fold = b_form == VecB.FOLD
        # FOLD: the running result (the stage register ``res``) is the first operand, the word
        # read the second; the first word passes through
        res, v2, last2, w_addr = Signal(len(self.acc_wr_data)), Signal(), Signal(), Signal(16)
        outs = []
        for j in range(lanes):
            a_j = self.acc_rd_data.word_select(j, 32)
            b_j = Mux(b_form == VecB.SCALAR, scalar, b_word.word_select(j, 32))
            x_j = Mux(fold, res.word_select(j, 32), a_j)
            y_j = Mux(fold, a_j, b_j)
            outs.append(self._place_lane(m, j, op, x_j, y_j, e5m2))
        to_operand = dst_sram != VecDst.ACC
        with m.If(v1):
            m.d.sync += res.eq(Mux(fold & first1, self.acc_rd_data,
                                   Mux(to_operand, Cat(*[o[:8] for o in outs]), Cat(*outs))))
        m.d.sync += [v2.eq(v1), last2.eq(last1)]
        with m.If(v1 & ~fold):
            m.d.sync += dst.eq(dst + 1)
        m.d.sync += w_addr.eq(dst)

        # stage 2: write (a FOLD writes once, after its last word)
        write = v2 & (~fold | last2)
        m.d.comb += [self.acc_wr_en.eq(write & ~to_operand), self.acc_wr_addr.eq(w_addr), self.acc_wr_data.eq(res),
                     self.op_wr_en.eq(write & to_operand), self.op_wr_b.eq(dst_sram == VecDst.B),
                     self.op_wr_addr.eq(w_addr), self.op_wr_data.eq(res[:8 * lanes]),
                     self.elems.eq(Mux(v2, lanes, 0))]
        with m.If(v2 & last2):
            m.d.sync += running.eq(0)
        m.d.comb += [self.busy.eq(running), self.started.eq(self.start & ~self.busy), self.finished.eq(v2 & last2)]
        return m
