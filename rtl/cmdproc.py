"""The command processor: fetch from the command ring, queue, check, dispatch in order.

The host writes 128-bit commands into the command ring (an SRAM of ``cmdq_depth`` entries)
and rings the doorbell by writing CMDQ_TAIL. The fetcher copies entries from CMDQ_HEAD up to
the tail into a FIFO of ``cmd_fifo_depth`` commands; the executor takes the FIFO head, checks
it and hands it to its unit. A command that fails a check is dropped: the first error since the
last clear is latched in ERR with the whole command, ERR_COUNT counts all of them, and the chip
goes on with the next command.

Issue rules (in order, one command per cycle at most):
NOP retires at once; MATMUL issues when the engine feed is free and the reduction unit is idle;
REDUCE issues when both units are idle; FENCE retires when both units are idle.
"""

from __future__ import annotations

from amaranth.hdl import Const, Module, Mux, Signal
from amaranth.lib import data, fifo, wiring
from amaranth.lib.wiring import In, Out

from .config import ChipConfig
from .isa import BLOCK, COMMAND_BITS, COMMAND_LAYOUT, ErrCode, Format, Opcode, ReduceOp
from .faults import FaultKind
from .revisions import Defect
from .saboteurs import stuck_value

__all__ = ["CommandProcessor"]


class CommandProcessor(wiring.Component):
    """Fetcher + FIFO + in-order executor.

    Members
    -------
    tail : In(16)
        CMDQ_TAIL as written by the host.
    head : Out(16)
        CMDQ_HEAD.
    idle : Out(1)
        Ring drained, FIFO empty and both units idle.
    err_code, err_cmd, err_count, done_count : Out
        Architectural state behind ERR, ERR_CMD0..3, ERR_COUNT and DONE_COUNT.
    clear_err : In(1)
        Strobe: clear ERR, ERR_CMD and ERR_COUNT.
    stall : Out(1)
        A valid command waits at the FIFO head for a busy unit this cycle.
    err_event : Out(1)
        A command was dropped this cycle.
    """

    def __init__(self, config: ChipConfig, defects: frozenset[Defect] = frozenset(), faults=()):
        self.config = config
        self.defects = frozenset(defects)
        self.faults = list(faults)  # fault descriptors (rtl/saboteurs.py): a FIFO data bit
        qw = (config.cmdq_depth - 1).bit_length()
        super().__init__(
            {
                "tail": In(16),
                "head": Out(16),
                "cmdq_rd_addr": Out(qw),
                "cmdq_rd_data": In(COMMAND_BITS),
                "idle": Out(1),
                "fifo_level": Out(9),
                # engine
                "mm_start": Out(1),
                "mm_a": Out(16),
                "mm_b": Out(16),
                "mm_c": Out(16),
                "mm_k": Out(16),
                "mm_acc": Out(1),
                "mm_fmt": Out(2),
                "mm_sa": Out(8),
                "mm_sb": Out(8),
                "mm_feed_ready": In(1),
                "mm_busy": In(1),
                # reduction unit
                "rd_start": Out(1),
                "rd_op": Out(2),
                "rd_src": Out(16),
                "rd_count": Out(16),
                "rd_dst": Out(16),
                "rd_busy": In(1),
                # architectural state
                "clear_err": In(1),
                "err_code": Out(8),
                "err_cmd": Out(COMMAND_BITS),
                "err_count": Out(32),
                "load_counters": In(1),
                "load_value": In(32),
                "done_count": Out(32),
                "stall": Out(1),
                "err_event": Out(1),
                # errors found outside the command path (the front-door window)
                "ext_err_stb": In(1),
                "ext_err_code": In(8),
                "ext_err_info": In(32),
            }
        )

    def elaborate(self, platform):
        m = Module()
        cfg = self.config
        qmask = cfg.cmdq_depth - 1

        # Unbuffered: w_rdy is exactly level != depth, which the fetch condition relies on.
        m.submodules.fifo = q = fifo.SyncFIFO(width=COMMAND_BITS, depth=cfg.cmd_fifo_depth)

        # ---- fetch ----------------------------------------------------------------------
        inflight = Signal()
        can_fetch = Signal()
        m.d.comb += [
            can_fetch.eq((self.head != (self.tail & qmask)) & (q.level + inflight < cfg.cmd_fifo_depth)),
            self.cmdq_rd_addr.eq(self.head),
            q.w_data.eq(stuck_value(m, self.cmdq_rd_data, self.faults, FaultKind.CMD_FIFO, None, "fifo_wd")),
            q.w_en.eq(inflight),
        ]
        m.d.sync += inflight.eq(can_fetch)
        with m.If(can_fetch):
            m.d.sync += self.head.eq((self.head + 1) & qmask)

        # ---- decode + check -------------------------------------------------------------
        cmd = data.View(COMMAND_LAYOUT, q.r_data)
        err = Signal(8)
        op = cmd.opcode
        k = cmd.length
        mm_flags, rd_flags, scales = cmd.flags.matmul, cmd.flags.reduce, cmd.arg3.scales
        fmt_code = mm_flags.fmt
        nblocks = (k + BLOCK - 1) >> 5
        known = (op == Opcode.MATMUL) | (op == Opcode.REDUCE) | (op == Opcode.NOP) | (op == Opcode.FENCE)
        arg3_set = cmd.arg3.bits != 0
        reserved = Mux(op == Opcode.MATMUL, (mm_flags.reserved != 0) | ((fmt_code == Format.INT8) & arg3_set),
                       Mux(op == Opcode.REDUCE, (rd_flags.reserved != 0) | arg3_set,
                           (cmd.flags.bits != 0) | arg3_set))
        with m.If(~known):
            m.d.comb += err.eq(ErrCode.BAD_OPCODE)
        with m.Elif(reserved):
            m.d.comb += err.eq(ErrCode.RESERVED_NONZERO)
        with m.Elif(op == Opcode.MATMUL):
            with m.If((Const(cfg.formats_mask, 8) >> fmt_code)[0] == 0):  # not built into this chip
                m.d.comb += err.eq(ErrCode.BAD_FORMAT)
            with m.Elif((fmt_code != Format.INT8)
                        & ((scales.sa + nblocks > cfg.scale_depth) | (scales.sb + nblocks > cfg.scale_depth))):
                m.d.comb += err.eq(ErrCode.SCALE_RANGE)
            with m.Elif(k == 0):
                m.d.comb += err.eq(ErrCode.BAD_LENGTH)
            with m.Elif(cmd.arg0 + k > cfg.operand_depth):
                m.d.comb += err.eq(ErrCode.A_RANGE)
            with m.Elif(cmd.arg1 + k > cfg.operand_depth):
                m.d.comb += err.eq(ErrCode.B_RANGE)
            with m.Elif(cmd.arg2 + cfg.rows > cfg.acc_depth):
                m.d.comb += err.eq(ErrCode.C_RANGE)
        with m.Elif(op == Opcode.REDUCE):
            with m.If(rd_flags.op > max(ReduceOp)):
                m.d.comb += err.eq(ErrCode.BAD_REDUCE_OP)
            with m.Elif(k == 0):
                m.d.comb += err.eq(ErrCode.BAD_LENGTH)
            with m.Elif(cmd.arg0 + k > cfg.acc_depth):
                m.d.comb += err.eq(ErrCode.SRC_RANGE)
            with m.Elif(cmd.arg2 >= cfg.acc_depth):
                m.d.comb += err.eq(ErrCode.DST_RANGE)

        # ---- issue ----------------------------------------------------------------------
        retire = Signal()
        drop = Signal()
        units_idle = ~self.mm_busy & ~self.rd_busy
        m.d.comb += [
            self.mm_a.eq(cmd.arg0),
            self.mm_b.eq(cmd.arg1),
            self.mm_c.eq(cmd.arg2),
            self.mm_k.eq(k),
            self.mm_acc.eq(mm_flags.accumulate),
            self.mm_fmt.eq(fmt_code),
            self.mm_sa.eq(scales.sa),
            self.mm_sb.eq(scales.sb),
            self.rd_op.eq(rd_flags.op),
            self.rd_src.eq(cmd.arg0),
            self.rd_count.eq(k),
            self.rd_dst.eq(cmd.arg2),
        ]
        with m.If(q.r_rdy):
            with m.If(err != 0):
                m.d.comb += drop.eq(1)
            with m.Elif(op == Opcode.NOP):
                m.d.comb += retire.eq(1)
            with m.Elif(op == Opcode.FENCE):
                m.d.comb += retire.eq(units_idle)
            with m.Elif(op == Opcode.MATMUL):
                m.d.comb += retire.eq(self.mm_feed_ready & ~self.rd_busy)
                m.d.comb += self.mm_start.eq(retire)
            with m.Elif(op == Opcode.REDUCE):
                if Defect.REDUCE_ISSUES_BEFORE_DRAIN in self.defects:
                    m.d.comb += retire.eq(self.mm_feed_ready & ~self.rd_busy)
                else:
                    m.d.comb += retire.eq(units_idle)
                m.d.comb += self.rd_start.eq(retire)
        m.d.comb += [
            q.r_en.eq(retire | drop),
            self.stall.eq(q.r_rdy & ~retire & ~drop),
            self.err_event.eq(drop | self.ext_err_stb),
        ]
        with m.If(self.load_counters):  # DFT (CTRL.load_counters): both event counters from SCRATCH
            m.d.sync += [self.done_count.eq(self.load_value), self.err_count.eq(self.load_value)]
        with m.Elif(retire):
            m.d.sync += self.done_count.eq(self.done_count + 1)
        # Both sources may fault in the same cycle: count both; the command's error wins ERR.
        with m.If(self.clear_err):
            m.d.sync += [self.err_code.eq(0), self.err_cmd.eq(0), self.err_count.eq(0)]
        with m.Else():
            with m.If(~self.load_counters):
                m.d.sync += self.err_count.eq(self.err_count + drop + self.ext_err_stb)
            with m.If(self.err_code == 0):
                with m.If(drop):
                    m.d.sync += [self.err_code.eq(err), self.err_cmd.eq(q.r_data)]
                with m.Elif(self.ext_err_stb):
                    m.d.sync += [self.err_code.eq(self.ext_err_code), self.err_cmd.eq(self.ext_err_info)]

        m.d.comb += [
            self.fifo_level.eq(q.level),
            self.idle.eq((self.head == (self.tail & qmask)) & ~inflight & (q.level == 0) & units_idle),
        ]
        return m
