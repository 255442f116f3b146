"""Host side of ``firstlight bringup``: build, launch the stages on the simulator, report.

Stage 1 (elaborate + build) runs here; the rest run inside one simulator process as a job
that emits a record per stage. While it runs, each record reaches ``run_job``'s ``on_record``
callback as it is written and updates the live table. If the simulator dies, the stages already reported are kept; the
one in progress is a failure carrying the log tail, the rest are skipped.
"""

from __future__ import annotations

import time
from pathlib import Path

from rich.console import Console
from rich.live import Live
from rich.table import Table

from .plan import STAGES, closure
from .report import _key_figure, write_reports

__all__ = ["run_bringup"]

_STYLE = {"passed": "green", "failed": "bold red", "blocked": "yellow", "skipped": "dim", "running": "cyan",
          "pending": "dim"}


def _table(rows: dict, title: str) -> Table:
    t = Table(title=title)
    for col in ("stage", "result", "time s", "key figure", "reason / details"):
        t.add_column(col, overflow="fold")
    for st in STAGES:
        r = rows.get(st.name, {"status": "pending", "duration_s": 0.0, "details": "", "figures": {}})
        status = r["status"]
        t.add_row(st.name, f"[{_STYLE[status]}]{status}[/]", f"{r.get('duration_s', 0.0):.2f}", _key_figure(r),
                  r.get("details", ""))
    return t


def run_bringup(*, variant, sim: str, seed: int, only: list[str] | None, report_dir: Path | None,
                console: Console, work_dir: Path | None = None, watchdog_cycles: int = 1_000_000) -> dict:
    from cosim.build import build_simulator
    from cosim.jobs import JobFailed, run_job

    selected = closure(only) if only else {s.name for s in STAGES}
    rows: dict[str, dict] = {}
    title = f"firstlight bringup: revision {variant.revision}, {sim}, seed {seed}" + (
        f", injected {', '.join(variant.faults)}" if variant.faults else "")

    # ---- stage 1: build -----------------------------------------------------------------
    t0 = time.perf_counter()
    build = None
    try:
        build = build_simulator(variant, sim=sim)
        rows["build"] = {"name": "build", "status": "passed", "depends_on": [], "blocked_by": None,
                         "duration_s": round(time.perf_counter() - t0, 3),
                         "details": f"{'cache hit' if build.cache_hit else 'compiled'} in {build.build_s:.1f} s "
                                    f"(Verilog {'cached' if build.verilog_cache_hit else f'elaborated in {build.elaborate_s:.1f} s'})",
                         "figures": {"cache_hit": build.cache_hit, "build_dir": str(build.build_dir)}}
    except Exception as e:
        rows["build"] = {"name": "build", "status": "failed", "depends_on": [], "blocked_by": None,
                         "duration_s": round(time.perf_counter() - t0, 3), "details": f"{type(e).__name__}: {e}",
                         "figures": {}}

    # ---- stages 2..10 in the simulator --------------------------------------------------
    sim_error = None
    if build is not None:
        from .stages import bringup_job

        running = None

        with Live(_table(rows, title), console=console, refresh_per_second=4, transient=not console.is_terminal) as live:
            def on_record(rec: dict) -> None:
                nonlocal running
                if rec.get("type") == "stage_start":
                    running = rec["name"]
                    rows[running] = {"status": "running", "duration_s": 0.0, "details": "", "figures": {}}
                elif rec.get("type") == "stage":
                    rows[rec["name"]] = rec
                    running = None if running == rec["name"] else running
                live.update(_table(rows, title))

            try:
                run_job(bringup_job,
                        {"selected": sorted(selected), "seed": seed, "faults": list(variant.faults),
                         "built_revision": variant.revision, "watchdog_cycles": watchdog_cycles},
                        variant=variant, sim=sim, work_dir=work_dir, discover=False, build=build, on_record=on_record)
            except JobFailed as e:
                sim_error = e
            except Exception as e:  # noqa: BLE001 - reported as the stage in progress
                sim_error = e
        if running and rows.get(running, {}).get("status") == "running":
            rows[running] = {"name": running, "status": "failed", "duration_s": 0.0,
                             "details": f"the simulator ended during this stage: {sim_error}", "figures": {}}
    report = assemble(rows, selected, sim_error, variant, sim, seed)
    stages = report["stages"]
    console.print(_table({s["name"]: s for s in stages}, title))
    if report_dir:
        for p in write_reports(report, Path(report_dir)):
            console.print(f"wrote {p}")
    return report


def assemble(rows: dict, selected: set[str], sim_error, variant, sim: str, seed: int) -> dict:
    """The report from whatever stage records arrived (a dead simulator leaves gaps)."""
    stages = []
    for st in STAGES:
        r = rows.get(st.name)
        if r is None or r.get("status") in ("running", "pending"):
            blockers = [d for d in st.depends_on if rows.get(d, {}).get("status") in ("failed", "blocked")]
            if blockers:
                r = {"status": "blocked", "blocked_by": blockers[0], "details": f"blocked by {blockers[0]}"}
            elif st.name not in selected:
                r = {"status": "skipped", "details": "not selected (--only)"}
            else:
                r = {"status": "skipped", "details": f"not run: the simulator ended early ({sim_error})"}
        stages.append({
            "name": st.name,
            "status": r["status"],
            "depends_on": list(st.depends_on),
            "blocked_by": r.get("blocked_by"),
            "duration_s": float(r.get("duration_s", 0.0)),
            "details": r.get("details", ""),
            "figures": r.get("figures", {}),
        })
        rows = {**rows, st.name: stages[-1]}
    return {
        "revision": variant.revision,
        "sim": sim,
        "seed": seed,
        "injected": list(variant.faults),
        "config": variant.config.as_dict(),
        "passed": all(s["status"] == "passed" for s in stages if s["name"] in selected),
        "stages": stages,
    }
