"""pytest entry for the whole-chip cocotb tests: one simulator process per simulator."""

from __future__ import annotations

import pytest

from conftest import check_cocotb, cocotb_results

CHIP_TESTS = [
    "csr_identity_and_scratch",
    "backdoor_matches_front_door",
    "gemm_shapes_bit_exact",
    "gemm_extremes_wrap",
    "reductions_bit_exact",
    "bad_commands_set_err_and_chip_recovers",
    "watchdog_reports_state_instead_of_hanging",
    "perf_counters_consistent",
]


@pytest.mark.sim
@pytest.mark.parametrize("name", CHIP_TESTS)
def test_chip(name, sim, tmp_path_factory):
    results = cocotb_results("chip_tests", sim, tmp_path_factory.getbasetemp())
    check_cocotb(results, name, sim)


@pytest.mark.sim
def test_every_cocotb_test_is_listed(sim, tmp_path_factory):
    results = cocotb_results("chip_tests", sim, tmp_path_factory.getbasetemp())
    ran = {k for k in results if not k.startswith("__")}
    assert ran == set(CHIP_TESTS), f"cocotb ran {sorted(ran)}, pytest lists {sorted(CHIP_TESTS)}"


@pytest.mark.sim
def test_gpi_clock_mode_runs_a_kernel(tmp_path):
    """The alternative clock (cocotb Clock(impl="gpi") instead of the HDL clock) gives the same answer."""
    from conftest import require_sim

    from cosim.jobs import run_job

    require_sim("verilator")
    from conftest import SMALL_CHIP
    from cosim.build import Variant
    from firstlight.jobs.kernels import gemm_job

    res = run_job(gemm_job, {"m": 9, "n": 6, "k": 21, "seed": 5}, variant=Variant(config=SMALL_CHIP), clock="gpi",
                  work_dir=tmp_path)
    assert res.value["passed"], res.value["mismatch"]
