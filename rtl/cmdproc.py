"""The command processor: fetch from the command ring, queue, check, dispatch in order.

The host writes 128-bit commands into the command ring (an SRAM of ``cmdq_depth`` entries)
and rings the doorbell by writing CMDQ_TAIL. The fetcher copies entries from CMDQ_HEAD up to
the tail into a FIFO of ``cmd_fifo_depth`` commands; the executor takes the FIFO head, checks
it and hands it to its unit. A command that fails a check is dropped: the first error since the
last clear is latched in ERR with the whole command, ERR_COUNT counts all of them, and the chip
goes on with the next command.

Issue rules (in order, one command per cycle at most):
NOP retires at once; MATMUL issues when the engine feed is free and the reduction and vector
units are idle; REDUCE and VEC issue when the engine, the reduction unit and the vector unit are
all idle (they share the accumulator SRAM's write port with it); FENCE retires when those three are
idle (the DMA queues are ordered by semaphores, not by FENCE); DMA_LOAD / DMA_STORE go into their unit's queue (with the queue's current strides) when
it has room; DMA_STRIDE retires at once. A command whose ``sync.wait`` is set issues only once
its semaphore is above zero and takes one count; DMA commands wait at the head of their own
queue instead, so a waiting DMA never holds up the stream.

The processor owns the semaphores (``SEMAPHORES`` counting semaphores of 16 bits): every unit
signals the one its command names when that command has completed (MATMUL: its last row written;
REDUCE: its result written; VEC: its last word written; DMA: its last word landed; NOP/FENCE/DMA_STRIDE: at retire).
"""

from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, fifo, wiring
from amaranth.lib.wiring import In, Out

from .board import BoardConfig
from .config import ChipConfig
from .csr_map import SEMAPHORES
from .dma import DMA_ENTRY, LOAD_REGIONS, word_bytes
from .isa import BLOCK, COMMAND_BITS, COMMAND_LAYOUT, DmaQueue, ErrCode, Format, Opcode, ReduceOp, VEC_ANY_DST, VEC_FP8_FORMATS, VEC_TO_OPERAND, VEC_UNARY, VecB, VecDst, VecOp
from .memories import MEM, Region
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

    def __init__(self, config: ChipConfig, board: BoardConfig, defects: frozenset[Defect] = frozenset(), faults=()):
        self.config = config
        self.board = board
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
                "mm_sig": Out(2),  # with mm_start: signal mm_sig_sem when this MATMUL completes
                "mm_sig_sem": Out(6),
                "mm_done_sig": In(2),  # the engine: a MATMUL with mm_sig has completed
                "mm_done_sem": In(6),
                # reduction unit
                "rd_start": Out(1),
                "rd_op": Out(3),
                "rd_src": Out(16),
                "rd_count": Out(16),
                "rd_dst": Out(16),
                "rd_busy": In(1),
                "rd_done": In(1),  # the reduction unit wrote its result
                # vector unit (absent on a chip built without it: VEC is then BAD_VEC_OP)
                "vu_start": Out(1),
                "vu_op": Out(4),
                "vu_b_form": Out(2),
                "vu_dst_sram": Out(2),
                "vu_a": Out(16),
                "vu_b": Out(16),
                "vu_count": Out(16),
                "vu_dst": Out(16),
                "vu_e5m2": Out(1),  # CVT_F8's format: 1 E5M2, 0 E4M3
                "vu_busy": In(1),
                "vu_done": In(1),  # the vector unit wrote its last word
                # DMA queues (rtl/dma.py): push, and their semaphore handshakes
                **{f"{u}_{n}": sig for u in ("ld", "st") for n, sig in (
                    ("push", Out(1)), ("entry", Out(DMA_ENTRY)), ("room", In(1)), ("busy", In(1)),
                    ("wait_req", In(1)), ("wait_sem", In(3)), ("wait_grant", Out(1)),
                    ("signal", In(1)), ("signal_sem", In(3)), ("signal2", In(1)), ("signal2_sem", In(3)))},
                "sem_counts": Out(16 * SEMAPHORES),
                "exec_waiting": Out(1),  # the stream's head waits on a semaphore (exec_wait_sem)
                "exec_wait_sem": Out(3),
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
        mm_flags, rd_flags, vu_flags, scales = cmd.flags.matmul, cmd.flags.reduce, cmd.flags.vec, cmd.arg3.scales
        fmt_code = mm_flags.fmt
        nblocks = (k + BLOCK - 1) >> 5
        is_dma = (op == Opcode.DMA_LOAD) | (op == Opcode.DMA_STORE)
        is_vec = op == Opcode.VEC
        known = ((op == Opcode.MATMUL) | (op == Opcode.REDUCE) | (op == Opcode.NOP) | (op == Opcode.FENCE) | is_dma
                 | (op == Opcode.DMA_STRIDE) | is_vec)
        arg3_set = cmd.arg3.bits != 0
        dma_flags, stride_flags = cmd.flags.dma, cmd.flags.stride
        reserved = Mux(op == Opcode.MATMUL, (mm_flags.reserved != 0) | ((fmt_code == Format.INT8) & arg3_set),
                   Mux(op == Opcode.REDUCE, (rd_flags.reserved != 0) | arg3_set,
                   Mux(is_vec, arg3_set & (vu_flags.op != VecOp.CVT_F8),
                   Mux(is_dma, dma_flags.reserved != 0,
                   Mux(op == Opcode.DMA_STRIDE, (stride_flags.reserved != 0) | (k != 0) | (cmd.arg1 != 0),
                       (cmd.flags.bits != 0) | arg3_set)))))

        # DMA descriptors: the strides of the command's queue (set by earlier DMA_STRIDEs).
        strides = {dq: (Signal(16, name=f"{dq.name.lower()}_sram_stride"),
                        Signal(32, name=f"{dq.name.lower()}_dram_stride")) for dq in DmaQueue}
        dram_addr = Cat(cmd.arg2, cmd.arg3.bits)
        is_store = op == Opcode.DMA_STORE
        sstride = Mux(is_store, strides[DmaQueue.STORE][0], strides[DmaQueue.LOAD][0])
        dstride = Mux(is_store, strides[DmaQueue.STORE][1], strides[DmaQueue.LOAD][1])
        rows = cmd.arg1
        region = dma_flags.region
        region_ok = Signal()
        sram_depth = Signal(17)
        wbytes = Signal(8)
        with m.Switch(region):
            for n in LOAD_REGIONS:
                with m.Case(Region[n]):
                    m.d.comb += [region_ok.eq(1 if n == "ACC" else ~is_store), sram_depth.eq(MEM[n].depth(cfg)),
                                 wbytes.eq(word_bytes(cfg, n))]
        more_rows = (rows - 1)[:16]
        sram_last = Signal(34)  # one past the last SRAM word
        dram_last = Signal(50)  # one past the last DRAM byte
        m.d.comb += [sram_last.eq(cmd.arg0 + more_rows * sstride + k),
                     dram_last.eq(dram_addr + more_rows * dstride + k * wbytes)]
        bus_mask = self.board.bus_bytes - 1
        misaligned = ((dram_addr & bus_mask) != 0) | ((rows > 1) & ((dstride & bus_mask) != 0))
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
            fp_ops_missing = Const(0 if cfg.vector else 1, 1) & (rd_flags.op >= ReduceOp.FSUM)
            with m.If((rd_flags.op > max(ReduceOp)) | fp_ops_missing):  # FSUM/FMAX come with the vector unit
                m.d.comb += err.eq(ErrCode.BAD_REDUCE_OP)
            with m.Elif(k == 0):
                m.d.comb += err.eq(ErrCode.BAD_LENGTH)
            with m.Elif(cmd.arg0 + k > cfg.acc_depth):
                m.d.comb += err.eq(ErrCode.SRC_RANGE)
            with m.Elif(cmd.arg2 >= cfg.acc_depth):
                m.d.comb += err.eq(ErrCode.DST_RANGE)
        with m.Elif(is_vec):
            b_vector = vu_flags.b == VecB.VECTOR
            to_operand = 0
            for c in VEC_TO_OPERAND:
                to_operand = to_operand | (vu_flags.op == c)
            any_dst = 0
            for c in VEC_ANY_DST:
                any_dst = any_dst | (vu_flags.op == c)
            unary = 0
            for u in VEC_UNARY:
                unary = unary | (vu_flags.op == u)
            fold = vu_flags.b == VecB.FOLD
            reads_b = ~unary & ~fold  # (a conversion reads its scale from b)
            operand_ok = (vu_flags.dst == VecDst.B) | ((vu_flags.dst == VecDst.A) & (cfg.lanes == cfg.rows))
            dst_ok = Mux(to_operand, operand_ok, Mux(any_dst, operand_ok | (vu_flags.dst == VecDst.ACC),
                                                     vu_flags.dst == VecDst.ACC))
            fold_ok = ~(fold & (to_operand | any_dst | unary))
            fp8_ok = 1
            for f in VEC_FP8_FORMATS:  # CVT_F8 names its format in arg3
                fp8_ok = fp8_ok & (cmd.arg3.bits != int(f))
            fp8_ok = (vu_flags.op != VecOp.CVT_F8) | ~fp8_ok
            dst_depth = Mux(vu_flags.dst == VecDst.ACC, cfg.acc_depth, cfg.operand_depth)
            dst_words = Mux(fold, 1, k)
            with m.If(~Const(int(cfg.vector), 1) | (vu_flags.op > max(VecOp)) | ~dst_ok | ~fold_ok | ~fp8_ok):
                m.d.comb += err.eq(ErrCode.BAD_VEC_OP)
            with m.Elif(k == 0):
                m.d.comb += err.eq(ErrCode.BAD_LENGTH)
            with m.Elif((cmd.arg0 + k > cfg.acc_depth) | (reads_b & Mux(b_vector, cmd.arg1 + k > cfg.acc_depth,
                                                                          cmd.arg1 >= cfg.acc_depth))):
                m.d.comb += err.eq(ErrCode.SRC_RANGE)
            with m.Elif(cmd.arg2 + dst_words > dst_depth):
                m.d.comb += err.eq(ErrCode.DST_RANGE)
        with m.Elif(is_dma):
            with m.If(~region_ok):
                m.d.comb += err.eq(ErrCode.DMA_REGION)
            with m.Elif((k == 0) | (rows == 0)):
                m.d.comb += err.eq(ErrCode.BAD_LENGTH)
            with m.Elif(misaligned):
                m.d.comb += err.eq(ErrCode.DMA_ALIGN)
            with m.Elif(sram_last > sram_depth):
                m.d.comb += err.eq(ErrCode.DMA_SRAM_RANGE)
            with m.Elif(dram_last > self.board.dram_bytes):
                m.d.comb += err.eq(ErrCode.DMA_DRAM_RANGE)

        # ---- issue ----------------------------------------------------------------------
        retire = Signal()
        drop = Signal()
        units_idle = ~self.mm_busy & ~self.rd_busy & ~self.vu_busy
        all_idle = units_idle & ~self.ld_busy & ~self.st_busy

        # ---- semaphores ---------------------------------------------------------------------
        counts = [Signal(16, name=f"sem{i}") for i in range(SEMAPHORES)]
        m.d.comb += self.sem_counts.eq(Cat(*counts))
        sync = cmd.sync
        exec_ready = Signal()  # the head command could issue this cycle but for its wait
        exec_take = Signal()
        wait_ok = Signal()
        nonzero = Signal(SEMAPHORES)
        m.d.comb += nonzero.eq(Cat(*[c != 0 for c in counts]))
        # one count per semaphore per cycle, the stream first, then the load queue, then the store queue
        exec_req = exec_ready & sync.wait
        ld_req = self.ld_wait_req
        st_req = self.st_wait_req
        m.d.comb += [
            wait_ok.eq(~sync.wait | nonzero.bit_select(sync.wait_sem, 1)),
            exec_take.eq(exec_req & wait_ok),
            self.ld_wait_grant.eq(ld_req & nonzero.bit_select(self.ld_wait_sem, 1)
                                  & ~(exec_take & (sync.wait_sem == self.ld_wait_sem))),
            self.st_wait_grant.eq(st_req & nonzero.bit_select(self.st_wait_sem, 1)
                                  & ~(exec_take & (sync.wait_sem == self.st_wait_sem))
                                  & ~(self.ld_wait_grant & (self.ld_wait_sem == self.st_wait_sem))),
            self.exec_waiting.eq(exec_req & ~wait_ok),
            self.exec_wait_sem.eq(sync.wait_sem),
        ]
        exec_sig = Signal()  # NOP / FENCE / DMA_STRIDE signal at retire
        rd_sig, rd_sig_sem = Signal(2), Signal(6)
        vu_sig, vu_sig_sem = Signal(2), Signal(6)
        mm_sem = [self.mm_done_sem[0:3], self.mm_done_sem[3:6]]
        rd_sem = [rd_sig_sem[0:3], rd_sig_sem[3:6]]
        vu_sem = [vu_sig_sem[0:3], vu_sig_sem[3:6]]
        for i, c in enumerate(counts):
            inc = ((exec_sig & sync.signal & (sync.signal_sem == i)) + (exec_sig & sync.signal2 & (sync.signal2_sem == i))
                   + (self.mm_done_sig[0] & (mm_sem[0] == i)) + (self.mm_done_sig[1] & (mm_sem[1] == i))
                   + (rd_sig[0] & self.rd_done & (rd_sem[0] == i)) + (rd_sig[1] & self.rd_done & (rd_sem[1] == i))
                   + (vu_sig[0] & self.vu_done & (vu_sem[0] == i)) + (vu_sig[1] & self.vu_done & (vu_sem[1] == i))
                   + (self.ld_signal & (self.ld_signal_sem == i)) + (self.ld_signal2 & (self.ld_signal2_sem == i))
                   + (self.st_signal & (self.st_signal_sem == i)) + (self.st_signal2 & (self.st_signal2_sem == i)))
            dec = ((exec_take & (sync.wait_sem == i)) + (self.ld_wait_grant & (self.ld_wait_sem == i))
                   + (self.st_wait_grant & (self.st_wait_sem == i)))
            m.d.sync += c.eq(c + inc - dec)
        both_sig = Cat(sync.signal, sync.signal2)
        both_sem = Cat(sync.signal_sem, sync.signal2_sem)
        with m.If(self.rd_start):
            m.d.sync += [rd_sig.eq(both_sig), rd_sig_sem.eq(both_sem)]
        with m.If(self.vu_start):
            m.d.sync += [vu_sig.eq(both_sig), vu_sig_sem.eq(both_sem)]
        m.d.comb += [self.mm_sig.eq(both_sig), self.mm_sig_sem.eq(both_sem)]

        # ---- DMA entries: the command plus its queue's strides ----------------------------------
        for u, dq in (("ld", DmaQueue.LOAD), ("st", DmaQueue.STORE)):
            entry = getattr(self, f"{u}_entry")
            m.d.comb += [entry.region.eq(region), entry.sram.eq(cmd.arg0), entry.words.eq(k), entry.rows.eq(rows),
                         entry.dram.eq(dram_addr), entry.sram_stride.eq(strides[dq][0]),
                         entry.dram_stride.eq(strides[dq][1]), entry.sync.eq(sync), entry.tag.eq(cmd.tag)]
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
            self.vu_op.eq(vu_flags.op),
            self.vu_b_form.eq(vu_flags.b),
            self.vu_dst_sram.eq(vu_flags.dst),
            self.vu_a.eq(cmd.arg0),
            self.vu_b.eq(cmd.arg1),
            self.vu_count.eq(k),
            self.vu_dst.eq(cmd.arg2),
            self.vu_e5m2.eq(cmd.arg3.bits == Format.E5M2),
        ]
        with m.If(q.r_rdy):
            with m.If(err != 0):
                m.d.comb += drop.eq(1)
            with m.Elif(op == Opcode.NOP):
                m.d.comb += [exec_ready.eq(1), retire.eq(wait_ok), exec_sig.eq(retire)]
            with m.Elif(op == Opcode.DMA_STRIDE):
                m.d.comb += [exec_ready.eq(1), retire.eq(wait_ok), exec_sig.eq(retire)]
                with m.If(retire):
                    for qq in DmaQueue:
                        with m.If(stride_flags.queue == qq):
                            m.d.sync += [strides[qq][0].eq(cmd.arg0), strides[qq][1].eq(dram_addr)]
            with m.Elif(op == Opcode.FENCE):
                m.d.comb += [exec_ready.eq(units_idle), retire.eq(units_idle & wait_ok), exec_sig.eq(retire)]
            with m.Elif(op == Opcode.MATMUL):
                m.d.comb += exec_ready.eq(self.mm_feed_ready & ~self.rd_busy & ~self.vu_busy)
                m.d.comb += retire.eq(exec_ready & wait_ok)
                m.d.comb += self.mm_start.eq(retire)
            with m.Elif(op == Opcode.REDUCE):
                if Defect.REDUCE_ISSUES_BEFORE_DRAIN in self.defects:
                    m.d.comb += exec_ready.eq(self.mm_feed_ready & ~self.rd_busy & ~self.vu_busy)
                else:
                    m.d.comb += exec_ready.eq(units_idle)
                m.d.comb += retire.eq(exec_ready & wait_ok)
                m.d.comb += self.rd_start.eq(retire)
            with m.Elif(is_vec):
                m.d.comb += [exec_ready.eq(units_idle), retire.eq(units_idle & wait_ok), self.vu_start.eq(retire)]
            with m.Elif(op == Opcode.DMA_LOAD):
                m.d.comb += [retire.eq(self.ld_room), self.ld_push.eq(retire)]
            with m.Elif(op == Opcode.DMA_STORE):
                m.d.comb += [retire.eq(self.st_room), self.st_push.eq(retire)]
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
            self.idle.eq((self.head == (self.tail & qmask)) & ~inflight & (q.level == 0) & all_idle),
        ]
        return m
