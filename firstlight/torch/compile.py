"""A ``torch.compile`` backend that runs a model's operators on a session's chip.

::

    be = firstlight.torch.backend(chip, recipe="int8-channel")
    with torch.no_grad():
        y = torch.compile(model, backend=be)(x)
    be.table()     # the operator coverage table, as data (and printed after the first run)

How it works. Dynamo hands the backend an FX graph of torch-level calls. One pre-pass replaces
``torch.rms_norm`` by ``torch.ops.firstlight.rms_norm`` (ATen has no RMSNorm operator: it would
be decomposed into pow / mean / rsqrt / mul below). AOTAutograd then lowers the graph to ATen
operators, and the backend plans every node:

* an operator with a chip kernel (:func:`chip_ops`) runs on the chip, unless its arguments are
  outside what the kernel does (a mask, dropout, a custom scale, an exact-erf GELU, integer
  operands...): then it runs on the CPU and the table says why; a kernel that refuses its
  arguments at run time (ValueError) also falls back, with the kernel's words. Two kinds:
  the operators a kernel's declaration binds (``KernelSpec.aten``: ``_softmax``,
  ``native_layer_norm``, ``silu``, ``gelu`` (tanh), ``_int_mm``; planned by
  :func:`firstlight.torch.generated.aten_planners`, which checks the call against the
  declaration and the chip before anything runs, and runs it as
  ``torch.ops.firstlight_kernels.<kernel>``), and the ones written here (:data:`RECIPE_OPS`:
  ``mm``, ``addmm``, ``bmm`` and SDPA of floats, quantized with the backend's recipe; ``relu``,
  ``add`` / ``sub`` / ``mul`` broadcast on the host; the pre-pass's ``rms_norm``);
* layout operators (views, transposes, splits, ``getitem``) move no arithmetic: they run on the
  CPU and are listed apart, outside the operator counts;
* anything else runs on the CPU: "no chip kernel".

While the compiled graph runs, each chip operator's output is compared with the same ATen
operator run in fp32 on the CPU on the same inputs (SQNR and max |error|: the operator's own
error, not the error accumulated upstream), and the chip cycles and the errata mitigations its
kernels ran with are taken from the chip's ledger. Inference only: compile and run the model
under ``torch.no_grad()``.
"""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import torch
import torch.fx

from . import operators as flops
from .generated import _only_first_output_used, aten_planners

__all__ = ["backend", "ChipBackend", "RECIPE_OPS", "chip_ops", "LAYOUT_OPS", "format_table", "Row"]

aten = torch.ops.aten

LAYOUT_OPS = {aten.view.default, aten._unsafe_view.default, aten.reshape.default, aten.t.default,
              aten.transpose.int, aten.permute.default, aten.expand.default, aten.split.Tensor,
              aten.split_with_sizes.default, aten.unsqueeze.default, aten.squeeze.dim, aten.squeeze.default,
              aten.clone.default, aten.contiguous.default, aten.slice.Tensor, aten.select.int, aten.alias.default,
              aten.detach.default, aten.unbind.int, aten.chunk.default, aten.flatten.using_ints,
              aten._to_copy.default, operator.getitem}
"""Operators that move no arithmetic (views, copies, tuple access): CPU, outside the counts."""

NO_KERNEL_REASONS = {
    aten.embedding.default: "a gather (no arithmetic; the chip has no indexed load)",
}


def _val(a):
    return a.meta.get("val") if isinstance(a, torch.fx.Node) else a


def _is_float_tensor(v) -> bool:
    return isinstance(v, torch.Tensor) and v.dtype.is_floating_point


def _float_operands(*vals) -> str | None:
    for v in vals:
        if isinstance(v, torch.Tensor) and not v.dtype.is_floating_point:
            return f"{v.dtype} operands (the chip operators take float tensors)"
    return None


# Each planner: (node, handle, recipe) -> (runner(args, kwargs) -> output, None) or (None, reason).

def _plan_mm(node, h, recipe):
    a, b = (_val(x) for x in node.args[:2])
    why = _float_operands(a, b)
    return (None, why) if why else (lambda args, kw: flops.mm(args[0], args[1], h, recipe), None)


def _plan_addmm(node, h, recipe):
    bias, a, b = (_val(x) for x in node.args[:3])
    if node.kwargs.get("beta", 1) != 1 or node.kwargs.get("alpha", 1) != 1:
        return None, "beta or alpha other than 1"
    why = _float_operands(bias, a, b)
    return (None, why) if why else (lambda args, kw: flops.addmm(args[0], args[1], args[2], h, recipe), None)


def _plan_bmm(node, h, recipe):
    why = _float_operands(*(_val(x) for x in node.args[:2]))
    return (None, why) if why else (lambda args, kw: flops.bmm(args[0], args[1], h, recipe), None)


def _sdpa_args(node):
    """(q, k, v, dropout_p, is_causal, attn_mask, scale) of either SDPA spelling."""
    names = (("q", "k", "v", "dropout_p", "is_causal") if "flash" in str(node.target)
             else ("q", "k", "v", "attn_mask", "dropout_p", "is_causal", "scale"))
    d = {"dropout_p": 0.0, "is_causal": False, "attn_mask": None, "scale": None}
    d.update(dict(zip(names, node.args)))
    d.update(node.kwargs)
    return d


def _plan_sdpa(node, h, recipe):
    d = _sdpa_args(node)
    q, k, v = (_val(d[n]) for n in ("q", "k", "v"))
    flash = "flash" in str(node.target)
    why = _float_operands(q, k, v)
    if d["attn_mask"] is not None:
        why = "an attention mask (the kernel takes causal or none)"
    elif d["dropout_p"]:
        why = "dropout"
    elif d.get("enable_gqa"):
        why = "grouped-query attention"
    elif not (q.shape == k.shape == v.shape):
        why = f"q, k, v of different shapes {list(q.shape)}, {list(k.shape)}, {list(v.shape)}"
    elif d["scale"] is not None and not math.isclose(d["scale"], 1 / math.sqrt(q.shape[-1]), rel_tol=1e-6):
        why = f"a scale of {d['scale']} (the kernel scales by 1/sqrt(D))"
    elif flash and _only_first_output_used(node):
        why = _only_first_output_used(node)
    if why:
        return None, why
    causal = bool(d["is_causal"])

    def run(args, kw):
        o = flops.scaled_dot_product_attention(args[0], args[1], args[2], causal, h, recipe)
        return (o, None) if flash else o

    return run, None


def _plan_unary(op):
    def plan(node, h, recipe):
        why = _float_operands(_val(node.args[0]))
        return (None, why) if why else (lambda args, kw: op(args[0], h), None)
    return plan


def _plan_binary(op):
    def plan(node, h, recipe):
        a, b = (_val(x) for x in node.args[:2])
        if node.kwargs.get("alpha", 1) != 1:
            return None, "alpha other than 1"
        if not (_is_float_tensor(a) or _is_float_tensor(b)):
            return None, "no float tensor operand"
        why = _float_operands(a, b)
        if why:
            return None, why

        def run(args, kw):
            x, y = (t if isinstance(t, torch.Tensor) else torch.tensor(float(t)) for t in args[:2])
            return op(x, y, h)
        return run, None
    return plan


def _plan_custom(node, h, recipe):  # a firstlight operator the pre-pass put into the graph
    return (lambda args, kw: node.target(*args, **kw)), None


RECIPE_OPS: dict = {
    aten.mm.default: _plan_mm, aten.addmm.default: _plan_addmm, aten.bmm.default: _plan_bmm,
    aten._scaled_dot_product_flash_attention_for_cpu.default: _plan_sdpa,
    aten.scaled_dot_product_attention.default: _plan_sdpa,
    aten.relu.default: _plan_unary(flops.relu), aten.add.Tensor: _plan_binary(flops.add),
    aten.sub.Tensor: _plan_binary(flops.sub), aten.mul.Tensor: _plan_binary(flops.mul),
    aten.add.Scalar: _plan_binary(flops.add), aten.sub.Scalar: _plan_binary(flops.sub),
    aten.mul.Scalar: _plan_binary(flops.mul),
    torch.ops.firstlight.rms_norm.default: _plan_custom,
}
"""The planners written here: the GEMMs and attention of float tensors (quantized with the
backend's recipe), the elementwise operators (broadcast on the host) and the pre-pass operators.
The rest come from the kernels' declarations (:func:`chip_ops`)."""


def chip_ops() -> dict:
    """Every ATen operator (and pre-pass operator) with a chip kernel, and its planner: those of
    :data:`RECIPE_OPS` and one per kernel whose declaration binds an ATen operator
    (``KernelSpec.aten``: ``_softmax``, ``native_layer_norm``, ``silu``, ``gelu``, ``_int_mm``, ...)."""
    generated = aten_planners()
    both = sorted(str(k) for k in set(generated) & set(RECIPE_OPS))
    if both:
        raise ValueError(f"ATen operators planned twice, by hand and by a kernel declaration: {', '.join(both)}")
    return {**RECIPE_OPS, **generated}


def _rms_reference(x, normalized_shape, weight, eps, chip):
    return torch.rms_norm(x.float(), list(normalized_shape), None if weight is None else weight.float(), eps)


# CPU fp32 references of the pre-pass operators (the ATen ones are their own reference)
_REFERENCES = {torch.ops.firstlight.rms_norm.default: _rms_reference}


def _restride(t, want):
    if isinstance(t, torch.Tensor) and isinstance(want, torch.Tensor) and t.stride() != want.stride():
        r = torch.empty_strided(t.shape, want.stride(), dtype=t.dtype)
        r.copy_(t)
        return r
    return t


def _like_meta(node: torch.fx.Node, out):
    """``out`` with the strides the traced graph expects of this node (a view downstream may
    depend on them: the CPU SDPA's output is laid out (B, S, H, D))."""
    want = node.meta.get("val")
    if isinstance(out, tuple):
        first = want[0] if isinstance(want, (tuple, list)) else None
        return (_restride(out[0], first), *out[1:])
    return _restride(out, want)


def _short(text: str, limit: int = 110) -> str:
    """The first clause of a kernel's refusal (the notes keep all of it)."""
    text = text.splitlines()[0] if text else "?"
    for sep in (" (", ": "):
        i = text.find(sep, 30)
        if 0 < i < limit:
            return text[:i]
    return text if len(text) <= limit else text[:limit - 3] + "..."


def op_name(target) -> str:
    if target is operator.getitem:
        return "getitem"
    name = getattr(target, "__name__", None) or str(target)
    ns = getattr(target, "namespace", None)
    return f"{ns}.{name}" if ns else name


@dataclass
class Row:
    """One line of the coverage table: an operator and where it ran."""

    op: str
    where: str  # "chip", "CPU: <why>" or "layout"
    count: int = 0  # nodes in the compiled graphs
    calls: int = 0  # executions
    recipe: str = ""
    cycles: int = 0
    sqnr_db: float | None = None  # worst over the calls (chip operators)
    max_abs_err: float | None = None
    mitigations: set = field(default_factory=set)
    notes: list = field(default_factory=list)

    @property
    def on_chip(self) -> bool:
        return self.where == "chip"

    @property
    def layout(self) -> bool:
        return self.where == "layout"

    def as_dict(self) -> dict:
        return {"op": self.op, "where": self.where, "count": self.count, "calls": self.calls, "recipe": self.recipe,
                "cycles": self.cycles, "sqnr_db": self.sqnr_db, "max_abs_err": self.max_abs_err,
                "mitigations": sorted(self.mitigations), "notes": list(self.notes)}


def _sqnr(ref: torch.Tensor, got: torch.Tensor) -> tuple[float, float]:
    r = ref.detach().double().numpy()
    g = got.detach().double().numpy()
    fin = np.isfinite(r) & np.isfinite(g)
    if not fin.any():
        return float("nan"), float("nan")
    err = r[fin] - g[fin]
    sig = float(np.sum(r[fin] ** 2))
    noise = float(np.sum(err ** 2))
    sq = float("inf") if noise == 0 else (10 * math.log10(sig / noise) if sig > 0 else float("-inf"))
    return sq, float(np.max(np.abs(err)))


class ChipBackend:
    """The ``torch.compile`` backend object; see the module docstring.

    Parameters
    ----------
    chip : firstlight.session.Session
    recipe : str
        The quantization recipe of the matrix products (golden.quant.RECIPES); attention uses
        :func:`firstlight.torch.ops.attention_recipe_for` of it.
    report : callable or None
        Called with the formatted table after a compiled graph's first run (default: ``print``).
    measure : bool
        Compare every chip operator with its fp32 CPU run (default True).
    """

    def __init__(self, chip, recipe: str = "int8-channel", *, report: Callable[[str], None] | None = print,
                 measure: bool = True):
        self.chip = chip
        self.handle = flops.handle(chip)
        self.recipe = flops.check_recipe(chip, recipe)
        self.report = report
        self.measure = measure
        self.rows: dict[tuple[str, str], Row] = {}
        self.graphs = 0

    # ---- compile -------------------------------------------------------------------------------
    def __call__(self, gm: torch.fx.GraphModule, example_inputs):
        from torch._dynamo.backends.common import aot_autograd

        if torch.is_grad_enabled():
            raise ValueError("the firstlight backend compiles inference graphs: call the compiled model under "
                             "torch.no_grad() (or torch.inference_mode())")
        self._prepass(gm)
        return aot_autograd(fw_compiler=self._compile)(gm, example_inputs)

    def _prepass(self, gm: torch.fx.GraphModule) -> None:
        """torch.rms_norm -> firstlight.rms_norm (ATen would decompose it)."""
        changed = False
        for n in gm.graph.nodes:
            if n.op == "call_function" and n.target in (torch.rms_norm, torch.nn.functional.rms_norm):
                names = ("input", "normalized_shape", "weight", "eps")
                d = {"weight": None, "eps": None, **dict(zip(names, n.args)), **n.kwargs}
                shape = d["normalized_shape"]
                shape = [shape] if isinstance(shape, int) else list(shape)
                n.target = torch.ops.firstlight.rms_norm.default
                n.args = (d["input"], shape, d["weight"], d["eps"], self.handle)
                n.kwargs = {}
                changed = True
        if changed:
            gm.graph.lint()
            gm.recompile()

    def _row(self, op: str, where: str) -> Row:
        key = (op, where)
        if key not in self.rows:
            self.rows[key] = Row(op, where)
        return self.rows[key]

    def _compile(self, gm: torch.fx.GraphModule, example_inputs):
        self.graphs += 1
        planners = chip_ops()  # the registry as it is now: a kernel module added since import included
        plan: dict[torch.fx.Node, tuple] = {}
        for n in gm.graph.nodes:
            if n.op != "call_function":
                continue
            name = op_name(n.target)
            if n.target in LAYOUT_OPS:
                self._row(name, "layout").count += 1
                continue
            planner = planners.get(n.target)
            if planner is None:
                why = NO_KERNEL_REASONS.get(n.target, "no chip kernel for this operator")
                plan[n] = (None, self._row(name, f"CPU: {why}"))
                self._row(name, f"CPU: {why}").count += 1
                continue
            run, why = planner(n, self.handle, self.recipe)
            row = self._row(name, "chip" if run else f"CPU: {why}")
            row.count += 1
            plan[n] = (run, row)
        backend = self
        first = [True]

        class Runner(torch.fx.Interpreter):
            def run_node(self, n):
                if n not in plan:
                    return super().run_node(n)
                run, row = plan[n]
                args, kwargs = self.fetch_args_kwargs_from_env(n)
                return backend._execute(n, run, row, args, kwargs)

        def compiled(*args):
            out = Runner(gm).run(*args)
            if first[0] and self.report is not None:
                first[0] = False
                self.report(format_table(self.table(), self.summary(), self._title()))
            return out

        return compiled

    # ---- run -----------------------------------------------------------------------------------
    def _cpu(self, n, args, kwargs):
        ref = _REFERENCES.get(n.target)
        return ref(*args, **kwargs) if ref else n.target(*args, **kwargs)

    def _execute(self, n, run, row: Row, args, kwargs):
        if run is None:
            row.calls += 1
            return self._cpu(n, args, kwargs)
        led = flops.ledger(self.chip)
        mark = len(led)
        try:
            out = run(args, kwargs)
        except (ValueError, TypeError) as e:  # the kernel refused these arguments: the CPU runs it
            row.count -= 1
            fb = self._row(row.op, f"CPU: the kernel refused: {_short(str(e))}")
            fb.notes.append(str(e))
            fb.count += 1
            fb.calls += 1
            del led[mark:]
            return self._cpu(n, args, kwargs)
        out = _like_meta(n, out)
        row.calls += 1
        for rec in led[mark:]:
            row.cycles += rec.cycles
            row.mitigations |= rec.mitigations
            if rec.recipe not in row.recipe.split("/"):
                row.recipe = "/".join(filter(None, [row.recipe, rec.recipe]))
            row.notes += [x for x in rec.notes if x not in row.notes]
        if self.measure:
            ref = self._cpu(n, args, kwargs)
            got = out[0] if isinstance(out, tuple) else out
            want = ref[0] if isinstance(ref, tuple) else ref
            sq, mx = _sqnr(want, got)
            row.sqnr_db = sq if row.sqnr_db is None else min(row.sqnr_db, sq)
            row.max_abs_err = mx if row.max_abs_err is None else max(row.max_abs_err, mx)
        return out

    # ---- the table -----------------------------------------------------------------------------
    def table(self) -> list[dict]:
        """The coverage rows as dicts: chip rows, then CPU fallbacks, then layout operators."""
        order = sorted((r for r in self.rows.values() if r.count), key=lambda r: (r.layout, not r.on_chip, r.op))
        return [r.as_dict() for r in order]

    def summary(self) -> dict:
        """``ops_total`` (operator nodes that compute: layout excluded), ``ops_on_chip``, their
        share, the chip cycles of every call so far, the mitigations that ran."""
        rows = [r for r in self.rows.values() if not r.layout]
        total = sum(r.count for r in rows)
        on = sum(r.count for r in rows if r.on_chip)
        mit = set().union(*(r.mitigations for r in rows)) if rows else set()
        return {"ops_total": total, "ops_on_chip": on, "chip_share": on / total if total else 0.0,
                "cycles": sum(r.cycles for r in rows), "mitigations": sorted(mit), "recipe": self.recipe,
                "revision": self.chip.revision, "graphs": self.graphs,
                "fallbacks": sorted({r.op + ": " + r.where[5:] for r in rows if not r.on_chip})}

    def reset_counts(self) -> None:
        """Forget the calls, cycles and errors measured so far (keep the plan's node counts)."""
        for r in self.rows.values():
            r.calls, r.cycles, r.sqnr_db, r.max_abs_err = 0, 0, None, None
            r.mitigations, r.notes = set(), []

    def _title(self) -> str:
        c = self.chip.config
        return (f"operator coverage on a {c.rows}x{c.cols} chip, revision {self.chip.revision}, recipe {self.recipe} "
                "(SQNR / max |err|: the chip operator vs the same operator in fp32 on the CPU, same inputs)")


def backend(chip, recipe: str = "int8-channel", *, report: Callable[[str], None] | None = print,
            measure: bool = True) -> ChipBackend:
    """A :class:`ChipBackend` for ``torch.compile(model, backend=...)``."""
    return ChipBackend(chip, recipe, report=report, measure=measure)


def _fmt(v) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return "inf" if v == float("inf") else f"{v:.1f}"
    return str(v)


def _fmt_err(v) -> str:
    return "-" if v is None else f"{v:.3g}"


def format_table(rows: list[dict], summary: dict | None = None, title: str = "") -> str:
    """The coverage table as plain text (the CLI renders the same data with rich)."""
    head = ["operator", "count", "where", "recipe", "cycles", "SQNR dB", "max |err|", "mitigations"]
    body = [[r["op"], str(r["count"]), r["where"], r["recipe"] or "-", f"{r['cycles']:,}" if r["cycles"] else "-",
             _fmt(r["sqnr_db"]), _fmt_err(r["max_abs_err"]), ",".join(r["mitigations"]) or "-"] for r in rows]
    widths = [max(len(h), *(len(b[i]) for b in body)) if body else len(h) for i, h in enumerate(head)]
    line = lambda cells: "  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip()  # noqa: E731
    out = ([title] if title else []) + [line(head), line(["-" * w for w in widths])] + [line(b) for b in body]
    if summary:
        out.append(f"{summary['ops_on_chip']} of {summary['ops_total']} operators on the chip "
                   f"({100 * summary['chip_share']:.0f}%), {summary['cycles']:,} chip cycles, mitigations: "
                   f"{', '.join(summary['mitigations']) or 'none'}")
    return "\n".join(out)
