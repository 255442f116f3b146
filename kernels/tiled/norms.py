"""LayerNorm (the mean, corrected by the mean of its residual, then the variance of the
deviations) and RMSNorm over rows, in golden/norms.py's order of operations."""

from __future__ import annotations

from golden.norms import inv_count
from kernels import tile


def layer_norm(x, gamma, beta, out, *, eps: float, tile_rows: int):
    g, b = tile.load(gamma), tile.load(beta)
    inv_n = tile.scalar(bits=inv_count(x.cols))
    for r in tile.pipeline(range(0, x.rows, tile_rows), stages=2):
        t = tile.load(x[r:r + tile_rows])
        d0 = tile.mask_tail(t - tile.row_sum(t) * inv_n, x.cols)  # the padding lanes must not count
        # the fp32 mean is up to an ulp off: its residual's mean takes that out of the deviations
        d = tile.mask_tail(d0 - tile.row_sum(d0) * inv_n, x.cols)
        var = tile.row_sum(d * d) * inv_n
        tile.store(out[r:r + tile_rows], d * tile.rsqrt(var + eps) * g + b)


def rms_norm(x, gamma, out, *, eps: float, tile_rows: int):
    g = tile.load(gamma)
    inv_n = tile.scalar(bits=inv_count(x.cols))
    for r in tile.pipeline(range(0, x.rows, tile_rows), stages=2):
        t = tile.load(x[r:r + tile_rows])
        ms = tile.row_sum(t * t) * inv_n
        tile.store(out[r:r + tile_rows], t * tile.rsqrt(ms + eps) * g)


# ---- declarations --------------------------------------------------------------------------------

import numpy as np  # noqa: E402

from golden import norms as g  # noqa: E402
from kernels.tile.runtime import TensorSpec  # noqa: E402
from kernels.tile.spec import AtenOp, KernelSpec, Param  # noqa: E402

from ._rows import SHAPE, TILE_ROWS, row_param, tile_rows, trailing_rows  # noqa: E402


def _tensors(with_beta: bool):
    def tensors(p):
        r, c = p["rows"], p["cols"]
        return [TensorSpec("x", r, c), TensorSpec("gamma", 1, c), *([TensorSpec("beta", 1, c)] if with_beta else []),
                TensorSpec("out", r, c, role="out")]
    return tensors


def _inputs(p, seed, extremes):
    """Rows N(0, 3^2), gamma near 1, beta near 0; ``extremes``: rows offset by 1e4 (where a
    one-pass variance cancels) and constant rows (zero variance)."""
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((p["rows"], p["cols"])) * 3).astype(np.float32)
    if extremes:
        x[0::3] += 10000.0
        x[1::3] = 7.5
    gamma = (1 + 0.1 * rng.standard_normal((1, p["cols"]))).astype(np.float32)
    beta = (0.5 * rng.standard_normal((1, p["cols"]))).astype(np.float32)
    return {"x": x, "gamma": gamma, "beta": beta}


def _eps(default: float) -> Param:
    return Param("eps", float, default, "added to the variance before the square root", 0.0, 1.0)


def _args(source, tensors):
    return lambda p, t: {"eps": p["eps"], "tile_rows": tile_rows(source, tensors, p, t.config, {"eps": p["eps"]})}


def _aten_layer_norm(x, normalized_shape, weight=None, bias=None, eps=1e-5):
    """aten::native_layer_norm: the result, without the mean and rstd (statistics for the
    backward pass, which the kernel does not write)."""
    rows, n = trailing_rows(x, normalized_shape)
    ins = {"x": rows, "gamma": row_param(weight, n, 1.0, "weight"), "beta": row_param(bias, n, 0.0, "bias")}
    return ins, {"eps": float(eps)}, lambda y: (np.asarray(y).reshape(x.shape), None, None)


def _aten_rms_norm(x, normalized_shape, weight=None, eps=None):
    """aten::rms_norm; ``eps`` None is fp32's machine epsilon (PyTorch's default for an fp32
    input: a caller with another dtype passes its own)."""
    rows, n = trailing_rows(x, normalized_shape)
    e = float(np.finfo(np.float32).eps) if eps is None else float(eps)
    return {"x": rows, "gamma": row_param(weight, n, 1.0, "weight")}, {"eps": e}, lambda y: np.asarray(y).reshape(x.shape)


SPECS = [
    KernelSpec(
        name="layernorm", summary="LayerNorm of every row: (x - mean) / sqrt(var + eps) * gamma + beta (two passes)",
        source=layer_norm, params=(*SHAPE, TILE_ROWS, _eps(1e-5)), tensors=_tensors(True), inputs=_inputs,
        golden=lambda i, p, lanes: {"out": g.layer_norm_rows(i["x"], i["gamma"][0], i["beta"][0], p["eps"], lanes)},
        reference=lambda i, p: {"out": g.layer_norm_reference(i["x"], i["gamma"][0], i["beta"][0], p["eps"])},
        kernel_args=_args(layer_norm, _tensors(True)), units=("REDUCE", "CMDPROC", "DMA", "VECTOR"),
        aten=AtenOp("aten::native_layer_norm", _aten_layer_norm), bench=({"rows": 64, "cols": 256},), bringup=({"rows": 4, "cols": 37},), examples=("--rows 8 --cols 64",)),
    KernelSpec(
        name="rmsnorm", summary="RMSNorm of every row: x / sqrt(mean(x^2) + eps) * gamma",
        source=rms_norm, params=(*SHAPE, TILE_ROWS, _eps(1e-6)), tensors=_tensors(False), inputs=_inputs,
        golden=lambda i, p, lanes: {"out": g.rms_norm_rows(i["x"], i["gamma"][0], p["eps"], lanes)},
        reference=lambda i, p: {"out": g.rms_norm_reference(i["x"], i["gamma"][0], p["eps"])},
        kernel_args=_args(rms_norm, _tensors(False)), units=("REDUCE", "CMDPROC", "DMA", "VECTOR"),
        aten=AtenOp("aten::rms_norm", _aten_rms_norm), bench=({"rows": 64, "cols": 256},), bringup=({"rows": 4, "cols": 37},), examples=("--rows 8 --cols 64",)),
]
