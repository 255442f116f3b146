"""The fault model, the fault universe and the checklist's power against it.

The campaign tests run the real checklist on a real Verilator build with a fault-select port
(one build for every fault); the ``--inject`` tests build the fault in as a constant on
Icarus, and must agree with the campaign build.
"""

from __future__ import annotations

import asyncio
import json

import numpy as np

import pytest

from firstlight import cli
from firstlight.bringup import diagnose
from firstlight.bringup.plan import DRAM_TEST_BYTES
from firstlight.faults.campaign import campaign_universe, classify, expected_site, run_campaign, sample_faults
from rtl.board import BoardConfig
from rtl.config import ChipConfig
from rtl.faults import KINDS, FaultKind, constant_bits, dram_lines, parse_fault, redundant, universe

from conftest import SEED, SMALL_CHIP, require_sim

SMALL = SMALL_CHIP
BOARD = BoardConfig().resolve(SMALL)  # the default board: the DRAM faults' sizes come from it
DRAM_BITS = BOARD.dram_bytes.bit_length() - 1  # address bits the DRAM decodes: 2 (the 4-byte beat) up to this

# The faults issue 9 found escaping or misattributed (each: the stage that must now catch it and
# the words its diagnosis must contain), and one more of every kind of the fault model.
ISSUE_FAULTS = [
    ("csr:CTRL:stuck0:bit=1", "csr_bus", ["CTRL bit 1 (irq_en) stuck at 0"]),
    ("csr:STATUS:stuck0:bit=0", "command_path", ["STATUS.busy = 0"]),
    ("csr:CYCLES_LO:stuck0:bit=7", "csr_bus", ["CYCLES_LO bit 7 stuck at 0"]),
    ("csr:MACS_HI:stuck1:bit=0", "csr_bus", ["MACS_HI bit 0 stuck at 1"]),
    ("csr:STALLS_LO:stuck1:bit=0", "csr_bus", ["STALLS_LO bit 0 stuck at 1"]),
    ("csr:REDUCE_BUSY_LO:stuck0:bit=3", "csr_bus", ["REDUCE_BUSY_LO bit 3 stuck at 0"]),
    ("csr:ENGINE_BUSY_HI:stuck1:bit=31", "csr_bus", ["ENGINE_BUSY_HI bit 31 stuck at 1"]),
    ("csr:ERR_COUNT:stuck0:bit=0", "csr_bus", ["ERR_COUNT bit 0 stuck at 0"]),
    ("csr:IRQ_STATUS:stuck0:bit=0", "command_path", ["IRQ_STATUS.done = 0"]),
    ("csr:MEM_DATA:stuck1:bit=0", "csr_bus", ["window data register MEM_DATA bit 0 stuck at 1"]),
    ("csr:DONE_COUNT:stuck0:bit=2", "csr_bus", ["DONE_COUNT bit 2 stuck at 0"]),
]
KIND_FAULTS = [
    ("sram:CMDQ:stuck1:addr=9:bit=100", "memories", ["SRAM CMDQ", "word 9", "bit 100"]),
    ("sram:SA:stuck0:addr=1:bit=5:path=write", "memories", ["SRAM SA", "word 1", "bit 5"]),
    ("sram:SB:tie1:addr_bit=0", "memories", ["SRAM SB", "address line 0"]),
    ("sram:A:bridge:addr_bit=1:with=4", "memories", ["SRAM A", "address line"]),
    ("sram:B:transition:addr=33:bit=2:dir=up", "memories", ["SRAM B", "word 33", "bit 2", "March C-"]),
    ("sram:ACC:coupling:aggr=3:victim=40:bit=66:on=up:to=1", "memories", ["SRAM ACC", "word 40", "bit 66"]),
    ("pe:2,1:acc:stuck1:bit=9", "engine_smoke", ["PE(2, 1) accumulator bit 9 stuck at 1"]),
    ("pe:0,3:product:stuck0:bit=4", "engine_smoke", ["PE(0, 3) product bit 4 stuck at 0"]),
    ("reduce:lane=2:stuck1:bit=5", "engine_smoke", ["reduction tree lane 2 bit 5 stuck at 1"]),
    ("reduce:lane=1:stuck0:bit=30", "engine_smoke", ["reduction tree lane 1 bit 30 stuck at 0"]),
    ("cmdfifo:stuck1:bit=77", "command_path", ["command bit 77 (arg2)", "command FIFO"]),
    # issue 38: the hint named a window write for a CSR read of ID, and the diagnosis carried a traceback
    ("bus:hang", "reset", ["csr_ready", "CSR read of ID", "the CSR bus is hung", "in stage_reset"]),
    ("pin:idle:stuck0", "reset", ["idle pin reads 0"]),
    ("pin:idle:stuck1", "command_path", ["idle pin reads 1 while the engine is busy"]),
    ("pin:irq:stuck1", "reset", ["irq pin reads 1"]),
    ("pin:irq:stuck0", "command_path", ["irq pin reads 0"]),
    ("dram:stuck1:addr=1234:bit=5", "dram", ["DRAM byte 1234 (0x4d2) bit 5 reads 1"]),
    ("dram:stuck0:addr=4095:bit=7", "dram", ["DRAM byte 4095 (0xfff) bit 7 reads 0", "complemented"]),
    ("dma:alias:addr_bit=12", "dram", ["AXI address bit 12 stuck at", "on loads and stores"]),
    ("dma:tie1:addr_bit=3:side=load", "dram", ["AXI address bit 3 stuck at 1 on the load DMA only"]),
    ("dma:alias:addr_bit=9:side=store", "dram", ["AXI address bit 9 stuck at 0 on the store DMA only"]),
    ("dma:drop_beat:burst=2:beat=9", "dram", ["drops beat 9 of burst 2 of an entry", "never comes"]),
]


# ---- the fault model as data (no simulator) ----------------------------------------------------
def test_every_kind_parses_and_round_trips():
    for spec, _, _ in ISSUE_FAULTS + KIND_FAULTS:
        f = parse_fault(spec, SMALL)
        assert f.spec == spec, (spec, f.spec)
        assert parse_fault(spec.upper(), SMALL).spec == spec  # names are case-insensitive
        assert 0 < f.encode() < 2**64
    kinds = {parse_fault(s, SMALL).kind for s, _, _ in ISSUE_FAULTS + KIND_FAULTS}
    assert kinds == set(FaultKind) - {FaultKind.NONE}, "a kind of fault has no test"


@pytest.mark.parametrize("spec, message", [
    ("sram:A:stuck1:addr=64:bit=0", "addr=64 is out of range; SRAM A has words 0..63"),
    ("sram:A:bridge:addr_bit=2:with=2", "two different address lines"),
    ("sram:B:transition:addr=1:bit=2:dir=sideways", "dir must be one of up, down"),
    ("sram:ACC:coupling:aggr=3:victim=3:bit=1:on=up:to=1", "different words"),
    ("pe:4,0:acc:stuck1:bit=1", "i=4 is out of range; rows are 0..3"),
    ("pe:0,0:product:stuck1:bit=16", "bit=16 is out of range; the product has bits 0..15"),
    ("reduce:lane=4:stuck1:bit=0", "lane=4 is out of range"),
    ("cmdfifo:stuck2:bit=0", "expected cmdfifo:<stuck0|stuck1>:bit=<n>"),
    ("pin:reset:stuck1", "expected pin:<idle|irq>"),
    ("bus:slow", "expected bus:hang"),
    ("flash:stuck1", "unknown kind 'flash'"),
    (f"dram:stuck1:addr={BOARD.dram_bytes}:bit=0",
     f"addr={BOARD.dram_bytes} is out of range; the {BOARD.dram_bytes:,}-byte DRAM has bytes 0..{BOARD.dram_bytes - 1}"),
    ("dram:stuck1:addr=0:bit=8", "bit=8 is out of range; a DRAM byte has bits 0..7"),
    ("dram:stuck2:addr=0:bit=1", "expected dram:<stuck0|stuck1>:addr=<byte>:bit=<0..7>"),
    ("dma:alias:addr_bit=32", "addr_bit=32 is out of range; the AXI address has bits 0..31"),
    ("dma:tie1:addr_bit=3:side=both_ways", "side must be one of both, load, store"),
    ("dma:drop_beat:burst=0:beat=16", "beat=16 is out of range; a burst has beats 0..15"),
    ("dma:slow", "DMA faults are alias, tie1 or drop_beat"),
])
def test_bad_specs_say_what_is_accepted(spec, message):
    with pytest.raises(ValueError) as e:
        parse_fault(spec, SMALL)
    assert message in str(e.value)


def test_universe_counts_every_site():
    spaces = {s.name: s for s in universe(SMALL)}
    assert tuple(spaces) == KINDS
    cells = sum(m.depth(SMALL) * m.width(SMALL) for m in __import__("rtl.memories").memories.MEMORIES)
    assert spaces["sram_stuck"].size == 2 * cells
    assert spaces["pe_acc"].size == SMALL.rows * SMALL.cols * 32 * 2
    for space in spaces.values():  # every index names a fault that parses, first and last
        for i in {0, space.size - 1, space.size // 2}:
            parse_fault(space.nth(i), SMALL)
    specs = list(spaces["sram_addr_bridge"])
    assert len(specs) == len(set(specs)) == spaces["sram_addr_bridge"].size
    # the board's kinds: every bit of the DRAM, every address bit it decodes (a 4-byte bus: from
    # bit 2 to the DRAM's top) tied low or high on three sides, every beat of the first 8 bursts
    assert spaces["dram_stuck"].size == 2 * 8 * BOARD.dram_bytes
    assert list(dram_lines(SMALL)) == list(range(2, DRAM_BITS))
    assert spaces["dma_addr_alias"].size == (DRAM_BITS - 2) * 2 * 3
    assert spaces["dma_drop_beat"].size == 8 * 16
    aliases = list(spaces["dma_addr_alias"])
    assert len(set(aliases)) == len(aliases) and not any(redundant(parse_fault(a, SMALL), SMALL) for a in aliases)
    # a campaign samples the DRAM bits of the region the checklist tests
    region = {s.name: s for s in campaign_universe(SMALL)}["dram_stuck"]
    assert region.size == 2 * 8 * DRAM_TEST_BYTES
    assert parse_fault(region.nth(region.size - 1), SMALL).dram_byte == DRAM_TEST_BYTES - 1


def test_sample_is_seeded_spread_and_without_repeats():
    a, b = sample_faults(SMALL, 60, seed=3), sample_faults(SMALL, 60, seed=3)
    assert a == b and len(a) == 60 == len(set(a))
    assert sample_faults(SMALL, 60, seed=4) != a
    kinds = {parse_fault(s, SMALL).family for s in a}
    assert kinds == set(KINDS), "every kind gets a share"
    assert sum(s.startswith("bus:") for s in a) == 1  # a kind smaller than its share is taken whole


def test_redundant_faults_are_the_bits_a_good_chip_never_changes():
    assert redundant(parse_fault("csr:ERR:stuck0:bit=21", SMALL), SMALL)
    assert not redundant(parse_fault("csr:ERR:stuck1:bit=21", SMALL), SMALL)
    assert not redundant(parse_fault("csr:ERR:stuck0:bit=2", SMALL), SMALL)  # C_RANGE (5) sets it
    assert redundant(parse_fault("csr:CTRL:stuck0:bit=0", SMALL), SMALL)  # a strobe reads 0
    assert not redundant(parse_fault("csr:CTRL:stuck0:bit=1", SMALL), SMALL)  # irq_en
    assert constant_bits("CMDQ_HEAD", SMALL) == {b: 0 for b in range(6, 32)}  # a 64-entry ring
    # ID holds the magic: stuck at the value a bit already has is redundant, the other is not
    one = next(b for b in range(32) if 0x464C4954 >> b & 1)
    assert redundant(parse_fault(f"csr:ID:stuck1:bit={one}", SMALL), SMALL)
    assert not redundant(parse_fault(f"csr:ID:stuck0:bit={one}", SMALL), SMALL)
    # TRACE_COUNT counts up to the trace buffer's entries (64 on SMALL: bits 0..6), never past
    assert SMALL.trace_depth == 64
    assert redundant(parse_fault("csr:TRACE_COUNT:stuck0:bit=7", SMALL), SMALL)
    assert redundant(parse_fault("csr:TRACE_COUNT:stuck0:bit=15", SMALL), SMALL)
    assert not redundant(parse_fault("csr:TRACE_COUNT:stuck0:bit=6", SMALL), SMALL)
    assert not redundant(parse_fault("csr:TRACE_COUNT:stuck1:bit=15", SMALL), SMALL)
    # TRACE_DEPTH holds the build's depth, a constant like CAPS: bit 6 reads 1, every other bit 0
    assert redundant(parse_fault("csr:TRACE_DEPTH:stuck1:bit=6", SMALL), SMALL)
    assert not redundant(parse_fault("csr:TRACE_DEPTH:stuck0:bit=6", SMALL), SMALL)
    assert not redundant(parse_fault("csr:TRACE_DEPTH:stuck1:bit=3", SMALL), SMALL)
    # AXI address bits the DRAM never decodes: below the 4-byte beat, above the DRAM's size
    assert "below the 4-byte beat" in redundant(parse_fault("dma:tie1:addr_bit=1", SMALL), SMALL)
    above = redundant(parse_fault(f"dma:alias:addr_bit={DRAM_BITS}:side=load", SMALL), SMALL)
    assert f"above the DRAM's {DRAM_BITS} address bits" in above
    assert not redundant(parse_fault(f"dma:alias:addr_bit={DRAM_BITS - 1}", SMALL), SMALL)
    small = BoardConfig(dram_bytes=1 << 16)
    assert redundant(parse_fault("dma:alias:addr_bit=16", SMALL), SMALL, board=small)
    assert list(dram_lines(SMALL, small)) == list(range(2, 16))


def test_classify_requires_the_right_stage_and_site():
    f = parse_fault("pe:2,1:acc:stuck1:bit=9", SMALL)
    assert expected_site(f, SMALL) == "PE(2, 1)"
    ok = [{"name": "engine_smoke", "status": "failed", "details": "PE(2, 1) accumulator bit 9 stuck at 1"}]
    vague = [{"name": "engine_smoke", "status": "failed", "details": "random MATMUL wrong"}]
    late = [{"name": "kernels", "status": "failed", "details": "PE(2, 1) ..."}]
    crash = [{"name": "engine_smoke", "status": "error", "details": "harness error: KeyError"}]
    assert classify(f, SMALL, ok, None)["verdict"] == "detected"
    assert classify(f, SMALL, vague, None)["verdict"] == "misattributed"
    assert classify(f, SMALL, late, None)["verdict"] == "misattributed"
    assert classify(f, SMALL, [{"name": "kernels", "status": "passed", "details": ""}], None)["verdict"] == "undetected"
    assert classify(f, SMALL, crash, None)["verdict"] == "error"
    assert classify(f, SMALL, [], "simulator killed by SIGKILL")["verdict"] == "error"
    # a bit tied on both sides: the bit and the side must be named (through the DMA the level
    # cannot be told); on one side the level too
    both = parse_fault("dma:alias:addr_bit=12", SMALL)
    said = [{"name": "dram", "status": "failed", "details": "AXI address bit 12 stuck at 0 or 1 on loads and stores"}]
    wrong_side = [{"name": "dram", "status": "failed", "details": "AXI address bit 12 stuck at 0 on the load DMA only"}]
    assert classify(both, SMALL, said, None)["verdict"] == "detected"
    assert classify(both, SMALL, wrong_side, None)["verdict"] == "misattributed"
    load = parse_fault("dma:tie1:addr_bit=12:side=load", SMALL)
    assert classify(load, SMALL, wrong_side, None)["verdict"] == "misattributed"  # stuck at 0, not 1


# ---- the DRAM tests against a model of a faulty board (no simulator) ------------------------------
class _ModelBoard:
    """The DMA and the DRAM as diagnose.DramImage models them, with one fault of the universe:
    the same interface as the dram stage's port to the chip (firstlight.bringup.stages._DmaPort).
    What no transfer wrote reads as seeded junk, like a DRAM's old contents."""

    def __init__(self, fault, seed: int):
        from firstlight.bringup.stages import STAGING_BYTES

        board = BoardConfig().resolve(SMALL)
        self.bus, self.bits, self.size = board.bus_bytes, board.bus_bits, board.dram_bytes
        self.mask = (1 << self.bits) - 1
        self.wb = SMALL.acc_word_bits // 8
        self.wbeats = self.wb // self.bus
        self.words = min(SMALL.acc_depth, STAGING_BYTES // self.wb)
        self.block = self.words * self.wb
        tie = diagnose.Tie(fault.addr, fault.value, fault.side) if fault.kind is FaultKind.DMA_ADDR_ALIAS else None
        self.stuck = (fault.dram_byte, fault.bit, fault.value) if fault.kind is FaultKind.DRAM_STUCK else None
        self.image = diagnose.DramImage(self.bus, self.size, tie)
        self.junk = np.random.default_rng(seed)

    async def store(self, dram, beats):
        self.image.store(dram, beats)

    async def load(self, dram, nbeats):
        out = []
        for a in self.image.addresses(dram, nbeats, "load"):
            v = self.image.beats.setdefault(a, int(self.junk.integers(0, 1 << 62)) & self.mask)
            if self.stuck and a <= self.stuck[0] < a + self.bus:
                one = 1 << ((self.stuck[0] - a) * 8 + self.stuck[1])
                v = v | one if self.stuck[2] else v & ~one
            out.append(v)
        return out


def _model_dram_stage(spec: str, seed: int) -> str | None:
    from firstlight.bringup.stages import _DramCheck, _DramFault

    fault = parse_fault(spec, SMALL)
    port = _ModelBoard(fault, seed)
    check = _DramCheck(port, port.size, dram_lines(SMALL), np.random.default_rng(seed))
    try:
        asyncio.run(check.run(DRAM_TEST_BYTES))
    except _DramFault as e:
        return str(e)
    return None


def _sampled(kind: str, n: int, seed: int) -> list[str]:
    space = {s.name: s for s in campaign_universe(SMALL)}[kind]
    return [space.nth(int(i)) for i in sorted(np.random.default_rng(seed).choice(space.size, n, replace=False))]


def test_model_dram_stage_passes_a_good_board():
    port = _ModelBoard(parse_fault("pin:irq:stuck1", SMALL), SEED)  # no DRAM or DMA fault
    from firstlight.bringup.stages import _DramCheck

    offsets = asyncio.run(_DramCheck(port, port.size, dram_lines(SMALL), np.random.default_rng(SEED)).run(4096))
    assert offsets == [0] + [1 << i for i in range(2, DRAM_BITS)]


@pytest.mark.parametrize("spec", _sampled("dma_addr_alias", 24, SEED) + _sampled("dram_stuck", 12, SEED))
def test_model_dram_stage_names_the_fault(spec):
    """The dram stage's tests and diagnosis on a model board with one fault: a tied address bit
    is named with its side (and its level, where the DMA can tell), a stuck bit with its byte."""
    seed = SEED + sum(map(ord, spec))
    said = _model_dram_stage(spec, seed)
    f = parse_fault(spec, SMALL)
    site = expected_site(f, SMALL)
    how = f"(seed {seed}; FIRSTLIGHT_SEED={SEED} pytest tests/test_faults.py -k '{spec}')"
    assert said is not None, f"{spec} escaped the dram stage {how}"
    for w in (site,) if isinstance(site, str) else site:
        assert w in said, (w, said, how)
    assert "; or " not in said.split(": ")[0], (said, how)  # one candidate, not a list


# ---- the checklist against the faults, on the simulator -----------------------------------------
@pytest.fixture(scope="module")
def campaign():
    require_sim("verilator")
    specs = [s for s, _, _ in ISSUE_FAULTS + KIND_FAULTS]
    result = run_campaign(SMALL, "A0", "verilator", specs, seed=SEED, workers=2)
    return {r["fault"]: r for r in result.results}


@pytest.mark.sim
@pytest.mark.parametrize("spec, stage, words", ISSUE_FAULTS + KIND_FAULTS, ids=[f[0] for f in ISSUE_FAULTS + KIND_FAULTS])
def test_fault_is_caught_by_its_stage_with_its_location(campaign, spec, stage, words):
    r = campaign[spec]
    how = f"reproduce: firstlight bringup --inject '{spec}' --formats int8 --sram-depth 64 --seed {SEED}"
    assert r["verdict"] == "detected", (r, how)
    assert r["stage"] == stage, (r, how)
    for w in words:
        assert w in r["details"], (w, r["details"], how)


@pytest.mark.sim
@pytest.mark.parametrize("spec", ["pe:2,1:acc:stuck1:bit=9", "sram:ACC:coupling:aggr=3:victim=40:bit=66:on=up:to=1",
                                  "cmdfifo:stuck1:bit=77", "dram:stuck1:addr=1234:bit=5"])
def test_inject_build_agrees_with_the_campaign_build(tmp_path, campaign, spec):
    """--inject elaborates the descriptor as a constant: same saboteur, same verdict and words
    (a DRAM fault's constant goes to the board's DRAM module, fl_dram, not to the chip)."""
    require_sim("icarus")
    report = tmp_path / "report"
    code = cli.main(["bringup", "--sim", "icarus", "--formats", "int8", "--sram-depth", "64", "--no-vector", "--seed", str(SEED),
                     "--inject", spec, "--report", str(report)])
    rep = json.loads((report / "report.json").read_text())
    failed = [s for s in rep["stages"] if s["status"] == "failed"]
    assert code == cli.EXIT_FAIL and failed, rep["stages"]
    assert failed[0]["name"] == campaign[spec]["stage"]
    assert failed[0]["details"] == campaign[spec]["details"]


# ---- the SRAM saboteur alone, in Amaranth's simulator ----------------------------------------------
class _FaultyRam:
    """The fault definitions of docs/faults.md as a Python memory (the reference)."""

    def __init__(self, fault, depth, width):
        self.f, self.depth, self.width = fault, depth, width
        self.cells = [0] * depth
        self.shadow = self.aggr = 0

    def _addr(self, a):
        f = self.f
        if f.kind is FaultKind.SRAM_ADDR_TIE:
            return a | (1 << f.addr) if f.value else a & ~(1 << f.addr)
        if f.kind is FaultKind.SRAM_ADDR_BRIDGE:
            both = (a >> f.addr & 1) & (a >> f.addr2 & 1)
            m = (1 << f.addr) | (1 << f.addr2)
            return a | m if both else a & ~m
        return a

    def write(self, a, v):
        f, a = self.f, self._addr(a)
        bit = v >> f.bit & 1
        if f.kind is FaultKind.SRAM_WRITE_STUCK and a == f.addr:
            v = v | (1 << f.bit) if f.value else v & ~(1 << f.bit)
        self.cells[a] = v
        if f.kind is FaultKind.SRAM_TRANSITION and a == f.addr:
            self.shadow = (self.shadow | bit) if f.aux else (self.shadow & bit)  # down: cannot fall
        if f.kind is FaultKind.SRAM_COUPLING:
            if a == f.addr2:
                self.shadow = bit
            elif a == f.addr:
                if (f.aux == 0 and not self.aggr and bit) or (f.aux == 1 and self.aggr and not bit):
                    self.shadow = f.value
                self.aggr = bit

    def read(self, a):
        f, a = self.f, self._addr(a)
        v = self.cells[a]
        one = 1 << f.bit
        if f.kind is FaultKind.SRAM_STUCK and a == f.addr:
            v = v | one if f.value else v & ~one
        victim = f.addr2 if f.kind is FaultKind.SRAM_COUPLING else f.addr
        if f.kind in (FaultKind.SRAM_TRANSITION, FaultKind.SRAM_COUPLING) and a == victim:
            v = v | one if self.shadow else v & ~one
        return v


@pytest.mark.parametrize("spec", [
    "sram:A:stuck1:addr=5:bit=3", "sram:A:stuck0:addr=6:bit=0:path=write", "sram:A:tie1:addr_bit=2",
    "sram:A:bridge:addr_bit=0:with=3", "sram:A:transition:addr=9:bit=7:dir=up",
    "sram:A:transition:addr=9:bit=7:dir=down", "sram:A:coupling:aggr=2:victim=12:bit=4:on=up:to=1",
    "sram:A:coupling:aggr=12:victim=2:bit=4:on=down:to=0",
])
def test_sram_saboteur_matches_the_fault_definition(spec):
    """Random writes and reads through one saboteured SRAM against the Python reference."""
    import zlib

    from amaranth.hdl import Const, Module, Signal
    from amaranth.lib import data, memory
    from amaranth.sim import Simulator

    from rtl.faults import FAULT_LAYOUT
    from rtl.saboteurs import SramSaboteur

    cfg = ChipConfig(formats=("int8",), operand_depth=16, acc_depth=16, cmdq_depth=16)
    depth, width = 16, 32
    fault = parse_fault(spec, cfg)
    m = Module()
    m.submodules.mem = mem = memory.Memory(shape=width, depth=depth, init=[])
    desc = [data.View(FAULT_LAYOUT, Const(fault.encode(), FAULT_LAYOUT.size))]
    sab = SramSaboteur(m, desc, 0, width, depth, "t")
    wa, wd, we, ra = Signal(4), Signal(32), Signal(), Signal(4)
    wp = mem.write_port()
    waddr = sab.address(wa, "w")
    m.d.comb += [wp.addr.eq(waddr), wp.data.eq(sab.write(waddr, wd, we, None)), wp.en.eq(we)]
    rp = mem.read_port()
    raddr = sab.address(ra, "r")
    m.d.comb += rp.addr.eq(raddr)
    rd = sab.read(raddr, rp.data, "r")
    seed = SEED + zlib.crc32(spec.encode())
    rng = np.random.default_rng(seed)
    ref = _FaultyRam(fault, depth, width)
    mismatches = []

    near = [fault.addr % depth, fault.addr2 % depth]  # half the accesses go to the fault's own words

    def addr():
        return int(rng.choice(near)) if rng.random() < 0.5 else int(rng.integers(depth))

    async def tb(ctx):
        for step in range(400):
            if rng.random() < 0.5:
                a, v = addr(), int(rng.choice([0, 0xFFFFFFFF, int(rng.integers(2**32))]))
                ctx.set(wa, a)
                ctx.set(wd, v)
                ctx.set(we, 1)
                await ctx.tick()
                ctx.set(we, 0)
                ref.write(a, v)
            else:
                a = addr()
                ctx.set(ra, a)
                await ctx.tick()
                got, want = ctx.get(rd), ref.read(a)
                if got != want:
                    mismatches.append((step, a, hex(got), hex(want)))

    sim = Simulator(m)
    sim.add_clock(1e-6)
    sim.add_testbench(tb)
    sim.run()
    assert not mismatches, f"{spec}: {mismatches[:5]} (seed {seed}; FIRSTLIGHT_SEED={SEED})"


def test_two_faults_holding_one_bit_at_different_values_are_refused():
    """Issue 15 item 6: stuck at 0 and at 1 on the same SRAM bit cannot both be built."""
    from rtl.faults import parse_faults

    with pytest.raises(ValueError, match="hold the same bit at different values"):
        parse_faults(["sram:A:stuck0:addr=3:bit=2", "sram:A:stuck1:addr=3:bit=2"], SMALL)
    assert len(parse_faults(["sram:A:stuck0:addr=3:bit=2", "sram:A:stuck1:addr=3:bit=3"], SMALL)) == 2
    assert len(parse_faults(["sram:A:stuck1:addr=3:bit=2", "sram:A:stuck1:addr=3:bit=2"], SMALL)) == 2
