"""``firstlight errata ...``: list, show, check, measure, docs."""

from __future__ import annotations

import json
from pathlib import Path

from rich.table import Table

from firstlight.errors import EXIT_CANNOT_START, EXIT_FAIL, EXIT_OK, CannotStart

DOCS_PATH = Path(__file__).resolve().parent.parent / "docs" / "errata.md"


def cmd_errata(args, console, err_console) -> int:
    return {"list": _list, "show": _show, "check": _check, "measure": _measure, "docs": _docs}[args.errata_cmd](
        args, console, err_console)


def _list(args, console, err_console) -> int:
    from workarounds import ERRATA
    from workarounds.policy import status_for
    from workarounds.registry import ASSESSED_REVISIONS

    revs = [args.rev] if args.rev else list(ASSESSED_REVISIONS)
    t = Table(title="Errata" + (f" on {args.rev}" if args.rev else ""))
    for col in ("id", "unit", "cat", "title", *revs):
        t.add_column(col)
    rows = []
    for e in ERRATA:
        status = {r: status_for(e, r, r in e.affected) for r in revs}
        rows.append({"id": e.id, "unit": e.unit, "category": e.category, "title": e.title, "status": status})
        t.add_row(e.id, e.unit, e.category, e.title, *[status[r] for r in revs])
    console.print(t)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    return EXIT_OK


def _show(args, console, err_console) -> int:
    from workarounds import erratum
    from workarounds.docs import cost_summary, load_costs
    from workarounds.policy import status_for
    from workarounds.registry import ASSESSED_REVISIONS

    try:
        e = erratum(args.id)
    except KeyError as exc:
        raise CannotStart(exc.args[0]) from None
    t = Table(show_header=False, box=None, title=f"{e.id}: {e.title}")
    for name in ("unit", "category", "affected", "fixed_in", "defect", "conditions", "description", "implication",
                 "reproducer", "mitigation", "mitigation_kind"):
        v = getattr(e, name)
        t.add_row(name, ", ".join(v) if isinstance(v, tuple) else str(v))
    for r in ASSESSED_REVISIONS:
        t.add_row(f"status {r}", status_for(e, r, r in e.affected))
    t.add_row("measured cost", cost_summary(load_costs(), e.id))
    console.print(t)
    return EXIT_OK


def _check(args, console, err_console) -> int:
    from cosim.build import Variant
    from cosim.jobs import JobFailed, run_job
    from workarounds.check import compare

    from .cli import _require_sim

    _require_sim(args.sim)
    try:
        res = run_job("firstlight.sim_jobs:errata_check_job", {}, variant=Variant(revision=args.rev), sim=args.sim)
        observed = res.value["reproducers"]
    except JobFailed as exc:
        err_console.print(f"[red]the check did not finish:[/] {exc}")
        observed = {r["id"]: r for r in exc.records if r.get("type") == "reproducer"}
    rows = compare(args.rev, observed)
    t = Table(title=f"errata check on {args.rev} ({args.sim})")
    for col in ("id", "unit", "expected", "detected", "verdict", "detail"):
        t.add_column(col)
    for r in rows:
        color = "green" if r["verdict"] in ("ok", "not applicable") else "red"
        t.add_row(r["id"], r["unit"], "affected" if r["expected"] else "not affected",
                  "fired" if r["detected"] else "-", f"[{color}]{r['verdict']}[/]", r["detail"])
    console.print(t)
    if args.json:
        args.json.write_text(json.dumps({"revision": args.rev, "sim": args.sim, "rows": rows}, indent=2))
    bad = [r for r in rows if r["verdict"] not in ("ok", "not applicable")]
    for r in bad:
        err_console.print(f"[bold red]{r['verdict'].upper()}:[/] {r['id']} on {args.rev}: {r['detail']}")
    return EXIT_FAIL if bad else EXIT_OK


def run_matrix(sim: str, seed: int, revisions=None) -> tuple[list[dict], list[str]]:
    """Run the regression matrix on every revision; returns (cells, problems)."""
    from cosim.build import Variant
    from cosim.jobs import JobFailed, run_job
    from workarounds.registry import ASSESSED_REVISIONS

    cells, problems = [], []
    for rev in revisions or ASSESSED_REVISIONS:
        try:
            res = run_job("firstlight.sim_jobs:errata_matrix_job", {"seed": seed}, variant=Variant(revision=rev),
                          sim=sim)
            recs = res.records
        except JobFailed as exc:
            problems.append(f"{rev}: matrix job failed: {exc}")
            recs = exc.records
        cells += [r for r in recs if r.get("type") == "cell"]
    return cells, problems


def expected_cell_pass(cell: dict) -> bool:
    from workarounds import erratum

    return not (cell["revision"] in erratum(cell["id"]).affected and cell["policy"] == "off")


def _measure(args, console, err_console) -> int:
    from workarounds.docs import COSTS_PATH, render

    from .cli import _require_sim

    _require_sim(args.sim)
    cells, problems = run_matrix(args.sim, args.seed)
    costs: dict = {}
    t = Table(title=f"errata regression matrix ({args.sim})")
    for col in ("id", "rev", "affected", "on: cycles", "on", "off: cycles", "off", "as expected"):
        t.add_column(col)
    from workarounds import erratum

    for c in cells:
        entry = costs.setdefault(c["id"], {}).setdefault(c["revision"], {"affected": c["revision"] in erratum(c["id"]).affected})
        entry[c["policy"]] = c["cycles"]
        entry[f"passed_{c['policy']}"] = c["passed"]
        if c["passed"] != expected_cell_pass(c):
            problems.append(f"{c['id']} on {c['revision']} with mitigation {c['policy']}: "
                            f"{'passed' if c['passed'] else 'failed'} unexpectedly ({c['mismatch']})")
    for err_id, revs in costs.items():
        for rev, e in revs.items():
            ok = (e.get("passed_on") is True) and (e.get("passed_off") is (not e["affected"]))
            t.add_row(err_id, rev, "yes" if e["affected"] else "no", str(e.get("on")),
                      "exact" if e.get("passed_on") else "[red]WRONG[/]", str(e.get("off")),
                      "exact" if e.get("passed_off") else "wrong", "[green]yes[/]" if ok else "[red]NO[/]")
    console.print(t)
    # cost at scale: each erratum's realistic workload, on the revisions it affects
    from cosim.build import Variant
    from cosim.jobs import JobFailed, run_job
    from workarounds import ERRATA
    from workarounds.registry import ASSESSED_REVISIONS

    for rev in ASSESSED_REVISIONS:
        ids = [e.id for e in ERRATA if rev in e.affected and e.scale]
        if not ids:
            continue
        try:
            recs = run_job("firstlight.sim_jobs:errata_scale_job", {"ids": ids, "seed": args.seed},
                           variant=Variant(revision=rev), sim=args.sim).records
        except JobFailed as exc:
            problems.append(f"{rev}: scale job failed: {exc}")
            recs = exc.records
        for r in recs:
            if r.get("type") == "scale":
                costs.setdefault(r["id"], {}).setdefault(rev, {}).setdefault("scale", {})[r["policy"]] = r["cycles"]
    COSTS_PATH.write_text(json.dumps(costs, indent=2, sort_keys=True) + "\n")
    DOCS_PATH.write_text(render(costs))
    console.print(f"wrote {COSTS_PATH} and {DOCS_PATH}")
    for p in problems:
        err_console.print(f"[bold red]UNEXPECTED:[/] {p}")
    return EXIT_FAIL if problems else EXIT_OK


def _docs(args, console, err_console) -> int:
    from workarounds.docs import render

    text = render()
    if args.check:
        current = DOCS_PATH.read_text() if DOCS_PATH.exists() else ""
        if current != text:
            err_console.print(f"{DOCS_PATH} is stale: run `firstlight errata docs`")
            return EXIT_FAIL
        console.print(f"{DOCS_PATH} is current")
        return EXIT_OK
    DOCS_PATH.write_text(text)
    console.print(f"wrote {DOCS_PATH}")
    return EXIT_OK


__all__ = ["cmd_errata", "run_matrix", "expected_cell_pass", "EXIT_CANNOT_START"]
