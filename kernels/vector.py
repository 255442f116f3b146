"""Elementwise fp32 / int32 operations on the vector unit: ``elementwise(dev, op, a, b)``, the
device entry point of the tile-language kernel kernels/tiled/elementwise.py (the rows in tiles,
double-buffered by the compiler; ``b`` of ``a``'s shape, one value per row or one per column).
golden.vector.vector_op is its reference, bit for bit (docs/numerics.md, "The vector unit").
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from golden.vector import UNARY_OPS as UNARY
from golden.vector import BROADCASTS, INT_INPUT_OPS, VEC_OPS
from workarounds import Mitigations

from .stats import KernelStats
from .tile.spec import call
from .validate import check_matrix, require_vector

if TYPE_CHECKING:
    from cosim.device import KernelDevice

__all__ = ["elementwise", "BROADCASTS", "UNARY"]

def _check(op: str, a, b, broadcast: str) -> tuple[np.ndarray, np.ndarray | None]:
    if op not in VEC_OPS:
        raise ValueError(f"op must be one of {', '.join(VEC_OPS)}, got {op!r}")
    if broadcast not in BROADCASTS:
        raise ValueError(f"broadcast must be one of {', '.join(BROADCASTS)}, got {broadcast!r}")
    ints = op in INT_INPUT_OPS  # the ops that read int32
    dtype = np.int32 if ints else np.float32
    a = check_matrix("a", a, (dtype,), "int32 values to convert" if ints else "fp32 values, shape (R, C)")
    rows, cols = a.shape
    if op in UNARY:
        if b is not None:
            raise ValueError(f"{op} takes no second operand; got b of shape {np.shape(b)}")
        if broadcast != "none":
            raise ValueError(f"{op} takes no second operand, so broadcast must be 'none', not {broadcast!r}")
        return a, None
    if b is None:
        raise ValueError(f"{op} needs a second operand b")
    b_dtype, b_what = {"iadd": (np.int32, "int32"), "requant": (np.uint32, "uint32 REQUANT parameter words "
                                                                          "(golden.vector.requant_params)")
                       }.get(op, (np.float32, "float32"))
    if not isinstance(b, np.ndarray) or b.dtype != b_dtype:
        raise TypeError(f"b of {op} must be a {b_what} numpy array, got {type(b).__name__} "
                        f"{getattr(b, 'dtype', '')}".rstrip())
    want = {"none": (rows, cols), "row": (rows,), "col": (cols,)}[broadcast]
    if b.shape != want and b.size == int(np.prod(want)) and b.ndim == 2 and broadcast != "none":
        b = b.reshape(want)  # (R, 1) / (1, C) are the same thing
    if b.shape != want:
        raise ValueError(f"with broadcast={broadcast!r}, b must have shape {want} for a of shape {a.shape}; "
                         f"got {b.shape}")
    return a, np.ascontiguousarray(b)


async def elementwise(dev: KernelDevice, op: str, a: np.ndarray, b: np.ndarray | None = None, *,
                      broadcast: str = "none", mitigations: Mitigations,
                      budget_cycles: int | None = None) -> tuple[np.ndarray, KernelStats]:
    """``op(a, b)`` elementwise on the vector unit; returns ``(result of a's shape, stats)``:
    fp32, or int32 for iadd and requant.

    ``op`` is one of golden.vector.VEC_OPS; ``b`` is ``a``'s shape (``broadcast="none"``), one
    value per row (``"row"``) or one per column (``"col"``); the unary ops (``i2f``, ``relu``,
    ``exp``, ``recip``, ``rsqrt``) take no ``b``; requant's ``b`` is uint32 parameter words
    (golden.vector.requant_params).
    """
    a, b = _check(op, a, b, broadcast)
    require_vector(dev.config, f"elementwise {op}")
    ins = {"a": a}
    if b is not None:
        b = b.view(np.int32) if b.dtype == np.uint32 else b  # the kernel's tensor holds the raw words
        ins["b"] = {"none": b, "row": b.reshape(-1, 1), "col": b.reshape(1, -1)}[broadcast]
    return await call(dev, "elementwise", ins, op=op, broadcast=broadcast, mitigations=mitigations,
                      budget_cycles=budget_cycles)
