"""The chip's contract in numpy: SRAMs, DRAM, the command checks, the queues and the semaphores.

:class:`Machine` holds the architectural state of one chip (every SRAM of ``rtl/memories.py``
at the config's width and depth, the board's DRAM, the eight 16-bit semaphores, the DMA queues'
strides, ERR / ERR_CMD / ERR_COUNT / DONE_COUNT) and executes lowered command words:

* the command stream is checked at its head in stream order, with rtl/cmdproc.py's checks in
  rtl/cmdproc.py's order; a command that fails one is dropped (the first error since the last
  clear is latched with the whole command, ERR_COUNT counts all of them) and the stream goes on;
* NOP, FENCE, DMA_STRIDE, MATMUL, REDUCE and VEC wait at the head of the stream (taking one
  count of their semaphore), DMA_LOAD / DMA_STORE go into their queue (16 entries plus the one
  at its head, with the queue's current strides) and wait at the head of that queue;
* each command executes whole when it issues, and signals its semaphores then.

That is the faithful first model of the current chip (one issue stream, units that overlap only
where semaphores let them): a kernel whose stream is race-free gives the bits the RTL gives. When
a DMA that may go runs is ``dma_order``'s choice (eager, late, random: a racy stream's output can
depend on it); races themselves are found by reading the stream (interp/races.py), not by running
it. A wait that no command can satisfy raises :class:`Deadlock` naming the commands, by their
index in what was submitted.
"""

from __future__ import annotations

import functools
import random
from collections import deque
from dataclasses import dataclass

import numpy as np

from rtl.board import BoardConfig
from rtl.config import ChipConfig
from rtl.csr_map import SEMAPHORES
from rtl.dma import DMA_QUEUE_DEPTH, LOAD_REGIONS, word_bytes
from rtl.isa import (BLOCK, COMMAND_BITS, VEC_ANY_DST, VEC_FP8_FORMATS, VEC_TO_OPERAND, VEC_UNARY, DmaQueue, ErrCode,
                     Format, Opcode, ReduceOp, VecB, VecDst, VecOp, decode)
from rtl.memories import MEM, MEMORIES, Region

from .errors import Deadlock
from .units import matmul_fp, matmul_int8, reduce_words_to_word, vec_lanes

__all__ = ["Machine", "check_command", "QUEUE_CAPACITY", "DMA_ORDERS"]

# When a DMA whose queue head may go runs (Machine.run): at once (the RTL's usual order); loads
# as late as the stream allows and stores at once; or, seeded, any head that may move.
DMA_ORDERS = ("eager", "late", "random")

# Entries a DMA queue holds before the stream stalls on a push: its FIFO (rtl/dma.py) and the entry
# at its head, taken out of the FIFO while it waits on its semaphore.
QUEUE_CAPACITY = DMA_QUEUE_DEPTH + 1
_SEM_MASK = 0xFFFF  # counts are 16 bits (SEM01..SEM67)
_KNOWN = frozenset(int(o) for o in Opcode)


@functools.lru_cache(maxsize=1 << 14)
def _decoded(cmd: int) -> dict:
    """rtl.isa.decode, once per distinct command word (a stream repeats few)."""
    return decode(cmd)


def check_command(d: dict, cfg: ChipConfig, board: BoardConfig, strides: dict) -> ErrCode:
    """The error rtl/cmdproc.py's checks give the decoded command ``d`` (ErrCode.NONE: none), in
    the RTL's order; ``strides``: each DmaQueue's current (SRAM stride, DRAM stride)."""
    op = d["opcode"]
    if op not in _KNOWN:
        return ErrCode.BAD_OPCODE
    k, arg3 = d["length"], d["arg3"]
    arg3_bits = (arg3["sa"] | arg3["sb"] << 8) if op == Opcode.MATMUL else arg3
    flags = d["flags"]
    if op == Opcode.MATMUL:
        reserved = flags["reserved"] != 0 or (flags["fmt"] == Format.INT8 and arg3_bits != 0)
    elif op == Opcode.REDUCE:
        reserved = flags["reserved"] != 0 or arg3_bits != 0
    elif op == Opcode.VEC:
        reserved = arg3_bits != 0 and flags["op"] != VecOp.CVT_F8
    elif op in (Opcode.DMA_LOAD, Opcode.DMA_STORE):
        reserved = flags["reserved"] != 0
    elif op == Opcode.DMA_STRIDE:
        reserved = flags["reserved"] != 0 or k != 0 or d["arg1"] != 0
    else:  # NOP, FENCE
        reserved = flags != 0 or arg3_bits != 0
    if reserved:
        return ErrCode.RESERVED_NONZERO
    if op == Opcode.MATMUL:
        fmt = flags["fmt"]
        if not (cfg.formats_mask >> fmt) & 1:
            return ErrCode.BAD_FORMAT
        nblocks = (k + BLOCK - 1) // BLOCK
        if fmt != Format.INT8 and (arg3["sa"] + nblocks > cfg.scale_depth or arg3["sb"] + nblocks > cfg.scale_depth):
            return ErrCode.SCALE_RANGE
        if k == 0:
            return ErrCode.BAD_LENGTH
        if d["arg0"] + k > cfg.operand_depth:
            return ErrCode.A_RANGE
        if d["arg1"] + k > cfg.operand_depth:
            return ErrCode.B_RANGE
        if d["arg2"] + cfg.rows > cfg.acc_depth:
            return ErrCode.C_RANGE
    elif op == Opcode.REDUCE:
        rop = flags["op"]
        if rop > max(ReduceOp) or (not cfg.vector and rop >= ReduceOp.FSUM):
            return ErrCode.BAD_REDUCE_OP
        if k == 0:
            return ErrCode.BAD_LENGTH
        if d["arg0"] + k > cfg.acc_depth:
            return ErrCode.SRC_RANGE
        if d["arg2"] >= cfg.acc_depth:
            return ErrCode.DST_RANGE
    elif op == Opcode.VEC:
        vop, form, dst = flags["op"], flags["b"], flags["dst"]
        fold = form == VecB.FOLD
        to_operand, any_dst, unary = vop in VEC_TO_OPERAND, vop in VEC_ANY_DST, vop in VEC_UNARY
        operand_ok = dst == VecDst.B or (dst == VecDst.A and cfg.lanes == cfg.rows)
        dst_ok = operand_ok if to_operand else (operand_ok or dst == VecDst.ACC) if any_dst else dst == VecDst.ACC
        fold_ok = not (fold and (to_operand or any_dst or unary))
        fp8_ok = vop != VecOp.CVT_F8 or arg3_bits in {int(f) for f in VEC_FP8_FORMATS}
        if not cfg.vector or vop > max(VecOp) or not dst_ok or not fold_ok or not fp8_ok:
            return ErrCode.BAD_VEC_OP
        if k == 0:
            return ErrCode.BAD_LENGTH
        reads_b = not unary and not fold
        b_bad = (d["arg1"] + k > cfg.acc_depth) if form == VecB.VECTOR else d["arg1"] >= cfg.acc_depth
        if d["arg0"] + k > cfg.acc_depth or (reads_b and b_bad):
            return ErrCode.SRC_RANGE
        dst_depth = cfg.acc_depth if dst == VecDst.ACC else cfg.operand_depth
        if d["arg2"] + (1 if fold else k) > dst_depth:
            return ErrCode.DST_RANGE
    elif op in (Opcode.DMA_LOAD, Opcode.DMA_STORE):
        store = op == Opcode.DMA_STORE
        region = flags["region"]
        name = Region(region).name if region in {int(r) for r in Region} else None
        if name not in LOAD_REGIONS or (store and name != "ACC"):
            return ErrCode.DMA_REGION
        rows = d["arg1"]
        if k == 0 or rows == 0:
            return ErrCode.BAD_LENGTH
        sstride, dstride = strides[DmaQueue.STORE if store else DmaQueue.LOAD]
        bus_mask = board.bus_bytes - 1
        if d["dram"] & bus_mask or (rows > 1 and dstride & bus_mask):
            return ErrCode.DMA_ALIGN
        if d["arg0"] + (rows - 1) * sstride + k > MEM[name].depth(cfg):
            return ErrCode.DMA_SRAM_RANGE
        if d["dram"] + (rows - 1) * dstride + k * word_bytes(cfg, name) > board.dram_bytes:
            return ErrCode.DMA_DRAM_RANGE
    return ErrCode.NONE


@dataclass
class _Entry:
    """One command in the stream or a DMA queue: its index in what was submitted, its word, its
    decoded fields, and (DMA) the strides it took when it was pushed."""

    index: int
    cmd: int
    d: dict
    strides: tuple[int, int] = (0, 0)


_QUEUE_NAME = {DmaQueue.LOAD: "the DMA load queue", DmaQueue.STORE: "the DMA store queue"}


class Machine:
    """The architectural state of one chip and the execution of its command words.

    Parameters
    ----------
    config : ChipConfig
        The chip (SRAM widths and depths, formats, the vector unit).
    board : BoardConfig
        The resolved board (DRAM size and bus width, for the DMA checks).

    Attributes
    ----------
    sram : dict[str, numpy.ndarray]
        Every SRAM of ``rtl/memories.py`` as a (depth, word bytes) uint8 array, little endian.
    dram : numpy.ndarray
        The DRAM's bytes.
    sems : list[int]
        The semaphore counts.
    err_code, err_cmd, err_count, done_count : int
        What ERR, ERR_CMD0..3, ERR_COUNT and DONE_COUNT read.
    """

    def __init__(self, config: ChipConfig, board: BoardConfig, dma_order: str = "eager", seed: int = 0):
        if dma_order not in DMA_ORDERS:
            raise ValueError(f"dma_order must be one of {', '.join(DMA_ORDERS)}, not {dma_order!r}")
        self.config = config
        self.board = board
        self.dma_order = dma_order
        self.rng = random.Random(seed)
        self.sram = {m.name: np.zeros((m.depth(config), m.width(config) // 8), np.uint8) for m in MEMORIES}
        self.dram = np.zeros(board.dram_bytes, np.uint8)
        self.sems = [0] * SEMAPHORES
        self.strides = {q: (0, 0) for q in DmaQueue}
        self.stream: deque[_Entry] = deque()
        self.queues = {q: deque() for q in DmaQueue}
        self.submitted = 0  # commands handed to the machine so far (their indices)
        self.err_code = 0
        self.err_cmd = 0
        self.err_count = 0
        self.done_count = 0
        self.last_signal: dict[int, int] = {}  # semaphore -> index of the last command that signalled it
        self.stats = {"DRAM_RD_BYTES": 0, "DRAM_WR_BYTES": 0, "MACS": 0, "VEC_ELEMS": 0}

    # ---- the host's side ------------------------------------------------------------------
    def push(self, commands) -> None:
        """Queue ``commands`` behind what the stream still holds and run as far as they go."""
        for c in commands:
            c = int(c)
            if not 0 <= c < 1 << COMMAND_BITS:
                raise ValueError(f"command {self.submitted} is not a {COMMAND_BITS}-bit word: {c:#x}")
            self.stream.append(_Entry(self.submitted, c, _decoded(c)))
            self.submitted += 1
        self.run()

    def busy(self) -> bool:
        return bool(self.stream or self.queues[DmaQueue.LOAD] or self.queues[DmaQueue.STORE])

    def clear_err(self) -> None:
        self.err_code, self.err_cmd, self.err_count = 0, 0, 0

    def soft_reset(self) -> None:
        """CTRL.soft_reset: the command path restarts (queued work is discarded, the strides are
        0 again); memories keep their contents."""
        self.stream.clear()
        for q in self.queues.values():
            q.clear()
        self.strides = {q: (0, 0) for q in DmaQueue}
        self.sems = [0] * SEMAPHORES
        self.clear_err()

    # ---- execution ----------------------------------------------------------------------------
    def run(self) -> None:
        """Issue until nothing can move, in the order ``dma_order`` says. Raises
        :class:`Deadlock` when the stream's head waits on a semaphore (or on room in a DMA queue)
        that nothing queued can signal: commands submitted later queue behind it and cannot help."""
        step = {"eager": self._eager_step, "late": self._late_step, "random": self._random_step}[self.dma_order]
        while step():
            pass
        if self.stream:
            raise Deadlock(self.describe_stuck(), self.stuck())

    def _eager_step(self) -> bool:
        """Every DMA as soon as its queue head may go, then one stream command."""
        moved = False
        for q in DmaQueue:
            while self._dma_step(q):
                moved = True
        return bool(self.stream and self._stream_step()) or moved

    def _late_step(self) -> bool:
        """Stores as early as they may go, loads as late: a load lands only once the stream
        cannot go on without it (its head waits on a semaphore, or on room in a queue) or has
        nothing left. A unit command that should have waited for a load then reads the words
        from before it, so that race shows in the output."""
        moved = False
        while self._dma_step(DmaQueue.STORE):
            moved = True
        if self.stream and self._stream_step():
            return True
        return self._dma_step(DmaQueue.LOAD) or moved

    def _random_step(self) -> bool:
        """One of the heads that may move, chosen by the seeded ``rng``: every interleaving the
        semaphores allow can happen, one per seed."""
        can = [q for q in DmaQueue if self._dma_can(q)]
        if self.stream and self._stream_can():
            can.append(None)
        if not can:
            return False
        pick = can[self.rng.randrange(len(can))]
        return self._stream_step() if pick is None else self._dma_step(pick)

    def _dma_can(self, q: DmaQueue) -> bool:
        queue = self.queues[q]
        if not queue:
            return False
        s = queue[0].d["sync"]
        return not s["wait"] or self.sems[s["wait_sem"]] > 0

    def _stream_can(self) -> bool:
        d = self.stream[0].d
        if check_command(d, self.config, self.board, self.strides):
            return True  # dropped with its error
        if d["opcode"] in (Opcode.DMA_LOAD, Opcode.DMA_STORE):
            q = DmaQueue.LOAD if d["opcode"] == Opcode.DMA_LOAD else DmaQueue.STORE
            return len(self.queues[q]) < QUEUE_CAPACITY
        s = d["sync"]
        return not s["wait"] or self.sems[s["wait_sem"]] > 0

    def _take(self, d: dict) -> bool:
        s = d["sync"]
        if not s["wait"]:
            return True
        if self.sems[s["wait_sem"]] == 0:
            return False
        self.sems[s["wait_sem"]] -= 1
        return True

    def _signal(self, e: _Entry) -> None:
        s = e.d["sync"]
        for k in ("signal", "signal2"):
            if s[k]:
                sem = s[f"{k}_sem"]
                self.sems[sem] = (self.sems[sem] + 1) & _SEM_MASK
                self.last_signal[sem] = e.index

    def _dma_step(self, q: DmaQueue) -> bool:
        queue = self.queues[q]
        if not queue or not self._take(queue[0].d):
            return False
        e = queue.popleft()
        (self._load if q == DmaQueue.LOAD else self._store)(e)
        self._signal(e)
        return True

    def _stream_step(self) -> bool:
        e = self.stream[0]
        d = e.d
        err = check_command(d, self.config, self.board, self.strides)
        if err:
            self.stream.popleft()
            self.err_count += 1
            if self.err_code == 0:
                self.err_code, self.err_cmd = int(err), e.cmd
            return True
        op = d["opcode"]
        if op in (Opcode.DMA_LOAD, Opcode.DMA_STORE):
            q = DmaQueue.LOAD if op == Opcode.DMA_LOAD else DmaQueue.STORE
            if len(self.queues[q]) >= QUEUE_CAPACITY:
                return False
            self.stream.popleft()
            e.strides = self.strides[q]
            self.queues[q].append(e)
            self.done_count += 1
            return True
        if not self._take(d):
            return False
        self.stream.popleft()
        self.done_count += 1
        if op == Opcode.MATMUL:
            self._matmul(d)
        elif op == Opcode.REDUCE:
            self._reduce(d)
        elif op == Opcode.VEC:
            self._vec(d)
        elif op == Opcode.DMA_STRIDE:
            self.strides[DmaQueue(d["flags"]["queue"])] = (d["arg0"], d["dram_stride"])
        self._signal(e)  # NOP and FENCE: at retire; the units: when their result is written
        return True

    # ---- the units ------------------------------------------------------------------------------
    def acc_words(self, start: int, count: int) -> np.ndarray:
        return self.sram["ACC"][start:start + count].view("<u4")

    def _matmul(self, d: dict) -> None:
        cfg = self.config
        k, a, b, c = d["length"], d["arg0"], d["arg1"], d["arg2"]
        fl = d["flags"]
        a_words = self.sram["A"][a:a + k].view(np.int8)
        b_words = self.sram["B"][b:b + k].view(np.int8)
        old = self.acc_words(c, cfg.rows).copy() if fl["accumulate"] else None
        if fl["fmt"] == Format.INT8:
            out = matmul_int8(a_words, b_words, old)
        else:
            nblk = -(-k // BLOCK)
            sa, sb = d["arg3"]["sa"], d["arg3"]["sb"]
            out = matmul_fp(fl["fmt"], a_words, b_words, self.sram["SA"][sa:sa + nblk], self.sram["SB"][sb:sb + nblk],
                            old)
        self.acc_words(c, cfg.rows)[:] = out
        self.stats["MACS"] += k * cfg.rows * cfg.cols

    def _reduce(self, d: dict) -> None:
        words = self.acc_words(d["arg0"], d["length"]).copy()
        self.acc_words(d["arg2"], 1)[:] = reduce_words_to_word(d["flags"]["op"], words, self.config.lanes)

    def _vec(self, d: dict) -> None:
        fl = d["flags"]
        op, form, dst = VecOp(fl["op"]), VecB(fl["b"]), VecDst(fl["dst"])
        n, a0, b0, out0 = d["length"], d["arg0"], d["arg1"], d["arg2"]
        a = self.acc_words(a0, n).copy()
        fold = form == VecB.FOLD
        b = None
        if op not in VEC_UNARY and not fold:
            if form == VecB.VECTOR:
                b = self.acc_words(b0, n).copy()
            elif form == VecB.LANE:
                b = self.acc_words(b0, 1).copy()
            else:  # SCALAR: lane 0 of word b in every lane
                b = np.full((1, self.config.lanes), self.acc_words(b0, 1)[0, 0], np.uint32)
        res = vec_lanes(op, a, b, fold, d["arg3"] if op == VecOp.CVT_F8 else 0)
        if dst == VecDst.ACC:
            self.acc_words(out0, len(res))[:] = np.asarray(res, np.uint32)
        else:  # words of LANES int8 (or FP8) codes into A or B, byte j = lane j
            target = self.sram["A" if dst == VecDst.A else "B"]
            target[out0:out0 + len(res)] = np.asarray(res).astype(np.uint32).astype(np.uint8)
        self.stats["VEC_ELEMS"] += len(res) * self.config.lanes

    def _load(self, e: _Entry) -> None:
        self._dma(e, Region(e.d["flags"]["region"]).name, store=False)

    def _store(self, e: _Entry) -> None:
        self._dma(e, "ACC", store=True)

    def _dma(self, e: _Entry, name: str, store: bool) -> None:
        """One DMA's rows, each ``length`` SRAM words of SRAM ``name`` to or from DRAM, at the
        strides its queue had when it was pushed."""
        d = e.d
        sram = self.sram[name]
        wb = sram.shape[1]
        words, rows = d["length"], d["arg1"]
        sstride, dstride = e.strides
        for r in range(rows):
            at, dram = d["arg0"] + r * sstride, d["dram"] + r * dstride
            if store:
                self.dram[dram:dram + words * wb] = sram[at:at + words].reshape(-1)
            else:
                sram[at:at + words] = self.dram[dram:dram + words * wb].reshape(words, wb)
        self.stats["DRAM_WR_BYTES" if store else "DRAM_RD_BYTES"] += rows * words * wb

    # ---- diagnosis ------------------------------------------------------------------------------
    def stuck(self) -> list[dict]:
        """Every queue head that cannot move: where it is, its index, opcode, tag and semaphore."""
        out = []
        heads = [("the command stream", self.stream)] + [(_QUEUE_NAME[q], self.queues[q]) for q in DmaQueue]
        for where, queue in heads:
            if not queue:
                continue
            e = queue[0]
            s = e.d["sync"]
            try:
                op = Opcode(e.d["opcode"]).name
            except ValueError:
                op = f"0x{e.d['opcode']:02x}"
            info = {"where": where, "index": e.index, "opcode": op, "tag": e.d["tag"], "queued_behind": len(queue) - 1}
            if s["wait"] and self.sems[s["wait_sem"]] == 0:
                info.update(semaphore=s["wait_sem"], count=self.sems[s["wait_sem"]])
            elif where == "the command stream":
                q = DmaQueue.LOAD if e.d["opcode"] == Opcode.DMA_LOAD else DmaQueue.STORE
                info["full_queue"] = _QUEUE_NAME[q]
            out.append(info)
        return out

    def describe_stuck(self) -> str:
        parts = []
        for s in self.stuck():
            what = f"command {s['index']} ({s['opcode']}, tag {s['tag']}) at the head of {s['where']}"
            if "semaphore" in s:
                what += f" waits on semaphore {s['semaphore']} (count {s['count']})"
            elif "full_queue" in s:
                what += f" waits for room in {s['full_queue']} ({QUEUE_CAPACITY} entries, its head blocked)"
            parts.append(what)
        counts = ", ".join(f"{i}:{c}" for i, c in enumerate(self.sems))
        return ("deadlock: " + "; ".join(parts) + "; no command left can signal what they wait on "
                f"(semaphore counts {counts})")
