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

from amaranth.hdl import Cat, Const, Module, Mux, Signal, signed, unsigned
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from .clock_gate import add_gated_domain
from .config import ChipConfig
from .ports import acc_port_members
from .fp32 import CANONICAL_NAN, POS_INF, fp32_add, round_to_fp32
from .isa import Format
from .faults import FaultKind
from .revisions import Defect
from .saboteurs import stuck_value

__all__ = ["MatrixEngine"]

# Widths of a PE's two exact block-sum parts (see MatrixEngine._pe): lo < 32 * 225 * 2**31 and
# hi < 32 * 49 * 2**26 in magnitude, with a sign bit and a bit to spare; both <= 64 bits.
_LO_BITS = 46
_HI_BITS = 40


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
                 gated_fp: bool = False):
        self.config = config
        self.gated_fp = gated_fp  # the FP finalize stage on its own gated clock (Verilog builds)
        self.defects = frozenset(defects)
        self.faults = list(faults)  # fault descriptors (rtl/saboteurs.py): PE product / accumulator bits
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

        bundle_w = 41
        a_in = [_delayed(m, "sync", a_bundle(i), i, bundle_w, f"a_skew_{i}") for i in range(R)]
        b_in = [_delayed(m, "sync", Cat(self.b_rd_data.word_select(j, 8), self.sb_rd_data.word_select(j, 8)), j, 16,
                         f"b_skew_{j}") for j in range(C)]

        # the domain of the FP finalize stage's registers
        self._fp = "fp" if self.config.has_fp and self.gated_fp else "sync"
        if self._fp == "fp":
            # The FP finalize stage (the PEs' pending block sums, the row units, the fp32
            # accumulators) runs on a gated clock, "fp" (rtl/clock_gate.py): from an FP MATMUL's
            # first feed step until its last block has left the array (a countdown of the drain
            # plus a margin). Those registers change only on FP work, so the chip behaves as on
            # the core clock; a simulator evaluates the units' rounding and fp32 adders only on
            # "fp" edges, not on every cycle of an int8 MATMUL. A soft reset does not clear them
            # (the engine does not see it): a pending block left over fires once into some PE's
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
                              i, 18, f"fa_skew_{i}") for i in range(R)]
            fb_in = [_delayed(m, "fp", Cat(self.b_rd_data.word_select(j, 8), self.sb_rd_data.word_select(j, 8)), j, 16,
                              f"fb_skew_{j}") for j in range(C)]

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
                fa = fa_cur if fp_pipes else Cat(a_cur[0:8], a_cur[28:30], a_cur[32:40])
                fb = fb_col[j] if fp_pipes else b_col[j]
                pending.append(self._pe(m, i, j, a_cur, b_col[j], fa, fb, res[i][j],
                                        (row_done[i], row_c[i], row_acc[i], row_fmt[i]) if j == C - 1 else None))
                a_nxt = Signal(bundle_w, name=f"a_pipe_{i}_{j}")
                b_nxt = Signal(16, name=f"b_pipe_{i}_{j}")
                m.d.sync += [a_nxt.eq(a_cur), b_nxt.eq(b_col[j])]
                a_cur = a_nxt
                b_col[j] = b_nxt
                if fp_pipes:
                    fa_nxt = Signal(18, name=f"fa_pipe_{i}_{j}")
                    fb_nxt = Signal(16, name=f"fb_pipe_{i}_{j}")
                    m.d.fp += [fa_nxt.eq(fa_cur), fb_nxt.eq(fb_col[j])]
                    fa_cur = fa_nxt
                    fb_col[j] = fb_nxt
            if self.config.has_fp:
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

    # Exponent of the FP block sum's units, 2 - 2*bias - 2*mbits, per format (docs/numerics.md).
    _UNIT_EXP = {Format.E4M3: 2 - 14 - 6, Format.E5M2: 2 - 30 - 4, Format.E2M1: 2 - 2 - 2}

    def _decode(self, m: Module, code, fmt, tag: str):
        """(sign, sig, ee, nan, inf) of an operand byte for the FP formats."""
        daz = Defect.FP8_SUBNORMALS_READ_AS_ZERO in self.defects
        sign, sig, ee = Signal(name=f"{tag}_s"), Signal(4, name=f"{tag}_sig"), Signal(5, name=f"{tag}_ee")
        nan, inf = Signal(name=f"{tag}_nan"), Signal(name=f"{tag}_inf")
        built = self.config.formats
        with m.Switch(fmt):
            if "e4m3" in built:
                with m.Case(Format.E4M3):
                    e, mnt = code[3:7], code[0:3]
                    m.d.comb += [sign.eq(code[7]), sig.eq(Cat(mnt, e != 0) & Mux(daz & (e == 0), 0, 0xF)),
                                 ee.eq(Mux(e == 0, 1, e)), nan.eq(code[0:7] == 0x7F)]
            if "e5m2" in built:
                with m.Case(Format.E5M2):
                    e, mnt = code[2:7], code[0:2]
                    m.d.comb += [sign.eq(code[7]), sig.eq(Cat(mnt, e != 0) & Mux(daz & (e == 0), 0, 0xF)),
                                 ee.eq(Mux(e == 0, 1, e)), nan.eq((e == 31) & (mnt != 0)),
                                 inf.eq((e == 31) & (mnt == 0))]
            if "e2m1" in built:
                with m.Case(Format.E2M1):
                    e, mnt = code[1:3], code[0]
                    m.d.comb += [sign.eq(code[3]), sig.eq(Cat(mnt, e != 0)), ee.eq(Mux(e == 0, 1, e))]
        return sign, sig, ee, nan, inf

    def _pe(self, m: Module, i: int, j: int, a_bus, b_bus, fa_bus, fb_bus, res, row_out) -> None:
        t = f"pe_{i}_{j}"
        a_code, valid, first, last = a_bus[0:8], a_bus[8], a_bus[9], a_bus[10]
        c_tag, acc_tag, fmt, bfirst, blast = a_bus[11:27], a_bus[27], a_bus[28:30], a_bus[30], a_bus[31]
        b_code = b_bus[0:8]
        unit_bit = a_bus[40]

        # int8 MAC
        acc = Signal(32, name=f"acc_{i}_{j}")
        prod = Signal(signed(16), name=f"prod_{i}_{j}")
        total = Signal(32, name=f"sum_{i}_{j}")
        pe = i * self.config.cols + j
        if self.faults:  # a stuck bit in this PE's product or its accumulator's input
            raw = Signal(16, name=f"{t}_prod_raw")
            m.d.comb += raw.eq(a_code.as_signed() * b_code.as_signed())
            m.d.comb += prod.eq(stuck_value(m, raw, self.faults, FaultKind.PE_PRODUCT, pe, f"{t}_prod"))
            raw_total = Signal(32, name=f"{t}_sum_raw")
            m.d.comb += raw_total.eq(Mux(first, prod, acc + prod))
            m.d.comb += total.eq(stuck_value(m, raw_total, self.faults, FaultKind.PE_ACC, pe, f"{t}_acc"))
        else:
            m.d.comb += prod.eq(a_code.as_signed() * b_code.as_signed())
            m.d.comb += total.eq(Mux(first, prod, acc + prod))  # signed extends; truncation wraps

        pend_last = Signal(name=f"{t}_pend_last")
        pend_int = Signal(32, name=f"{t}_pend_int")
        pend_fmt = Signal(2, name=f"{t}_pend_fmt")
        m.d.sync += pend_last.eq(valid & last)
        with m.If(valid):
            m.d.sync += acc.eq(total)
            with m.If(last):
                m.d.sync += [pend_int.eq(total), pend_fmt.eq(fmt)]
        if row_out is not None:
            row_done, row_c, row_acc, row_fmt = row_out
            pend_c = Signal(16, name=f"{t}_pend_c")
            pend_acc = Signal(name=f"{t}_pend_acc")
            with m.If(valid & last):
                m.d.sync += [pend_c.eq(c_tag), pend_acc.eq(acc_tag)]
            m.d.sync += [row_done.eq(pend_last), row_c.eq(pend_c), row_acc.eq(pend_acc), row_fmt.eq(pend_fmt)]
        if not self.config.has_fp:  # an int8-only chip: the result register one cycle after the last step
            with m.If(pend_last):
                m.d.sync += res.eq(pend_int)
            return

        # FP: exact product, and the exact block sum in two parts: products of weight below 2**32
        # (every E4M3 and E2M1 product) in `lo`, the others (large E5M2 products) in `hi` in units
        # of 2**32. Each part fits 64 bits (lo < 32 * 225 * 2**31, hi < 32 * 49 * 2**26): the sum
        # is exact, and no per-step arithmetic is wider than a machine word.
        # the operand bytes from the FP bundles (see elaborate), the control from the core bundle
        fa_code, f_fmt, f_sa = fa_bus[0:8], fa_bus[8:10], fa_bus[10:18]
        fb_code, f_sb = fb_bus[0:8], fb_bus[8:16]
        sa_s, sa_sig, sa_ee, a_nan, a_inf = self._decode(m, fa_code, f_fmt, f"{t}_a")
        sb_s, sb_sig, sb_ee, b_nan, b_inf = self._decode(m, fb_code, f_fmt, f"{t}_b")
        shift = Signal(6, name=f"{t}_shift")
        m.d.comb += shift.eq(sa_ee + sb_ee - 2)
        term = Signal(39, name=f"{t}_term")  # sig product (8 bits) << shift mod 32
        m.d.comb += term.eq((sa_sig * sb_sig) << shift[:5])
        p_nan = Signal(name=f"{t}_pnan")
        p_inf = Signal(name=f"{t}_pinf")
        m.d.comb += [
            p_nan.eq(a_nan | b_nan | (a_inf & (sb_sig == 0) & ~b_inf) | (b_inf & (sa_sig == 0) & ~a_inf)),
            p_inf.eq((a_inf | b_inf) & ~p_nan),
        ]
        special = p_nan | p_inf
        pneg = sa_s ^ sb_s
        tval = Signal(signed(40), name=f"{t}_tval")
        m.d.comb += tval.eq(Mux(special, 0, Mux(pneg, -term, term)))
        blk_lo, blk_hi = Signal(signed(_LO_BITS), name=f"{t}_blk_lo"), Signal(signed(_HI_BITS), name=f"{t}_blk_hi")
        lo_new, hi_new = Signal(signed(_LO_BITS), name=f"{t}_lo_new"), Signal(signed(_HI_BITS), name=f"{t}_hi_new")
        bnan, bpinf, bninf = Signal(name=f"{t}_bnan"), Signal(name=f"{t}_bpinf"), Signal(name=f"{t}_bninf")
        nan_new, pinf_new, ninf_new = Signal(name=f"{t}_nan_n"), Signal(name=f"{t}_pinf_n"), Signal(name=f"{t}_ninf_n")
        m.d.comb += [
            lo_new.eq(Mux(bfirst, 0, blk_lo) + Mux(shift[5], 0, tval)),
            hi_new.eq(Mux(bfirst, 0, blk_hi) + Mux(shift[5], tval, 0)),
            nan_new.eq(Mux(bfirst, 0, bnan) | p_nan),
            pinf_new.eq(Mux(bfirst, 0, bpinf) | (p_inf & ~pneg)),
            ninf_new.eq(Mux(bfirst, 0, bninf) | (p_inf & pneg)),
        ]

        # pending block for the row's finalize stage F1
        pend = {
            "lo": Signal(signed(_LO_BITS), name=f"{t}_pend_lo"), "hi": Signal(signed(_HI_BITS), name=f"{t}_pend_hi"),
            "nan": Signal(name=f"{t}_pend_nan"), "pinf": Signal(name=f"{t}_pend_pinf"),
            "ninf": Signal(name=f"{t}_pend_ninf"), "scale_nan": Signal(name=f"{t}_pend_snan"),
            "x": Signal(signed(13), name=f"{t}_pend_x"), "first_blk": Signal(name=f"{t}_pend_fb"),
            "acc32": Signal(32, name=f"{t}_acc32"),
        }
        pend_valid, pend_unit = Signal(name=f"{t}_pend_v"), Signal(name=f"{t}_pend_u")
        unit = Mux(f_fmt == Format.E4M3, self._UNIT_EXP[Format.E4M3],
                   Mux(f_fmt == Format.E5M2, self._UNIT_EXP[Format.E5M2], self._UNIT_EXP[Format.E2M1]))
        m.d[self._fp] += pend_valid.eq(valid & blast & (fmt != Format.INT8))
        with m.If(valid):
            m.d.sync += [blk_lo.eq(lo_new), blk_hi.eq(hi_new), bnan.eq(nan_new), bpinf.eq(pinf_new),
                         bninf.eq(ninf_new)]
            with m.If(blast):
                m.d[self._fp] += [
                    pend["lo"].eq(lo_new), pend["hi"].eq(hi_new), pend["nan"].eq(nan_new),
                    pend["pinf"].eq(pinf_new), pend["ninf"].eq(ninf_new),
                    pend["scale_nan"].eq((f_sa == 0xFF) | (f_sb == 0xFF)),
                    pend["x"].eq(unit + f_sa + f_sb - 254), pend_unit.eq(unit_bit),
                ]
        # `first` marks the MATMUL's first step, which is in its first block: latch it at the block
        # start and carry it to that block's end.
        first_blk = Signal(name=f"{t}_first_blk")
        with m.If(valid & bfirst):
            m.d.sync += first_blk.eq(first)
        with m.If(valid & blast):
            m.d[self._fp] += pend["first_blk"].eq(Mux(bfirst, first, first_blk))
        return {"valid": pend_valid, "unit": pend_unit, "last": pend_last, "fmt": pend_fmt, "int": pend_int,
                "pend": pend}

    def _finalize_units(self, m: Module, i: int, pending: list[dict], res_row: list) -> None:
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
        for u in range(2):
            t = f"fin_{i}_{u}"
            sel = [Signal(name=f"{t}_sel{j}") for j in range(len(pending))]
            for j, p in enumerate(pending):
                m.d.comb += sel[j].eq(p["valid"] & (p["unit"] == u))
            x = {k: Signal.like(v, name=f"{t}_{k}") for k, v in pending[0]["pend"].items()}
            for k in x:
                taken = 0
                for j, p in enumerate(pending):
                    taken = taken | Mux(sel[j], p["pend"][k].as_unsigned(), 0)
                m.d.comb += x[k].eq(taken)
            # The block sum hi * 2**32 + lo as top * 2**32 + bot (bot in [0, 2**32)), then its sign
            # and magnitude mt * 2**32 + mb, all in machine words. Above 2**64 the rounding takes
            # mt alone with mb as sticky (24 bits are kept of at least 33), else the 64-bit
            # magnitude: both give the block sum rounded once.
            top = Signal(signed(_HI_BITS + 1), name=f"{t}_top")
            bot = Signal(32, name=f"{t}_bot")
            m.d.comb += [top.eq(x["hi"] + (x["lo"] >> 32)), bot.eq(x["lo"][:32])]
            neg = Signal(name=f"{t}_neg")
            mt = Signal(_HI_BITS, name=f"{t}_mt")
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
            summed = fp32_add(m, x["acc32"], r, name=f"{t}_add")
            m.d.comb += acc32_new.eq(Mux(x["first_blk"], r, summed))
            for j, p in enumerate(pending):
                with m.If(sel[j]):
                    m.d[self._fp] += p["pend"]["acc32"].eq(acc32_new)
            pending_out = [(sel[j], acc32_new) for j in range(len(pending))]
            for j, (s, v) in enumerate(pending_out):
                pending[j].setdefault("outs", []).append((s, v))
        for j, p in enumerate(pending):
            fp_res = p["pend"]["acc32"]
            for s, v in p["outs"]:
                fp_res = Mux(s, v, fp_res)
            with m.If(p["last"]):
                m.d.sync += res_row[j].eq(Mux(p["fmt"] == Format.INT8, p["int"], fp_res))
