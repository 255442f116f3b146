"""SiLU and GELU: ``activation(dev, x, kind)`` -> fp32 (R, C), the device entry point of the
tile-language kernels in kernels/tiled/activations.py (golden/activations.py's sequence)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from golden.activations import ACTIVATIONS
from workarounds import Mitigations

from .stats import KernelStats
from .tile.spec import call
from .validate import check_matrix, require_vector

if TYPE_CHECKING:
    from cosim.device import KernelDevice

__all__ = ["activation", "ACTIVATIONS"]


async def activation(dev: KernelDevice, x: np.ndarray, kind: str, *, mitigations: Mitigations,
                     budget_cycles: int | None = None) -> tuple[np.ndarray, KernelStats]:
    """SiLU (``kind="silu"``) or GELU (tanh form, ``"gelu"``) of every element; fp32 (R, C)."""
    if kind not in ACTIVATIONS:
        raise ValueError(f"kind must be one of {', '.join(ACTIVATIONS)}, got {kind!r}")
    x = check_matrix("x", x, (np.float32,), "fp32 values, shape (R, C)")
    require_vector(dev.config, kind)
    return await call(dev, kind, {"x": x}, mitigations=mitigations, budget_cycles=budget_cycles)
