"""int32 row reductions (SUM wrapping modulo 2**32, MAX, MIN) on the reduction unit; a row longer
than the SRAM holds goes in chunks whose partial results are stored and reduced again.
golden.reduce_rows is the reference."""

from __future__ import annotations

from kernels import tile


def reduce(x, y, *, op: str, tile_rows: int, chunk: int):
    fn = {"sum": tile.row_sum, "max": tile.row_max, "min": tile.row_min}[op]
    src, words, first = x, x.words, True
    while chunk and words > chunk:  # rows in chunks: a word of partial results each, reduced again
        n = -(-words // chunk)
        p = tile.scratch("partials", x.rows, n, pad=IDENTITY[op])
        steps = [(r, j) for r in range(0, x.rows, tile_rows) for j in range(n)]
        for r, j in tile.pipeline(steps, stages=2) if first else steps:
            tile.store(p[r:r + tile_rows, j:j + 1], fn(tile.load(src[r:r + tile_rows, j * chunk:(j + 1) * chunk])))
        src, words, first = p, n, False
    rows = range(0, x.rows, tile_rows)
    for r in tile.pipeline(rows, stages=2) if first else rows:  # a tile of whole rows at a time
        tile.store(y[r:r + tile_rows], fn(tile.load(src[r:r + tile_rows])))


# ---- declaration ---------------------------------------------------------------------------------

import numpy as np  # noqa: E402

import golden  # noqa: E402
from kernels.tile.ir import TileError  # noqa: E402
from kernels.tile.runtime import TensorSpec, fits  # noqa: E402
from kernels.tile.spec import KernelSpec, Param  # noqa: E402

from ._rows import TILE_ROWS  # noqa: E402

IDENTITY = {"sum": 0, "max": -(2**31), "min": 2**31 - 1}  # the padding lanes: they change nothing
_MIN_TILES = 4


def _words(p, lanes):
    return -(-p["cols"] // lanes)


def _tensors(p):
    return [TensorSpec("x", p["rows"], p["cols"], "int32", pad=IDENTITY[p["op"]] & 0xFFFFFFFF),
            TensorSpec("y", p["rows"], 1, "int32", role="out")]


def _plan(p, cfg):
    """(tile_rows, chunk words): whole rows, the most rows that fit double-buffered with at least
    four tiles; a row too long for that goes in chunks of a quarter of the accumulator SRAM."""
    chunk = 0 if 2 * _words(p, cfg.lanes) + 8 <= cfg.acc_depth else cfg.acc_depth // 4
    if p["tile_rows"]:
        return p["tile_rows"], chunk
    want = max(1, -(-p["rows"] // _MIN_TILES))
    for n in range(want, 0, -1):
        try:
            fits(reduce, cfg, _tensors(p), {"op": p["op"], "tile_rows": n, "chunk": chunk})
            return n, chunk
        except TileError:
            continue
    raise TileError(f"no tile of rows of {p['cols']} values fits the accumulator SRAM ({cfg.acc_depth} words)")


def _args(p, t):
    n, chunk = _plan(p, t.config)
    return {"op": p["op"], "tile_rows": n, "chunk": chunk}


def _inputs(p, seed, extremes):
    """int32 over the whole range; ``extremes``: rows of negative values only (a MAX that folds
    from zero reads 0), rows of INT32_MAX (a SUM that wraps), INT32_MIN and -1."""
    rng = np.random.default_rng(seed)
    x = rng.integers(-2**31, 2**31, size=(p["rows"], p["cols"]), dtype=np.int64).astype(np.int32)
    if extremes:
        x[0::3] = -np.abs(x[0::3].astype(np.int64)).clip(1, 2**31).astype(np.int64).clip(-2**31, -1).astype(np.int32)
        x[1::3] = 2**31 - 1
        if p["rows"] > 2:
            x[2, ::2] = -(2**31)
            x[2, 1::2] = -1
    return {"x": x}


SPECS = [KernelSpec(
    name="reduce", summary="int32 row reduction (sum wraps modulo 2**32)",
    source=reduce,
    params=(Param("rows", int, 8, "rows (each reduced to one value)", 1, 4096, shape=True),
            Param("cols", int, 100, "int32 values per row", 1, 65536, shape=True),
            Param("op", str, "sum", "the reduction", choices=("sum", "max", "min")), TILE_ROWS),
    tensors=_tensors, inputs=_inputs, golden=lambda i, p, lanes: {"y": golden.reduce_rows(i["x"], p["op"])[:, None]},
    kernel_args=_args, needs=(), units=("REDUCE", "CMDPROC", "DMA"),
    bench=({"rows": 64, "cols": 256, "op": "sum"},), bringup=({"rows": 5, "cols": 37, "op": "max"},),
    examples=("--rows 16 --cols 100 --op max", "--rows 4 --cols 9000 --op sum --rev A0"))]
