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
