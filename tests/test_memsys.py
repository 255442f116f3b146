"""The memory system on both simulators: DMA copies bytes exactly (1D, 2D, across 4 KiB pages,
every SRAM, both directions), bad descriptors set ERR and the chip goes on, a missing wait gives
wrong data, an impossible wait trips the watchdog with a dump that names the semaphore."""

from __future__ import annotations

import pytest

from cosim.build import Variant
from cosim.jobs import run_job
from rtl.config import ChipConfig
from rtl.isa import ErrCode

import memsys_jobs as jobs

pytestmark = pytest.mark.sim
SMALL = Variant(config=ChipConfig(formats=("int8",), operand_depth=256, acc_depth=256), revision="B1")


@pytest.mark.parametrize("seed", [1, 2])
def test_dma_copies_bytes_exactly(sim, seed, tmp_path):
    r = run_job(jobs.dma_roundtrip_job, {"seed": seed}, variant=SMALL, sim=sim, work_dir=tmp_path).value
    assert r["count"] == 0, (f"{r['count']} words differ, first {r['mismatches']}; reproduce: "
                             f"pytest tests/test_memsys.py -k 'copies and {sim} and {seed}'")
    perf = r["perf"]
    assert perf["DRAM_RD_BYTES"] > 0 and perf["DRAM_WR_BYTES"] > 0 and perf["DMA_IN_BUSY"] > 0


def test_bad_descriptors_set_err_and_the_chip_goes_on(sim, tmp_path):
    seen = run_job(jobs.bad_descriptor_job, {}, variant=SMALL, sim=sim, work_dir=tmp_path).value
    for name, s in seen.items():
        assert s["err"] == s["want"], f"{name}: ERR={s['err']} ({ErrCode(s['err']).name}), want {ErrCode(s['want']).name}"
    assert [s["done"] for s in seen.values()] == list(range(1, len(seen) + 1)), "the NOP behind each bad DMA retired"


def test_a_missing_wait_reads_stale_operands(sim, tmp_path):
    ok = run_job(jobs.missing_wait_job, {"with_wait": True}, variant=SMALL, sim=sim, work_dir=tmp_path / "w").value
    raced = run_job(jobs.missing_wait_job, {"with_wait": False}, variant=SMALL, sim=sim, work_dir=tmp_path / "n").value
    assert ok["equal"], "with its waits the MATMUL must see the DMA'd operands"
    assert not raced["equal"], "without the wait the MATMUL ran before the DMA landed: the race must be real"


def test_an_impossible_wait_trips_the_watchdog_with_a_readable_dump(sim, tmp_path):
    text = run_job(jobs.impossible_wait_job, {}, variant=SMALL, sim=sim, work_dir=tmp_path).value
    assert text.startswith("watchdog:"), text
    assert "the DMA load queue waits on semaphore 5 (count 0)" in text, text


def test_the_host_keeps_the_command_ring_fed(tmp_path):
    """A GEMM's cycles do not depend on the ring's depth: a 256^3 GEMM streams 33k commands
    through a 1024-entry ring while the chip runs, and its cycles equal those of a ring that holds
    the whole stream at once. The host sleeps between refills by the rate it measured; near the end
    of this GEMM a stretch of quick commands once drained the ring before the host came back (8k
    cycles lost). The refill now never sleeps past half the feed time of the MATMULs still queued."""
    from firstlight.jobs.kernels import gemm_job

    cycles = {}
    for depth in (1024, 65536):
        v = Variant(config=ChipConfig(formats=("int8",), vector=False, cmdq_depth=depth), revision="B1")
        r = run_job(gemm_job, {"m": 256, "n": 256, "k": 256, "seed": 1}, variant=v, work_dir=tmp_path / str(depth))
        assert r.value["passed"]
        cycles[depth] = r.value["stats"]["cycles"]
    assert cycles[1024] == cycles[65536], f"a 1024-entry ring cost {cycles[1024] - cycles[65536]:,} cycles: {cycles}"


def test_a_kernels_cycles_do_not_depend_on_when_it_starts(sim, tmp_path):
    """The DRAM's bandwidth window once ran free, so the same RMSNorm took 7,362 cycles as a
    session's first call and 7,364 after a small GEMM: the window now opens with the first beat
    after the channel had every token back (rtl/dram.py), and the cycles are the same each time,
    on both simulators."""
    from conftest import SEED

    cycles = run_job(jobs.start_phase_job, {"seed": SEED}, variant=Variant(revision="B1"), sim=sim,
                     work_dir=tmp_path).value
    assert len(set(cycles)) == 1, (f"RMSNorm 6x77 took {cycles} cycles (first, after a GEMM, after 1-3 NOPs); "
                                   f"reproduce: FIRSTLIGHT_SEED={SEED} pytest tests/test_memsys.py -k 'starts and {sim}'")
