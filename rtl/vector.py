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

from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from .config import ChipConfig
from .fp32 import CANONICAL_NAN, fp32_add, fp32_max, fp32_min, fp32_mul, is_nan, round_to_fp32
from .isa import VecB, VecOp
from .ports import acc_port_members
from .revisions import Defect
from .special import fp32_exp, fp32_recip, fp32_rsqrt

__all__ = ["VectorUnit"]


def _lane(m: Module, op: Signal, a, b, name: str):
    """One lane: every op's result, and the one ``op`` selects."""
    add = fp32_add(m, a, b, name=f"{name}_add")
    sub = fp32_add(m, a, b ^ (1 << 31), name=f"{name}_sub")
    mul = fp32_mul(m, a, b, name=f"{name}_mul")
    mx = fp32_max(m, a, b, name=f"{name}_max")
    mn = fp32_min(m, a, b, name=f"{name}_min")
    neg = a[31]
    i2f = round_to_fp32(m, Mux(neg, -a.as_signed(), a)[:32], neg, 0, name=f"{name}_i2f")
    relu = Mux(is_nan(a), CANONICAL_NAN, Mux(neg, 0, a))
    exp = fp32_exp(m, a, name=f"{name}_exp")
    recip = fp32_recip(m, a, name=f"{name}_recip")
    rsqrt = fp32_rsqrt(m, a, name=f"{name}_rsqrt")
    out = Signal(32, name=f"{name}_out")
    with m.Switch(op):
        for code, value in ((VecOp.FADD, add), (VecOp.FSUB, sub), (VecOp.FMUL, mul), (VecOp.FMAX, mx),
                            (VecOp.FMIN, mn), (VecOp.I2F, i2f), (VecOp.RELU, relu), (VecOp.EXP, exp), (VecOp.RECIP, recip),
                            (VecOp.RSQRT, rsqrt)):
            with m.Case(code):
                m.d.comb += out.eq(value)
    return out


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

    def __init__(self, config: ChipConfig, defects: frozenset[Defect] = frozenset()):
        self.config = config
        self.defects = frozenset(defects)
        cw = (config.acc_depth - 1).bit_length()
        super().__init__(
            {
                "start": In(1),
                "op": In(4),
                "b_form": In(2),
                "a": In(16),
                "b": In(16),
                "count": In(16),
                "dst": In(16),
                "busy": Out(1),
                "started": Out(1),
                "finished": Out(1),
                "elems": Out(8),
                "b_rd_addr": Out(cw),
                "b_rd_data": In(config.acc_word_bits),
                **acc_port_members(config),
            }
        )

    def elaborate(self, platform):
        m = Module()
        lanes = self.config.lanes

        op, b_form = Signal(4), Signal(2)
        a_ptr, b_ptr, dst = Signal(16), Signal(16), Signal(16)
        left = Signal(17)
        running = Signal()
        with m.If(self.start & ~self.busy):
            m.d.sync += [op.eq(self.op), b_form.eq(self.b_form), a_ptr.eq(self.a), b_ptr.eq(self.b),
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
        outs = []
        for j in range(lanes):
            a_j = self.acc_rd_data.word_select(j, 32)
            b_j = Mux(b_form == VecB.SCALAR, scalar, b_word.word_select(j, 32))
            outs.append(_lane(m, op, a_j, b_j, f"lane{j}"))
        res, v2, last2, w_addr = Signal(len(self.acc_wr_data)), Signal(), Signal(), Signal(16)
        m.d.sync += [res.eq(Cat(*outs)), v2.eq(v1), last2.eq(last1)]
        with m.If(v1):
            m.d.sync += dst.eq(dst + 1)
        m.d.sync += w_addr.eq(dst)

        # stage 2: write
        m.d.comb += [self.acc_wr_en.eq(v2), self.acc_wr_addr.eq(w_addr), self.acc_wr_data.eq(res),
                     self.elems.eq(Mux(v2, lanes, 0))]
        with m.If(v2 & last2):
            m.d.sync += running.eq(0)
        m.d.comb += [self.busy.eq(running), self.started.eq(self.start & ~self.busy), self.finished.eq(v2 & last2)]
        return m
