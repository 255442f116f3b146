"""pytest entry: the chip's AXI master port against cocotbext-axi's AxiRam (tests/axi_tests.py).

The board's DRAM model and the DMA were written together; here a memory model we did not write
serves the port, on a chip built with its AXI port on the testbench (``external_axi``).
"""

from __future__ import annotations

import pytest

from conftest import SEED, check_cocotb, cocotb_results
from cosim.build import Variant
from rtl.config import ChipConfig
from rtl.revisions import REVISIONS, Defect

CONFIG = ChipConfig(formats=("int8",), operand_depth=256, acc_depth=256)
# B1 has no defects: every burst must be legal and every byte right.
VARIANT = Variant(config=CONFIG, revision="B1", external_axi=True)

AXI_TESTS = [
    "dma_loads_match_axi_ram",
    "dma_stores_match_axi_ram",
    "single_row_load_across_a_page",
]

# Revisions whose DMA issues bursts across 4 KiB pages (computed from rtl/revisions.py, so a
# revision that gains the defect is tested without editing this file).
# The last revision with the defect (one build per revision and simulator: the defect is the same
# RTL in each; the errata matrix runs it on every affected revision).
PAGE_CROSSING_REVISIONS = sorted(n for n, r in REVISIONS.items() if Defect.DMA_BURST_CROSSES_PAGE in r.defects)[-1:]


@pytest.mark.sim
@pytest.mark.parametrize("name", AXI_TESTS)
def test_axi_ram(name, sim, tmp_path_factory):
    results = cocotb_results("axi_tests", sim, tmp_path_factory.getbasetemp(), variant=VARIANT)
    check_cocotb(results, name, sim)


@pytest.mark.sim
def test_every_axi_cocotb_test_is_listed(sim, tmp_path_factory):
    results = cocotb_results("axi_tests", sim, tmp_path_factory.getbasetemp(), variant=VARIANT)
    ran = {k for k in results if not k.startswith("__")}
    assert ran == set(AXI_TESTS), f"cocotb ran {sorted(ran)}, pytest lists {sorted(AXI_TESTS)}"


@pytest.mark.sim
@pytest.mark.parametrize(
    "revision",
    PAGE_CROSSING_REVISIONS or [pytest.param(None, marks=pytest.mark.skip(
        reason=f"no revision in rtl/revisions.py has Defect.{Defect.DMA_BURST_CROSSES_PAGE.name} "
               f"(revisions: {', '.join(REVISIONS)})"))],
)
def test_page_crossing_erratum_seen_by_axi_ram(revision, sim, tmp_path):
    """On a revision with DMA_BURST_CROSSES_PAGE, a single-row load across a page makes AxiRam
    assert on the 4 KiB crossing (and the monitor report it): the erratum is seen by code we did
    not write. The cocotb test checks which assertion fired (tests/axi_tests.py)."""
    from cosim.jobs import run_cocotb_module

    variant = Variant(config=CONFIG, revision=revision, external_axi=True)
    name = "single_row_load_across_a_page"
    results = run_cocotb_module("axi_tests", variant=variant, sim=sim, work_dir=tmp_path,
                                extra_env={"FIRSTLIGHT_SEED": str(SEED), "COCOTB_TEST_FILTER": rf"\.{name}$"})
    check_cocotb(results, name, sim)


def test_monitor_checks_fire():
    """Each check of the monitor (tests/axi_tests.py) reports the violation it is for, and a
    legal trace passes (no simulator: the checks are plain functions of the handshakes)."""
    from axi_tests import Burst, WChecker, burst_problems, coverage_errors

    bb, dram = 4, 1 << 20

    def ar(addr, beats, size=2, burst=1):
        return Burst("AR", addr, beats, size, burst, cycle=0)

    assert burst_problems(ar(0xFC0, 16), bb, dram) == []  # ends exactly at the page
    for bad, words in [(ar(0x102, 4), "not aligned"), (ar(0x100, 4, size=1), "size 1"),
                       (ar(0x100, 4, burst=0), "burst type 0"), (ar(0x100, 17), "longer than 16"),
                       (ar(0xFF8, 3), "crosses the 4 KiB page boundary at 0x1000"),
                       (ar(dram, 4), "past the")]:
        got = burst_problems(bad, bb, dram)
        assert len(got) == 1 and words in got[0], (bad, got)

    def run_w(beats_per_aw, beats, aw_first=True):
        w = WChecker(bb)
        aws = [Burst("AW", 0x40 * i, n, 2, 1, 0) for i, n in enumerate(beats_per_aw)]
        if aw_first:
            for b in aws:
                w.address(b)
        for i, (strb, last) in enumerate(beats):
            w.beat(strb, last, i)
        if not aw_first:
            for b in aws:
                w.address(b)
        return w.problems + w.loose_ends()

    good = [(0xF, False), (0xF, True), (0xF, True)]
    assert run_w([2, 1], good) == []
    assert run_w([2, 1], good, aw_first=False) == []  # W may lead its address
    assert "wstrb 0x7" in " ".join(run_w([2, 1], [(0xF, False), (0x7, True), (0xF, True)]))
    assert "wlast=1" in " ".join(run_w([2, 1], [(0xF, True), (0xF, True), (0xF, True)]))
    assert "wlast=0" in " ".join(run_w([2, 1], [(0xF, False), (0xF, False), (0xF, True)]))
    assert "got 2 of 3" in " ".join(run_w([3], good[:2]))
    assert "without an AW" in " ".join(run_w([1], [(0xF, True), (0xF, True)]))

    rows = [(0x100, 0x48), (0x1100, 0x8)]
    split = [ar(0x100, 16), ar(0x140, 2), ar(0x1100, 2)]
    assert coverage_errors(split, rows, bb) == []
    assert coverage_errors([ar(0x100, 16), ar(0x144, 1), ar(0x1100, 2)], rows, bb)  # a gap
    assert coverage_errors([ar(0x100, 16), ar(0x13C, 3), ar(0x1100, 2)], rows, bb)  # an overlap
    assert coverage_errors(split[:2], rows, bb)  # a row never fetched
    assert coverage_errors(split + [ar(0x2000, 1)], rows, bb)  # one burst too many
    assert coverage_errors([ar(0x100, 16), ar(0x140, 3)], [(0x100, 0x48), (0x148, 0x4)], bb)  # spans two rows
