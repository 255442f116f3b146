"""``firstlight regress``: the checklist and a kernel per unit over revisions x simulators x seeds,
on the sweep engine (Dask) and into a sweep database (docs/sweeps.md, "Regressions")."""

from __future__ import annotations

import argparse
from pathlib import Path

from firstlight.errors import EXIT_FAIL, EXIT_HARNESS_ERROR, EXIT_OK, CannotStart, exit_codes_help

from .common import FittedTable, add_junit_option, check_output_file, console, err_console, plain, positive, require_sim, \
    revision, seed, uses_build_cache

__all__ = ["add_parser", "cmd"]


def add_parser(subparsers) -> None:
    from cosim.toolchain import SIMULATORS
    from workarounds.registry import ASSESSED_REVISIONS

    p = subparsers.add_parser(
        "regress", help="the checklist and a kernel per unit over revisions x simulators x seeds, on Dask",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Build a small chip (4x4, int8, vector unit, 64-word SRAMs) per revision and run the first-light "
                    "checklist, a GEMM, a reduction, softmax, LayerNorm and attention on it, once per seed and "
                    "simulator, through the sweep engine; results land in a sweep database, and a second run skips "
                    "what is stored.",
        epilog=exit_codes_help("a run failed its check; 3 if a build failed or a simulator died"))
    p.set_defaults(handler=cmd)
    p.add_argument("--rev", dest="revs", type=revision, nargs="+", default=list(ASSESSED_REVISIONS), metavar="REV",
                   help=f"revisions (default: {' '.join(ASSESSED_REVISIONS)})")
    p.add_argument("--sim", dest="sims", nargs="+", choices=SIMULATORS, default=None, metavar="SIM",
                   help=f"simulators ({', '.join(SIMULATORS)}; default: every one installed)")
    p.add_argument("--seeds", type=seed, nargs="+", default=[1], metavar="SEED", help="data seeds (default: 1)")
    p.add_argument("--cluster", default=None, metavar="ADDRESS", help="an existing Dask scheduler (default: local)")
    p.add_argument("--workers", type=positive, default=None, metavar="N", help="local cluster workers (default: cores)")
    p.add_argument("--db", type=Path, default=Path("firstlight-out") / "regress.db", metavar="PATH",
                   help="the sweep database (default: firstlight-out/regress.db)")
    p.add_argument("--force", action="store_true", help="run stored points again")
    add_junit_option(p, "run (workload on a revision and simulator; failed: its check failed; error: a build or a "
                        "simulator)")
    uses_build_cache(p)


def cmd(args) -> int:
    from cosim.toolchain import SIMULATORS, SimulatorMissing, find_simulator
    from firstlight.sweep.db import open_db
    from firstlight.sweep.engine import connect, plan_sweep, run_sweep
    from firstlight.sweep.regress import regress_specs

    from .sweep import progress_events

    if args.sims:
        for s in args.sims:
            require_sim(s)
        sims = list(dict.fromkeys(args.sims))
    else:
        sims = []
        for s in SIMULATORS:
            try:
                find_simulator(s)
                sims.append(s)
            except SimulatorMissing as e:
                err_console.print(plain(("skipped: ", "yellow"), f"{s}: {e}"))
        if not sims:
            raise CannotStart("no simulator is installed")
    check_output_file(args.db, "--db")
    specs = regress_specs(list(dict.fromkeys(args.revs)), sims, list(dict.fromkeys(args.seeds)))
    con = open_db(args.db)
    plans = [plan_sweep(s, con, force=args.force) for s in specs]
    todo = sum(len(p.todo) for p in plans)
    console.print(plain(("firstlight regress", "bold"), f": revisions {' '.join(args.revs)} x {' '.join(sims)} x seeds "
                        f"{' '.join(map(str, args.seeds))}: {todo} runs to do, {sum(p.stored for p in plans)} stored"))
    summaries = []
    if todo:
        try:
            client, cluster = connect(args.cluster, args.workers)
        except (OSError, TimeoutError) as e:
            raise CannotStart(f"cannot reach the Dask scheduler at {args.cluster}: {e}") from None
        try:
            for plan in plans:
                if plan.todo:
                    with progress_events() as event:
                        summaries.append(run_sweep(plan, con, client, event))
        finally:
            client.close()
            if cluster is not None:
                cluster.close()
    rows = [dict(r) for r in con.execute("SELECT design, workload, sim, status, error FROM runs WHERE sweep LIKE "
                                         "'regress-%'")]
    con.close()
    _table(rows, specs)
    if args.junit:
        from firstlight.junit import Case, write_junit

        status = {"pass": "passed", "fail": "failed", "error": "error"}
        write_junit(args.junit, "firstlight regress",
                    [Case(r["workload"], f"firstlight.regress.{r['design']}.{r['sim']}", status.get(r["status"], "error"),
                          f"{r['status']}" + (f": {r['error']}" if r.get("error") else ""), r.get("error") or "")
                     for r in rows], {"revisions": " ".join(args.revs), "sims": " ".join(sims),
                                      "seeds": " ".join(map(str, args.seeds))})
    if any(r["status"] == "error" for r in rows):
        return EXIT_HARNESS_ERROR
    return EXIT_FAIL if any(r["status"] == "fail" for r in rows) else EXIT_OK


def _table(rows: list[dict], specs) -> None:
    """Rows: revision x simulator; columns: the workloads; a cell: passed / run over the seeds."""
    base = list(dict.fromkeys(w.name.rsplit("-seed", 1)[0] for w in specs[0].workloads))
    designs = {d.name: d.variant.revision for d in specs[0].designs}
    out = []
    for d, rev in designs.items():
        for spec in specs:
            cells = []
            for b in base:
                rs = [r for r in rows if r["design"] == d and r["sim"] == spec.sim and r["workload"].rsplit("-seed", 1)[0] == b]
                ok = sum(r["status"] == "pass" for r in rs)
                cells.append("n/a" if not rs else f"{ok}/{len(rs)}" if ok == len(rs) else f"{ok}/{len(rs)} FAIL")
            out.append([rev, spec.sim, *cells])
    console.print(FittedTable("regression: runs passed / run, over the seeds", ["rev", "sim", *base], out, keys=2))
    for r in rows:
        if r["status"] != "pass":
            err_console.print(plain((f"{r['status'].upper()} ", "red"), f"{r['workload']} on {r['design']} ({r['sim']}): "
                                    f"{(r['error'] or 'differs from its golden').splitlines()[0][:200]}"))
