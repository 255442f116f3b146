"""``firstlight sweep run|report|compare``: design-space sweeps on Dask, kept in SQLite (docs/sweeps.md)."""

from __future__ import annotations

import argparse
import sqlite3
from contextlib import contextmanager
from pathlib import Path

from firstlight.errors import EXIT_FAIL, EXIT_HARNESS_ERROR, EXIT_OK, CannotStart, exit_codes_help

from .common import FittedTable, add_junit_option, check_output_file, console, err_console, plain, positive, require_sim, \
    uses_build_cache

__all__ = ["add_parser", "cmd", "DEFAULT_OUT", "progress_events"]

DEFAULT_OUT = Path("firstlight-out")

RUN_EPILOG = """\
examples:
  firstlight sweep run examples/sweep-small.toml                 local cluster, one worker per core
  firstlight sweep run spec.toml --cluster tcp://10.0.0.5:8786   an existing Dask scheduler
  firstlight sweep report firstlight-out/sweep-small.db --json front.json

""" + exit_codes_help("a run's result differs from its golden (every point still ran and is stored); "
                      "3 if a build failed or a simulator died for some point")


def add_parser(subparsers) -> None:
    raw = argparse.RawDescriptionHelpFormatter
    s = subparsers.add_parser("sweep", help="design-space sweeps: a grid of chips x workloads on Dask, area, Pareto "
                              "fronts, results in SQLite", formatter_class=raw,
                              description="Sweep chip and board parameters against workloads (docs/sweeps.md).",
                              epilog=exit_codes_help("see each action's --help"))
    s.set_defaults(handler=cmd)
    sub = s.add_subparsers(dest="sweep_cmd", required=True, metavar="ACTION")
    r = sub.add_parser("run", help="build every design point once, run every workload on it, store the results",
                       formatter_class=raw, epilog=RUN_EPILOG,
                       description="Read SPEC (TOML: [grid] of parameters, [[workload]] tables; docs/sweeps.md), "
                                   "check it, and run every (design, workload) pair whose result is not stored yet "
                                   "on a Dask cluster. Each design point is built once (the content-hashed build "
                                   "cache) and its chip mapped once for the area proxy (cosim/area.py).")
    r.add_argument("spec", type=Path, metavar="SPEC.toml", help="the sweep spec")
    r.add_argument("--cluster", default=None, metavar="ADDRESS",
                   help="an existing Dask scheduler, e.g. tcp://host:8786 (default: a local cluster on this machine)")
    r.add_argument("--workers", type=positive, default=None, metavar="N",
                   help="workers of the local cluster (default: one per core); not with --cluster")
    r.add_argument("--db", type=Path, default=None, metavar="PATH",
                   help=f"the SQLite database (default: {DEFAULT_OUT}/sweep-<spec name>.db)")
    r.add_argument("--plot", type=Path, default=None, metavar="PATH",
                   help="the Pareto PNG (default: the database's path with .png)")
    r.add_argument("--force", action="store_true",
                   help="run every pair again, even those with a stored result for the same inputs")
    add_junit_option(r, "pair of the spec (design, workload; failed: differs from its golden; error: a build or a "
                     "harness error; skipped: not applicable), from the database's newest result for the pair")
    uses_build_cache(r)
    rp = sub.add_parser("report", help="the Pareto front per workload and over all (geometric mean), as tables, "
                        "PNG and JSON", formatter_class=raw, epilog=exit_codes_help("(not used)"))
    rp.add_argument("db", type=Path, metavar="DB", help="a sweep database")
    rp.add_argument("--json", type=Path, default=None, metavar="PATH", help="write the fronts as JSON")
    rp.add_argument("--plot", type=Path, default=None, metavar="PATH",
                    help="the Pareto PNG (default: the database's path with .png)")
    c = sub.add_parser("compare", help="what changed between two sweep databases (commits, or sweeps)",
                       formatter_class=raw,
                       epilog=exit_codes_help("a run that passed in DB_A does not pass in DB_B"))
    c.add_argument("db_a", type=Path, metavar="DB_A")
    c.add_argument("db_b", type=Path, metavar="DB_B")
    c.add_argument("--json", type=Path, default=None, metavar="PATH", help="write the comparison as JSON")


def cmd(args) -> int:
    return {"run": _run, "report": _report, "compare": _compare}[args.sweep_cmd](args)


# ---- run ----------------------------------------------------------------------------------------

def _open(path: Path):
    from firstlight.sweep.db import open_db

    try:
        return open_db(path)
    except (sqlite3.DatabaseError, ValueError) as e:
        raise CannotStart(f"--db {path}: {e}") from None


def _run(args) -> int:
    from firstlight.sweep.engine import connect, dashboard_link, plan_sweep, run_sweep
    from firstlight.sweep.spec import SpecError, load_spec

    if args.cluster and args.workers:
        raise CannotStart("--workers sizes the local cluster; an existing one (--cluster) has the workers it has")
    try:
        spec = load_spec(args.spec)
    except SpecError as e:
        raise CannotStart(str(e)) from None
    require_sim(spec.sim)
    db_path = args.db or DEFAULT_OUT / f"sweep-{spec.name}.db"
    plot = args.plot or db_path.with_suffix(".png")
    check_output_file(db_path, "--db")
    check_output_file(plot, "--plot")
    con = _open(db_path)
    plan = plan_sweep(spec, con, force=args.force)
    pairs = len(spec.designs) * len(spec.workloads)
    console.print(plain((f"sweep {spec.name}", "bold"), f": {len(spec.designs)} design points x {len(spec.workloads)} "
                        f"workloads = {pairs} pairs on {spec.sim}; {len(spec.skipped)} not applicable, {plan.stored} "
                        f"already stored, {len(plan.todo)} to run (commit {plan.commit[:12]})"))
    for d, w, why in spec.skipped[:10]:
        console.print(plain(f"  not applicable: {w} on {d}: {why}"), soft_wrap=True)
    if len(spec.skipped) > 10:
        console.print(plain(f"  ... and {len(spec.skipped) - 10} more"))
    summary = None
    if plan.todo:
        try:
            client, cluster = connect(args.cluster, args.workers)
        except (OSError, TimeoutError) as e:
            raise CannotStart(f"cannot reach the Dask scheduler at {args.cluster}: {e}") from None
        try:
            link = dashboard_link(client)
            nworkers = len(client.scheduler_info().get("workers", {}))
            where = f"Dask scheduler {client.scheduler.address}" if args.cluster else "a local Dask cluster"
            console.print(plain(f"on {where} with {nworkers} workers", f"; dashboard: {link}" if link else
                                "; no dashboard (pip install bokeh for Dask's)"), soft_wrap=True)
            with progress_events() as event:
                summary = run_sweep(plan, con, client, event)
        finally:
            client.close()
            if cluster is not None:
                cluster.close()
        _print_summary(summary)
    else:
        console.print(plain("nothing to run: every applicable pair has a stored result for these inputs "
                            "(--force runs them again)"))
    con.close()
    code = _report_db(db_path, None, plot)
    if args.junit:
        _write_junit(args.junit, spec, db_path)
    if summary is None:
        return code
    if summary.errors:
        for p in summary.problems[:5]:
            err_console.print(plain(("harness error: ", "bold magenta"), p))
        return EXIT_HARNESS_ERROR
    return EXIT_FAIL if summary.failed else EXIT_OK


def _write_junit(path: Path, spec, db: Path) -> None:
    """A testcase per pair of the spec: its newest stored result (this run's or an earlier one for
    the same inputs), or skipped with the reason it is not applicable; a pair with no stored
    result (its run was interrupted or its build failed before it) is an error."""
    from firstlight.junit import Case, write_junit

    stored = {(r["design"], r["workload"]): r for r in _rows(db)}
    skipped = {(d, w): why for d, w, why in spec.skipped}
    status = {"pass": "passed", "fail": "failed", "error": "error"}
    cases = []
    for d in spec.designs:
        for w in spec.workloads:
            cls, name = f"firstlight.sweep.{spec.name}", f"{w.name} on {d.name}"  # a design's name has dots
            if (d.name, w.name) in skipped:
                cases.append(Case(name, cls, "skipped", f"not applicable: {skipped[d.name, w.name]}"))
                continue
            r = stored.get((d.name, w.name))
            if r is None:
                cases.append(Case(name, cls, "error", "no stored result for this pair"))
                continue
            why = r.get("error") or r.get("mismatch") or ""
            message = r["status"] + (f": {why.splitlines()[0][:300]}" if why else "")
            cases.append(Case(name, cls, status.get(r["status"], "error"), message, why, r.get("run_s") or 0.0))
    write_junit(path, f"firstlight sweep {spec.name} ({spec.sim})", cases,
                {"spec": spec.source or spec.name, "sim": spec.sim, "db": str(db)})
    console.print(plain(f"wrote {path}"))


@contextmanager
def progress_events():
    """A rich progress bar per task kind (builds, areas, runs); yields the ``on_event`` callback
    of :func:`firstlight.sweep.engine.run_sweep`. A run that does not pass is printed as it
    arrives; the same harness error for many runs (a build that failed) is printed once."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    counts = {"pass": 0, "fail": 0, "error": 0}
    said: set[str] = set()
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console, transient=False) as progress:
        ids: dict[str, int] = {}

        def event(kind: str, info: dict) -> None:
            if kind == "start":
                for what in ("builds", "areas", "runs"):
                    if info[what]:
                        ids[what] = progress.add_task(what, total=info[what])
                return
            what = kind + "s"
            if kind == "run":
                counts[info["status"]] += 1
                progress.update(ids[what], description=f"runs ({counts['pass']} passed, {counts['fail']} failed, "
                                f"{counts['error']} errors)")
                if info["status"] != "pass":
                    why = (info.get("error") or "differs from its golden").splitlines()[0][:300]
                    if why not in said:
                        said.add(why)
                        progress.console.print(plain((f"{info['status'].upper()} ", "red"),
                                                     f"{info['workload']} on {info['design']}: {why}"), soft_wrap=True)
            if what in ids:
                progress.advance(ids[what])

        yield event


def _print_summary(s) -> None:
    total = s.build_s + s.area_s + s.run_s
    share = (lambda x: f"{100 * x / total:.0f}%") if total else (lambda x: "-")
    rows = [["runs", f"{s.runs}", f"{s.passed} passed, {s.failed} failed, {s.errors} errors", f"{s.run_s:.1f}",
             share(s.run_s)],
            ["builds", f"{s.builds}", f"{s.builds_cached} from the cache", f"{s.build_s:.1f}", share(s.build_s)],
            ["area", f"{s.areas}", f"{s.areas_cached} from the cache", f"{s.area_s:.1f}", share(s.area_s)]]
    console.print(FittedTable(f"sweep done in {s.wall_s:.1f} s on {s.workers} workers ({s.stored_before} pairs were "
                              "stored already)", ["tasks", "count", "", "task s", "share"], rows))


# ---- report -------------------------------------------------------------------------------------

def _fmt(v, pct=False) -> str:
    if v is None:
        return "-"
    if pct:
        return f"{100 * v:.1f}%"
    if isinstance(v, float):
        return f"{v:,.1f}"
    return f"{v:,}" if isinstance(v, int) else str(v)


def _rows(db: Path) -> list:
    """The stored runs of a sweep database, or CannotStart naming the file."""
    from firstlight.sweep.pareto import load_rows

    try:
        return load_rows(db)
    except FileNotFoundError as e:
        raise CannotStart(str(e)) from None
    except sqlite3.DatabaseError as e:  # sqlite's message names no file
        raise CannotStart(f"{db}: {e} (a sweep database is the SQLite file `firstlight sweep run --db` writes)") from None


def _report_db(db: Path, json_path: Path | None, plot: Path | None) -> int:
    from firstlight.sweep.pareto import fronts, short_names, to_json, write_plot

    rows = _rows(db)
    if not rows:
        console.print(plain(f"{db} holds no runs yet"))
        return EXIT_OK
    res = fronts(rows)
    short, shared = short_names(r["design"] for r in rows)
    if shared:
        console.print(plain("every design: ", (shared, "bold")), soft_wrap=True)
    for w, d in res["workloads"].items():
        bad = f", {len(d['failed'])} failed" if d["failed"] else ""
        bad += f", {len(d['errors'])} harness errors" if d["errors"] else ""
        console.print(FittedTable(
            f"Pareto front: {w} ({d['passed']} designs passed, {len(d['front'])} on the front{bad})",
            ["design", "area", "cycles", "util.", "roof util.", "bound", "DRAM bytes"],
            [[short[p["design"]], _fmt(p["area"]), _fmt(p["cycles"]), _fmt(p["utilization"], True),
              _fmt(p["roof_utilization"], True), p["bound"] or "-", _fmt(p["dram_bytes"])] for p in d["front"]]))
    if res["geomean"]:
        g = res["geomean"]
        console.print(FittedTable(
            f"Pareto front: geometric mean of cycles over {len(g['workloads'])} workloads ({g['designs']} designs "
            "passed every one)", ["design", "area", "geomean cycles"],
            [[short[p["design"]], _fmt(p["area"]), _fmt(p["cycles"])] for p in g["front"]]))
    not_passed = [(w, p) for w, d in res["workloads"].items() for p in d["failed"] + d["errors"]]
    if not_passed:
        console.print(FittedTable("runs that did not pass", ["workload", "design", "status", "why"],
                                  [[w, short[p["design"]], p["status"], (p.get("error") or "differs from its golden")
                                    .splitlines()[0][:160]] for w, p in not_passed], keys=2,
                                  justify=["left"] * 4))
    if json_path is not None:
        json_path.parent.mkdir(parents=True, exist_ok=True)
        json_path.write_text(to_json({"db": str(db), **res}))
        console.print(plain(f"wrote {json_path}"))
    if plot is not None:
        plot.parent.mkdir(parents=True, exist_ok=True)
        sims = sorted({r["sim"] for r in rows if r.get("sim")})
        write_plot(res, plot, title=f"{db.name}: cycles vs area (every design: {shared})" if shared else db.name,
                   sim=sims[0] if len(sims) == 1 else None)
        console.print(plain(f"wrote {plot}"))
    return EXIT_OK


def _report(args) -> int:
    plot = args.plot or args.db.with_suffix(".png")
    check_output_file(plot, "--plot")
    return _report_db(args.db, args.json, plot)


# ---- compare ------------------------------------------------------------------------------------

def _compare(args) -> int:
    from firstlight.sweep.pareto import compare, short_names, to_json

    a, b = (_rows(path) for path in (args.db_a, args.db_b))
    c = compare(a, b)
    console.print(plain(f"A: {args.db_a} (commit {', '.join(x[:12] for x in c['commits_a']) or '?'})\n"
                        f"B: {args.db_b} (commit {', '.join(x[:12] for x in c['commits_b']) or '?'})"), soft_wrap=True)
    short, _ = short_names([e["design"] for e in c["changed"]] or ["-"])
    if c["changed"]:
        console.print(FittedTable(
            f"{len(c['changed'])} of {c['common']} runs changed", ["workload", "design", "cycles A", "cycles B",
                                                                  "change", "area A", "area B", "A", "B"],
            [[e["workload"], short.get(e["design"], e["design"]), _fmt(e["cycles_a"]), _fmt(e["cycles_b"]),
              "-" if e["delta"] is None else f"{100 * e['delta']:+.1f}%", _fmt(e["area_a"]), _fmt(e["area_b"]),
              e["status_a"], e["status_b"]] for e in c["changed"]], keys=2))
    console.print(plain(f"{c['common']} runs in both, {c['unchanged']} unchanged, {len(c['changed'])} changed; "
                        f"{len(c['only_a'])} only in A, {len(c['only_b'])} only in B"))
    for e in c["regressed"]:
        err_console.print(plain(("REGRESSED: ", "bold red"), f"{e['workload']} on {e['design']}: {e['status_a']} in A, "
                                f"{e['status_b']} in B"))
    if args.json is not None:
        args.json.write_text(to_json(c))
        console.print(plain(f"wrote {args.json}"))
    return EXIT_FAIL if c["regressed"] else EXIT_OK
