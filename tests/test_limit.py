"""The simulator's limit (issue 13): a recorded harness run replays on a bare Verilator build of
the same Verilog, cycle for cycle, and a replay that drifts is caught, not timed."""

from __future__ import annotations

import subprocess
import sys

import pytest

from conftest import SMALL_CHIP, require_sim
from cosim.stimulus import KIND_CSR_READ, StimulusError, StimulusRecorder

pytestmark = pytest.mark.sim


def test_an_action_off_a_falling_edge_cannot_be_recorded():
    rec = StimulusRecorder(10)
    rec.csr(20, 0x04, 0, write=False)
    with pytest.raises(StimulusError, match="not on a falling clock edge"):
        rec.csr(25, 0x04, 0, write=False)
    with pytest.raises(StimulusError, match="out of order"):
        rec.reset_released(10)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """A GEMM on the small chip, its stimulus recorded, and the bare build of the same Verilog."""
    require_sim("verilator")
    from cosim.build import Variant
    from cosim.jobs import run_job
    from cosim.limit import build_limit
    from firstlight.jobs.kernels import gemm_job

    variant = Variant(config=SMALL_CHIP, revision="B1")
    work = tmp_path_factory.mktemp("limit")
    stim = work / "stimulus.txt"
    res = run_job(gemm_job, {"m": 9, "n": 6, "k": 21, "seed": 5}, variant=variant, stimulus=stim)
    assert res.value["passed"]
    return variant, stim, tuple(res.value["stats"]["sim_window"]), build_limit(variant), work


def test_the_replay_reproduces_the_run(recorded):
    from cosim.limit import run_limit

    _variant, stim, window, lb, work = recorded
    events = stim.read_text().splitlines()
    reads = sum(1 for ln in events if int(ln.split()[1]) == KIND_CSR_READ)
    run = run_limit(lb, stim, window, work / "ok")
    # every recorded read was replayed and returned the data it returned in the harness
    assert run.reads == reads > 10
    assert run.window_cycles == window[1] - window[0]
    assert run.cycles_per_s > 0


def test_a_replay_that_drifts_is_reported(recorded):
    """Ring the doorbell one command short: the chip then never runs the last command, the perf
    counters read at the end of the kernel differ, and the replay says so instead of timing."""
    from cosim.limit import ReplayDiverged, run_limit
    from rtl.csr_map import REG

    _variant, stim, window, lb, work = recorded
    lines = stim.read_text().splitlines()
    tail = REG["CMDQ_TAIL"].addr
    idx = max(i for i, ln in enumerate(lines) if ln.split()[1] == "1" and int(ln.split()[2], 16) == tail)
    c, kind, a, b = lines[idx].split()
    lines[idx] = f"{c} {kind} {a} {(int(b, 16) - 1) % SMALL_CHIP.cmdq_depth:x}"
    bad = work / "drifted.txt"
    bad.write_text("\n".join(lines) + "\n")
    with pytest.raises(ReplayDiverged, match="diverged from the recorded run"):
        run_limit(lb, bad, window, work / "bad")


def test_bench_limit_prints_the_table_and_its_json(tmp_path):
    require_sim("verilator")
    out = tmp_path / "limit.json"
    proc = subprocess.run([sys.executable, "-m", "firstlight.cli", "bench", "--limit", "--formats", "int8",
                           "--no-vector", "--sram-depth", "64", "--rev", "B1", "--shapes", "8x8x40", "--reps", "1",
                           "--json", str(out)], capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    import json

    rows = json.loads(out.read_text())["rows"]
    assert [r["chip"] for r in rows] == ["4x4-int8-novec"]
    for key in ("chip", "shape", "harness_cycles_per_s", "limit_cycles_per_s", "ratio"):
        assert key in rows[0]
    assert rows[0]["shape"] == "8x8x40" and rows[0]["limit_cycles_per_s"] > 0
    assert abs(rows[0]["ratio"] - rows[0]["harness_cycles_per_s"] / rows[0]["limit_cycles_per_s"]) < 1e-9
    assert "harness" in proc.stdout and "limit" in proc.stdout
