"""The command line: argument errors exit 2 with a clear message; a real run writes JSON."""

from __future__ import annotations

import json

import pytest

from conftest import require_sim
from firstlight import cli


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["run", "gemm", "--m", "0", "--n", "1", "--k", "1"], "positive integer"),
        (["run", "gemm", "--m", "x", "--n", "1", "--k", "1"], "positive integer"),
        (["run", "gemm", "--m", "4", "--n", "4", "--k", "4", "--array", "3x4"], "rows must be one of"),
        (["run", "gemm", "--m", "4", "--n", "4", "--k", "4", "--sim", "modelsim"], "invalid choice"),
        (["run", "reduce", "--rows", "2", "--cols", "2", "--op", "mean"], "invalid choice"),
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
    assert d["passed"] is True and d["shape"] == [7, 5, 9] and d["array"] == "4x4"
    assert d["ideal_cycles"] == -(-7 * 5 * 9 // 16)
    assert 0 < d["utilization"] <= 1


@pytest.mark.sim
def test_run_reduce(tmp_path):
    require_sim("verilator")
    out = tmp_path / "r.json"
    assert cli.main(["run", "reduce", "--rows", "3", "--cols", "10", "--op", "min", "--json", str(out)]) == 0
    assert json.loads(out.read_text())["passed"] is True


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["errata", "list", "--rev", "Z9"], "unknown revision 'Z9'"),
        (["errata", "show", "FL-XX-999"], "unknown erratum 'FL-XX-999'"),
        (["run", "gemm", "--m", "2", "--n", "2", "--k", "2", "--errata-policy", "FL-ME-001=maybe"],
         "must be one of auto, on, off"),
        (["run", "gemm", "--m", "2", "--n", "2", "--k", "2", "--errata-policy", "FL-ME-001"], "must look like ID="),
        (["run", "gemm", "--m", "2", "--n", "2", "--k", "2", "--rev", "C7"], "unknown revision 'C7'"),
    ],
)
def test_errata_bad_input_exit_2(argv, needle, capsys):
    assert cli.main(argv) == cli.EXIT_CANNOT_START
    assert needle in capsys.readouterr().err


def test_errata_list_and_show(capsys, tmp_path):
    out = tmp_path / "e.json"
    assert cli.main(["errata", "list", "--rev", "B0", "--json", str(out)]) == 0
    rows = json.loads(out.read_text())
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
    assert cli.main(["run", "gemm", "--m", "3", "--n", "3", "--k", "3", "--sim", sim, "--waves", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    waves = [p for p in tmp_path.rglob("*") if p.suffix in (".vcd", ".fst")]
    assert waves and waves[0].stat().st_size > 1000, waves
    assert waves[0].name in text
    if waves[0].suffix == ".vcd":
        assert "$enddefinitions" in waves[0].read_text(errors="replace")


@pytest.mark.sim
def test_numerics_report_small(tmp_path, capsys):
    require_sim("verilator")
    out = tmp_path / "nu"
    code = cli.main(["numerics", "--m", "8", "--n", "8", "--k", "64", "--recipes", "int8-tensor", "fp8-e4m3-cast",
                     "mxfp4-e2m1-rceil", "--dists", "normal", "small", "--report", str(out)])
    assert code == cli.EXIT_OK, capsys.readouterr().err
    d = json.loads((out / "numerics.json").read_text())
    assert d["all_bit_identical"] and len(d["rows"]) == 6 and d["vulnerable_differs_from_golden"]
    assert (out / "numerics.png").read_bytes()[:4] == b"\x89PNG"
    cases = {(r["recipe"], r["case"]): r["sqnr_db"] for r in d["erratum_FL-NU-001"]}
    # the erratum costs the cast recipe its signal; the mitigation brings it back above spec
    assert cases[("fp8-e4m3-cast", "vulnerable (A1, FL-NU-001 off)")] < 1.0
    assert cases[("fp8-e4m3-cast", "mitigated (A1, FL-NU-001 on)")] > cases[("fp8-e4m3-cast", "as specified (B0)")] + 5
    assert d["operand_sqnr_normal"]["int8-tensor"] > 38 and d["operand_sqnr_normal"]["mxfp4-e2m1-rceil"] > 17


def test_numerics_bad_input(capsys):
    assert cli.main(["numerics", "--recipes", "fp7"]) == cli.EXIT_CANNOT_START
    assert "unknown recipe 'fp7'" in capsys.readouterr().err
    assert cli.main(["numerics", "--dists", "uniform"]) == cli.EXIT_CANNOT_START
    assert "unknown distribution 'uniform'" in capsys.readouterr().err


def test_bad_formats_exit_2(capsys):
    assert cli.main(["run", "gemm", "--m", "2", "--n", "2", "--k", "2", "--formats", "int8", "fp9"]) == cli.EXIT_CANNOT_START
    assert "including 'int8'" in capsys.readouterr().err
