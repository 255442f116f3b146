"""A sweep spec (TOML): the design grid, the workloads, and their checks before anything is built.

A spec has a ``[grid]`` table (or several ``[[grid]]`` tables, whose design points are joined)
and ``[[workload]]`` tables::

    name = "small"            # optional, shown in reports
    sim = "verilator"         # or "icarus"
    seed = 1                  # the workloads' data

    [grid]                    # every key: one value, or a list of values (an axis)
    array = ["2x2", "4x4"]
    sram_depth = [64, 256]    # operand_depth and acc_depth together
    formats = "int8"          # "int8", "int8+e4m3", "all"
    vector = false
    dram_bandwidth = [0.5, 1, 2]

    [[workload]]
    kind = "gemm"
    m = 32
    n = 32
    k = 64

The grid is the product of its axes. Every design point is checked by the chip's and the board's
own validation (:class:`rtl.config.ChipConfig`, :meth:`rtl.board.BoardConfig.resolve`), every
workload by its kind's parameters, and each (design, workload) pair by what the design lacks for
it (the vector unit, a format, DRAM, an erratum mitigation the kernel does not implement): such
a pair is *not applicable* and is not run; a workload that applies to no design is an error.
Every problem is a :class:`SpecError` naming the key, the value and what is accepted.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import tomllib
from dataclasses import dataclass, field, replace
from pathlib import Path

from cosim.build import Variant
from rtl.board import BoardConfig
from rtl.config import FORMAT_NAMES, ChipConfig

__all__ = ["SpecError", "Spec", "Design", "Workload", "load_spec", "parse_spec", "GRID_KEYS", "WORKLOAD_KINDS", "workload_kinds",
           "not_applicable"]


class SpecError(ValueError):
    """A spec that cannot be run: the message says where, what was wrong, and what is accepted."""


# ---- the grid -----------------------------------------------------------------------------------

# key -> what it sets (the help of `sweep run` and docs/sweeps.md list these)
GRID_KEYS = {
    "array": "ROWSxCOLS of the systolic array, e.g. \"4x4\" (rows and cols: 2, 4, 8, 16)",
    "rows": "PE rows (instead of array)",
    "cols": "PE columns (instead of array)",
    "sram_depth": "words in the operand SRAMs and the accumulator SRAM together",
    "operand_depth": "words in each of the A and B operand SRAMs",
    "acc_depth": "words in the accumulator SRAM",
    "cmdq_depth": "entries in the command ring",
    "cmd_fifo_depth": "commands prefetched ahead of execution",
    "trace_depth": "entries of the trace buffer (power of two, 4 .. 32768); its SRAM bits count in the area",
    "formats": "MATMUL formats: \"int8\", \"int8+e4m3\", ..., or \"all\"",
    "vector": "build the vector unit (true/false)",
    "revision": "silicon revision (A0, A1, B0, ...)",
    "dram_bandwidth": "sustained DRAM bytes per cycle, or \"auto\" (peak MACs / 16)",
    "dram_latency": "DRAM read latency in cycles",
    "dram_bytes": "DRAM size in bytes (power of two, 4096 .. 16 MiB)",
    "dram_bus_bytes": "AXI data width in bytes (default: the narrowest SRAM word)",
}

# A parameter a spec does not name takes the chip's and the board's own default (rtl/config.py,
# rtl/board.py); the revision defaults to A0 as everywhere in the CLI.
_GRID_DEFAULTS = {"revision": "A0"}


def _formats(value, where: str) -> tuple[str, ...]:
    if value == "all":
        return FORMAT_NAMES
    if not isinstance(value, str):
        raise SpecError(f"{where}: formats must be a string such as \"int8\", \"int8+e4m3\" or \"all\" (a list is an "
                        f"axis of such strings), not {value!r}")
    names = tuple(v.strip() for v in value.split("+"))
    bad = [n for n in names if n not in FORMAT_NAMES]
    if bad:
        raise SpecError(f"{where}: unknown format {bad[0]!r} in formats {value!r}; known: {', '.join(FORMAT_NAMES)} "
                        "(joined with +, int8 always included)")
    return names


def _did_you_mean(word: str, known) -> str:
    import difflib

    close = difflib.get_close_matches(word, list(known), n=1, cutoff=0.5)
    return f" (did you mean {close[0]!r}?)" if close else ""


@dataclass(frozen=True)
class Design:
    """One design point: the variant it builds, and its name in tables and the database."""

    variant: Variant
    name: str
    assignment: tuple[tuple[str, object], ...] = ()  # the grid values that made it (for messages)

    def describe(self) -> dict:
        return self.variant.describe()


def design_name(v: Variant) -> str:
    """A stable, readable name for a variant: every parameter a sweep can vary, in a fixed order
    (``4x4-op64-acc64-q64-int8-novec-bw1-lat32-A0``; FIFO and trace depth, DRAM size and bus only
    when not the default)."""
    c, b = v.config, v.resolved_board
    fm = "all" if c.formats == FORMAT_NAMES else "+".join(c.formats)
    parts = [f"{c.rows}x{c.cols}", f"op{c.operand_depth}", f"acc{c.acc_depth}", f"q{c.cmdq_depth}"]
    if c.cmd_fifo_depth != ChipConfig.cmd_fifo_depth:
        parts.append(f"fifo{c.cmd_fifo_depth}")
    if c.trace_depth != ChipConfig.trace_depth:  # only when not the default, so older names stay
        parts.append(f"tr{c.trace_depth}")
    parts += [fm, "vec" if c.vector else "novec", f"bw{b.bytes_per_cycle:g}", f"lat{b.latency}"]
    if b.dram_bytes != BoardConfig.dram_bytes:
        parts.append(f"dram{b.dram_bytes >> 10}k")
    if v.board.bus_bytes is not None:
        parts.append(f"bus{b.bus_bytes}")
    parts.append(v.revision)
    return "-".join(parts)


def _design(assign: dict, where: str) -> Design:
    from rtl.revisions import REVISIONS

    a = dict(assign)
    desc = ", ".join(f"{k}={v!r}" for k, v in assign.items())
    where = f"{where} ({desc})" if desc else where
    chip: dict = {}
    if "array" in a:
        if "rows" in a or "cols" in a:
            raise SpecError(f"{where}: give either array or rows/cols, not both")
        text = a.pop("array")
        try:
            cfg = ChipConfig.parse_array(str(text))
        except ValueError as e:
            raise SpecError(f"{where}: {e}") from None
        chip.update(rows=cfg.rows, cols=cfg.cols)
    for k in ("rows", "cols", "operand_depth", "acc_depth", "cmdq_depth", "cmd_fifo_depth", "trace_depth", "vector"):
        if k in a:
            chip[k] = a.pop(k)
    if "sram_depth" in a:
        if "operand_depth" in chip or "acc_depth" in chip:
            raise SpecError(f"{where}: give either sram_depth or operand_depth/acc_depth, not both")
        d = a.pop("sram_depth")
        chip.update(operand_depth=d, acc_depth=d)
    if "formats" in a:
        chip["formats"] = _formats(a.pop("formats"), where)
    try:
        cfg = ChipConfig(**chip)
    except (ValueError, TypeError) as e:
        raise SpecError(f"{where}: the chip rejects it: {e}") from None
    rev = str(a.pop("revision", _GRID_DEFAULTS["revision"])).upper()
    if rev not in REVISIONS:
        raise SpecError(f"{where}: unknown revision {rev!r}{_did_you_mean(rev, REVISIONS)}; known: "
                        f"{', '.join(REVISIONS)}")
    board: dict = {}
    bw = a.pop("dram_bandwidth", "auto")
    if bw != "auto":
        if isinstance(bw, bool) or not isinstance(bw, (int, float)):
            raise SpecError(f"{where}: dram_bandwidth must be a number of bytes per cycle or \"auto\", not {bw!r}")
        board["bandwidth"] = float(bw)
    for key, field_ in (("dram_latency", "latency"), ("dram_bytes", "dram_bytes"), ("dram_bus_bytes", "bus_bytes")):
        if key in a:
            board[field_] = a.pop(key)
    assert not a, a  # every grid key is consumed above
    try:
        b = BoardConfig(**board)
        b.resolve(cfg)
    except (ValueError, TypeError) as e:
        raise SpecError(f"{where}: the board rejects it: {e}") from None
    v = Variant(config=cfg, revision=rev, board=b)
    return Design(v, design_name(v), tuple(assign.items()))


def _grid_designs(grid: dict, where: str) -> list[Design]:
    if not isinstance(grid, dict):
        raise SpecError(f"{where} must be a table of parameter = value or [values], not {grid!r}")
    axes = []
    for key, value in grid.items():
        if key not in GRID_KEYS:
            raise SpecError(f"{where}: unknown parameter {key!r}{_did_you_mean(key, GRID_KEYS)}; known: "
                            f"{', '.join(GRID_KEYS)}")
        values = value if isinstance(value, list) else [value]
        if not values:
            raise SpecError(f"{where}: {key} = [] is an empty axis, so the grid has no design point; give at least "
                            "one value")
        axes.append([(key, v) for v in values])
    return [_design(dict(combo), where) for combo in itertools.product(*axes)]


# ---- workloads ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Kind:
    required: tuple[str, ...]
    optional: dict = field(default_factory=dict)  # name -> default
    vector: bool = False  # needs the vector unit
    summary: str = ""


WORKLOAD_KINDS = {
    "gemm_lowp": Kind(("m", "n", "k", "recipe"), summary="a float GEMM quantized by a golden/quant.py recipe "
                      "(int8-*, fp8-*, mxfp8-*, mxfp4-*); an FP recipe needs its format on the chip"),
    "bringup": Kind((), summary="the whole first-light checklist, one verdict (firstlight regress runs it)"),
}

_POSITIVE = {"m", "n", "k", "seq", "dim", "rows", "cols"}


def workload_kinds() -> dict[str, Kind]:
    """The hand-declared kinds above and one per tile-language kernel, from its KernelSpec (its
    shape parameters required, the others optional with their defaults)."""
    from kernels.tile.spec import registry

    out = dict(WORKLOAD_KINDS)
    for spec in registry().values():
        for name in (spec.name, *spec.aliases):
            out[name] = Kind(tuple(p.name for p in spec.params if p.shape),
                             {p.name: p.default for p in spec.params if not p.shape},
                             vector="vector" in spec.needs, summary=spec.summary)
    return out


@dataclass(frozen=True)
class Workload:
    """One workload: a kernel on seeded data of one shape, checked against its golden."""

    name: str
    kind: str
    params: tuple[tuple[str, object], ...]  # every parameter, defaults filled in, sorted
    seed: int

    @property
    def p(self) -> dict:
        return dict(self.params)

    def describe(self) -> dict:
        return {"kind": self.kind, **self.p, "seed": self.seed}


def default_name(kind: str, p: dict) -> str:
    if kind == "gemm":
        return f"gemm-{p['m']}x{p['n']}x{p['k']}" + (f"-{p['epilogue']}" if p["epilogue"] != "none" else "")
    if kind == "gemm_lowp":
        return f"gemm-{p['m']}x{p['n']}x{p['k']}-{p['recipe']}"
    if kind == "attention":
        return f"attention-s{p['seq']}-d{p['dim']}" + ("-causal" if p["causal"] else "") + (
            f"-{p['recipe']}" if p["recipe"] != "int8" else "")
    if kind == "reduce":
        return f"reduce-{p['op']}-{p['rows']}x{p['cols']}"
    if kind == "bringup":
        return "bringup"
    return f"{kind}-{p['rows']}x{p['cols']}"


def _workload(table, i: int, seed: int) -> Workload:
    where = f"workload {i + 1}"
    if not isinstance(table, dict):
        raise SpecError(f"{where} must be a table ([[workload]] with kind = ... and its parameters), not {table!r}")
    t = dict(table)
    kind = t.pop("kind", None)
    kinds = workload_kinds()
    if kind not in kinds:
        raise SpecError(f"{where}: kind {kind!r} is not a workload kind{_did_you_mean(str(kind), kinds)}; "
                        f"known: {', '.join(kinds)}")
    k = kinds[kind]
    where = f"{where} ({kind})"
    name = t.pop("name", None)
    wseed = t.pop("seed", seed)
    if not isinstance(wseed, int) or isinstance(wseed, bool) or wseed < 0:
        raise SpecError(f"{where}: seed must be a non-negative integer, not {wseed!r}")
    allowed = set(k.required) | set(k.optional)
    for key in t:
        if key not in allowed:
            raise SpecError(f"{where}: unknown parameter {key!r}{_did_you_mean(key, allowed)}; a {kind} takes "
                            f"{', '.join(k.required)}" + (f" and optionally {', '.join(k.optional)}" if k.optional else ""))
    missing = [r for r in k.required if r not in t]
    if missing:
        raise SpecError(f"{where}: missing {', '.join(missing)} (a {kind} takes {', '.join(k.required)})")
    p = {**k.optional, **t}
    for key in _POSITIVE & set(p):
        v = p[key]
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise SpecError(f"{where}: {key} must be a positive integer, not {v!r}")
    if kind not in WORKLOAD_KINDS:  # a tile-language kernel: its declaration checks its parameters
        from kernels.tile.spec import get

        try:
            p = get(kind).resolve(p)
        except ValueError as e:
            raise SpecError(f"{where}: {e}") from None
    if kind == "gemm_lowp":
        from golden.quant import RECIPES

        if p["recipe"] not in RECIPES:
            raise SpecError(f"{where}: unknown recipe {p['recipe']!r}{_did_you_mean(str(p['recipe']), RECIPES)}; "
                            f"known: {', '.join(RECIPES)}")
    name = name or default_name(kind, p)
    if not isinstance(name, str) or not name:
        raise SpecError(f"{where}: name must be a non-empty string, not {name!r}")
    return Workload(name, kind, tuple(sorted(p.items())), wseed)


def not_applicable(design: Design, w: Workload) -> str | None:
    """Why ``w`` cannot run on ``design`` (the design lacks something it needs), or None."""
    cfg, p = design.variant.config, w.p
    board = design.variant.resolved_board
    if workload_kinds()[w.kind].vector and not cfg.vector:
        return "needs the vector unit"
    kernel = None  # the tile-language kernel that runs the workload, and its parameters
    if w.kind not in WORKLOAD_KINDS:  # a tile-language kernel: its declaration says why it refuses
        kernel = (w.kind, p)
    elif w.kind == "gemm_lowp":
        from golden.quant import RECIPES

        r = RECIPES[p["recipe"]]
        if r.fmt != "int8" and r.fmt not in cfg.formats:
            return f"recipe {p['recipe']} needs the {r.fmt} format"
        # kernels/lowp.py: an int8 recipe runs the int8 GEMM, an FP one gemm_fp
        dims = {k: p[k] for k in ("m", "n", "k")}
        kernel = ("gemm", dims) if r.kind == "int8" else ("gemm_fp", {**dims, "recipe": p["recipe"]})
    if kernel is not None:
        from kernels.tile.ir import TileError
        from kernels.tile.runtime import check_dram
        from kernels.tile.spec import get

        spec = get(kernel[0])
        params = spec.resolve(kernel[1])
        why = spec.refusal(cfg, params)
        if why:
            return why
        try:  # the compiler's own DRAM placement, before anything is built
            check_dram(cfg, spec.tensors(params), board.dram_bytes, board.bus_bytes)
        except TileError as e:
            return str(e)
    return None


# ---- the spec -----------------------------------------------------------------------------------

_TOP_KEYS = {"name", "description", "sim", "seed", "grid", "workload"}


@dataclass(frozen=True)
class Spec:
    name: str
    sim: str
    designs: tuple[Design, ...]
    workloads: tuple[Workload, ...]
    skipped: tuple[tuple[str, str, str], ...]  # (design, workload, why): pairs that are not applicable
    source: str = ""  # the path it was read from

    def pairs(self) -> list[tuple[Design, Workload]]:
        """The (design, workload) pairs to run: every applicable one."""
        skip = {(d, w) for d, w, _ in self.skipped}
        return [(d, w) for d in self.designs for w in self.workloads if (d.name, w.name) not in skip]

    def digest(self) -> str:
        text = json.dumps({"sim": self.sim, "designs": [d.name for d in self.designs],
                           "workloads": [w.describe() for w in self.workloads]}, sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:12]


def parse_spec(data: dict, source: str = "") -> Spec:
    """Check a parsed TOML spec and expand it (raises :class:`SpecError`)."""
    from cosim.toolchain import SIMULATORS

    for key in data:
        if key not in _TOP_KEYS:
            raise SpecError(f"unknown top-level key {key!r}{_did_you_mean(key, _TOP_KEYS)}; a spec has "
                            f"{', '.join(sorted(_TOP_KEYS))}")
    sim = data.get("sim", "verilator")
    if sim not in SIMULATORS:
        raise SpecError(f"sim must be one of {', '.join(SIMULATORS)}, not {sim!r}")
    seed = data.get("seed", 1)
    if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
        raise SpecError(f"seed must be a non-negative integer, not {seed!r}")
    grids = data.get("grid")
    if grids is None:
        raise SpecError("the spec has no [grid] table: name at least one design parameter, e.g. array = \"4x4\"")
    grids = grids if isinstance(grids, list) else [grids]
    if not grids:
        raise SpecError("grid = [] has no design point")
    designs: dict[str, Design] = {}
    for i, g in enumerate(grids):
        for d in _grid_designs(g, "[grid]" if len(grids) == 1 else f"[[grid]] {i + 1}"):
            designs.setdefault(d.name, d)  # the same point from two grids is one design
    tables = data.get("workload")
    if not tables:
        raise SpecError("the spec has no [[workload]]: name at least one (kind = \"gemm\", m = ..., n = ..., k = ...)")
    if not isinstance(tables, list):
        raise SpecError("workload must be an array of tables ([[workload]]), not a single table ([workload])")
    workloads = [_workload(t, i, seed) for i, t in enumerate(tables)]
    names = [w.name for w in workloads]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise SpecError(f"two workloads are named {dup[0]!r}: give one of them its own name = \"...\"")
    skipped = []
    for w in workloads:
        why = {d.name: not_applicable(d, w) for d in designs.values()}
        if all(why.values()):
            first = next(iter(why.items()))
            raise SpecError(f"workload {w.name!r} runs on no design point of the grid (e.g. {first[0]}: {first[1]})")
        skipped += [(dn, w.name, r) for dn, r in why.items() if r]
    name = data.get("name") or (Path(source).stem if source else "sweep")
    return Spec(str(name), sim, tuple(designs.values()), tuple(workloads), tuple(skipped), source)


def load_spec(path: Path) -> Spec:
    """Read and check a spec file (raises :class:`SpecError`)."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as e:
        raise SpecError(f"cannot read the spec {path}: {e.strerror or e}") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise SpecError(f"{path} is not valid TOML: {e}") from None
    try:
        return parse_spec(data, str(path))
    except SpecError as e:
        raise SpecError(f"{path}: {e}") from None


def with_designs(spec: Spec, designs) -> Spec:
    return replace(spec, designs=tuple(designs))
