"""``firstlight bringup``: the first-light checklist, reset to roofline, stage by stage."""

from __future__ import annotations

import argparse
from pathlib import Path

from firstlight.bringup.plan import STAGE_NAMES
from firstlight.errors import EXIT_FAIL, EXIT_OK, CannotStart, exit_codes_help
from rtl.faults import FAULT_FORMS

from .common import (
    add_array_option,
    add_dram_options,
    add_formats_option,
    add_keep_option,
    add_rev_option,
    add_sram_depth_option,
    add_seed_option,
    add_sim_option,
    console,
    did_you_mean,
    fault_registers_help,
    positive,
    require_sim,
    uses_build_cache,
    variant_from_args,
)

__all__ = ["add_parser", "cmd"]


def _fault_help() -> str:
    """The ``--inject`` syntax, one form a line with what it builds, from its one declaration
    (:data:`rtl.faults.FAULT_FORMS`)."""
    width = 56
    out = []
    for form, note in FAULT_FORMS:
        out.append(f"  {form:<{width}}  {note}\n" if len(form) <= width else f"  {form}\n  {'':<{width}}  {note}\n")
    return "".join(out) + fault_registers_help() + "\n"


def parse_injected(specs: list[str], cfg, board):
    """The ``--inject`` faults (rtl.faults.parse_faults), or CannotStart saying what is accepted: a
    ``csr:`` fault whose register is not one is told the registers, with the closest name."""
    from rtl.csr_map import REG
    from rtl.faults import parse_faults

    try:
        return parse_faults(specs, cfg, board)
    except ValueError as e:
        msg = str(e)
        for spec in specs:
            parts = spec.strip().split(":")
            if parts[0].lower() == "csr" and spec in msg and (len(parts) < 2 or parts[1].upper() not in REG):
                if "registers:" not in msg:
                    msg += f"; registers: {', '.join(REG)}"
                if "unknown register" in msg:  # a name was given, not a register: the closest one
                    msg += did_you_mean(parts[1].upper(), REG)
                break
        raise CannotStart(msg) from None


def add_parser(subparsers) -> None:
    bu = subparsers.add_parser(
        "bringup", help="the first-light checklist: reset to roofline, stage by stage",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Walk the chip up the bring-up ladder: build, reset, identity, CSR bus, memories, "
        "command path, DRAM (through the DMA), DMA smoke, engine smoke, errata, kernels, performance. A failed "
        "stage blocks the stages that depend on it; independent stages still run.",
        epilog="fault syntax (--inject, repeatable):\n" + _fault_help() + "\n"
        "A stage is failed when the chip is wrong, error when the harness could not tell (a failed build, a\n"
        "corrupt cache that could not be rebuilt, a simulator that died: the details name the log and the\n"
        "signal), interrupted when SIGINT/SIGTERM arrived while it ran. The reports are written in every case.\n\n"
        + exit_codes_help("a stage failed or was blocked (the chip is wrong)", "every selected stage passed")
        + "  When both apply, 3 wins over 1: a run with a harness error is incomplete, whatever else failed.\n")
    bu.set_defaults(handler=cmd)
    uses_build_cache(bu)
    add_rev_option(bu, help="revision to build (default A0)")
    add_sim_option(bu)
    bu.add_argument("--inject", action="append", default=[], metavar="FAULT",
                    help="build with a manufacturing defect no revision has (the syntax and the register "
                         "names are below)")
    bu.add_argument("--only", nargs="+", default=None, metavar="STAGE",
                    help="run these stages (and what they depend on); the others are skipped. Stages: "
                         + ", ".join(STAGE_NAMES))
    add_seed_option(bu)
    bu.add_argument("--report", type=Path, default=None, metavar="DIR",
                    help="write report.json, junit.xml and report.md here (and the simulator's log in DIR/sim)")
    add_keep_option(bu, help="without --report: keep the simulator's folder in the system temp directory (sim.log, "
                             "records.jsonl) and print its path even when every stage passes (default: removed "
                             "then; kept and printed otherwise); with --report it is DIR/sim, always kept")
    bu.add_argument("--waves", action="store_true",
                    help="when a stage fails, run it again (with the stages it depends on, the same seed and "
                         "faults) on a build that records waveforms, and print the waveform's path (in the "
                         "simulator's folder, waves/<stage>/; with --report, DIR/sim/waves/<stage>/); the "
                         "checklist itself runs at full speed")
    add_array_option(bu)
    bu.add_argument("--watchdog", type=positive, default=1_000_000, metavar="CYCLES",
                    help="cycle budget of every wait for the chip (default 1000000); on expiry the stage "
                    "fails with a STATUS/ERR dump")
    add_formats_option(bu)
    add_sram_depth_option(bu)
    # the board's bandwidth only: the schedule model the performance stage holds the chip to does not
    # charge DRAM latency to double-buffered plans (docs/bringup.md, "The performance stage")
    add_dram_options(bu, bandwidth_only=True)


def _refuse_redundant(faults, cfg, rev: str, board) -> None:
    """A fault the fault model proves cannot change what the chip does (rtl.faults.redundant) is
    refused up front: the checklist would pass as if it had been exercised."""
    from rtl.faults import redundant
    from rtl.revisions import REVISIONS

    code = REVISIONS[rev].code
    for f in faults:
        why = redundant(f, cfg, code, board)
        if why:
            raise CannotStart(f"--inject {f.spec} is a redundant fault on this chip: {why}, so no stage can see it "
                              "and a pass would prove nothing; inject a fault that changes the chip's behaviour "
                              "(the fault campaign leaves redundant faults out for the same reason)")


def cmd(args) -> int:

    from cosim.build import Variant
    from firstlight.bringup.plan import check_faults_seen, closure
    from firstlight.bringup.run import run_bringup

    require_sim(args.sim)
    base = variant_from_args(args)
    cfg = base.config
    faults = parse_injected(args.inject, cfg, base.resolved_board)  # a DRAM fault is checked against the board's DRAM
    _refuse_redundant(faults, cfg, args.rev, base.resolved_board)
    try:
        if args.only:
            check_faults_seen(faults, closure(args.only))  # the stages that will run: --only and their dependencies
    except ValueError as e:
        raise CannotStart(str(e)) from None
    variant = Variant(config=cfg, revision=args.rev, faults=tuple(args.inject), board=base.board)
    report = run_bringup(variant=variant, sim=args.sim, seed=args.seed, only=args.only, report_dir=args.report,
                         console=console, watchdog_cycles=args.watchdog, command=getattr(args, "command_line", None),
                         keep=args.keep, waves=args.waves)
    return report.get("exit_code", EXIT_OK if report["passed"] else EXIT_FAIL)
