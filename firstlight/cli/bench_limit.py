"""``firstlight bench --limit``: harness cycles/s against the bare Verilator limit of the same
Verilog and the same stimulus (firstlight/jobs/limit.py), per chip and shape."""

from __future__ import annotations

import json
import sys
import time
from dataclasses import replace

from firstlight.errors import EXIT_FAIL, EXIT_HARNESS_ERROR, EXIT_OK, CannotStart

from .common import FittedTable, console, err_console, fmt_pct, plain, require_sim, variant_from_args

__all__ = ["DEFAULT_LIMIT_SHAPES", "LIMIT_COLUMNS", "limit_cmd"]

DEFAULT_LIMIT_SHAPES = ["256x256x256"]

LIMIT_COLUMNS = (
    ("chip", "chip", str),
    ("shape", "shape", str),
    ("cycles", "cycles", lambda v: f"{v:,}"),
    ("harness\ncyc/s", "harness_cycles_per_s", lambda v: f"{v:,.0f}"),
    ("limit\ncyc/s", "limit_cycles_per_s", lambda v: f"{v:,.0f}"),
    ("harness\n/ limit", "ratio", lambda v: f"{v:.2f}"),
    ("ratio\nper run", "ratios", lambda v: " ".join(f"{x:.2f}" for x in v)),
    ("Python\nshare", "python_share", fmt_pct),
)


def _chips(args) -> list:
    """The chips to measure: the one --formats/--no-vector name, else the FP chip and the
    int8-only chip of --array."""
    base = variant_from_args(args)
    if args.formats:
        return [base]
    return [base, replace(base, config=replace(base.config, formats=("int8",)))]


def limit_cmd(args, shapes: list[list[int]]) -> int:
    from cosim.build import BuildFailed, HarnessError
    from firstlight.jobs.limit import LimitMeasureError, measure_limit

    if args.sims and args.sims != ["verilator"]:
        raise CannotStart("--limit measures Verilator (the bare reference is a Verilator build): "
                          "drop --sims or give --sims verilator")
    require_sim("verilator")
    chips = _chips(args)
    rows, failed, harness = [], False, False
    t0 = time.monotonic()

    def progress(msg: str) -> None:
        err_console.print(plain((f"[{time.monotonic() - t0:6.0f} s] ", "dim"), msg), highlight=False)

    for variant in chips:
        for shape in shapes:
            try:
                row = measure_limit(variant, shape, reps=args.reps, seed=args.seed, progress=progress)
            except LimitMeasureError as e:
                err_console.print(plain(("failed: ", "red"), str(e)))
                failed = True
                continue
            except (HarnessError, BuildFailed) as e:
                err_console.print(plain(("harness error: ", "red"), str(e)))
                harness = True
                continue
            d = row.as_dict()
            d["ratios"] = [h / lim for h, lim in zip(row.harness_runs, row.limit_runs)]
            rows.append(d)
    title = (f"Harness against the bare Verilator limit (same Verilog, same stimulus replayed by a Verilog driver; "
             f"revision {args.rev}; median of {args.reps} alternating pairs; cycles/s over the kernel's window)")
    console.print(FittedTable(title, [h for h, _, _ in LIMIT_COLUMNS],
                              [[fmt(r[k]) for _, k, fmt in LIMIT_COLUMNS] for r in rows], keys=2))
    if args.json:
        from firstlight.provenance import with_provenance

        args.json.write_text(json.dumps(with_provenance(rows, "verilator", getattr(args, "command_line", None)), indent=2))
    sys.stdout.flush()
    return EXIT_HARNESS_ERROR if harness else EXIT_FAIL if failed else EXIT_OK
