"""The command line: argument errors exit 2 with a clear message; a real run writes JSON."""

from __future__ import annotations

import json
import os
import sys
import shutil
import time
from pathlib import Path

import numpy as np
import pytest

from conftest import require_sim
from firstlight import cli


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["run", "gemm", "--m", "0", "--n", "1", "--k", "1"], "m must be in [1, 4096], not 0"),
        (["run", "gemm", "--m", "x", "--n", "1", "--k", "1"], "invalid int value: 'x'"),
        (["run", "gemm", "--m", "4", "--n", "4", "--k", "4", "--array", "3x4"], "rows must be one of"),
        (["run", "gemm", "--m", "4", "--n", "4", "--k", "4", "--sim", "modelsim"], "invalid choice"),
        (["run", "reduce", "--rows", "2", "--cols", "2", "--op", "mean"], "invalid choice"),
        (["bench", "--buffering", "double", "--no-double-buffer"], "contradicts --buffering double"),  # issue 38
        (["run", "gemm", "--sim", "verilator", "--sim", "icarus"], "--sim given twice (verilator and icarus)"),
        (["roofline", "--no-sweep", "--sweep-bw", "1", "2"], "--no-sweep turns off what --sweep-bw would set"),
        (["roofline", "--no-reduce", "--reduce", "8x8"], "--no-reduce turns off what --reduce would set"),
        (["numerics", "--no-attention", "--attention-seq", "64"], "--no-attention turns off what --attention-seq"),
        (["run", "gemm", "--json", "a.json", "--json", "b.json"], "--json given twice (a.json and b.json)"),
        (["faults", "campaign", "--min-coverage", "150"], "a coverage percentage is in [0, 100], not 150"),  # issue 38
        (["faults", "campaign", "--min-coverage", "-1"], "a coverage percentage is in [0, 100], not -1"),
        # issue 38: inf was an OverflowError traceback (nan was already refused)
        (["run", "gemm", "--m", "4", "--n", "4", "--k", "4", "--dram-bw", "inf"], "finite number of bytes per cycle"),
        (["run", "gemm", "--m", "4", "--n", "4", "--k", "4", "--dram-bw", "nan"], "finite number of bytes per cycle"),
    ],
)
def test_bad_arguments_exit_2(argv, needle, capsys):
    assert cli.main(argv) == cli.EXIT_CANNOT_START
    assert needle in capsys.readouterr().err


def test_missing_simulator_is_cannot_start(icarus_missing, capsys):
    code = cli.main(["run", "gemm", "--m", "2", "--n", "2", "--k", "2", "--sim", "icarus"])
    assert code == cli.EXIT_CANNOT_START
    assert "apt-get install -y iverilog" in capsys.readouterr().err


@pytest.mark.sim
def test_run_gemm_writes_json(tmp_path, monkeypatch):
    require_sim("verilator")
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "r.json"
    assert cli.main(["run", "gemm", "--m", "7", "--n", "5", "--k", "9", "--seed", "3", "--json", str(out)]) == 0
    d = json.loads(out.read_text())
    for key in ("kernel", "shape", "array", "sim", "passed", "cycles", "ideal_cycles", "utilization",
                "wall_s", "sim_cycles_per_s", "build_s", "sim_process_s"):
        assert key in d, key
    # the provenance block bringup's report carries, in every JSON the tool writes
    prov = d["provenance"]
    assert prov["command"].startswith("firstlight run gemm") and "verilator" in prov["tools"] and prov["git_commit"]
    assert d["passed"] is True and d["shape"] == [7, 5, 9] and d["array"] == "4x4"
    assert d["ideal_cycles"] == -(-7 * 5 * 9 // 16)
    assert 0 < d["utilization"] <= 1


@pytest.mark.sim
def test_run_reduce(tmp_path):
    require_sim("verilator")
    out = tmp_path / "r.json"
    assert cli.main(["run", "reduce", "--rows", "3", "--cols", "10", "--op", "min", "--json", str(out)]) == 0
    assert json.loads(out.read_text())["passed"] is True


@pytest.mark.sim
def test_run_softmax_json(tmp_path):
    """The keys scripts depend on; -Inf entries, offsets and a row of -Inf only (--extremes)."""
    require_sim("verilator")
    out = tmp_path / "s.json"
    assert cli.main(["run", "softmax", "--rows", "5", "--cols", "9", "--extremes", "--json", str(out)]) == 0
    d = json.loads(out.read_text())
    assert d["passed"] is True and d["shape"] == [5, 9]
    assert d["sqnr_db"] > 120 and d["bound"] in ("vector", "memory") and 0 < d["roof_utilization"] <= 1
    assert d["stats"]["vector_cycles"] > 0 and d["stats"]["compute_cycles"] == 0  # no MACs: the vector roof
    assert d["cycles"] > 0


def test_run_gemm_epilogue_json(tmp_path):
    """--epilogue relu: the int8 result bit-exact against golden.epilogue, its SQNR vs float64."""
    require_sim("verilator")
    out = tmp_path / "g.json"
    assert cli.main(["run", "gemm", "--m", "9", "--n", "10", "--k", "40", "--epilogue", "relu",
                     "--json", str(out)]) == 0
    d = json.loads(out.read_text())
    assert d["passed"] is True and d["shape"] == [9, 10, 40] and d["stats"]["kernel"] == "gemm"
    assert 30 < d["sqnr_db"] < 60 and d["cycles"] > 0 and d["bound"] in ("compute", "memory")


@pytest.mark.parametrize("extra, needle", [(["--n", "4000"], "n can be at most 2040"),
                                           (["--n", "8", "--no-vector"], "built without it")])
def test_run_gemm_epilogue_refused_up_front(extra, needle, capsys):
    argv = ["run", "gemm", "--m", "4", "--k", "4", "--epilogue", "requant", *extra]
    assert cli.main(argv) == cli.EXIT_CANNOT_START
    assert needle in capsys.readouterr().err


def test_run_attention_compiles_for_a0_with_its_mitigations(capsys):
    """Attention once refused A0 and A1 (no FL-ME-001/FL-ME-002 mitigation in its hand stream); the
    tile kernel gets the compiler's passes: its A0 stream carries FL-ME-002's spacer words."""
    assert cli.main(["run", "attention", "--seq", "8", "--dim", "4", "--rev", "A0", "--dump"]) == cli.EXIT_OK
    assert "(FL-ME-002: the spacers' zero B words)" in capsys.readouterr().out


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["errata", "list", "--rev", "Z9"], "unknown revision 'Z9'"),
        (["errata", "show", "FL-XX-999"], "unknown erratum 'FL-XX-999'"),
        (["run", "gemm", "--m", "2", "--n", "2", "--k", "2", "--errata-policy", "FL-ME-001=maybe"],
         "must be one of auto, on, off"),
        (["run", "gemm", "--m", "2", "--n", "2", "--k", "2", "--errata-policy", "FL-ME-001"], "must look like ID="),
        (["run", "gemm", "--m", "2", "--n", "2", "--k", "2", "--rev", "C7"], "unknown revision 'C7'"),
        (["run", "gemm", "--m", "4096", "--n", "4096", "--k", "4096"], "but the board has 4,194,304: build a larger board"),
        (["run", "gemm", "--m", "2", "--n", "2", "--k", "2", "--errata-policy", "FL-ME-001=on",
          "--errata-policy", "fl-me-001=off"], "given twice, as on and as off"),
        (["run", "softmax", "--rows", "1000000", "--cols", "1000000"], "bytes of host memory"),
        # once refused only inside the simulator (exit 1): the compiler knows the row and the DRAM
        (["run", "softmax", "--rows", "4", "--cols", "5000"], "one row of 5000 values does not fit the accumulator"),
        (["run", "gemm", "--m", "8", "--n", "8", "--k", "8", "--dram-size", "4K"], "but the board has 4,096"),
    ],
)
def test_errata_bad_input_exit_2(argv, needle, capsys):
    assert cli.main(argv) == cli.EXIT_CANNOT_START
    assert needle in capsys.readouterr().err


def test_errata_list_and_show(capsys, tmp_path):
    out = tmp_path / "e.json"
    assert cli.main(["errata", "list", "--rev", "B0", "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    rows = doc["rows"]
    assert doc["provenance"]["command"].startswith("firstlight errata list") and doc["provenance"]["git_commit"]
    assert {r["id"]: r["status"]["B0"] for r in rows}["FL-CP-001"].startswith("Mitigated: ")
    assert cli.main(["errata", "show", "FL-ME-002"]) == 0
    text = capsys.readouterr().out
    assert "Not affected" in text and "cycles" in text


@pytest.mark.sim
def test_run_with_mitigation_off_warns_and_fails(tmp_path, capsys):
    require_sim("verilator")
    out = tmp_path / "r.json"
    code = cli.main(["run", "reduce", "--rows", "2", "--cols", "12", "--op", "sum", "--rev", "A0",
                     "--errata-policy", "FL-RU-002=off", "--json", str(out)])
    assert code == cli.EXIT_FAIL, "an odd-count SUM on A0 without its mitigation must be wrong"
    d = json.loads(out.read_text())
    assert d["errata_status"]["FL-RU-002"] == "Vulnerable" and "FL-RU-001" in d["mitigations"]
    assert "FL-RU-002" in capsys.readouterr().err


@pytest.mark.sim
def test_run_leaves_its_job_folder_only_when_it_failed_or_keep(tmp_path, monkeypatch, capsys):
    """Issue 15, done when: a passing run leaves nothing in the temp directory, a failing one
    (a wrong result, not only a job that raised) keeps its folder and prints its path, and
    --keep keeps it always."""
    import tempfile

    require_sim("verilator")
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    run = ["run", "reduce", "--rows", "2", "--cols", "12", "--op", "sum", "--rev", "A0", "--formats", "int8",
           "--no-vector"]

    def kept(stream: str) -> None:
        folders = list(tmp.iterdir())
        assert len(folders) == 1 and (folders[0] / "sim.log").is_file(), folders
        assert str(folders[0]) in " ".join(getattr(capsys.readouterr(), stream).split()), "the path is printed"
        shutil.rmtree(folders[0])

    assert cli.main(run) == cli.EXIT_OK
    assert list(tmp.iterdir()) == []
    # an odd-count SUM on A0 without its mitigation is wrong: the job ran to the end, the run failed
    assert cli.main([*run, "--errata-policy", "FL-RU-002=off"]) == cli.EXIT_FAIL
    kept("err")
    assert cli.main([*run, "--keep"]) == cli.EXIT_OK
    kept("out")


@pytest.mark.sim
def test_errata_check_exit_code_follows_the_registry(monkeypatch, capsys):
    import dataclasses

    from workarounds import registry

    require_sim("verilator")
    assert cli.main(["errata", "check", "--rev", "A1"]) == cli.EXIT_OK
    doctored = tuple(dataclasses.replace(e, affected=("A0",)) if e.id == "FL-RU-001" else e for e in registry.ERRATA)
    monkeypatch.setattr(registry, "ERRATA", doctored)
    assert cli.main(["errata", "check", "--rev", "A1"]) == cli.EXIT_FAIL
    assert "NEW FINDING: FL-RU-001 on A1" in capsys.readouterr().err


@pytest.mark.sim
def test_waves_are_kept_and_named(sim, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "r.json"
    argv = ["run", "gemm", "--m", "3", "--n", "3", "--k", "3", "--sim", sim, "--formats", "int8"]
    # the default folder under the current one on Verilator, a chosen one on Icarus
    where = ["--waves"] if sim == "verilator" else ["--waves-dir", str(tmp_path / "my waves")]
    assert cli.main([*argv, *where, "--json", str(out)]) == 0  # int8 only: a traced build of the FP chip takes minutes
    text = capsys.readouterr().out
    waves = [p for p in tmp_path.rglob("*") if p.suffix in (".vcd", ".fst")]
    assert len(waves) == 1, waves
    folder = waves[0].parent
    if sim == "verilator":
        assert folder.parent == tmp_path / "firstlight-out" and folder.name.startswith("run-"), waves
    else:
        assert folder == tmp_path / "my waves", waves
    assert waves and waves[0].stat().st_size > 1000, waves
    assert waves[0].name in text
    if waves[0].suffix == ".vcd":
        assert "$enddefinitions" in waves[0].read_text(errors="replace")


@pytest.mark.sim
def test_numerics_report_small(tmp_path, capsys):
    require_sim("verilator")
    out = tmp_path / "nu"
    code = cli.main(["numerics", "--m", "8", "--n", "8", "--k", "64", "--recipes", "int8-tensor", "fp8-e4m3-cast",
                     "mxfp4-e2m1-rceil", "--dists", "normal", "small", "--report", str(out),
                     "--attention-seq", "12", "--attention-dim", "8", "--attention-recipes", "int8", "fp8-e5m2"])
    assert code == cli.EXIT_OK, capsys.readouterr().err
    d = json.loads((out / "numerics.json").read_text())
    assert d["all_bit_identical"] and len(d["rows"]) == 6 and d["vulnerable_differs_from_golden"]
    att = d["attention"]["rows"]
    assert [r["recipe"] for r in att] == ["int8", "fp8-e5m2"] and all(r["bit_identical"] for r in att)
    assert (out / "numerics.png").read_bytes()[:4] == b"\x89PNG"
    cases = {(r["recipe"], r["case"]): r["sqnr_db"] for r in d["erratum_FL-NU-001"]}
    # the erratum costs the cast recipe its signal; the mitigation brings it back above spec
    assert cases[("fp8-e4m3-cast", "vulnerable (A1, FL-NU-001 off)")] < 1.0
    assert cases[("fp8-e4m3-cast", "mitigated (A1, FL-NU-001 on)")] > cases[("fp8-e4m3-cast", "as specified (B0)")] + 5
    assert d["operand_sqnr_normal"]["int8-tensor"] > 38 and d["operand_sqnr_normal"]["mxfp4-e2m1-rceil"] > 17


def test_numerics_bad_input(capsys):
    assert cli.main(["numerics", "--recipes", "fp7"]) == cli.EXIT_CANNOT_START
    assert "unknown recipe 'fp7'" in capsys.readouterr().err
    assert cli.main(["numerics", "--attention-recipes", "fp16"]) == cli.EXIT_CANNOT_START
    assert "unknown attention recipe 'fp16'; accepted: int8, fp8-e4m3, fp8-e5m2" in capsys.readouterr().err
    assert cli.main(["numerics", "--dists", "uniform"]) == cli.EXIT_CANNOT_START
    assert "unknown distribution 'uniform'" in capsys.readouterr().err


def test_bad_formats_exit_2(capsys):
    assert cli.main(["run", "gemm", "--m", "2", "--n", "2", "--k", "2", "--formats", "int8", "fp9"]) == cli.EXIT_CANNOT_START
    assert "including 'int8'" in capsys.readouterr().err



def _parsers(parser, path=()):
    """Every (command path, parser) reachable from ``parser``, the top one first."""
    import argparse

    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _parsers(sub, (*path, name))


def test_every_help_exits_0(capsys):
    paths = [path for path, _ in _parsers(cli.build_parser())]
    assert {("run", "gemm"), ("run", "reduce"), ("run", "softmax"), ("bench",), ("bringup",), ("numerics",), ("errata", "list"),
            ("errata", "measure")} <= set(paths)
    for path in paths:
        assert cli.main([*path, "--help"]) == cli.EXIT_OK, path
    assert "usage: firstlight" in capsys.readouterr().out


def test_simulator_choices_come_from_the_toolchain():
    from cosim.toolchain import SIMULATORS

    seen = []
    for path, p in _parsers(cli.build_parser()):
        for action in p._actions:
            if {"--sim", "--sims"} & set(action.option_strings):
                assert tuple(action.choices) == SIMULATORS, path
                seen.append(path)
    from kernels.tile.spec import registry

    # run attention, a run per tile-language kernel (generated from the registry, gemm and reduce
    # among them), bench, bringup, faults campaign, numerics, errata check/measure, mutants, roofline,
    # model, regress
    assert len(seen) == 11 + len(registry()), seen
    assert {("run", name) for name in registry()} <= set(seen), seen


def test_bringup_help_names_every_fault_form(capsys):
    from rtl.faults import FAULT_SYNTAX

    assert cli.main(["bringup", "--help"]) == cli.EXIT_OK
    text = capsys.readouterr().out
    for form in FAULT_SYNTAX.split(", "):
        assert form in text


@pytest.mark.parametrize("argv", [["bringup", "--help"], ["faults", "list", "--sram-depth", "64"]])
def test_fault_help_names_every_register(argv, capsys):
    """Issue 15 item 7: csr:<REGISTER> faults, and which registers there are (from the register map)."""
    import re

    from rtl.csr_map import REGISTERS

    assert cli.main(argv) == cli.EXIT_OK
    words = set(re.findall(r"[A-Z][A-Z0-9_]+", capsys.readouterr().out))
    assert {r.name for r in REGISTERS} <= words, {r.name for r in REGISTERS} - words


def test_python_dash_m_runs_the_same_cli():
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-m", "firstlight.cli", "run", "gemm", "--m", "0", "--n", "1", "--k", "1"],
                       capture_output=True, text=True, timeout=120, check=False)
    assert r.returncode == cli.EXIT_CANNOT_START and "m must be in [1, 4096], not 0" in r.stderr


def test_no_command_module_imports_the_cli_package():
    """The command modules share firstlight.cli.common; importing the package itself would be a circle."""
    import ast
    from pathlib import Path

    for path in Path(cli.__file__).parent.glob("*.py"):
        if path.name in ("__init__.py", "__main__.py"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                bad = any(a.name == "firstlight.cli" for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                bad = (node.level == 0 and node.module == "firstlight.cli") or (
                    node.level == 0 and node.module == "firstlight" and any(a.name == "cli" for a in node.names)
                ) or (node.level == 1 and node.module is None)  # from . import x
            else:
                continue
            assert not bad, f"{path.name}:{node.lineno} imports the firstlight.cli package"


# ---- the commands' wiring, with the simulator faked (no build, no run) -----------------------------

_STATS = {"shape": [2, 3, 4], "array": "4x4", "revision": "A0", "cycles": 10, "ideal_cycles": 2,
          "utilization": 0.2, "wall_s": 0.1, "python_share": 0.5, "sim_cycles_per_s": 100.0,
          "mitigations": ["FL-ME-001"], "errata_status": {"FL-ME-002": "Vulnerable"},
          "errata_warnings": ["FL-ME-002 is off"],
          # the memory system's keys (kernels/roofline.py): what a real kernel's stats carry
          "dram_bytes": 24, "compulsory_bytes": 20, "intensity": 1.0, "compute_cycles": 2, "memory_cycles": 20,
          "attainable_cycles": 20, "bound": "memory", "roof_utilization": 0.5, "overlap": 1.2, "ridge_point": 16.0,
          "dram": {"bytes_per_cycle": 1.0, "latency": 32, "bus_bytes": 4, "dram_bytes": 1 << 20, "beats": 1,
                   "period": 4},
          "wait_cycles": {"stream": 0}, "plan": {"nbuf": 2}}


@pytest.fixture
def fake_jobs(monkeypatch):
    """``cosim.jobs.run_job`` and the simulator check replaced: the calls are recorded."""
    from types import SimpleNamespace

    from cosim import jobs
    from firstlight.cli import bench, bringup, errata, numerics, run

    calls = []

    def run_job(fn, kwargs=None, **kw):
        calls.append((fn, kwargs, kw))
        recs = [{"type": "bench", "shape": s, "passed": True, "mismatch": None, "stats": _STATS}
                for s in (kwargs or {}).get("shapes", [])]
        for r in recs:  # as the job emits them
            if kw.get("on_record"):
                kw["on_record"](r)
        return SimpleNamespace(value={"passed": True, "mismatch": None, "stats": _STATS}, records=recs, run_s=1.0,
                               build=SimpleNamespace(build_s=0.5, cache_hit=True), waves=None)

    monkeypatch.setattr(jobs, "run_job", run_job)
    from firstlight.cli import bench_session  # bench's session table opens a real session: none here

    monkeypatch.setattr(bench_session, "print_session_overhead", lambda *a, **k: True)
    for mod in (bench, bringup, errata, numerics, run):
        monkeypatch.setattr(mod, "require_sim", lambda name: None, raising=False)
    return calls


def test_a_failing_run_describes_its_first_mismatch_in_words(fake_jobs, monkeypatch, capsys):
    """Issue 15 item 8: not a raw dict."""
    from types import SimpleNamespace

    from cosim import jobs

    bad = {"index": [0, 4], "got": -28377, "expected": 5, "count": 481}
    monkeypatch.setattr(jobs, "run_job", lambda fn, kwargs=None, **kw: SimpleNamespace(
        value={"passed": False, "mismatch": bad, "stats": _STATS}, records=[], run_s=1.0,
        build=SimpleNamespace(build_s=0.5, cache_hit=True), waves=None))
    assert cli.main(["run", "gemm", "--m", "2", "--n", "3", "--k", "4"]) == cli.EXIT_FAIL
    out = capsys.readouterr().out
    assert "481 differ; first at [0, 4]: got -28377, expected 5" in out and "{'" not in out, out


def test_describe_mismatch_shows_fp32_bits_with_their_value():
    from firstlight.jobs.checks import describe_mismatch, first_mismatch

    got = np.array([1.0, 2.0], np.float32).view(np.uint32)
    want = np.array([1.0, 2.5], np.float32).view(np.uint32)
    assert describe_mismatch(first_mismatch(got, want)) == "1 differ; first at [1]: got 0x40000000 (2.0), expected 0x40200000 (2.5)"


def test_run_hands_the_job_function_and_its_policy(fake_jobs, tmp_path, capsys):
    from firstlight.jobs import kernels as kernel_jobs
    from workarounds import parse_policy

    out = tmp_path / "r.json"
    argv = ["run", "gemm", "--m", "2", "--n", "3", "--k", "4", "--errata-policy", "FL-ME-002=off", "--json", str(out)]
    assert cli.main(argv) == cli.EXIT_OK
    fn, kwargs, kw = fake_jobs[-1]
    from firstlight.jobs.tile import tile_job

    assert fn is tile_job and "errata_policy" not in kw and kw["sim"] == "verilator"
    assert kwargs == {"kernel": "gemm", "params": {"m": 2, "n": 3, "k": 4, "ga": 0, "gb": 0, "kc": 0, "epilogue": "none",
                                                   "stages": 2},
                      "seed": 1, "extremes": False, "trace": False, "errata_policy": parse_policy(["FL-ME-002=off"])}
    d = json.loads(out.read_text())
    assert d["passed"] and d["cycles"] == 10 and d["build_cache_hit"] and d["mitigations"] == ["FL-ME-001"]
    # the roofline keys scripts depend on, at the top level (issue 10)
    assert {k: d[k] for k in ("dram_bytes", "compulsory_bytes", "intensity", "attainable_cycles", "bound",
                              "roof_utilization", "overlap")} == {
        "dram_bytes": 24, "compulsory_bytes": 20, "intensity": 1.0, "attainable_cycles": 20, "bound": "memory",
        "roof_utilization": 0.5, "overlap": 1.2}
    err = capsys.readouterr().err
    assert "FL-ME-002 is off" in err
    # issue 38: a run says what it is doing before the silent part (a pipe: one line, no spinner)
    assert "gemm on verilator: building (cached after the first time) and simulating ..." in err
    assert cli.main(["run", "reduce", "--rows", "2", "--cols", "5", "--op", "max", "--extremes"]) == cli.EXIT_OK
    fn, kwargs, _ = fake_jobs[-1]
    assert fn is tile_job
    assert kwargs["params"] == {"rows": 2, "cols": 5, "op": "max", "tile_rows": 0}, kwargs
    assert {k: kwargs[k] for k in ("seed", "extremes", "errata_policy")} == {"seed": 1, "extremes": True,
                                                                            "errata_policy": {}}


def test_the_default_bench_runs_icarus_only_where_it_is_quick_and_says_so(fake_jobs, monkeypatch, capsys):
    """issue 38: the default bench spent 323 of ~420 s on four Icarus rows (128^3 and 4x512x512)
    whose cycles equal Verilator's. Icarus now stops at 64^3 without --shapes, and says what it skipped."""
    from types import SimpleNamespace

    from cosim import build
    from firstlight.cli import bench
    from firstlight.jobs import kernels as kernel_jobs

    monkeypatch.setattr(build, "build_simulator", lambda variant, sim: SimpleNamespace(first_build_s=2.0, build_s=0.01))
    monkeypatch.setattr(bench, "available_simulators", lambda: {"verilator": object(), "icarus": object()})
    monkeypatch.setattr(bench, "row_kernel_cases", lambda *a, **k: ([], []))
    assert cli.main(["bench", "--session-calls", "0"]) == cli.EXIT_OK
    shapes = {kw["sim"]: kwargs["shapes"] for fn, kwargs, kw in fake_jobs if fn is kernel_jobs.bench_job}
    assert shapes["verilator"] == [list(map(int, s.split("x"))) for s in bench.DEFAULT_SHAPES]
    assert shapes["icarus"] == [[16, 16, 16], [32, 32, 32], [64, 64, 64]]
    out = capsys.readouterr().out.replace("\n", " ")
    assert "icarus: skipping 128x128x128, 256x256x256, 4x512x512 (over 64^3 MACs" in out, out


def test_bench_hands_the_shapes_to_one_job(fake_jobs, monkeypatch, tmp_path, capsys):
    from types import SimpleNamespace

    from cosim import build
    from firstlight.cli import bench
    from firstlight.jobs import kernels as kernel_jobs

    monkeypatch.setattr(build, "build_simulator", lambda variant, sim: SimpleNamespace(first_build_s=2.0, build_s=0.01))
    monkeypatch.setattr(bench, "available_simulators", lambda: {"verilator": object()})
    out = tmp_path / "b.json"
    argv = ["bench", "--sims", "verilator", "--shapes", "2x2x2", "3X4X5", "--rev", "B1", "--json", str(out)]
    assert cli.main(argv) == cli.EXIT_OK
    (fn, kwargs, kw), (vfn, vkwargs, _) = fake_jobs[-2:]
    assert fn is kernel_jobs.bench_job and kw["sim"] == "verilator"
    # each result announced as it arrives (the default bench once ran 365 s printing nothing)
    err = capsys.readouterr().err
    assert "verilator 1/4: gemm 2x2x2" in err and "verilator 2/4: gemm 3x4x5" in err, err
    assert kwargs == {"shapes": [[2, 2, 2], [3, 4, 5]], "seed": 1, "errata_policy": {},
                      "double_buffer": [True, False], "trace": False}  # --buffering both by default
    # and the vector-unit table, by default every vector-unit kernel's own bench entries (attention
    # 256x64, plain and causal, among them) (tests/test_tile_surfaces.py: the registry's, a new kernel's too)
    from kernels.tile.spec import registry

    assert vfn is kernel_jobs.vector_bench_job
    bench_rows = [[s.name, dict(b)] for s in registry().values() if "vector" in s.needs for b in s.bench]
    assert ["softmax", {"rows": 64, "cols": 256}] in bench_rows
    assert vkwargs == {"kernels": bench_rows, "seed": 1}
    assert ["flash_attention", {"seq": 256, "dim": 64, "causal": True}] in bench_rows
    n = len(fake_jobs)
    assert cli.main(["bench", "--sims", "verilator", "--shapes", "2x2x2", "--attention", "--rows"]) == cli.EXIT_OK
    assert [f for f, _, _ in fake_jobs[n:]] == [kernel_jobs.bench_job], "--attention/--rows with no value: none"
    assert cli.main(["bench", "--sims", "verilator", "--attention", "64"]) == cli.EXIT_CANNOT_START
    # on A0 too (attention is a tile kernel: the compiler's errata passes), and --attention replaces its entries
    assert cli.main(["bench", "--sims", "verilator", "--shapes", "2x2x2"]) == cli.EXIT_OK
    assert fake_jobs[-1][1]["kernels"] == bench_rows
    assert cli.main(["bench", "--sims", "verilator", "--shapes", "2x2x2", "--attention", "64x16c", "--rows"]) == cli.EXIT_OK
    assert fake_jobs[-1][1]["kernels"] == [["flash_attention", {"seq": 64, "dim": 16, "causal": True}]]
    doc = json.loads(out.read_text())
    assert [r["shape"] for r in doc["rows"]] == ["2x2x2", "3x4x5"] and "tools" in doc["provenance"]
    assert cli.main(["bench", "--sims", "verilator", "--shapes", "2x2"]) == cli.EXIT_CANNOT_START


def test_bench_keep_keeps_each_job_folder(fake_jobs, monkeypatch, tmp_path, capsys):
    """Each bench job's folder goes when its results passed, unless --keep."""
    import tempfile
    from types import SimpleNamespace

    from cosim import build
    from firstlight.cli import bench

    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    monkeypatch.setattr(build, "build_simulator", lambda variant, sim: SimpleNamespace(first_build_s=2.0, build_s=0.01))
    monkeypatch.setattr(bench, "available_simulators", lambda: {"verilator": object()})
    argv = ["bench", "--sims", "verilator", "--shapes", "2x2x2", "--rev", "B1", "--attention", "--rows", "8x8"]
    assert cli.main(argv) == cli.EXIT_OK and list(tmp.iterdir()) == []
    assert cli.main([*argv, "--keep"]) == cli.EXIT_OK
    folders = sorted(tmp.iterdir())
    out = " ".join(capsys.readouterr().out.split())
    assert [p.name[:len("firstlight-bench-")] for p in folders] == ["firstlight-bench-"] * 2  # GEMMs and the rows
    assert all(f"job folder kept (--keep): {p}" in out for p in folders), out
    assert {kw["work_dir"] for _, _, kw in fake_jobs[-2:]} == set(folders), "each job ran in its kept folder"


def test_bringup_and_numerics_hand_their_arguments_on(fake_jobs, monkeypatch):
    import firstlight.bringup.run
    import firstlight.numerics
    from golden.quant import RECIPES

    got = {}
    monkeypatch.setattr(firstlight.bringup.run, "run_bringup", lambda **kw: got.update(bringup=kw) or {"passed": False})
    assert cli.main(["bringup", "--inject", "sram:ACC:stuck1:addr=5:bit=7", "--sram-depth", "64", "--only", "memories",
                     "--watchdog", "500"]) == cli.EXIT_FAIL
    kw = got["bringup"]
    assert kw["variant"].faults == ("sram:ACC:stuck1:addr=5:bit=7",) and kw["variant"].config.acc_depth == 64
    assert kw["only"] == ["memories"] and kw["watchdog_cycles"] == 500 and kw["sim"] == "verilator"
    monkeypatch.setattr(firstlight.numerics, "run_numerics",
                        lambda **kw: got.update(numerics=kw) or {"all_bit_identical": True, "error": None})
    assert cli.main(["numerics", "--k", "64", "--no-erratum"]) == cli.EXIT_OK
    kw = got["numerics"]
    assert kw["recipes"] == list(RECIPES) and kw["ks"] == [64] and kw["revision"] == "B0" and not kw["erratum"]


def test_bringup_refuses_a_fault_no_selected_stage_can_see(fake_jobs, monkeypatch, capsys):
    """Issue 15 item 6: --inject sram:ACC:... --only csr_bus ran build to csr_bus, passed, and
    said nothing about the fault. It is refused before anything is built, naming the fault, the
    stage meant to catch it and what to do; a selection that reaches a catcher goes on."""
    import firstlight.bringup.run

    calls = []
    monkeypatch.setattr(firstlight.bringup.run, "run_bringup", lambda **kw: calls.append(kw) or {"passed": True})
    fault = "sram:ACC:stuck1:addr=5:bit=7"
    assert cli.main(["bringup", "--inject", fault, "--only", "csr_bus", "--sram-depth", "64"]) == cli.EXIT_CANNOT_START
    err = " ".join(capsys.readouterr().err.split())
    assert not calls, "refused before anything was built or run"
    assert fault in err and "caught by memories" in err and "build, reset, identity, csr_bus" in err, err
    assert "Add memories to --only" in err and "drop --only" in err, err
    # the catcher itself, or a stage that pulls it in, or a second fault it can see: all go on
    for only in (["memories"], ["dram"], ["csr_bus", "memories"]):
        assert cli.main(["bringup", "--inject", fault, "--only", *only, "--sram-depth", "64"]) == cli.EXIT_OK, only
    assert cli.main(["bringup", "--inject", "csr:SCRATCH:stuck0:bit=1", "--only", "csr_bus"]) == cli.EXIT_OK
    assert cli.main(["bringup", "--inject", "csr:SCRATCH:stuck0:bit=1", "--inject", "pe:0,0:acc:stuck1:bit=2",
                     "--only", "csr_bus"]) == cli.EXIT_CANNOT_START
    assert "pe:0,0:acc:stuck1:bit=2" in capsys.readouterr().err
    assert len(calls) == 4


def test_errata_check_reports_what_the_reproducers_saw(fake_jobs, monkeypatch, tmp_path, capsys):
    import firstlight.jobs.errata as errata_jobs
    from workarounds import ERRATA

    import tempfile

    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    observed = {e.id: {"fired": "A1" in e.affected, "detail": "seen"} for e in ERRATA}
    monkeypatch.setattr(errata_jobs, "check_revision", lambda rev, sim, work_dir=None: (observed, None))
    out = tmp_path / "c.json"
    assert cli.main(["errata", "check", "--rev", "A1", "--json", str(out)]) == cli.EXIT_OK
    rows = json.loads(out.read_text())["rows"]
    assert all(isinstance(r["unit"], str) for r in rows) and {r["verdict"] for r in rows} <= {"ok", "not applicable"}
    assert list(tmp.iterdir()) == [], "a check that passed leaves no job folder"
    first = ERRATA[0].id
    partial = {k: v for k, v in observed.items() if k != first}
    monkeypatch.setattr(errata_jobs, "check_revision", lambda rev, sim, work_dir=None: (partial, "the simulator crashed"))
    assert cli.main(["errata", "check", "--rev", "A1"]) == cli.EXIT_FAIL
    err = capsys.readouterr().err
    assert "the check did not finish: the simulator crashed" in err and first in err
    (kept,) = tmp.iterdir()
    assert f"job folder kept (the run did not pass): {kept}" in " ".join(err.split())


def test_errata_measure_writes_costs_and_page(fake_jobs, monkeypatch, tmp_path, capsys):
    import firstlight.jobs.errata as errata_jobs
    import workarounds.docs
    from firstlight.cli import errata as errata_cmd
    from workarounds import ERRATA
    from workarounds.registry import ASSESSED_REVISIONS

    cells = [{"id": e.id, "revision": r, "policy": p, "passed": errata_jobs.expected_cell_pass(
              {"id": e.id, "revision": r, "policy": p}), "cycles": 100 if p == "off" else 120, "mismatch": None}
             for e in ERRATA for r in ASSESSED_REVISIONS for p in ("on", "off")]
    scale = [{"id": e.id, "revision": r, "policy": p, "cycles": 1000, "passed": True}
             for e in ERRATA if e.scale for r in e.affected if r in ASSESSED_REVISIONS for p in ("on", "off")]
    monkeypatch.setattr(errata_jobs, "run_matrix", lambda sim, seed: (cells, []))
    monkeypatch.setattr(errata_jobs, "run_scale", lambda sim, seed: (scale, ["A0: scale job failed: boom"]))
    monkeypatch.setattr(workarounds.docs, "COSTS_PATH", tmp_path / "costs.json")
    monkeypatch.setattr(errata_cmd, "DOCS_PATH", tmp_path / "errata.md")
    assert cli.main(["errata", "measure"]) == cli.EXIT_FAIL  # a problem makes it exit 1
    assert json.loads((tmp_path / "costs.json").read_text()) == errata_jobs.costs_from(cells, scale)
    assert (tmp_path / "errata.md").read_text() == workarounds.docs.render(errata_jobs.costs_from(cells, scale))
    captured = capsys.readouterr()
    assert "errata regression matrix" in captured.out and "UNEXPECTED: A0: scale job failed: boom" in captured.err


def test_names_are_case_insensitive_and_near_misses_get_a_hint(capsys):
    """--rev, erratum ids, --errata-policy ids and register names in fault specs (issue 15, item 10)."""
    from rtl.config import ChipConfig
    from rtl.faults import parse_fault
    from workarounds.policy import parse_policy

    assert cli.main(["errata", "list", "--rev", "a0"]) == cli.EXIT_OK
    assert cli.main(["errata", "show", "fl-me-002"]) == cli.EXIT_OK
    assert "FL-ME-002" in capsys.readouterr().out
    assert cli.main(["errata", "show", "FL-ME-02"]) == cli.EXIT_CANNOT_START
    assert "did you mean FL-ME-002?" in capsys.readouterr().err
    assert cli.main(["errata", "list", "--rev", "b00"]) == cli.EXIT_CANNOT_START
    assert "did you mean B0?" in capsys.readouterr().err
    assert parse_policy(["fl-me-002=OFF"]) == {"FL-ME-002": "off"}
    assert parse_fault("csr:scratch:stuck0:bit=1", ChipConfig()).spec == "csr:SCRATCH:stuck0:bit=1"


@pytest.mark.parametrize("argv, why", [
    (["--inject", "csr:CTRL:stuck0:bit=3"], "CTRL bit 3 reads 0 in every state of a good chip"),  # a strobe bit
    (["--sram-depth", "64", "--inject", "csr:CMDQ_HEAD:stuck0:bit=9"], "CMDQ_HEAD bit 9 reads 0"),  # a 64-entry ring
])
def test_bringup_refuses_a_redundant_injected_fault_up_front(argv, why, capsys):
    """issue 38: a fault the fault model proves redundant ran the whole checklist and exited 0, as if
    it had been exercised; it is refused before anything is built, with the reason."""
    assert cli.main(["bringup", *argv]) == cli.EXIT_CANNOT_START
    err = capsys.readouterr().err
    assert "redundant fault" in err and why in err, err


def test_an_empty_build_cache_variable_is_refused(monkeypatch, capsys):
    """issue 38: FIRSTLIGHT_CACHE= (set, empty) silently fell back to the home cache."""
    monkeypatch.setenv("FIRSTLIGHT_CACHE", "")
    assert cli.main(["run", "gemm", "--m", "4", "--n", "4", "--k", "4"]) == cli.EXIT_CANNOT_START
    assert "$FIRSTLIGHT_CACHE is set but empty" in capsys.readouterr().err


@pytest.mark.parametrize("opt", [["--json", "newdir/deeper/x.json"], ["--report", "newdir/deeper"]])
def test_a_refused_run_leaves_no_output_folder_behind(opt, tmp_path, monkeypatch, capsys):
    """issue 38: a run refused after its output folder was created left it behind, empty."""
    monkeypatch.chdir(tmp_path)
    argv = (["run", "gemm", "--m", "0", "--n", "4", "--k", "4", *opt] if opt[0] == "--json" else
            ["bringup", "--inject", "csr:CTRL:stuck0:bit=3", *opt])
    assert cli.main(argv) == cli.EXIT_CANNOT_START
    assert not (tmp_path / "newdir").exists(), capsys.readouterr().err


def test_numerics_help_lists_every_special_function(capsys):
    """issue 38: --special's help listed exp only (recip and rsqrt exist)."""
    from golden.special import SPECIAL_FUNCTIONS

    with pytest.raises(SystemExit):
        cli.build_parser().parse_args(["numerics", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "known: " + ", ".join(SPECIAL_FUNCTIONS) in out, out


def test_sweep_report_of_a_file_that_is_not_a_database_names_it(tmp_path, capsys):
    """issue 38: "file is not a database" without the path."""
    bad = tmp_path / "notadb.db"
    bad.write_text("hello")
    assert cli.main(["sweep", "report", str(bad)]) == cli.EXIT_CANNOT_START
    assert f"{bad}: file is not a database" in capsys.readouterr().err


def test_a_folder_that_holds_no_files_is_not_called_unwritable(capsys):
    """issue 38: "/proc: the folder is not writable (No such file or directory)"."""
    assert cli.main(["run", "gemm", "--m", "4", "--n", "4", "--k", "4", "--json", "/proc/x.json"]) == cli.EXIT_CANNOT_START
    err = capsys.readouterr().err
    assert "no file can be created in the folder" in err and "not writable" not in err, err


def test_run_lists_only_the_errata_that_need_a_word(fake_jobs, monkeypatch, capsys):
    """issue 38: run spent 20 of its 30 lines on errata boilerplate; the usual statuses (mitigated,
    not affected) are one line, an erratum left vulnerable keeps its own."""
    from types import SimpleNamespace

    from cosim import jobs

    st = {**_STATS, "errata_status": {"FL-ME-001": "Mitigated: K chunks are chosen so ...", "FL-CP-001": "Not affected",
                                      "FL-ME-002": "Vulnerable"}}
    monkeypatch.setattr(jobs, "run_job", lambda fn, kwargs=None, **kw: SimpleNamespace(
        value={"passed": True, "mismatch": None, "stats": st}, records=[], run_s=1.0,
        build=SimpleNamespace(build_s=0.5, cache_hit=True), waves=None))
    assert cli.main(["run", "gemm", "--m", "2", "--n", "3", "--k", "4", "--errata-policy", "FL-ME-002=off"]) == 0
    out = capsys.readouterr().out
    assert "mitigations applied" in out and "Not affected" not in out and "Mitigated:" not in out, out
    assert any("FL-ME-002" in ln and "Vulnerable" in ln for ln in out.splitlines()), out


def test_a_whole_universe_campaign_is_asked_for_not_started(capsys):
    """Without --sample a campaign once started the whole universe (5.9 million faults on the
    small chip, 2.2 GB in 100 s, with only "building the campaign chip" printed): now it is
    refused before anything is built, with its estimated time and what to give instead."""
    argv = ["faults", "campaign", "--formats", "int8", "--sram-depth", "64", "--workers", "2"]
    assert cli.main(argv) == cli.EXIT_CANNOT_START
    err = capsys.readouterr().err
    assert "faults: about" in err and "hours on 2 workers" in err and "give --sample N" in err and "--all" in err, err
    assert cli.main(argv + ["--all", "--sample", "5"]) == cli.EXIT_CANNOT_START
    assert "--all and --sample contradict each other" in capsys.readouterr().err


def test_an_interrupted_campaign_report_says_so_with_its_wall_time(monkeypatch, tmp_path, capsys):
    """Its JSON once said coverage_pct 100.0 and wall_s 0.0 for a campaign stopped before any
    fault finished."""
    import time as _time

    from firstlight.faults import campaign

    def fake_run(cfg, revision, sim, specs, *, on_start=None, **kw):
        r = campaign.CampaignResult(cfg.as_dict(), revision, sim, 1, 0.5, 0.0, planned=len(specs),
                                    started=_time.perf_counter())
        on_start(r)
        _time.sleep(0.2)
        raise KeyboardInterrupt

    monkeypatch.setattr(campaign, "run_campaign", fake_run)
    out = tmp_path / "rep"
    code = cli.main(["faults", "campaign", "--formats", "int8", "--sram-depth", "64", "--sample", "4",
                     "--report", str(out)])
    from firstlight.errors import EXIT_SIGINT

    assert code == EXIT_SIGINT, code
    rep = json.loads((out / "campaign.json").read_text())
    assert rep["interrupted"] is True and rep["faults_planned"] == 4 and rep["faults_done"] == 0
    assert rep["coverage_pct"] is None and rep["wall_s"] >= 0.2, rep
    assert "**Interrupted** after 0 of 4 faults" in (out / "campaign.md").read_text()


@pytest.mark.parametrize("sig,settle", [("SIGTERM", 1.0), ("SIGINT", 1.0), ("SIGINT", 0.0)])
def test_numerics_special_ends_its_workers_on_a_signal(sig, settle):
    """SIGTERM to the process group (what timeout and CI send) once gave a concurrent.futures
    traceback and a hang in the pool's exit, and a second SIGINT left workers re-parented to init
    that ignored both signals. Now the command exits with the signal's code, no traceback, and no
    worker outlives it by more than a second. settle 0: the Ctrl-C reaches workers still starting
    (unpickling their bootstrap, before any pool initializer), which once printed a
    KeyboardInterrupt traceback in 8 of 10 tries (firstlight/workers.py)."""
    import signal as _signal
    import subprocess

    import psutil

    p = subprocess.Popen([sys.executable, "-m", "firstlight.cli", "numerics", "--special", "exp", "--stride", "97",
                          "--workers", "2"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
                         cwd=str(Path(__file__).resolve().parent.parent))
    try:
        deadline = time.monotonic() + 60
        kids = []
        while time.monotonic() < deadline and len(kids) < 2:
            time.sleep(0.2)
            kids = [k for k in psutil.Process(p.pid).children(recursive=True) if "python" in k.name()]
        assert len(kids) >= 2, "the workers did not start"
        time.sleep(settle)
        os.killpg(p.pid, getattr(_signal, sig))
        _, err = p.communicate(timeout=20)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, _signal.SIGKILL)
    assert p.returncode == 128 + getattr(_signal, sig), (p.returncode, err.decode()[-2000:])
    assert b"Traceback" not in err, err.decode()[-2000:]
    time.sleep(1.0)
    alive = [k.pid for k in kids if k.is_running() and k.status() != psutil.STATUS_ZOMBIE]
    assert not alive, f"workers {alive} outlived the command"


def test_cache_info_and_prune_take_whole_entries_least_recently_used_first(tmp_path, monkeypatch, capsys):
    """The cache grew to 532 MB / 54 variants in a day with no way to see or trim it."""
    from filelock import FileLock

    monkeypatch.setenv("FIRSTLIGHT_CACHE", str(tmp_path))
    now = time.time()

    def entry(kind, name, marker, nbytes, days_ago):
        d = tmp_path / kind / name
        d.mkdir(parents=True)
        (d / "payload").write_bytes(b"x" * nbytes)
        (d / marker).write_text("{}")
        t = now - days_ago * 86400
        for f in d.iterdir():
            os.utime(f, (t, t))
        (tmp_path / kind / f"{name}.lock").touch()
        return d

    old = entry("sim", "verilator-aaaa", ".complete", 3000, 30)
    mid = entry("verilog", "cccc", "manifest.json", 2000, 10)
    new = entry("sim", "icarus-bbbb", ".complete", 500, 0)
    assert cli.main(["cache"]) == cli.EXIT_OK
    out = capsys.readouterr().out
    assert "sim" in out and "verilog" in out and "30 days ago" in out and "total" in out, out
    assert cli.main(["cache", "prune", "--older-than", "20", "--dry-run"]) == cli.EXIT_OK
    assert "would remove sim verilator-aaaa" in capsys.readouterr().out and old.exists()
    assert cli.main(["cache", "prune", "--older-than", "20"]) == cli.EXIT_OK
    assert not old.exists() and not (tmp_path / "sim" / "verilator-aaaa.lock").exists() and mid.exists() and new.exists()
    with FileLock(str(new) + ".lock"):  # a build holds it
        assert cli.main(["cache", "prune", "--max-size", "1K"]) == cli.EXIT_OK
        out = capsys.readouterr().out
    assert not mid.exists() and new.exists(), out  # least recently used first; the held one was not needed
    with FileLock(str(new) + ".lock"):
        assert cli.main(["cache", "prune", "--max-size", "0"]) == cli.EXIT_OK
        assert "skipped sim icarus-bbbb: in use" in capsys.readouterr().out and new.exists()
    assert cli.main(["cache", "prune"]) == cli.EXIT_CANNOT_START
    assert cli.main(["cache", "prune", "--max-size", "lots"]) == cli.EXIT_CANNOT_START
    assert "a size is bytes or a number with K, M, G or T" in capsys.readouterr().err


def test_doctor_prints_the_toolchain_and_fails_on_what_is_missing(monkeypatch, capsys):
    require_sim("verilator")
    assert cli.main(["doctor"]) == cli.EXIT_OK
    out = capsys.readouterr().out
    assert "verilator" in out and "cocotb" in out and "build cache" in out and "everything a run needs" in out, out
    monkeypatch.setenv("FIRSTLIGHT_CACHE", "")
    assert cli.main(["doctor"]) == cli.EXIT_FAIL
    out = capsys.readouterr().out
    assert "missing: build cache" in out and "set but empty" in out, out


def test_log_level_options_before_or_after_the_command(fake_jobs, capsys):
    """-v / -q / --log-level, as pytest and cocotb users expect, on every command."""
    import logging

    log = logging.getLogger("firstlight")
    try:
        assert cli.main(["--log-level", "debug", "doctor"]) in (cli.EXIT_OK, cli.EXIT_FAIL)
        assert log.level == logging.DEBUG and os.environ.get("COCOTB_LOG_LEVEL") == "DEBUG"
        assert cli.main(["bench", "--sims", "verilator", "--shapes", "2x2x2", "--attention", "--rows", "-q"]) == cli.EXIT_OK
        assert log.level == logging.WARNING
        assert "verilator 1/" not in capsys.readouterr().err  # -q: no progress lines
        assert cli.main(["bench", "--sims", "verilator", "--shapes", "2x2x2", "--attention", "--rows"]) == cli.EXIT_OK
        assert log.level == logging.INFO and "verilator 1/2: gemm 2x2x2" in capsys.readouterr().err
        assert cli.main(["doctor", "--log-level", "loud"]) == cli.EXIT_CANNOT_START
        assert "invalid choice: 'LOUD'" in capsys.readouterr().err
    finally:
        log.setLevel(logging.INFO)
        os.environ.pop("COCOTB_LOG_LEVEL", None)


def test_errata_check_and_campaign_write_junit(monkeypatch, tmp_path, capsys):
    """JUnit XML was written by bringup only; errata check and faults campaign give it now: a
    testcase per erratum / fault, failures where the verdict is one."""
    from junitparser import Failure, JUnitXml, Skipped

    from firstlight.faults import campaign
    from firstlight.jobs import errata as errata_jobs
    from workarounds import ERRATA

    monkeypatch.setattr(cli.errata, "require_sim", lambda name: None, raising=False)
    seen = {e.id: {"fired": "A0" in e.affected, "detail": "seen"} for e in ERRATA}
    seen["FL-ME-001"] = {"fired": False, "detail": "nothing"}  # a known erratum not reproduced
    monkeypatch.setattr(errata_jobs, "check_revision", lambda rev, sim, folder: (seen, None))
    path = tmp_path / "errata.xml"
    assert cli.main(["errata", "check", "--rev", "A0", "--junit", str(path)]) == cli.EXIT_FAIL
    cases = {c.name: c for suite in JUnitXml.fromfile(str(path)) for c in suite}
    assert set(cases) == {e.id for e in ERRATA}
    assert isinstance(cases["FL-ME-001"].result[0], Failure) and "not reproduced" in cases["FL-ME-001"].result[0].message
    assert not cases["FL-ME-002"].result

    def fake_run(cfg, revision, sim, specs, **kw):
        r = campaign.CampaignResult(cfg.as_dict(), revision, sim, 1, 0.5, 1.0, planned=3)
        r.results = [{"fault": "pe:0,0:acc:stuck1:bit=3", "kind": "pe", "verdict": "detected", "stage": "engine_smoke",
                      "details": "PE(0, 0) bit 3", "seconds": 1.0},
                     {"fault": "csr:CTRL:stuck0:bit=3", "kind": "csr", "verdict": "redundant", "stage": None,
                      "details": "a strobe", "seconds": 0.0},
                     {"fault": "dram:stuck1:addr=9:bit=1", "kind": "dram", "verdict": "undetected", "stage": None,
                      "details": "", "seconds": 2.0}]
        return r

    monkeypatch.setattr(campaign, "run_campaign", fake_run)
    monkeypatch.setattr(cli.faults, "require_sim", lambda name: None, raising=False)
    path = tmp_path / "faults.xml"
    assert cli.main(["faults", "campaign", "--formats", "int8", "--sram-depth", "64", "--sample", "3",
                     "--junit", str(path)]) == cli.EXIT_OK
    cases = {c.name: c for suite in JUnitXml.fromfile(str(path)) for c in suite}
    assert not cases["pe:0,0:acc:stuck1:bit=3"].result
    assert isinstance(cases["csr:CTRL:stuck0:bit=3"].result[0], Skipped)
    assert isinstance(cases["dram:stuck1:addr=9:bit=1"].result[0], Failure)


def test_piped_output_has_no_trailing_blanks(capsys):
    """Rich pads a table's lines to the console width; piped or saved output kept the padding."""
    assert cli.main(["errata", "list", "--rev", "A0"]) == cli.EXIT_OK
    out = capsys.readouterr().out
    assert "FL-ME-001" in out and not [line for line in out.splitlines() if line != line.rstrip()], out[:400]


def test_an_interrupted_run_says_interrupted_not_did_not_pass(capsys):
    import signal as _signal

    from firstlight.cli.common import JobFolder
    from firstlight.errors import Interrupted

    with pytest.raises(Interrupted):
        with JobFolder(False, "t") as folder:
            raise Interrupted(_signal.SIGTERM)
    err = capsys.readouterr().err
    assert "interrupted by SIGTERM" in err and "did not pass" not in err, err
    assert folder.path.exists()
    shutil.rmtree(folder.path)
    with JobFolder(False, "t") as folder:
        pass  # finished without a passing verdict
    assert "the run did not pass" in capsys.readouterr().err
    shutil.rmtree(folder.path)


def test_regress_writes_junit_for_the_stored_runs(tmp_path, monkeypatch):
    """A second regress finds every run stored, runs nothing, and its --junit has a testcase per run."""
    from junitparser import Error, Failure, JUnitXml

    from firstlight.sweep import db as sweep_db
    from firstlight.sweep import engine

    monkeypatch.setattr(engine, "plan_sweep", lambda spec, con, force=False: type("P", (), {"todo": [], "stored": 3})())
    monkeypatch.setattr(cli.regress, "require_sim", lambda name: None, raising=False)
    path = tmp_path / "r.db"
    con = sweep_db.open_db(path)
    for wl, st, err in (("gemm-seed1", "pass", None), ("softmax-seed1", "fail", None), ("bringup-seed1", "error", "died")):
        con.execute("INSERT INTO runs (key, sweep, design, workload, sim, status, error) VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (wl, "regress-A0", "A0", wl, "verilator", st, err))
    con.commit()
    con.close()
    out = tmp_path / "regress.xml"
    code = cli.main(["regress", "--rev", "A0", "--sim", "verilator", "--db", str(path), "--junit", str(out)])
    assert code == cli.EXIT_HARNESS_ERROR
    cases = {c.name: c for suite in JUnitXml.fromfile(str(out)) for c in suite}
    assert not cases["gemm-seed1"].result
    assert isinstance(cases["softmax-seed1"].result[0], Failure)
    assert isinstance(cases["bringup-seed1"].result[0], Error) and "died" in cases["bringup-seed1"].result[0].message


def test_sweep_run_writes_junit_a_case_per_pair_of_the_spec(tmp_path, monkeypatch):
    """sweep run had no --junit (bringup, errata check, regress and the campaign had): now a
    testcase per (design, workload) of the spec, from the newest stored result; a pair that is
    not applicable is skipped with its reason, one with no stored result is an error."""
    from junitparser import Error, Failure, JUnitXml, Skipped

    from firstlight.sweep import db as sweep_db
    from firstlight.sweep import engine
    from firstlight.sweep.spec import load_spec

    spec_path = tmp_path / "tiny.toml"
    spec_path.write_text('name = "tiny"\n[grid]\narray = "2x2"\nsram_depth = 64\ncmdq_depth = 64\nformats = "int8"\n'
                         'vector = [true, false]\n[[workload]]\nkind = "gemm"\nm = 8\nn = 8\nk = 16\n'
                         '[[workload]]\nkind = "softmax"\nrows = 2\ncols = 8\n')
    spec = load_spec(spec_path)
    assert len(spec.designs) == 2 and len(spec.skipped) == 1, spec.skipped  # softmax needs the vector unit
    monkeypatch.setattr(engine, "plan_sweep", lambda spec, con, force=False: type("P", (), {
        "todo": [], "stored": 2, "commit": "0" * 40})())
    monkeypatch.setattr(cli.sweep, "require_sim", lambda name: None, raising=False)
    with_vec, without = sorted(spec.designs, key=lambda d: not d.variant.config.vector)
    db = tmp_path / "t.db"
    con = sweep_db.open_db(db)
    for i, (d, w, st, err) in enumerate(((with_vec, "gemm-8x8x16", "pass", None),
                                         (with_vec, "softmax-2x8", "fail", None),
                                         (without, "gemm-8x8x16", "error", "the build died"))):
        con.execute("INSERT INTO runs (key, sweep, design, workload, sim, seed, status, error, created) VALUES "
                    "(?, ?, ?, ?, ?, ?, ?, ?, ?)", (f"k{i}", "tiny", d.name, w, "verilator", 1, st, err, float(i)))
    con.commit()
    con.close()
    out = tmp_path / "sweep.xml"
    cli.main(["sweep", "run", str(spec_path), "--db", str(db), "--plot", str(tmp_path / "p.png"), "--junit", str(out)])
    cases = {tuple(c.name.split(" on ")[::-1]): c for suite in JUnitXml.fromfile(str(out)) for c in suite}
    assert len(cases) == 4, sorted(cases)
    wl = {w.name for w in spec.workloads}
    assert wl == {"gemm-8x8x16", "softmax-2x8"}, wl
    assert not cases[with_vec.name, "gemm-8x8x16"].result
    assert isinstance(cases[with_vec.name, "softmax-2x8"].result[0], Failure)
    err = cases[without.name, "gemm-8x8x16"].result[0]
    assert isinstance(err, Error) and "the build died" in err.message
    skip = cases[without.name, "softmax-2x8"].result[0]
    assert isinstance(skip, Skipped) and "not applicable" in skip.message and "vector" in skip.message
    from PIL import Image

    text = Image.open(tmp_path / "p.png").text  # the Pareto PNG carries the provenance too
    assert "commit " in text["Comment"] and "verilator" in text["Comment"], text
