"""``firstlight numerics``: SQNR of every quantization recipe on the RTL.

The command only checks its arguments; the report itself is :func:`firstlight.numerics.run_numerics`.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from firstlight.errors import EXIT_FAIL, EXIT_HARNESS_ERROR, EXIT_OK, CannotStart, exit_codes_help

from .common import (
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
        "ideal, checks the chip's bits against the golden, and shows erratum FL-NU-001 "
        "vulnerable vs mitigated.", formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=exit_codes_help("the RTL's bits differ from the golden, or a job did not finish"))
    nu.set_defaults(handler=cmd)
    uses_build_cache(nu)
    add_sim_option(nu)
    add_rev_option(nu, default="B0", help="revision for the main table (default B0: its FP path is as specified)")
    nu.add_argument("--recipes", nargs="+", default=None, metavar="RECIPE", help="default: all (see golden/quant.py)")
    nu.add_argument("--dists", nargs="+", default=None, metavar="DIST", help="normal, outliers, small (default: all)")
    nu.add_argument("--k", nargs="+", type=positive, default=[64, 256, 1024], metavar="K")
    nu.add_argument("--m", type=positive, default=32)
    nu.add_argument("--n", type=positive, default=32)
    add_seed_option(nu)
    nu.add_argument("--report", type=Path, default=None, metavar="DIR", help="write numerics.json and numerics.png")
    nu.add_argument("--no-erratum", action="store_true", help="skip the FL-NU-001 comparison (two more builds)")


def cmd(args) -> int:
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
    res = run_numerics(sim=args.sim, revision=args.rev, recipes=recipes, dists=dists, ks=args.k, m=args.m, n=args.n,
                       seed=args.seed, report_dir=args.report, out=Reporter(console), erratum=not args.no_erratum)
    if res.get("harness_error"):
        return EXIT_HARNESS_ERROR
    return EXIT_OK if res["all_bit_identical"] and not res["error"] else EXIT_FAIL
