"""What the row kernels (softmax, the norms, the activations) share in their declarations: the
shape parameters, the tile-rows parameter and its automatic choice, and how a row kernel takes
an ATen operator's tensor as rows."""

from __future__ import annotations

import numpy as np

from kernels.tile.ir import TileError
from kernels.tile.runtime import fits
from kernels.tile.spec import KernelRefused, Param

SHAPE = (Param("rows", int, 8, "rows of the matrix", 1, 4096, shape=True),
         Param("cols", int, 100, "values per row", 1, 65536, shape=True))
TILE_ROWS = Param("tile_rows", int, 0, "rows per tile (0: the compiler's choice, the most that fit double-buffered "
                  "while leaving at least four tiles)", 0, 4096)
# Four tiles at least: the first load and the last store are the part of the transfers that no
# work overlaps, so a smaller tile shortens them; below a few rows the per-command costs grow.
_MIN_TILES = 4


def tile_rows(spec_source, tensors, p: dict, config, extra: dict | None = None) -> int:
    """``p["tile_rows"]`` or, for 0, the most rows per tile that compile (fit the SRAM) with at
    least :data:`_MIN_TILES` tiles."""
    extra = extra or {}
    if p["tile_rows"]:
        return p["tile_rows"]
    want = max(1, -(-p["rows"] // _MIN_TILES))
    for n in range(want, 0, -1):
        try:
            fits(spec_source, config, tensors(p), {**extra, "tile_rows": n})
            return n
        except TileError:
            continue
    raise TileError(f"one row of {p['cols']} values does not fit the accumulator SRAM ({config.acc_depth} words) "
                    f"with what the kernel keeps beside it")


def as_rows(x: np.ndarray, axis: int = -1):
    """``x`` with ``axis`` moved last, as the (R, C) rows a row kernel takes, and the function that
    puts the kernel's (R, C) result back in ``x``'s shape: how a row kernel binds an ATen operator
    along a dimension (KernelSpec.aten)."""
    x = np.asarray(x)
    scalar = x.ndim == 0
    x = x.reshape(1) if scalar else x
    axis %= x.ndim
    moved = np.moveaxis(x, axis, -1)
    rows = np.ascontiguousarray(moved).reshape(-1, moved.shape[-1])

    def finish(y):
        out = np.moveaxis(np.asarray(y).reshape(moved.shape), -1, axis)
        return out.reshape(()) if scalar else np.ascontiguousarray(out)

    return rows, finish


def trailing_rows(x: np.ndarray, normalized_shape) -> tuple[np.ndarray, int]:
    """``x`` as rows of its trailing ``normalized_shape`` (a norm's rows) and their length;
    KernelRefused if that is not ``x``'s trailing shape."""
    shape = [int(normalized_shape)] if np.isscalar(normalized_shape) else [int(n) for n in normalized_shape]
    if not shape or tuple(x.shape[x.ndim - len(shape):]) != tuple(shape):
        raise KernelRefused(f"normalized_shape {shape} is not the trailing shape of the input {list(x.shape)}")
    n = int(np.prod(shape))
    return np.ascontiguousarray(x).reshape(-1, n), n


def row_param(v, n: int, fill: float, name: str) -> np.ndarray:
    """A norm's per-column ``weight`` or ``bias`` (None: ``fill``) as the (1, n) fp32 row the kernel takes."""
    if v is None:
        return np.full((1, n), fill, np.float32)
    v = np.asarray(v, np.float32)
    if v.size != n:
        raise KernelRefused(f"{name} has {v.size} values and the normalized shape {n}")
    return v.reshape(1, n)
