"""``firstlight roofline``: the classic roofline chart of measured kernels, and a DRAM-bandwidth sweep.

Left panel (log-log): x = arithmetic intensity (useful MACs per DRAM byte *moved*, from the
``DRAM_RD_BYTES``/``DRAM_WR_BYTES`` counters), y = attained MACs per cycle (useful MACs / measured
cycles). The compute roof is flat at ``ROWS * COLS`` MACs per cycle, the memory roof is the
board's DRAM bytes per cycle times the intensity (slope 1), and they meet at the ridge point
(peak / bandwidth MACs per byte). Each GEMM is a labelled point; a reduction is plotted against
its own compute roof (one accumulator word per cycle, ``useful / compute_cycles`` elements per
cycle) under the same memory roof.

Right panel: one GEMM at several DRAM bandwidths. Bandwidth is a build parameter of the board, so
every point is its own simulator build (cached by content hash). It shows achieved MACs per cycle
against the problem's attainable ``min(peak, bandwidth x compulsory intensity)`` and the roof
utilisation (attainable / measured cycles, :mod:`kernels.roofline`), with the knee where the
problem turns from memory-bound to compute-bound.

The data is printed as a table and, with ``--json``, written with every point; the PNG carries
its provenance (revision, simulator, array, DRAM, seed, commit, command line).
"""

from __future__ import annotations

import argparse
import json
import math
from dataclasses import dataclass, field, replace
from pathlib import Path

from rich.text import Text

from firstlight.errors import (
    EXIT_FAIL,
    EXIT_HARNESS_ERROR,
    EXIT_OK,
    CannotStart,
    Interrupted,
    exit_codes_help,
    shielded,
)

from .bench import ICARUS_MAX_SIDE
from .common import (
    Tracked,
    refuse_unused,
    FittedTable,
    add_array_option,
    add_dram_options,
    add_formats_option,
    add_json_option,
    add_rev_option,
    add_seed_option,
    add_sim_option,
    add_sram_depth_option,
    check_output_file,
    console,
    err_console,
    fmt_pct,
    plain,
    require_sim,
    uses_build_cache,
    variant_from_args,
)

__all__ = ["DEFAULT_SHAPES", "DEFAULT_REDUCE", "DEFAULT_SWEEP_SHAPE", "DEFAULT_SWEEP_BW", "DEFAULT_OUT", "Plan",
           "Run", "add_parser", "cmd", "plan_from_args", "point", "plot", "points_table", "parse_gemm_shape",
           "parse_reduce_shape"]

DEFAULT_SHAPES = ["16x16x16", "64x64x64", "256x256x256", "4x512x512", "1x1x1"]
DEFAULT_REDUCE = "16x128"  # ROWSxCOLS of int32, summed per row: a 128-wide reduction
# On the default 4x4 array (16 MACs/cycle) this GEMM's compulsory intensity is 28.4 MACs/byte,
# so its knee is at 16 / 28.4 = 0.56 B/cycle: memory-bound at 0.25 and 0.5, compute-bound above.
DEFAULT_SWEEP_SHAPE = "64x256x256"
DEFAULT_SWEEP_BW = [0.25, 0.5, 1.0, 2.0, 4.0]
DEFAULT_OUT = Path("firstlight-out") / "roofline.png"
BUILD_TIME = {"verilator": "~60-90 s", "icarus": "~10-90 s"}

EPILOG = """\
examples:
  firstlight roofline                                   the chart and the 5-point sweep (Verilator)
  firstlight roofline --no-sweep --shapes 32x32x32 128x128x128 --json roofline.json
  firstlight roofline --sweep-shape 64x256x256 --sweep-bw 0.25 1 4 --out plots/roof.png

Each sweep bandwidth is its own simulator build (a first build takes about a minute; builds are
cached by content hash, so a second run is quick).

""" + exit_codes_help("a kernel's result differed from the golden, or a kernel job failed")


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "roofline", help="roofline chart (PNG) of measured kernels and a DRAM-bandwidth sweep",
        description="Runs GEMMs and a reduction on the chip and plots them on the roofline (attained MACs per "
        "cycle against MACs per DRAM byte moved, under the compute roof and the memory roof), then runs one "
        "GEMM on boards of several DRAM bandwidths (one build each) to show it crossing from memory-bound "
        "to compute-bound.", epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.set_defaults(handler=cmd)
    uses_build_cache(p)
    add_sim_option(p, help="simulator to run on (default: verilator)")
    add_array_option(p, help="systolic array size, e.g. 4x4 (default) or 8x8")
    add_rev_option(p, help="silicon revision (default A0, mitigations on)")
    add_formats_option(p)
    add_sram_depth_option(p)
    add_seed_option(p, help="seed for the random operands (default: 1)")
    add_dram_options(p)
    p.add_argument("--shapes", nargs="+", default=None, metavar="MxNxK",
                   help=f"GEMM shapes on the chart (default: {' '.join(DEFAULT_SHAPES)}; on Icarus the default "
                        f"stops at {ICARUS_MAX_SIDE}^3 MACs)")
    p.add_argument("--reduce", default=DEFAULT_REDUCE, metavar="ROWSxCOLS", action=Tracked,
                   help=f"the int32 row reduction (sum) on the chart (default: {DEFAULT_REDUCE})")
    p.add_argument("--no-reduce", action="store_true", help="no reduction on the chart")
    p.add_argument("--sweep-shape", default=DEFAULT_SWEEP_SHAPE, metavar="MxNxK", action=Tracked,
                   help=f"the GEMM of the bandwidth sweep (default: {DEFAULT_SWEEP_SHAPE}, whose knee is near "
                        "0.56 B/cycle on 4x4)")
    p.add_argument("--sweep-bw", nargs="+", type=float, default=DEFAULT_SWEEP_BW, metavar="BYTES_PER_CYCLE", action=Tracked,
                   help="DRAM bandwidths of the sweep, one simulator build each (default: "
                        f"{' '.join(f'{b:g}' for b in DEFAULT_SWEEP_BW)}; at most the bus width, min(ROWS, COLS) "
                        "bytes per cycle)")
    p.add_argument("--no-sweep", action="store_true", help="the chart only (no sweep, no extra builds)")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, metavar="PATH",
                   help=f"the PNG (default: {DEFAULT_OUT}; its folder is created)")
    add_json_option(p, help="also write every point (and the provenance) as JSON")


# ---- arguments ------------------------------------------------------------------------------------

def parse_gemm_shape(text: str, what: str = "shape") -> list[int]:
    parts = text.lower().split("x")
    if len(parts) != 3 or not all(p.isdigit() and int(p) > 0 for p in parts):
        raise CannotStart(f"{what} must look like MxNxK with positive integers, not {text!r}")
    return [int(p) for p in parts]


def parse_reduce_shape(text: str) -> list[int]:
    parts = text.lower().split("x")
    if len(parts) != 2 or not all(p.isdigit() and int(p) > 0 for p in parts):
        raise CannotStart(f"--reduce must look like ROWSxCOLS with positive integers, not {text!r}")
    return [int(p) for p in parts]


def _shape_text(shape) -> str:
    return "x".join(map(str, shape))


def _fits_dram(board, nbytes: list[int], what: str) -> None:
    """The buffers (each 4 KiB aligned, as the kernels allocate them) must fit in DRAM at all."""
    page = 4096
    need = sum(-(-b // page) * page for b in nbytes)
    if need > board.dram_bytes:
        raise CannotStart(f"{what} needs at least {need:,} bytes of DRAM but the board has {board.dram_bytes:,}; "
                          "give a larger --dram-size or a smaller problem")


def _sweep_boards(variant, bws: list[float]):
    """[(bandwidth asked, variant, resolved board)] in rising bandwidth, one per distinct board."""
    seen, out = set(), []
    for bw in sorted(bws):
        if not (bw > 0 and math.isfinite(bw)):
            raise CannotStart(f"--sweep-bw: bandwidth must be above 0 bytes per cycle, not {bw:g}")
        v = replace(variant, board=replace(variant.board, bandwidth=bw))
        try:
            board = v.resolved_board
        except ValueError as e:
            raise CannotStart(f"--sweep-bw {bw:g}: {e}") from None
        if board not in seen:  # 0.3 and 0.3001 resolve to the same beats per period
            seen.add(board)
            out.append((bw, v, board))
    return out


# ---- points ---------------------------------------------------------------------------------------

def point(panel: str, kernel: str, shape: list[int], record: dict, peak: int) -> dict:
    """One measured kernel as a roofline point (everything the chart, the table and the JSON show).

    ``record`` is what the job returned (``passed``, ``stats``); ``peak`` is ROWS * COLS.
    """
    st = record["stats"]
    useful = st.get("useful_macs") or None  # a tile-language kernel without MACs records 0
    if useful is None:  # a reduction's stats count its useful operations (elements) in the intensity only
        useful = math.prod(shape[:2]) if kernel == "reduce" else math.prod(shape)
    cycles = st["cycles"]
    bw = st["dram_bytes_per_cycle"]
    moved = st["dram_bytes"]
    intensity = useful / moved if moved else math.inf
    # the kernel's own compute roof in its ops per cycle: the engine's peak for a GEMM, one
    # accumulator word per cycle for a reduction (its stats' compute_cycles)
    compute_roof = peak if kernel == "gemm" else useful / (st.get("compute_cycles") or st["ideal_cycles"])
    achieved = useful / cycles if cycles else 0.0
    return {
        "panel": panel, "kernel": kernel, "shape": list(shape),
        "label": _shape_text(shape) if kernel == "gemm" else f"reduce {_shape_text(shape)}",
        "passed": bool(record.get("passed")), "mismatch": record.get("mismatch"),
        "dram_bytes_per_cycle": bw, "ridge_point": compute_roof / bw,
        "cycles": cycles, "useful_macs": useful, "dram_bytes": moved, "compulsory_bytes": st["compulsory_bytes"],
        "intensity": intensity, "compulsory_intensity": useful / st["compulsory_bytes"],
        "macs_per_cycle": achieved, "compute_roof": compute_roof, "memory_roof": bw * intensity,
        "roof_at_intensity": min(compute_roof, bw * intensity),
        "attainable_macs_per_cycle": useful / st["attainable_cycles"],
        "compute_utilization": achieved / compute_roof,
        **{k: st[k] for k in ("compute_cycles", "memory_cycles", "attainable_cycles", "bound", "roof_utilization",
                              "overlap")},
        "dram": st.get("dram"), "plan": st.get("plan"),
    }


def _rate(v: float) -> str:
    """MACs (or elements) per cycle or per byte: two decimals, or three digits when that shows 0.00."""
    return f"{v:.2f}" if abs(v) >= 0.1 or v == 0 else f"{v:.3g}"


COLUMNS = (
    ("panel", "panel", str),
    ("kernel", "label", str),
    ("DRAM\nB/cycle", "dram_bytes_per_cycle", lambda v: f"{v:g}"),
    ("result", "passed", lambda p: Text("pass") if p else Text("FAIL", style="red")),
    ("cycles", "cycles", lambda v: f"{v:,}"),
    ("useful\nMACs", "useful_macs", lambda v: f"{v:,}"),
    ("moved\nbytes", "dram_bytes", lambda v: f"{v:,}"),
    ("MACs\n/byte", "intensity", _rate),
    ("MACs\n/cycle", "macs_per_cycle", _rate),
    ("roof at\nintensity", "roof_at_intensity", _rate),
    ("bound", "bound", str),
    ("roof\nutil", "roof_utilization", fmt_pct),
    ("compute\nutil", "compute_utilization", fmt_pct),
    ("overlap", "overlap", lambda v: f"{v:.2f}"),
)


def points_table(points: list[dict], title: str) -> FittedTable:
    return FittedTable(title, [h for h, _, _ in COLUMNS], [[fmt(p[k]) for _, k, fmt in COLUMNS] for p in points],
                       keys=3)


# ---- the figure -----------------------------------------------------------------------------------

def _knee(sweep: list[dict], peak: int) -> float | None:
    """The bandwidth where the sweep's problem turns compute-bound: peak / compulsory intensity."""
    return peak / sweep[0]["compulsory_intensity"] if sweep else None


def plot(chart: list[dict], sweep: list[dict] | None, meta: dict, path: Path) -> None:
    """The roofline (and, when ``sweep`` is not None, the sweep panel) as a PNG at ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    peak, bw, ridge = meta["peak_macs_per_cycle"], meta["board"]["bytes_per_cycle"], meta["ridge_point"]
    panels = 2 if sweep is not None else 1
    fig, axes = plt.subplots(1, panels, figsize=(7.2 * panels, 6.0), squeeze=False)
    ax = axes[0][0]

    # the roofs over a range that holds every point and the ridge
    xs = [p["intensity"] for p in chart if math.isfinite(p["intensity"]) and p["intensity"] > 0]
    lo = min(xs + [ridge]) / 4
    hi = max(xs + [ridge]) * 4
    x = np.geomspace(lo, hi, 256)
    ax.plot(x, np.minimum(peak, bw * x), color="black", lw=2,
            label=f"roofline: min({peak} MACs/cycle, {bw:g} B/cycle x intensity)")
    ax.plot(x, bw * x, color="black", lw=0.8, ls=":", alpha=0.5)
    ax.axhline(peak, color="black", lw=0.8, ls=":", alpha=0.5)
    ax.plot([ridge], [peak], marker="D", color="black", ms=7, zorder=5)
    ax.axvline(ridge, color="grey", lw=0.8, ls="--")
    ax.annotate(f"ridge point {ridge:g} MACs/byte", (ridge, peak), xytext=(8, 8), textcoords="offset points",
                fontsize=8)
    for roof in sorted({p["compute_roof"] for p in chart if p["kernel"] == "reduce"}):
        ax.plot(x, np.minimum(roof, bw * x), color="tab:orange", lw=1.2, ls="--",
                label=f"reduction roof: {roof:g} elements/cycle (one accumulator word per cycle)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ys = [p["macs_per_cycle"] for p in chart if p["macs_per_cycle"] > 0]
    ax.set_ylim(min(ys + [bw * lo]) / 2, peak * 2.5)
    shown = [p for p in chart if math.isfinite(p["intensity"]) and p["intensity"] > 0 and p["macs_per_cycle"] > 0]
    placed: list[tuple[float, float]] = []  # label corners in points: labels never sit on each other
    for p in sorted(shown, key=lambda p: (p["intensity"], p["macs_per_cycle"])):
        style = dict(marker="o", color="tab:blue") if p["kernel"] == "gemm" else dict(marker="s", color="tab:orange")
        if not p["passed"]:
            style["color"] = "tab:red"
        ax.plot([p["intensity"]], [p["macs_per_cycle"]], ls="none", ms=7, zorder=6, **style)
        px, py = ax.transData.transform((p["intensity"], p["macs_per_cycle"])) * 72 / fig.dpi
        dy = -4
        while any(abs(px - qx) < 95 and abs(py + dy - qy) < 24 for qx, qy in placed) and dy > -120:
            dy -= 24
        placed.append((px, py + dy))
        ax.annotate(f"{p['label']}\n{p['roof_utilization']:.0%} of roof ({p['bound']})",
                    (p["intensity"], p["macs_per_cycle"]), xytext=(6, dy), textcoords="offset points", fontsize=7,
                    va="top", arrowprops=dict(arrowstyle="-", lw=0.4, color="grey") if dy < -4 else None)
    ax.set_xlabel("arithmetic intensity: useful MACs per DRAM byte moved")
    ax.set_ylabel("attained MACs per cycle (reduction: elements per cycle)")
    ax.set_title(f"Roofline, DRAM {bw:g} B/cycle", fontsize=10)
    ax.grid(True, which="both", alpha=0.25)
    # the point markers in the legend, by name (the title once said "GEMM o, reduction s")
    for name, style in (("GEMM", dict(marker="o", color="tab:blue")), ("reduction", dict(marker="s", color="tab:orange")),
                        ("failed its golden", dict(marker="o", color="tab:red"))):
        ax.plot([], [], ls="none", ms=7, label=name, **style)
    ax.legend(fontsize=7, loc="upper left")

    if sweep is not None:
        ax2 = axes[0][1]
        if sweep:
            s_bw = np.array([p["dram_bytes_per_cycle"] for p in sweep])
            knee = _knee(sweep, peak)
            ci = sweep[0]["compulsory_intensity"]
            b_lo, b_hi = min(s_bw.min(), knee) / 1.6, max(s_bw.max(), knee) * 1.6
            bx = np.geomspace(b_lo, b_hi, 256)
            ax2.plot(bx, np.minimum(peak, bx * ci), color="black", lw=2,
                     label=f"attainable: min({peak}, bandwidth x {ci:.1f} compulsory MACs/byte)")
            ax2.plot(s_bw, [p["macs_per_cycle"] for p in sweep], color="tab:blue", lw=1)
            for p in sweep:
                mem = p["bound"] == "memory"
                ax2.plot([p["dram_bytes_per_cycle"]], [p["macs_per_cycle"]], ls="none", ms=8, zorder=6,
                         marker="v" if mem else "^", color="tab:red" if not p["passed"] else
                         ("tab:purple" if mem else "tab:green"))
                ax2.annotate(_rate(p["macs_per_cycle"]), (p["dram_bytes_per_cycle"], p["macs_per_cycle"]),
                             xytext=(6, 4), textcoords="offset points", fontsize=7)
            ax2.plot([], [], ls="none", marker="v", color="tab:purple", label="achieved, memory-bound")
            ax2.plot([], [], ls="none", marker="^", color="tab:green", label="achieved, compute-bound")
            if not all(p["passed"] for p in sweep):
                ax2.plot([], [], ls="none", marker="o", color="tab:red", label="result differs from the golden")
            ax2.axvline(knee, color="grey", lw=0.8, ls="--")
            ax2.axvspan(b_lo, knee, color="tab:purple", alpha=0.06)
            ax2.annotate(f"knee {knee:.2f} B/cycle: memory-bound | compute-bound", (knee, peak * 1.08),
                         ha="center", va="bottom", fontsize=8)
            ax2.set_xscale("log", base=2)
            ax2.set_xlim(b_lo, b_hi)
            ax2.set_xticks(list(s_bw), [f"{b:g}" for b in s_bw])
            ax2.set_ylim(0, peak * 1.2)
            util = ax2.twinx()
            util.plot(s_bw, [100 * p["roof_utilization"] for p in sweep], color="tab:orange", marker="o", lw=1,
                      ls="--", label="roof utilisation (right axis)")
            util.set_ylim(0, 105)
            util.set_ylabel("roof utilisation: attainable / measured cycles (%)")
            h1, l1 = ax2.get_legend_handles_labels()
            h2, l2 = util.get_legend_handles_labels()
            ax2.legend(h1 + h2, l1 + l2, fontsize=7, loc="lower right")
            ax2.set_title(f"GEMM {meta['sweep_shape']} vs DRAM bandwidth (one build per point)", fontsize=10)
        else:
            ax2.text(0.5, 0.5, "no sweep point finished", ha="center", va="center", transform=ax2.transAxes)
        ax2.set_xlabel("DRAM bandwidth (bytes per cycle)")
        ax2.set_ylabel("achieved MACs per cycle")
        ax2.grid(True, which="both", alpha=0.25)

    fig.suptitle(meta["title"], fontsize=11)
    fig.text(0.01, 0.01, meta["footnote"], fontsize=7, ha="left", va="bottom", wrap=True)
    fig.tight_layout(rect=(0, 0.07, 1, 0.95))
    from firstlight.provenance import png_metadata

    fig.savefig(path, dpi=110, metadata=png_metadata(meta.get("sim"), meta.get("command")))
    plt.close(fig)


# ---- the command ----------------------------------------------------------------------------------

@dataclass
class Run:
    """One simulator build and what runs on it: the chart's board also serves the sweep point of
    its own bandwidth, every other sweep point is a board of its own."""

    what: str
    variant: object  # cosim.build.Variant
    board: object  # its resolved rtl.board.BoardConfig
    gemm: list[list[int]]
    reduce: list[int] | None = None
    chart: bool = False  # its GEMMs and reduction are the chart's points
    sweep: bool = False  # its run of the sweep's GEMM is a sweep point


@dataclass
class Plan:
    """Everything the arguments ask for, checked before anything is built."""

    variant: object
    shapes: list[list[int]]
    reduce: list[int] | None
    sweep_shape: list[int] | None  # None: --no-sweep
    sweep_boards: list = field(default_factory=list)  # resolved boards, rising bandwidth
    skipped: list[list[int]] = field(default_factory=list)  # default shapes too slow for Icarus

    def runs(self) -> list[Run]:
        board = self.variant.resolved_board
        runs = [Run("the chart's board", self.variant, board, list(self.shapes), self.reduce, chart=True)]
        for i, (v, b) in enumerate(self.sweep_boards):
            if b == board:
                runs[0].sweep = True
                if self.sweep_shape not in runs[0].gemm:
                    runs[0].gemm.append(self.sweep_shape)
            else:
                runs.append(Run(f"sweep point {i + 1}/{len(self.sweep_boards)}", v, b, [self.sweep_shape],
                                sweep=True))
        return runs


def plan_from_args(args) -> Plan:
    """The runs the arguments ask for; :class:`CannotStart` for any bad one, before a build."""
    if args.out.suffix.lower() != ".png":
        raise CannotStart(f"--out {args.out}: the chart is a PNG; give a path ending in .png")
    variant = variant_from_args(args)
    board = variant.resolved_board
    shapes = [parse_gemm_shape(s) for s in (args.shapes or DEFAULT_SHAPES)]
    skipped = []
    if args.sim == "icarus" and not args.shapes:
        skipped = [s for s in shapes if math.prod(s) > ICARUS_MAX_SIDE**3]
        shapes = [s for s in shapes if s not in skipped]
    shapes = [s for i, s in enumerate(shapes) if s not in shapes[:i]]
    if args.no_reduce:
        refuse_unused(args, "--no-reduce", ("reduce",))
    if args.no_sweep:
        refuse_unused(args, "--no-sweep", ("sweep_shape", "sweep_bw"))
    red = None if args.no_reduce else parse_reduce_shape(args.reduce)
    sweep_shape = None if args.no_sweep else parse_gemm_shape(args.sweep_shape, "--sweep-shape")
    sweep_boards = [] if args.no_sweep else _sweep_boards(variant, args.sweep_bw)
    for s in shapes + ([sweep_shape] if sweep_shape else []):
        m, n, k = s
        _fits_dram(board, [m * k, k * n, 4 * m * n], f"GEMM {_shape_text(s)}")  # A, B, int32 C
    if red:
        _fits_dram(board, [4 * red[0] * red[1], 4 * red[0]], f"reduction {_shape_text(red)}")
    return Plan(variant, shapes, red, sweep_shape, [(v, b) for _, v, b in sweep_boards], skipped)


def _describe_board(board) -> str:
    size = board.dram_bytes
    size_text = f"{size >> 20} MiB" if size >= 1 << 20 else f"{size >> 10} KiB"
    return (f"{board.bytes_per_cycle:g} B/cycle ({board.beats} beat(s) of {board.bus_bytes} B per {board.period} "
            f"cycle(s)), latency {board.latency} cycles, {size_text}")


class Measurements:
    """The points so far, and what went wrong (a wrong result: exit 1; the harness: exit 3)."""

    def __init__(self, peak: int):
        self.peak = peak
        self.chart: list[dict] = []
        self.sweep: list[dict] = []
        self.errors: list[str] = []
        self.failed = False
        self.harness = False
        self.interrupted: Interrupted | None = None

    def error(self, where: str, e: Exception) -> None:
        from cosim.build import HarnessError

        died = isinstance(e, HarnessError)  # a failed build or a dead simulator (SimulatorDied is one)
        self.harness |= died
        self.failed |= not died
        self.errors.append(f"{where}: {e}")
        err_console.print(plain((f"{where}: {'harness error: ' if died else ''}{e}", "red")))

    def add(self, panel: str, kernel: str, shape: list[int], record: dict) -> dict:
        p = point(panel, kernel, shape, record, self.peak)
        (self.chart if panel == "roofline" else self.sweep).append(p)
        self.failed |= not p["passed"]
        return p

    def run(self, r: Run, plan: Plan, sim: str, seed: int) -> None:
        from cosim.build import HarnessError, build_simulator
        from cosim.jobs import JobFailed, run_job
        from firstlight.jobs import kernels as kernel_jobs

        where = f"{r.board.bytes_per_cycle:g} B/cycle"
        err_console.print(plain(f"{r.what}: building the board with {where} (first time "
                                f"{BUILD_TIME.get(sim, 'a minute or two')}, cached afterwards)"))
        try:
            build = build_simulator(r.variant, sim=sim)
        except HarnessError as e:
            self.error(f"build at {where}", e)
            return
        err_console.print(plain(f"  {'cached' if build.cache_hit else f'built in {build.build_s:.0f} s'}; running "
                                + ", ".join(_shape_text(s) for s in r.gemm)
                                + (f" and reduce {_shape_text(r.reduce)}" if r.reduce else "")))
        new = []
        try:
            res = run_job(kernel_jobs.bench_job, {"shapes": r.gemm, "seed": seed, "errata_policy": {},
                                                  "double_buffer": [True]}, variant=r.variant, sim=sim, build=build)
            recs = [x for x in res.records if x.get("type") == "bench"]
        except JobFailed as e:
            recs = [x for x in e.records if x.get("type") == "bench"]
            self.error(f"GEMMs at {where}", e)
        for rec in recs:
            shape = list(rec["shape"])
            shown = []
            if r.chart and shape in plan.shapes:
                shown.append(self.add("roofline", "gemm", shape, rec))
            if r.sweep and shape == plan.sweep_shape:
                shown.append(self.add("sweep", "gemm", shape, rec))
            new += shown[:1]  # one line for a run that is on both panels
        if r.reduce:
            rows, cols = r.reduce
            try:
                res = run_job(kernel_jobs.reduce_job, {"rows": rows, "cols": cols, "op": "sum", "seed": seed,
                                                       "errata_policy": {}}, variant=r.variant, sim=sim, build=build)
                new.append(self.add("roofline", "reduce", [rows, cols], res.value))
            except JobFailed as e:
                self.error(f"reduction at {where}", e)
        for p in new:
            unit = "MACs" if p["kernel"] == "gemm" else "elements"
            err_console.print(plain(f"  {p['label']} at {where}: {p['cycles']:,} cycles, {_rate(p['macs_per_cycle'])} "
                                    f"{unit}/cycle, {p['bound']}-bound, {p['roof_utilization']:.0%} of the roof"
                                    + ("" if p["passed"] else " (FAILED: differs from the golden)")))


def _footnote(plan: Plan, board, cfg, args, prov: dict, m: Measurements) -> str:
    parts = [f"DRAM {_describe_board(board)} (ridge {board.ridge_point(cfg):g} MACs/byte)"]
    if plan.sweep_shape:
        parts.append("sweep: the same board at " + ", ".join(f"{b.bytes_per_cycle:g}" for _, b in plan.sweep_boards)
                     + " B/cycle")
    commit = prov["git_commit"][:12] + (" with local changes" if prov["git_dirty"] else "")
    parts += [f"seed {args.seed}", f"commit {commit}", prov["timestamp"], prov["command"]]
    if m.interrupted or m.errors:
        parts.append(f"INCOMPLETE ({m.interrupted.name if m.interrupted else 'errors: see the JSON'})")
    return "; ".join(parts)


def cmd(args) -> int:
    plan = plan_from_args(args)  # every argument first: a bad one exits 2 before any build
    check_output_file(args.out, "--out")  # --json and the build cache were checked by main()
    require_sim(args.sim)
    cfg, board = plan.variant.config, plan.variant.resolved_board
    peak = cfg.peak_macs_per_cycle
    for s in plan.skipped:
        console.print(plain(("skipping ", "yellow"), f"{_shape_text(s)} on Icarus (over {ICARUS_MAX_SIDE}^3 MACs; "
                            "give --shapes to run it)"))
    from firstlight.provenance import provenance

    prov = provenance(args.sim, getattr(args, "command_line", None))
    m = Measurements(peak)
    try:
        for r in plan.runs():
            m.run(r, plan, args.sim, args.seed)
    except (Interrupted, KeyboardInterrupt) as e:  # what finished is still drawn and written
        m.interrupted = Interrupted.of(e)
    m.sweep.sort(key=lambda p: p["dram_bytes_per_cycle"])
    knee = _knee(m.sweep, peak)
    meta = {
        "title": (f"Roofline: {cfg.rows}x{cfg.cols} array (peak {peak} MACs/cycle), revision {args.rev}, "
                  f"{args.sim}, formats {'/'.join(cfg.formats)}; int8 kernels checked against the golden, "
                  "mitigations on"),
        "footnote": _footnote(plan, board, cfg, args, prov, m),
        "peak_macs_per_cycle": peak, "board": board.as_dict(), "ridge_point": board.ridge_point(cfg),
        "sweep_shape": _shape_text(plan.sweep_shape) if plan.sweep_shape else None,
        "sim": args.sim, "command": prov["command"],  # the PNG's provenance chunks
    }
    result = {
        "provenance": prov, "revision": args.rev, "sim": args.sim, "array": f"{cfg.rows}x{cfg.cols}",
        "formats": list(cfg.formats), "config": cfg.as_dict(), "seed": args.seed,
        "peak_macs_per_cycle": peak, "board": board.as_dict(), "ridge_point": board.ridge_point(cfg),
        "sweep": None if plan.sweep_shape is None else {
            "shape": plan.sweep_shape, "bandwidths": [b.bytes_per_cycle for _, b in plan.sweep_boards],
            "compulsory_intensity": m.sweep[0]["compulsory_intensity"] if m.sweep else None,
            "knee_bandwidth": knee},
        "points": m.chart + m.sweep, "png": str(args.out), "errors": m.errors,
        "interrupted": m.interrupted.name if m.interrupted else None,
        "passed": not (m.failed or m.harness or m.errors or m.interrupted),
    }
    drawn = bool(m.chart or m.sweep)
    with shielded():  # a second signal must not cost what was measured
        if drawn:
            plot(m.chart, None if plan.sweep_shape is None else m.sweep, meta, args.out)
        if args.json:
            from firstlight.provenance import with_provenance

            args.json.write_text(json.dumps(with_provenance(result, getattr(args, "sim", None),
                                                            getattr(args, "command_line", None)), indent=2, default=str))
    if drawn:
        console.print(points_table(m.chart + m.sweep, f"Roofline points ({cfg.rows}x{cfg.cols}, peak {peak} "
                                   f"MACs/cycle, revision {args.rev}, {args.sim}; chart at "
                                   f"{board.bytes_per_cycle:g} B/cycle)"))
    if knee is not None:
        console.print(plain(f"sweep {_shape_text(plan.sweep_shape)}: {m.sweep[0]['compulsory_intensity']:.2f} "
                            f"compulsory MACs per byte, so memory-bound below {knee:.2f} B/cycle and compute-bound "
                            "above"))
    wrote = ([str(args.out)] if drawn else []) + ([str(args.json)] if args.json else [])
    console.print(plain("wrote ", " and ".join(wrote)) if wrote else plain(("no point finished: no chart", "red")))
    if m.interrupted:
        raise m.interrupted
    return EXIT_HARNESS_ERROR if m.harness else EXIT_FAIL if m.failed else EXIT_OK
