"""Host side of ``firstlight bringup``: build, launch the stages on the simulator, report.

Stage 1 (elaborate + build) runs here; the rest run inside one simulator process as a job
that emits a record per stage. While it runs, each record reaches ``run_job``'s ``on_record``
callback as it is written and updates the live table (on a terminal only; it is replaced by
the final table when the run ends, so the table is shown once).

Nothing learned is lost:

* the chip is wrong -> the stage is ``failed``;
* the harness could not tell (a build that failed, a simulator that died, a stage that hit a
  bug of the harness) -> ``error``, naming the log and the signal; the stages that depend on
  it are ``blocked``, the others that had not run ``skipped``;
* SIGINT or SIGTERM (:class:`firstlight.errors.Interrupted`, or a KeyboardInterrupt) -> the
  simulator is stopped (its log kept), the stage in progress is ``interrupted``;

and in every case the reports are written with the stages that finished.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from firstlight.errors import EXIT_FAIL, EXIT_HARNESS_ERROR, EXIT_OK, Interrupted, shielded
from firstlight.provenance import provenance

from .plan import STAGES, closure
from .report import _key_figure, has_more, long_details, summary_line, write_reports

__all__ = ["run_bringup", "assemble", "bringup_table"]

STYLE = {"passed": "green", "failed": "bold red", "error": "bold magenta", "interrupted": "bold yellow",
         "blocked": "yellow", "skipped": "dim", "running": "cyan", "pending": "dim"}
FINISHED = ("passed", "failed", "error", "interrupted", "blocked", "skipped")


# Below this width the details column gets under 25 characters: words break mid-identifier and an
# 80-column table ran to 150 lines. A narrower console gets one column of text per stage instead.
WIDE_TABLE = 120


def bringup_table(rows: dict, title: str, width: int | None = None) -> Table:
    """The stage table; every text in it is a :class:`rich.text.Text`, never parsed as markup.
    Narrower than :data:`WIDE_TABLE` columns, a stage that passed shows its key figure and one
    that did not its reason (report.md has every stage's details); wider, both columns."""
    narrow = width is not None and width < WIDE_TABLE
    t = Table(title=Text(title), caption=Text("details of every stage: report.md (or a terminal of "
                                               f"{WIDE_TABLE} columns)") if narrow else None)
    t.add_column("stage", no_wrap=True)
    t.add_column("result", no_wrap=True)
    t.add_column("time s", no_wrap=True, justify="right")
    if narrow:
        t.add_column("key figure, or why not passed", overflow="fold", ratio=1)
    else:
        t.add_column("key figure", overflow="fold")
        t.add_column("reason / details", overflow="fold")
    for st in STAGES:
        r = rows.get(st.name, {"status": "pending", "duration_s": 0.0, "details": "", "figures": {}})
        status = r["status"]
        cells = [Text(st.name), Text(status, style=STYLE.get(status, "")), Text(f"{r.get('duration_s', 0.0):.2f}")]
        if narrow:
            cells.append(Text(_key_figure(r) if status == "passed" else summary_line(r)))
        else:
            cells += [Text(_key_figure(r)), Text(summary_line(r))]
        t.add_row(*cells)
    return t


def _details_blocks(stages: list[dict]) -> list[Text]:
    """The multi-line diagnoses (watchdog dumps, tracebacks) in full, below the table."""
    out = []
    for st in stages:
        if has_more(st):
            out.append(Text.assemble((f"{st['name']} ({st['status']}):", STYLE.get(st["status"], "")), "\n",
                                     long_details(st).rstrip(), "\n"))
    return out


@contextmanager
def _progress(console: Console, rows: dict, title: str):
    """Yields ``refresh()``. On a terminal, a live table that vanishes at the end (the final
    table is printed once after it); elsewhere nothing until the final table."""
    if not console.is_terminal:
        yield lambda: None
        return
    with Live(bringup_table(rows, title, console.width), console=console, refresh_per_second=4,
              transient=True) as live:
        yield lambda: live.update(bringup_table(rows, title, console.width))


def _culprit(rows: dict, selected: set[str], running: str | None) -> str | None:
    """The stage an interruption or a dead simulator hit: the one running, else the next one
    that would have started."""
    if running and rows.get(running, {}).get("status") == "running":
        return running
    for st in STAGES:
        done = rows.get(st.name, {}).get("status") in FINISHED
        if st.name in selected and not done and all(rows.get(d, {}).get("status") == "passed" for d in st.depends_on):
            return st.name
    return None


def _build_stage(variant, sim: str) -> tuple[dict, object]:
    from cosim.build import build_simulator

    t0 = time.perf_counter()
    rec = {"name": "build", "depends_on": [], "blocked_by": None}
    try:
        build = build_simulator(variant, sim=sim)
    except Exception as e:  # noqa: BLE001 - a build that fails is a harness error, reported as such
        return {**rec, "status": "error", "duration_s": round(time.perf_counter() - t0, 3),
                "details": f"{type(e).__name__}: {e}", "figures": {}}, None
    details = (f"{'cache hit' if build.cache_hit else 'compiled'} in {build.build_s:.1f} s "
               f"(Verilog {'cached' if build.verilog_cache_hit else f'elaborated in {build.elaborate_s:.1f} s'})")
    if build.rebuilt:
        details += "; " + "; ".join(build.rebuilt)
    return {**rec, "status": "passed", "duration_s": round(time.perf_counter() - t0, 3), "details": details,
            "figures": {"cache_hit": build.cache_hit, "build_dir": str(build.build_dir),
                        **({"rebuilt": build.rebuilt} if build.rebuilt else {})}}, build


def run_bringup(*, variant, sim: str, seed: int, only: list[str] | None, report_dir: Path | None,
                console: Console, work_dir: Path | None = None, watchdog_cycles: int = 1_000_000,
                command: str | None = None, keep: bool = False, waves: bool = False) -> dict:
    """Run the checklist; return the report (``exit_code`` in it). Never raises for a stage, a
    dead simulator or an interruption: those are in the report, which is always written.

    The simulator's folder is ``work_dir``, else ``report_dir/sim``, else a folder of its own in
    the system temp directory, removed when every selected stage passed unless ``keep`` (kept,
    and its path printed, otherwise).

    ``waves``: each stage that fails runs again afterwards, alone with the stages it depends on, on
    a build that records waveforms (the checklist's run itself stays at full speed); the waveform's
    path goes into the stage's figures and the reports are written again."""
    from cosim.build import stop_children
    from cosim.jobs import JobFailed, SimulatorDied, run_job

    selected = closure(only) if only else {s.name for s in STAGES}
    meta = provenance(sim, command)
    rows: dict[str, dict] = {}
    title = f"firstlight bringup: revision {variant.revision}, {sim}, seed {seed}" + (
        f", injected {', '.join(variant.faults)}" if variant.faults else "")
    report_dir = Path(report_dir) if report_dir else None
    own = work_dir is None and report_dir is None
    if work_dir is None:  # the simulator's folder (its log, the records): kept, next to the report
        work_dir = report_dir / "sim" if report_dir else Path(tempfile.mkdtemp(prefix="firstlight-bringup-"))
    work_dir = Path(work_dir).resolve()
    sim_log = work_dir / "sim.log"
    running, started = None, {}
    interrupted: Interrupted | None = None
    sim_error: BaseException | None = None
    t_run = time.perf_counter()

    with _progress(console, rows, title) as refresh:
        def on_record(rec: dict) -> None:
            nonlocal running
            if rec.get("type") == "stage_start":
                running = rec["name"]
                started[running] = time.perf_counter()
                rows[running] = {"status": "running", "duration_s": 0.0, "details": "", "figures": {}}
            elif rec.get("type") == "stage":
                rows[rec["name"]] = rec
                running = None if running == rec["name"] else running
            refresh()

        try:
            started["build"] = time.perf_counter()
            rows["build"], build = _build_stage(variant, sim)
            refresh()
            if build is not None:
                from .stages import bringup_job

                run_job(bringup_job,
                        {"selected": sorted(selected), "seed": seed, "faults": list(variant.faults),
                         "built_revision": variant.revision, "watchdog_cycles": watchdog_cycles},
                        variant=variant, sim=sim, work_dir=work_dir, discover=False, build=build, on_record=on_record)
        except (KeyboardInterrupt, Interrupted) as e:
            interrupted = Interrupted.of(e)
            stop_children()  # run_job has stopped its simulator already; a build's compilers too
        except Exception as e:  # noqa: BLE001 - JobFailed, SimulatorDied or a harness bug: the stage in progress
            sim_error = e

    with shielded():  # a second signal must not cost the reports
        culprit = _culprit(rows, selected, running)
        if culprit and (interrupted or sim_error):
            took = round(time.perf_counter() - started.get(culprit, time.perf_counter()), 3)
            if interrupted:
                where = f"; the simulator was stopped, its log is {sim_log}" if sim_log.exists() else ""
                rows[culprit] = {"name": culprit, "status": "interrupted", "duration_s": took, "figures": {},
                                 "details": f"interrupted by {interrupted.name} while this stage ran{where}"}
            else:
                if isinstance(sim_error, SimulatorDied):
                    details = f"{sim_error}"
                elif isinstance(sim_error, JobFailed):
                    details = f"the bring-up job itself failed (a harness bug): {sim_error}"
                else:
                    details = f"{type(sim_error).__name__}: {sim_error}"
                rows[culprit] = {"name": culprit, "status": "error", "duration_s": took, "details": details,
                                 "figures": {}}
        reason = None
        if interrupted:
            reason = f"interrupted by {interrupted.name}"
        elif sim_error is not None:
            reason = f"the simulator ended early: {str(sim_error).splitlines()[0]}"
        report = assemble(rows, selected, reason, variant, sim, seed, interrupted=interrupted, meta=meta,
                          sim_log=sim_log if sim_log.exists() else None,
                          harness_error=str(sim_error) if sim_error is not None else None,
                          duration_s=time.perf_counter() - t_run)
        stages = report["stages"]
        console.print(Group(bringup_table({s["name"]: s for s in stages}, title, console.width),
                            *_details_blocks(stages)))
        if report_dir:
            for p in write_reports(report, report_dir):
                console.print(Text(f"wrote {p}"))
        if interrupted:
            console.print(Text(f"interrupted by {interrupted.name}: the simulator was stopped; the stages that "
                               "finished are reported", style="bold yellow"))
    failed = [s for s in report["stages"] if s["status"] == "failed"]
    if waves and failed and not interrupted:
        try:
            _record_waves(report, failed, variant, sim, seed, watchdog_cycles, work_dir, console)
        except (KeyboardInterrupt, Interrupted) as e:  # the verdict stands and is reported; the waves are cut short
            stop_children()
            console.print(Text(f"--waves: interrupted by {Interrupted.of(e).name} while recording", style="bold yellow"))
        if report_dir:
            write_reports(report, report_dir)
            console.print(Text(f"wrote the waveform paths into {report_dir / 'report.json'}"), soft_wrap=True)
    elif waves and not failed:
        console.print(Text("--waves: no stage failed, so no waveform was recorded"))
    with shielded():
        if own and report["passed"] and not keep:
            shutil.rmtree(work_dir, ignore_errors=True)
        elif own:
            console.print(Text(f"the simulator's folder (sim.log, records.jsonl) is kept: {work_dir}"), soft_wrap=True)
        console.print(Text(verdict_line(report, variant.revision), style="bold green" if report["passed"] else "bold red"))
    return report


def _record_waves(report: dict, failed: list[dict], variant, sim: str, seed: int, watchdog_cycles: int,
                  work_dir: Path, console: Console) -> None:
    """Each failed stage again with what it depends on, on a waves build, into work_dir/waves/<stage>;
    the same seed and faults, so the same failure (said if it did not fail again)."""
    from cosim.build import build_simulator
    from cosim.jobs import run_job

    from .stages import bringup_job

    console.print(Text(f"--waves: recording {', '.join(s['name'] for s in failed)} again on a build that traces "
                       "(a traced build compiles once, then it is cached)"), soft_wrap=True)
    try:
        build = build_simulator(variant, sim=sim, waves=True)
    except Exception as e:  # noqa: BLE001 - the checklist's verdict stands; the waves are what is missing
        console.print(Text(f"--waves: the traced build failed, no waveform: {type(e).__name__}: {e}", style="bold magenta"),
                      soft_wrap=True)
        return
    for st in failed:
        where = work_dir / "waves" / st["name"]
        where.mkdir(parents=True, exist_ok=True)
        again: dict[str, str] = {}

        def on_record(rec: dict, again=again) -> None:
            if rec.get("type") == "stage":
                again[rec["name"]] = rec["status"]

        try:
            res = run_job(bringup_job, {"selected": sorted(closure([st["name"]])), "seed": seed,
                                        "faults": list(variant.faults), "built_revision": variant.revision,
                                        "watchdog_cycles": watchdog_cycles},
                          variant=variant, sim=sim, work_dir=where, discover=False, build=build, waves=True,
                          on_record=on_record)
        except Exception as e:  # noqa: BLE001 - as above
            console.print(Text(f"--waves: {st['name']} could not run again: {type(e).__name__}: {e}",
                               style="bold magenta"), soft_wrap=True)
            continue
        if res.waves is None:
            console.print(Text(f"--waves: {st['name']}: no waveform file found in {where}", style="yellow"),
                          soft_wrap=True)
            continue
        st["figures"]["waves"] = str(res.waves)
        same = again.get(st["name"]) == "failed"
        st["figures"]["waves_reproduced"] = same
        console.print(Text(f"waves of {st['name']}: {res.waves}" + ("" if same else
                           f" (it did not fail again: {again.get(st['name'], 'not run')}; the waveform is of that run)")),
                      soft_wrap=True)


def verdict_line(report: dict, revision: str) -> str:
    """The run in one line, last: "12 of 12 stages passed in 8.5 s on A0", or which did not."""
    stages = report["stages"]
    ran = [s for s in stages if s["status"] != "skipped"]
    passed = [s for s in ran if s["status"] == "passed"]
    took = sum(s.get("duration_s") or 0.0 for s in stages)
    line = f"{len(passed)} of {len(ran)} stages passed in {took:.1f} s on {revision}"
    others: dict[str, list[str]] = {}
    for s in ran:
        if s["status"] != "passed":
            others.setdefault(s["status"], []).append(s["name"])
    if others:
        line += "; " + "; ".join(f"{k}: {', '.join(v)}" for k, v in others.items())
    skipped = len(stages) - len(ran)
    return line + (f" ({skipped} skipped)" if skipped else "")


def assemble(rows: dict, selected: set[str], sim_error, variant, sim: str, seed: int, *,
             interrupted: Interrupted | None = None, meta: dict | None = None, sim_log: Path | None = None,
             harness_error: str | None = None, duration_s: float | None = None) -> dict:
    """The report from whatever stage records arrived (a dead simulator or a signal leaves gaps).

    ``sim_error`` is why the stages that did not run did not run (or None)."""
    stages = []
    for st in STAGES:
        r = rows.get(st.name)
        if r is None or r.get("status") not in FINISHED:
            blockers = [d for d in st.depends_on if rows.get(d, {}).get("status") in ("failed", "blocked", "error")]
            if st.name not in selected:
                r = {"status": "skipped", "details": "not selected (--only)"}
            elif blockers:
                r = {"status": "blocked", "blocked_by": blockers[0], "details": f"blocked by {blockers[0]}"}
            else:
                r = {"status": "skipped", "details": f"not run: {sim_error or 'the run ended early'}"}
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
    chosen = [s for s in stages if s["name"] in selected]
    passed = all(s["status"] == "passed" for s in chosen)
    if interrupted is not None:
        outcome, code = "interrupted", interrupted.exit_code
    elif any(s["status"] in ("error", "interrupted") for s in chosen):
        outcome, code = "error", EXIT_HARNESS_ERROR
    elif passed:
        outcome, code = "passed", EXIT_OK
    else:
        outcome, code = "failed", EXIT_FAIL
    meta = meta if meta is not None else provenance(sim)
    return {
        "revision": variant.revision,
        "sim": sim,
        "seed": seed,
        "injected": list(variant.faults),
        "config": variant.config.as_dict(),
        "board": variant.resolved_board.as_dict(),
        "passed": passed,
        "outcome": outcome,
        "exit_code": code,
        "interrupted": interrupted.name if interrupted is not None else None,
        "harness_error": harness_error,
        "sim_log": str(sim_log) if sim_log else None,
        "duration_s": round(duration_s, 3) if duration_s is not None else None,
        **meta,
        "stages": stages,
    }
