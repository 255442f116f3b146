"""When the simulator dies mid-module, the tests that finished before keep their results."""

from __future__ import annotations

import pytest

from conftest import require_sim
from cosim.jobs import run_cocotb_module


@pytest.mark.sim
def test_results_survive_a_simulator_crash(tmp_path):
    require_sim("verilator")
    res = run_cocotb_module("crash_tests", work_dir=tmp_path)  # tests/crash_tests.py calls os._exit(3)
    assert res["first_passes"]["passed"] is True
    assert res["second_kills_the_simulator"]["passed"] is False
    assert "the simulator died during this test" in res["second_kills_the_simulator"]["message"]
    assert "third_never_runs" not in res
    # what the simulator printed before it died is in its log (a Verilator log was once empty:
    # the embedded Python's buffers died with the process)
    log = open(res["__log__"]["message"]).read()
    assert "last words before the crash" in log and "a last log line before the crash" in log, log[-2000:]
