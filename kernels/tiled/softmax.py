"""Row softmax: max, subtract, exp, sum, reciprocal, scale; golden/softmax.py's order."""

from __future__ import annotations

from kernels import tile


def softmax(x, out, *, tile_rows: int):
    for r in tile.pipeline(range(0, x.rows, tile_rows), stages=2):
        t = tile.load(x[r:r + tile_rows])
        t = tile.exp(t - tile.row_max(t))
        tile.store(out[r:r + tile_rows], t * tile.recip(tile.row_sum(t)))


# ---- declaration ---------------------------------------------------------------------------------

import numpy as np  # noqa: E402

from golden.softmax import NEG_INF, softmax_reference, softmax_rows  # noqa: E402
from kernels.tile.runtime import TensorSpec  # noqa: E402
from kernels.tile.spec import AtenOp, KernelSpec  # noqa: E402

from ._rows import SHAPE, TILE_ROWS, as_rows, tile_rows  # noqa: E402


def _tensors(p):
    return [TensorSpec("x", p["rows"], p["cols"], pad=NEG_INF), TensorSpec("out", p["rows"], p["cols"], role="out")]


def _inputs(p, seed, extremes):
    """N(0, 4^2) logits; ``extremes``: -Inf entries, rows offset by +1000 and -200, a row of -Inf only."""
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((p["rows"], p["cols"])) * 4).astype(np.float32)
    if extremes:
        x[1::3] += 1000.0
        x[2::5] -= 200.0
        x.flat[2::11] = -np.inf
        if p["rows"] >= 4:
            x[3] = -np.inf
    return {"x": x}


def _reference(ins, p):
    with np.errstate(invalid="ignore"):
        return {"out": softmax_reference(ins["x"])}  # NaN for a row of -Inf only: left out of the SQNR


def _aten(x, dim, half_to_float=False):
    """aten::_softmax(self, dim, half_to_float): the rows along ``dim`` (half_to_float only
    changes the result's dtype, which the caller gives)."""
    rows, finish = as_rows(x, dim)
    return {"x": rows}, {}, finish


SPECS = [KernelSpec(
    name="softmax", summary="row softmax in fp32 on the reduction and vector units", source=softmax,
    params=(*SHAPE, TILE_ROWS),
    tensors=_tensors, inputs=_inputs, golden=lambda ins, p, lanes: {"out": softmax_rows(ins["x"], lanes)},
    reference=_reference, kernel_args=lambda p, t: {"tile_rows": tile_rows(softmax, _tensors, p, t.config)},
    units=("REDUCE", "CMDPROC", "DMA", "VECTOR"), aten=AtenOp("aten::_softmax", _aten),
    bench=({"rows": 64, "cols": 256},), bringup=({"rows": 4, "cols": 37},), examples=("--rows 16 --cols 100", "--rows 64 --cols 256 --extremes"))]
