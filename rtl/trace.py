"""The trace buffer: one event per command per unit, written by the chip into the TRACE SRAM.

While ``TRACE_CTRL.enable`` is set the chip records, with no host involvement, one
:data:`TRACE_ENTRY` per event into the TRACE SRAM (``rtl/memories.py``), entries 0, 1, 2...:

* ``STREAM`` (the command processor): every command that leaves the FIFO head. ``start`` is the
  cycle it reached the head, ``end`` the cycle it issued (retired, went into a DMA queue, or was
  dropped for a failed check: then ``dropped`` is set). ``end > start`` means it waited: on its
  semaphore, for a busy unit or for room in a DMA queue.
* ``DMA_IN`` / ``DMA_OUT``: ``start`` is the unit's ``started`` pulse (its semaphore wait is over
  and data starts to move), ``end`` its ``finished`` pulse (the last word landed in the SRAM / the
  DRAM acknowledged the last write).
* ``MATRIX``: ``start`` is the MATMUL's issue, ``end`` its completion (the engine's done line:
  the cycle its semaphore is signalled). Consecutive MATMULs overlap: one feeds while the
  previous one drains.
* ``REDUCE``: ``start`` is the issue, ``end`` the accumulator write of the result.

An event covers cycles ``start..end`` inclusive. Times come from a free-running 48-bit cycle
counter that starts at chip reset; neither ``CTRL.soft_reset`` nor ``TRACE_CTRL.clear`` restarts
it, so an event that spans a clear still has ``start <= end``.

Several units can finish in one cycle, the SRAM takes one entry per cycle: each source has a
small staging FIFO (:data:`STAGING_DEPTH`) and the writer drains them in :data:`PRIORITY`
order. An event that finds its staging FIFO full is *lost*; an event drained while the buffer
is full is dropped; both are counted in TRACE_DROPPED and set the sticky ``overflow`` flag
(``lost`` too for the first kind). Recording never stalls the chip: with the trace enabled or
not, every unit runs exactly as it does without it.

The command processor's head is followed from outside (its FIFO is its own): the opcode and tag
of each command the fetcher reads (``fetch_data``, the cycle after ``ring_head`` moves) go into
a shadow FIFO of the same depth that pops when the head leaves (``fifo_level != 0`` and not
``stall``), and whether a command retired or was dropped shows in ``done_count`` one cycle
later, so the stream's event is recorded then. The MATMUL's and the REDUCE's tags are the head's
when they issue; MATMULs complete in issue order, so a FIFO of their (start, tag) pairs pairs
each completion with its issue.
"""

from __future__ import annotations

import enum

from amaranth.hdl import Cat, Const, Module, Mux, ResetInserter, Signal
from amaranth.lib import data, fifo, wiring
from amaranth.lib.wiring import In, Out

from .config import ChipConfig
from .isa import COMMAND_BITS, COMMAND_LAYOUT, Opcode
from .memories import MEM

__all__ = ["TRACE_ENTRY", "TIME_BITS", "Unit", "UNIT_NAMES", "UNIT_OPCODES", "STAGING_DEPTH", "PRIORITY",
           "TraceBuffer", "decode_entry", "trace_depth", "engine_in_flight"]

TIME_BITS = 48
TAG_BITS = COMMAND_LAYOUT["tag"].width


class Unit(enum.IntEnum):
    """The trace's tracks (``TRACE_ENTRY.unit``)."""

    STREAM = 0  # the command processor: each command from FIFO head to issue
    DMA_IN = 1
    DMA_OUT = 2
    MATRIX = 3
    REDUCE = 4
    VECTOR = 5  # the vector unit: a VEC from issue to its last write


UNIT_NAMES = {Unit.STREAM: "command processor", Unit.DMA_IN: "DMA in", Unit.DMA_OUT: "DMA out",
              Unit.MATRIX: "matrix engine", Unit.REDUCE: "reduction unit", Unit.VECTOR: "vector unit"}
UNIT_OPCODES = {Unit.DMA_IN: Opcode.DMA_LOAD, Unit.DMA_OUT: Opcode.DMA_STORE, Unit.MATRIX: Opcode.MATMUL,
                Unit.REDUCE: Opcode.REDUCE, Unit.VECTOR: Opcode.VEC}  # the command a unit's events belong to

# One 128-bit word of the TRACE SRAM, low bits first (docs/chip.md, "Trace buffer").
TRACE_ENTRY = data.StructLayout({
    "start": TIME_BITS,  # [47:0]
    "end": TIME_BITS,  # [95:48]
    "tag": TAG_BITS,  # [115:96] the command's tag
    "opcode": 8,  # [123:116]
    "unit": 3,  # [126:124] Unit
    "dropped": 1,  # [127] STREAM only: the command failed a check and was dropped (ERR)
})
assert TRACE_ENTRY.size == MEM["TRACE"].width(ChipConfig()), "a trace entry is one TRACE SRAM word"

# Staging FIFO per source: the units finish at most every few cycles, the stream up to once a
# cycle for a run of commands that issue at once (DMA pushes, NOPs).
STAGING_DEPTH = {Unit.MATRIX: 2, Unit.REDUCE: 2, Unit.VECTOR: 2, Unit.DMA_IN: 2, Unit.DMA_OUT: 2, Unit.STREAM: 8}
PRIORITY = (Unit.MATRIX, Unit.REDUCE, Unit.VECTOR, Unit.DMA_IN, Unit.DMA_OUT, Unit.STREAM)  # the writer's order


def trace_depth(config: ChipConfig) -> int:
    """Entries in the TRACE SRAM (the memory table's depth: ``ChipConfig.trace_depth``)."""
    return MEM["TRACE"].depth(config)


def engine_in_flight(config: ChipConfig) -> int:
    """MATMULs that can be between issue and completion at once, plus margin: issues are at least
    ``min_matmul_cycles`` apart and each completes ``slot + 1 + engine_drain_cycles`` after it."""
    slot = config.min_matmul_cycles
    return (slot + 1 + config.engine_drain_cycles) // slot + 2


def decode_entry(word: int) -> dict[str, int]:
    """The fields of one TRACE SRAM word as integers (``start``, ``end``, ``tag``, ``opcode``,
    ``unit``, ``dropped``)."""
    w = int(word)
    return {name: (w >> f.offset) & ((1 << f.width) - 1) for name, f in TRACE_ENTRY}


class TraceBuffer(wiring.Component):
    """Event capture, staging and the writer into the TRACE SRAM.

    Members
    -------
    enable : In(1)
        TRACE_CTRL.enable: record events.
    clear : In(1)
        TRACE_CTRL.clear strobe: count, flags and dropped count to 0, staged events discarded.
    flush : In(1)
        CTRL.soft_reset: the command path and the units restart, so the in-flight bookkeeping
        does too (the recorded entries, the counters and ``enable`` survive).
    load, load_value : In
        CTRL.load_counters (design for test): TRACE_DROPPED from SCRATCH.
    ring_head, fetch_data, fifo_level, stall, done_count : In
        The command processor's ``head``, the ring word its fetcher reads, its ``fifo_level``,
        ``stall`` and ``done_count``.
    mm_started, mm_finished, rd_started, rd_finished : In(1)
        The engine's and the reduction unit's pulses.
    ld_started, ld_finished, ld_tag, st_started, st_finished, st_tag : In
        The DMA units' pulses and running entry's tag.
    wr_addr, wr_data, wr_en : Out
        The TRACE SRAM write port (the window's writes wait while ``wr_en``).
    count, pending, lost, overflow, dropped : Out
        TRACE_COUNT and TRACE_DROPPED.
    """

    def __init__(self, config: ChipConfig):
        self.config = config
        self.depth = trace_depth(config)
        assert self.depth < (1 << 16), "TRACE_COUNT.count is 16 bits"
        super().__init__({
            "enable": In(1), "clear": In(1), "flush": In(1), "load": In(1), "load_value": In(32),
            "ring_head": In(16), "fetch_data": In(COMMAND_BITS), "fifo_level": In(9), "stall": In(1),
            "done_count": In(32),
            "mm_started": In(1), "mm_finished": In(1), "rd_started": In(1), "rd_finished": In(1),
            "vu_started": In(1), "vu_finished": In(1),
            "ld_started": In(1), "ld_finished": In(1), "ld_tag": In(TAG_BITS),
            "st_started": In(1), "st_finished": In(1), "st_tag": In(TAG_BITS),
            "wr_addr": Out(max(1, (self.depth - 1).bit_length())), "wr_data": Out(TRACE_ENTRY.size),
            "wr_en": Out(1),
            "count": Out(16), "pending": Out(1), "lost": Out(1), "overflow": Out(1), "dropped": Out(32),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self.config
        now = Signal(TIME_BITS)
        m.d.sync += now.eq(now + 1)

        # ---- the command processor's FIFO head, shadowed -------------------------------------
        head_q = Signal(16)
        fetched = Signal()  # the fetcher's read of last cycle lands in the FIFO this cycle
        m.d.sync += head_q.eq(self.ring_head)
        with m.If(self.flush):
            m.d.sync += head_q.eq(0)  # the processor's head resets with it
        m.d.comb += fetched.eq(self.ring_head != head_q)
        cmd = data.View(COMMAND_LAYOUT, self.fetch_data)
        heads = fifo.SyncFIFO(width=8 + TAG_BITS, depth=cfg.cmd_fifo_depth)
        m.submodules.heads = ResetInserter(self.flush)(heads)
        head_valid = self.fifo_level != 0
        leave = Signal()
        m.d.comb += [heads.w_en.eq(fetched), heads.w_data.eq(Cat(cmd.opcode, cmd.tag)),
                     leave.eq(head_valid & ~self.stall), heads.r_en.eq(leave)]
        head_op, head_tag = heads.r_data[:8], heads.r_data[8:]
        head_start = Signal(TIME_BITS)  # when the command now at the head got there
        with m.If(~head_valid | leave):
            m.d.sync += head_start.eq(now + 1)

        def entry(unit, start, end, tag, opcode=None, dropped=0):
            e = Signal(TRACE_ENTRY, name=f"ev_{unit.name.lower()}")
            m.d.comb += [e.start.eq(start), e.end.eq(end), e.tag.eq(tag),
                         e.opcode.eq(UNIT_OPCODES[unit] if opcode is None else opcode), e.unit.eq(unit),
                         e.dropped.eq(dropped)]
            return e

        events = {}
        # STREAM, one cycle late: done_count has moved by then if the command retired.
        s_pend, s_start, s_end = Signal(), Signal(TIME_BITS), Signal(TIME_BITS)
        s_op, s_tag, s_parity = Signal(8), Signal(TAG_BITS), Signal()
        m.d.sync += s_pend.eq(leave & ~self.flush)
        with m.If(leave):
            m.d.sync += [s_start.eq(head_start), s_end.eq(now), s_op.eq(head_op), s_tag.eq(head_tag),
                         s_parity.eq(self.done_count[0])]
        events[Unit.STREAM] = (s_pend, entry(Unit.STREAM, s_start, s_end, s_tag, s_op,
                                             dropped=self.done_count[0] == s_parity))

        # MATRIX: (start, tag) per MATMUL in flight, popped in order at completion.
        starts = fifo.SyncFIFO(width=TIME_BITS + TAG_BITS, depth=engine_in_flight(cfg))
        m.submodules.mm_starts = ResetInserter(self.flush)(starts)
        m.d.comb += [starts.w_en.eq(self.mm_started), starts.w_data.eq(Cat(now, head_tag)),
                     starts.r_en.eq(self.mm_finished)]
        events[Unit.MATRIX] = (self.mm_finished, entry(Unit.MATRIX, starts.r_data[:TIME_BITS], now,
                                                       starts.r_data[TIME_BITS:]))

        # REDUCE and the DMA units: one command in flight each.
        def single(unit, started, finished, tag):
            t0 = Signal(TIME_BITS, name=f"{unit.name.lower()}_start")
            with m.If(started):
                m.d.sync += t0.eq(now)
            if tag is None:  # the reduction and vector units' tag: the head's when it issues
                tag = Signal(TAG_BITS, name=f"{unit.name.lower()}_tag")
                with m.If(started):
                    m.d.sync += tag.eq(head_tag)
            events[unit] = (finished, entry(unit, t0, now, tag))

        single(Unit.REDUCE, self.rd_started, self.rd_finished, None)
        single(Unit.VECTOR, self.vu_started, self.vu_finished, None)
        single(Unit.DMA_IN, self.ld_started, self.ld_finished, self.ld_tag)
        single(Unit.DMA_OUT, self.st_started, self.st_finished, self.st_tag)

        # ---- staging and the writer ---------------------------------------------------------------
        stages = {}
        lost_now = []
        for unit in PRIORITY:
            f = fifo.SyncFIFO(width=TRACE_ENTRY.size, depth=STAGING_DEPTH[unit])
            m.submodules[f"stage_{unit.name.lower()}"] = ResetInserter(self.clear)(f)
            valid, ev = events[unit]
            take = Signal(name=f"take_{unit.name.lower()}")
            m.d.comb += [take.eq(valid & self.enable), f.w_en.eq(take), f.w_data.eq(ev)]
            lost_now.append(take & ~f.w_rdy)
            stages[unit] = f
        popped = Signal()
        picked = Signal(TRACE_ENTRY.size)
        for i, unit in enumerate(PRIORITY):
            f = stages[unit]
            with (m.If if i == 0 else m.Elif)(f.r_rdy):
                m.d.comb += [f.r_en.eq(1), picked.eq(f.r_data), popped.eq(1)]
        full = self.count == self.depth
        lost_any = Signal()
        m.d.comb += lost_any.eq(Cat(*lost_now) != 0)
        with m.If(popped & ~full):
            m.d.comb += [self.wr_en.eq(1), self.wr_addr.eq(self.count), self.wr_data.eq(picked)]
        more = Signal(range(len(PRIORITY) + 2))
        m.d.comb += more.eq(sum(lost_now, popped & full))
        total = Signal(33)
        m.d.comb += total.eq(self.dropped + more)
        with m.If(self.clear):
            m.d.sync += [self.count.eq(0), self.dropped.eq(0), self.overflow.eq(0), self.lost.eq(0)]
        with m.Else():
            with m.If(popped & ~full):
                m.d.sync += self.count.eq(self.count + 1)
            with m.If(self.load):  # DFT: every counter bit without 2**32 drops
                m.d.sync += self.dropped.eq(self.load_value)
            with m.Else():
                m.d.sync += self.dropped.eq(Mux(total[32], Const(2**32 - 1, 32), total[:32]))
            with m.If((popped & full) | lost_any):
                m.d.sync += self.overflow.eq(1)
            with m.If(lost_any):
                m.d.sync += self.lost.eq(1)
        m.d.comb += self.pending.eq(s_pend | (Cat(*[f.r_rdy for f in stages.values()]) != 0))
        return m
