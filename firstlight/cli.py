"""The ``firstlight`` command line."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from firstlight.errors import EXIT_CANNOT_START, EXIT_FAIL, EXIT_OK, CannotStart

console = Console()
err_console = Console(stderr=True, soft_wrap=True)  # never break a message mid-command

EPILOG = """\
examples:
  firstlight run gemm --m 37 --n 19 --k 100            int8 GEMM on Verilator, 4x4 array
  firstlight run gemm --m 128 --n 128 --k 128 --array 8x8 --sim icarus
  firstlight run reduce --rows 8 --cols 100 --op max
  firstlight bench                                       cycles/utilisation/throughput table
  firstlight bringup --inject sram:ACC:stuck1:addr=5:bit=70   the checklist on a chip with a bad cell
  firstlight numerics --report out                       SQNR of every FP8/MX/int8 recipe, PNG plot
  firstlight errata list --rev A0                        what each erratum means for a revision

exit codes: 0 passed, 1 a check failed, 2 could not start (bad arguments, missing simulator).
Simulator builds are cached under $FIRSTLIGHT_CACHE (default ~/.cache/firstlight).
"""


def _int_at_least(lowest: int, what: str):
    """An argparse type: an integer >= ``lowest``, with a message naming what was expected."""

    def parse(text: str) -> int:
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
        if v < lowest:
            raise argparse.ArgumentTypeError(f"expected {what}, got {v}")
        return v

    return parse


_positive = _int_at_least(1, "a positive integer")
_seed = _int_at_least(0, "a non-negative integer seed (numpy's rule)")


def _array(text: str):
    from rtl.config import ChipConfig

    try:
        return ChipConfig.parse_array(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _revision(text: str) -> str:
    from rtl.revisions import REVISIONS

    if text not in REVISIONS:
        raise argparse.ArgumentTypeError(f"unknown revision {text!r}; known revisions: {', '.join(REVISIONS)}")
    return text


def _policy(items: list[str]) -> dict[str, str]:
    from workarounds import parse_policy

    try:
        return parse_policy(items)
    except ValueError as e:
        raise CannotStart(str(e)) from None


def _add_formats(p: argparse.ArgumentParser) -> None:
    p.add_argument("--formats", nargs="+", default=None, metavar="FMT",
                   help="MATMUL formats to build the chip with (int8 e4m3 e5m2 e2m1, default all); an "
                   "int8-only chip builds ~3x faster and simulates ~3.5x faster")


def _add_common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--sim", default="verilator", choices=["verilator", "icarus"],
                   help="simulator to run on (default: verilator)")
    p.add_argument("--array", type=_array, default=None, metavar="ROWSxCOLS",
                   help="systolic array size, e.g. 4x4 (default) or 8x8")
    p.add_argument("--seed", type=_seed, default=1, help="seed for the random operands (default: 1)")
    p.add_argument("--json", type=Path, default=None, metavar="PATH", help="also write the result as JSON")
    p.add_argument("--waves", action="store_true", help="record a waveform of the run and print its path (VCD on Verilator, FST on Icarus)")
    p.add_argument("--extremes", action="store_true", help="draw operands from the extreme values only")
    p.add_argument("--rev", default="A0", type=_revision, help="silicon revision to build: A0 (default), A1, B0; "
                   "the kernels read REV from the chip and apply that revision's mitigations")
    p.add_argument("--errata-policy", action="append", default=[], metavar="ID=auto|on|off",
                   help="override one erratum's mitigation (repeatable), e.g. FL-ME-002=off")
    _add_formats(p)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="firstlight",
        description="Bring-up harness for a small AI accelerator: real Amaranth RTL on Verilator or "
        "Icarus under cocotb, kernels checked against numpy goldens.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = sub.add_parser("run", help="run one kernel on random data and check it against the golden",
                         formatter_class=argparse.RawDescriptionHelpFormatter)
    run_sub = run.add_subparsers(dest="kernel", required=True, metavar="KERNEL")
    g = run_sub.add_parser("gemm", help="int8 x int8 -> int32 GEMM, C = A(MxK) @ B(KxN)")
    g.add_argument("--m", type=_positive, required=True, help="rows of A and C")
    g.add_argument("--n", type=_positive, required=True, help="columns of B and C")
    g.add_argument("--k", type=_positive, required=True, help="inner dimension")
    _add_common(g)
    r = run_sub.add_parser("reduce", help="int32 row reduction (sum wraps modulo 2**32)")
    r.add_argument("--rows", type=_positive, required=True)
    r.add_argument("--cols", type=_positive, required=True)
    r.add_argument("--op", choices=["sum", "max", "min"], required=True)
    _add_common(r)

    b = sub.add_parser("bench", help="GEMM benchmark table: cycles, utilisation, simulator throughput")
    b.add_argument("--sims", nargs="+", default=None, choices=["verilator", "icarus"],
                   help="simulators to measure (default: every installed one)")
    b.add_argument("--shapes", nargs="+", default=None, metavar="MxNxK",
                   help="GEMM shapes (default: 16x16x16 32x32x32 64x64x64 128x128x128 256x256x256; "
                   "Icarus stops at 128^3 unless shapes are given)")
    b.add_argument("--array", type=_array, default=None, metavar="ROWSxCOLS")
    b.add_argument("--rev", default="A0", type=_revision, help="silicon revision (default A0, mitigations on)")
    _add_formats(b)
    b.add_argument("--seed", type=_seed, default=1)
    b.add_argument("--json", type=Path, default=None, metavar="PATH")
    bu = sub.add_parser(
        "bringup", help="the first-light checklist: reset to roofline, stage by stage",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Walk the chip up the bring-up ladder: build, reset, identity, CSR bus, memories, "
        "command path, engine smoke, errata, kernels, performance. A failed stage blocks the stages that "
        "depend on it; independent stages still run.",
        epilog="fault syntax (--inject, repeatable):\n"
        "  sram:<A|B|ACC>:<stuck0|stuck1>:addr=<n>:bit=<n>   one stuck cell\n"
        "  sram:<A|B|ACC>:alias:addr_bit=<n>                  an address line tied low\n"
        "  csr:<REGISTER>:<stuck0|stuck1>:bit=<n>             a stuck register bit\n\n"
        "exit codes: 0 every stage passed, 1 a stage failed or was blocked, 2 could not start.")
    bu.add_argument("--rev", default="A0", type=_revision, help="revision to build (default A0)")
    bu.add_argument("--sim", default="verilator", choices=["verilator", "icarus"])
    bu.add_argument("--inject", action="append", default=[], metavar="FAULT",
                    help="build with a manufacturing defect no revision has (see below)")
    bu.add_argument("--only", nargs="+", default=None, metavar="STAGE",
                    help="run these stages (and what they depend on); the others are skipped")
    bu.add_argument("--seed", type=_seed, default=1)
    bu.add_argument("--report", type=Path, default=None, metavar="DIR",
                    help="write report.json, junit.xml and report.md here")
    bu.add_argument("--array", type=_array, default=None, metavar="ROWSxCOLS")
    bu.add_argument("--watchdog", type=_positive, default=1_000_000, metavar="CYCLES",
                    help="cycle budget of every wait for the chip (default 1000000); on expiry the stage "
                    "fails with a STATUS/ERR dump")
    _add_formats(bu)
    bu.add_argument("--sram-depth", type=_positive, default=None, metavar="N",
                    help="words in every SRAM (power of two; smaller is quicker to test; default 1024)")

    nu = sub.add_parser("numerics", help="SQNR of every quantization recipe on the RTL (table, JSON, PNG plot)",
                        description="Runs each recipe x distribution x K on the chip, reports SQNR vs a float64 "
                        "ideal, checks the chip's bits against the golden, and shows erratum FL-NU-001 "
                        "vulnerable vs mitigated.")
    nu.add_argument("--sim", default="verilator", choices=["verilator", "icarus"])
    nu.add_argument("--rev", default="B0", type=_revision, help="revision for the main table (default B0: its FP "
                    "path is as specified)")
    nu.add_argument("--recipes", nargs="+", default=None, metavar="RECIPE", help="default: all (see kernels/quant.py)")
    nu.add_argument("--dists", nargs="+", default=None, metavar="DIST", help="normal, outliers, small (default: all)")
    nu.add_argument("--k", nargs="+", type=_positive, default=[64, 256, 1024], metavar="K")
    nu.add_argument("--m", type=_positive, default=32)
    nu.add_argument("--n", type=_positive, default=32)
    nu.add_argument("--seed", type=_seed, default=1)
    nu.add_argument("--report", type=Path, default=None, metavar="DIR", help="write numerics.json and numerics.png")
    nu.add_argument("--no-erratum", action="store_true", help="skip the FL-NU-001 comparison (two more builds)")

    e = sub.add_parser("errata", help="the errata registry: list, show, check on the RTL, measure costs",
                       description="Errata: what the software believes about each silicon revision, held "
                       "against the real RTL by running every reproducer.")
    e_sub = e.add_subparsers(dest="errata_cmd", required=True, metavar="ACTION")
    el = e_sub.add_parser("list", help="id, unit, category and status for a revision")
    el.add_argument("--rev", type=_revision, default=None, help="revision (default: every assessed one)")
    el.add_argument("--json", type=Path, default=None, metavar="PATH")
    es = e_sub.add_parser("show", help="one whole record, its status per revision and its measured cost")
    es.add_argument("id", help="erratum id, e.g. FL-ME-001")
    ec = e_sub.add_parser("check", help="run every reproducer on the RTL of a revision: detected vs expected")
    ec.add_argument("--rev", type=_revision, required=True)
    ec.add_argument("--sim", default="verilator", choices=["verilator", "icarus"])
    ec.add_argument("--json", type=Path, default=None, metavar="PATH")
    em = e_sub.add_parser("measure", help="run the regression matrix (revision x mitigation on/off), store the "
                          "cycle costs in workarounds/costs.json and regenerate docs/errata.md")
    em.add_argument("--sim", default="verilator", choices=["verilator", "icarus"])
    em.add_argument("--seed", type=_seed, default=1)
    ed = e_sub.add_parser("docs", help="regenerate docs/errata.md from the registry and the stored costs")
    ed.add_argument("--check", action="store_true", help="only check that the committed page is current")
    return parser


def _variant(array, revision: str = "A0", formats=None):
    from dataclasses import replace

    from cosim.build import Variant
    from rtl.config import ChipConfig

    cfg = array or ChipConfig()
    if formats:
        try:
            cfg = replace(cfg, formats=tuple(formats))
        except ValueError as e:
            raise CannotStart(f"--formats: {e}") from None
    return Variant(config=cfg, revision=revision)


def _require_sim(name: str):
    from cosim.toolchain import SimulatorMissing, find_simulator

    try:
        return find_simulator(name)
    except SimulatorMissing as e:
        raise CannotStart(str(e)) from None


def _fmt_pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def cmd_run(args) -> int:
    from cosim.jobs import JobFailed, run_job

    _require_sim(args.sim)
    policy = _policy(args.errata_policy)
    variant = _variant(args.array, args.rev, args.formats)
    if args.kernel == "gemm":
        target, kwargs = "firstlight.sim_jobs:gemm_job", {"m": args.m, "n": args.n, "k": args.k}
        shape = f"{args.m}x{args.n}x{args.k}"
    else:
        target, kwargs = "firstlight.sim_jobs:reduce_job", {"rows": args.rows, "cols": args.cols, "op": args.op}
        shape = f"{args.rows}x{args.cols} {args.op}"
    kwargs.update(seed=args.seed, extremes=args.extremes)
    cfg = variant.config
    console.print(f"[bold]firstlight run {args.kernel}[/] {shape} on a {cfg.rows}x{cfg.cols} array, "
                  f"{args.sim}, revision {args.rev}, seed {args.seed}")
    t0 = time.perf_counter()
    work = Path("firstlight-out") / f"run-{int(time.time())}" if args.waves else None
    try:
        res = run_job(target, kwargs, variant=variant, sim=args.sim, waves=args.waves, work_dir=work,
                      errata_policy=policy)
    except JobFailed as e:
        err_console.print(f"[red]FAILED[/] {e}")
        return EXIT_FAIL
    total = time.perf_counter() - t0
    v = res.value
    st = v["stats"]
    out = {
        "kernel": args.kernel,
        "shape": st["shape"],
        "array": st["array"],
        "sim": args.sim,
        "revision": st["revision"],
        "seed": args.seed,
        "passed": v["passed"],
        "mismatch": v["mismatch"],
        "cycles": st["cycles"],
        "ideal_cycles": st["ideal_cycles"],
        "utilization": st["utilization"],
        "wall_s": st["wall_s"],
        "python_share": st["python_share"],
        "sim_cycles_per_s": st["sim_cycles_per_s"],
        "mitigations": st.get("mitigations", []),
        "errata_status": st.get("errata_status", {}),
        "errata_warnings": st.get("errata_warnings", []),
        "build_s": res.build.build_s,
        "build_cache_hit": res.build.cache_hit,
        "sim_process_s": res.run_s,
        "total_s": total,
        "stats": st,
    }
    t = Table(show_header=False, box=None)
    t.add_row("result", "[green]PASS[/] (bit-exact vs golden)" if v["passed"]
              else f"[red]FAIL[/] {v['mismatch']['count']} mismatches, first {v['mismatch']}")
    t.add_row("cycles", f"{st['cycles']:,}")
    t.add_row("ideal cycles", f"{st['ideal_cycles']:,}  (roofline: {cfg.rows * cfg.cols} MACs/cycle)"
              if args.kernel == "gemm" else f"{st['ideal_cycles']:,}  (one accumulator word per cycle)")
    t.add_row("utilisation", _fmt_pct(st["utilization"]))
    t.add_row("kernel wall time", f"{st['wall_s']:.3f} s  (Python {_fmt_pct(st['python_share'])})")
    t.add_row("simulated cycles/s", f"{st['sim_cycles_per_s']:,.0f}")
    t.add_row("build", f"{res.build.build_s:.2f} s ({'cached' if res.build.cache_hit else 'compiled'})")
    t.add_row("simulator process", f"{res.run_s:.2f} s (start-up included)")
    t.add_row("mitigations applied", ", ".join(st.get("mitigations", [])) or "none")
    for err_id, status in st.get("errata_status", {}).items():
        t.add_row(f"  {err_id}", status)
    console.print(t)
    if res.waves:  # printed whole, never cut to the table width
        console.print(f"waves: {res.waves}", soft_wrap=True)
        out["waves"] = str(res.waves)
    elif args.waves:
        err_console.print(f"[yellow]no waveform file found in {work}[/]")
    for w in st.get("errata_warnings", []):
        err_console.print(f"[bold red]WARNING:[/] {w}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(out, indent=2))
        console.print(f"wrote {args.json}")
    return EXIT_OK if v["passed"] else EXIT_FAIL


def _parse_shape(text: str) -> list[int]:
    parts = text.lower().split("x")
    if len(parts) != 3 or not all(p.isdigit() and int(p) > 0 for p in parts):
        raise CannotStart(f"shape must look like MxNxK with positive integers, not {text!r}")
    return [int(p) for p in parts]


def cmd_bench(args) -> int:
    from cosim.build import build_simulator
    from cosim.jobs import JobFailed, run_job
    from cosim.toolchain import SimulatorMissing, available_simulators

    found = available_simulators()
    sims = args.sims or [s for s, info in found.items() if not isinstance(info, SimulatorMissing)]
    for s in args.sims or []:
        _require_sim(s)
    for s, info in found.items():
        if isinstance(info, SimulatorMissing) and not args.sims:
            console.print(f"[yellow]skipping {s}:[/] {info}")
    default = ["16x16x16", "32x32x32", "64x64x64", "128x128x128", "256x256x256"]
    variant = _variant(args.array, args.rev, args.formats)
    cfg = variant.config
    table = Table(title=f"GEMM on a {cfg.rows}x{cfg.cols} array, revision {args.rev} "
                  "(int8, bit-exact vs golden, errata mitigations on)")
    for col in ("sim", "shape", "result", "cycles", "ideal", "util", "sim cyc/s", "Python share",
                "kernel wall s", "build first s", "build cached s"):
        table.add_column(col, justify="right")
    rows, failed = [], False
    for s in sims:
        shapes = [_parse_shape(x) for x in (args.shapes or default)]
        if s == "icarus" and not args.shapes:
            shapes = [sh for sh in shapes if sh[0] * sh[1] * sh[2] <= 128**3]
        first = build_simulator(variant, sim=s)
        cached = build_simulator(variant, sim=s)
        try:
            res = run_job("firstlight.sim_jobs:bench_job", {"shapes": shapes, "seed": args.seed},
                          variant=variant, sim=s)
            recs = [r for r in res.records if r.get("type") == "bench"]
        except JobFailed as e:
            err_console.print(f"[red]{s}: {e}[/]")
            recs = [r for r in e.records if r.get("type") == "bench"]
            failed = True
        for r in recs:
            st = r["stats"]
            failed |= not r["passed"]
            row = {
                "sim": s, "shape": "x".join(map(str, r["shape"])), "passed": r["passed"],
                "cycles": st["cycles"], "ideal_cycles": st["ideal_cycles"], "utilization": st["utilization"],
                "sim_cycles_per_s": st["sim_cycles_per_s"], "python_share": st["python_share"],
                "wall_s": st["wall_s"], "build_first_s": first.first_build_s, "build_cached_s": cached.build_s,
            }
            rows.append(row)
            table.add_row(s, row["shape"], "pass" if r["passed"] else "[red]FAIL[/]", f"{st['cycles']:,}",
                          f"{st['ideal_cycles']:,}", _fmt_pct(st["utilization"]),
                          f"{st['sim_cycles_per_s']:,.0f}", _fmt_pct(st["python_share"]), f"{st['wall_s']:.2f}",
                          f"{first.first_build_s:.1f}" if first.first_build_s else "?", f"{cached.build_s:.3f}")
    console.print(table)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    return EXIT_FAIL if failed else EXIT_OK


def cmd_bringup(args) -> int:
    from dataclasses import replace

    from cosim.build import Variant
    from rtl.config import ChipConfig
    from rtl.faults import parse_faults

    from .bringup.plan import closure
    from .bringup.run import run_bringup

    _require_sim(args.sim)
    cfg = _variant(args.array, args.rev, args.formats).config
    if args.sram_depth:
        try:
            cfg = replace(cfg, operand_depth=args.sram_depth, acc_depth=args.sram_depth, cmdq_depth=args.sram_depth)
        except ValueError as e:
            raise CannotStart(f"--sram-depth: {e}") from None
    try:
        parse_faults(args.inject, cfg)
        if args.only:
            closure(args.only)
    except ValueError as e:
        raise CannotStart(str(e)) from None
    variant = Variant(config=cfg, revision=args.rev, faults=tuple(args.inject))
    report = run_bringup(variant=variant, sim=args.sim, seed=args.seed, only=args.only, report_dir=args.report,
                         console=console, watchdog_cycles=args.watchdog)
    return EXIT_OK if report["passed"] else EXIT_FAIL


def cmd_numerics(args) -> int:
    from kernels.quant import RECIPES

    from .distributions import DISTRIBUTIONS
    from .numerics import run_numerics

    _require_sim(args.sim)
    recipes = args.recipes or list(RECIPES)
    dists = args.dists or list(DISTRIBUTIONS)
    for r in recipes:
        if r not in RECIPES:
            raise CannotStart(f"unknown recipe {r!r}; known: {', '.join(RECIPES)}")
    for d in dists:
        if d not in DISTRIBUTIONS:
            raise CannotStart(f"unknown distribution {d!r}; known: {', '.join(DISTRIBUTIONS)}")
    res = run_numerics(sim=args.sim, revision=args.rev, recipes=recipes, dists=dists, ks=args.k, m=args.m, n=args.n,
                       seed=args.seed, report_dir=args.report, console=console, erratum=not args.no_erratum)
    return EXIT_OK if res["all_bit_identical"] and not res["error"] else EXIT_FAIL


def main(argv: list[str] | None = None) -> int:
    import logging

    from rich.logging import RichHandler

    # Long steps (a first Verilator build takes up to minutes) announce themselves on stderr.
    log = logging.getLogger("firstlight")
    if not log.handlers:
        log.addHandler(RichHandler(console=err_console, show_time=False, show_path=False))
        log.setLevel(logging.INFO)
        log.propagate = False
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # argparse: 2 on bad arguments, 0 on --help
        return int(e.code or 0)
    try:
        if args.command == "run":
            return cmd_run(args)
        if args.command == "bench":
            return cmd_bench(args)
        if args.command == "bringup":
            return cmd_bringup(args)
        if args.command == "numerics":
            return cmd_numerics(args)
        if args.command == "errata":
            from .errata_cli import cmd_errata

            return cmd_errata(args, console, err_console)
    except CannotStart as e:
        err_console.print(f"[red]cannot start:[/] {e}")
        return EXIT_CANNOT_START
    parser.error(f"unknown command {args.command}")
    return EXIT_CANNOT_START


if __name__ == "__main__":
    sys.exit(main())
