"""The DMA engines: DRAM -> SRAM (load) and ACC -> DRAM (store), each with its own queue.

The command processor checks a DMA command, attaches its queue's current strides and pushes it
here (:data:`DMA_ENTRY`); the unit runs its queue in order. Per entry it waits on its semaphore
(if the command says so), moves ``rows`` rows of ``words`` SRAM words -- row ``r`` between DRAM
byte ``dram + r * dram_stride`` and SRAM word ``sram + r * sram_stride`` -- and signals its
semaphore once the last word has landed (load: written into the SRAM; store: acknowledged by
the DRAM's write response).

Every SRAM word is a whole number of bus beats (``rtl/board.py`` bounds the bus width), little
endian: beat 0 holds the word's low bits. Bursts are at most :data:`~rtl.board.MAX_BURST_BEATS`
beats, never cross a row's end and never cross a 4 KiB page. Addresses run ahead of data: the
read unit issues a row's bursts while earlier ones return, up to what the DRAM accepts.
"""

from __future__ import annotations

from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.lib import data, fifo, wiring
from amaranth.lib.wiring import In, Out

from .axi import INCR, axi_members
from .board import MAX_BURST_BEATS, PAGE_BYTES, BoardConfig
from .config import ChipConfig, log2
from .faults import FaultKind
from .isa import SYNC
from .memories import MEM, Region
from .revisions import Defect
from .saboteurs import active, could_be, dma_address

__all__ = ["DMA_ENTRY", "DMA_QUEUE_DEPTH", "DmaLoad", "DmaStore", "LOAD_REGIONS", "word_bytes"]

DMA_QUEUE_DEPTH = 16  # a double-buffered GEMM keeps two chunks of loads and a group of stores queued
LOAD_REGIONS = ("A", "B", "ACC", "SA", "SB")  # the SRAMs DMA_LOAD may write
DMA_ENTRY = data.StructLayout({
    "region": 3, "sram": 16, "words": 16, "rows": 16, "dram": 32, "sram_stride": 16, "dram_stride": 32,
    "sync": SYNC, "tag": 20,
})


def word_bytes(config: ChipConfig, name: str) -> int:
    """Bytes of one word of SRAM ``name`` (rtl/memories.py)."""
    return MEM[name].width(config) // 8


class _Queue(wiring.Component):
    """What both DMA units share: the queue, the semaphore handshake and the row walk."""

    def _common_members(self, config: ChipConfig) -> dict:
        return {
            "q_w_en": In(1),
            "q_w_data": In(DMA_ENTRY),
            "q_w_rdy": Out(1),
            "busy": Out(1),  # an entry queued or running
            "active": Out(1),  # moving data (not waiting)
            "wait_req": Out(1),  # the head entry waits on semaphore wait_sem
            "wait_sem": Out(3),
            "wait_grant": In(1),
            "signal": Out(1),  # pulse: signal semaphore signal_sem
            "signal_sem": Out(3),
            "signal2": Out(1),
            "signal2_sem": Out(3),
            "tag": Out(20),  # of the running entry (trace)
            "started": Out(1),  # pulse: the entry's wait is over, data starts moving (trace)
            "finished": Out(1),  # pulse: the entry completed (trace)
        }

    def _front(self, m: Module):
        """Queue + IDLE/WAIT states; returns (cur entry, go pulse, done signal to drive, running)."""
        m.submodules.queue = q = fifo.SyncFIFO(width=DMA_ENTRY.size, depth=DMA_QUEUE_DEPTH)
        m.d.comb += [q.w_en.eq(self.q_w_en), q.w_data.eq(self.q_w_data), self.q_w_rdy.eq(q.w_rdy)]
        cur = Signal(DMA_ENTRY)
        have = Signal()  # cur holds an entry not yet started
        running = Signal()
        go = Signal()
        done = Signal()
        with m.If(~have & ~running & q.r_rdy):
            m.d.comb += q.r_en.eq(1)
            m.d.sync += [cur.eq(q.r_data), have.eq(1)]
        m.d.comb += [
            self.wait_req.eq(have & cur.sync.wait),
            self.wait_sem.eq(cur.sync.wait_sem),
            go.eq(have & (~cur.sync.wait | self.wait_grant)),
        ]
        with m.If(go):
            m.d.sync += [have.eq(0), running.eq(1)]
        with m.If(done):
            m.d.sync += running.eq(0)
        m.d.comb += [
            self.busy.eq(q.r_rdy | have | running),
            self.active.eq(running),
            self.signal.eq(done & cur.sync.signal),
            self.signal_sem.eq(cur.sync.signal_sem),
            self.signal2.eq(done & cur.sync.signal2),
            self.signal2_sem.eq(cur.sync.signal2_sem),
            self.tag.eq(cur.tag),
            self.started.eq(go),
            self.finished.eq(done),
        ]
        return cur, go, done, running

    def _burst(self, m: Module, addr, left_bytes, name: str):
        """Beats of the next burst at ``addr`` with ``left_bytes`` left in the row: at most
        MAX_BURST_BEATS, and (unless the revision has DMA_BURST_CROSSES_PAGE) not past the 4 KiB page."""
        shift = log2(self.board.bus_bytes)
        beats = Signal(range(MAX_BURST_BEATS + 1), name=f"{name}_beats")
        left = left_bytes >> shift
        to_page = (PAGE_BYTES - (addr & (PAGE_BYTES - 1))) >> shift
        lim = Mux(left < MAX_BURST_BEATS, left, MAX_BURST_BEATS)
        if Defect.DMA_BURST_CROSSES_PAGE not in self.defects:
            lim = Mux(to_page < lim, to_page, lim)
        m.d.comb += beats.eq(lim)
        return beats


class DmaLoad(_Queue):
    """DRAM -> SRAM. ``wr_*`` is the unit's write into SRAM ``wr_region``; the chip's port
    arbitration answers ``wr_ready`` (the engine and the reduction unit go first on ACC)."""

    def __init__(self, config: ChipConfig, board: BoardConfig, defects=frozenset(), faults=()):
        self.config, self.board, self.defects, self.faults = config, board, frozenset(defects), list(faults)
        self.max_word = max(MEM[n].width(config) for n in LOAD_REGIONS)
        super().__init__({
            **self._common_members(config),
            **axi_members(board.bus_bits, master=True, write=False),
            "wr_region": Out(3), "wr_addr": Out(16), "wr_data": Out(self.max_word), "wr_en": Out(1),
            "wr_ready": In(1),
            "beat": Out(1),  # a data beat arrived (DRAM_RD_BYTES)
        })

    def elaborate(self, platform):
        m = Module()
        cfg, b = self.config, self.board
        bus = b.bus_bits
        cur, go, done, running = self._front(m)
        rows = Signal(16)
        rows_eff = cur.rows
        if Defect.DMA_ODD_ROWS_DROPS_LAST in self.defects:
            # The row counter steps over pairs of rows: an odd count loses its last row.
            rows_eff = Mux(cur.rows[0] & (cur.rows > 1), cur.rows - 1, cur.rows)
        wbeats = Signal(8)  # beats per SRAM word of the target region
        wbytes = Signal(8)
        with m.Switch(cur.region):
            for n in LOAD_REGIONS:
                with m.Case(Region[n]):
                    m.d.comb += [wbeats.eq(word_bytes(cfg, n) // b.bus_bytes), wbytes.eq(word_bytes(cfg, n))]
        row_bytes = Signal(32)
        m.d.comb += row_bytes.eq(cur.words * wbytes)

        # ---- addresses ------------------------------------------------------------------------
        ar_row = Signal(16)
        ar_row_addr = Signal(32)
        ar_off = Signal(32)
        addr = ar_row_addr + ar_off
        beats = self._burst(m, addr, row_bytes - ar_off, "ar")
        ar_pending = running & (ar_row < rows)
        m.d.comb += [
            self.axi_araddr.eq(dma_address(m, addr, self.faults, 1, "ld_araddr")), self.axi_arlen.eq(beats - 1),
            self.axi_arsize.eq(log2(b.bus_bytes)),
            self.axi_arburst.eq(INCR), self.axi_arvalid.eq(ar_pending),
        ]
        with m.If(go):
            m.d.sync += [rows.eq(rows_eff), ar_row.eq(0), ar_row_addr.eq(cur.dram), ar_off.eq(0)]
        with m.Elif(ar_pending & self.axi_arready):
            step = beats << log2(b.bus_bytes)
            with m.If(ar_off + step >= row_bytes):
                m.d.sync += [ar_row.eq(ar_row + 1), ar_row_addr.eq(ar_row_addr + cur.dram_stride), ar_off.eq(0)]
            with m.Else():
                m.d.sync += ar_off.eq(ar_off + step)

        # ---- data -----------------------------------------------------------------------------
        r_row = Signal(16)
        r_row_base = Signal(16)
        r_word = Signal(16)
        r_beat = Signal(8)
        asm = Signal(self.max_word)
        wr_pending = Signal()
        wr_addr = Signal(16)
        wr_data = Signal(self.max_word)
        take = Signal()
        taken = running & self.axi_rvalid & self.axi_rready & (r_row < rows)
        drops = could_be(self.faults, FaultKind.DMA_DROP_BEAT)
        if drops:
            taken = taken & ~self._dropped(m, drops, go, running)
        m.d.comb += [
            self.axi_rready.eq(~running | ~wr_pending | self.wr_ready),  # idle: drain strays
            take.eq(taken),
            self.beat.eq(take),
        ]
        with m.If(go):
            m.d.sync += [r_row.eq(0), r_row_base.eq(cur.sram), r_word.eq(0), r_beat.eq(0)]
        with m.If(wr_pending & self.wr_ready):
            m.d.sync += wr_pending.eq(0)
        with m.If(take):
            word = Signal(self.max_word)
            for i in range(self.max_word // bus):  # the beat lands in slot r_beat
                m.d.comb += word.word_select(i, bus).eq(Mux(r_beat == i, self.axi_rdata, asm.word_select(i, bus)))
            m.d.sync += asm.eq(word)
            with m.If(r_beat == wbeats - 1):
                m.d.sync += [wr_pending.eq(1), wr_data.eq(word), wr_addr.eq(r_row_base + r_word), r_beat.eq(0)]
                with m.If(r_word == cur.words - 1):
                    m.d.sync += [r_word.eq(0), r_row.eq(r_row + 1), r_row_base.eq(r_row_base + cur.sram_stride)]
                with m.Else():
                    m.d.sync += r_word.eq(r_word + 1)
            with m.Else():
                m.d.sync += r_beat.eq(r_beat + 1)
        m.d.comb += [
            self.wr_en.eq(wr_pending), self.wr_addr.eq(wr_addr), self.wr_data.eq(wr_data),
            self.wr_region.eq(cur.region),
            done.eq(running & (r_row == rows) & ~wr_pending & ~go),
        ]
        return m

    def _dropped(self, m: Module, descs, go, running):
        """1 while the beat on the bus is one an injected DMA_DROP_BEAT fault loses: beat
        ``desc.bit`` of burst ``desc.addr`` of the running entry (beats and bursts counted on
        the bus, the dropped beat included)."""
        burst = Signal(16, name="drop_burst")
        beat = Signal(8, name="drop_beat")
        with m.If(go):
            m.d.sync += [burst.eq(0), beat.eq(0)]
        with m.Elif(running & self.axi_rvalid & self.axi_rready):
            with m.If(self.axi_rlast):
                m.d.sync += [burst.eq(burst + 1), beat.eq(0)]
            with m.Else():
                m.d.sync += beat.eq(beat + 1)
        drop = Signal(name="drop_now")
        for d in descs:
            with m.If(active(d, FaultKind.DMA_DROP_BEAT) & (burst == d.addr) & (beat == d.bit)):
                m.d.comb += drop.eq(1)
        return drop


class DmaStore(_Queue):
    """ACC -> DRAM. Reads the accumulator SRAM through its own read port (``acc_rd_*``)."""

    def __init__(self, config: ChipConfig, board: BoardConfig, defects=frozenset(), faults=()):
        self.config, self.board, self.defects, self.faults = config, board, frozenset(defects), list(faults)
        cw = (config.acc_depth - 1).bit_length()
        super().__init__({
            **self._common_members(config),
            **axi_members(board.bus_bits, master=True, read=False),
            "acc_rd_addr": Out(cw), "acc_rd_data": In(config.acc_word_bits),
            "beat": Out(1),  # a data beat was accepted (DRAM_WR_BYTES)
        })

    def elaborate(self, platform):
        m = Module()
        cfg, b = self.config, self.board
        bus = b.bus_bits
        cur, go, done, running = self._front(m)
        wbeats = cfg.acc_word_bits // bus
        row_bytes = Signal(32)
        m.d.comb += row_bytes.eq(cur.words * (cfg.acc_word_bits // 8))

        # ---- addresses (each burst's length also goes to the data side) ------------------------
        m.submodules.bursts = bq = fifo.SyncFIFO(width=8, depth=DMA_QUEUE_DEPTH)
        aw_row = Signal(16)
        aw_row_addr = Signal(32)
        aw_off = Signal(32)
        addr = aw_row_addr + aw_off
        beats = self._burst(m, addr, row_bytes - aw_off, "aw")
        aw_pending = running & (aw_row < cur.rows) & bq.w_rdy
        m.d.comb += [
            self.axi_awaddr.eq(dma_address(m, addr, self.faults, 2, "st_awaddr")), self.axi_awlen.eq(beats - 1),
            self.axi_awsize.eq(log2(b.bus_bytes)),
            self.axi_awburst.eq(INCR), self.axi_awvalid.eq(aw_pending),
            bq.w_en.eq(aw_pending & self.axi_awready), bq.w_data.eq(beats),
        ]
        outstanding = Signal(16)  # bursts addressed, not yet acknowledged
        m.d.comb += self.axi_bready.eq(1)
        m.d.sync += outstanding.eq(outstanding + bq.w_en - (self.axi_bvalid & (outstanding != 0)))
        with m.If(go):
            m.d.sync += [aw_row.eq(0), aw_row_addr.eq(cur.dram), aw_off.eq(0)]
        with m.Elif(bq.w_en):
            step = beats << log2(b.bus_bytes)
            with m.If(aw_off + step >= row_bytes):
                m.d.sync += [aw_row.eq(aw_row + 1), aw_row_addr.eq(aw_row_addr + cur.dram_stride), aw_off.eq(0)]
            with m.Else():
                m.d.sync += aw_off.eq(aw_off + step)

        # ---- data: read a word (one cycle), send its beats --------------------------------------
        w_row = Signal(16)
        w_row_base = Signal(16)
        w_word = Signal(16)
        fetch = Signal()  # read the next ACC word this cycle
        have_word = Signal()
        word = Signal(cfg.acc_word_bits)
        beat = Signal(8)
        fetched = Signal()
        burst_left = Signal(9)  # beats left in the current burst (0: take the next length)
        words_left = Signal()
        m.d.comb += words_left.eq(w_row < cur.rows)
        m.d.comb += [self.acc_rd_addr.eq(w_row_base + w_word), fetch.eq(running & ~go & words_left & ~have_word & ~fetched)]
        m.d.sync += fetched.eq(fetch)
        with m.If(go):
            m.d.sync += [w_row.eq(0), w_row_base.eq(cur.sram), w_word.eq(0), have_word.eq(0), beat.eq(0)]
        with m.If(fetch):
            with m.If(w_word == cur.words - 1):
                m.d.sync += [w_word.eq(0), w_row.eq(w_row + 1), w_row_base.eq(w_row_base + cur.sram_stride)]
            with m.Else():
                m.d.sync += w_word.eq(w_word + 1)
        with m.If(fetched):
            m.d.sync += [word.eq(self.acc_rd_data), have_word.eq(1), beat.eq(0)]
        in_burst = burst_left != 0
        with m.If(~in_burst & bq.r_rdy & have_word):
            m.d.comb += bq.r_en.eq(1)
            m.d.sync += burst_left.eq(bq.r_data)
        send = Signal()
        m.d.comb += [
            self.axi_wdata.eq(word.word_select(beat, bus) if wbeats > 1 else word),
            self.axi_wstrb.eq(-1),
            self.axi_wlast.eq(burst_left == 1),
            self.axi_wvalid.eq(have_word & in_burst),
            send.eq(self.axi_wvalid & self.axi_wready),
            self.beat.eq(send),
        ]
        with m.If(send):
            m.d.sync += burst_left.eq(burst_left - 1)
            with m.If(beat == wbeats - 1):
                m.d.sync += [have_word.eq(0), beat.eq(0)]
            with m.Else():
                m.d.sync += beat.eq(beat + 1)
        m.d.comb += done.eq(running & ~go & ~words_left & ~have_word & ~fetched & (outstanding == 0)
                            & ~bq.r_rdy & ~in_burst)
        return m
