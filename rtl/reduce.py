"""The reduction unit: REDUCE(op, src, count, dst) over accumulator words.

Each cycle one accumulator word (LANES x int32, or LANES x fp32 for FSUM / FMAX) is read; a
pipelined binary tree combines its lanes (one register stage per tree level: lane 0 with lane 1,
lane 2 with lane 3, ..., then those pairs), and a final stage folds the tree outputs of all
``count`` words into one value, word after word (``total = total + word``). That order is the
fp32 result's definition (docs/numerics.md). The result goes to lane 0 of word ``dst``; the
other lanes of ``dst`` get the operation's identity (0, INT32_MIN, INT32_MAX, +0, -Inf), so
``dst`` can be reduced again. The fp32 operations are built only on a chip with the vector unit.
"""

from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from .config import ChipConfig
from .fp32 import fp32_add, fp32_max
from .ports import acc_port_members
from .isa import ReduceOp
from .faults import FaultKind
from .revisions import Defect
from .saboteurs import stuck_value

__all__ = ["ReductionUnit"]


def _combine(op: Signal, x, y, m: Module | None = None, name: str = ""):
    """One tree node: SUM wraps, MAX/MIN compare as signed int32; with ``m`` (a chip with the
    vector unit) also FSUM (fp32 add, RNE) and FMAX (fp32 maximum)."""
    xs, ys = x.as_signed(), y.as_signed()
    out = Mux(op == ReduceOp.SUM, (x + y)[:32], Mux(op == ReduceOp.MAX, Mux(xs > ys, x, y), Mux(xs < ys, x, y)))
    if m is None:
        return out
    return Mux(op == ReduceOp.FSUM, fp32_add(m, x, y, name=f"{name}_fadd"),
               Mux(op == ReduceOp.FMAX, fp32_max(m, x, y, name=f"{name}_fmax"), out))


class ReductionUnit(wiring.Component):
    """Pipelined lane-tree reduction over consecutive accumulator words.

    Members
    -------
    start : In(1)
        Accept the REDUCE on ``op``, ``src``, ``count``, ``dst`` (only while not ``busy``).
    busy : Out(1)
        From ``start`` until the result is written.
    started, finished : Out(1)
        Pulses for the trace buffer (rtl/trace.py): a REDUCE accepted, and its result written.
    """

    def __init__(self, config: ChipConfig, defects: frozenset[Defect] = frozenset(), faults=()):
        self.config = config
        self.defects = frozenset(defects)
        self.faults = list(faults)  # fault descriptors (rtl/saboteurs.py): tree input lane bits
        super().__init__(
            {
                "start": In(1),
                "op": In(3),
                "src": In(16),
                "count": In(16),
                "dst": In(16),
                "busy": Out(1),
                "started": Out(1),  # pulse: a REDUCE was accepted (trace)
                "finished": Out(1),  # pulse: its result is being written (the accumulator write) (trace)
                **acc_port_members(config),
            }
        )

    def elaborate(self, platform):
        m = Module()
        lanes = self.config.lanes
        levels = (lanes - 1).bit_length()

        op = Signal(3)
        fp = m if self.config.vector else None  # the fp32 ops' module, or none
        ptr = Signal(16)
        left = Signal(17)
        dst = Signal(16)
        running = Signal()
        count = Signal(16)

        with m.If(self.start & ~self.busy):
            m.d.sync += [
                op.eq(self.op), ptr.eq(self.src), left.eq(self.count), count.eq(self.count),
                dst.eq(self.dst), running.eq(1),
            ]

        issue = Signal()
        m.d.comb += [issue.eq(running & (left != 0)), self.acc_rd_addr.eq(ptr)]
        with m.If(issue):
            m.d.sync += [ptr.eq(ptr + 1), left.eq(left - 1)]

        # valid/first/last travel beside the data through the tree levels.
        v = Signal()
        first = Signal()
        last = Signal()
        m.d.sync += [v.eq(issue), first.eq(issue & (left == count)), last.eq(issue & (left == 1))]
        # tree
        cur = [stuck_value(m, self.acc_rd_data.word_select(j, 32), self.faults, FaultKind.REDUCE_LANE, j, f"lane{j}")
               for j in range(lanes)]
        cv, cf, cl = v, first, last
        for lvl in range(levels):
            nxt = []
            for p in range(len(cur) // 2):
                s = Signal(32, name=f"tree_{lvl}_{p}")
                m.d.sync += s.eq(_combine(op, cur[2 * p], cur[2 * p + 1], fp, f"tree_{lvl}_{p}"))
                nxt.append(s)
            nv, nf, nl = Signal(name=f"tv_{lvl}"), Signal(name=f"tf_{lvl}"), Signal(name=f"tl_{lvl}")
            m.d.sync += [nv.eq(cv), nf.eq(cf), nl.eq(cl)]
            cur, cv, cf, cl = nxt, nv, nf, nl
        word_result = cur[0]

        total = Signal(32)
        done = Signal()
        identity = Signal(32)
        m.d.comb += identity.eq(Mux(op == ReduceOp.SUM, 0, Mux(op == ReduceOp.MAX, 0x80000000,
                                Mux(op == ReduceOp.FSUM, 0, Mux(op == ReduceOp.FMAX, 0xFF800000, 0x7FFFFFFF)))))
        fold = Mux(cf, word_result, _combine(op, total, word_result, fp, "fold"))
        if Defect.REDUCE_MAX_FOLDS_FROM_ZERO in self.defects:
            fold = Mux(cf & (op == ReduceOp.MAX), _combine(op, Const(0, 32), word_result), fold)
        take = cv
        if Defect.REDUCE_SUM_DROPS_ODD_LAST in self.defects:
            take = cv & ~(cl & (op == ReduceOp.SUM) & count[0])
        with m.If(take):
            m.d.sync += total.eq(fold)
        m.d.sync += done.eq(cv & cl)
        m.d.comb += [
            self.acc_wr_en.eq(done),
            self.acc_wr_addr.eq(dst),
            self.acc_wr_data.eq(Cat(total, identity.replicate(lanes - 1))),
        ]
        with m.If(done):
            m.d.sync += running.eq(0)
        m.d.comb += [self.busy.eq(running), self.started.eq(self.start & ~self.busy), self.finished.eq(done)]
        return m
