"""PyTorch custom operators that run on a session's chip: ``torch.ops.firstlight.*``.

Each operator is a ``torch.library.custom_op`` with a ``register_fake`` (shapes for tracing and
``torch.compile``) and passes ``torch.library.opcheck``. An operator names its chip by the integer
handle of an open session (:func:`handle`) and, where it multiplies matrices, the quantization
recipe of its operands (golden.quant.RECIPES: ``int8-channel``, ``int8-tensor``,
``fp8-e4m3-tensor``, ``mxfp8-e4m3-rceil``, ...). Every call lands in the chip's ledger (the
kernel's cycles and the errata mitigations it ran with), which :mod:`firstlight.torch.compile`
and :func:`ledger` read.

What runs where:

* ``mm``, ``addmm``, ``linear``, ``bmm``: ``kernels.lowp.gemm_lowp`` (quantize with the recipe,
  the matrix engine, dequantize). The dequantization scales and the bias are applied on the host
  in fp32, after the chip's integer (or FP) product: that is ``gemm_lowp``'s epilogue.
* ``qlinear``: the quantized linear of int8 tensors, int8 out, with the bias and per-channel
  requantization (and ReLU) in the GEMM's fused epilogue on the chip (``chip.gemm(..., scale=)``).
* ``softmax``, ``layer_norm``, ``rms_norm``, ``gelu`` (tanh form), ``silu``: the tile kernels
  of those names, through the ATen binding of their declarations (KernelSpec.aten) and their
  generated operators (``torch.ops.firstlight_kernels.*``, :mod:`firstlight.torch.generated`);
  ``relu``, ``add``, ``sub``, ``mul``: the vector unit's elementwise kernel. All in fp32: they
  quantize nothing (docs/numerics.md).
* ``scaled_dot_product_attention``: ``kernels.attention`` per (batch, head), with the attention
  recipe that matches the GEMM recipe (:func:`attention_recipe_for`).

Inputs of another float dtype are computed in fp32 and returned in their own dtype.
"""

from __future__ import annotations

import numpy as np
import torch

from .generated import bound_call
from .ledger import OpRecord, _record, handle, ledger, session_of  # noqa: F401 - re-exported

__all__ = ["handle", "session_of", "ledger", "OpRecord", "attention_recipe_for", "OPS", "ChipOps", "ops",
           "check_recipe"]

def check_recipe(chip, recipe: str) -> str:
    """``recipe`` if it names a GEMM recipe this chip can run, else ValueError saying which can."""
    from golden.quant import RECIPES

    if recipe not in RECIPES:
        raise ValueError(f"unknown quantization recipe {recipe!r}; known: {', '.join(RECIPES)}")
    fmt = RECIPES[recipe].fmt
    if fmt != "int8" and fmt not in chip.config.formats:
        ok = [n for n, r in RECIPES.items() if r.fmt == "int8" or r.fmt in chip.config.formats]
        raise ValueError(f"recipe {recipe!r} needs the {fmt} MATMUL path and this chip is built with "
                         f"{'/'.join(chip.config.formats)}; recipes it runs: {', '.join(ok)}")
    return recipe


def attention_recipe_for(recipe: str) -> str:
    """The attention recipe (golden.attention_recipes) of a GEMM recipe: int8 recipes use
    ``int8``; FP8 and MX recipes the FP8 attention of their element format; MXFP4 (no FP4
    attention exists) ``fp8-e4m3``."""
    from golden.quant import RECIPES

    fmt = RECIPES[recipe].fmt if recipe in RECIPES else "int8"
    return {"int8": "int8", "e4m3": "fp8-e4m3", "e5m2": "fp8-e5m2", "e2m1": "fp8-e4m3"}[fmt]


def _f32(t: torch.Tensor) -> np.ndarray:
    return np.ascontiguousarray(t.detach().to(torch.float32).cpu().numpy())


def _back(y: np.ndarray, like: torch.Tensor) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(y)).to(like.dtype)


def _gemm(h: int, a: np.ndarray, b: np.ndarray, recipe: str):
    chip = session_of(h)
    check_recipe(chip, recipe)
    return chip.gemm_lowp(a, b, recipe)


# ---- matrix products ---------------------------------------------------------------------------

@torch.library.custom_op("firstlight::mm", mutates_args=())
def mm(a: torch.Tensor, b: torch.Tensor, chip: int, recipe: str) -> torch.Tensor:
    """``a @ b`` for 2-D ``a`` (M, K) and ``b`` (K, N), operands quantized with ``recipe``."""
    c, st = _gemm(chip, _f32(a), _f32(b), recipe)
    _record(chip, "mm", recipe, [st])
    return _back(c, a)


@mm.register_fake
def _(a, b, chip, recipe):
    return a.new_empty((a.shape[0], b.shape[1]))


@torch.library.custom_op("firstlight::addmm", mutates_args=())
def addmm(bias: torch.Tensor, a: torch.Tensor, b: torch.Tensor, chip: int, recipe: str) -> torch.Tensor:
    """``bias + a @ b`` (``bias`` broadcast to (M, N)); the bias is added in fp32 on the host."""
    c, st = _gemm(chip, _f32(a), _f32(b), recipe)
    _record(chip, "addmm", recipe, [st])
    return _back(c + _f32(bias), a)


@addmm.register_fake
def _(bias, a, b, chip, recipe):
    return a.new_empty((a.shape[0], b.shape[1]))


@torch.library.custom_op("firstlight::linear", mutates_args=())
def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, chip: int, recipe: str) -> torch.Tensor:
    """``x @ weight.T + bias`` for ``x`` of shape (..., K) and ``weight`` (N, K)."""
    lead = x.shape[:-1]
    c, st = _gemm(chip, _f32(x).reshape(-1, x.shape[-1]), np.ascontiguousarray(_f32(weight).T), recipe)
    if bias is not None:
        c = c + _f32(bias)
    _record(chip, "linear", recipe, [st])
    return _back(c.reshape(*lead, weight.shape[0]), x)


@linear.register_fake
def _(x, weight, bias, chip, recipe):
    return x.new_empty((*x.shape[:-1], weight.shape[0]))


@torch.library.custom_op("firstlight::qlinear", mutates_args=())
def qlinear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, scale: torch.Tensor, relu: bool,
            chip: int) -> torch.Tensor:
    """The quantized linear, whole on the chip: int8 ``x`` (..., K) and ``weight`` (N, K), int32
    ``bias`` (N,) or None, fp32 ``scale`` (N,) or one value; returns int8 (..., N) =
    requant((x @ weight.T + bias) * scale), ReLU'd with ``relu``. The bias and the per-channel
    requantization run in the GEMM's fused epilogue on the vector unit before each store
    (kernels/tiled/gemm.py), bit-exact against golden.epilogue.gemm_epilogue; no float on the host."""
    for name, t, want in (("x", x, torch.int8), ("weight", weight, torch.int8)):
        if t.dtype != want:
            raise TypeError(f"qlinear: {name} must be {want}, not {t.dtype} (quantize it first)")
    if bias is not None and bias.dtype != torch.int32:
        raise TypeError(f"qlinear: bias must be torch.int32 (in the product's units), not {bias.dtype}")
    lead = x.shape[:-1]
    a = np.ascontiguousarray(x.detach().cpu().numpy().reshape(-1, x.shape[-1]))
    b = np.ascontiguousarray(weight.detach().cpu().numpy().T)
    s = scale.detach().to(torch.float64).cpu().numpy()
    c, st = session_of(chip).gemm(a, b, bias=None if bias is None else bias.detach().cpu().numpy(),
                                  scale=s if s.ndim else float(s), relu=bool(relu))
    _record(chip, "qlinear", "int8 epilogue", [st])
    return torch.from_numpy(np.ascontiguousarray(c)).reshape(*lead, weight.shape[0])


@qlinear.register_fake
def _(x, weight, bias, scale, relu, chip):
    return x.new_empty((*x.shape[:-1], weight.shape[0]), dtype=torch.int8)


@torch.library.custom_op("firstlight::bmm", mutates_args=())
def bmm(a: torch.Tensor, b: torch.Tensor, chip: int, recipe: str) -> torch.Tensor:
    """``a[i] @ b[i]`` for (B, M, K) and (B, K, N): one chip GEMM per batch entry."""
    an, bn = _f32(a), _f32(b)
    outs, stats = [], []
    for i in range(an.shape[0]):
        c, st = _gemm(chip, an[i], bn[i], recipe)
        outs.append(c)
        stats.append(st)
    _record(chip, "bmm", recipe, stats)
    return _back(np.stack(outs), a)


@bmm.register_fake
def _(a, b, chip, recipe):
    return a.new_empty((a.shape[0], a.shape[1], b.shape[2]))


# ---- the vector unit ---------------------------------------------------------------------------

def _through(op: str, kernel: str, like: torch.Tensor, chip: int, *aten_args, **aten_kwargs):
    """The ATen call ``aten_args`` on the tile kernel ``kernel`` through the binding its
    declaration gives (KernelSpec.aten: the rows along a dimension, a norm's trailing shape): the
    same path as the torch.compile backend's, in ``like``'s dtype; the ledger names the
    operator ``op`` that the caller called."""
    from kernels.tile.spec import get

    out = bound_call(get(kernel), chip, aten_args, aten_kwargs, like)
    session_of(chip).torch_ledger[-1].op = op
    return out


@torch.library.custom_op("firstlight::softmax", mutates_args=())
def softmax(x: torch.Tensor, dim: int, chip: int) -> torch.Tensor:
    """Softmax along ``dim`` on the vector unit (fp32): the kernel ``softmax``."""
    return _through("softmax", "softmax", x, chip, x, dim, False)


@softmax.register_fake
def _(x, dim, chip):
    return torch.empty_like(x)


@torch.library.custom_op("firstlight::layer_norm", mutates_args=())
def layer_norm(x: torch.Tensor, normalized_shape: list[int], weight: torch.Tensor | None, bias: torch.Tensor | None,
               eps: float, chip: int) -> torch.Tensor:
    """LayerNorm over the trailing ``normalized_shape`` on the vector unit (fp32): the kernel ``layernorm``."""
    return _through("layer_norm", "layernorm", x, chip, x, list(normalized_shape), weight, bias, float(eps))[0]


@layer_norm.register_fake
def _(x, normalized_shape, weight, bias, eps, chip):
    return torch.empty_like(x)


@torch.library.custom_op("firstlight::rms_norm", mutates_args=())
def rms_norm(x: torch.Tensor, normalized_shape: list[int], weight: torch.Tensor | None, eps: float | None,
             chip: int) -> torch.Tensor:
    """RMSNorm over the trailing ``normalized_shape`` on the vector unit (fp32), the kernel
    ``rmsnorm``; ``eps`` None is PyTorch's default, the dtype's machine epsilon."""
    e = float(torch.finfo(x.dtype).eps) if eps is None else float(eps)
    return _through("rms_norm", "rmsnorm", x, chip, x, list(normalized_shape), weight, e)


@rms_norm.register_fake
def _(x, normalized_shape, weight, eps, chip):
    return torch.empty_like(x)


@torch.library.custom_op("firstlight::relu", mutates_args=())
def relu(x: torch.Tensor, chip: int) -> torch.Tensor:
    """max(x, 0) on the vector unit (RELU: -0 -> +0, NaN stays NaN)."""
    flat = _f32(x).reshape(1, -1) if x.dim() < 2 else _f32(x).reshape(-1, x.shape[-1])
    y, st = session_of(chip).relu(flat)
    _record(chip, "relu", "fp32", [st])
    return _back(y.reshape(x.shape), x)


@relu.register_fake
def _(x, chip):
    return torch.empty_like(x)


@torch.library.custom_op("firstlight::gelu", mutates_args=())
def gelu(x: torch.Tensor, chip: int) -> torch.Tensor:
    """GELU, tanh form (``F.gelu(x, approximate="tanh")``), on the vector unit: the kernel ``gelu``."""
    return _through("gelu", "gelu", x, chip, x, approximate="tanh")


@gelu.register_fake
def _(x, chip):
    return torch.empty_like(x)


@torch.library.custom_op("firstlight::silu", mutates_args=())
def silu(x: torch.Tensor, chip: int) -> torch.Tensor:
    """SiLU on the vector unit: the kernel ``silu``."""
    return _through("silu", "silu", x, chip, x)


@silu.register_fake
def _(x, chip):
    return torch.empty_like(x)


def _binary(name: str, a: torch.Tensor, b: torch.Tensor, chip: int) -> torch.Tensor:
    """fadd / fsub / fmul of two tensors after broadcasting (layout on the host)."""
    shape = torch.broadcast_shapes(a.shape, b.shape)
    cols = shape[-1] if len(shape) else 1
    an = np.ascontiguousarray(np.broadcast_to(_f32(a), shape)).reshape(-1, cols)
    bn = np.ascontiguousarray(np.broadcast_to(_f32(b), shape)).reshape(-1, cols)
    y, st = session_of(chip).elementwise(name, an, bn)
    _record(chip, {"fadd": "add", "fsub": "sub", "fmul": "mul"}[name], "fp32", [st])
    return torch.from_numpy(y.reshape(shape)).to(torch.promote_types(a.dtype, b.dtype))


@torch.library.custom_op("firstlight::add", mutates_args=())
def add(a: torch.Tensor, b: torch.Tensor, chip: int) -> torch.Tensor:
    """``a + b`` (broadcast) on the vector unit, fp32."""
    return _binary("fadd", a, b, chip)


@add.register_fake
def _(a, b, chip):
    return a.new_empty(torch.broadcast_shapes(a.shape, b.shape), dtype=torch.promote_types(a.dtype, b.dtype))


@torch.library.custom_op("firstlight::sub", mutates_args=())
def sub(a: torch.Tensor, b: torch.Tensor, chip: int) -> torch.Tensor:
    """``a - b`` (broadcast) on the vector unit, fp32."""
    return _binary("fsub", a, b, chip)


@sub.register_fake
def _(a, b, chip):
    return a.new_empty(torch.broadcast_shapes(a.shape, b.shape), dtype=torch.promote_types(a.dtype, b.dtype))


@torch.library.custom_op("firstlight::mul", mutates_args=())
def mul(a: torch.Tensor, b: torch.Tensor, chip: int) -> torch.Tensor:
    """``a * b`` (broadcast) on the vector unit, fp32."""
    return _binary("fmul", a, b, chip)


@mul.register_fake
def _(a, b, chip):
    return a.new_empty(torch.broadcast_shapes(a.shape, b.shape), dtype=torch.promote_types(a.dtype, b.dtype))


# ---- attention ---------------------------------------------------------------------------------

@torch.library.custom_op("firstlight::scaled_dot_product_attention", mutates_args=())
def scaled_dot_product_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, is_causal: bool, chip: int,
                                 recipe: str) -> torch.Tensor:
    """``softmax(q k^T / sqrt(D) [causal]) v`` for (..., S, D) q, k, v of one shape: the flash
    attention kernel per leading index (batch, head), with :func:`attention_recipe_for`."""
    if not (q.shape == k.shape == v.shape) or q.dim() < 2:
        raise ValueError(f"the attention kernel takes q, k, v of one shape (..., S, D); got {list(q.shape)}, "
                         f"{list(k.shape)}, {list(v.shape)}")
    ar = attention_recipe_for(recipe)
    s = session_of(chip)
    S, D = q.shape[-2:]
    qn, kn, vn = (_f32(t).reshape(-1, S, D) for t in (q, k, v))
    outs, stats = [], []
    for i in range(qn.shape[0]):
        o, st = s.attention(qn[i], kn[i], vn[i], causal=bool(is_causal), recipe=ar)
        outs.append(o)
        stats.append(st)
    _record(chip, "scaled_dot_product_attention", ar, stats)
    return _back(np.stack(outs).reshape(q.shape), q)


@scaled_dot_product_attention.register_fake
def _(q, k, v, is_causal, chip, recipe):
    return torch.empty_like(q)


OPS = {"mm": mm, "addmm": addmm, "linear": linear, "qlinear": qlinear, "bmm": bmm, "softmax": softmax, "layer_norm": layer_norm,
       "rms_norm": rms_norm, "scaled_dot_product_attention": scaled_dot_product_attention, "relu": relu,
       "gelu": gelu, "silu": silu, "add": add, "sub": sub, "mul": mul}
"""Every operator by its short name (``torch.ops.firstlight.<name>``)."""

_RECIPE_OPS = ("mm", "addmm", "linear", "bmm", "scaled_dot_product_attention")


class ChipOps:
    """The operators bound to one chip and recipe, for eager code::

        fl = firstlight.torch.ops(chip, recipe="int8-channel")
        y = fl.linear(x, layer.weight, layer.bias)
        p = fl.softmax(y, -1)
    """

    def __init__(self, chip, recipe: str = "int8-channel"):
        self.chip = chip
        self.handle = handle(chip)
        self.recipe = check_recipe(chip, recipe)

    def __getattr__(self, name: str):
        if name not in OPS:
            raise AttributeError(f"no firstlight operator {name!r}; operators: {', '.join(OPS)}")
        op = OPS[name]
        if name in _RECIPE_OPS:
            return lambda *args: op(*args, self.handle, self.recipe)
        return lambda *args: op(*args, self.handle)


def ops(chip, recipe: str = "int8-channel") -> ChipOps:
    """:class:`ChipOps` for ``chip`` and ``recipe``."""
    return ChipOps(chip, recipe)
