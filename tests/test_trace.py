"""The trace buffer: its entry layout and registers, the writer alone in Amaranth's simulator, the
Chrome-trace writer, and a hand-built DMA + MATMUL + REDUCE stream on both real simulators.

Expected values come from the stream as it was written and from docs/chip.md ("Trace buffer"):
which command goes on which track, in which order, what waited for what.
"""

from __future__ import annotations

import json

import pytest

from conftest import SEED, VECTOR_CHIP, require_sim
from dataclasses import replace

from firstlight.trace import Trace, chrome_trace, decode_words, dropped_note, write_chrome_trace
from rtl import isa
from rtl.config import ChipConfig
from rtl.csr_map import REG, Access
from rtl.memories import DATA_MEMORIES, MEM, Region
from rtl.trace import TRACE_ENTRY, Unit, decode_entry

TRACED = VECTOR_CHIP  # a 64-entry trace (--sram-depth 64), and a vector unit for its track


# ---- the spec -------------------------------------------------------------------------------------
def test_entry_layout_is_the_documented_bits():
    # docs/chip.md: start [47:0], end [95:48], tag [115:96], opcode [123:116], unit [126:124], dropped [127]
    word = 0x1234 | (0x5678 << 48) | (0xABCDE << 96) | (0x10 << 116) | (3 << 124) | (1 << 127)
    assert decode_entry(word) == {"start": 0x1234, "end": 0x5678, "tag": 0xABCDE, "opcode": 0x10, "unit": 3,
                                  "dropped": 1}
    assert TRACE_ENTRY.size == 128 == MEM["TRACE"].width(TRACED)
    ev = decode_words([word])[0]
    assert (ev["unit"], ev["track"], ev["opcode"], ev["cycles"]) == ("matrix", "matrix engine", "MATMUL",
                                                                    0x5678 - 0x1234 + 1)
    assert decode_words([0x5A << 116])[0]["opcode"] == "0x5a"
    with pytest.raises(ValueError, match="names no unit"):
        decode_words([7 << 124])


def test_trace_sram_and_registers_are_declared():
    mem = MEM["TRACE"]
    assert mem.region == int(Region.TRACE) == 6 and not mem.data and mem not in DATA_MEMORIES
    assert mem.depth(ChipConfig()) == ChipConfig().trace_depth == 4096 and mem.depth(TRACED) == 64
    assert REG["TRACE_CTRL"].field("clear").strobe and not REG["TRACE_CTRL"].field("enable").strobe
    assert REG["TRACE_CTRL"].reset == REG["TRACE_COUNT"].reset == REG["TRACE_DROPPED"].reset == 0
    assert REG["TRACE_COUNT"].unpack(1 << 31 | 1 << 30 | 1 << 29 | 17) == {"count": 17, "pending": 1, "lost": 1,
                                                                          "overflow": 1}
    depth = REG["TRACE_DEPTH"]  # beside the others on the bus, read-only, its value the build's
    assert depth.addr == REG["TRACE_DROPPED"].addr + 1 and depth.access is Access.RO and depth.reset is None
    assert depth.field("entries").width == REG["TRACE_COUNT"].field("count").width == 16


# docs/chip.md: measured events of kernels the default depth is chosen to keep whole, on 4x4
# (a 128^3 GEMM's 11,168 and mlp's 11,257 need --trace-depth 16384)
BENCH_EVENTS = {"gemm 64^3": 1_688, "layernorm 64x256": 1_288, "decode_attention 1024x16x4": 2_250}


def test_trace_depth_is_a_build_parameter_of_its_own():
    """ChipConfig.trace_depth: validated, the memory table's TRACE depth, published in TRACE_DEPTH
    and read back by discovery, in the build's key and the sweep's design name."""
    from argparse import Namespace

    from cosim.build import Variant, verilog_key
    from firstlight.cli.common import variant_from_args
    from firstlight.errors import CannotStart
    from firstlight.sweep.spec import design_name
    from rtl.config import DEFAULT_TRACE_DEPTH, MAX_TRACE_DEPTH
    from rtl.faults import constant_bits

    assert all(n <= DEFAULT_TRACE_DEPTH for n in BENCH_EVENTS.values()), "the default keeps these runs whole"
    assert MAX_TRACE_DEPTH < 1 << REG["TRACE_COUNT"].field("count").width, "TRACE_COUNT.count can count a full buffer"
    for bad in (0, 3, 100, 2 * MAX_TRACE_DEPTH, True, "64"):
        with pytest.raises(ValueError, match=r"trace_depth must be a power of two in \[4, 32768\] \(TRACE_COUNT"
                                             r"\.count is 16 bits\), not "):
            ChipConfig(trace_depth=bad)
    cfg = ChipConfig(formats=("int8",), trace_depth=256)
    assert MEM["TRACE"].depth(cfg) == 256 and MEM["TRACE"].depth(replace(cfg, cmdq_depth=64)) == 256
    caps = cfg.caps()
    assert REG["TRACE_DEPTH"].unpack(caps["TRACE_DEPTH"]) == {"entries": 256}
    assert ChipConfig.from_caps(caps["CAPS0"], caps["CAPS1"], caps["TRACE_DEPTH"]) == cfg
    assert constant_bits("TRACE_DEPTH", cfg) == {b: 256 >> b & 1 for b in range(32)}, "a constant, like CAPS"
    assert cfg.as_dict()["trace_depth"] == 256 and ChipConfig(**cfg.as_dict()) == cfg
    assert verilog_key(Variant(config=cfg)) != verilog_key(Variant(config=replace(cfg, trace_depth=512)))
    assert design_name(Variant(config=cfg)).split("-")[4] == "tr256"
    assert "tr" not in design_name(Variant(config=ChipConfig())), "a default depth keeps the older names"
    # --sram-depth is every SRAM, the trace buffer's too; --trace-depth after it wins
    base = dict(array=None, formats=None, vector=True, rev="A0", sram_depth=None, trace_depth=None)
    assert variant_from_args(Namespace(**base)).config.trace_depth == DEFAULT_TRACE_DEPTH
    assert variant_from_args(Namespace(**{**base, "sram_depth": 64})).config == ChipConfig().with_sram_depth(64)
    assert ChipConfig().with_sram_depth(64).trace_depth == 64
    assert variant_from_args(Namespace(**{**base, "sram_depth": 64, "trace_depth": 1024})).config.trace_depth == 1024
    assert ChipConfig(formats=("int8",)).with_sram_depth(65536).trace_depth == MAX_TRACE_DEPTH
    with pytest.raises(CannotStart, match="--trace-depth: trace_depth must be a power of two"):
        variant_from_args(Namespace(**{**base, "trace_depth": 1000}))


@pytest.mark.parametrize("argv, needle", [
    (["--trace-depth", "1000"], "--trace-depth: trace_depth must be a power of two in [4, 32768]"),
    (["--trace-depth", "65536"], "(TRACE_COUNT.count is 16 bits)"),
    (["--trace-depth", "0"], "expected a positive integer, got 0"),
    (["--trace-depth", "64", "--trace-depth", "128"], "--trace-depth given twice (64 and 128)"),
])
def test_a_bad_trace_depth_exits_2_before_anything_is_built(argv, needle, capsys):
    from firstlight import cli

    for cmd in (["run", "gemm"], ["bench"]):
        assert cli.main([*cmd, *argv]) == cli.EXIT_CANNOT_START, cmd
        assert needle in capsys.readouterr().err, cmd


def test_the_drop_note_says_how_many_and_the_depth_that_keeps_them():
    full = Trace([_ev("stream", "NOP", i, i, i) for i in range(512)], dropped=1_176, overflow=True, depth=512)
    assert dropped_note(full) == ("the trace buffer holds 512 events: 1,176 of the run's 1,688 were dropped, so the "
                                  "trace ends early; build with --trace-depth 2048 to keep them all")
    huge = Trace(full, dropped=79_488, overflow=True, depth=512)
    assert dropped_note(huge).endswith("even the deepest buffer (--trace-depth 32768) holds fewer: trace a smaller "
                                       "problem to see all of it")
    assert dropped_note(Trace(full, depth=512)) is None


# ---- the writer alone (Amaranth simulator) -----------------------------------------------------------
_PULSES = ("mm_started", "mm_finished", "rd_started", "rd_finished", "ld_started", "ld_finished", "st_started",
           "st_finished", "clear")


def _run_buffer(cfg: ChipConfig, schedule: dict[int, dict], cycles: int) -> tuple[list[int], list[dict]]:
    """Drive a TraceBuffer: ``schedule[t]`` sets inputs in cycle t (pulses last one cycle, the rest
    hold). Returns the words written, in order, and the register outputs after every cycle."""
    from amaranth.sim import Simulator

    from rtl.trace import TraceBuffer

    dut = TraceBuffer(cfg)
    written, regs = [], []

    async def tb(ctx):
        for t in range(cycles):
            for name in _PULSES:
                ctx.set(getattr(dut, name), 0)
            for name, v in schedule.get(t, {}).items():
                ctx.set(getattr(dut, name), v)
            if ctx.get(dut.wr_en):
                assert ctx.get(dut.wr_addr) == len(written), "entries are written in order from 0"
                written.append(ctx.get(dut.wr_data))
            await ctx.tick()
            regs.append({n: ctx.get(getattr(dut, n)) for n in ("count", "pending", "lost", "overflow", "dropped")})

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(tb)
    sim.run()
    return written, regs


def test_five_sources_finishing_in_one_cycle_lose_nothing():
    """The stream as the command processor shows it (docs/chip.md): X fetched in cycle 1, at the head
    from 2, waits until 5 and retires (DONE_COUNT moves); Y at the head in 7 and dropped (it does
    not). Every unit finishes in cycle 10."""
    cfg = ChipConfig(formats=("int8",), operand_depth=16, acc_depth=16, cmdq_depth=16, cmd_fifo_depth=4,
                     trace_depth=8)
    x = isa.nop(tag=0x111)
    y = isa.pack_command(0x5A, tag=0x222)
    sched = {
        0: {"enable": 1},
        1: {"ring_head": 1, "fetch_data": x},
        2: {"fifo_level": 1, "stall": 1},
        3: {"mm_started": 1},  # tagged with the head's tag (X)
        4: {"rd_started": 1},
        5: {"stall": 0, "ld_started": 1},
        6: {"fifo_level": 0, "done_count": 1, "ring_head": 2, "fetch_data": y, "st_started": 1},
        7: {"fifo_level": 1},
        8: {"fifo_level": 0},
        10: {"mm_finished": 1, "rd_finished": 1, "ld_finished": 1, "ld_tag": 0x333, "st_finished": 1,
             "st_tag": 0x444},
    }
    words, regs = _run_buffer(cfg, sched, 24)
    got = sorted((e["unit"], e["start"], e["end"], e["tag"], e["opcode"], e["dropped"]) for e in map(decode_entry, words))
    want = sorted([
        (Unit.STREAM, 2, 5, 0x111, isa.Opcode.NOP, 0), (Unit.STREAM, 7, 7, 0x222, 0x5A, 1),
        (Unit.MATRIX, 3, 10, 0x111, isa.Opcode.MATMUL, 0), (Unit.REDUCE, 4, 10, 0x111, isa.Opcode.REDUCE, 0),
        (Unit.DMA_IN, 5, 10, 0x333, isa.Opcode.DMA_LOAD, 0), (Unit.DMA_OUT, 6, 10, 0x444, isa.Opcode.DMA_STORE, 0),
    ])
    assert got == want
    assert regs[-1] == {"count": 6, "pending": 0, "lost": 0, "overflow": 0, "dropped": 0}
    assert any(r["pending"] for r in regs), "the staged events show as pending until written"


def test_full_buffer_keeps_the_first_events_and_counts_the_rest():
    cfg = ChipConfig(formats=("int8",), operand_depth=16, acc_depth=16, cmdq_depth=8, trace_depth=4)
    sched = {0: {"enable": 1}}
    for i in range(7):  # seven DMA loads, 3 cycles apart
        sched.setdefault(1 + 3 * i, {})["ld_started"] = 1
        sched.setdefault(2 + 3 * i, {}).update(ld_finished=1, ld_tag=i + 1)
    sched[30] = {"enable": 0}
    sched[31] = {"ld_started": 1}
    sched[32] = {"ld_finished": 1, "ld_tag": 99}  # recording is off: neither kept nor counted
    words, regs = _run_buffer(cfg, sched, 36)
    assert [(e["tag"], e["start"], e["end"]) for e in map(decode_entry, words)] == [(i + 1, 1 + 3 * i, 2 + 3 * i)
                                                                                 for i in range(4)]
    assert regs[-1] == {"count": 4, "pending": 0, "lost": 0, "overflow": 1, "dropped": 3}
    sched2 = dict(sched)
    sched2[34] = {"clear": 1}
    _, regs = _run_buffer(cfg, sched2, 36)
    assert regs[-1] == {"count": 0, "pending": 0, "lost": 0, "overflow": 0, "dropped": 0}


def test_more_events_than_the_writer_drains_are_lost_and_counted():
    """Every unit finishing every cycle for 10 cycles (four events a cycle, one written a cycle):
    what is not written is counted, none silently."""
    sched = {0: {"enable": 1}}
    for t in range(1, 11):
        sched[t] = {"mm_finished": 1, "rd_finished": 1, "ld_finished": 1, "st_finished": 1}
    words, regs = _run_buffer(TRACED, sched, 40)
    last = regs[-1]
    assert last["lost"] == 1 and last["overflow"] == 1 and last["pending"] == 0
    assert last["count"] == len(words) and last["count"] + last["dropped"] == 40


# ---- the Chrome trace -----------------------------------------------------------------------------
def _ev(unit, op, tag, start, end):
    return {"unit": unit, "track": "", "opcode": op, "opcode_code": 0, "tag": tag, "start": start, "end": end,
            "cycles": end - start + 1, "dropped": False}


def test_chrome_trace_has_a_named_track_per_unit_and_lanes_for_overlaps(tmp_path):
    events = Trace([_ev("stream", "MATMUL", 1, 100, 104), _ev("matrix", "MATMUL", 1, 104, 150),
                    _ev("stream", "MATMUL", 2, 105, 120), _ev("matrix", "MATMUL", 2, 120, 166),
                    _ev("matrix", "MATMUL", 3, 151, 190), _ev("dma_in", "DMA_LOAD", 7, 90, 300)], dropped=5)
    path = write_chrome_trace(events, tmp_path / "t.json", meta={"command": "test"})
    with open(path) as f:
        doc = json.load(f)
    names = {e["tid"]: e["args"]["name"] for e in doc["traceEvents"] if e.get("name") == "thread_name"}
    assert {"command processor", "DMA in", "DMA out", "matrix engine", "reduction unit", "vector unit",
            "matrix engine (2)"} == set(names.values())
    slices = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    assert len(slices) == 6
    by_tid: dict[int, list] = {}
    for s in slices:
        by_tid.setdefault(s["tid"], []).append((s["ts"], s["ts"] + s["dur"]))
        assert s["dur"] == s["args"]["end_cycle"] - s["args"]["start_cycle"] + 1 >= 1
    for spans in by_tid.values():  # no partial overlap inside one track
        spans.sort()
        assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:])), spans
    mm = sorted((s["args"]["tag"], names[s["tid"]]) for s in slices if s["cat"] == "matrix")
    assert mm == [(1, "matrix engine"), (2, "matrix engine (2)"), (3, "matrix engine")]
    assert min(s["ts"] for s in slices) == 0 and doc["otherData"]["origin_cycle"] == 90
    instants = [e for e in doc["traceEvents"] if e["ph"] == "i"]
    assert [e["name"] for e in instants] == ["trace buffer full: 5 events dropped"]
    assert doc["otherData"]["command"] == "test"
    assert not [e for e in chrome_trace(events[:1], dropped=0)["traceEvents"] if e["ph"] == "i"]


# ---- on the chip -----------------------------------------------------------------------------------
def _job(fn, kwargs, sim):
    from cosim.build import Variant
    from cosim.jobs import run_job

    return run_job(fn, kwargs, variant=Variant(config=TRACED, revision="B1"), sim=sim).value


def _tag(cmd: int) -> int:
    return isa.unpack_command(cmd)["tag"]


UNIT_OF = {isa.Opcode.DMA_LOAD: "dma_in", isa.Opcode.DMA_STORE: "dma_out", isa.Opcode.MATMUL: "matrix",
           isa.Opcode.REDUCE: "reduce", isa.Opcode.VEC: "vector"}


@pytest.mark.sim
def test_stream_is_traced_on_its_tracks(sim, tmp_path):
    from trace_jobs import trace_stream_job

    how = f"reproduce: FIRSTLIGHT_SEED={SEED} .venv/bin/python -m pytest tests/test_trace.py -k 'stream and {sim}'"
    res = _job(trace_stream_job, {"seed": SEED}, sim)
    assert res["c_equal"] and res["sum"][0] == res["sum"][1], (res["sum"], how)
    assert res["off"] == {"count": 0, "dropped": 0}, "with the trace off (the reset state) nothing is recorded"
    assert res["window_entry0"] == res["backdoor_entry0"], "the window reads the TRACE SRAM as the backdoor does"
    trace = Trace.from_summary(res["trace"])
    assert (trace.dropped, trace.overflow, trace.lost) == (0, False, False)
    events = list(trace)
    stream = [(name, cmd) for name, cmd in res["stream"]]
    assert all(e["start"] <= e["end"] for e in events), events

    # every command once on the command processor's track, in stream order, with its opcode
    on_stream = [(e["tag"], e["opcode"]) for e in events if e["unit"] == "stream"]
    assert on_stream == [(_tag(c), isa.Opcode(isa.opcode_of(c)).name) for _, c in stream], (on_stream, how)
    assert not any(e["dropped"] for e in events)
    # and once on its unit's track (NOPs have none), in order
    for unit in UNIT_OF.values():
        got = [e["tag"] for e in events if e["unit"] == unit]
        assert got == [_tag(c) for _, c in stream if UNIT_OF.get(isa.opcode_of(c)) == unit], (unit, got, how)
    assert len(events) == len(stream) + sum(isa.opcode_of(c) in UNIT_OF for _, c in stream)

    ev = {}
    for e in events:
        ev[(e["unit"], e["tag"])] = e
    tag = {name: _tag(c) for name, c in stream}

    def unit(name, u):
        return ev[(u, tag[name])]

    def head(name):
        return ev[("stream", tag[name])]

    # the NOP waited at the head for chunk 1's first load; the MATMUL issued when the second landed
    assert head("wait0")["end"] > unit("ld_a0", "dma_in")["end"] >= head("wait0")["start"], how
    assert unit("mm0", "matrix")["start"] == head("mm0")["end"] > unit("ld_b0", "dma_in")["end"], how
    # the DMA-in of chunk 2 overlaps the MATMUL of chunk 1: that is what the double buffering is for
    a1, mm0 = unit("ld_a1", "dma_in"), unit("mm0", "matrix")
    assert a1["start"] <= mm0["end"] and mm0["start"] <= a1["end"], (a1, mm0, how)
    # REDUCE issues once the engine is idle; the stores wait on the semaphores of what they store
    assert unit("red", "reduce")["start"] == head("red")["end"] >= unit("mm1", "matrix")["end"], how
    assert unit("st_c", "dma_out")["start"] > unit("mm1", "matrix")["end"], how
    assert unit("st_sum", "dma_out")["start"] > unit("red", "reduce")["end"], how
    # a VEC issues once the reduction unit is idle, and is busy its count + 2 cycles
    v = unit("vec", "vector")
    assert v["start"] == head("vec")["end"] >= unit("red", "reduce")["end"], how
    assert v["end"] - v["start"] == TRACED.rows + 2, (v, how)

    path = write_chrome_trace(trace, tmp_path / "trace.json", meta={"sim": sim})
    with open(path) as f:
        doc = json.load(f)
    tracks = {e["tid"]: e["args"]["name"] for e in doc["traceEvents"] if e.get("name") == "thread_name"}
    assert {"command processor", "DMA in", "DMA out", "matrix engine", "reduction unit",
            "vector unit"} <= set(tracks.values())
    slices = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    assert len(slices) == len(events)
    names = {"stream": "command processor", "dma_in": "DMA in", "dma_out": "DMA out", "matrix": "matrix engine",
             "reduce": "reduction unit", "vector": "vector unit"}
    assert all(tracks[s["tid"]].startswith(names[s["cat"]]) for s in slices)


@pytest.mark.sim
def test_overflow_stops_writing_and_counts_what_it_dropped(sim):
    from trace_jobs import trace_overflow_job

    depth = MEM["TRACE"].depth(TRACED)
    nops = depth + 8
    res = _job(trace_overflow_job, {"nops": nops}, sim)
    full = Trace.from_summary(res["full"])
    assert [e["tag"] for e in full] == list(range(1, depth + 1)), "the first events are kept, in order"
    assert all(e["unit"] == "stream" and e["opcode"] == "NOP" for e in full)
    assert (full.dropped, full.overflow, full.lost) == (nops - depth, True, False)
    assert res["after_clear"] == {"count": 0, "dropped": 0, "ctrl": REG["TRACE_CTRL"].pack(enable=1)}
    again = Trace.from_summary(res["again"])
    assert [e["tag"] for e in again] == [0x1000, 0x1001, 0x1002] and again.dropped == 0 and not again.overflow
    off = Trace.from_summary(res["off"])
    assert [e["tag"] for e in off] == [0x1000, 0x1001, 0x1002], "disabled: nothing more is recorded"
    doc = chrome_trace(full)
    assert [e["name"] for e in doc["traceEvents"] if e["ph"] == "i"] == [f"trace buffer full: {nops - depth} events dropped"]


# ---- the depth on the chip, end to end through the CLI (issue 38) ----------------------------------
def _run_cli(capsys, *argv) -> tuple[int, str, str]:
    from firstlight import cli

    code = cli.main(["run", *argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.sim
def test_a_64_cubed_gemm_keeps_every_event_at_the_default_depth(tmp_path, capsys):
    """It dropped 1,176 of its 1,688 events at the old 512 entries: now none, and nothing warns."""
    require_sim("verilator")
    path = tmp_path / "t.json"
    code, out, err = _run_cli(capsys, "gemm", "--m", "64", "--n", "64", "--k", "64", "--trace", str(path),
                              "--json", str(tmp_path / "r.json"))
    assert code == 0, (out, err)
    doc = json.loads(path.read_text())["otherData"]
    assert doc["trace_dropped"] == 0 and "warning" not in doc, doc
    assert doc["events"] > 512, "more than the old depth, every one kept"
    assert json.loads((tmp_path / "r.json").read_text())["trace_dropped"] == 0
    assert f"trace: {path} ({doc['events']:,} events)" in out
    assert "dropped" not in out + err and "--trace-depth" not in out + err


TRACE_SMALL = ChipConfig(formats=("int8",), trace_depth=32)  # = run --formats int8 --trace-depth 32


@pytest.mark.sim
def test_a_small_trace_depth_says_once_what_it_dropped_and_what_keeps_it(sim, tmp_path, capsys):
    path = tmp_path / "t.json"
    code, out, err = _run_cli(capsys, "gemm", "--m", "16", "--n", "16", "--k", "16", "--formats", "int8",
                              "--trace-depth", "32", "--sim", sim, "--trace", str(path))
    assert code == 0, (out, err)
    doc = json.loads(path.read_text())["otherData"]
    kept, dropped = doc["events"], doc["trace_dropped"]
    assert kept == 32 and dropped > 0, doc
    need = 1 << (kept + dropped - 1).bit_length()
    assert f"trace: {path} (32 events)" in out
    note = (f"the trace buffer holds 32 events: {dropped:,} of the run's {kept + dropped:,} were dropped, so the "
            f"trace ends early; build with --trace-depth {need} to keep them all")
    assert note in err.replace("\n", " "), err
    assert (out + err).count("dropped") == 1, "once, on one stream"


@pytest.mark.sim
def test_discovery_reads_the_trace_depth(sim):
    """A discovered config equals the built one, trace depth included (not the default, not the ring's)."""
    from cosim.build import Variant
    from cosim.jobs import run_job
    from trace_jobs import discovered_job

    variant = Variant(config=TRACE_SMALL, revision="A0")
    res = run_job(discovered_job, {}, variant=variant, sim=sim)
    assert res.value["config"] == variant.config.as_dict() == res.device["config"]
    assert res.value["trace_entries"] == 32 == res.value["TRACE_DEPTH"]
