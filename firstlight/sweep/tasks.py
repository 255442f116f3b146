"""What a sweep's Dask workers run: a design point's build, its area proxy, one workload run.

Each task returns a plain dict and never raises for something that happened to the design or
the harness: a build that failed, a simulator that died and a job that raised come back as
results (``status`` ``"error"`` for the harness, ``"fail"`` for the chip), so that one bad point
never stops a sweep. Only a worker process that dies is Dask's business: the scheduler gives the
task to another worker.

Every task first checks that the worker runs the same firstlight code as the client
(:func:`code_digest`): a worker started from another checkout would store its results under the
client's keys.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import time
import traceback
from dataclasses import replace
from pathlib import Path

from cosim.build import HarnessError, Variant, cache_root, verilog_key

__all__ = ["ROOT", "code_digest", "area_key", "build_task", "area_task", "run_task", "job_for", "WrongCode"]

ROOT = Path(__file__).resolve().parents[2]
# The code a run's result depends on besides rtl/ (which the Verilog key covers): the harness,
# the kernels, the goldens, the errata mitigations, the jobs.
_SOFTWARE = ("cosim", "kernels", "golden", "workarounds", "firstlight/jobs", "firstlight/sweep/jobs.py")
_SUFFIXES = {".py", ".v", ".sv", ".cpp", ".h"}
_NOT_RUNS = {"cosim/area.py"}  # the area proxy: its own key (area_key), no run depends on it


class WrongCode(RuntimeError):
    """A worker imports other firstlight code than the client that submitted the task."""


def code_digest(root: Path = ROOT) -> str:
    """A hash of the sources a run depends on beyond rtl/ (names and contents)."""
    h = hashlib.sha256()
    for part in _SOFTWARE:
        p = root / part
        files = [p] if p.is_file() else sorted(f for f in p.rglob("*") if f.is_file() and f.suffix in _SUFFIXES
                                                and "__pycache__" not in f.parts)
        for f in files:
            if str(f.relative_to(root)) in _NOT_RUNS:
                continue
            h.update(str(f.relative_to(root)).encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()[:20]


def _where() -> dict:
    return {"host": socket.gethostname(), "pid": os.getpid()}


def _check_code(expect: str | None) -> None:
    if expect is None:
        return
    mine = code_digest()
    if mine != expect:
        raise WrongCode(f"worker {socket.gethostname()} pid {os.getpid()} imports firstlight from {ROOT}, whose "
                        f"sources hash to {mine}, not {expect} as the client's do: start the workers from the same "
                        "checkout (PYTHONPATH) as the client")


# ---- area ---------------------------------------------------------------------------------------

def area_key(variant: Variant) -> str:
    """The area cache key: the Verilog key of the variant with the DRAM's latency and bandwidth
    set to the defaults. The chip's logic does not depend on them (they are constants it
    publishes in DRAM0/DRAM1; docs/sweeps.md shows the proxy equal across them), so a sweep over
    the board maps each chip once. Its bus width and size stay in the key: the DMA is built for them.
    The text of cosim/area.py is in the key too: a change to the proxy maps every chip again."""
    from rtl.board import BoardConfig

    import cosim.area

    b = variant.resolved_board
    chip_only = replace(variant, board=BoardConfig(dram_bytes=b.dram_bytes, bus_bytes=b.bus_bytes))
    method = hashlib.sha256(Path(cosim.area.__file__).read_bytes()).hexdigest()[:12]  # a new proxy, new entries
    return f"{verilog_key(chip_only)}-{method}"


def area_task(variant: Variant, expect: str | None = None) -> dict:
    """The area proxy of the variant's chip (cosim/area.py), cached under ``<cache>/area/<area key>.json``
    with a file lock; ``seconds`` is the time this call took, ``map_s`` the mapping's own."""
    from filelock import FileLock

    t0 = time.perf_counter()
    try:
        _check_code(expect)
        key = area_key(variant)
        path = cache_root() / "area" / f"{key}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        with FileLock(str(path) + ".lock"):
            try:
                report = json.loads(path.read_text())
                hit = True
            except (OSError, ValueError):
                from cosim.area import area_of
                from cosim.build import elaborate

                report = area_of(elaborate(variant)).as_dict()
                tmp = path.with_suffix(".tmp")
                tmp.write_text(json.dumps(report))
                tmp.replace(path)
                hit = False
        return {"ok": True, "key": key, "cache_hit": hit, "report": report, "map_s": report.get("seconds"),
                "seconds": time.perf_counter() - t0, **_where()}
    except Exception as e:  # noqa: BLE001 - an area that cannot be had is a result, not a crash
        return {"ok": False, "error": f"{type(e).__name__}: {e}", "seconds": time.perf_counter() - t0, **_where()}


# ---- build --------------------------------------------------------------------------------------

def build_task(variant: Variant, sim: str, expect: str | None = None) -> dict:
    """Build (or find in the cache) the simulator of a design point."""
    from cosim.build import build_simulator

    t0 = time.perf_counter()
    try:
        _check_code(expect)
        b = build_simulator(variant, sim=sim)
    except (HarnessError, WrongCode) as e:
        return {"ok": False, "error": str(e), "seconds": time.perf_counter() - t0, **_where()}
    except Exception as e:  # noqa: BLE001 - a bug in the build path is a harness error too
        return {"ok": False, "error": f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=4)}",
                "seconds": time.perf_counter() - t0, **_where()}
    return {"ok": True, "cache_hit": b.cache_hit, "seconds": time.perf_counter() - t0, "first_build_s": b.first_build_s,
            "build_dir": str(b.build_dir), **_where()}


# ---- runs ---------------------------------------------------------------------------------------

def job_for(kind: str, p: dict, seed: int):
    """The job function and its kwargs for a workload (the same jobs as ``firstlight run``)."""
    from . import jobs

    if kind == "gemm_lowp":
        return jobs.gemm_lowp_job, {"m": p["m"], "n": p["n"], "k": p["k"], "recipe": p["recipe"], "seed": seed}
    from kernels.tile.spec import get

    try:
        spec = get(kind)  # a tile-language kernel, by its name or an alias
    except KeyError:
        spec = None
    if spec is not None:
        from firstlight.jobs.tile import tile_job

        names = {q.name for q in spec.params}  # not the design point's revision
        return tile_job, {"kernel": spec.name, "params": {n: v for n, v in p.items() if n in names}, "seed": seed}
    if kind == "bringup":
        return jobs.bringup_check_job, {"seed": seed, "revision": p["revision"]}
    raise ValueError(f"no job for workload kind {kind!r}")


_STAT_KEYS = ("cycles", "ideal_cycles", "utilization", "dram_bytes", "compulsory_bytes", "intensity",
              "attainable_cycles", "bound", "roof_utilization", "compute_cycles", "vector_cycles", "memory_cycles",
              "engine_busy_cycles", "dma_busy_cycles", "wall_s", "sim_cycles_per_s")


def run_task(build: dict, variant: Variant, kind: str, params: dict, seed: int, sim: str,
             expect: str | None = None) -> dict:
    """One workload on one design point, checked against its golden.

    ``status``: ``"pass"``, ``"fail"`` (the result differs from the golden, or the job raised:
    a watchdog, a kernel's refusal) or ``"error"`` (the build failed, the simulator died: the
    harness, not the chip)."""
    from cosim.jobs import JobFailed, SimulatorDied, run_job

    t0 = time.perf_counter()
    out = {"status": "error", "passed": None, **_where()}
    if not build.get("ok"):
        return {**out, "error": f"the design point did not build: {build.get('error')}", "seconds": 0.0}
    try:
        _check_code(expect)
        fn, kwargs = job_for(kind, {**params, "revision": variant.revision}, seed)
        res = run_job(fn, kwargs, variant=variant, sim=sim)
    except SimulatorDied as e:
        return {**out, "error": str(e), "seconds": time.perf_counter() - t0}
    except JobFailed as e:  # the job raised inside the simulator: the chip's verdict (as in `firstlight run`)
        return {**out, "status": "fail", "passed": False, "error": str(e), "seconds": time.perf_counter() - t0}
    except (HarnessError, WrongCode) as e:
        return {**out, "error": str(e), "seconds": time.perf_counter() - t0}
    except Exception as e:  # noqa: BLE001 - a bug in the harness is recorded, and the sweep goes on
        return {**out, "error": f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=6)}",
                "seconds": time.perf_counter() - t0}
    v = res.value
    st = v.get("stats", {})
    if v.get("harness_error"):
        return {**out, "error": v["harness_error"], "seconds": time.perf_counter() - t0, "stats": st}
    return {**out, "status": "pass" if v["passed"] else "fail", "passed": bool(v["passed"]),
            "mismatch": v.get("mismatch"), "sqnr_db": v.get("sqnr_db"), "seconds": time.perf_counter() - t0,
            "sim_s": res.run_s, "stats": {k: st.get(k) for k in _STAT_KEYS},
            "mitigations": st.get("mitigations", [])}
