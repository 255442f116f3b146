"""``firstlight mutants``: the race checker's score against the RTL (firstlight/mutants.py)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from firstlight.errors import EXIT_FAIL, EXIT_OK, CannotStart, exit_codes_help

from .common import (FittedTable, add_json_option, add_seed_option, add_sim_option, check_output_file, console,
                     err_console, plain, positive, require_sim, uses_build_cache)

__all__ = ["add_parser", "cmd"]


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "mutants", help="score the race checker: every mutant of every kernel's stream, checked and run on the RTL",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="For each tile-language kernel at two shapes (its bring-up shape and its defaults), compile it "
                    "for revision B1 and make every mutant of its stream that deletes one wait, deletes one signal or "
                    "moves one wait a command later. Each mutant goes through the happens-before checker "
                    "(interp/races.py) and runs on the RTL against the golden. The table says how many the checker "
                    "flagged, how many the RTL got wrong (corrupt output, a hang, an ERR), and the cross-tab: a mutant "
                    "wrong on the RTL and not flagged is a miss (the target is none), a flagged one right on the RTL "
                    "is a race this timing hid.",
        epilog=exit_codes_help("the checker missed a mutant the RTL got wrong, or flagged an unmutated stream")
        + "\n\nexamples:\n  firstlight mutants --kernel softmax gemm --sample 40\n  firstlight mutants --json m.json")
    p.set_defaults(handler=cmd)
    p.add_argument("--kernel", dest="kernels", nargs="+", default=None, metavar="NAME",
                   help="kernels of the registry (default: every one)")
    p.add_argument("--sample", type=positive, default=None, metavar="N",
                   help="a seeded sample of at most N mutants per kernel and shape (default: every mutant)")
    add_seed_option(p, help="seed of the inputs and of --sample (default: 1)")
    add_sim_option(p)
    add_json_option(p, help="also write every case and mutant as JSON")
    uses_build_cache(p)


def cmd(args) -> int:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from firstlight.mutants import COLUMNS, LEGEND, cases, score
    from kernels.tile.spec import registry

    require_sim(args.sim)
    known = registry()
    bad = [k for k in args.kernels or [] if k not in known]
    if bad:
        raise CannotStart(f"unknown kernel {', '.join(bad)}; the registry has: {', '.join(known)}")
    if args.json:
        check_output_file(args.json, "--json")
    todo = cases(list(dict.fromkeys(args.kernels)) if args.kernels else None)
    console.print(plain(("firstlight mutants", "bold"), f": {len(todo)} kernel shapes on {args.sim}, revision B1, "
                        f"seed {args.seed}" + (f", at most {args.sample} mutants each" if args.sample else "")))
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=err_console, transient=True) as progress:
        task = progress.add_task("kernel shapes", total=len(todo))

        def done(c):
            progress.advance(task)
            r = c.row()
            msg = (f"{c.label}: {r['mutants']} mutants, {r['flagged']} flagged, {r['exposed']} wrong on the RTL, "
                   f"{r['missed']} missed")
            progress.console.print(msg, highlight=False) if err_console.is_terminal else \
                err_console.print(msg, highlight=False)

        scored = score(todo, sim=args.sim, seed=args.seed, sample=args.sample, on_case=done)
    rows = [c.row() for c in scored]
    total = {k: sum(r[k] for r in rows) for k, _ in COLUMNS[1:]}
    table = [[r[k] for k, _ in COLUMNS] for r in rows] + [["all", *[total[k] for k, _ in COLUMNS[1:]]]]
    console.print(FittedTable("race checker against the RTL", [h for _, h in COLUMNS], table))
    console.print(plain(LEGEND))
    hidden = total["flagged_hidden"]
    console.print(plain(
        f"{total['flagged_exposed']} of {total['exposed']} mutants wrong on the RTL were flagged "
        f"({_pct(total['flagged_exposed'], total['exposed'])}); {total['missed']} missed; "
        f"{total['unmutated_flagged']} unmutated streams flagged; {hidden} of {total['flagged']} flagged mutants "
        f"({_pct(hidden, total['flagged'])}) ran right on the RTL: races this timing hid"))
    for c, r in zip(scored, rows):
        for f in c.unmutated_flagged[:3]:
            err_console.print(plain(("FLAGGED ", "red"), f"{c.label} unmutated: {f}"))
        for kind, i in r["missed_mutants"][:5]:
            err_console.print(plain(("MISSED ", "red"), f"{c.label}: {kind} at command {i} ({c.rtl[(kind, i)]} on "
                                    "the RTL, not flagged)"))
        if c.unmutated_rtl != "correct":
            err_console.print(plain(("RTL ", "red"), f"{c.label}: the unmutated stream ran {c.unmutated_rtl}"))
    if args.json:
        from firstlight.provenance import with_provenance

        doc = {"rows": rows, "total": total, "cases": [
            {"case": c.label, "kernel": c.kernel, "params": c.params, "unmutated_flagged": c.unmutated_flagged,
             "mutants": [{"kind": k, "index": i, "flagged": f, "finding": why, "rtl": c.rtl.get((k, i))}
                         for k, i, f, why in c.mutants]} for c in scored]}
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(with_provenance(doc, args.sim, args.command_line), indent=2, default=str))
        console.print(plain(f"wrote {args.json}"))
    ok = total["missed"] == 0 and total["unmutated_flagged"] == 0 and all(c.unmutated_rtl == "correct" for c in scored)
    return EXIT_OK if ok else EXIT_FAIL


def _pct(a: int, b: int) -> str:
    return f"{100 * a / b:.1f}%" if b else "n/a"
