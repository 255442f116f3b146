"""The chip top: SRAMs, units, command processor, host CSR bus and register file.

Host CSR bus (all signals sampled on the rising clock edge):
the host drives ``csr_addr``/``csr_wdata`` and holds ``csr_we`` or ``csr_re`` high until it sees
``csr_ready``; ``csr_ready`` is high for exactly one cycle and ``csr_rdata`` is valid in it. The
transfer completes on the clock edge where strobe and ``csr_ready`` are both high; a strobe
still high after that edge starts the next transfer. A transfer has its side effects once. Front-door window writes into the accumulator SRAM
wait (``csr_ready`` stays low) while the engine or the reduction unit is busy, and into the trace
SRAM while the trace buffer (``rtl/trace.py``) writes an entry.
"""

from __future__ import annotations

from amaranth.hdl import Cat, Const, DomainRenamer, Module, Mux, ResetInserter, Signal
from amaranth.lib import data, memory, wiring
from amaranth.lib.wiring import In, Out

from .axi import axi_members
from .board import BoardConfig
from .clock_gate import add_gated_domain
from .cmdproc import CommandProcessor
from .dma import LOAD_REGIONS, DmaLoad, DmaStore
from .config import ChipConfig, log2
from .csr_map import CSR_ADDR_BITS, ID_MAGIC, PERF_COUNTERS, REG, REG_INDEX, SEMAPHORES, WINDOW_DATA, Register
from .engine import MatrixEngine
from .pe import PE_MODULE
from .faults import FAULT_BITS, FAULT_LAYOUT, PINS, FaultKind, parse_faults
from .saboteurs import SramSaboteur, active, stuck_value
from .isa import COMMAND_BITS, ErrCode
from .memories import MEM, MEMORIES, Region
from .reduce import ReductionUnit
from .revisions import Defect
from .revisions import revision as lookup_revision
from .trace import TraceBuffer
from .vector import LANE_MODULE, VectorLane, VectorUnit

__all__ = ["Chip"]


assert MEM["CMDQ"].width(ChipConfig()) == COMMAND_BITS, "the command ring holds one command per entry"


def _pack_fields(reg: Register, **values):
    """``values`` (signals or ints, by field name) concatenated into ``reg``'s layout, in LSB
    order with zeros in the gaps, up to the highest field given."""
    parts, at = [], 0
    for f in sorted(reg.fields, key=lambda f: f.lsb):
        if f.name not in values:
            continue
        if f.lsb > at:
            parts.append(Const(0, f.lsb - at))
        v = values.pop(f.name)
        parts.append(v if not isinstance(v, int) else Const(v, f.width))
        at = f.lsb + f.width
    if values:
        raise KeyError(f"register {reg.name} has no field(s) {sorted(values)}")
    return Cat(*parts)


def _bits(value, reg: str, field: str):
    f = REG[reg].field(field)
    return value[f.lsb:f.lsb + f.width]


class _Proxy:
    """Port signals as the rest of the chip sees them (attributes mirror Amaranth's ports)."""


class _FaultyPorts:
    """An SRAM's ports seen through injected faults (``rtl/saboteurs.py``); with no fault
    descriptors these are plain wires."""

    def __init__(self, m: Module, mem, write_port, sab: SramSaboteur, granularity: int | None):
        self._m, self._mem, self._sab = m, mem, sab
        self.write = _Proxy()
        self.write.addr = Signal.like(write_port.addr, name=f"{write_port.addr.name}_in")
        self.write.data = Signal.like(write_port.data)
        self.write.en = Signal.like(write_port.en)
        addr = sab.address(self.write.addr, "w")
        data = sab.write(addr, self.write.data, self.write.en, granularity)
        m.d.comb += [write_port.addr.eq(addr), write_port.data.eq(data), write_port.en.eq(self.write.en)]
        self._reads = 0

    def read_port(self, domain: str = "sync"):
        m, port = self._m, self._mem.read_port(domain=domain)
        tag = f"r{self._reads}"
        self._reads += 1
        p = _Proxy()
        p.addr = Signal.like(port.addr)
        addr = self._sab.address(p.addr, tag)
        m.d.comb += port.addr.eq(addr)
        p.data = Signal.like(port.data)
        m.d.comb += p.data.eq(self._sab.read(addr, port.data, tag, domain))
        return p


class Chip(wiring.Component):
    """The whole accelerator.

    Parameters
    ----------
    config : ChipConfig
    revision : str
        Silicon revision name (``rtl.revisions``): selects the REV code and the defects.
    defects : frozenset or None
        Override the revision's defects (``frozenset()`` gives the chip as specified).

    The SRAMs are the entries of ``rtl.memories.MEMORIES``, each a submodule of its
    ``instance`` name and a region of the front-door window.
    """

    def __init__(self, config: ChipConfig | None = None, revision: str = "A0", faults: tuple[str, ...] = (),
                 defects: frozenset[str] | None = None, fault_port: bool = False, board: BoardConfig | None = None,
                 gated_clocks: bool = False):
        config = ChipConfig() if config is None else config
        if not isinstance(config, ChipConfig):
            raise TypeError(f"config must be a ChipConfig, not {config!r}")
        self.rev = lookup_revision(revision)  # ValueError naming the known revisions
        # ``defects`` overrides the revision's list: frozenset() elaborates the chip as specified
        # (block-level tests use it); silicon variants always take the revision's own list.
        self.defects = self.rev.defects if defects is None else frozenset(defects)
        self.fault_list = parse_faults(faults, config)  # ValueError with the accepted syntax
        self.config = config
        self.revision = revision
        self.faults = tuple(faults)
        self.fault_port = fault_port
        # Gated clocks for the vector unit and the engine's FP finalize stage: a simulation-speed
        # device for the Verilog builds (cosim/build.py turns it on). Amaranth's simulator gives
        # a clock driven by logic a delta cycle of delay, so its registers would sample the
        # core-clock registers' new values: a chip run there keeps every unit on one clock.
        self.gated_clocks = gated_clocks
        # The board's DRAM, as the DMA checks descriptors against it and DRAM0/DRAM1 publish it.
        self.board = (BoardConfig() if board is None else board).resolve(config)
        super().__init__(
            {
                **axi_members(self.board.bus_bits, master=True),
                **({"fault_sel": In(FAULT_BITS)} if fault_port else {}),
                "csr_addr": In(CSR_ADDR_BITS),
                "csr_wdata": In(32),
                "csr_we": In(1),
                "csr_re": In(1),
                "csr_rdata": Out(32),
                "csr_ready": Out(1),
                "irq": Out(1),
                "idle": Out(1),
            }
        )
        # A Verilog build's engine instances one PE module (rtl/pe.py) in every position, converted
        # once (cosim/build.py appends it to the chip's Verilog), as the vector unit does its lane;
        # not where the PEs differ (PE faults) or in Amaranth's simulator, which takes a PE
        # submodule per position.
        self.shared_pe = gated_clocks and MatrixEngine.can_share_pe(self._fault_views())

    def instanced_modules(self) -> dict:
        """Module name -> the design of each module the chip instances rather than contains: a
        netlist of the chip (Verilog, an area report) converts each once and appends it."""
        mods = {}
        if self.shared_pe:
            mods[PE_MODULE] = MatrixEngine.shared_pe_design(self.config, self.defects, gated_fp=self.gated_clocks)
        if self.config.vector and self.gated_clocks:
            mods[LANE_MODULE] = VectorLane(self.defects)
        return mods

    def _fault_views(self) -> list:
        """The fault descriptors the units' saboteurs see: the ``--inject`` list as constants, and
        a campaign build's ``fault_sel`` port."""
        faults = [data.View(FAULT_LAYOUT, Const(f.encode(), FAULT_LAYOUT.size)) for f in self.fault_list]
        if self.fault_port:
            faults.append(data.View(FAULT_LAYOUT, self.fault_sel[:FAULT_LAYOUT.size]))
        return faults

    def region_words(self) -> dict[int, tuple[int, int]]:
        """Window region -> (depth in words, 32-bit chunks per word)."""
        c = self.config
        return {mem.region: (mem.depth(c), mem.chunks(c)) for mem in MEMORIES}

    def elaborate(self, platform):
        m = Module()
        cfg = self.config
        soft_rst = Signal()

        # ---- units (soft reset clears their state; memory contents survive) ---------------
        defects = self.defects
        # Fault descriptors: the --inject list as constants, plus the campaign port.
        faults = self._fault_views()
        engine = MatrixEngine(cfg, defects, faults, gated_fp=self.gated_clocks, shared_pe=self.shared_pe,
                              soft_rst=soft_rst)
        reducer = ReductionUnit(cfg, defects, faults)
        cmdp = CommandProcessor(cfg, self.board, defects, faults)
        dma_ld = DmaLoad(cfg, self.board, defects, faults)
        dma_st = DmaStore(cfg, self.board, defects, faults)
        m.submodules.engine = ResetInserter(soft_rst)(engine)
        m.submodules.reducer = ResetInserter(soft_rst)(reducer)
        m.submodules.cmdproc = ResetInserter(soft_rst)(cmdp)
        m.submodules.dma_load = ResetInserter(soft_rst)(dma_ld)
        m.submodules.dma_store = ResetInserter(soft_rst)(dma_st)
        # a Verilog build's lanes: one module, instanced in every lane (instanced_modules)
        vu = VectorUnit(cfg, defects, shared_lane=self.gated_clocks) if cfg.vector else None
        if vu is not None and not self.gated_clocks:
            m.submodules.vector = ResetInserter(soft_rst)(vu)
        elif vu is not None:
            # The vector unit runs on a gated clock ("vec", rtl/clock_gate.py) in the cycles it
            # has a VEC to accept or in flight, or a soft reset to take: nothing in it changes
            # while it is idle, and its 4 lanes of fp32 logic are not evaluated then
            # (docs/chip.md, "The vector unit's clock").
            add_gated_domain(m, "vec", vu.start | vu.busy | soft_rst)
            m.submodules.vector = ResetInserter({"vec": soft_rst})(DomainRenamer("vec")(vu))
        # The trace buffer is debug state: a soft reset keeps what it recorded (trace.flush).
        m.submodules.trace = trace = TraceBuffer(cfg)
        # the AXI master port: reads from the load unit, writes from the store unit
        for name in self.signature.members:
            if name.startswith("axi_"):
                unit = dma_ld if hasattr(dma_ld, name) else dma_st
                ours, theirs = getattr(self, name), getattr(unit, name)
                if self.signature.members[name].flow == Out:
                    m.d.comb += ours.eq(theirs)
                else:
                    m.d.comb += theirs.eq(ours)
        for u, unit in (("ld", dma_ld), ("st", dma_st)):
            m.d.comb += [
                unit.q_w_en.eq(getattr(cmdp, f"{u}_push")), unit.q_w_data.eq(getattr(cmdp, f"{u}_entry")),
                getattr(cmdp, f"{u}_room").eq(unit.q_w_rdy), getattr(cmdp, f"{u}_busy").eq(unit.busy),
                getattr(cmdp, f"{u}_wait_req").eq(unit.wait_req), getattr(cmdp, f"{u}_wait_sem").eq(unit.wait_sem),
                unit.wait_grant.eq(getattr(cmdp, f"{u}_wait_grant")),
                getattr(cmdp, f"{u}_signal").eq(unit.signal), getattr(cmdp, f"{u}_signal_sem").eq(unit.signal_sem),
                getattr(cmdp, f"{u}_signal2").eq(unit.signal2), getattr(cmdp, f"{u}_signal2_sem").eq(unit.signal2_sem),
            ]

        # ---- SRAMs (seen through any injected faults) ----------------------------------------

        def make_sram(index, spec):
            width, depth = spec.width(cfg), spec.depth(cfg)
            gran = 32 if width > 32 else None
            mem = memory.Memory(shape=width, depth=depth, init=[])
            m.submodules[spec.instance] = mem
            sab = SramSaboteur(m, faults, index, width, depth, spec.name.lower())
            wp = mem.write_port(granularity=gran) if gran else mem.write_port()
            return _FaultyPorts(m, mem, wp, sab, gran)

        srams = {spec.name: make_sram(i, spec) for i, spec in enumerate(MEMORIES)}
        a_mem, b_mem, acc_mem, q_mem = srams["A"], srams["B"], srams["ACC"], srams["CMDQ"]
        sa_mem, sb_mem = srams["SA"], srams["SB"]
        trace_mem = srams["TRACE"]
        acc_wp = acc_mem.write

        a_rp_eng, b_rp_eng = a_mem.read_port(), b_mem.read_port()
        acc_rp_eng, acc_rp_red, acc_rp_dma = acc_mem.read_port(), acc_mem.read_port(), acc_mem.read_port()
        q_rp_fetch = q_mem.read_port()
        # Front-door window: a read port on every SRAM; its own write port where the SRAM's write
        # port is not shared with a unit (ACC's is arbitrated below).
        win_rp = {spec.region: srams[spec.name].read_port() for spec in MEMORIES}
        win_wp = {spec.region: srams[spec.name].write for spec in MEMORIES if not spec.window_waits_for_units}
        shared_wp = [spec.region for spec in MEMORIES if spec.window_waits_for_units]
        assert shared_wp == [Region.ACC], "only ACC's write port is shared with the units"
        sa_rp_eng, sb_rp_eng = sa_mem.read_port(), sb_mem.read_port()
        m.d.comb += [
            sa_rp_eng.addr.eq(engine.sa_rd_addr),
            engine.sa_rd_data.eq(sa_rp_eng.data),
            sb_rp_eng.addr.eq(engine.sb_rd_addr),
            engine.sb_rd_data.eq(sb_rp_eng.data),
        ]

        b_eng_data = b_rp_eng.data
        if Defect.OPERAND_TOP_WORD_READS_ZERO in defects:
            top_q = Signal()
            m.d.sync += top_q.eq(engine.b_rd_addr == cfg.operand_depth - 1)
            b_eng_data = Mux(top_q, 0, b_rp_eng.data)
        m.d.comb += [
            a_rp_eng.addr.eq(engine.a_rd_addr),
            engine.a_rd_data.eq(a_rp_eng.data),
            b_rp_eng.addr.eq(engine.b_rd_addr),
            engine.b_rd_data.eq(b_eng_data),
            acc_rp_eng.addr.eq(engine.acc_rd_addr),
            engine.acc_rd_data.eq(acc_rp_eng.data),
            acc_rp_dma.addr.eq(dma_st.acc_rd_addr),
            dma_st.acc_rd_data.eq(acc_rp_dma.data),
            acc_rp_red.addr.eq(reducer.acc_rd_addr),
            reducer.acc_rd_data.eq(acc_rp_red.data),
            q_rp_fetch.addr.eq(cmdp.cmdq_rd_addr),
            cmdp.cmdq_rd_data.eq(q_rp_fetch.data),
        ]

        # ---- command processor <-> units -------------------------------------------------
        m.d.comb += [
            engine.start.eq(cmdp.mm_start),
            engine.a_addr.eq(cmdp.mm_a),
            engine.b_addr.eq(cmdp.mm_b),
            engine.c_addr.eq(cmdp.mm_c),
            engine.k.eq(cmdp.mm_k),
            engine.accumulate.eq(cmdp.mm_acc),
            engine.fmt.eq(cmdp.mm_fmt),
            engine.sa_addr.eq(cmdp.mm_sa),
            engine.sb_addr.eq(cmdp.mm_sb),
            cmdp.mm_feed_ready.eq(engine.feed_ready),
            cmdp.mm_busy.eq(engine.busy),
            engine.sig.eq(cmdp.mm_sig),
            engine.sig_sem.eq(cmdp.mm_sig_sem),
            cmdp.mm_done_sig.eq(engine.done_sig),
            cmdp.mm_done_sem.eq(engine.done_sem),
            cmdp.rd_done.eq(reducer.acc_wr_en),
            reducer.start.eq(cmdp.rd_start),
            reducer.op.eq(cmdp.rd_op),
            reducer.src.eq(cmdp.rd_src),
            reducer.count.eq(cmdp.rd_count),
            reducer.dst.eq(cmdp.rd_dst),
            cmdp.rd_busy.eq(reducer.busy),
        ]
        if vu is not None:  # its own two read ports into ACC (a and b)
            vec = "vec" if self.gated_clocks else "sync"
            acc_rp_vu_a, acc_rp_vu_b = acc_mem.read_port(vec), acc_mem.read_port(vec)
            m.d.comb += [
                acc_rp_vu_a.addr.eq(vu.acc_rd_addr), vu.acc_rd_data.eq(acc_rp_vu_a.data),
                acc_rp_vu_b.addr.eq(vu.b_rd_addr), vu.b_rd_data.eq(acc_rp_vu_b.data),
                vu.start.eq(cmdp.vu_start), vu.op.eq(cmdp.vu_op), vu.b_form.eq(cmdp.vu_b_form),
                vu.dst_sram.eq(cmdp.vu_dst_sram),
                vu.a.eq(cmdp.vu_a), vu.b.eq(cmdp.vu_b), vu.count.eq(cmdp.vu_count), vu.dst.eq(cmdp.vu_dst),
                vu.e5m2.eq(cmdp.vu_e5m2),
                cmdp.vu_busy.eq(vu.busy), cmdp.vu_done.eq(vu.finished),
            ]
        vu_busy = vu.busy if vu is not None else Const(0)
        vu_wr_en = vu.acc_wr_en if vu is not None else Const(0)
        units_busy = engine.busy | reducer.busy | dma_ld.busy | vu_busy

        # ---- trace buffer (rtl/trace.py): events from every unit; the window waits for its writes
        m.d.comb += [
            trace.flush.eq(soft_rst),
            trace.ring_head.eq(cmdp.head), trace.fetch_data.eq(q_rp_fetch.data),
            trace.fifo_level.eq(cmdp.fifo_level), trace.stall.eq(cmdp.stall), trace.done_count.eq(cmdp.done_count),
            trace.mm_started.eq(engine.started), trace.mm_finished.eq(engine.finished),
            trace.rd_started.eq(reducer.started), trace.rd_finished.eq(reducer.finished),
            trace.vu_started.eq(vu.started if vu is not None else 0),
            trace.vu_finished.eq(vu.finished if vu is not None else 0),
            trace.ld_started.eq(dma_ld.started), trace.ld_finished.eq(dma_ld.finished), trace.ld_tag.eq(dma_ld.tag),
            trace.st_started.eq(dma_st.started), trace.st_finished.eq(dma_st.finished), trace.st_tag.eq(dma_st.tag),
        ]
        with m.If(trace.wr_en):
            m.d.comb += [trace_mem.write.addr.eq(trace.wr_addr), trace_mem.write.data.eq(trace.wr_data),
                         trace_mem.write.en.eq(-1)]

        # ---- host CSR bus FSM ----------------------------------------------------------
        irq_en = Signal()
        scratch = Signal(32)
        tail = Signal(16)
        mem_addr = Signal(32)
        irq_status = Signal(2)
        trace_en = Signal()
        trace_clear = Signal()
        rdata = Signal(32)
        req_addr = Signal(CSR_ADDR_BITS)
        req_wdata = Signal(32)
        req_write = Signal()
        perf = {name: Signal(64, name=f"perf_{name.lower()}") for name in PERF_COUNTERS}
        perf_hi = {name: Signal(32, name=f"perf_{name.lower()}_hi") for name in PERF_COUNTERS}
        clear_perf = Signal()
        load_counters = Signal()
        clear_err = Signal()
        win_err = Signal()
        doorbell = Signal()

        region = _bits(mem_addr, "MEM_ADDR", "region")
        chunk = _bits(mem_addr, "MEM_ADDR", "chunk")
        regions = self.region_words()
        win_word = Signal(28)
        win_sub = Signal(3)
        win_ok = Signal()
        for r, (depth, chunks) in regions.items():
            with m.If(region == r):
                sub_bits = log2(chunks)
                m.d.comb += [
                    win_word.eq(chunk >> sub_bits),
                    win_sub.eq(chunk & (chunks - 1)),
                    win_ok.eq((chunk >> sub_bits) < depth),
                ]
        for r, rp in win_rp.items():
            m.d.comb += rp.addr.eq(win_word)
        win_rdata = Signal(32)
        win_region_q = Signal(4)
        win_sub_q = Signal(3)
        for r, rp in win_rp.items():
            with m.If(win_region_q == r):
                m.d.comb += win_rdata.eq(rp.data.word_select(win_sub_q, 32) if len(rp.data) > 32 else rp.data)

        # ACC write port: engine, then reducer, then the vector unit, then the load DMA, then the
        # window (only while the units are idle). The DMA holds its word (and the bus) while it loses.
        acc_win_we = Signal()
        dma_wr = {n: dma_ld.wr_en & (dma_ld.wr_region == Region[n]) for n in LOAD_REGIONS}
        # the vector unit's conversions write A or B words; the load DMA waits for those too
        vu_op_wr = {"A": (vu.op_wr_en & ~vu.op_wr_b) if vu is not None else Const(0),
                    "B": (vu.op_wr_en & vu.op_wr_b) if vu is not None else Const(0)}
        m.d.comb += dma_ld.wr_ready.eq(~(dma_wr["ACC"] & (engine.acc_wr_en | reducer.acc_wr_en | vu_wr_en))
                                       & ~(dma_wr["A"] & vu_op_wr["A"]) & ~(dma_wr["B"] & vu_op_wr["B"]))
        with m.If(engine.acc_wr_en):
            m.d.comb += [acc_wp.addr.eq(engine.acc_wr_addr), acc_wp.data.eq(engine.acc_wr_data),
                         acc_wp.en.eq(-1)]
        with m.Elif(reducer.acc_wr_en):
            m.d.comb += [acc_wp.addr.eq(reducer.acc_wr_addr), acc_wp.data.eq(reducer.acc_wr_data),
                         acc_wp.en.eq(-1)]
        if vu is not None:
            with m.Elif(vu_wr_en):
                m.d.comb += [acc_wp.addr.eq(vu.acc_wr_addr), acc_wp.data.eq(vu.acc_wr_data), acc_wp.en.eq(-1)]
        with m.Elif(dma_wr["ACC"]):
            m.d.comb += [acc_wp.addr.eq(dma_ld.wr_addr), acc_wp.data.eq(dma_ld.wr_data[:cfg.acc_word_bits]),
                         acc_wp.en.eq(-1)]
        with m.Elif(acc_win_we):
            m.d.comb += [acc_wp.addr.eq(win_word), acc_wp.data.eq(req_wdata.replicate(cfg.lanes)),
                         acc_wp.en.eq(1 << win_sub)]

        for n in LOAD_REGIONS:  # the other SRAMs: the vector unit (A, B), the load DMA, else the window
            if n != "ACC":
                wp = win_wp[Region[n]]
                if n in vu_op_wr and vu is not None:
                    with m.If(vu_op_wr[n]):
                        m.d.comb += [wp.addr.eq(vu.op_wr_addr), wp.data.eq(vu.op_wr_data[:len(wp.data)]), wp.en.eq(-1)]
                    with m.Elif(dma_wr[n]):
                        m.d.comb += [wp.addr.eq(dma_ld.wr_addr), wp.data.eq(dma_ld.wr_data[:len(wp.data)]),
                                     wp.en.eq(-1)]
                    continue
                with m.If(dma_wr[n]):
                    m.d.comb += [wp.addr.eq(dma_ld.wr_addr), wp.data.eq(dma_ld.wr_data[:len(wp.data)]),
                                 wp.en.eq(-1)]

        with m.FSM(name="csr_bus"):
            with m.State("IDLE"):
                with m.If(self.csr_we | self.csr_re):
                    m.d.sync += [req_addr.eq(self.csr_addr), req_wdata.eq(self.csr_wdata),
                                 req_write.eq(self.csr_we)]
                    m.next = "ACCESS"
            with m.State("ACCESS"):
                is_mem = ((req_addr == REG[WINDOW_DATA[0]].addr) | (req_addr == REG[WINDOW_DATA[1]].addr)
                          | (req_addr == REG[WINDOW_DATA[2]].addr))
                next_addr = Signal(32)
                with m.Switch(req_addr):
                    with m.Case(REG["MEM_DATA_KEEP"].addr):
                        m.d.comb += next_addr.eq(mem_addr)
                    with m.Case(REG["MEM_DATA_DEC"].addr):
                        m.d.comb += next_addr.eq(mem_addr - 1)
                    with m.Default():
                        m.d.comb += next_addr.eq(mem_addr + 1)
                with m.If(is_mem & ~win_ok):
                    m.d.comb += win_err.eq(1)
                    m.d.sync += [rdata.eq(0), mem_addr.eq(next_addr)]
                    m.next = "ACK"
                with m.Elif(is_mem & req_write):
                    with m.If(region == Region.ACC):
                        with m.If(~units_busy):
                            m.d.comb += acc_win_we.eq(1)
                            m.d.sync += mem_addr.eq(next_addr)
                            m.next = "ACK"
                    # the load DMA owns the SRAM ports it writes; the trace buffer TRACE's while it writes
                    with m.Elif(Mux(region == Region.TRACE, ~trace.wr_en, ~dma_ld.busy | (region == Region.CMDQ))):
                        for r, wp in win_wp.items():
                            with m.If(region == r):
                                data_w = len(wp.data)
                                m.d.comb += [wp.addr.eq(win_word),
                                             wp.data.eq(req_wdata.replicate(max(1, data_w // 32))),
                                             wp.en.eq(1 << win_sub if data_w > 32 else -1)]
                        m.d.sync += mem_addr.eq(next_addr)
                        m.next = "ACK"
                with m.Elif(is_mem):
                    m.d.sync += [win_region_q.eq(region), win_sub_q.eq(win_sub), mem_addr.eq(next_addr)]
                    m.next = "MEMREAD"
                with m.Else():
                    self._register_access(m, cfg, req_addr, req_write, req_wdata, rdata, locals())
                    m.next = "ACK"
            with m.State("MEMREAD"):
                mem_data = win_rdata
                for name in WINDOW_DATA:  # a stuck bit in one window data register's read path
                    mem_data = stuck_value(m, mem_data, faults, FaultKind.CSR_STUCK, REG_INDEX[name],
                                           f"csr_{name.lower()}", extra=lambda d, a=REG[name].addr: req_addr == a)
                m.d.sync += rdata.eq(mem_data)
                m.next = "ACK"
            with m.State("ACK"):
                hang = Const(0)
                for d in faults:
                    hang = hang | active(d, FaultKind.BUS_HANG)
                m.d.comb += self.csr_ready.eq(~hang)
                m.next = "IDLE"
        m.d.comb += self.csr_rdata.eq(rdata)

        m.d.comb += [
            trace.enable.eq(trace_en), trace.clear.eq(trace_clear),
            trace.load.eq(load_counters), trace.load_value.eq(scratch),
            cmdp.tail.eq(tail),
            cmdp.load_counters.eq(load_counters),
            cmdp.load_value.eq(scratch),
            cmdp.clear_err.eq(clear_err),
            cmdp.ext_err_stb.eq(win_err),
            cmdp.ext_err_code.eq(ErrCode.WINDOW_RANGE),
            cmdp.ext_err_info.eq(mem_addr),
        ]
        with m.If(soft_rst):
            m.d.sync += tail.eq(0)

        # ---- perf counters --------------------------------------------------------------
        # DRAM_BUSY: cycles with an AXI transaction in flight at the port (an address sent and its
        # data or response not yet complete) or a request waiting to be accepted.
        rd_open, wr_open = Signal(8), Signal(8)
        ar_go = self.axi_arvalid & self.axi_arready
        r_end = self.axi_rvalid & self.axi_rready & self.axi_rlast
        aw_go = self.axi_awvalid & self.axi_awready
        b_end = self.axi_bvalid & self.axi_bready
        m.d.sync += [rd_open.eq(rd_open + ar_go - r_end), wr_open.eq(wr_open + aw_go - b_end)]
        dram_busy = (rd_open != 0) | (wr_open != 0) | self.axi_arvalid | self.axi_awvalid
        increments = {
            "CYCLES": 1,
            "ENGINE_BUSY": engine.busy,
            "MACS": engine.feeding * (cfg.rows * cfg.cols),
            "REDUCE_BUSY": reducer.busy,
            "VEC_BUSY": vu_busy,
            "VEC_ELEMS": vu.elems if vu is not None else 0,
            "STALLS": cmdp.stall,
            "DMA_IN_BUSY": dma_ld.active,
            "DMA_OUT_BUSY": dma_st.active,
            "DRAM_RD_BYTES": dma_ld.beat * self.board.bus_bytes,
            "DRAM_WR_BYTES": dma_st.beat * self.board.bus_bytes,
            "DRAM_BUSY": dram_busy,
            "WAIT_EXEC": cmdp.exec_waiting,
            "WAIT_DMA_IN": dma_ld.wait_req & ~dma_ld.wait_grant,
            "WAIT_DMA_OUT": dma_st.wait_req & ~dma_st.wait_grant,
            "DMA_ENGINE_OVERLAP": (dma_ld.active | dma_st.active) & engine.busy,
        }
        for name, inc in increments.items():
            with m.If(clear_perf):
                m.d.sync += perf[name].eq(0)
            with m.Elif(load_counters):  # DFT: lets software set every counter bit without 2**b events
                m.d.sync += perf[name].eq(Cat(scratch, scratch))
            with m.Else():
                m.d.sync += perf[name].eq(perf[name] + inc)

        # ---- idle, irq --------------------------------------------------------------------
        # The idle pin is registered: a combinational one can glitch between the updates of one
        # clock edge on an event-driven simulator (Icarus), and a waiting host would wake early.
        # A doorbell write clears it on the same edge that updates CMDQ_TAIL, so a host that
        # waits for idle right after ringing the doorbell never sees a stale 1.
        idle_q = Signal(init=1)  # out of reset the chip is idle: no spurious DONE interrupt
        m.d.sync += idle_q.eq(cmdp.idle & ~doorbell)
        m.d.comb += self.idle.eq(self._pin(m, faults, "idle", idle_q))
        with m.If(cmdp.idle & ~idle_q):
            m.d.sync += irq_status[0].eq(1)
        with m.If(cmdp.err_event):
            m.d.sync += irq_status[1].eq(1)
        m.d.comb += self.irq.eq(self._pin(m, faults, "irq", irq_en & (irq_status != 0)))

        self._status = dict(engine=engine, reducer=reducer, cmdp=cmdp)
        return m

    @staticmethod
    def _pin(m, faults, pin: str, value):
        for n, d in enumerate(faults):
            on = active(d, FaultKind.PIN_STUCK, PINS.index(pin))
            out = Signal(name=f"pin_{pin}_f{n}")
            m.d.comb += out.eq(Mux(on, d.value, value))
            value = out
        return value

    def _register_access(self, m, cfg, addr, write, wdata, rdata, env):
        """Read mux and write side effects of the plain registers (everything but MEM_DATA)."""
        cmdp, engine, reducer = env["cmdp"], env["engine"], env["reducer"]
        perf, perf_hi = env["perf"], env["perf_hi"]
        caps = cfg.caps()
        dma_ld, dma_st = env["dma_ld"], env["dma_st"]
        trace = env["trace"]
        status = _pack_fields(REG["STATUS"], busy=~cmdp.idle, engine_busy=engine.busy, reduce_busy=reducer.busy,
                              vector_busy=env["vu_busy"], err=cmdp.err_code != 0, idle=cmdp.idle, dma_in_busy=dma_ld.busy,
                              dma_out_busy=dma_st.busy, fifo_level=cmdp.fifo_level)
        waits = _pack_fields(REG["WAITS"], exec_wait=cmdp.exec_waiting, exec_sem=cmdp.exec_wait_sem,
                             dma_in_wait=dma_ld.wait_req & ~dma_ld.wait_grant, dma_in_sem=dma_ld.wait_sem,
                             dma_out_wait=dma_st.wait_req & ~dma_st.wait_grant, dma_out_sem=dma_st.wait_sem)
        board_regs = self.board.regs()
        ro = {
            "ID": Const(ID_MAGIC, 32),
            "REV": Const(self.rev.code, 32),
            "CAPS0": Const(caps["CAPS0"], 32),
            "CAPS1": Const(caps["CAPS1"], 32),
            "STATUS": status,
            "ERR": cmdp.err_code,
            "ERR_CMD0": cmdp.err_cmd[0:32],
            "ERR_CMD1": cmdp.err_cmd[32:64],
            "ERR_CMD2": cmdp.err_cmd[64:96],
            "ERR_CMD3": cmdp.err_cmd[96:128],
            "ERR_COUNT": cmdp.err_count,
            "DONE_COUNT": cmdp.done_count,
            "CMDQ_HEAD": cmdp.head,
            "CTRL": _pack_fields(REG["CTRL"], soft_reset=0, irq_en=env["irq_en"]),  # strobes read as 0
            "SCRATCH": env["scratch"],
            "CMDQ_TAIL": env["tail"],
            "MEM_ADDR": env["mem_addr"],
            "IRQ_STATUS": env["irq_status"],
            "DRAM0": Const(board_regs["DRAM0"], 32),
            "DRAM1": Const(board_regs["DRAM1"], 32),
            "WAITS": waits,
            "TRACE_CTRL": _pack_fields(REG["TRACE_CTRL"], enable=env["trace_en"]),  # clear reads as 0
            "TRACE_COUNT": _pack_fields(REG["TRACE_COUNT"], count=trace.count, pending=trace.pending,
                                        lost=trace.lost, overflow=trace.overflow),
            "TRACE_DROPPED": trace.dropped,
            "TRACE_DEPTH": Const(caps["TRACE_DEPTH"], 32),
        }
        for i in range(SEMAPHORES // 2):
            ro[f"SEM{2 * i}{2 * i + 1}"] = cmdp.sem_counts[32 * i:32 * i + 32]
        for name in PERF_COUNTERS:
            ro[f"{name}_LO"] = perf[name][0:32]
            ro[f"{name}_HI"] = perf_hi[name]
        for name in ro if env["faults"] else ():
            ro[name] = stuck_value(m, Cat(ro[name], Const(0, 32))[:32], env["faults"], FaultKind.CSR_STUCK,
                                   REG_INDEX[name], f"csr_{name.lower()}")
        with m.Switch(addr):
            for name, value in ro.items():
                with m.Case(REG[name].addr):
                    m.d.sync += rdata.eq(value)
                    if name.endswith("_LO"):
                        with m.If(~write):
                            m.d.sync += perf_hi[name[:-3]].eq(perf[name[:-3]][32:64])
            with m.Default():
                m.d.sync += rdata.eq(0)
        with m.If(write):
            with m.Switch(addr):
                with m.Case(REG["CTRL"].addr):
                    m.d.comb += [
                        env["soft_rst"].eq(_bits(wdata, "CTRL", "soft_reset")),
                        env["clear_err"].eq(_bits(wdata, "CTRL", "clear_err")),
                        env["clear_perf"].eq(_bits(wdata, "CTRL", "clear_perf")),
                        env["load_counters"].eq(_bits(wdata, "CTRL", "load_counters")),
                    ]
                    m.d.sync += env["irq_en"].eq(_bits(wdata, "CTRL", "irq_en"))
                with m.Case(REG["SCRATCH"].addr):
                    m.d.sync += env["scratch"].eq(wdata)
                with m.Case(REG["TRACE_CTRL"].addr):
                    m.d.comb += env["trace_clear"].eq(_bits(wdata, "TRACE_CTRL", "clear"))
                    m.d.sync += env["trace_en"].eq(_bits(wdata, "TRACE_CTRL", "enable"))
                with m.Case(REG["CMDQ_TAIL"].addr):
                    m.d.sync += env["tail"].eq(wdata[:16])
                    m.d.comb += env["doorbell"].eq(1)
                with m.Case(REG["MEM_ADDR"].addr):
                    m.d.sync += env["mem_addr"].eq(wdata)
                with m.Case(REG["IRQ_STATUS"].addr):
                    m.d.sync += env["irq_status"].eq(env["irq_status"] & ~wdata[:len(env["irq_status"])])
