"""LayerNorm and RMSNorm over rows: ``layer_norm(dev, x, gamma, beta, eps)`` and
``rms_norm(dev, x, gamma, eps)`` -> fp32 (R, C), the device entry points of the tile-language
kernels in kernels/tiled/norms.py (golden/norms.py's order of operations)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from workarounds import Mitigations

from .stats import KernelStats
from .tile.spec import call
from .validate import check_matrix, require_vector

if TYPE_CHECKING:
    from cosim.device import KernelDevice

__all__ = ["layer_norm", "rms_norm"]


def _check_vec(name: str, v, cols: int) -> np.ndarray:
    if not isinstance(v, np.ndarray) or v.dtype != np.float32:
        raise TypeError(f"{name} must be a float32 numpy array of {cols} values (one per column), "
                        f"not {type(v).__name__} {getattr(v, 'dtype', '')}".rstrip())
    if v.shape != (cols,):
        raise ValueError(f"{name} must have shape ({cols},), one value per column of x; got {v.shape}")
    return np.ascontiguousarray(v).reshape(1, cols)


def _check(kind: str, x, eps) -> np.ndarray:
    x = check_matrix("x", x, (np.float32,), "fp32 rows to normalise, shape (R, C)")
    if not isinstance(eps, (int, float)) or not np.isfinite(eps) or eps < 0:
        raise ValueError(f"eps must be a finite number >= 0, not {eps!r}")
    return x


async def layer_norm(dev: KernelDevice, x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, eps: float = 1e-5, *,
                     mitigations: Mitigations, budget_cycles: int | None = None) -> tuple[np.ndarray, KernelStats]:
    """LayerNorm of every row: ``(x - mean) / sqrt(var + eps) * gamma + beta`` (population
    variance, two passes), in golden/norms.py's order of operations."""
    x = _check("layer", x, eps)
    cols = x.shape[1]
    require_vector(dev.config, "layer_norm")
    ins = {"x": x, "gamma": _check_vec("gamma", gamma, cols), "beta": _check_vec("beta", beta, cols)}
    return await call(dev, "layernorm", ins, mitigations=mitigations, budget_cycles=budget_cycles, eps=float(eps))


async def rms_norm(dev: KernelDevice, x: np.ndarray, gamma: np.ndarray, eps: float = 1e-6, *,
                   mitigations: Mitigations, budget_cycles: int | None = None) -> tuple[np.ndarray, KernelStats]:
    """RMSNorm of every row: ``x / sqrt(mean(x**2) + eps) * gamma``."""
    x = _check("rms", x, eps)
    require_vector(dev.config, "rms_norm")
    ins = {"x": x, "gamma": _check_vec("gamma", gamma, x.shape[1])}
    return await call(dev, "rmsnorm", ins, mitigations=mitigations, budget_cycles=budget_cycles, eps=float(eps))
