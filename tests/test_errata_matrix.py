"""The proof on real RTL: every erratum x revision x mitigation on/off, and every reproducer.

Exactly the (affected, mitigation off) cells may fail; every other cell is bit-exact against the
golden. The reproducers fire exactly on the revisions the registry lists as affected.
"""

from __future__ import annotations

import dataclasses

import pytest

from conftest import SEED, require_sim
from cosim.build import Variant
from cosim.jobs import run_job
from firstlight.jobs.errata import errata_check_job, errata_matrix_job, expected_cell_pass
from workarounds import ERRATA
from workarounds.check import compare
from workarounds.registry import ASSESSED_REVISIONS, Unit

_CACHE: dict = {}


def _matrix(sim: str, rev: str, kind: str = "cell") -> list[dict]:
    key = (sim, rev)
    if key not in _CACHE:
        res = run_job(errata_matrix_job, {"seed": SEED}, variant=Variant(revision=rev), sim=sim)
        _CACHE[key] = res.records
    return [r for r in _CACHE[key] if r.get("type") == kind]


@pytest.mark.sim
@pytest.mark.parametrize("sim_name", ["verilator", "icarus"])
@pytest.mark.parametrize("rev", ASSESSED_REVISIONS)
def test_matrix_fails_exactly_where_affected_and_off(sim_name, rev):
    require_sim(sim_name)
    cells = _matrix(sim_name, rev)
    assert {(c["id"], c["policy"]) for c in cells} == {(e.id, p) for e in ERRATA for p in ("on", "off")}
    wrong = []
    for c in cells:
        expect_pass = expected_cell_pass(c)
        if c["passed"] != expect_pass:
            wrong.append(f"{c['id']} mitigation {c['policy']}: {'passed' if c['passed'] else 'failed'}, expected "
                         f"{'pass' if expect_pass else 'fail'} ({c['mismatch']})")
    assert not wrong, f"on {rev} ({sim_name}, seed {SEED}):\n" + "\n".join(wrong)


@pytest.mark.sim
@pytest.mark.parametrize("sim_name", ["verilator", "icarus"])
@pytest.mark.parametrize("rev", ASSESSED_REVISIONS)
def test_tile_language_cells_fail_exactly_where_affected_and_off(sim_name, rev):
    """The same rule on the tile-language kernels (Erratum.tile_cell): each mitigation that is a
    compiler pass (FL-ME-001, FL-ME-002, FL-SR-001) or a stream pass (FL-DM-001, FL-DM-002) is
    needed on its affected revisions and harmless on the others."""
    require_sim(sim_name)
    cells = _matrix(sim_name, rev, "tile_cell")
    want = {(e.id, p) for e in ERRATA if e.tile_cell is not None for p in ("on", "off")}
    assert {(c["id"], c["policy"]) for c in cells} == want
    assert len(want) >= 10
    wrong = [f"{c['id']} ({c['kernel']}) mitigation {c['policy']}: {'passed' if c['passed'] else 'failed'}, "
             f"expected {'pass' if expected_cell_pass(c) else 'fail'} ({c['mismatch']})"
             for c in cells if c["passed"] != expected_cell_pass(c)]
    assert not wrong, f"on {rev} ({sim_name}, seed {SEED}):\n" + "\n".join(wrong)


@pytest.mark.sim
@pytest.mark.parametrize("sim_name", ["verilator", "icarus"])
@pytest.mark.parametrize("rev", ASSESSED_REVISIONS)
def test_registry_affected_lists_match_the_rtl(sim_name, rev):
    """The consistency test: run every reproducer; detected must equal the registry's belief."""
    require_sim(sim_name)
    observed = {c["id"]: {"fired": c["reproducer_fired"], "detail": ""} for c in _matrix(sim_name, rev)}
    rows = compare(rev, observed)
    bad = [r for r in rows if r["verdict"] != "ok"]
    assert not bad, f"registry vs RTL on {rev}: {bad}"


_CHECKS: dict = {}


def _reproducers(sim: str, rev: str) -> dict[str, dict]:
    key = (sim, rev)
    if key not in _CHECKS:
        _CHECKS[key] = run_job(errata_check_job, {}, variant=Variant(revision=rev), sim=sim).value["reproducers"]
    return _CHECKS[key]


DMA_ERRATA = [e.id for e in ERRATA if e.unit is Unit.DMA]


@pytest.mark.sim
@pytest.mark.parametrize("sim_name", ["verilator", "icarus"])
@pytest.mark.parametrize("rev", ASSESSED_REVISIONS)
def test_dma_reproducer_streams_come_out_right_through_their_pass(sim_name, rev):
    """A DMA reproducer's raw stream moves wrong bytes exactly on the affected revisions; the
    same stream through its erratum's pass moves the bytes numpy expects on every revision."""
    require_sim(sim_name)
    assert DMA_ERRATA == ["FL-DM-001", "FL-DM-002"]
    got = _reproducers(sim_name, rev)
    wrong = {i: got[i]["detail"] for i in DMA_ERRATA if got[i].get("mitigated") is not True}
    assert not wrong, f"on {rev} ({sim_name}) the stream through the pass moved wrong bytes: {wrong}"
    assert {i: got[i]["fired"] for i in DMA_ERRATA} == {e.id: rev in e.affected for e in ERRATA if e.id in DMA_ERRATA}


@pytest.mark.sim
def test_check_reports_a_wrong_registry_entry(tmp_path):
    """Edit a record's affected list to be wrong: the check on real observations says so."""
    require_sim("verilator")
    res = run_job(errata_check_job, {}, variant=Variant(revision="A1"), work_dir=tmp_path)
    observed = res.value["reproducers"]
    assert {r["verdict"] for r in compare("A1", observed)} == {"ok"}
    me001 = next(e for e in ERRATA if e.id == "FL-ME-001")
    rs001 = next(e for e in ERRATA if e.id == "FL-RU-002")
    doctored = tuple(
        dataclasses.replace(e, affected=("A0",)) if e is me001  # claims A1 is fixed
        else dataclasses.replace(e, affected=("A0", "A1")) if e is rs001  # claims A1 still has it
        else e
        for e in ERRATA
    )
    verdicts = {r["id"]: r["verdict"] for r in compare("A1", observed, doctored)}
    assert verdicts["FL-ME-001"] == "new finding"
    assert verdicts["FL-RU-002"] == "not reproduced"
