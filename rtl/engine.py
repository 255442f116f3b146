"""The output-stationary systolic matrix engine.

Timing (one MATMUL, feed cycle ``t`` for step ``k``): the operand SRAMs are read at ``t``;
row ``i`` of A enters PE(i, 0) at ``t+1+i`` and column ``j`` of B enters PE(0, j) at
``t+1+j`` through skew registers, so PE(i, j) sees ``A[i, k]`` and ``B[k, j]`` together at
``t+1+i+j``. The step's ``first``/``last`` flags and the C tag travel with A. A row of C is
complete one cycle after its ``last`` flag leaves PE(i, COLS-1); the write-back stage then
reads the old accumulator word (for ``accumulate``) and writes the row one cycle later.

A MATMUL occupies the feed for ``max(K, ROWS, COLS)`` cycles, its K steps at the end of that
slot: the ``last`` steps of consecutive MATMULs are then at least ``max(ROWS, COLS)`` cycles
apart, so a tile's result registers are not overwritten before write-back reads them and two
tiles never complete a row in the same cycle. Back-to-back MATMULs stream with no gap.
"""

from __future__ import annotations

from types import SimpleNamespace

from amaranth.hdl import Cat, ClockSignal, Instance, Module, Mux, ResetSignal, Signal, signed
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from .clock_gate import add_gated_domain
from .config import ChipConfig
from .ports import acc_port_members
from .fp32 import CANONICAL_NAN, POS_INF, fp32_add, round_to_fp32
from .isa import Format
from .faults import FaultKind
from .pe import A_BUS_BITS, B_BUS_BITS, FA_BUS_BITS, FB_BUS_BITS, HI_BITS, PE_MODULE, ProcessingElement
from .revisions import Defect
from .saboteurs import could_be

__all__ = ["MatrixEngine"]

def _delayed(m: Module, domain: str, value, stages: int, width: int, name: str):
    """``value`` through ``stages`` registers of ``domain`` (named ``{name}_0``, ``{name}_1``...):
    the skew lines that line the operands up with their PEs."""
    for d in range(stages):
        nxt = Signal(width, name=f"{name}_{d}")
        m.d[domain] += nxt.eq(value)
        value = nxt
    return value


class MatrixEngine(wiring.Component):
    """Systolic array of ``rows x cols`` int8 PEs with int32 wrap-around accumulators.

    Parameters
    ----------
    config : ChipConfig
    defects, faults :
        The revision's defects; fault descriptors (those that may hit a PE are kept).
    gated_fp : bool
        The FP finalize stage and the FP operand bytes on the gated "fp" clock (Verilog builds).
    shared_pe, soft_rst :
        Every PE an instance of the module PE_MODULE (Verilog builds, no PE faults), reset by
        the chip's reset or ``soft_rst``; otherwise a PE submodule per position.

    Members
    -------
    start : In(1)
        Accept the MATMUL on ``a_addr``, ``b_addr``, ``c_addr``, ``k``, ``accumulate``; only
        honoured while ``feed_ready``.
    feed_ready : Out(1)
        The feed can take a new MATMUL this cycle (next feed starts next cycle).
    busy : Out(1)
        Anything in flight, up to the last accumulator write.
    feeding : Out(1)
        A valid K step is being read this cycle (``rows*cols`` MACs issued).
    started, finished : Out(1)
        Pulses for the trace buffer (rtl/trace.py): a MATMUL accepted, and a MATMUL completed (its
        last row written: the cycle ``done_sig`` rises for a MATMUL that signals). MATMULs complete
        in the order they start.
    """

    def __init__(self, config: ChipConfig, defects: frozenset[Defect] = frozenset(), faults=(),
                 gated_fp: bool = False, shared_pe: bool = False, soft_rst=None):
        self.config = config
        self.gated_fp = gated_fp  # the FP finalize stage on its own gated clock (Verilog builds)
        self.defects = frozenset(defects)
        # fault descriptors (rtl/saboteurs.py) that may hit a PE's product or accumulator bits
        self.faults = _pe_faults(faults)
        # the domain of the FP finalize stage's registers
        self._fp = "fp" if config.has_fp and gated_fp else "sync"
        # ``shared_pe`` (Verilog builds): every PE is an instance of the module PE_MODULE, which
        # the build converts once from :meth:`shared_pe_design`; the instances' core-clock
        # registers are reset by the chip's reset or ``soft_rst`` (the soft reset reaches the
        # engine's own registers through a ResetInserter, which does not reach into an
        # instance), their "fp" registers by the chip's reset alone, as before. Otherwise every
        # PE is a submodule of its own.
        self.shared_pe = shared_pe
        if shared_pe and self.faults:
            raise ValueError("the PEs cannot be one shared module: fault descriptors may hit a PE")
        if shared_pe and soft_rst is None:
            raise ValueError("shared PE instances need the soft reset signal (soft_rst)")
        self.soft_rst = soft_rst
        aw = (config.operand_depth - 1).bit_length()
        sw = (config.scale_depth - 1).bit_length()
        super().__init__(
            {
                "start": In(1),
                "a_addr": In(16),
                "b_addr": In(16),
                "c_addr": In(16),
                "k": In(16),
                "accumulate": In(1),
                "fmt": In(2),
                "sa_addr": In(8),
                "sb_addr": In(8),
                "feed_ready": Out(1),
                "busy": Out(1),
                "sig": In(2),  # with start: signal semaphores sig_sem once this MATMUL's rows are written
                "sig_sem": In(6),  # [2:0] for sig[0], [5:3] for sig[1]
                "done_sig": Out(2),  # pulse: a MATMUL with sig has written its last row
                "done_sem": Out(6),
                "feeding": Out(1),
                "started": Out(1),  # pulse: a MATMUL was accepted (start & feed_ready) (trace)
                "finished": Out(1),  # pulse: a MATMUL completed, when done_sig would rise for it (trace)
                "a_rd_addr": Out(aw),
                "a_rd_data": In(config.a_word_bits),
                "b_rd_addr": Out(aw),
                "b_rd_data": In(config.b_word_bits),
                "sa_rd_addr": Out(sw),
                "sa_rd_data": In(8 * config.rows),
                "sb_rd_addr": Out(sw),
                "sb_rd_data": In(8 * config.cols),
                **acc_port_members(config),
            }
        )

    @staticmethod
    def can_share_pe(faults=()) -> bool:
        """Every PE is the same design: no fault descriptor may hit a PE."""
        return not _pe_faults(faults)

    @staticmethod
    def shared_pe_design(config: ChipConfig, defects=frozenset(), gated_fp: bool = False) -> ProcessingElement:
        """The PE that a ``shared_pe`` engine instances as PE_MODULE."""
        return ProcessingElement(config, defects, "fp" if config.has_fp and gated_fp else "sync")

    def instanced_modules(self) -> dict:
        """Module name -> design of what this engine instances rather than contains (its PE, when
        shared): a netlist of it converts each once and appends it."""
        if not self.shared_pe:
            return {}
        return {PE_MODULE: self.shared_pe_design(self.config, self.defects, self.gated_fp)}

    def elaborate(self, platform):
        m = Module()
        cfg = self.config
        R, C = cfg.rows, cfg.cols
        min_cycles = cfg.min_matmul_cycles

        # ---- feed sequencer ------------------------------------------------------------
        occupy = Signal(17)  # cycles left in the current MATMUL's feed slot
        k_idx = Signal(16)
        k_len = Signal(16)
        a_base = Signal(16)
        b_base = Signal(16)
        c_base = Signal(16)
        acc_flag = Signal()
        fmt = Signal(2)
        sa_base = Signal(8)
        sb_base = Signal(8)

        m.d.comb += self.feed_ready.eq(occupy <= 1)
        feed_valid = Signal()
        # Short MATMULs (K < min_cycles) idle at the *start* of their slot, so the last steps of
        # consecutive MATMULs are always >= min_cycles apart (that is what the result
        # registers and the one-row-per-cycle write-back need).
        m.d.comb += feed_valid.eq((occupy != 0) & (occupy <= k_len))
        m.d.comb += self.feeding.eq(feed_valid)

        with m.If(occupy != 0):
            m.d.sync += occupy.eq(occupy - 1)
            with m.If(feed_valid):
                m.d.sync += k_idx.eq(k_idx + 1)
        with m.If(self.start & self.feed_ready):
            m.d.sync += [
                occupy.eq(Mux(self.k > min_cycles, self.k, min_cycles)),
                k_idx.eq(0),
                k_len.eq(self.k),
                a_base.eq(self.a_addr),
                b_base.eq(self.b_addr),
                c_base.eq(self.c_addr),
                acc_flag.eq(self.accumulate),
                fmt.eq(self.fmt),
                sa_base.eq(self.sa_addr),
                sb_base.eq(self.sb_addr),
            ]
            if Defect.ENGINE_K1_IGNORES_ACCUMULATE in self.defects:
                m.d.sync += acc_flag.eq(self.accumulate & (self.k != 1))
        m.d.comb += [
            self.a_rd_addr.eq(a_base + k_idx),
            self.b_rd_addr.eq(b_base + k_idx),
            self.sa_rd_addr.eq(sa_base + (k_idx >> 5)),  # one scale word per block of 32 steps
            self.sb_rd_addr.eq(sb_base + (k_idx >> 5)),
        ]
        if Defect.ENGINE_B2B_STALE_A_WORD in self.defects:
            # The A address register is not reloaded on a zero-gap start: the first step reads
            # where the previous command would have read next.
            stale = Signal()
            stale_addr = Signal(16)
            with m.If(self.start & self.feed_ready):
                m.d.sync += [stale.eq(occupy != 0), stale_addr.eq(a_base + k_len)]
            with m.Elif(feed_valid):
                m.d.sync += stale.eq(0)
            with m.If(stale & (k_idx == 0)):
                m.d.comb += self.a_rd_addr.eq(stale_addr)

        # Stage s1: aligned with the SRAM read data.
        s1_valid = Signal()
        s1_first = Signal()
        s1_last = Signal()
        s1_c = Signal(16)
        s1_acc = Signal()
        s1_fmt = Signal(2)
        s1_bfirst = Signal()
        s1_blast = Signal()
        s1_unit = Signal()  # the parity of the step's 32-step block: which of the row's two finalize units
        m.d.sync += [
            s1_valid.eq(feed_valid),
            s1_first.eq(k_idx == 0),
            s1_last.eq(k_idx == k_len - 1),
            s1_c.eq(c_base),
            s1_acc.eq(acc_flag),
            s1_fmt.eq(fmt),
            s1_bfirst.eq(k_idx[:5] == 0),
            s1_blast.eq((k_idx[:5] == 31) | (k_idx == k_len - 1)),
            s1_unit.eq(k_idx[5]),
        ]

        # ---- skew registers -----------------------------------------------------------
        # A side carries data + control (valid, first, last, c tag, accumulate).
        # A bundle: data[0:8] valid[8] first[9] last[10] c[11:27] acc[27] fmt[28:30] bfirst[30]
        # blast[31] scale[32:40] unit[40]. B bundle: data[0:8] scale[8:16].
        def a_bundle(i):
            return Cat(self.a_rd_data.word_select(i, 8), s1_valid, s1_first, s1_last, s1_c, s1_acc, s1_fmt,
                       s1_bfirst, s1_blast, self.sa_rd_data.word_select(i, 8), s1_unit)

        a_in = [_delayed(m, "sync", a_bundle(i), i, A_BUS_BITS, f"a_skew_{i}") for i in range(R)]
        b_in = [_delayed(m, "sync", Cat(self.b_rd_data.word_select(j, 8), self.sb_rd_data.word_select(j, 8)), j,
                         B_BUS_BITS, f"b_skew_{j}") for j in range(C)]

        if self._fp == "fp":
            # The FP finalize stage (the PEs' pending block sums, the row units, the fp32
            # accumulators) runs on a gated clock, "fp" (rtl/clock_gate.py): from an FP MATMUL's
            # first feed step until its last block has left the array (a countdown of the drain
            # plus a margin). Those registers change only on FP work, so the chip behaves as on
            # the core clock; a simulator evaluates the units' rounding and fp32 adders only on
            # "fp" edges, not on every cycle of an int8 MATMUL. A soft reset does not clear them
            # (their clock's enable and reset leave it out): a pending block left over fires once into some PE's
            # fp32 accumulator at the next FP MATMUL's first step, and that MATMUL's first block
            # replaces every accumulator before any result is written.
            fp_left = Signal(range(cfg.engine_drain_cycles + 8))
            fp_feed = feed_valid & (fmt != Format.INT8)
            with m.If(fp_feed):
                m.d.sync += fp_left.eq(cfg.engine_drain_cycles + 4)
            with m.Elif(fp_left != 0):
                m.d.sync += fp_left.eq(fp_left - 1)
            add_gated_domain(m, "fp", fp_feed | (fp_left != 0))

        # ---- the FP path's operands -----------------------------------------------------------
        # On the gated clock the FP path's operand bytes (A and B codes, their block scales, the
        # format) travel through skew and pipe registers of their own, "fp" copies of the ones
        # above, while its control (valid, first, block first/last, the unit parity) stays on the
        # core-clock bundle. The decode, the exact products and their shifts then depend only on
        # "fp" registers: a simulator evaluates them on "fp" edges, not on every step of an int8
        # MATMUL (they were most of what the FP chip cost over the int8 chip on an int8 GEMM).
        # Same values at the same cycles: the "fp" clock runs from an FP MATMUL's first feed step
        # until the drain after its last has passed every PE, so on every step whose flags say
        # FP the copies hold that step's bytes; on other steps the FP path's block sums take
        # values nothing reads (a block's first step clears them; the pending block is taken
        # only for an FP step). A soft reset clears the control, not the copies, so no stale
        # step is taken for a real one. Ungated (Amaranth's simulator), the PEs read the same
        # bytes off the core-clock bundle.
        # A FP bundle: code[0:8] fmt[8:10] scale[10:18]. B FP bundle: code[0:8] scale[8:16].
        fp_pipes = self._fp == "fp"
        fa_in, fb_in = [], []
        if fp_pipes:
            fa_in = [_delayed(m, "fp", Cat(self.a_rd_data.word_select(i, 8), s1_fmt, self.sa_rd_data.word_select(i, 8)),
                              i, FA_BUS_BITS, f"fa_skew_{i}") for i in range(R)]
            fb_in = [_delayed(m, "fp", Cat(self.b_rd_data.word_select(j, 8), self.sb_rd_data.word_select(j, 8)), j,
                              FB_BUS_BITS, f"fb_skew_{j}") for j in range(C)]

        # ---- PE grid --------------------------------------------------------------------------
        # Each PE: the int8 MAC (32-bit wrap-around) and the FP path (exact products summed
        # exactly per block of 32 steps, in two accumulators of at most 64 bits). At each block
        # end a finalize stage F1 converts the block sum with its scales to fp32 and adds it to
        # the PE's fp32 accumulator; F1 is shared by the PEs of a row (two units per row, see
        # _finalize_units). The result register is written in F1 for every format, one cycle
        # after the last step.
        res = [[Signal(32, name=f"res_{i}_{j}") for j in range(C)] for i in range(R)]
        row_done = [Signal(name=f"row_done_{i}") for i in range(R)]
        row_c = [Signal(16, name=f"row_c_{i}") for i in range(R)]
        row_acc = [Signal(name=f"row_acc_{i}") for i in range(R)]
        row_fmt = [Signal(2, name=f"row_fmt_{i}") for i in range(R)]
        b_col = list(b_in)
        fb_col = list(fb_in)
        for i in range(R):
            a_cur = a_in[i]
            fa_cur = fa_in[i] if fp_pipes else None
            pending = []
            for j in range(C):
                pe = self._place_pe(m, i, j)
                m.d.comb += [pe.a_bus.eq(a_cur), pe.b_bus.eq(b_col[j])]
                if cfg.has_fp:
                    m.d.comb += [pe.fa_bus.eq(fa_cur if fp_pipes else Cat(a_cur[0:8], a_cur[28:30], a_cur[32:40])),
                                 pe.fb_bus.eq(fb_col[j] if fp_pipes else b_col[j])]
                if j == C - 1:  # the row's C tag and accumulate flag, latched with its last step
                    valid, last = a_cur[8], a_cur[10]
                    pend_c, pend_acc = Signal(16, name=f"row_pend_c_{i}"), Signal(name=f"row_pend_acc_{i}")
                    with m.If(valid & last):
                        m.d.sync += [pend_c.eq(a_cur[11:27]), pend_acc.eq(a_cur[27])]
                    m.d.sync += [row_done[i].eq(pe.last), row_c[i].eq(pend_c), row_acc[i].eq(pend_acc),
                                 row_fmt[i].eq(pe.fmt)]
                if cfg.has_fp:
                    pending.append(pe)
                else:  # an int8-only chip: the result register one cycle after the last step
                    with m.If(pe.last):
                        m.d.sync += res[i][j].eq(pe.isum)
                a_cur, b_col[j] = pe.a_out, pe.b_out
                if fp_pipes:
                    fa_cur, fb_col[j] = pe.fa_out, pe.fb_out
            if cfg.has_fp:
                self._finalize_units(m, i, pending, res[i])

        # ---- write-back -------------------------------------------------------------------
        # WB1: pick the completed row (at most one per cycle by the feed spacing rule) and
        # read the old accumulator word. WB2: add and write.
        wb_valid = Signal()
        wb_addr = Signal(16)
        wb_acc = Signal()
        wb_row = Signal(cfg.acc_word_bits)
        sel_valid = Signal()
        sel_addr = Signal(16)
        sel_acc = Signal()
        sel_row = Signal(cfg.acc_word_bits)
        for i in range(R):
            with m.If(row_done[i]):
                m.d.comb += [
                    sel_valid.eq(1),
                    sel_addr.eq(row_c[i] + i),
                    sel_acc.eq(row_acc[i]),
                    sel_row.eq(Cat(*res[i])),
                ]
        m.d.comb += self.acc_rd_addr.eq(sel_addr)
        m.d.sync += [wb_valid.eq(sel_valid), wb_addr.eq(sel_addr), wb_acc.eq(sel_acc), wb_row.eq(sel_row)]
        wb_fmt = Signal(2)
        sel_fmt = Signal(2)
        for i in range(R):
            with m.If(row_done[i]):
                m.d.comb += sel_fmt.eq(row_fmt[i])
        m.d.sync += wb_fmt.eq(sel_fmt)
        lanes = []
        for j in range(C):
            new = wb_row.word_select(j, 32)
            old = self.acc_rd_data.word_select(j, 32)
            if self.config.has_fp:
                fp_sum = fp32_add(m, old, new, name=f"wb_add_{j}")  # C_old first (docs/numerics.md)
                lanes.append(Mux(wb_acc, Mux(wb_fmt == Format.INT8, (old + new)[:32], fp_sum), new))
            else:
                lanes.append(Mux(wb_acc, (old + new)[:32], new))
        m.d.comb += [
            self.acc_wr_en.eq(wb_valid),
            self.acc_wr_addr.eq(wb_addr),
            self.acc_wr_data.eq(Cat(*lanes)),
        ]

        # ---- completion: the feed's last step, delayed by the drain (which covers the deepest
        # path to the accumulator write), signals the MATMUL's semaphore --------------------------
        drain_len = cfg.engine_drain_cycles
        sig_q, sem_q = Signal(2), Signal(6)
        with m.If(self.start & self.feed_ready):
            m.d.sync += [sig_q.eq(self.sig), sem_q.eq(self.sig_sem)]
        last_step = feed_valid & (k_idx == k_len - 1)
        line = [Signal(8, name=f"done_line{i}") for i in range(drain_len + 1)]  # busy falls with the last
        m.d.sync += line[0].eq(Cat(Mux(last_step, sig_q, 0), sem_q))
        for i in range(1, len(line)):
            m.d.sync += line[i].eq(line[i - 1])
        m.d.comb += [self.done_sig.eq(line[-1][0:2]), self.done_sem.eq(line[-1][2:8])]
        # the same line for every MATMUL, signalling or not (the trace's completion event)
        marks = [Signal(name=f"done_mark{i}") for i in range(drain_len + 1)]
        m.d.sync += marks[0].eq(last_step)
        for i in range(1, len(marks)):
            m.d.sync += marks[i].eq(marks[i - 1])
        m.d.comb += [self.finished.eq(marks[-1]), self.started.eq(self.start & self.feed_ready)]

        # ---- busy: feed slot, plus a drain window covering the deepest pipeline path -----
        drain = Signal(range(drain_len + 1))
        with m.If(feed_valid):
            m.d.sync += drain.eq(drain_len)
        with m.Elif(drain != 0):
            m.d.sync += drain.eq(drain - 1)
        m.d.comb += self.busy.eq((occupy != 0) | (drain != 0))
        return m

    def _finalize_units(self, m: Module, i: int, pending: list, res_row: list) -> None:
        """F1 of row ``i``: convert a PE's block sum with its scales to fp32 (RNE) and add it to the
        PE's fp32 accumulator (the first block of a MATMUL replaces it).

        Why shared: a PE finishes a block at most once per 32 steps, and the skew makes the PEs
        of a row finish the same block in consecutive cycles, so one F1 serves the whole row.
        Two blocks of one PE can end a cycle apart (the last block of a MATMUL may be short), so
        the row has two units and a block goes to the unit of its index's parity: blocks of one
        parity end at least 32 steps apart, more than the COLS cycles a row takes (COLS <= 16;
        MATMULs end at least max(ROWS, COLS) cycles apart, docs/chip.md). The timing is that of
        a private F1 in every PE: the unit works in the cycle after the block's last step.
        """
        # each PE's fp32 accumulator: kept here, beside the units that add into it
        acc32 = [Signal(32, name=f"acc32_{i}_{j}") for j in range(len(pending))]
        outs = [[] for _ in pending]  # per PE: (the unit took its block, the unit's result)
        for u in range(2):
            t = f"fin_{i}_{u}"
            sel = [Signal(name=f"{t}_sel{j}") for j in range(len(pending))]
            for j, p in enumerate(pending):
                m.d.comb += sel[j].eq(p.valid & (p.unit == u))
            x = {k: Signal.like(getattr(pending[0], k), name=f"{t}_{k}") for k in _PENDING_FIELDS}
            for k in _PENDING_FIELDS:
                m.d.comb += x[k].eq(_select(sel, [getattr(p, k).as_unsigned() for p in pending]))
            x_acc32 = Signal(32, name=f"{t}_acc32")
            m.d.comb += x_acc32.eq(_select(sel, acc32))
            # The block sum hi * 2**32 + lo as top * 2**32 + bot (bot in [0, 2**32)), then its sign
            # and magnitude mt * 2**32 + mb, all in machine words. Above 2**64 the rounding takes
            # mt alone with mb as sticky (24 bits are kept of at least 33), else the 64-bit
            # magnitude: both give the block sum rounded once.
            top = Signal(signed(HI_BITS + 1), name=f"{t}_top")
            bot = Signal(32, name=f"{t}_bot")
            m.d.comb += [top.eq(x["hi"] + (x["lo"] >> 32)), bot.eq(x["lo"][:32])]
            neg = Signal(name=f"{t}_neg")
            mt = Signal(HI_BITS, name=f"{t}_mt")
            mb = Signal(32, name=f"{t}_mb")
            m.d.comb += [
                neg.eq(top < 0),
                mt.eq(Mux(neg, Mux(bot != 0, ~top, -top), top)),
                mb.eq(Mux(neg, -bot, bot)),
            ]
            wide = Signal(name=f"{t}_wide")
            m.d.comb += wide.eq(mt[32:] != 0)
            conv = round_to_fp32(m, Mux(wide, mt, Cat(mb, mt[:32])), neg, x["x"] + Mux(wide, 32, 0),
                                 name=f"{t}_cvt", sticky_in=wide & (mb != 0))
            r = Signal(32, name=f"{t}_r")
            with m.If(x["nan"] | x["scale_nan"] | (x["pinf"] & x["ninf"])):
                m.d.comb += r.eq(CANONICAL_NAN)
            with m.Elif(x["pinf"]):
                m.d.comb += r.eq(POS_INF)
            with m.Elif(x["ninf"]):
                m.d.comb += r.eq(POS_INF | (1 << 31))
            with m.Else():
                m.d.comb += r.eq(conv)
            acc32_new = Signal(32, name=f"{t}_acc32_new")
            summed = fp32_add(m, x_acc32, r, name=f"{t}_add")
            m.d.comb += acc32_new.eq(Mux(x["first_blk"], r, summed))
            for j in range(len(pending)):
                with m.If(sel[j]):
                    m.d[self._fp] += acc32[j].eq(acc32_new)
                outs[j].append((sel[j], acc32_new))
        for j, p in enumerate(pending):
            fp_res = acc32[j]
            for s, v in outs[j]:
                fp_res = Mux(s, v, fp_res)
            with m.If(p.last):
                m.d.sync += res_row[j].eq(Mux(p.fmt == Format.INT8, p.isum, fp_res))

    def _place_pe(self, m: Module, i: int, j: int):
        """PE (i, j): an instance of the shared module, or a submodule of its own. Returns what
        the engine connects: the PE's ports by name (signals of the instance's connections)."""
        name = f"pe_{i}_{j}"
        if not self.shared_pe:
            pe = ProcessingElement(self.config, self.defects, self._fp, self.faults, i * self.config.cols + j)
            m.submodules[name] = pe
            return pe
        ports = SimpleNamespace()
        conns = {"i_clk": ClockSignal("sync"), "i_rst": ResetSignal("sync") | self.soft_rst}
        if self._fp != "sync":
            conns.update({"i_fp_clk": ClockSignal(self._fp), "i_fp_rst": ResetSignal(self._fp)})
        for port, member in wiring.Signature(ProcessingElement.members(self.config, self._fp)).members.items():
            sig = Signal(member.shape, name=f"{name}_{port}")
            setattr(ports, port, sig)
            conns[f"{'i' if member.flow == In else 'o'}_{port}"] = sig
        m.submodules[name] = Instance(PE_MODULE, **conns)
        return ports


def _pe_faults(faults) -> list:
    """The fault descriptors that may hit a PE's product or accumulator bits."""
    return could_be(list(faults), FaultKind.PE_PRODUCT, FaultKind.PE_ACC)


# the pending block's fields that a row's finalize unit takes from the PE it serves
_PENDING_FIELDS = ("lo", "hi", "nan", "pinf", "ninf", "scale_nan", "x", "first_blk")


def _select(sel: list, values: list):
    """The value whose select is high (all of them are one-hot or zero)."""
    taken = 0
    for s, v in zip(sel, values):
        taken = taken | Mux(s, v, 0)
    return taken
