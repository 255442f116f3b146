"""What the row kernels (softmax, the norms, the activations) share in their declarations: the
shape parameters, the tile-rows parameter and its automatic choice."""

from __future__ import annotations

from kernels.tile.ir import TileError
from kernels.tile.runtime import fits
from kernels.tile.spec import Param

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
