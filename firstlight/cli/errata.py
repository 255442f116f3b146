"""``firstlight errata ...``: list, show, check, measure, docs.

The simulator work (reproducers, the regression matrix, costs at scale) is in
:mod:`firstlight.jobs.errata`; this module parses, prints and writes files.
"""

from __future__ import annotations

import argparse
import enum
import json
from pathlib import Path

from rich.table import Table
from rich.text import Text

from firstlight.errors import EXIT_FAIL, EXIT_OK, CannotStart, exit_codes_help

from .common import (
    JobFolder,
    add_json_option,
    add_junit_option,
    add_keep_option,
    add_rev_option,
    add_seed_option,
    add_sim_option,
    cells,
    check_output_file,
    console,
    err_console,
    plain,
    require_sim,
    uses_build_cache,
)

__all__ = ["DOCS_PATH", "add_parser", "cmd"]

DOCS_PATH = Path(__file__).resolve().parents[2] / "docs" / "errata.md"


def add_parser(subparsers) -> None:
    raw = argparse.RawDescriptionHelpFormatter
    e = subparsers.add_parser("errata", help="the errata registry: list, show, check on the RTL, measure costs",
                              description="Errata: what the software believes about each silicon revision, held "
                              "against the real RTL by running every reproducer.", formatter_class=raw,
                              epilog=exit_codes_help("see each action's --help"))
    e.set_defaults(handler=cmd)
    e_sub = e.add_subparsers(dest="errata_cmd", required=True, metavar="ACTION")
    el = e_sub.add_parser("list", help="id, unit, category and status for a revision", formatter_class=raw,
                          epilog=exit_codes_help("(not used)"))
    add_rev_option(el, default=None, help="revision (default: every assessed one)")
    add_json_option(el)
    es = e_sub.add_parser("show", help="one whole record, its status per revision and its measured cost",
                          formatter_class=raw, epilog=exit_codes_help("(not used)"))
    es.add_argument("id", help="erratum id, e.g. FL-ME-001")
    ec = e_sub.add_parser("check", help="run every reproducer on the RTL of a revision: detected vs expected",
                          formatter_class=raw,
                          epilog=exit_codes_help("a reproducer disagreed with the registry (a new finding or a "
                                                 "missing erratum), or the check did not finish"))
    add_rev_option(ec, required=True)
    add_sim_option(ec)
    add_json_option(ec)
    add_junit_option(ec, "erratum (failed: a new finding or a known erratum not reproduced)")
    add_keep_option(ec)
    uses_build_cache(ec)
    em = e_sub.add_parser("measure", help="run the regression matrix (revision x mitigation on/off), store the "
                          "cycle costs in workarounds/costs.json and regenerate docs/errata.md", formatter_class=raw,
                          epilog=exit_codes_help("a cell of the matrix or a run at scale was not as expected"))
    add_sim_option(em)
    add_seed_option(em)
    em.add_argument("--cluster", default=None, metavar="ADDRESS",
                    help="run the matrix on a Dask cluster: an existing scheduler (tcp://host:8786), or 'local' for "
                         "a local one with a worker per core; a task per revision and erratum (docs/sweeps.md)")
    em.add_argument("--db", type=Path, default=None, metavar="PATH",
                    help="with --cluster: also store every cell in this sweep database (default: "
                         "firstlight-out/errata.db)")
    uses_build_cache(em)
    ed = e_sub.add_parser("docs", help="regenerate docs/errata.md from the registry and the stored costs",
                          formatter_class=raw, epilog=exit_codes_help("with --check: the committed page is stale"))
    ed.add_argument("--check", action="store_true", help="only check that the committed page is current")


def _text(v) -> str:
    """A registry field as the CLI prints it: tuples comma-joined, enums by their short name
    (``Unit.ENGINE`` -> ``engine``, ``Defect.REDUCE_MAX_FOLDS_FROM_ZERO`` -> its RTL name)."""
    if isinstance(v, tuple):
        return ", ".join(map(_text, v))
    if isinstance(v, enum.Enum):
        return v.name.lower()
    return str(v)


def cmd(args) -> int:
    return {"list": _list, "show": _show, "check": _check, "measure": _measure, "docs": _docs}[args.errata_cmd](args)


def _list(args) -> int:
    from workarounds import ERRATA
    from workarounds.policy import status_for
    from workarounds.registry import ASSESSED_REVISIONS

    revs = [args.rev] if args.rev else list(ASSESSED_REVISIONS)
    t = Table(title=Text("Errata" + (f" on {args.rev}" if args.rev else "")))
    for col in ("id", "unit", "cat", "title", *revs):
        t.add_column(col)
    rows = []
    for e in ERRATA:
        status = {r: status_for(e, r, r in e.affected) for r in revs}
        rows.append({"id": e.id, "unit": _text(e.unit), "category": e.category, "title": e.title, "status": status})
        t.add_row(*cells(e.id, _text(e.unit), e.category, e.title, *[status[r] for r in revs]))
    console.print(t)
    if args.json:
        from firstlight.provenance import with_provenance

        args.json.write_text(json.dumps(with_provenance(rows, None, args.command_line), indent=2))
    return EXIT_OK


def _show(args) -> int:
    from workarounds import erratum
    from workarounds.docs import cost_summary, load_costs
    from workarounds.policy import status_for
    from workarounds.registry import ASSESSED_REVISIONS

    try:
        e = erratum(args.id)
    except KeyError as exc:
        raise CannotStart(exc.args[0]) from None
    t = Table(show_header=False, box=None, title=Text(f"{e.id}: {e.title}"))
    for name in ("unit", "category", "affected", "fixed_in", "defect", "conditions", "description", "implication",
                 "reproducer", "mitigation", "mitigation_kind"):
        t.add_row(*cells(name, _text(getattr(e, name))))
    for r in ASSESSED_REVISIONS:
        t.add_row(*cells(f"status {r}", status_for(e, r, r in e.affected)))
    t.add_row(*cells("measured cost", cost_summary(load_costs(), e.id)))
    console.print(t)
    return EXIT_OK


def _check(args) -> int:
    from firstlight.jobs.errata import check_revision

    require_sim(args.sim)
    with JobFolder(args.keep, "errata-check") as folder:
        code = _check_report(args, *check_revision(args.rev, args.sim, folder.path))
        folder.passed = code == EXIT_OK
    return code


def _check_report(args, observed: dict, error: str | None) -> int:
    from workarounds.check import NO_FINDING, compare
    from workarounds.registry import ASSESSED_REVISIONS

    if error:
        err_console.print(plain(("the check did not finish: ", "red"), str(error)))
    rows = compare(args.rev, observed)
    t = Table(title=Text(f"errata check on {args.rev} ({args.sim})"))
    for col in ("id", "unit", "expected", "detected", "verdict", "detail"):
        t.add_column(col)
    if args.rev not in ASSESSED_REVISIONS:
        err_console.print(plain(f"{args.rev} is not in the errata registry (assessed: {', '.join(ASSESSED_REVISIONS)}): "
                                f"nothing is expected on it; a reproducer that fires is a new finding"))
    expected = {True: "affected", False: "not affected", None: "unknown (not assessed)"}
    for r in rows:
        color = "green" if r["verdict"] in NO_FINDING else "red"
        t.add_row(*cells(r["id"], _text(r["unit"]), expected[r["expected"]],
                         "fired" if r["detected"] else "-", Text(r["verdict"], style=color), r["detail"]))
    console.print(t)
    if args.json:
        from firstlight.provenance import with_provenance

        args.json.write_text(json.dumps(with_provenance({"revision": args.rev, "sim": args.sim, "rows": rows}, args.sim,
                                                        args.command_line), indent=2, default=_text))
    bad = [r for r in rows if r["verdict"] not in NO_FINDING]
    if args.junit:
        from firstlight.junit import Case, write_junit

        cases = [Case(r["id"], f"firstlight.errata.{args.rev}", "passed" if r["verdict"] in NO_FINDING else "failed",
                      f"{r['verdict']}: {r['detail']}") for r in rows]
        if error:
            cases.append(Case("check", f"firstlight.errata.{args.rev}", "error", f"the check did not finish: {error}"))
        write_junit(args.junit, f"firstlight errata check {args.rev} ({args.sim})", cases,
                    {"revision": args.rev, "sim": args.sim})
    for r in bad:
        err_console.print(plain((f"{r['verdict'].upper()}: ", "bold red"), f"{r['id']} on {args.rev}: {r['detail']}"))
    return EXIT_FAIL if bad or error else EXIT_OK


def _matrix_table(costs: dict, sim: str) -> Table:
    t = Table(title=Text(f"errata regression matrix ({sim})"))
    for col in ("id", "rev", "affected", "on: cycles", "on", "off: cycles", "off", "as expected"):
        t.add_column(col)
    for err_id, revs in costs.items():
        for rev, e in revs.items():
            ok = (e.get("passed_on") is True) and (e.get("passed_off") is (not e["affected"]))
            t.add_row(*cells(err_id, rev, "yes" if e["affected"] else "no", str(e.get("on")),
                             Text("exact") if e.get("passed_on") else Text("WRONG", style="red"), str(e.get("off")),
                             "exact" if e.get("passed_off") else "wrong",
                             Text("yes", style="green") if ok else Text("NO", style="red")))
    return t


def _measure(args) -> int:
    from firstlight.jobs.errata import costs_from, run_matrix, run_scale
    from workarounds.docs import COSTS_PATH, render

    require_sim(args.sim)
    check_output_file(COSTS_PATH, "the cost table")  # before the hour of simulation, not after
    check_output_file(DOCS_PATH, "the errata page")
    if args.cluster:
        matrix, problems, scale, scale_problems = _measure_on_cluster(args)
        console.print(_matrix_table(costs_from(matrix, []), args.sim))
    else:
        matrix, problems = run_matrix(args.sim, args.seed)
        console.print(_matrix_table(costs_from(matrix, []), args.sim))  # shown before the (longer) runs at scale
        scale, scale_problems = run_scale(args.sim, args.seed)
    problems += scale_problems
    costs = costs_from(matrix, scale)
    COSTS_PATH.write_text(json.dumps(costs, indent=2, sort_keys=True) + "\n")
    DOCS_PATH.write_text(render(costs))
    console.print(plain(f"wrote {COSTS_PATH} and {DOCS_PATH}"))
    for p in problems:
        err_console.print(plain(("UNEXPECTED: ", "bold red"), str(p)))
    return EXIT_FAIL if problems else EXIT_OK


def _measure_on_cluster(args):
    """The matrix and the runs at scale as Dask tasks (firstlight/sweep/errata.py), each cell
    stored in the sweep database as it arrives."""
    from firstlight.sweep.db import open_db
    from firstlight.sweep.engine import connect
    from firstlight.sweep.errata import measure_on_cluster

    from .sweep import progress_events

    db = args.db or Path("firstlight-out") / "errata.db"
    check_output_file(db, "--db")
    con = open_db(db)
    try:
        client, cluster = connect(None if args.cluster == "local" else args.cluster)
    except (OSError, TimeoutError) as e:
        raise CannotStart(f"cannot reach the Dask scheduler at {args.cluster}: {e}") from None
    try:
        with progress_events() as event:
            out = measure_on_cluster(client, args.sim, args.seed, con, event)
    finally:
        client.close()
        if cluster is not None:
            cluster.close()
        con.close()
    console.print(plain(f"stored the cells in {db}"))
    return out


def _docs(args) -> int:
    from workarounds.docs import render

    text = render()
    if args.check:
        current = DOCS_PATH.read_text() if DOCS_PATH.exists() else ""
        if current != text:
            err_console.print(plain(f"{DOCS_PATH} is stale: run `firstlight errata docs`"))
            return EXIT_FAIL
        console.print(plain(f"{DOCS_PATH} is current"))
        return EXIT_OK
    check_output_file(DOCS_PATH, "the errata page")
    DOCS_PATH.write_text(text)
    console.print(plain(f"wrote {DOCS_PATH}"))
    return EXIT_OK
