"""``firstlight bench``: the GEMM benchmark table (cycles, the two-sided roofline, the overlap of
DMA and compute, simulator throughput)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from rich.text import Text

from cosim.toolchain import SIMULATORS, SimulatorMissing, available_simulators
from firstlight.errors import EXIT_FAIL, EXIT_HARNESS_ERROR, EXIT_OK, CannotStart, exit_codes_help
from kernels.roofline import ROOFLINE_KEYS

from .common import (
    FittedTable,
    JobFolder,
    add_array_option,
    add_dram_options,
    add_formats_option,
    add_json_option,
    add_keep_option,
    add_rev_option,
    add_seed_option,
    console,
    err_console,
    fmt_pct,
    int_at_least,
    plain,
    require_sim,
    add_sram_depth_option,
    uses_build_cache,
    variant_from_args,
)

__all__ = ["DEFAULT_SHAPES", "COLUMNS", "add_parser", "bench_table", "row_kernel_cases", "cmd"]

DEFAULT_SHAPES = ["16x16x16", "32x32x32", "64x64x64", "128x128x128", "256x256x256", "4x512x512"]
# Icarus is much slower: without --shapes it runs shapes of at most this side cubed MACs. At 128 the
# default bench spent 323 of its ~420 s on four Icarus rows (128^3 74 s + 69 s, 4x512x512 101 s +
# 79 s: `firstlight bench`), whose cycles equal Verilator's; the rows up to 64^3 show the same
# agreement and the simulators' speed in 22 s.
ICARUS_MAX_SIDE = 64


def add_parser(subparsers) -> None:
    b = subparsers.add_parser("bench", help="GEMM benchmark table: cycles, utilisation, simulator throughput",
                              formatter_class=argparse.RawDescriptionHelpFormatter,
                              epilog=exit_codes_help("a GEMM differed from the golden or a job failed"))
    b.set_defaults(handler=cmd)
    uses_build_cache(b)
    b.add_argument("--sims", nargs="+", default=None, choices=SIMULATORS,
                   help="simulators to measure (default: every installed one)")
    b.add_argument("--shapes", nargs="+", default=None, metavar="MxNxK",
                   help=f"GEMM shapes (default: {' '.join(DEFAULT_SHAPES)}; "
                   f"Icarus stops at {ICARUS_MAX_SIDE}^3 unless shapes are given)")
    add_array_option(b)
    add_rev_option(b, help="silicon revision (default A0, mitigations on)")
    add_formats_option(b)
    add_sram_depth_option(b)
    add_seed_option(b)
    add_json_option(b)
    add_keep_option(b)
    add_dram_options(b)
    b.add_argument("--buffering", choices=["double", "single", "both"], default=None,
                   help="the GEMM's operand buffers: double (the next K chunk loads while this one multiplies, "
                        "gemm --stages 2), single (loads and MATMULs take turns, --stages 1), or both side by side "
                        "so the overlap's worth is a measured number (default: both)")
    b.add_argument("--no-double-buffer", action="store_true",
                   help="the same as --buffering single")
    b.add_argument("--attention", nargs="*", default=None, metavar="SEQxDIM[c]",
                   help="flash-attention shapes for the vector-unit table, a trailing c for causal (default: the "
                        "kernel's own bench entries, 256x64 and 256x64c; with no value: none)")
    b.add_argument("--rows", nargs="*", default=None, metavar="RxC", dest="row_shapes",
                   help="shapes for the row kernels of the vector-unit table, each run by every tile-language "
                        "vector-unit kernel with rows and cols parameters (default: each kernel's own bench entries "
                        "in its declaration; with no value: none)")
    b.add_argument("--limit", action="store_true",
                   help="measure the harness against the simulator's limit instead: a bare Verilator build of the "
                        "same Verilog replays a recorded run (a Verilog driver, no VPI, no cocotb) and the table "
                        "gives harness cycles/s, limit cycles/s and their ratio per chip (the FP chip and the "
                        "int8-only chip of --array, or the one --formats names) and shape (default: 256x256x256)")
    b.add_argument("--reps", type=int_at_least(1, "repetitions"), default=3,
                   help="--limit: alternating harness/limit pairs per chip and shape; the median ratio is "
                        "reported (default: 3)")
    b.add_argument("--trace", type=Path, default=None, metavar="PATH",
                   help="record the trace buffer of every run and write each as a Chrome trace next to PATH "
                        "(PATH-<sim>-<shape>-<double|single>.json; open in ui.perfetto.dev); the chip keeps the first "
                        "--trace-depth events of each")
    b.add_argument("--session-calls", type=int_at_least(0, "session calls"), default=20, metavar="N",
                   help="per-call overhead of a session (firstlight.open): N 4x4x4 GEMM round trips per simulator "
                        "(default: 20; 0: skip the table)")


def _parse_shape(text: str) -> list[int]:
    parts = text.lower().split("x")
    if len(parts) != 3 or not all(p.isdigit() and int(p) > 0 for p in parts):
        raise CannotStart(f"shape must look like MxNxK with positive integers, not {text!r}")
    return [int(p) for p in parts]


# (header, key of a row, how it is shown); the first two identify a row and are repeated when the
# table is split to fit the console
COLUMNS = (
    ("sim", "sim", str),
    ("shape", "shape", str),
    ("buffers", "buffering", str),
    ("result", "passed", lambda p: Text("pass") if p else Text("FAIL", style="red")),
    ("cycles", "cycles", lambda v: f"{v:,}"),
    ("compile\ns", "compile_s", lambda v: "-" if v is None else f"{v:.2f}"),
    ("compulsory\nbytes", "compulsory_bytes", lambda v: f"{v:,}"),
    ("moved\nbytes", "dram_bytes", lambda v: f"{v:,}"),
    ("MACs\n/byte", "intensity", lambda v: f"{v:.1f}"),
    ("bound", "bound", str),
    ("attainable", "attainable_cycles", lambda v: f"{v:,}"),
    ("roof\nutil", "roof_utilization", fmt_pct),
    ("overlap", "overlap", lambda v: f"{v:.2f}"),
    ("sim\ncyc/s", "sim_cycles_per_s", lambda v: f"{v:,.0f}"),
    ("Python\nshare", "python_share", fmt_pct),
    ("kernel\nwall s", "wall_s", lambda v: f"{v:.2f}"),
    ("build\nfirst s", "build_first_s", lambda v: f"{v:.1f}" if v else "?"),
    ("build\ncached s", "build_cached_s", lambda v: f"{v:.3f}"),
)


def _parse_attention(text: str) -> list:
    t = text.lower()
    causal = t.endswith("c")
    parts = t.rstrip("c").split("x")
    if len(parts) != 2 or not all(p.isdigit() and int(p) > 0 for p in parts):
        raise CannotStart(f"attention shape must look like SEQxDIM or SEQxDIMc (causal), e.g. 256x64c; got {text!r}")
    return [int(parts[0]), int(parts[1]), causal]


def _parse_rows(text: str) -> list[int]:
    parts = text.lower().split("x")
    if len(parts) != 2 or not all(p.isdigit() and int(p) > 0 for p in parts):
        raise CannotStart(f"row shape must look like ROWSxCOLS, e.g. 64x256; got {text!r}")
    return [int(p) for p in parts]


VECTOR_COLUMNS = [("sim", "sim", str), ("kernel", "kernel", str), ("shape", "shape", str),
                  ("result", "passed", lambda v: "pass" if v else "FAIL"), ("cycles", "cycles", lambda v: f"{v:,}"),
                  ("bound", "bound", str), ("attainable", "attainable_cycles", lambda v: f"{v:,}"),
                  ("roof\nutil", "roof_utilization", fmt_pct), ("engine\nbusy", "engine_busy", lambda v: f"{v:,}"),
                  ("vector\nbusy", "vector_busy", lambda v: f"{v:,}"),
                  ("SQNR\ndB", "sqnr_db", lambda v: "-" if v is None else f"{v:.1f}"),
                  ("compile\ns", "compile_s", lambda v: "-" if v is None else f"{v:.3f}")]


def row_kernel_cases(shapes: list[list[int]] | None, config, board, attention: list | None = None
                     ) -> tuple[list[list], list[str]]:
    """The row-kernel rows of the vector-unit table, from the registry (kernels/tile/spec.py):
    ``([name, params], ...)`` for every KernelSpec that needs the vector unit and every entry of
    its ``bench``, or with ``shapes`` (``--rows``) every such kernel with ``rows`` and ``cols`` at
    each shape, its other parameters at their defaults (``attention``, ``--attention``: flash
    attention's [seq, dim, causal] instead of its entries); and why a case was left out. (A kernel
    that does not use the vector unit, the tile-language GEMM, is not this table's.) Each case is
    resolved and compiled for this chip here, so that a kernel that cannot run on it (a shape out
    of its range, a tile that does not fit the SRAM, no vector unit) is a line of the output
    instead of a failed job."""
    from kernels.tile.spec import registry

    cases, skipped = [], []
    for spec in registry().values():
        if "vector" not in spec.needs:
            continue
        if spec.name == "flash_attention" and attention is not None:
            entries = [{"seq": s, "dim": d, "causal": c} for s, d, c in attention]
        elif shapes is None:
            entries = [dict(b) for b in spec.bench]
        elif {"rows", "cols"} <= {prm.name for prm in spec.params}:
            entries = [{"rows": r, "cols": c} for r, c in shapes]
        else:
            entries = []
        for params in entries:
            try:
                spec.compile(spec.resolve(params), config, board)
            except ValueError as e:  # TileError and KernelRefused are ValueErrors
                skipped.append(f"{spec.name} {params}: {e}")
                continue
            cases.append([spec.name, params])
    return cases, skipped


def bench_table(rows: list[dict], title: str) -> FittedTable:
    """The benchmark rows as a table that never cuts a number (split or stacked when narrow)."""
    return FittedTable(title, [h for h, _, _ in COLUMNS], [[fmt(r[k]) for _, k, fmt in COLUMNS] for r in rows],
                       keys=2)


def _bench_records(job, params: dict, rtype: str, variant, sim: str, keep: bool, total: int = 0
                   ) -> tuple[list[dict], bool, bool]:
    """Run one bench job; return (its records of type ``rtype``, whether the job failed, whether
    that was a harness error). A job that fails still gives the records it wrote before. Its
    folder is removed when every result passed (unless ``keep``), else kept and printed. Each
    result is announced on stderr as it arrives (``total``: how many are due), so a long bench
    shows where it is."""
    from cosim.jobs import JobFailed, SimulatorDied, run_job

    done = [0]

    import logging

    quiet = not logging.getLogger("firstlight").isEnabledFor(logging.INFO)  # -q

    def progress(r: dict) -> None:
        if r.get("type") != rtype or quiet:
            return
        done[0] += 1
        st = r.get("stats") or {}
        if "kernel" in r:
            what = f"{r['kernel']} {r.get('shape', '')}"
        else:
            what = "gemm " + "x".join(map(str, r.get("shape", []))) + ("" if r.get("double_buffer", True) else ", single buffer")
        verdict = "bit-exact" if r.get("passed") else "WRONG (see the table)"
        err_console.print(plain(f"{sim} {done[0]}/{total or '?'}: {what}: {st.get('cycles', 0):,} cycles, {verdict}"),
                          highlight=False, soft_wrap=True)

    with JobFolder(keep, "bench") as folder:
        try:
            res = run_job(job, params, variant=variant, sim=sim, work_dir=folder.path, on_record=progress)
        except JobFailed as e:
            died = isinstance(e, SimulatorDied)
            err_console.print(plain((f"{sim}: {'harness error: ' if died else ''}{e}", "red")))
            return [r for r in e.records if r.get("type") == rtype], True, died
        recs = [r for r in res.records if r.get("type") == rtype]
        folder.passed = all(r.get("passed", True) for r in recs)
        return recs, False, False


def cmd(args) -> int:
    if args.no_double_buffer and args.buffering not in (None, "single"):
        raise CannotStart(f"--no-double-buffer is --buffering single; it contradicts --buffering {args.buffering}: "
                          "give one of them")
    args.buffering = "single" if args.no_double_buffer else args.buffering or "both"
    if args.limit:
        from .bench_limit import DEFAULT_LIMIT_SHAPES, limit_cmd

        return limit_cmd(args, [_parse_shape(x) for x in (args.shapes or DEFAULT_LIMIT_SHAPES)])
    found = available_simulators()
    sims = args.sims or [s for s, info in found.items() if not isinstance(info, SimulatorMissing)]
    for s in args.sims or []:
        require_sim(s)
    for s, info in found.items():
        if isinstance(info, SimulatorMissing) and not args.sims:
            console.print(plain((f"skipping {s}: ", "yellow"), str(info)))
    variant = variant_from_args(args)
    shapes_given = [_parse_shape(x) for x in (args.shapes or DEFAULT_SHAPES)]
    attention = None if args.attention is None else [_parse_attention(x) for x in args.attention]
    row_shapes = None if args.row_shapes is None else [_parse_rows(x) for x in args.row_shapes]

    # imported once the arguments are known good, so that a bad one exits 2 quickly
    from cosim.build import build_simulator
    from firstlight.jobs import kernels as kernel_jobs

    cfg = variant.config
    board = variant.resolved_board
    title = (f"GEMM on a {cfg.rows}x{cfg.cols} array, revision {args.rev}, DRAM {board.bytes_per_cycle:g} B/cycle "
             f"latency {board.latency} (ridge {board.ridge_point(cfg):g} MACs/byte; int8, bit-exact vs golden, "
             "errata mitigations on; overlap = cycles / max(engine busy, DMA busy)); the GEMM of the tile language "
             "(kernels/tiled/gemm.py, docs/tile.md) and its compile time")
    buffering = {"double": [True], "single": [False], "both": [True, False]}[args.buffering]
    rows, failed, harness = [], False, False
    for s in sims:
        shapes = shapes_given
        if s == "icarus" and not args.shapes:
            shapes = [sh for sh in shapes if sh[0] * sh[1] * sh[2] <= ICARUS_MAX_SIDE**3]
            left = [sh for sh in shapes_given if sh not in shapes]
            if left:
                console.print(plain(("icarus: ", "yellow"), f"skipping {', '.join('x'.join(map(str, sh)) for sh in left)} "
                                    f"(over {ICARUS_MAX_SIDE}^3 MACs: a 128^3 GEMM takes 70 s on Icarus, about 300 "
                                    "times Verilator; --shapes runs any shape on every simulator)"))
        first = build_simulator(variant, sim=s)
        cached = build_simulator(variant, sim=s)
        recs, job_failed, died = _bench_records(kernel_jobs.bench_job, {
            "shapes": shapes, "seed": args.seed, "errata_policy": {}, "double_buffer": buffering,
            "trace": args.trace is not None}, "bench", variant, s, args.keep, len(shapes) * len(buffering))
        failed |= job_failed
        harness |= died
        for r in recs:
            st = r["stats"]
            failed |= not r["passed"]
            row = {
                "compile_s": (st.get("host") or {}).get("compile_s"),
                "sim": s, "shape": "x".join(map(str, r["shape"])), "passed": r["passed"],
                "buffering": "2" if r.get("double_buffer", True) else "1",
                **{k: st[k] for k in ROOFLINE_KEYS}, "ridge_point": st["ridge_point"],
                "cycles": st["cycles"], "ideal_cycles": st["ideal_cycles"], "utilization": st["utilization"],
                "sim_cycles_per_s": st["sim_cycles_per_s"], "python_share": st["python_share"],
                "wall_s": st["wall_s"], "build_first_s": first.first_build_s, "build_cached_s": cached.build_s,
            }
            rows.append(row)
            if args.trace is not None and r.get("trace") is not None:
                from firstlight.trace import Trace, dropped_note, write_chrome_trace

                path = args.trace.with_name(f"{args.trace.stem}-{s}-{row['shape']}-"
                                            f"{'double' if r.get('double_buffer', True) else 'single'}.json")
                tr = Trace.from_summary(r["trace"])
                write_chrome_trace(tr, path, meta={"command": "firstlight bench", "shape": row["shape"], "sim": s,
                                                    "revision": st["revision"], "seed": args.seed})
                console.print(plain(f"trace: {path} ({len(tr):,} events)"), soft_wrap=True)
                note = dropped_note(tr)
                if note:  # once, on stderr with the other warnings: not on stdout too
                    err_console.print(plain(("WARNING: ", "bold red"), f"{s} {row['shape']}: {note}"), soft_wrap=True)
    console.print(bench_table(rows, title))
    vrows = []
    row_cases, skipped = row_kernel_cases(row_shapes, cfg, board, attention) if cfg.vector else ([], [])
    for why in skipped:
        console.print(plain(("row kernel skipped: ", "yellow"), why))
    if cfg.vector and row_cases:
        for s in sims:
            if s == "icarus" and args.attention is None and args.row_shapes is None:
                continue  # ~40x slower: only what is asked for
            recs, job_failed, died = _bench_records(kernel_jobs.vector_bench_job, {
                "kernels": row_cases, "seed": args.seed}, "vector_bench", variant, s, args.keep, len(row_cases))
            failed |= job_failed
            harness |= died
            for r in recs:
                st = r["stats"]
                failed |= not r["passed"]
                vrows.append({"sim": s, "kernel": r["kernel"], "shape": r["shape"], "passed": r["passed"],
                              "cycles": st["cycles"], "bound": st["bound"], "attainable_cycles": st["attainable_cycles"],
                              "roof_utilization": st["roof_utilization"], "engine_busy": st["engine_busy_cycles"],
                              "vector_busy": st["vector_busy_cycles"] + st["reduce_busy_cycles"],
                              "sqnr_db": r["sqnr_db"], "plan": st.get("plan"), "params": r.get("params"),
                              "compile_s": (st.get("host") or {}).get("compile_s")})
        console.print(FittedTable(
            f"Vector-unit kernels on a {cfg.rows}x{cfg.cols} array, revision {args.rev} (bit-exact vs the kernel "
            "golden; SQNR vs float64; vector busy = vector + reduction unit cycles, which the engine does not overlap; "
            "compile s = the tile compiler's host time)",
            [h for h, _, _ in VECTOR_COLUMNS],
            [[fmt(r[k]) for _, k, fmt in VECTOR_COLUMNS] for r in vrows], keys=3))
    if args.session_calls:  # issue 12: what one call through a session costs
        from .bench_session import print_session_overhead

        harness |= not print_session_overhead(variant, sims, args.session_calls, args.seed)
    if args.json:
        from firstlight.provenance import with_provenance

        args.json.write_text(json.dumps(with_provenance(rows + vrows, None, args.command_line), indent=2))
    return EXIT_HARNESS_ERROR if harness else EXIT_FAIL if failed else EXIT_OK
