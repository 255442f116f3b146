"""Errata jobs (inside the simulator) and the regression matrix built from them (on the host).

The matrix is the proof that an erratum is handled: every record's kernel cell runs on every
assessed revision with its mitigation on and off, after its reproducer. Only the (affected,
off) cells may fail (:func:`expected_cell_pass`, shared by the CLI and the tests).
"""

from __future__ import annotations

import numpy as np

import golden
import workarounds
from kernels.fused import gemm_sum
from kernels.gemm import gemm
from kernels.lowp import gemm_lowp
from kernels.reduce import reduce_rows
from rtl.memories import DATA_MEMORIES
from workarounds.cells import Cell, DmaCell, GemmCell, GemmSumCell, LowpCell, ReduceCell, TileCell, VecCell
from workarounds.dma_streams import dma_round_trip
from workarounds.registry import ASSESSED_REVISIONS, BY_ID, ERRATA, erratum
from workarounds.reproducers import run_reproducer

from golden.distributions import sample
from .checks import describe_mismatch, first_mismatch, int8_operands, lowp_mismatch

__all__ = [
    "poison_memories", "run_cell", "errata_check_job", "errata_matrix_job", "errata_scale_job",
    "expected_cell_pass", "unexpected_cells", "run_matrix", "run_scale", "check_revision",
]


def poison_memories(dev) -> None:
    """Fill every data SRAM with a pattern, so a read of something not yet written shows."""
    for mem in DATA_MEMORIES:
        width = dev.mem_width(mem.region)
        pattern = int("5A" * (width // 8), 16)
        dev.load_words(mem.region, 0, [pattern] * dev.mem_depth(mem.region))


async def run_cell(dev, cell: Cell | tuple[Cell, ...], seed: int, mit) -> dict:
    """Run the kernel(s) a record names as meeting its conditions; check against the golden.

    A tuple of cells passes only if every one does (conditions that differ per revision).
    """
    if isinstance(cell, tuple):
        results = [await run_cell(dev, c, seed, mit) for c in cell]
        bad = [r for r in results if not r["passed"]]
        return {"passed": not bad, "mismatch": bad[0]["mismatch"] if bad else None,
                "cycles": sum(r["cycles"] or 0 for r in results),
                "mitigations": sorted({m for r in results for m in r["mitigations"]})}
    await dev.wait_idle()
    poison_memories(dev)
    rng = np.random.default_rng(seed)
    sqnr = None
    if isinstance(cell, (GemmCell, GemmSumCell)):
        a = int8_operands(rng, (cell.m, cell.k))
        b = int8_operands(rng, (cell.k, cell.n))
        ref = golden.gemm_int8(a, b)
        if isinstance(cell, GemmCell):
            c, stats = await gemm(dev, a, b, mitigations=mit, k_chunk=cell.k_chunk)
            mismatch = first_mismatch(c, ref)
        else:
            c, total, stats = await gemm_sum(dev, a, b, mitigations=mit)
            ref_total = golden.wrap_int32(int(ref.astype(np.int64).sum()))
            mismatch = first_mismatch(c, ref)
            if mismatch is None and int(total) != int(ref_total):
                mismatch = {"index": ["total"], "got": int(total), "expected": int(ref_total), "count": 1}
    elif isinstance(cell, LowpCell):
        a = sample(cell.dist, rng, (cell.m, cell.k), role="a")
        b = sample(cell.dist, rng, (cell.k, cell.n), role="b")
        res = await gemm_lowp(dev, a, b, cell.recipe, mitigations=mit)
        stats, mismatch, sqnr = res.stats, lowp_mismatch(res), res.sqnr_db
    elif isinstance(cell, ReduceCell):
        lo, hi = (-(2**31), -1) if cell.negative else (-(2**31), 2**31)
        x = rng.integers(lo, hi, size=(cell.rows, cell.cols), dtype=np.int64).astype(np.int32)
        got, stats = await reduce_rows(dev, x, cell.op, mitigations=mit)
        mismatch = first_mismatch(got, golden.reduce_rows(x, cell.op))
    elif isinstance(cell, DmaCell):  # a raw DMA stream until the kernels move their data by DMA
        got, ref, stats = await dma_round_trip(dev, cell, rng, mit)
        mismatch = first_mismatch(got, ref)
    elif isinstance(cell, VecCell):
        from golden.vector import UNARY_OPS, vector_op
        from kernels.vector import elementwise

        x = (rng.standard_normal((cell.rows, cell.cols)) * 4).astype(np.float32)
        bshape = {"none": x.shape, "row": (cell.rows,), "col": (cell.cols,)}[cell.broadcast]
        y = None if cell.op in UNARY_OPS else (rng.standard_normal(bshape) * 4).astype(np.float32)
        got, stats = await elementwise(dev, cell.op, x, y, broadcast=cell.broadcast, mitigations=mit)
        yb = None if y is None else (y.reshape(-1, 1) if cell.broadcast == "row" else y).view(np.uint32)
        mismatch = first_mismatch(got.view(np.uint32), vector_op(cell.op, x.view(np.uint32), yb))
    elif isinstance(cell, TileCell):
        from kernels.tile.spec import get, run_spec

        from .tile import compare

        spec = get(cell.name)
        p = spec.resolve(dict(cell.params))
        ins = spec.inputs(p, seed, False)
        outs, stats = await run_spec(dev, spec, p, ins, mitigations=mit)
        mismatch, sqnr = compare(spec, p, ins, outs, dev.config.lanes, stats.plan)
    else:
        raise TypeError(f"unknown regression cell {cell!r}")
    return {"passed": mismatch is None, "mismatch": mismatch, "cycles": stats.cycles,
            "mitigations": list(stats.mitigations), "sqnr_db": sqnr}


async def errata_check_job(dev, emit) -> dict:
    """Run every reproducer on this chip; report what fired."""
    out = {}
    for e in ERRATA:
        try:
            r = await run_reproducer(dev, e.reproducer)
        except Exception as exc:  # a reproducer that crashes the chip is a finding, not a lost run
            r = {"fired": True, "detail": f"reproducer crashed: {type(exc).__name__}: {exc}"}
            await dev.soft_reset()
        out[e.id] = r
        emit({"type": "reproducer", "id": e.id, **r})
    return {"revision": dev.revision, "reproducers": out}


async def errata_matrix_job(dev, emit, ids: list[str] | None = None, seed: int = 1) -> dict:
    """For each erratum: its reproducer, then its kernel cell with the mitigation on and off."""
    cells = 0
    for e in ERRATA:
        if ids and e.id not in ids:
            continue
        rep = await run_reproducer(dev, e.reproducer)
        for policy in ("on", "off"):
            mit = workarounds.attach(dev, {e.id: policy}, warn=False)
            try:
                r = await run_cell(dev, e.cell, seed, mit)
            except Exception as exc:
                r = {"passed": False, "mismatch": f"{type(exc).__name__}: {exc}", "cycles": None, "mitigations": []}
            emit({"type": "cell", "id": e.id, "revision": dev.revision, "policy": policy,
                  "reproducer_fired": rep["fired"], **r})
            cells += 1
            if e.tile_cell is not None:  # the same mitigation on a tile-language kernel's compiled stream
                try:
                    r = await run_cell(dev, e.tile_cell, seed, mit)
                except Exception as exc:
                    r = {"passed": False, "mismatch": f"{type(exc).__name__}: {exc}", "cycles": None,
                         "mitigations": []}
                tc = e.tile_cell if isinstance(e.tile_cell, tuple) else (e.tile_cell,)
                emit({"type": "tile_cell", "id": e.id, "revision": dev.revision, "policy": policy,
                      "kernel": ", ".join(c.shape() for c in tc), **r})
    workarounds.attach(dev)
    return {"cells": cells}


async def errata_scale_job(dev, emit, ids: list[str], seed: int = 1) -> dict:
    """Each erratum's at-scale workload with its mitigation on and off: the cycle cost that matters."""
    for err_id in ids:
        e = BY_ID[err_id]
        for policy in ("on", "off"):
            mit = workarounds.attach(dev, {e.id: policy}, warn=False)
            try:
                r = await run_cell(dev, e.scale, seed, mit)
            except Exception as exc:
                r = {"passed": False, "mismatch": f"{type(exc).__name__}: {exc}", "cycles": None}
            emit({"type": "scale", "id": e.id, "revision": dev.revision, "policy": policy, "cycles": r["cycles"],
                  "passed": r["passed"], "sqnr_db": r.get("sqnr_db")})
    workarounds.attach(dev)
    return {"ids": ids}


# ---- host side --------------------------------------------------------------------------------

def expected_cell_pass(cell: dict) -> bool:
    """The rule of the matrix: only (affected revision, mitigation off) may fail."""
    return not (cell["revision"] in erratum(cell["id"]).affected and cell["policy"] == "off")


def _records(fn, kwargs: dict, rev: str, sim: str, work_dir=None):
    """Run a job on revision ``rev``: ``(result or None, records, error or None)``.

    A job that failed keeps the records it wrote and says why; a simulator that died is a
    harness error (exit 3), not a finding about the chip, and goes on up."""
    from cosim.build import Variant
    from cosim.jobs import JobFailed, SimulatorDied, run_job

    try:
        res = run_job(fn, kwargs, variant=Variant(revision=rev), sim=sim, work_dir=work_dir)
        return res, res.records, None
    except SimulatorDied:
        raise
    except JobFailed as exc:
        return None, exc.records, str(exc)


def check_revision(rev: str, sim: str, work_dir=None) -> tuple[dict, str | None]:
    """Every reproducer on ``rev``: ``({id: observation}, error or None)``; partial on a crash."""
    res, records, err = _records(errata_check_job, {}, rev, sim, work_dir)
    if res is not None:
        return res.value["reproducers"], None
    return {r["id"]: r for r in records if r.get("type") == "reproducer"}, err


def run_matrix(sim: str, seed: int, revisions=None) -> tuple[list[dict], list[str]]:
    """The regression matrix on every revision: ``(cells, problems)``; a cell is a dict record."""
    cells, problems = [], []
    for rev in revisions or ASSESSED_REVISIONS:
        _, recs, err = _records(errata_matrix_job, {"seed": seed}, rev, sim)
        if err:
            problems.append(f"{rev}: matrix job failed: {err}")
        cells += [r for r in recs if r.get("type") == "cell"]
    return cells, problems + unexpected_cells(cells)


def unexpected_cells(cells: list[dict]) -> list[str]:
    """A sentence per matrix cell that did not do what :func:`expected_cell_pass` says (shared
    with the distributed matrix, firstlight/sweep/errata.py)."""
    return [f"{c['id']} on {c['revision']} with mitigation {c['policy']}: {'passed' if c['passed'] else 'failed'} "
            f"unexpectedly ({describe_mismatch(c['mismatch']) if isinstance(c['mismatch'], dict) else c['mismatch']})"
            for c in cells if c["passed"] != expected_cell_pass(c)]


def run_scale(sim: str, seed: int) -> tuple[list[dict], list[str]]:
    """Each erratum's at-scale workload on every revision it affects: ``(records, problems)``."""
    out, problems = [], []
    for rev in ASSESSED_REVISIONS:
        ids = [e.id for e in ERRATA if rev in e.affected and e.scale]
        if not ids:
            continue
        _, recs, err = _records(errata_scale_job, {"ids": ids, "seed": seed}, rev, sim)
        if err:
            problems.append(f"{rev}: scale job failed: {err}")
        out += [r for r in recs if r.get("type") == "scale"]
    return out, problems


def costs_from(cells: list[dict], scale: list[dict]) -> dict:
    """The costs.json structure: per erratum and revision, cycles and pass with mitigation on/off."""
    costs: dict = {}
    for c in cells:
        entry = costs.setdefault(c["id"], {}).setdefault(
            c["revision"], {"affected": c["revision"] in erratum(c["id"]).affected})
        entry[c["policy"]] = c["cycles"]
        entry[f"passed_{c['policy']}"] = c["passed"]
    for r in scale:
        costs.setdefault(r["id"], {}).setdefault(r["revision"], {}).setdefault("scale", {})[r["policy"]] = r["cycles"]
    return costs
