"""pytest entry for the whole-chip cocotb tests: one simulator process per simulator."""

from __future__ import annotations

import re

import pytest

from conftest import check_cocotb, cocotb_results

CHIP_TESTS = [
    "csr_identity_and_scratch",
    "backdoor_matches_front_door",
    "backdoor_ranges_land_on_their_words",
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


@pytest.mark.sim
def test_cpp_and_hdl_clocks_run_the_same_cycles(tmp_path):
    """The default Verilator build toggles the clock in its C++ main (cosim/hdl/fl_tb_main.cpp);
    the wrapper's HDL clock (waveform builds, Icarus) must see the chip do exactly the same:
    same result, same cycle count, same window, a kernel with streamed commands and DMA.

    The stream is longer than the ring, so the host sleeps on timers while the chip drains it,
    and the main runs those stretches fast-forwarded (no VPI between edges): its log must say
    it did, or this test would not be checking that path."""
    from conftest import SMALL_CHIP, require_sim

    from cosim.build import Variant
    from cosim.jobs import run_job
    from firstlight.jobs.kernels import gemm_job

    require_sim("verilator")
    runs = {}
    for clock in ("cpp", "hdl"):
        res = run_job(gemm_job, {"m": 24, "n": 20, "k": 40, "seed": 3}, variant=Variant(config=SMALL_CHIP),
                      clock=clock, work_dir=tmp_path / clock)
        assert res.build.clock == clock
        assert res.value["passed"], (clock, res.value["mismatch"])
        runs[clock] = res.value["stats"]
    for key in ("cycles", "sim_window", "engine_busy_cycles", "dram_read_bytes"):
        assert runs["cpp"][key] == runs["hdl"][key], (key, runs["cpp"][key], runs["hdl"][key])
    report = re.search(r"fl_tb_main: (\d+) of (\d+) clock edges fast-forwarded", (tmp_path / "cpp" / "sim.log").read_text())
    assert report, "the C++ main's report is missing from its log"
    fast, edges = int(report[1]), int(report[2])
    assert 0 < fast < edges and edges >= 2 * runs["cpp"]["cycles"], (fast, edges, runs["cpp"]["cycles"])


def test_cpp_clock_is_refused_where_it_cannot_work():
    from cosim.build import Variant, build_simulator

    with pytest.raises(ValueError, match="Icarus"):
        build_simulator(Variant(), sim="icarus", clock="cpp")
    with pytest.raises(ValueError, match="waveform"):
        build_simulator(Variant(), sim="verilator", clock="cpp", waves=True)
    with pytest.raises(ValueError, match="clock must be one of"):
        build_simulator(Variant(), sim="verilator", clock="systemc")
