"""``firstlight run <kernel>``: one kernel on seeded random data, checked against its golden (the tile-language
kernels' subcommands are generated from their declarations, kernels/tile/spec.py)."""

from __future__ import annotations

import argparse
import json
import os
import time
from contextlib import nullcontext
from pathlib import Path

from rich.table import Table

from firstlight.errors import EXIT_FAIL, EXIT_OK, CannotStart, exit_codes_help
from firstlight.jobs.checks import describe_mismatch
from kernels.roofline import ROOFLINE_KEYS, explain

from .common import (
    DEFAULT_SIM,
    JobFolder,
    add_array_option,
    add_dram_options,
    add_formats_option,
    add_json_option,
    add_keep_option,
    add_rev_option,
    add_seed_option,
    add_sim_option,
    add_trace_depth_option,
    cells,
    elapsed_status,
    check_output_dir,
    console,
    err_console,
    fmt_pct,
    plain,
    require_sim,
    uses_build_cache,
    variant_from_args,
)

EPILOG = exit_codes_help("the result differs from the golden, or the job failed (e.g. a watchdog expired)")

__all__ = ["add_parser", "cmd"]


def _add_run_options(p: argparse.ArgumentParser) -> None:
    """The options every ``run <kernel>`` takes."""
    add_sim_option(p, help=f"simulator to run on (default: {DEFAULT_SIM})")
    p.set_defaults(sim=None)  # given or not: --interpret runs on none and refuses one named
    p.add_argument("--interpret", action="store_true",
                   help="run on the interpreter instead of a simulator: the same compiled stream on a numpy model "
                        "of the chip (interp/, docs/interpret.md), in about a second and with no build; the same "
                        "bits as the RTL, but no cycles (no timing model yet) and no trace or waveform. It models "
                        "revisions without defects only (B1, its default). It also checks the stream for races "
                        "(interp/races.py) and fails the run on any")
    p.add_argument("--dma-order", choices=("eager", "late", "random"), default=None,
                   help="with --interpret: when a DMA that may go runs: at once (eager, the default), loads as late "
                        "as the stream allows (late: a command that should have waited for a load reads the old "
                        "words), or any head that may move, chosen by --seed (random). A stream with a race can pass "
                        "in one order and fail in another; the race check finds it in any")
    add_array_option(p, help="systolic array size, e.g. 4x4 (default) or 8x8")
    add_seed_option(p, help="seed for the random operands (default: 1)")
    add_json_option(p, help="also write the result as JSON")
    p.add_argument("--waves", action="store_true",
                   help="record a waveform of the run and print its path (VCD on Verilator, FST on Icarus), in "
                        "firstlight-out/run-<unix time>/ under the current folder unless --waves-dir says where")
    p.add_argument("--waves-dir", type=Path, default=None, metavar="DIR",
                   help="the folder for the waveform and the simulator's log (implies --waves)")
    add_keep_option(p)
    p.add_argument("--extremes", action="store_true", help="draw operands from the extreme values only")
    p.add_argument("--trace", type=Path, default=None, metavar="PATH",
                   help="record the chip's trace buffer and write it as a Chrome trace (open in ui.perfetto.dev "
                        "or chrome://tracing): one track per unit (DMA in, DMA out, matrix engine, reduction unit, "
                        "vector unit, command stream); the chip keeps the first --trace-depth events")
    add_rev_option(p, default=None, help="silicon revision to build (default A0; B1 with --interpret); the kernels "
                   "read REV from the chip and apply that revision's mitigations")
    p.add_argument("--errata-policy", action="append", default=[], metavar="ID=auto|on|off",
                   help="override one erratum's mitigation (repeatable), e.g. FL-ME-002=off")
    add_formats_option(p)
    add_trace_depth_option(p)
    add_dram_options(p)
    uses_build_cache(p)


def add_parser(subparsers) -> None:
    run = subparsers.add_parser("run", help="run one kernel on random data and check it against the golden",
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=EPILOG)
    run.set_defaults(handler=cmd)
    run_sub = run.add_subparsers(dest="kernel", required=True, metavar="KERNEL")
    _add_tile_kernels(run_sub)


def _add_tile_kernels(run_sub) -> None:
    """A subcommand per tile-language kernel, generated from its KernelSpec (kernels/tile/spec.py):
    its parameters become options, with their ranges and defaults in the help."""
    from kernels.tile.spec import registry

    for spec in registry().values():
        ex = "".join(f"\n  firstlight run {spec.name} {e}" for e in spec.examples)
        sp = run_sub.add_parser(
            spec.name, aliases=list(spec.aliases), help=spec.summary, formatter_class=argparse.RawDescriptionHelpFormatter,
            epilog=(f"examples:{ex}\n\n" if ex else "") + EPILOG,
            description=f"{spec.summary}. Written in the tile language ({spec.module}); seeded inputs from its "
                        "declaration (--extremes: the hard cases it names), checked bit for bit against its golden "
                        "and by SQNR against float64. --dump prints the compiled command stream, each command with "
                        "the kernel line that made it, and runs nothing.")
        for prm in spec.params:
            flag = "--" + prm.name.replace("_", "-")
            if prm.kind is bool:
                sp.add_argument(flag, dest=f"tk_{prm.name}", action="store_true", help=prm.describe())
            else:
                sp.add_argument(flag, dest=f"tk_{prm.name}", type=prm.kind, default=prm.default, metavar=prm.name.upper(),
                                choices=prm.choices or None,
                                help=prm.describe())
        sp.add_argument("--dump", action="store_true", help="print the lowered command stream and exit")
        sp.set_defaults(tile_spec=spec.name)
        _add_run_options(sp)


def _tile_kernel(args, variant):
    """(job, kwargs, shape) of a tile-language kernel, its parameters checked and the kernel compiled
    for this chip before anything is built (a refusal is exit 2, with the kernel line)."""
    from firstlight.jobs import tile as tile_jobs
    from kernels.tile.ir import TileError
    from kernels.tile.spec import KernelRefused, get

    from workarounds import ERRATA, parse_policy, resolve
    from workarounds.constraints import constraints_for

    spec = get(args.tile_spec)
    given = {prm.name: getattr(args, f"tk_{prm.name}") for prm in spec.params}
    # compiled with the revision's errata passes, as the run will be: what they cost in SRAM is
    # refused here, and --dump shows the stream the chip gets (before the stream passes)
    res = resolve(args.rev, parse_policy(args.errata_policy) if args.errata_policy else None, warn=False)
    constraints = constraints_for([e for e in ERRATA if e.id in res.active])  # by family
    try:
        p = spec.resolve(given)
        compiled = spec.compile(p, variant.config, variant.resolved_board, constraints)
    except (ValueError, TileError, KernelRefused) as e:
        raise CannotStart(f"run {spec.name}: {e}") from None
    # the problem's dimensions, then whatever was set away from its default
    shape = " ".join(f"{prm.name}={p[prm.name]}" for prm in spec.params
                     if prm.shape or p[prm.name] != prm.default)
    return tile_jobs.tile_job, {"kernel": spec.name, "params": p}, shape, compiled


def _host_bytes() -> int:
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):  # not POSIX: no limit known
        return 1 << 62


def _check_fits_host(args) -> None:
    """Refuse, before anything is built, a problem whose data cannot fit the host's memory (inputs,
    golden, result: about 16 bytes a value for the row kernels); the compiler places the tensors
    in the board's DRAM and refuses what does not fit there."""
    host = 16 * (getattr(args, "tk_rows", None) or 1) * (getattr(args, "tk_cols", None) or 1)
    if host > _host_bytes() // 2:
        raise CannotStart(f"the problem needs about {host:,} bytes of host memory, more than half of this "
                          f"machine's {_host_bytes():,}; make the problem smaller")


def _policy(items: list[str]) -> dict[str, str]:
    from workarounds import parse_policy

    try:
        return parse_policy(items)
    except ValueError as e:
        raise CannotStart(str(e)) from None


def _check_interpretable(args) -> None:
    """--interpret with what it cannot do is refused by name, before anything runs."""
    from interp import MODELLED_REVISIONS

    given = [flag for flag, on in (("--sim", args.sim is not None), ("--trace", args.trace is not None),
                                   ("--waves", args.waves or args.waves_dir is not None),
                                   ("--trace-depth", args.trace_depth is not None)) if on]
    if given:
        raise CannotStart(f"--interpret runs on no simulator, so it takes no {', '.join(given)}: the interpreter has "
                          "no clock, trace buffer or waveform (docs/interpret.md); drop --interpret to run on the RTL")
    if args.rev not in MODELLED_REVISIONS:
        from workarounds import resolve

        errata = ", ".join(sorted(resolve(args.rev, None, warn=False).active)) or "its defects"
        raise CannotStart(f"--interpret models revisions without defects ({', '.join(MODELLED_REVISIONS)}), not "
                          f"{args.rev}: its errata ({errata}) change what the chip computes, and the interpreter "
                          f"would compute the fixed chip instead; drop --interpret to run {args.rev} on the RTL")


def cmd(args) -> int:
    if args.interpret:
        args.rev = args.rev or "B1"
        _check_interpretable(args)
    else:
        if args.dma_order is not None:
            raise CannotStart("--dma-order orders the interpreter's DMAs: it needs --interpret (the RTL's order is "
                              "its own timing)")
        args.rev = args.rev or "A0"
        args.sim = args.sim or DEFAULT_SIM
        require_sim(args.sim)
    policy = _policy(args.errata_policy)
    variant = variant_from_args(args)

    if args.waves_dir is not None:
        args.waves = True
    work = None
    if args.waves:
        work = args.waves_dir or Path("firstlight-out") / f"run-{int(time.time())}"
        check_output_dir(work, "--waves-dir" if args.waves_dir else "--waves (the waveform folder)")

    _check_fits_host(args)
    job, kwargs, shape, compiled = _tile_kernel(args, variant)
    if args.dump:
        console.print(plain(compiled.dump()), soft_wrap=True, highlight=False)
        return EXIT_OK
    kwargs.update(seed=args.seed, extremes=args.extremes, errata_policy=policy, trace=args.trace is not None)
    cfg = variant.config
    if args.interpret:
        console.print(plain((f"firstlight run {args.kernel}", "bold"), f" {shape} on a {cfg.rows}x{cfg.cols} array, "
                            f"interpreted, revision {args.rev}, seed {args.seed}"))
        return _interpret_and_report(args, job, kwargs, variant, compiled)
    console.print(plain((f"firstlight run {args.kernel}", "bold"), f" {shape} on a {cfg.rows}x{cfg.cols} array, "
                        f"{args.sim}, revision {args.rev}, seed {args.seed}"))
    # the job's folder: the waveform's (kept), or one in the system temp directory, removed when
    # the run passes unless --keep, kept and printed when it does not
    with JobFolder(args.keep) if work is None else nullcontext() as folder:
        code = _run_and_report(args, job, kwargs, variant, work or folder.path, shape)
        if folder is not None:
            folder.passed = code == EXIT_OK
    return code


def _result_table(v: dict) -> Table:
    """The report's first rows, on the RTL and on the interpreter: the verdict and the SQNR."""
    t = Table(show_header=False, box=None)
    t.add_row(*cells("result", plain(("PASS", "green"), " (bit-exact vs golden)") if v["passed"]
                     else plain(("FAIL", "red"), f" {describe_mismatch(v['mismatch'])}")))
    if v.get("sqnr_db") is not None:
        t.add_row(*cells("SQNR vs float64", f"{v['sqnr_db']:.1f} dB"))
    return t


def _interpret_and_report(args, job, kwargs: dict, variant, compiled) -> int:
    """The run on the interpreter: the race check of its stream, the result against the golden,
    what the stream moved and computed, and the interpreter's own time; no cycles, which it does
    not model."""
    from interp.jobs import run_job
    from interp.races import check_compiled

    t0 = time.perf_counter()
    findings = check_compiled(compiled, variant.config, variant.resolved_board)
    check_s = time.perf_counter() - t0
    res = run_job(job, kwargs, config=variant.config, board=variant.resolved_board, revision=args.rev,
                  dma_order=args.dma_order or "eager", seed=args.seed)
    v = res.value
    st = v["stats"]
    host = st.get("host", {})
    out = {"kernel": args.kernel, "shape": st["shape"], "array": st["array"], "sim": "interpreter",
           "revision": st["revision"], "seed": args.seed, "passed": v["passed"], "mismatch": v["mismatch"],
           "cycles": None, "dram_bytes": st.get("dram_bytes"), "compulsory_bytes": st.get("compulsory_bytes"),
           "macs_issued": st.get("macs_issued"), "commands": host.get("commands"),
           "mitigations": st.get("mitigations", []), "interpret_s": res.run_s, "stats": st,
           "dma_order": args.dma_order or "eager", "races": [str(f) for f in findings]}
    if "sqnr_db" in v:
        out["sqnr_db"] = v["sqnr_db"]
    t = _result_table(v)
    t.add_row(*cells("races", plain(("none", "green"), f" (happens-before check of {len(compiled.commands):,} "
                                     f"commands, {check_s:.2f} s)") if not findings else
                     plain(("FOUND ", "red"), f"{len(findings)}; the first: {findings[0]}")))
    t.add_row(*cells("DMA order", f"{args.dma_order or 'eager'}" + (f" (seed {args.seed})"
                                                                       if args.dma_order == "random" else "")))
    t.add_row(*cells("cycles", "not modelled: the interpreter has no timing model yet; run without --interpret "
                     "for the RTL's cycles"))
    if host.get("commands") is not None:
        t.add_row(*cells("commands", f"{host['commands']:,}"))
    if st.get("dram_bytes") is not None:
        t.add_row(*cells("DRAM bytes", f"{st['dram_bytes']:,} moved, {st['compulsory_bytes']:,} compulsory"))
    if st.get("macs_issued"):
        t.add_row(*cells("MACs issued", f"{st['macs_issued']:,}"))
    t.add_row(*cells("interpreter", f"{res.run_s:.3f} s (inputs, stream and golden check; no build)"))
    t.add_row(*cells("mitigations applied", ", ".join(st.get("mitigations", [])) or "none"))
    console.print(t)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        from firstlight.provenance import with_provenance

        args.json.write_text(json.dumps(with_provenance(out, None, args.command_line), indent=2))
        console.print(plain(f"wrote {args.json}"))
    return EXIT_OK if v["passed"] and not findings else EXIT_FAIL


def _run_and_report(args, job, kwargs: dict, variant, work: Path, shape: str) -> int:
    from cosim.jobs import JobFailed, SimulatorDied, run_job

    cfg = variant.config
    t0 = time.perf_counter()
    try:
        with elapsed_status(f"{args.kernel} on {args.sim}: building (cached after the first time) and simulating"):
            res = run_job(job, kwargs, variant=variant, sim=args.sim, waves=args.waves, work_dir=work)
    except SimulatorDied:
        raise  # a harness error (exit 3), not a result: the CLI reports it
    except JobFailed as e:
        err_console.print(plain(("FAILED ", "red"), str(e)))
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
        # the two-sided roofline (kernels/roofline.py); scripts depend on these names
        **{key: st.get(key) for key in ROOFLINE_KEYS},
        "mitigations": st.get("mitigations", []),
        "errata_status": st.get("errata_status", {}),
        "errata_warnings": st.get("errata_warnings", []),
        "build_s": res.build.build_s,
        "build_cache_hit": res.build.cache_hit,
        "sim_process_s": res.run_s,
        "total_s": total,
        "stats": st,
    }
    if "sqnr_db" in v:  # kernels with an fp32 result: error against the float64 mathematics
        out["sqnr_db"] = v["sqnr_db"]
    t = _result_table(v)
    t.add_row(*cells("cycles", f"{st['cycles']:,}"))
    t.add_row(*cells("ideal cycles", f"{st['ideal_cycles']:,}  (roofline: {cfg.rows * cfg.cols} MACs/cycle)"
                     if st.get("useful_macs") else
                     f"{st['ideal_cycles']:,}  (one accumulator word per cycle)" if args.kernel == "reduce" else
                     f"{st['ideal_cycles']:,}  (one word per cycle through the vector unit; the vector roof below "
                     "counts every pass the algorithm makes)"))
    t.add_row(*cells("utilisation", fmt_pct(st["utilization"]) + "  (of the ideal cycles)"))
    board = st["dram"]
    t.add_row(*cells("DRAM", f"{board['bytes_per_cycle']:g} B/cycle, latency {board['latency']} cycles, "
                     f"{board['bus_bytes']}-byte bus (ridge point {st['ridge_point']:g} MACs/byte)"
                     if st.get("useful_macs") else
                     f"{board['bytes_per_cycle']:g} B/cycle, latency {board['latency']} cycles, {board['bus_bytes']}-byte bus"))
    t.add_row(*cells("DRAM bytes", f"{st['dram_bytes']:,} moved, {st['compulsory_bytes']:,} compulsory"))
    t.add_row(*cells("roofline", f"{st['bound']}-bound: attainable {st['attainable_cycles']:,} cycles, "
                     f"{fmt_pct(st['roof_utilization'])} of it; overlap {st['overlap']:.2f}"))
    t.add_row(*cells("why", explain(st)))
    t.add_row(*cells("kernel wall time", f"{st['wall_s']:.3f} s  (Python {fmt_pct(st['python_share'])})"))
    t.add_row(*cells("simulated cycles/s", f"{st['sim_cycles_per_s']:,.0f}"))
    t.add_row(*cells("build", f"{res.build.build_s:.2f} s ({'cached' if res.build.cache_hit else 'compiled'})"))
    t.add_row(*cells("simulator process", f"{res.run_s:.2f} s (start-up included)"))
    t.add_row(*cells("mitigations applied", (", ".join(st.get("mitigations", [])) or "none")
                     + "  (firstlight errata show ID: what each does)"))
    # the errata as usual (mitigated, not affected) need no line each; one left vulnerable or
    # unknown does
    for err_id, status in st.get("errata_status", {}).items():
        if status != "Not affected" and not status.startswith("Mitigated"):
            t.add_row(*cells(f"  {err_id}", status))
    console.print(t)
    if res.waves:  # printed whole, never cut to the table width
        console.print(plain(f"waves: {res.waves}"), soft_wrap=True)
        out["waves"] = str(res.waves)
    elif args.waves:
        err_console.print(plain((f"no waveform file found in {work}", "yellow")))
    for w in st.get("errata_warnings", []):
        err_console.print(plain(("WARNING: ", "bold red"), w))
    if args.trace is not None and v.get("trace") is not None:
        from firstlight.trace import Trace, dropped_note, write_chrome_trace

        tr = Trace.from_summary(v["trace"])
        write_chrome_trace(tr, args.trace, meta={"command": f"firstlight run {args.kernel} {shape}",
                                                  "revision": st["revision"], "sim": args.sim, "seed": args.seed,
                                                  "array": st["array"], "dram": st["dram"]})
        console.print(plain(f"trace: {args.trace} ({len(tr):,} events)"), soft_wrap=True)
        note = dropped_note(tr)
        if note:  # once, on stderr with the other warnings: not on stdout too
            err_console.print(plain(("WARNING: ", "bold red"), note), soft_wrap=True)
        out["trace"] = str(args.trace)
        out["trace_dropped"] = tr.dropped
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        from firstlight.provenance import with_provenance

        args.json.write_text(json.dumps(with_provenance(out, args.sim, args.command_line), indent=2))
        console.print(plain(f"wrote {args.json}"))
    return EXIT_OK if v["passed"] else EXIT_FAIL
