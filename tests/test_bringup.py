"""The first-light checklist end to end on the real simulators, and its report assembly."""

from __future__ import annotations

import json

import pytest
from junitparser import JUnitXml

from conftest import SEED, SMALL_CHIP, require_sim
from cosim.build import Variant
from firstlight import cli
from firstlight.bringup.plan import DRAM_TEST_BYTES, STAGE_NAMES, closure, dram_test_bytes
from firstlight.bringup.run import assemble
from rtl.board import BoardConfig
from rtl.config import ChipConfig

STAGE_KEYS = {"name", "status", "depends_on", "blocked_by", "duration_s", "details", "figures"}


def _bringup(tmp_path, *args) -> tuple[int, dict]:
    out = tmp_path / "report"
    code = cli.main(["bringup", "--seed", str(SEED), "--report", str(out), *args])
    return code, json.loads((out / "report.json").read_text())


def _stages(report) -> dict:
    return {s["name"]: s for s in report["stages"]}


@pytest.mark.sim
@pytest.mark.parametrize("rev, errata", [("A0", 7), ("A1", 5), ("B0", 3)])  # with FL-DM-001 (A0, A1), FL-DM-002 and FL-VU-001 (B0)
def test_clean_chip_passes_every_stage(tmp_path, rev, errata):
    require_sim("verilator")
    code, rep = _bringup(tmp_path, "--rev", rev)
    assert code == cli.EXIT_OK, [(s["name"], s["details"]) for s in rep["stages"] if s["status"] != "passed"]
    assert set(rep) >= {"revision", "sim", "seed", "injected", "passed", "stages"}
    assert [s["name"] for s in rep["stages"]] == list(STAGE_NAMES)
    assert all(set(s) == STAGE_KEYS and s["status"] == "passed" for s in rep["stages"])
    st = _stages(rep)
    assert len(st["errata"]["figures"]["detected"]) == errata
    assert 0.5 < st["performance"]["figures"]["roof_utilization"] <= 1.0
    xml = JUnitXml.fromfile(str(tmp_path / "report" / "junit.xml"))
    cases = [c for suite in xml for c in suite]
    assert [c.name for c in cases] == list(STAGE_NAMES) and all(c.is_passed for c in cases)
    assert "| performance | passed |" in (tmp_path / "report" / "report.md").read_text()


@pytest.mark.sim
def test_unassessed_revision_goes_on_without_mitigations(tmp_path):
    require_sim("verilator")
    code, rep = _bringup(tmp_path, "--rev", "B1", "--formats", "int8", "--sram-depth", "64")  # the trace tests' build
    st = _stages(rep)
    assert code == cli.EXIT_OK, st
    assert "not in the errata registry" in st["identity"]["details"]
    assert st["identity"]["figures"]["mitigations"] == []
    assert "the errata registry has not assessed B1" in st["errata"]["details"], st["errata"]  # not "exactly as it says"


# fault, the stage that must catch it, words its diagnosis must contain
FAULTS = [
    ("sram:ACC:stuck1:addr=5:bit=70", "memories", ["SRAM ACC", "word 5", "bit 70"]),
    ("sram:B:stuck0:addr=63:bit=3", "memories", ["SRAM B", "word 63", "bit 3"]),
    ("sram:A:alias:addr_bit=3", "memories", ["SRAM A", "address line 3"]),
    ("csr:SCRATCH:stuck0:bit=7", "csr_bus", ["SCRATCH", "bit 7 stuck at 0"]),
    ("csr:CAPS0:stuck1:bit=20", "reset", []),  # no documented reset for CAPS: see identity below
    ("csr:REV:stuck1:bit=0", "identity", ["REV", "built as A0"]),
    ("dma:tie1:addr_bit=3:side=load", "dram", ["AXI address bit 3 stuck at 1 on the load DMA only"]),
]


@pytest.mark.sim
@pytest.mark.parametrize("fault, stage, words", [f for f in FAULTS if f[1] != "reset"])
def test_injected_fault_is_caught_by_its_stage(tmp_path, fault, stage, words):
    require_sim("icarus")  # builds in a fraction of a second: one variant per fault
    code, rep = _bringup(tmp_path, "--sim", "icarus", "--sram-depth", "64", "--inject", fault)
    assert code == cli.EXIT_FAIL
    st = _stages(rep)
    assert rep["injected"] == [fault]
    failed = [n for n, s in st.items() if s["status"] == "failed"]
    assert failed == [stage], {n: s["details"] for n, s in st.items()}
    for w in words:
        assert w in st[stage]["details"], st[stage]["details"]
    later = STAGE_NAMES[STAGE_NAMES.index(stage) + 1:]
    for name in later:
        assert st[name]["status"] == "blocked" and st[name]["blocked_by"], (name, st[name])
    xml = JUnitXml.fromfile(str(tmp_path / "report" / "junit.xml"))
    results = {c.name: c for suite in xml for c in suite}
    assert not results[stage].is_passed and results[later[0]].is_skipped


@pytest.mark.sim
def test_caps_fault_is_caught_by_identity(tmp_path):
    require_sim("icarus")
    code, rep = _bringup(tmp_path, "--sim", "icarus", "--sram-depth", "64", "--inject", "csr:CAPS0:stuck1:bit=20")
    st = _stages(rep)
    assert code == cli.EXIT_FAIL and st["identity"]["status"] == "failed"
    assert "CAPS" in st["identity"]["details"] and "lanes" in st["identity"]["details"]


@pytest.mark.sim
def test_trace_depth_fault_is_caught_by_identity(tmp_path):
    """TRACE_DEPTH publishes the trace buffer's depth (CAPS0/CAPS1 have no room): identity reads it
    with the CAPS, so a host never discovers a config other than the one built."""
    require_sim("icarus")
    code, rep = _bringup(tmp_path, "--sim", "icarus", "--sram-depth", "64", "--inject", "csr:TRACE_DEPTH:stuck1:bit=3")
    st = _stages(rep)
    assert code == cli.EXIT_FAIL and st["identity"]["status"] == "failed", st["identity"]
    details = st["identity"]["details"]
    assert "trace_depth must be a power of two" in details, details
    assert "TRACE_DEPTH = 0x00000048, this chip's is 0x00000040 (bits [3] differ)" in details, details


@pytest.mark.sim
def test_injected_fault_on_verilator_too(tmp_path):
    require_sim("verilator")
    code, rep = _bringup(tmp_path, "--formats", "int8", "--sram-depth", "64", "--no-vector", "--inject", "sram:ACC:stuck0:addr=17:bit=33")
    st = _stages(rep)
    assert code == cli.EXIT_FAIL and st["memories"]["status"] == "failed"
    assert "SRAM ACC" in st["memories"]["details"] and "word 17" in st["memories"]["details"]
    assert st["performance"]["status"] == "blocked"


@pytest.mark.sim
def test_watchdog_expiry_is_a_failed_stage_with_a_dump(tmp_path):
    require_sim("verilator")
    code, rep = _bringup(tmp_path, "--formats", "int8", "--sram-depth", "64", "--no-vector", "--watchdog", "12")  # a small build
    st = _stages(rep)
    assert code == cli.EXIT_FAIL
    failed = [n for n, s in st.items() if s["status"] == "failed"]
    assert failed, st
    first = st[failed[0]]
    assert "watchdog" in first["details"] and "STATUS" in first["details"] and "last commands" in first["details"]
    before = STAGE_NAMES[: STAGE_NAMES.index(failed[0])]
    assert all(st[n]["status"] == "passed" for n in before), "stages before the failure keep their results"


@pytest.mark.sim
def test_bringup_without_report_leaves_its_folder_only_when_it_failed_or_keep(tmp_path, monkeypatch, capsys):
    """Issue 15: a bring-up without --report left a firstlight-bringup-XXXXXXXX folder in the
    temp directory every time. It goes when every selected stage passed, unless --keep; a failed
    run keeps it and prints its path."""
    import shutil
    import tempfile

    require_sim("icarus")
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    argv = ["bringup", "--sim", "icarus", "--sram-depth", "64", "--only", "reset", "--seed", str(SEED)]

    def kept() -> None:
        (folder,) = tmp.iterdir()
        assert (folder / "sim.log").is_file() and str(folder) in " ".join(capsys.readouterr().out.split())
        shutil.rmtree(folder)

    assert cli.main([*argv, "--inject", "pin:idle:stuck0"]) == cli.EXIT_FAIL  # the reset stage sees the pin
    kept()
    assert cli.main(argv) == cli.EXIT_OK
    assert list(tmp.iterdir()) == []
    assert cli.main([*argv, "--keep"]) == cli.EXIT_OK
    kept()


@pytest.mark.sim
def test_reset_x_check_on_a_four_state_simulator(tmp_path):
    require_sim("icarus")
    code, rep = _bringup(tmp_path, "--sim", "icarus", "--sram-depth", "64", "--only", "reset")
    st = _stages(rep)
    assert code == cli.EXIT_OK and st["reset"]["status"] == "passed"
    assert "no X/Z on outputs" in st["reset"]["details"]
    assert st["identity"]["status"] == "skipped"


def test_report_keeps_stages_before_a_simulator_crash():
    rows = {
        "build": {"status": "passed", "details": "ok", "figures": {}},
        "reset": {"status": "passed", "details": "ok", "figures": {}},
        "identity": {"status": "passed", "details": "ok", "figures": {}},
        "csr_bus": {"status": "failed", "details": "the simulator ended during this stage: segfault", "figures": {}},
    }
    rep = assemble(rows, set(STAGE_NAMES), "segfault", Variant(), "verilator", 1)
    st = _stages(rep)
    assert [st[n]["status"] for n in ("build", "reset", "identity", "csr_bus")] == ["passed"] * 3 + ["failed"]
    assert st["memories"]["status"] == "blocked" and st["memories"]["blocked_by"] == "csr_bus"
    assert st["performance"]["status"] == "blocked" and not rep["passed"]


def test_a_dead_simulator_blocks_the_stages_that_depend_on_its_stage():
    """docs/bringup.md (issue 15 item 12): the stages after the one the simulator died in are
    blocked when they depend on it, skipped when they do not (kernels and performance do not
    depend on errata)."""
    done = {n: {"status": "passed", "details": "ok", "figures": {}} for n in STAGE_NAMES[:STAGE_NAMES.index("errata")]}
    for died_in, later in (("errata", {"kernels": "skipped", "performance": "skipped"}),
                           ("kernels", {"performance": "blocked"}),
                           ("dram", {n: "blocked" for n in STAGE_NAMES[STAGE_NAMES.index("dram") + 1:]})):
        rows = {n: r for n, r in done.items() if STAGE_NAMES.index(n) < STAGE_NAMES.index(died_in)}
        if died_in == "kernels":
            rows["errata"] = {"status": "passed", "details": "ok", "figures": {}}
        rows[died_in] = {"status": "error", "details": "the verilator simulator was killed by SIGKILL", "figures": {}}
        st = _stages(assemble(rows, set(STAGE_NAMES), "the simulator ended early", Variant(), "verilator", 1))
        assert {n: st[n]["status"] for n in later} == later, died_in
        for n, status in later.items():
            if status == "blocked":
                assert st[n]["details"].startswith("blocked by "), st[n]
            else:
                assert st[n]["details"] == "not run: the simulator ended early", st[n]


def test_only_pulls_in_dependencies():
    assert closure(["memories"]) == {"build", "reset", "identity", "csr_bus", "memories"}
    assert closure(["dma_smoke"]) == {"build", "reset", "identity", "csr_bus", "memories", "command_path", "dram",
                                      "dma_smoke"}
    assert {"dram", "dma_smoke"} <= closure(["engine_smoke"])  # the kernels move their data by DMA
    with pytest.raises(ValueError, match="unknown stage 'memory'"):
        closure(["memory"])


def test_every_fault_kind_has_catchers_and_only_must_reach_one():
    from firstlight.bringup.plan import CATCHERS, check_faults_seen
    from rtl.faults import FaultKind, parse_fault

    assert set(CATCHERS) == set(FaultKind) - {FaultKind.NONE}
    assert all(set(c) <= set(STAGE_NAMES) - {"build"} for c in CATCHERS.values())
    pe = parse_fault("pe:1,2:product:stuck1:bit=3", SMALL_CHIP)
    check_faults_seen((pe,), closure(["engine_smoke"]))
    check_faults_seen((pe,), closure(["performance"]))  # engine_smoke comes in as a dependency
    with pytest.raises(ValueError, match=r"pe:1,2:product:stuck1:bit=3: a pe_product fault is caught by engine_smoke"):
        check_faults_seen((pe,), closure(["dma_smoke"]))
    check_faults_seen((), closure(["build"]))  # nothing injected: any selection


def test_dram_test_region_is_whole_pages_inside_the_dram():
    board = BoardConfig(dram_bytes=1 << 16).resolve(ChipConfig())
    assert dram_test_bytes(None, board) == DRAM_TEST_BYTES == 4096
    assert dram_test_bytes(8192, board) == 8192 and dram_test_bytes(1 << 16, board) == 1 << 16
    for bad in (0, 1024, 6000, 1 << 17, True):
        with pytest.raises(ValueError, match="whole number of 4 KiB pages"):
            dram_test_bytes(bad, board)


@pytest.mark.sim
def test_dram_region_is_the_stage_option(tmp_path):
    """A DRAM bit outside the default region passes the dram stage (it is the board's memory
    test's, docs/faults.md); the stage's region option brings it in, and it is named."""
    require_sim("verilator")
    from cosim.build import build_simulator
    from cosim.jobs import run_job
    from firstlight.bringup.stages import bringup_job
    from rtl.faults import parse_fault

    small = SMALL_CHIP
    build = build_simulator(Variant(config=small, revision="A0", fault_port=True), sim="verilator")
    fault = parse_fault("dram:stuck1:addr=6000:bit=1", small)
    out = {}
    for region in (None, 8192):
        res = run_job(bringup_job, {"selected": sorted(closure(["dram"]) - {"build"}), "seed": SEED, "faults": [],
                                    "built_revision": "A0", "fault_code": fault.encode(), "dram_test_bytes": region},
                      variant=build.variant, sim="verilator", work_dir=tmp_path / str(region), discover=False,
                      build=build)
        out[region] = {r["name"]: r for r in res.records if r.get("type") == "stage"}["dram"]
    assert out[None]["status"] == "passed" and "DRAM bytes 0..4095" in out[None]["details"], out[None]
    assert out[8192]["status"] == "failed", out[8192]
    assert "DRAM byte 6000 (0x1770) bit 1 reads 1" in out[8192]["details"], out[8192]["details"]


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["bringup", "--inject", "sram:ACC:stuck1:addr=5000:bit=1"], "addr=5000 is out of range"),
        (["bringup", "--inject", "sram:Q:alias:addr_bit=1"], "must be one of A, B, ACC"),
        (["bringup", "--inject", "csr:NOPE:stuck0:bit=1"], "unknown register 'NOPE'"),
        (["bringup", "--inject", "csr:SCRACH:stuck0:bit=1"], "did you mean SCRATCH?"),
        (["bringup", "--inject", "csr:stuck0:bit=1"], "registers: ID, REV, CAPS0"),  # the register left out
        (["bringup", "--only", "memory"], "unknown stage 'memory'"),
        (["bringup", "--rev", "Z1"], "unknown revision 'Z1'"),
        (["bringup", "--sram-depth", "100"], "power of two"),
        (["bringup", "--sram-depth", "32"], "must be >= 64 on a chip with FP formats"),
        (["bringup", "--seed", "-1"], "non-negative integer seed"),
    ],
)
def test_bringup_cannot_start(argv, needle, capsys):
    assert cli.main(argv) == cli.EXIT_CANNOT_START
    assert needle in capsys.readouterr().err


def test_bringup_missing_simulator(icarus_missing, capsys):
    assert cli.main(["bringup", "--sim", "icarus"]) == cli.EXIT_CANNOT_START
    assert "apt-get install -y iverilog" in capsys.readouterr().err


@pytest.mark.sim
def test_int8_only_chip_brings_up(tmp_path):
    """A chip built without the FP path: FP stages adapt to CAPS, FL-NU-001 is not applicable."""
    require_sim("verilator")
    code, rep = _bringup(tmp_path, "--formats", "int8", "--sram-depth", "64", "--no-vector")
    st = _stages(rep)
    assert code == cli.EXIT_OK, {n: s["details"] for n, s in st.items() if s["status"] != "passed"}
    assert st["errata"]["figures"]["verdicts"]["FL-NU-001"] == "not applicable"
    assert "bit-exact" in st["engine_smoke"]["details"] and "e4m3" not in st["engine_smoke"]["details"]


# ---- the performance stage against the schedule model (issue 15 item 13) ---------------------------
def _gemm_stats(**over) -> dict:
    """A GEMM 128^3's stats as the performance stage hands them over (the numbers are those of a
    good B1 4x4 chip on the default board; each test changes what a slow chip would)."""
    st = {"plan": {"m": 128, "n": 128, "k": 128, "tm": 32, "tn": 32, "ga": 16, "gb": 16, "kc": 32, "nbuf": 2},
          "cycles": 164_345, "engine_busy_cycles": 131_408, "dram_bytes": 124_928, "dram_busy_cycles": 125_633,
          "compulsory_bytes": 98_304, "wait_cycles": {"stream": 24_380}}
    return {**st, **over}


def test_performance_verdict_names_the_term_that_grew():
    import math

    from firstlight.bringup.performance import TOLERANCE, compare
    from kernels.gemm_plan import GemmPlan

    cfg = ChipConfig(formats=("int8",), vector=False)
    board = BoardConfig().resolve(cfg)  # 1 B/cycle, latency 32
    plan = GemmPlan(**_gemm_stats()["plan"])
    predicted = math.ceil(max(plan.predicted_cycles(cfg), plan.dma_cycles(cfg, 1.0, 32)))  # the planner's own model
    good = compare(_gemm_stats(), cfg, board)
    assert good.passed and good.predicted == predicted and good.grew == ()
    assert "the schedule model predicts" in good.sentence() and "grew" not in good.sentence()
    from firstlight.bringup.report import _key_figure

    assert _key_figure({"figures": good.figures()}) == f"{round(164_345 / predicted, 3):.2f}x the schedule model (fails past {TOLERANCE:.2f}x)"
    edge = math.floor(TOLERANCE * predicted)
    assert compare(_gemm_stats(cycles=edge), cfg, board).passed
    assert not compare(_gemm_stats(cycles=edge + 1), cfg, board).passed
    cases = {
        # the DRAM delivers half the bandwidth the board publishes
        "DRAM bandwidth": _gemm_stats(cycles=252_622, dram_busy_cycles=250_194),
        # the engine takes half as long again for its MATMULs
        "MAC time": _gemm_stats(cycles=240_000, engine_busy_cycles=200_000),
        # twice the plan's bytes cross the memory port (at the published bandwidth)
        "DRAM bytes": _gemm_stats(cycles=260_000, dram_bytes=250_000, dram_busy_cycles=251_000),
        # both units as busy as on the good chip, but they no longer overlap
        "overlap": _gemm_stats(cycles=240_000, wait_cycles={"stream": 90_000}),
    }
    for term, st in cases.items():
        v = compare(st, cfg, board)
        assert not v.passed and v.ratio > TOLERANCE, term
        assert [t.name for t in v.grew] == [term], (term, v.sentence())
        assert f"what grew: {term}: " in v.sentence(), v.sentence()
    assert "0.50 B/cycle where the board publishes 1" in compare(cases["DRAM bandwidth"], cfg, board).sentence()
    assert "waited 90,000 cycles on semaphores" in compare(cases["overlap"], cfg, board).sentence()


@pytest.mark.sim
def test_performance_stage_fails_a_board_slower_than_the_model_is_told(tmp_path):
    """A real slow case: the chip sits on a board whose DRAM delivers 0.5 B/cycle while the
    bring-up is told (and its schedule model computes with) the default board's 1 B/cycle. With
    no threshold the stage passed it; now it fails and names the DRAM bandwidth. Only the
    performance stage runs: the identity stage would see the board's DRAM1 register disagree."""
    from dataclasses import replace

    from cosim.build import build_simulator
    from cosim.jobs import run_job
    from firstlight.bringup.stages import bringup_job

    require_sim("verilator")
    slow = Variant(config=SMALL_CHIP, revision="B1", board=BoardConfig(bandwidth=0.5))
    build = build_simulator(slow, sim="verilator")
    res = run_job(bringup_job, {"selected": ["performance"], "seed": SEED, "faults": [], "built_revision": "B1"},
                  variant=replace(slow, board=BoardConfig()), sim="verilator", work_dir=tmp_path, discover=False,
                  build=build)
    perf = {r["name"]: r for r in res.records if r.get("type") == "stage"}["performance"]
    assert perf["status"] == "failed", perf["details"]
    assert perf["figures"]["model_ratio"] > perf["figures"]["model_tolerance"], perf["figures"]
    assert "GEMM 128^3 too slow" in perf["details"] and "what grew: DRAM bandwidth" in perf["details"], perf["details"]
    assert "B/cycle where the board publishes 1" in perf["details"], perf["details"]


def test_the_run_ends_with_a_verdict_line():
    """issue 38: bringup ends with one line that says how it went."""
    from firstlight.bringup.run import verdict_line

    ok = {"stages": [{"name": "reset", "status": "passed", "duration_s": 1.25},
                     {"name": "dram", "status": "passed", "duration_s": 2.0}]}
    assert verdict_line(ok, "A0") == "2 of 2 stages passed in 3.2 s on A0"
    bad = {"stages": [{"name": "reset", "status": "passed", "duration_s": 1.0},
                      {"name": "dram", "status": "failed", "duration_s": 1.0},
                      {"name": "dma_smoke", "status": "blocked", "duration_s": 0.0},
                      {"name": "engine_smoke", "status": "skipped", "duration_s": 0.0}]}
    assert verdict_line(bad, "B1") == "1 of 3 stages passed in 2.0 s on B1; failed: dram; blocked: dma_smoke (1 skipped)"


def test_bringup_prints_its_verdict_last(capsys):
    require_sim("verilator")
    assert cli.main(["bringup", "--only", "reset", "--formats", "int8", "--no-vector"]) == cli.EXIT_OK
    last = capsys.readouterr().out.strip().splitlines()[-1]
    import re

    assert re.fullmatch(r"2 of 2 stages passed in [0-9.]+ s on A0 \(\d+ skipped\)", last), last


def test_a_chip_failure_is_diagnosed_without_a_python_traceback(tmp_path):
    """issue 38: `bringup --inject bus:hang` printed a Python traceback in the chip's diagnosis
    (a traceback is for harness errors); the stage's line that met the failure is named instead."""
    require_sim("verilator")
    report = tmp_path / "r"
    assert cli.main(["bringup", "--inject", "bus:hang", "--formats", "int8", "--no-vector",
                     "--report", str(report)]) == cli.EXIT_FAIL
    rep = json.loads((report / "report.json").read_text())
    reset = next(s for s in rep["stages"] if s["name"] == "reset")
    assert reset["status"] == "failed" and "traceback" not in reset["figures"], reset
    assert "Traceback" not in (report / "report.md").read_text()
    assert "(at stages.py:" in reset["details"] and "the CSR bus is hung" in reset["details"], reset


def test_a_wide_words_fault_names_which_32_bits_its_values_are():
    """ACC words are 128 bits, read 32 at a time through the window: the message once gave bit 70
    beside a 32-bit value with no word of which 32 bits those were."""
    from firstlight.bringup.stages import _Window

    w = _Window(None, "ACC", 2, 1024, 4, 32)
    msg = w.where(5 * 4 + 2, 0x40, 0x0, "March C- M1")
    assert msg == ("SRAM ACC: March C- M1 failed at word 5 (0x5), bit 70: its bits 95..64 read 0x00000040, "
                   "expected 0x00000000"), msg
    narrow = _Window(None, "CMDQ", 3, 1024, 1, 16)
    assert narrow.where(3, 0x8, 0x0, "March C- M2").endswith("bit 3: read 0x0008, expected 0x0000")


def test_a_row_names_its_mitigations_once():
    """The key figure and the details both listed every mitigation, so a narrow table printed the
    list twice per row."""
    from firstlight.bringup.report import _key_figure

    st = {"figures": {"mitigations": ["FL-ME-001", "FL-ME-002"]}, "details": "4 GEMMs bit-exact, mitigations "
          "FL-ME-001, FL-ME-002"}
    assert _key_figure(st) == "mitigations: 2 (named in the details)"
    st["details"] = "4 GEMMs bit-exact"
    assert _key_figure(st) == "mitigations: FL-ME-001, FL-ME-002"
    assert _key_figure({"figures": {"mitigations": []}, "details": ""}) == "mitigations: none"


def test_the_table_at_80_columns_is_a_line_a_stage_and_breaks_no_word():
    """issue 38: at 80 columns the table ran to 150 lines with identifiers broken mid-word
    ("ERR/ERR_COUN" / "T"). Narrow: a stage that passed shows its key figure, one that failed its
    reason, whole words only; wide: both columns, as before."""
    import io

    from rich.console import Console

    from firstlight.bringup.plan import STAGES
    from firstlight.bringup.run import WIDE_TABLE, bringup_table

    long = ("NOP/FENCE retire, bad commands set ERR/ERR_CMD/ERR_COUNT exactly and the chip goes on; STATUS, FIFO "
            "level and the idle pin track a busy chip; MACS/ENGINE_BUSY/REDUCE_BUSY count exactly")
    rows = {st.name: {"status": "passed", "duration_s": 0.5, "details": long, "figures": {"cells": 900}}
            for st in STAGES}
    rows["dram"] = {"status": "failed", "duration_s": 0.1, "figures": {},
                    "details": "DRAM byte 0x40: DMA_STORE/DMA_LOAD read 0x00, expected 0xff (address line 6)"}

    def render(width):
        buf = io.StringIO()
        Console(file=buf, width=width, color_system=None).print(bringup_table(rows, "bringup", width))
        return buf.getvalue()

    narrow = render(80)
    body = [line for line in narrow.splitlines() if line.startswith("│")]
    assert len(body) == len(STAGES) + 1, narrow  # one line a stage; the failure's reason takes two
    assert "ERR_COUN" not in narrow and "cells: 900" in narrow and "address line 6" in narrow.replace("\n", " ")
    assert "report.md" in narrow and max(map(len, narrow.splitlines())) <= 80
    wide = render(WIDE_TABLE + 40)
    assert "reason / details" in wide and "ERR/ERR_CMD/ERR_COUNT" in wide


@pytest.mark.sim
def test_waves_record_the_failed_stage_again_on_a_traced_build(tmp_path, capsys):
    """bringup had no --waves (run has): a failed stage is now run again, with what it depends
    on, on a build that records waveforms; the path is printed and in report.json."""
    require_sim("icarus")
    code, rep = _bringup(tmp_path, "--sim", "icarus", "--sram-depth", "64", "--only", "csr_bus", "--waves",
                         "--inject", "csr:SCRATCH:stuck0:bit=7")
    out = capsys.readouterr().out
    assert code == cli.EXIT_FAIL
    st = _stages(rep)["csr_bus"]
    assert st["status"] == "failed" and st["figures"].get("waves_reproduced") is True, st
    wave = tmp_path / "report" / "sim" / "waves" / "csr_bus"
    files = [p for p in wave.rglob("*") if p.suffix in (".vcd", ".fst")]
    assert files and files[0].stat().st_size > 1000, files
    assert st["figures"]["waves"] == str(files[0]) and "waves of csr_bus:" in out, out[-2000:]
    assert "SCRATCH" in files[0].read_bytes()[:2_000_000].decode(errors="replace") or files[0].suffix == ".fst"
    assert _stages(rep)["reset"].get("figures", {}).get("waves") is None  # a stage that passed is not recorded


@pytest.mark.sim
def test_waves_with_no_failure_records_nothing(tmp_path, capsys):
    require_sim("icarus")
    code, rep = _bringup(tmp_path, "--sim", "icarus", "--sram-depth", "64", "--only", "identity", "--waves")
    assert code == cli.EXIT_OK and "no stage failed, so no waveform was recorded" in capsys.readouterr().out
    assert not (tmp_path / "report" / "sim" / "waves").exists()
