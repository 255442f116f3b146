"""Row softmax: ``softmax(dev, x)`` -> fp32 (R, C), the device entry point of the tile-language
kernel in kernels/tiled/softmax.py (max, subtract, exp, sum, reciprocal, scale, double-buffered
by the compiler). golden/softmax.py's ``softmax_rows`` is the same sequence in numpy."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from workarounds import Mitigations

from .stats import KernelStats
from .tile.spec import call
from .validate import check_matrix, require_vector

if TYPE_CHECKING:
    from cosim.device import KernelDevice

__all__ = ["softmax"]


async def softmax(dev: KernelDevice, x: np.ndarray, *, mitigations: Mitigations,
                  budget_cycles: int | None = None) -> tuple[np.ndarray, KernelStats]:
    """Softmax of every row of an fp32 matrix on the chip; returns ``(fp32 (R, C), stats)``.

    Non-finite inputs follow the arithmetic: a +Inf in a row makes the row NaN (Inf - Inf), a
    row of -Inf only is NaN (0 * Inf); -Inf entries elsewhere give 0.
    """
    x = check_matrix("x", x, (np.float32,), "fp32 logits, shape (R, C)")
    require_vector(dev.config, "softmax")
    return await call(dev, "softmax", {"x": x}, mitigations=mitigations, budget_cycles=budget_cycles)
