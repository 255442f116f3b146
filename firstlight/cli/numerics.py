"""``firstlight numerics``: SQNR of every quantization recipe on the RTL; with ``--special``,
the max ulp error of the vector unit's special functions over their documented range.

The command only checks its arguments; the report itself is :func:`firstlight.numerics.run_numerics`
(and, for ``--special``, golden/special.py's measurement, spread over processes).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from firstlight.errors import EXIT_FAIL, EXIT_HARNESS_ERROR, EXIT_OK, CannotStart, exit_codes_help

from .common import (
    Tracked,
    refuse_unused,
    Reporter,
    add_rev_option,
    add_seed_option,
    add_sim_option,
    console,
    positive,
    require_sim,
    uses_build_cache,
)

__all__ = ["add_parser", "cmd"]


def add_parser(subparsers) -> None:
    nu = subparsers.add_parser(
        "numerics", help="SQNR of every quantization recipe on the RTL (table, JSON, PNG plot)",
        description="Runs each recipe x distribution x K on the chip, reports SQNR vs a float64 "
        "ideal, checks the chip's bits against the golden, shows erratum FL-NU-001 "
        "vulnerable vs mitigated, and runs flash attention with P in int8, FP8 E4M3 and E5M2.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=exit_codes_help("the RTL's bits differ from the golden, or a job did not finish"))
    nu.set_defaults(handler=cmd)
    uses_build_cache(nu)
    add_sim_option(nu)
    add_rev_option(nu, default="B0", help="revision for the main table (default B0: its FP path is as specified)")
    nu.add_argument("--recipes", nargs="+", default=None, metavar="RECIPE", help="default: all (see golden/quant.py)")
    nu.add_argument("--dists", nargs="+", default=None, metavar="DIST", help="normal, outliers, small (default: all)")
    nu.add_argument("--k", nargs="+", type=positive, default=[64, 256, 1024], metavar="K",
                    help="inner dimensions of the GEMMs (default: 64 256 1024)")
    nu.add_argument("--m", type=positive, default=32, help="rows of A and C (default: 32)")
    nu.add_argument("--n", type=positive, default=32, help="columns of B and C (default: 32)")
    add_seed_option(nu)
    nu.add_argument("--report", type=Path, default=None, metavar="DIR", help="write numerics.json and numerics.png")
    nu.add_argument("--no-erratum", action="store_true", help="skip the FL-NU-001 comparison (two more builds)")
    at = nu.add_argument_group(
        "attention", "flash attention with each attention recipe (P and V in int8, FP8 E4M3 or E5M2; Q and K int8) on "
        "N(0, 1) data: output SQNR vs float64, the RTL's bits vs the kernel golden, and the SQNR with one stage "
        "(QK^T, P, V) taken out of the quantization (where the error comes from)")
    at.add_argument("--attention-seq", nargs="+", type=positive, default=[64, 128, 256], metavar="SEQ", action=Tracked,
                    help="sequence lengths (default: 64 128 256)")
    at.add_argument("--attention-dim", type=positive, default=64, metavar="D", action=Tracked, help="head dimension (default: 64)")
    at.add_argument("--attention-recipes", nargs="+", default=None, metavar="NAME", action=Tracked,
                    help="default: all (int8, fp8-e4m3, fp8-e5m2; see run attention --help)")
    at.add_argument("--no-attention", action="store_true", help="skip the attention section")
    sp = nu.add_argument_group(
        "special functions", "--special measures the special functions' algorithms (golden/special.py, which the "
        "RTL matches bit for bit) against float64 over every fp32 input of their documented range; no simulator "
        "runs. Every input: ~14 minutes on 2 cores for exp; --stride 97 takes every 97th.")
    from golden.special import SPECIAL_FUNCTIONS

    sp.add_argument("--special", nargs="*", metavar="FN", default=None,
                    help=f"measure these functions (default with no names: all; known: {', '.join(SPECIAL_FUNCTIONS)})")
    sp.add_argument("--stride", type=positive, default=1, metavar="N", help="every Nth input (default 1: all)")
    sp.add_argument("--workers", type=positive, default=None, metavar="N", help="processes (default: one per core)")


def _quiet_worker() -> None:
    """A --special worker: SIGTERM (the parent ending the pool on any signal) ends it at once,
    with no traceback (Ctrl-C is the parent's: ignored from birth, firstlight/workers.py)."""
    import signal

    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _measure(args):
    from golden.special import measure_chunk

    return measure_chunk(*args)


def cmd_special(args) -> int:
    from firstlight.workers import spawn_pool
    import os

    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from golden.special import SPECIAL_FUNCTIONS, domain_chunks, merge

    from .common import FittedTable, err_console

    names = args.special or list(SPECIAL_FUNCTIONS)
    for n in names:
        if n not in SPECIAL_FUNCTIONS:
            raise CannotStart(f"unknown special function {n!r}; known: {', '.join(SPECIAL_FUNCTIONS)}")
    rows = []
    workers = args.workers or os.cpu_count() or 1
    # a pool that ends on any signal: once a concurrent.futures pool printed a traceback on SIGTERM,
    # hung in its exit, and a second SIGINT left its workers re-parented to init, ignoring signals
    pool = spawn_pool(workers, initializer=_quiet_worker)
    try:
        with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                      console=err_console, transient=True) as progress:
            for name in names:
                pieces = domain_chunks(name, args.stride)
                task = progress.add_task(f"{name}: chunks of inputs", total=len(pieces))
                results = []
                for r in pool.imap(_measure, [(name, piece) for piece in pieces]):
                    results.append(r)
                    progress.advance(task)
                s = merge(results)
                lo, hi = SPECIAL_FUNCTIONS[name][2]
                rows.append([name, f"[{lo}, {hi}]", f"{s['count']:,}", f"{s['max_ulp']:.4f}",
                             f"{s['worst_x']!r} (0x{s['worst_bits']:08x})", f"{100 * s['correctly_rounded']:.3f}%"])
        pool.close()
    except BaseException:
        pool.terminate()  # SIGTERM to every worker, then joined: none outlives the command
        raise
    finally:
        pool.join()
    what = "every input" if args.stride == 1 else f"every {args.stride}th input"
    console.print(FittedTable(f"Special functions vs float64 ({what} of the documented range)",
                              ["function", "range", "inputs", "max ulp", "worst at", "correctly\nrounded"], rows))
    return EXIT_OK


def cmd(args) -> int:
    if args.no_attention:
        refuse_unused(args, "--no-attention", ("attention_seq", "attention_dim", "attention_recipes"))
    if args.special is not None:
        return cmd_special(args)
    from firstlight.numerics import run_numerics
    from golden.distributions import DISTRIBUTIONS
    from golden.quant import RECIPES

    require_sim(args.sim)
    recipes = args.recipes or list(RECIPES)
    dists = args.dists or list(DISTRIBUTIONS)
    for r in recipes:
        if r not in RECIPES:
            raise CannotStart(f"unknown recipe {r!r}; known: {', '.join(RECIPES)}")
    for d in dists:
        if d not in DISTRIBUTIONS:
            raise CannotStart(f"unknown distribution {d!r}; known: {', '.join(DISTRIBUTIONS)}")
    from golden.attention_recipes import ATTENTION_RECIPES

    for r in args.attention_recipes or []:
        if r not in ATTENTION_RECIPES:
            raise CannotStart(f"unknown attention recipe {r!r}; accepted: {', '.join(ATTENTION_RECIPES)}")
    res = run_numerics(sim=args.sim, revision=args.rev, recipes=recipes, dists=dists, ks=args.k, m=args.m, n=args.n,
                       seed=args.seed, report_dir=args.report, out=Reporter(console), erratum=not args.no_erratum,
                       attention_seqs=None if args.no_attention else args.attention_seq,
                       attention_dim=args.attention_dim, attention_recipes=args.attention_recipes)
    if res.get("harness_error"):
        return EXIT_HARNESS_ERROR
    return EXIT_OK if res["all_bit_identical"] and not res["error"] else EXIT_FAIL
