"""One PyTorch operator per tile-language kernel, generated from its declaration.

Every kernel of the registry (``kernels.tile.spec.registry``, a kernel in a module of
``FIRSTLIGHT_KERNEL_MODULES`` included) is the operator ``torch.ops.firstlight_kernels.<kernel>``:
its input tensors in the declaration's order, the chip's handle (:func:`firstlight.torch.handle`),
then, by keyword, every parameter its inputs' shapes do not give, with the declared default::

    h = firstlight.torch.handle(chip)
    out = torch.ops.firstlight_kernels.decode_attention(k, qt, vt, h, seq=1001, block=64)

It returns the kernel's first output (an ``int32`` or ``float32`` tensor, the shape its
declaration gives) and lands in the chip's ledger like every firstlight operator. Tensors are
the kernel's own dtypes (``int8``, ``int32``, ``float32``; FP8 codes as ``float8_e4m3fn`` /
``float8_e5m2`` or their ``uint8`` bits; E8M0 scales as ``float8_e8m0fnu`` or ``uint8``); an fp32
input takes any float tensor, computed in fp32. Each operator has a fake (its output's shape and
dtype from the declaration) and passes ``torch.library.opcheck``.

A kernel that declares the ATen operator it implements with a binding (``KernelSpec.aten``, a
:class:`kernels.tile.spec.AtenOp`) also gets a planner of the ``torch.compile`` backend
(:func:`aten_planners`): the binding maps the ATen call to the kernel's inputs and parameters,
and the arguments are checked, against the declaration and the chip, when the graph is planned.
"""

from __future__ import annotations

import threading

import numpy as np
import torch

from . import ledger

__all__ = ["NAMESPACE", "register", "kernel_op", "schema", "aten_planners", "bound_call"]

NAMESPACE = "firstlight_kernels"

_LOCK = threading.Lock()
_LIB: torch.library.Library | None = None
_DEFINED: dict[str, object] = {}  # kernel name -> its KernelSpec, as defined

# a kernel tensor's dtype (kernels.tile.runtime.DTYPES) as a torch dtype; FP codes may come as uint8
_TORCH = {"fp32": torch.float32, "int32": torch.int32, "int8": torch.int8, "e4m3": torch.float8_e4m3fn,
          "e5m2": torch.float8_e5m2, "e8m0": torch.float8_e8m0fnu, "e2m1": torch.uint8}
_SCHEMA_TYPES = {int: "int", float: "float", bool: "bool", str: "str"}
# the numpy dtype of a traced non-float tensor (planning runs under a fake mode: no .numpy() there)
_NUMPY = {torch.int8: np.int8, torch.uint8: np.uint8, torch.int16: np.int16, torch.int32: np.int32,
          torch.int64: np.int64, torch.bool: np.bool_}


def _signature(spec) -> tuple[list, list, list, list]:
    """(input TensorSpecs of every call, input TensorSpecs of some calls, keyword Params, output
    TensorSpecs at the defaults) of ``spec``. The inputs a choice parameter adds (gemm's
    ``epilogue="requant"`` adds its bias and scales) are found by trying every combination of
    the choice and bool parameters (at most 256; beyond that, the defaults' inputs only)."""
    import itertools

    taken = set(spec.shape_params())
    params = [p for p in spec.params if p.name not in taken]
    at_default = spec.resolve()
    ts = spec.tensors(at_default)
    choice = [(p.name, p.choices or ((False, True) if p.kind is bool else ())) for p in params]
    choice = [(n, c) for n, c in choice if c]
    combos = list(itertools.product(*(c for _, c in choice))) if choice else [()]
    seen = {t.name: t for t in ts if t.role == "in"}
    always = set(seen)
    if len(combos) <= 256:
        for values in combos:
            try:
                ins = [t for t in spec.tensors({**at_default, **dict(zip((n for n, _ in choice), values))})
                       if t.role == "in"]
            except Exception:  # noqa: BLE001 - a combination the declaration itself refuses adds nothing
                continue
            for t in ins:
                seen.setdefault(t.name, t)
            always &= {t.name for t in ins}
    required = [t for n, t in seen.items() if n in always]
    optional = [t for n, t in seen.items() if n not in always]
    return required, optional, params, [t for t in ts if t.role == "out"]


def _default(p) -> str:
    if p.kind is str:
        return '"' + str(p.default).replace("\\", "\\\\").replace('"', '\\"') + '"'
    if p.kind is bool:
        return "True" if p.default else "False"
    return repr(p.kind(p.default))


def schema(spec) -> str:
    """The operator's schema, as torch.library takes it: ``name(Tensor x, int chip, *, int
    tile_rows=0) -> Tensor``."""
    ins, optional, params, _ = _signature(spec)
    if "chip" in {t.name for t in ins + optional} | {p.name for p in params}:
        raise ValueError(f"kernel {spec.name}: a tensor or parameter named 'chip' clashes with the operator's chip handle")
    args = [f"Tensor {t.name}" for t in ins] + ["int chip"]
    kw = [f"Tensor? {t.name}=None" for t in optional] + [f"{_SCHEMA_TYPES[p.kind]} {p.name}={_default(p)}" for p in params]
    return f"{spec.name}({', '.join(args)}{', *, ' + ', '.join(kw) if kw else ''}) -> Tensor"


def _as_numpy(t: torch.Tensor, dtype: str, name: str, kernel: str) -> np.ndarray:
    """A kernel input as the session takes it; a wrong dtype is refused (TypeError) naming the
    accepted ones (the session checks shapes and ranges)."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"kernel {kernel}: {name} must be a tensor, not {type(t).__name__}")
    t = t.detach().cpu()
    if dtype == "fp32":
        if not t.dtype.is_floating_point:
            raise TypeError(f"kernel {kernel}: {name} must be a float tensor (computed in fp32), not {t.dtype}")
        return np.ascontiguousarray(t.to(torch.float32).numpy())
    if dtype in ("int8", "int32"):
        if t.dtype != _TORCH[dtype]:
            raise TypeError(f"kernel {kernel}: {name} must be {_TORCH[dtype]}, not {t.dtype}")
        return np.ascontiguousarray(t.numpy())
    if t.dtype not in (_TORCH[dtype], torch.uint8):  # FP codes and E8M0 scales: their bits
        raise TypeError(f"kernel {kernel}: {name} holds {dtype} values: {_TORCH[dtype]} or their uint8 bits, "
                        f"not {t.dtype}")
    return np.ascontiguousarray(t.contiguous().view(torch.uint8).numpy())


def _first_output(spec, shapes: dict[str, tuple], params: dict):
    """The TensorSpec of the first output for inputs of ``shapes`` and the given ``params``."""
    dims = {}
    for param, (tensor, axis) in spec.shape_params().items():
        shape = shapes[tensor]
        dims[param] = int(shape[axis]) if len(shape) == 2 else int(shape[-1]) if axis == 1 else 1
    p = spec.resolve({**params, **dims})
    return next(t for t in spec.tensors(p) if t.role == "out"), p


def _define(spec) -> None:
    global _LIB
    if _LIB is None:
        _LIB = torch.library.Library(NAMESPACE, "DEF")
    ins, optional, _params, _outs = _signature(spec)
    names = [t.name for t in ins]
    _LIB.define(schema(spec))
    name = spec.name
    extra = {t.name: t for t in optional}

    def impl(*args, **params):
        tensors, chip = args[:len(names)], args[len(names)]
        arrays = {n: _as_numpy(t, d.dtype, n, name) for n, t, d in zip(names, tensors, ins)}
        for n, t in extra.items():
            x = params.pop(n, None)
            if x is not None:
                arrays[n] = _as_numpy(x, t.dtype, n, name)
        out, st = ledger.session_of(chip).run_kernel(name, **arrays, **params)
        first = out if isinstance(out, np.ndarray) else out[next(iter(out))]
        recipe = params.get("recipe") or next((p.default for p in spec.params if p.name == "recipe"), None)
        ledger._record(chip, name, str(recipe or ins[0].dtype), [st])
        return torch.from_numpy(np.ascontiguousarray(first).copy())

    def fake(*args, **params):
        tensors = args[:len(names)]
        params = {k: v for k, v in params.items() if k not in extra}
        t, _ = _first_output(spec, {n: tuple(x.shape) for n, x in zip(names, tensors)}, params)
        return tensors[0].new_empty((t.rows, t.cols), dtype=_TORCH[t.dtype])

    _LIB.impl(name, impl, "CompositeExplicitAutograd")
    torch.library.register_fake(f"{NAMESPACE}::{name}", fake, lib=_LIB)
    _DEFINED[name] = spec


def register() -> dict[str, object]:
    """Define the operator of every registered kernel not defined yet (a module added to
    ``FIRSTLIGHT_KERNEL_MODULES`` since the last call included); returns the operators by kernel
    name. A kernel already defined keeps its operator (torch cannot redefine one in a process)."""
    from kernels.tile.spec import registry

    with _LOCK:
        for spec in registry().values():
            if spec.name not in _DEFINED:
                _define(spec)
        return {n: getattr(getattr(torch.ops, NAMESPACE), n) for n in _DEFINED}


def kernel_op(name: str):
    """The operator of kernel ``name`` (``torch.ops.firstlight_kernels.<name>``), defined if need be."""
    if name not in _DEFINED:
        ops = register()
        if name not in ops:
            raise KeyError(f"no tile-language kernel named {name!r}; the kernels: {', '.join(ops)}")
    return getattr(getattr(torch.ops, NAMESPACE), name)


# ---- ATen operators bound to kernels -------------------------------------------------------------

def _to_numpy_arg(v):
    """An ATen argument as a binding takes it: float tensors in fp32, others in their dtype."""
    if isinstance(v, torch.Tensor):
        t = v.detach().cpu()
        return np.ascontiguousarray((t.to(torch.float32) if t.dtype.is_floating_point else t).numpy())
    if isinstance(v, (list, tuple)):
        return type(v)(_to_numpy_arg(x) for x in v)
    return v


def _meta_arg(v):
    """A traced argument (its meta value) as an uninitialised array of its shape and dtype: what a
    binding needs to check a call before anything runs."""
    val = v.meta.get("val") if isinstance(v, torch.fx.Node) else v
    if isinstance(val, torch.Tensor):
        return np.empty(tuple(int(s) for s in val.shape), _numpy_dtype(val.dtype))
    if isinstance(val, (list, tuple)):
        return type(val)(_meta_arg(x) for x in val)
    return val


def _numpy_dtype(dt):
    if dt.is_floating_point:
        return np.float32
    try:
        return _NUMPY.get(dt) or np.dtype(str(dt).removeprefix("torch."))
    except TypeError:  # a dtype numpy does not have: the kernel's dtype check names it
        return np.dtype(object)


def _torch_result(y, like):
    if y is None:
        return None
    if isinstance(y, tuple):
        likes = like if isinstance(like, (tuple, list)) else (like,) * len(y)
        return tuple(_torch_result(a, b) for a, b in zip(y, likes))
    t = torch.from_numpy(np.ascontiguousarray(y))
    return t.to(like.dtype) if isinstance(like, torch.Tensor) else t


def bound_call(spec, h: int, args: tuple, kwargs: dict, like):
    """Run the ATen call ``args``/``kwargs`` through ``spec``'s binding on chip ``h``: the
    result as the ATen operator gives it, in ``like``'s dtype(s)."""
    inputs, params, finish = spec.aten.bind(*_to_numpy_arg(tuple(args)), **{k: _to_numpy_arg(v) for k, v in kwargs.items()})
    op = kernel_op(spec.name)
    required, optional = _signature(spec)[:2]
    t = {n: torch.from_numpy(np.ascontiguousarray(a)) for n, a in inputs.items()}
    out = op(*[t[x.name] for x in required], h, **params, **{x.name: t[x.name] for x in optional if x.name in t})
    return _torch_result(finish(out.numpy()), like)


def _check(spec, chip, node) -> str | None:
    """Why ``node`` (an ATen call) cannot run on ``spec``'s kernel on ``chip``, or None: its
    binding, the declaration's dtypes, shapes and ranges, and the chip (KernelSpec.refusal)."""
    from firstlight.jobs.session import kernel_arguments

    try:
        inputs, params, _ = spec.aten.bind(*_meta_arg(tuple(node.args)),
                                           **{k: _meta_arg(v) for k, v in node.kwargs.items()})
        p, _ = kernel_arguments(spec, inputs, params)
        return spec.refusal(chip.config, p)
    except (ValueError, TypeError) as e:
        return str(e)


def _only_first_output_used(node) -> str | None:
    import operator

    for u in node.users:
        if not (u.target is operator.getitem and u.args[1] == 0):
            return "its auxiliary outputs (statistics for the backward pass) are used"
    return None


def aten_planners() -> dict:
    """``{ATen overload: planner}`` for every registered kernel whose declaration binds an ATen
    operator (the planners of firstlight.torch.compile: ``(node, handle, recipe) -> (runner,
    None)`` or ``(None, why)``)."""
    from kernels.tile.spec import registry

    out = {}
    for spec in registry().values():
        if spec.aten is None or spec.aten.bind is None:
            continue
        base, over = spec.aten.overload
        packet = getattr(torch.ops.aten, base, None)
        if packet is None or not hasattr(packet, over):
            raise ValueError(f"kernel {spec.name} declares the ATen operator {spec.aten.op}, which this torch "
                             f"({torch.__version__}) does not have")
        out[getattr(packet, over)] = _planner(spec)
    return out


def _planner(spec):
    def plan(node, h, recipe):
        why = _check(spec, ledger.session_of(h), node)
        if why is None and isinstance(node.meta.get("val"), (tuple, list)):
            why = _only_first_output_used(node)
        if why:
            return None, why
        like = node.meta.get("val")
        return (lambda args, kw: bound_call(spec, h, args, kw, like)), None
    return plan
