"""The board's DRAM: an AXI4 slave memory with a read latency and a bandwidth limit.

Built from a resolved :class:`~rtl.board.BoardConfig`:

* **Array.** ``dram_bytes / ROW_BYTES`` rows of :data:`ROW_BYTES` bytes (``dram_mem``, the array
  the host backdoor opens: DRAM is host memory, filled and read like a pinned buffer); a beat is
  one bus-wide slice of a row, little endian. Addresses
  wrap modulo the size (the DMA refuses descriptors past the end before they reach the bus).
* **Latency.** A read address accepted at cycle ``t`` returns its first beat no earlier than
  ``t + latency``; up to :data:`OUTSTANDING` read bursts are in flight at once, so a stream of
  bursts pays the latency once. Writes are posted: each beat lands when it is accepted, and
  the write response follows the last beat.
* **Bandwidth.** At most ``beats`` beats (reads and writes together) in each window of
  ``period`` cycles. When both directions want the channel they alternate. A window starts with
  the first beat after the channel has had all its beats back (and the windows of a busy channel
  follow each other): the limit does not run free, so a kernel's cycles do not depend on the
  absolute cycle it starts at (what ran before it, a session's first call or its tenth).
* **Bursts** increment within their 4 KiB page: an AXI master must never cross one, and this
  slave, like many, decodes the page once per burst (a master that does cross wraps).
* **Faults** (``rtl/faults.py``): a stuck DRAM bit sits on the read data (every AXI read of that
  byte sees it; the host's backdoor reads the array and does not). The descriptors are
  constants for ``--inject`` and, in a campaign build, the ``fault_sel`` port the testbench
  shares with the chip. With neither there is no saboteur logic.
"""

from __future__ import annotations

from amaranth.hdl import Const, Module, Mux, Signal
from amaranth.lib import data, fifo, wiring
from amaranth.lib.wiring import In

from .axi import axi_members
from .board import PAGE_BYTES, BoardConfig
from .config import log2
from .dram_array import DramArray
from .faults import BOARD_KINDS, FAULT_BITS, FAULT_LAYOUT
from .saboteurs import could_be, dram_read_data

__all__ = ["Dram", "OUTSTANDING", "DRAM_INSTANCE", "ROW_BYTES"]

OUTSTANDING = 4  # read bursts (and write addresses) the DRAM queues
DRAM_INSTANCE = "dram_mem"  # the DRAM's storage array (rtl/dram_array.py; its array is the host backdoor)
# The array holds 32-byte rows (8 beats of a 4-byte bus): the host backdoor opens one simulator
# handle per row, and a million-word array of single beats cost seconds of handle lookups.
ROW_BYTES = 32


class Dram(wiring.Component):
    """AXI4 slave DRAM model (see the module docstring)."""

    def __init__(self, board: BoardConfig, faults=(), fault_port: bool = False, verilog_array: bool = False):
        """``faults``: parsed faults (``rtl.faults.Fault``, the ``--inject`` list: those of the
        board's kinds are built in as constants, the others are the chip's); ``fault_port``:
        one more descriptor on a ``fault_sel`` input (a campaign build); ``verilog_array``: the
        storage array as the hand-written Verilog module (simulator builds, ``rtl/dram_array.py``)
        rather than an Amaranth memory (Amaranth's simulator)."""
        if not board.beats:
            raise ValueError("Dram needs a resolved BoardConfig (BoardConfig.resolve(chip))")
        self.board = board
        self.faults = [f for f in faults if f.kind in BOARD_KINDS]
        self.fault_port = fault_port
        self.verilog_array = verilog_array
        super().__init__({**axi_members(board.bus_bits, master=False),
                          **({"fault_sel": In(FAULT_BITS)} if fault_port else {})})

    def elaborate(self, platform):
        m = Module()
        b = self.board
        nbytes = b.bus_bytes
        depth = b.dram_bytes // ROW_BYTES
        per_row = ROW_BYTES // nbytes
        shift = log2(nbytes)
        row_shift = log2(ROW_BYTES)

        descs = [data.View(FAULT_LAYOUT, Const(f.encode(), FAULT_LAYOUT.size)) for f in self.faults]
        if self.fault_port:
            descs.append(data.View(FAULT_LAYOUT, self.fault_sel[:FAULT_LAYOUT.size]))

        m.submodules[DRAM_INSTANCE] = arr = DramArray(depth, 8 * ROW_BYTES, verilog=self.verilog_array)

        def row_of(addr):
            return (addr >> row_shift)[:log2(depth)]

        def beat_of(addr):  # which beat of its row an address is
            return (addr >> shift)[:max(1, log2(per_row))] if per_row > 1 else 0

        now = Signal(32)
        m.d.sync += now.eq(now + 1)

        def next_beat(addr):  # the next beat's address, within the 4 KiB page
            return (addr & ~(PAGE_BYTES - 1)) | ((addr + nbytes) & (PAGE_BYTES - 1))

        # ---- bandwidth: at most `beats` beats in each window of `period` cycles -----------------
        phase = Signal(range(b.period))
        tokens = Signal(range(b.beats + 1), init=b.beats)
        rd_beat, wr_beat = Signal(), Signal()  # a beat moves this cycle
        used = rd_beat + wr_beat  # both in one cycle only while two tokens are left
        window_end = phase == b.period - 1
        running = (tokens != b.beats) | (used != 0)  # a window is open: idle with every token, it waits
        m.d.sync += phase.eq(Mux(window_end | ~running, 0, phase + 1))
        m.d.sync += tokens.eq(Mux(window_end, b.beats, tokens - used))
        have_token = tokens != 0
        prefer_write = Signal()  # alternate when both directions want the channel
        with m.If(rd_beat | wr_beat):
            m.d.sync += prefer_write.eq(rd_beat)

        # ---- reads ----------------------------------------------------------------------------
        ar_layout = data.StructLayout({"addr": 32, "len": 8, "due": 32})
        m.submodules.ar_q = arq = fifo.SyncFIFO(width=ar_layout.size, depth=OUTSTANDING)
        ar_in = data.View(ar_layout, arq.w_data)
        m.d.comb += [
            self.axi_arready.eq(arq.w_rdy),
            arq.w_en.eq(self.axi_arvalid),
            ar_in.addr.eq(self.axi_araddr),
            ar_in.len.eq(self.axi_arlen),
            ar_in.due.eq(now + b.latency),
        ]
        ar_head = data.View(ar_layout, arq.r_data)
        r_active = Signal()
        r_addr = Signal(32)
        r_left = Signal(8)  # beats after the current one
        with m.If(~r_active & arq.r_rdy & ~(now - ar_head.due)[31]):  # due has come (wrap-safe)
            m.d.comb += arq.r_en.eq(1)
            m.d.sync += [r_active.eq(1), r_addr.eq(ar_head.addr), r_left.eq(ar_head.len)]

        rvalid, rlast = Signal(), Signal()
        want_rd = r_active & (~rvalid | self.axi_rready)
        want_wr = Signal()
        m.d.comb += rd_beat.eq(want_rd & have_token & (~want_wr | ~prefer_write | (tokens > 1)))
        r_sel = Signal(range(per_row))  # the beat of the row being read (held with the data)
        m.d.comb += [arr.r_addr.eq(row_of(r_addr)), arr.r_en.eq(rd_beat)]
        with m.If(rd_beat):
            m.d.sync += [rvalid.eq(1), rlast.eq(r_left == 0), r_addr.eq(next_beat(r_addr)), r_left.eq(r_left - 1),
                         r_sel.eq(beat_of(r_addr))]
            with m.If(r_left == 0):
                m.d.sync += r_active.eq(0)
        with m.Elif(self.axi_rready):
            m.d.sync += rvalid.eq(0)
        rdata = arr.r_data.word_select(r_sel, b.bus_bits) if per_row > 1 else arr.r_data
        if could_be(descs, *BOARD_KINDS):  # the address each beat was read from, for its stuck bits
            beat_q = Signal(log2(b.dram_bytes), name="rd_beat_addr_q")
            with m.If(rd_beat):
                m.d.sync += beat_q.eq(r_addr)
            rdata = dram_read_data(m, rdata, beat_q, descs, nbytes, "dram_rd")
        m.d.comb += [self.axi_rvalid.eq(rvalid), self.axi_rlast.eq(rlast), self.axi_rdata.eq(rdata),
                     self.axi_rresp.eq(0)]

        # ---- writes ---------------------------------------------------------------------------
        m.submodules.aw_q = awq = fifo.SyncFIFO(width=32, depth=OUTSTANDING)
        m.d.comb += [self.axi_awready.eq(awq.w_rdy), awq.w_en.eq(self.axi_awvalid), awq.w_data.eq(self.axi_awaddr)]
        w_active = Signal()
        w_addr = Signal(32)
        with m.If(~w_active & awq.r_rdy):
            m.d.comb += awq.r_en.eq(1)
            m.d.sync += [w_active.eq(1), w_addr.eq(awq.r_data)]
        m.d.comb += want_wr.eq(w_active & self.axi_wvalid)
        m.d.comb += wr_beat.eq(want_wr & have_token & (~want_rd | prefer_write | (tokens > 1)))
        m.d.comb += [
            self.axi_wready.eq(wr_beat),
            arr.w_addr.eq(row_of(w_addr)),
            arr.w_data.eq(self.axi_wdata.replicate(per_row)),
            arr.w_en.eq(Mux(wr_beat, self.axi_wstrb << (beat_of(w_addr) * nbytes), 0)),
        ]
        b_pending = Signal(range(OUTSTANDING + 2))
        b_done = self.axi_bvalid & self.axi_bready
        with m.If(wr_beat):
            m.d.sync += w_addr.eq(next_beat(w_addr))
            with m.If(self.axi_wlast):
                m.d.sync += w_active.eq(0)
        m.d.sync += b_pending.eq(b_pending + (wr_beat & self.axi_wlast) - b_done)
        m.d.comb += [self.axi_bvalid.eq(b_pending != 0), self.axi_bresp.eq(0)]
        return m
