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

from .config import ChipConfig

__all__ = ["MatrixEngine"]


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
    """

    def __init__(self, config: ChipConfig, defects: frozenset[str] = frozenset()):
        self.config = config
        self.defects = frozenset(defects)
        aw = (config.operand_depth - 1).bit_length()
        cw = (config.acc_depth - 1).bit_length()
        super().__init__(
            {
                "start": In(1),
                "a_addr": In(16),
                "b_addr": In(16),
                "c_addr": In(16),
                "k": In(16),
                "accumulate": In(1),
                "feed_ready": Out(1),
                "busy": Out(1),
                "feeding": Out(1),
                "a_rd_addr": Out(aw),
                "a_rd_data": In(config.a_word_bits),
                "b_rd_addr": Out(aw),
                "b_rd_data": In(config.b_word_bits),
                "acc_rd_addr": Out(cw),
                "acc_rd_data": In(config.acc_word_bits),
                "acc_wr_addr": Out(cw),
                "acc_wr_data": Out(config.acc_word_bits),
                "acc_wr_en": Out(1),
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
            ]
            if "engine_k1_ignores_accumulate" in self.defects:
                m.d.sync += acc_flag.eq(self.accumulate & (self.k != 1))
        m.d.comb += [
            self.a_rd_addr.eq(a_base + k_idx),
            self.b_rd_addr.eq(b_base + k_idx),
        ]
        if "engine_b2b_stale_a_word" in self.defects:
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
        m.d.sync += [
            s1_valid.eq(feed_valid),
            s1_first.eq(k_idx == 0),
            s1_last.eq(k_idx == k_len - 1),
            s1_c.eq(c_base),
            s1_acc.eq(acc_flag),
        ]

        # ---- skew registers -----------------------------------------------------------
        # A side carries data + control (valid, first, last, c tag, accumulate).
        def a_bundle(i):
            return Cat(self.a_rd_data.word_select(i, 8), s1_valid, s1_first, s1_last, s1_c, s1_acc)

        bundle_w = 8 + 1 + 1 + 1 + 16 + 1
        a_in = []
        for i in range(R):
            cur = a_bundle(i)
            for d in range(i):
                nxt = Signal(bundle_w, name=f"a_skew_{i}_{d}")
                m.d.sync += nxt.eq(cur)
                cur = nxt
            a_in.append(cur)
        b_in = []
        for j in range(C):
            cur = self.b_rd_data.word_select(j, 8)
            for d in range(j):
                nxt = Signal(8, name=f"b_skew_{j}_{d}")
                m.d.sync += nxt.eq(cur)
                cur = nxt
            b_in.append(cur)

        # ---- PE grid --------------------------------------------------------------------
        res = [[Signal(32, name=f"res_{i}_{j}") for j in range(C)] for i in range(R)]
        row_done = [Signal(name=f"row_done_{i}") for i in range(R)]
        row_c = [Signal(16, name=f"row_c_{i}") for i in range(R)]
        row_acc = [Signal(name=f"row_acc_{i}") for i in range(R)]
        b_col = list(b_in)
        for i in range(R):
            a_cur = a_in[i]
            for j in range(C):
                a_val = a_cur[0:8].as_signed()
                valid, first, last = a_cur[8], a_cur[9], a_cur[10]
                b_val = b_col[j].as_signed()
                acc = Signal(32, name=f"acc_{i}_{j}")
                prod = Signal(signed(16), name=f"prod_{i}_{j}")
                m.d.comb += prod.eq(a_val * b_val)
                total = Signal(32, name=f"sum_{i}_{j}")
                # Signed values extend on assignment; truncation to 32 bits is the wrap-around.
                m.d.comb += total.eq(Mux(first, prod, acc + prod))
                with m.If(valid):
                    m.d.sync += acc.eq(total)
                    with m.If(last):
                        m.d.sync += res[i][j].eq(total)
                if j == C - 1:
                    m.d.sync += [
                        row_done[i].eq(valid & last),
                        row_c[i].eq(a_cur[11:27]),
                        row_acc[i].eq(a_cur[27]),
                    ]
                a_nxt = Signal(bundle_w, name=f"a_pipe_{i}_{j}")
                b_nxt = Signal(8, name=f"b_pipe_{i}_{j}")
                m.d.sync += [a_nxt.eq(a_cur), b_nxt.eq(b_col[j])]
                a_cur = a_nxt
                b_col[j] = b_nxt

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
        lanes = []
        for j in range(C):
            new = wb_row.word_select(j, 32)
            old = self.acc_rd_data.word_select(j, 32)
            lanes.append(Mux(wb_acc, (old + new)[:32], new))
        m.d.comb += [
            self.acc_wr_en.eq(wb_valid),
            self.acc_wr_addr.eq(wb_addr),
            self.acc_wr_data.eq(Cat(*lanes)),
        ]

        # ---- busy: feed slot, plus a drain window covering the deepest pipeline path -----
        drain_len = R + C + 3
        drain = Signal(range(drain_len + 1))
        with m.If(feed_valid):
            m.d.sync += drain.eq(drain_len)
        with m.Elif(drain != 0):
            m.d.sync += drain.eq(drain - 1)
        m.d.comb += self.busy.eq((occupy != 0) | (drain != 0))
        return m
