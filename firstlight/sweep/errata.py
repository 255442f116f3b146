"""The errata regression matrix on a Dask cluster (``firstlight errata measure --cluster``).

The same jobs as :func:`firstlight.jobs.errata.run_matrix` and :func:`~firstlight.jobs.errata.run_scale`,
cut finer: one task per (revision, erratum) for the matrix and one per (revision, erratum) for
the runs at scale, each on the revision's default chip (built once per revision, a task the
others depend on). The cells come back to this process, which checks them against the matrix's
rule and stores each one in the sweep database as a run (workload ``errata:<id>:<on|off>`` or
``errata-scale:<id>:<on|off>``; status ``pass`` when the cell did what the rule says).
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Callable

from cosim.build import Variant, verilog_key

from . import db as sweepdb
from .engine import _sha, git_commit, tool_versions
from .spec import design_name
from .tasks import _where, area_key, build_task, code_digest

__all__ = ["errata_task", "measure_on_cluster"]


def errata_task(build: dict, variant: Variant, kind: str, ids: list[str], sim: str, seed: int,
                expect: str | None = None) -> dict:
    """The matrix (``kind`` "matrix") or the runs at scale ("scale") of ``ids`` on ``variant``:
    ``{"records": [cell or scale records], "error": None or why the job did not finish,
    "harness": True when that was the harness}``."""
    from cosim.jobs import JobFailed, SimulatorDied, run_job
    from firstlight.jobs.errata import errata_matrix_job, errata_scale_job

    from .tasks import _check_code

    t0 = time.perf_counter()
    out = {"records": [], "error": None, "harness": False, **_where()}
    if not build.get("ok"):
        return {**out, "error": f"the revision's chip did not build: {build.get('error')}", "harness": True}
    want = "cell" if kind == "matrix" else "scale"
    try:
        _check_code(expect)
        res = run_job(errata_matrix_job if kind == "matrix" else errata_scale_job, {"ids": ids, "seed": seed},
                      variant=variant, sim=sim)
        records = res.records
    except SimulatorDied as e:
        return {**out, "records": [r for r in e.records if r.get("type") == want], "error": str(e), "harness": True}
    except JobFailed as e:
        return {**out, "records": [r for r in e.records if r.get("type") == want], "error": str(e)}
    except Exception as e:  # noqa: BLE001 - HarnessError, WrongCode, a bug: the harness's
        return {**out, "error": f"{type(e).__name__}: {e}", "harness": True}
    return {**out, "records": [r for r in records if r.get("type") == want], "seconds": time.perf_counter() - t0}


def measure_on_cluster(client, sim: str, seed: int, con=None, on_event: Callable[[str, dict], None] | None = None,
                       ids: list[str] | None = None, revisions: list[str] | None = None) -> tuple[list, list, list, list]:
    """``(cells, matrix problems, scale records, scale problems)`` as run_matrix and run_scale
    return them, computed on the cluster behind ``client``; each cell stored in ``con`` if given.
    ``ids`` and ``revisions`` cut the matrix down (default: every erratum, every assessed revision)."""
    from distributed import as_completed

    from firstlight.jobs.errata import expected_cell_pass, unexpected_cells
    from workarounds.registry import ASSESSED_REVISIONS, ERRATA

    emit = on_event or (lambda kind, info: None)
    digest, nonce = code_digest(), uuid.uuid4().hex[:6]
    versions, commit = tool_versions(sim), git_commit()
    variants = {rev: Variant(revision=rev) for rev in revisions or ASSESSED_REVISIONS}
    builds = {rev: client.submit(build_task, v, sim, digest, key=f"build-errata-{rev}-{nonce}", pure=False, priority=2)
              for rev, v in variants.items()}
    tasks, futures = {}, list(builds.values())
    for rev, v in variants.items():
        for e in ERRATA:
            if ids and e.id not in ids:
                continue
            f = client.submit(errata_task, builds[rev], v, "matrix", [e.id], sim, seed, digest,
                              key=f"errata-{rev}-{e.id}-{nonce}", pure=False, priority=1)
            tasks[f.key] = ("matrix", rev, e.id)
            futures.append(f)
            if rev in e.affected and e.scale:
                f = client.submit(errata_task, builds[rev], v, "scale", [e.id], sim, seed, digest,
                                  key=f"errata-scale-{rev}-{e.id}-{nonce}", pure=False, priority=0)
                tasks[f.key] = ("scale", rev, e.id)
                futures.append(f)
    emit("start", {"builds": len(builds), "areas": 0, "runs": len(tasks)})
    cells, scale, problems, scale_problems = [], [], [], []
    for fut in as_completed(futures):
        if fut.key not in tasks:
            emit("build", fut.result())
            continue
        kind, rev, err_id = tasks[fut.key]
        try:
            res = fut.result()
        except Exception as e:  # noqa: BLE001 - every worker that tried it died
            res = {"records": [], "error": f"{type(e).__name__}: {e}", "harness": True}
        if res["error"]:
            (problems if kind == "matrix" else scale_problems).append(f"{rev}: {kind} job for {err_id} failed: "
                                                                      f"{res['error']}")
        recs = res["records"]
        (cells if kind == "matrix" else scale).extend(recs)
        for r in recs:
            expected = expected_cell_pass(r)
            # the matrix holds a cell to the rule both ways (as run_matrix does); at scale the
            # (affected, off) run may pass or fail, the others must pass
            status = "pass" if bool(r["passed"]) == expected or (kind == "scale" and not expected) else "fail"
            if con is not None:
                _store(con, variants[rev], sim, seed, kind, r, status, expected, versions, commit, digest, res)
            emit("run", {"design": rev, "workload": f"{kind} {r['id']} {r['policy']}", "status": status,
                         "error": None if status == "pass" else f"{'passed' if r['passed'] else 'failed'}, expected "
                                                                f"{'pass' if expected else 'fail'}"})
        if not recs:
            emit("run", {"design": rev, "workload": f"{kind} {err_id}", "status": "error", "error": res["error"]})
    return cells, problems + unexpected_cells(cells), scale, scale_problems


def _store(con, variant, sim, seed, kind, r, status, expected, versions, commit, digest, res) -> None:
    workload = f"{'errata' if kind == 'matrix' else 'errata-scale'}:{r['id']}:{r['policy']}"
    vkey = verilog_key(variant)
    sweepdb.insert_run(con, {
        "key": _sha(vkey, sim, versions["sim_version"], versions["cocotb"], workload, seed, digest),
        "sweep": "errata", "design": design_name(variant), "workload": workload, "status": status,
        "passed": int(status == "pass"), "cycles": r.get("cycles"), "commit": commit, "sqnr_db": r.get("sqnr_db"),
        "mismatch": json.dumps(r.get("mismatch")) if r.get("mismatch") is not None else None,
        "sim": sim, "sim_version": versions["sim_version"],
        "tool_versions": json.dumps({k: x for k, x in versions.items() if k not in ("sim", "sim_version")}),
        "seed": seed, "design_json": json.dumps(variant.describe(), sort_keys=True),
        "workload_json": json.dumps({"kind": kind, "id": r["id"], "policy": r["policy"], "expected_pass": expected,
                                     "observed_pass": bool(r["passed"])}, sort_keys=True),
        "verilog_key": vkey, "area_key": area_key(variant), "code_digest": digest,
        "worker": f"{res.get('host')}:{res.get('pid')}"})
