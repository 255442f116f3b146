"""Fault campaigns: run the bring-up checklist on faulty chips and count what it catches.

One campaign build (a chip with a ``fault_sel`` port, ``rtl/faults.py``) serves every fault:
each run sets the descriptor before reset and walks the checklist until the first stage fails.
A fault is

* ``detected`` when a stage fails and names the fault's site (the memory, the register, the
  PE, the lane, the pin...) in its diagnosis, in one of the stages meant to catch that kind;
* ``misattributed`` when a stage fails but blames something else (or is the wrong stage);
* ``undetected`` when every stage passes: an escape, listed with its ``--inject`` command;
* ``error`` when the harness could not tell (the simulator died, a stage crashed);
* ``redundant`` when the fault cannot change anything the chip does (a reserved bit stuck at
  the 0 it always reads, ``rtl.faults.redundant``): not run, not counted in the coverage.

Runs go to a process pool, one simulator process per run, as many at once as ``workers``.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
import signal
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from firstlight.bringup.plan import CATCHERS, DRAM_TEST_BYTES, STAGE_NAMES
from rtl.config import ChipConfig
from rtl.faults import Fault, FaultKind, parse_fault, redundant, universe

__all__ = ["sample_faults", "expected_site", "classify", "run_campaign", "CampaignResult", "campaign_universe"]


def expected_site(f: Fault, cfg: ChipConfig) -> str | tuple[str, ...]:
    """The words a correct diagnosis of ``f`` contains (a tuple: each of them)."""
    k = f.kind
    if k.name.startswith("SRAM"):
        return f"SRAM {f.memory}"
    if k is FaultKind.CSR_STUCK:
        return f.register
    if k in (FaultKind.PE_PRODUCT, FaultKind.PE_ACC):
        return f"PE({f.target // cfg.cols}, {f.target % cfg.cols})"
    if k is FaultKind.REDUCE_LANE:
        return f"lane {f.target}"
    if k is FaultKind.CMD_FIFO:
        return f"command bit {f.bit}"
    if k is FaultKind.BUS_HANG:
        return "csr_ready"
    if k is FaultKind.PIN_STUCK:
        return ("idle", "irq")[f.target] + " pin"
    if k is FaultKind.DRAM_STUCK:
        a = f.dram_byte
        return f"DRAM byte {a} (0x{a:x}) bit {f.bit} reads {f.value}"
    if k is FaultKind.DMA_ADDR_ALIAS:
        from firstlight.bringup.diagnose import TIE_WHERE

        # through the DMA a bit tied on both sides reads and writes alike at 0 and at 1: the
        # diagnosis names the bit and the side, and the level only where it can be told
        if f.side == "both":
            return f"AXI address bit {f.addr} stuck at", TIE_WHERE["both"]
        return f"AXI address bit {f.addr} stuck at {f.value} {TIE_WHERE[f.side]}"
    if k is FaultKind.DMA_DROP_BEAT:
        return f"drops beat {f.bit} of burst {f.addr} of an entry"
    raise ValueError(k)


def campaign_universe(cfg: ChipConfig):
    """The universe a campaign samples: the chip's, and of the board's DRAM the bits of the
    region the checklist tests (the dram stage's default region, plan.DRAM_TEST_BYTES: a DRAM
    bit outside it is a board memory test's business, docs/faults.md)."""
    return universe(cfg, dram_region=DRAM_TEST_BYTES)


def sample_faults(cfg: ChipConfig, n: int | None, seed: int) -> list[str]:
    """``n`` faults drawn without replacement, spread evenly over the kinds (a kind smaller
    than its share is taken whole and its unused share goes to the others); None: everything."""
    spaces = list(campaign_universe(cfg))
    if n is None:
        return [s for space in spaces for s in space]
    rng = np.random.default_rng(seed)
    shares = {sp.name: 0 for sp in spaces}
    left, open_ = n, [sp for sp in spaces]
    while left > 0 and open_:
        each = max(1, left // len(open_))
        for sp in list(open_):
            take = min(each, sp.size - shares[sp.name], left)
            shares[sp.name] += take
            left -= take
            if shares[sp.name] >= sp.size:
                open_.remove(sp)
            if left == 0:
                break
    out = []
    for sp in spaces:
        k = shares[sp.name]
        if not k:
            continue
        idx = rng.choice(sp.size, size=k, replace=False) if sp.size > k else np.arange(sp.size)
        out += [sp.nth(int(i)) for i in sorted(idx)]
    return out


def classify(fault: Fault, cfg: ChipConfig, stages: list[dict], job_error: str | None) -> dict:
    """The verdict on one faulty run from its stage records."""
    first = next((s for s in stages if s["status"] in ("failed", "error")), None)
    site = expected_site(fault, cfg)
    if job_error is not None or (first is not None and first["status"] == "error"):
        return {"verdict": "error", "stage": first["name"] if first else None,
                "details": job_error or first["details"]}
    if first is None:
        return {"verdict": "undetected", "stage": None, "details": ""}
    words = (site,) if isinstance(site, str) else site
    ok = first["name"] in CATCHERS[fault.kind] and all(w.lower() in first["details"].lower() for w in words)
    return {"verdict": "detected" if ok else "misattributed", "stage": first["name"], "details": first["details"]}


def _worker_init() -> None:
    """A pool worker: on SIGTERM (the campaign was interrupted) stop its simulator, then exit."""
    from cosim.build import kill_children_now

    def stop(signum, frame):
        kill_children_now()  # no locks or waits in a handler: another thread may hold them
        os._exit(128 + signum)

    signal.signal(signal.SIGTERM, stop)  # (SIGINT: ignored from birth, firstlight/workers.py)


def _run_one_args(args) -> dict:
    return _run_one(*args)


def _checklist(build, seed: int, watchdog: int, fault_code: int) -> dict:
    """The bring-up job's arguments for one campaign run: every stage, the fault on the port,
    and (for a faulty chip) a stop at the first failing stage; the good run walks them all."""
    return {"selected": list(STAGE_NAMES), "seed": seed, "faults": [], "built_revision": build.variant.revision,
            "watchdog_cycles": watchdog, "fault_code": fault_code, "stop_at_first_failure": bool(fault_code)}


def _run_one(spec: str, cfg: ChipConfig, build, seed: int, watchdog: int) -> dict:
    from cosim.jobs import JobFailed, run_job
    from firstlight.bringup.stages import bringup_job

    fault = parse_fault(spec, cfg)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="firstlight-campaign-") as tmp:
        err = None
        try:
            res = run_job(bringup_job, _checklist(build, seed, watchdog, fault.encode()), variant=build.variant,
                          sim=build.sim, work_dir=Path(tmp), discover=False, build=build)
            records = res.records
        except JobFailed as e:
            records, err = e.records, f"{e}"
        except Exception as e:  # noqa: BLE001 - a harness error for this one fault
            records, err = [], f"{type(e).__name__}: {e}"
    stages = [r for r in records if r.get("type") == "stage"]
    out = {"fault": fault.spec, "kind": fault.family, **classify(fault, cfg, stages, err),
           "seconds": round(time.perf_counter() - t0, 2)}
    return out


VERDICTS_COUNTED = ("faults", "detected", "misattributed", "undetected", "error", "redundant")


@dataclass
class CampaignResult:
    config: dict
    revision: str
    sim: str
    seed: int
    build_s: float
    wall_s: float
    results: list[dict] = field(default_factory=list)
    universe: dict = field(default_factory=dict)
    planned: int = 0  # the faults the campaign was given
    started: float = 0.0  # time.perf_counter() at its start (the wall time of an interrupted one)
    interrupted: bool = False  # stopped by a signal: the results are those finished before it

    def by_kind(self) -> dict[str, dict[str, int]]:
        out: dict[str, dict[str, int]] = {}
        for r in self.results:
            row = out.setdefault(r["kind"], dict.fromkeys(VERDICTS_COUNTED, 0))
            row["faults"] += 1
            row[r["verdict"]] += 1
        return out

    def by_stage(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for r in self.results:
            if r["stage"]:
                out[r["stage"]] = out.get(r["stage"], 0) + 1
        return out

    def totals(self) -> dict[str, int]:
        t = dict.fromkeys(VERDICTS_COUNTED, 0)
        for row in self.by_kind().values():
            for k in t:
                t[k] += row[k]
        return t

    def coverage(self) -> float:
        """Detected faults as a percentage of the faults that can be seen at all."""
        t = self.totals()
        seen = t["faults"] - t["redundant"]
        return 100.0 * t["detected"] / seen if seen else 100.0

    def to_dict(self) -> dict:
        t = self.totals()
        # an interrupted campaign with no visible fault finished has no coverage (not 100%)
        cov = None if self.interrupted and t["faults"] == t["redundant"] else round(self.coverage(), 3)
        return {"config": self.config, "revision": self.revision, "sim": self.sim, "seed": self.seed,
                "interrupted": self.interrupted, "faults_planned": self.planned, "faults_done": len(self.results),
                "build_s": self.build_s, "wall_s": self.wall_s, "universe": self.universe,
                "totals": t, "coverage_pct": cov, "by_kind": self.by_kind(), "by_stage": self.by_stage(),
                "results": self.results}


def run_campaign(cfg: ChipConfig, revision: str, sim: str, specs: list[str], *, seed: int = 1,
                 workers: int | None = None, watchdog: int = 1_000_000, on_result=None, on_build=None,
                 on_start=None) -> CampaignResult:
    """Build the campaign chip once, check a good run passes, then run every fault.

    ``on_start(result)`` receives the result object before the first fault runs: it fills in
    as faults finish, so a caller interrupted midway still has every verdict so far."""
    from cosim.build import Variant, build_simulator

    faults = [parse_fault(s, cfg) for s in specs]  # bad specs fail here, before any build
    workers = workers or os.cpu_count() or 1
    t0 = time.perf_counter()
    build = build_simulator(Variant(config=cfg, revision=revision, fault_port=True), sim=sim)
    if on_build:
        on_build(build)
    result = CampaignResult(cfg.as_dict(), revision, sim, seed, round(time.perf_counter() - t0, 1), 0.0,
                            universe={sp.name: sp.size for sp in campaign_universe(cfg)}, planned=len(faults),
                            started=t0)
    if on_start:
        on_start(result)
    good = _run_good(cfg, build, seed, watchdog)
    if good:
        raise RuntimeError(f"the campaign chip fails the checklist with no fault injected: {good}")
    rev_code = _revision_code(revision)
    to_run = []
    for f in faults:
        why = redundant(f, cfg, rev_code)
        if why:
            r = {"fault": f.spec, "kind": f.family, "verdict": "redundant", "stage": None, "details": why,
                 "seconds": 0.0}
            result.results.append(r)
            if on_result:
                on_result(r)
        else:
            to_run.append(f)
    from firstlight.workers import spawn_pool

    pool = spawn_pool(workers, initializer=_worker_init)
    try:
        jobs = [(f.spec, cfg, build, seed, watchdog) for f in to_run]
        for r in pool.imap_unordered(_run_one_args, jobs):
            result.results.append(r)
            if on_result:
                on_result(r)
        pool.close()
    except BaseException:
        pool.terminate()  # SIGTERM to every worker: each stops its simulator (_worker_init)
        raise
    finally:
        pool.join()
    order = {f.spec: i for i, f in enumerate(faults)}
    result.results.sort(key=lambda r: order[r["fault"]])
    result.wall_s = round(time.perf_counter() - t0, 1)
    return result


def _revision_code(name: str) -> int:
    from rtl.revisions import revision

    return revision(name).code


def _run_good(cfg, build, seed, watchdog) -> str | None:
    """None if the campaign build with fault_sel = 0 passes every stage, else what failed."""
    from cosim.jobs import run_job
    from firstlight.bringup.stages import bringup_job

    with tempfile.TemporaryDirectory(prefix="firstlight-campaign-") as tmp:
        res = run_job(bringup_job, _checklist(build, seed, watchdog, 0), variant=build.variant, sim=build.sim,
                      work_dir=Path(tmp), discover=False, build=build)
    bad = [f"{r['name']}: {r['details']}" for r in res.records if r.get("type") == "stage" and r["status"] != "passed"]
    return "; ".join(bad) or None


def write_report(result: CampaignResult, out_dir: Path, command: str) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    js = out_dir / "campaign.json"
    from firstlight.provenance import with_provenance

    js.write_text(json.dumps(with_provenance({**result.to_dict(), "command": command}, result.sim, command), indent=2))
    md = out_dir / "campaign.md"
    md.write_text(markdown(result, command))
    return [js, md]


def markdown(result: CampaignResult, command: str) -> str:
    t = result.totals()
    lines = [f"# Fault campaign: revision {result.revision} on {result.sim}", "",
             f"- command: `{command}`",
             f"- chip: {result.config}",
             f"- faults: {t['faults']} (seed {result.seed}), of which {t['redundant']} redundant (cannot change "
             f"anything the chip does; not run); detected {t['detected']}: **{result.coverage():.1f}%** of the "
             f"{t['faults'] - t['redundant']} that can be seen; misattributed {t['misattributed']}, "
             f"undetected {t['undetected']}, harness errors {t['error']}",
             f"- build {result.build_s:.0f} s, campaign wall time {result.wall_s:.0f} s", "",
             *([f"**Interrupted** after {len(result.results)} of {result.planned} faults: the figures below are "
                f"those of the faults that finished.", ""] if result.interrupted else []),
             "| kind | universe | sampled | redundant | detected | misattributed | undetected | error |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for kind, row in result.by_kind().items():
        lines.append(f"| {kind} | {result.universe.get(kind, 0):,} | {row['faults']} | {row['redundant']} | "
                     f"{row['detected']} | {row['misattributed']} | {row['undetected']} | {row['error']} |")
    lines += ["", "| first failing stage | faults |", "|---|---:|"]
    for stage, n in sorted(result.by_stage().items(), key=lambda kv: -kv[1]):
        lines.append(f"| {stage} | {n} |")
    bad = [r for r in result.results if r["verdict"] not in ("detected", "redundant")]
    red = [r for r in result.results if r["verdict"] == "redundant"]
    if red:
        lines += ["", "## Redundant (not run)", ""] + [f"- `{r['fault']}`: {r['details']}" for r in red]
    if bad:
        lines += ["", "## Not detected as they should be", ""]
        for r in bad:
            lines.append(f"- **{r['verdict']}** `{r['fault']}`" + (f" (first failing stage {r['stage']}: "
                         f"{r['details'][:300]})" if r["stage"] else ""))
    return "\n".join(lines) + "\n"
