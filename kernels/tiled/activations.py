"""SiLU and GELU (tanh form through the sigmoid): golden/activations.py's sequence of VECs."""

from __future__ import annotations

from golden.activations import ACTIVATION_CONSTANTS as C
from kernels import tile


def _sigmoid_times(x, t):
    """x * 1 / (1 + e**t)"""
    return x * tile.recip(tile.exp(t) + C["one"])


def silu(x, out, *, tile_rows: int):
    for r in tile.pipeline(range(0, x.rows, tile_rows), stages=2):
        t = tile.load(x[r:r + tile_rows])
        tile.store(out[r:r + tile_rows], _sigmoid_times(t, t * C["minus_one"]))


def gelu(x, out, *, tile_rows: int):
    for r in tile.pipeline(range(0, x.rows, tile_rows), stages=2):
        t = tile.load(x[r:r + tile_rows])
        z = (t * t * C["gelu_cubic_k"] + C["gelu_k"]) * t  # K (x + 0.044715 x^3), in Horner's form
        tile.store(out[r:r + tile_rows], _sigmoid_times(t, z))


# ---- declarations --------------------------------------------------------------------------------

import numpy as np  # noqa: E402

from golden.activations import activation_reference, activation_rows  # noqa: E402
from kernels.tile.runtime import TensorSpec  # noqa: E402
from kernels.tile.spec import AtenOp, KernelRefused, KernelSpec  # noqa: E402

from ._rows import SHAPE, TILE_ROWS, as_rows, tile_rows  # noqa: E402


def _tensors(p):
    return [TensorSpec("x", p["rows"], p["cols"]), TensorSpec("out", p["rows"], p["cols"], role="out")]


def _inputs(p, seed, extremes):
    """N(0, 3^2); ``extremes``: +-Inf, NaN, +-100, zeros and a subnormal first."""
    x = (np.random.default_rng(seed).standard_normal((p["rows"], p["cols"])) * 3).astype(np.float32)
    if extremes:
        x.flat[:8] = np.array([np.inf, -np.inf, np.nan, 100, -100, 0.0, -0.0, 1e-40], np.float32)[:x.size]
    return {"x": x}


def _aten_silu(x):
    rows, finish = as_rows(x)
    return {"x": rows}, {}, finish


def _aten_gelu(x, approximate="none"):
    if approximate != "tanh":
        raise KernelRefused("exact (erf) GELU: the chip implements the tanh form (approximate='tanh')")
    rows, finish = as_rows(x)
    return {"x": rows}, {}, finish


def _spec(kind, source, summary, aten):
    return KernelSpec(
        name=kind, summary=summary, source=source, params=(*SHAPE, TILE_ROWS), tensors=_tensors, inputs=_inputs,
        golden=lambda i, p, lanes: {"out": activation_rows(kind, i["x"], lanes)},
        reference=lambda i, p: {"out": activation_reference(kind, np.where(np.isfinite(i["x"]), i["x"], np.nan))},
        kernel_args=lambda p, t: {"tile_rows": tile_rows(source, _tensors, p, t.config)}, aten=aten,
        bench=({"rows": 64, "cols": 256},), bringup=({"rows": 4, "cols": 37},), examples=("--rows 8 --cols 100",))


SPECS = [_spec("silu", silu, "SiLU of every value: x * sigmoid(x)", AtenOp("aten::silu", _aten_silu)),
         _spec("gelu", gelu, "GELU (tanh form) of every value", AtenOp("aten::gelu", _aten_gelu))]
