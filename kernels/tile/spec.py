"""One declaration per kernel: :class:`KernelSpec`, and the registry every surface reads.

A kernel module in ``kernels/tiled/`` (or a module named in ``FIRSTLIGHT_KERNEL_MODULES``,
comma-separated) declares ``SPEC = KernelSpec(...)``: its tile-language source, its typed
parameters with ranges and defaults, its tensors, a seeded input generator, its golden (from
``golden/``), what it needs of the chip and the ATen operator it implements. The command line
(``firstlight run <kernel>``), the session (``chip.run_kernel``), the bench rows, the sweep's
workload kinds, the PyTorch operators (``torch.ops.firstlight_kernels.<kernel>``) and the
``torch.compile`` planners of the ATen operators the kernels bind (:class:`AtenOp`) are generated
from :func:`registry`.
"""

from __future__ import annotations

import importlib
import os
import pkgutil
from dataclasses import dataclass
from typing import Callable

import numpy as np

from .ir import TileError
from .runtime import TensorSpec, build, check_dram, run, units_busy_cycles

__all__ = ["Param", "Target", "AtenOp", "KernelSpec", "registry", "get", "run_spec", "call", "KernelRefused"]


class KernelRefused(ValueError):
    """A kernel that cannot run with these parameters on this chip; the message says why."""


@dataclass(frozen=True)
class Param:
    """A typed kernel parameter: ``kind`` int, float, bool or str; ``lo``/``hi`` (numbers) or
    ``choices`` (str) bound it. ``shape``: it is a problem dimension (it picks the tensors' shapes)."""

    name: str
    kind: type
    default: object
    help: str
    lo: float | None = None
    hi: float | None = None
    choices: tuple = ()
    shape: bool = False

    def check(self, value):
        """``value`` converted to the parameter's type, or ValueError saying what is accepted."""
        if self.kind is bool:
            if not isinstance(value, (bool, np.bool_)):
                raise ValueError(f"{self.name} must be true or false, not {value!r}")
            return bool(value)
        try:
            v = self.kind(value)
        except (TypeError, ValueError):
            raise ValueError(f"{self.name} must be {self.kind.__name__}, not {value!r}") from None
        if self.kind is int and (isinstance(value, float) and not float(value).is_integer()):
            raise ValueError(f"{self.name} must be an integer, not {value!r}")
        if self.kind is float and not np.isfinite(v):
            raise ValueError(f"{self.name} must be a finite number, not {value!r}")
        if self.choices and v not in self.choices:
            raise ValueError(f"{self.name} must be one of {', '.join(map(str, self.choices))}, not {value!r}")
        if (self.lo is not None and v < self.lo) or (self.hi is not None and v > self.hi):
            raise ValueError(f"{self.name} must be in [{self.lo}, {self.hi}], not {value!r}")
        return v

    def describe(self) -> str:
        rng = (f" one of {', '.join(map(str, self.choices))}" if self.choices else
               f" in [{self.lo:g}, {self.hi:g}]" if self.lo is not None and self.hi is not None else "")
        return f"{self.help}{rng} (default {self.default})"


@dataclass(frozen=True)
class AtenOp:
    """The ATen operator a kernel implements, and how that operator's arguments become the kernel's.

    ``op`` names the overload, ``"aten::_softmax"`` (the default overload) or ``"aten::add.Tensor"``.
    ``bind(*args, **kwargs)`` takes the ATen call's arguments, tensors as numpy arrays (float
    tensors in fp32, others in their own dtype), and returns ``(inputs, params, finish)``: the
    kernel's input arrays by tensor name, its parameters, and ``finish(output)``, which turns the
    kernel's first output into the ATen operator's result (a tuple, with None for an auxiliary
    output the kernel does not compute); it raises :class:`KernelRefused` saying what it cannot
    take. ``bind`` None: the operator is recorded, and the torch layer plans it by hand (a GEMM or
    attention with a quantization recipe of floats, firstlight/torch/compile.py). Numpy only, so a
    kernel module never imports torch; firstlight/torch turns each binding into a planner of its
    ``torch.compile`` backend and its eager operators."""

    op: str
    bind: Callable | None = None

    @property
    def overload(self) -> tuple[str, str]:
        """(operator name, overload) of ``op``: ("_softmax", "default")."""
        name = self.op.removeprefix("aten::")
        base, _, over = name.partition(".")
        return base, over or "default"


@dataclass(frozen=True)
class Target:
    """What a kernel's tile sizes are chosen for: the chip's config, its board (resolved: DRAM
    bandwidth and latency) and the GEMM constraints of the errata in force (None: none)."""

    config: object
    board: object
    constraints: object = None
    lowp: object = None  # workarounds.LowpConstraints in force (None: none), for a kernel's host recipe


@dataclass(frozen=True)
class KernelSpec:
    """Everything about one kernel, declared once.

    ``source(*tensors, **kernel_args)`` is the tile-language function; ``tensors(p)`` its
    tensors for parameters ``p`` (inputs first, then outputs); ``inputs(p, seed, extremes)`` the
    seeded inputs by tensor name; ``golden(inputs, p, lanes)`` the chip's outputs, bit for bit;
    ``reference(inputs, p)`` the mathematics in float64 (for SQNR), if any; ``kernel_args(p,
    target)`` what the source takes besides its tensors (tile sizes chosen for the
    :class:`Target`: the chip, its board and the errata constraints in force)."""

    name: str
    summary: str
    source: Callable
    params: tuple[Param, ...]
    tensors: Callable[[dict], list[TensorSpec]]
    inputs: Callable[[dict, int, bool], dict]
    golden: Callable[[dict, dict, int], dict]
    kernel_args: Callable[[dict, "Target"], dict]
    reference: Callable[[dict, dict], dict] | None = None
    needs: tuple[str, ...] = ("vector",)
    units: tuple[str, ...] = ("CMDPROC", "DMA", "VECTOR")
    aten: AtenOp | None = None  # the ATen operator it implements, and how its arguments bind
    bench: tuple[dict, ...] = ()  # parameter sets of its bench rows
    bringup: tuple[dict, ...] = ()  # small parameter sets for the bring-up checklist's kernels stage
    examples: tuple[str, ...] = ()  # for --help
    aliases: tuple[str, ...] = ()  # other names of the kernel on every surface (``run attention``)
    module: str = ""
    macs: Callable[[dict], int] | None = None  # useful multiply-accumulates (the compute roof), if any
    # the parameters an input's shape gives: name -> (input tensor, axis); None: rows and cols
    # from the first input (the row kernels)
    shape_from: dict | None = None
    # the host's work on the inputs for the target, before they are staged (a quantization recipe
    # under the errata constraints in force, FL-NU-001): returns the tensors' arrays that change,
    # which replace those of the inputs (so the golden sees what ran); None: the inputs as made
    prepare: Callable[[dict, dict, "Target"], dict] | None = None
    # why this chip cannot run the kernel with these parameters (a recipe's MATMUL format it was
    # built without), or None; beside ``needs``, which the parameters do not change
    requires: Callable[[dict, object], str | None] | None = None

    def shape_params(self) -> dict[str, tuple[str, int]]:
        """Which parameter each input dimension gives (a caller passes arrays, not their sizes)."""
        if self.shape_from is not None:
            return dict(self.shape_from)
        first = next(t.name for t in self.tensors(self.resolve()) if t.role == "in")
        names = {p.name for p in self.params}
        return {n: (first, axis) for axis, n in enumerate(("rows", "cols")) if n in names}

    def resolve(self, given: dict | None = None) -> dict:
        """Every parameter checked, with defaults for those not given; unknown ones refused."""
        given = dict(given or {})
        known = {p.name: p for p in self.params}
        bad = sorted(set(given) - set(known))
        if bad:
            raise ValueError(f"kernel {self.name} has no parameter {', '.join(bad)}; its parameters: "
                             + ", ".join(known))
        return {n: p.check(given.get(n, p.default)) for n, p in known.items()}

    def refusal(self, config, params: dict | None = None) -> str | None:
        """Why this chip cannot run the kernel (with resolved ``params``, if given), or None."""
        if "vector" in self.needs and not config.vector:
            return f"{self.name} needs the vector unit, and this chip was built without it (vector=False)"
        if params is not None and self.requires is not None:
            return self.requires(params, config)
        return None

    def compile(self, params: dict, config, board, constraints=None, lowp=None):
        """The compiled kernel for resolved ``params`` on ``config`` and ``board``, with the errata
        passes the active mitigations' ``constraints`` (workarounds.GemmConstraints) ask for
        (``lowp``: their workarounds.LowpConstraints, which ``kernel_args`` sees as ``target.lowp``)."""
        why = self.refusal(config, params)
        if why:
            raise KernelRefused(why)
        from .errata import families

        fam = families(constraints)
        lowp = lowp if lowp is not None else fam.get("lowp")
        target = Target(config, board, fam.get("gemm"), lowp)
        check_dram(config, self.tensors(params), board.dram_bytes, board.bus_bytes)
        args = self.kernel_args(params, target)
        c = build(self.name, self.source, config, self.tensors(params), args,
                  dram_bytes=board.dram_bytes, bus_bytes=board.bus_bytes, constraints=constraints,
                  bytes_per_cycle=board.bytes_per_cycle)
        c.kernel_args = dict(args)
        return c


def _modules() -> list[str]:
    from kernels import tiled

    names = [f"kernels.tiled.{m.name}" for m in pkgutil.iter_modules(tiled.__path__) if not m.name.startswith("_")]
    extra = [m.strip() for m in os.environ.get("FIRSTLIGHT_KERNEL_MODULES", "").split(",") if m.strip()]
    return names + extra


def registry() -> dict[str, KernelSpec]:
    """Every declared kernel by name, in a stable order."""
    out: dict[str, KernelSpec] = {}
    for mod in _modules():
        m = importlib.import_module(mod)
        for spec in getattr(m, "SPECS", ()):
            for name in (spec.name, *spec.aliases):
                clash = next((s for s in out.values() if name in (s.name, *s.aliases)), None)
                if clash is not None:
                    raise TileError(f"kernel name {name} is declared twice: in {clash.module} and {mod}")
            out[spec.name] = spec if spec.module else _with_module(spec, mod)
    return out


def _with_module(spec: KernelSpec, mod: str) -> KernelSpec:
    from dataclasses import replace

    return replace(spec, module=mod)


def get(name: str) -> KernelSpec:
    """The kernel called ``name`` or one of its aliases."""
    reg = registry()
    if name not in reg:
        by_alias = {a: s for s in reg.values() for a in s.aliases}
        if name in by_alias:
            return by_alias[name]
        raise KeyError(f"no kernel named {name!r}; the tile-language kernels: {', '.join(reg)}")
    return reg[name]


async def run_spec(dev, spec: KernelSpec, params: dict, inputs: dict, *, mitigations, budget_cycles=None):
    """Run ``spec`` on the chip: returns (outputs by name, KernelStats)."""
    from kernels.stats import Measure
    from workarounds import Unit

    compiled = spec.compile(params, dev.config, dev.board,
                            {"gemm": mitigations.gemm, "reduce": mitigations.reduce, "lowp": mitigations.lowp})
    if spec.prepare is not None:  # in place: the caller's inputs (and so its golden) hold what ran
        inputs.update(spec.prepare(inputs, params, Target(dev.config, dev.board, mitigations.gemm, mitigations.lowp)))
    ins = [t for t in spec.tensors(params) if t.role == "in"]
    size = {"fp32": 4, "int32": 4, "int8": 1, "e4m3": 1, "e5m2": 1, "e2m1": 1, "e8m0": 1}
    compulsory = sum(size[t.dtype] * t.rows * t.cols for t in spec.tensors(params))
    macs = spec.macs(params) if spec.macs is not None else 0
    ideal = -(-macs // dev.config.peak_macs_per_cycle) if macs else \
        max(1, sum(t.stored_rows * t.wpr for t in compiled.tensors if t.role == "in"))
    host = {"commands": len(compiled.commands), "waits": compiled.waits, "compile_s": round(compiled.compile_s, 4),
            "tile_ops": len(compiled.ops), "chunks": sum(op.kind == "store" for op in compiled.ops),
            "errata_insertions": compiled.errata_insertions}
    shape = [params[p.name] for p in spec.params if p.shape]
    async with Measure(dev, spec.name, ideal, {"shape": shape, "host": host}, compulsory_bytes=compulsory, useful_macs=macs,
                       vector_cycles=units_busy_cycles(dev.config, compiled.commands)) as meas:
        out = await run(dev, compiled, {t.name: inputs[t.name] for t in ins}, budget_cycles)
        await dev.check_no_error()
    meas.stats.add_errata(mitigations.report(tuple(Unit[u] for u in spec.units)))
    meas.stats.plan = compiled.kernel_args  # the tile sizes chosen: a golden that depends on them reads them
    return out, meas.stats


async def call(dev, name: str, inputs: dict, *, mitigations, budget_cycles=None, **params):
    """Run the kernel ``name`` on the arrays ``inputs`` (by tensor name; their shapes give the
    shape parameters, KernelSpec.shape_params): returns (its first output, KernelStats)."""
    spec = get(name)
    dims = {param: inputs[t].shape[axis] for param, (t, axis) in spec.shape_params().items()}
    p = spec.resolve({**dims, **params})
    why = spec.refusal(dev.config, p)
    if why:
        raise ValueError(why)
    outs, stats = await run_spec(dev, spec, p, inputs, mitigations=mitigations, budget_cycles=budget_cycles)
    return next(iter(outs.values())), stats
