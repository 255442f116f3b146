"""``firstlight faults``: the fault universe of a chip, and coverage campaigns over it."""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from pathlib import Path

from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from firstlight.errors import EXIT_FAIL, EXIT_OK, Interrupted, exit_codes_help

from .common import (
    CannotStart,
    add_array_option,
    add_junit_option,
    add_formats_option,
    add_rev_option,
    add_sram_depth_option,
    add_seed_option,
    add_sim_option,
    FittedTable,
    console,
    err_console,
    fault_registers_help,
    plain,
    positive,
    require_sim,
    uses_build_cache,
    variant_from_args,
)

__all__ = ["add_parser", "cmd"]

# A universe larger than this is run only when asked (--all); a fault takes about this many
# seconds of one worker (the small chip, `--sample 120 --formats int8 --sram-depth 64` in ~3 min on 2)
ASK_ABOVE = 2000
SECONDS_PER_FAULT = 3.0

EPILOG = """\
A campaign builds one chip with a fault-select port (cached like every build), checks that it
passes the checklist with no fault, then runs the checklist once per fault, in parallel, each
run stopping at the first failing stage. A fault is detected when a stage meant for its kind
fails and names its site, misattributed when a stage fails but blames something else,
undetected when every stage passes (an escape: the report gives the --inject command that
reproduces it), error when the harness could not tell.

examples:
  firstlight faults list                                   the fault universe, kind by kind
  firstlight faults campaign --sample 120 --formats int8 --sram-depth 64    a quick one (~3 min)
  firstlight faults campaign --sample 500 --seed 7 --report out/campaign  the default chip

"""


_EXIT = exit_codes_help("the campaign ran but detected fewer faults than --min-coverage",
                        "the campaign ran and met --min-coverage")


def _percent(text: str) -> float:
    """A coverage percentage: a number in [0, 100] (150 could never be met)."""
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a percentage such as 99 or 99.5, not {text!r}") from None
    if not 0.0 <= v <= 100.0:
        raise argparse.ArgumentTypeError(f"a coverage percentage is in [0, 100], not {text}")
    return v


def add_parser(subparsers) -> None:
    fp = subparsers.add_parser("faults", help="the fault universe and coverage campaigns of the checklist",
                               description="Inject faults into the RTL and measure what the bring-up "
                               "checklist catches.", epilog=EPILOG + "\n" + _EXIT,
                               formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = fp.add_subparsers(dest="faults_command", required=True, metavar="SUBCOMMAND")
    ls = sub.add_parser("list", help="every kind of fault, its syntax and how many sites the chip has",
                        epilog=exit_codes_help(), formatter_class=argparse.RawDescriptionHelpFormatter)
    _chip_options(ls)
    ls.set_defaults(handler=cmd_list)
    cp = sub.add_parser("campaign", help="run the checklist on faulty chips and report the coverage",
                        epilog=EPILOG + "\n" + _EXIT, formatter_class=argparse.RawDescriptionHelpFormatter)
    uses_build_cache(cp)
    _chip_options(cp)
    add_sim_option(cp)
    cp.add_argument("--sample", type=positive, default=None, metavar="N",
                    help="a seeded random sample of N faults, spread evenly over the kinds")
    cp.add_argument("--all", action="store_true", dest="all_faults",
                    help=f"every fault of the universe (millions on the default chip); without --sample or --all a "
                         f"universe of more than {ASK_ABOVE:,} faults is refused with an estimate of its time")
    add_seed_option(cp, help="seed of the sample and of the checklist's random data (default 1)")
    cp.add_argument("--workers", type=positive, default=None, metavar="N",
                    help="simulator processes at once (default: one per core)")
    cp.add_argument("--report", type=Path, default=None, metavar="DIR",
                    help="write campaign.json and campaign.md here")
    cp.add_argument("--min-coverage", type=_percent, default=0.0, metavar="PCT",
                    help="exit 1 if fewer than PCT%% of the faults are detected, PCT in [0, 100] (default 0: report "
                         "only)")
    add_junit_option(cp, "fault (failed: not detected or misattributed; error: the harness could not tell)")
    cp.add_argument("--watchdog", type=positive, default=1_000_000, metavar="CYCLES",
                    help="cycle budget of every wait for the chip (default 1000000)")
    cp.set_defaults(handler=cmd_campaign)


def _duration(s: float) -> str:
    return f"{s / 3600:,.1f} hours" if s >= 5400 else f"{s / 60:,.0f} min" if s >= 90 else f"{s:.0f} s"


def _check_size(args, cfg) -> None:
    """Refuse a whole universe too large to run by accident (before it is built in memory), with
    what it would take and what to give instead."""
    import os

    from firstlight.faults.campaign import campaign_universe

    if args.all_faults and args.sample is not None:
        raise CannotStart("--all and --sample contradict each other: give one (every fault, or a sample of N)")
    if args.all_faults or args.sample is not None:
        return
    total = sum(sp.size for sp in campaign_universe(cfg))
    if total <= ASK_ABOVE:
        return
    workers = args.workers or os.cpu_count() or 1
    raise CannotStart(f"the fault universe of this chip is {total:,} faults: about "
                      f"{_duration(total * SECONDS_PER_FAULT / workers)} on {workers} workers (about "
                      f"{SECONDS_PER_FAULT:g} s a fault each); give --sample N (--sample 500: about "
                      f"{_duration(min(500, total) * SECONDS_PER_FAULT / workers)}) or --all to run every one")


def _chip_options(p) -> None:
    add_rev_option(p, help="revision to build (default A0)")
    add_array_option(p)
    add_formats_option(p)
    add_sram_depth_option(p)


def _config(args):
    return variant_from_args(args).config


def cmd_list(args) -> int:
    from rtl.faults import FAULT_FORMS, universe

    cfg = _config(args)
    t = Table(title=f"fault universe of the {cfg.rows}x{cfg.cols} chip ({'/'.join(cfg.formats)}, "
                    f"SRAMs {cfg.operand_depth} words)")
    t.add_column("kind")
    t.add_column("faults", justify="right", no_wrap=True)
    for space in universe(cfg):
        t.add_row(space.name, f"{space.size:,}")
    console.print(t)
    console.print("syntax (--inject):")
    for form, note in FAULT_FORMS:
        console.print(f"  {escape(form)}\n      [dim]{escape(note)}[/]", emoji=False, soft_wrap=True)
    console.print(plain(fault_registers_help()), soft_wrap=True)
    return EXIT_OK


def _reproduce(spec: str, args) -> str:
    parts = ["firstlight", "bringup", "--inject", spec, "--rev", args.rev]
    if args.array:
        parts += ["--array", args.array]
    if args.formats:
        parts += ["--formats", *args.formats]
    if args.sram_depth:
        parts += ["--sram-depth", str(args.sram_depth)]
    return shlex.join(parts)


def cmd_campaign(args) -> int:
    from firstlight.faults.campaign import run_campaign, sample_faults, write_report

    require_sim(args.sim)
    cfg = _config(args)
    _check_size(args, cfg)
    specs = sample_faults(cfg, args.sample, args.seed)
    err_console.print(f"campaign: {len(specs)} faults on revision {args.rev}, {args.sim}; building the "
                      "campaign chip (cached after the first time)...", highlight=False)
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=err_console, transient=True) as progress:
        task = progress.add_task("faults", total=len(specs))
        escapes = []
        done = [0]

        def on_result(r):
            progress.advance(task)
            done[0] += 1
            if not err_console.is_terminal and (done[0] % 25 == 0 or done[0] == len(specs)):
                err_console.print(f"{done[0]}/{len(specs)} faults done, {len(escapes)} not detected", highlight=False)
            if r["verdict"] not in ("detected", "redundant"):
                escapes.append(r)
                progress.console.print(f"{r['verdict']}: {escape(r['fault'])}", highlight=False, emoji=False)

        started = []
        try:
            result = run_campaign(cfg, args.rev, args.sim, specs, seed=args.seed, workers=args.workers,
                                  watchdog=args.watchdog, on_result=on_result, on_start=started.append)
        except (Interrupted, KeyboardInterrupt):
            if started and args.report:  # keep every verdict so far
                partial = started[0]
                partial.interrupted = True
                partial.wall_s = round(time.perf_counter() - partial.started, 1)
                command = getattr(args, "command_line", shlex.join(["firstlight", *sys.argv[1:]]))
                for path in write_report(partial, args.report, command + f"  (interrupted after "
                                         f"{len(partial.results)} of {len(specs)} faults)"):
                    err_console.print(f"wrote {path} (partial)", highlight=False)
            raise
    _print(result)
    bad = [r for r in result.results if r["verdict"] not in ("detected", "redundant")]
    if bad:
        console.print("not detected as they should be (reproduce with the command shown):")
        for r in bad:
            where = f" -- first failing stage {r['stage']}: {r['details'][:160]}" if r["stage"] else ""
            console.print(f"  {r['verdict']}: {escape(_reproduce(r['fault'], args))}{escape(where)}",
                          highlight=False, emoji=False)
    if args.report:
        command = getattr(args, "command_line", shlex.join(["firstlight", *sys.argv[1:]]))
        for p in write_report(result, args.report, command):
            console.print(f"wrote {escape(str(p))}", highlight=False)
    if args.junit:
        from firstlight.junit import Case, write_junit

        status = {"detected": "passed", "redundant": "skipped", "undetected": "failed", "misattributed": "failed",
                  "error": "error"}
        cases = [Case(r["fault"], f"firstlight.faults.{r['kind']}", status[r["verdict"]],
                      f"{r['verdict']}" + (f" (stage {r['stage']})" if r.get("stage") else "")
                      + (f": {r['details'][:300]}" if r.get("details") else ""), r.get("details") or "",
                      r.get("seconds", 0.0)) for r in result.results]
        write_junit(args.junit, f"firstlight faults campaign {args.rev} ({args.sim})", cases,
                    {"revision": args.rev, "sim": args.sim, "seed": args.seed,
                     "coverage_pct": round(result.coverage(), 3)})
        console.print(f"wrote {escape(str(args.junit))}", highlight=False)
    return EXIT_OK if result.coverage() >= args.min_coverage else EXIT_FAIL


def _print(result) -> None:
    tot = result.totals()
    rows = [[kind, f"{result.universe.get(kind, 0):,}", row["faults"], row["redundant"], row["detected"],
             row["misattributed"], row["undetected"], row["error"]] for kind, row in result.by_kind().items()]
    rows.append(["all", "", tot["faults"], tot["redundant"], f"{tot['detected']} ({result.coverage():.1f}%)",
                 tot["misattributed"], tot["undetected"], tot["error"]])
    console.print(FittedTable(f"fault coverage: revision {result.revision}, {result.sim}, seed {result.seed} "
                              f"(build {result.build_s:.0f} s, wall {result.wall_s:.0f} s)",
                              ["kind", "universe", "run", "redundant", "detected", "misattrib.", "undetected", "error"],
                              [[str(c) for c in r] for r in rows]))
    console.print(FittedTable("first failing stage", ["stage", "faults"],
                              [[stage, str(n)] for stage, n in sorted(result.by_stage().items(), key=lambda kv: -kv[1])]))
