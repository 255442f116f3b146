"""One vector-unit operation over every value of a matrix: ``op(a, b)`` with ``b`` of ``a``'s shape,
one value per row or one per column (golden.vector.vector_op is the reference, bit for bit)."""

from __future__ import annotations

from kernels import tile

OPS = {"fadd": lambda a, b: a + b, "fsub": lambda a, b: a - b, "fmul": lambda a, b: a * b,
       "fmax": tile.maximum, "fmin": tile.minimum, "deq": tile.dequant, "expsub": lambda a, b: tile.exp(a - b),
       "iadd": lambda a, b: a + b, "requant": tile.requant,
       "i2f": tile.i2f, "relu": tile.relu, "exp": tile.exp, "recip": tile.recip, "rsqrt": tile.rsqrt}


def elementwise(a, *rest, op: str, broadcast: str, tile_rows: int):
    *b, out = rest  # no b for a unary op
    per_col = tile.load(b[0][0]) if broadcast == "col" else None  # one row of words, loaded once
    for r in tile.pipeline(range(0, a.rows, tile_rows), stages=2):
        x = tile.load(a[r:r + tile_rows])
        if not b:
            y = OPS[op](x)
        else:  # a tile of b's rows, one scalar per row, or the per-column words
            y = OPS[op](x, per_col or tile.load(b[0][r:r + tile_rows], scalar=broadcast == "row"))
        tile.store(out[r:r + tile_rows], y)


# ---- declaration ---------------------------------------------------------------------------------

import numpy as np  # noqa: E402

from golden.vector import BROADCASTS, INT_INPUT_OPS, INT_RESULT_OPS, UNARY_OPS, VEC_OPS, vector_op  # noqa: E402
from kernels.tile.runtime import TensorSpec  # noqa: E402
from kernels.tile.spec import KernelSpec, Param  # noqa: E402

from ._rows import SHAPE, TILE_ROWS, tile_rows  # noqa: E402

assert set(OPS) == set(VEC_OPS), "every elementwise op of the vector unit has a source"
_B_DTYPE = {"iadd": "int32", "requant": "int32"}  # requant: golden.vector.requant_params words, as int32


def _tensors(p):
    if p["op"] in UNARY_OPS and p["broadcast"] != "none":
        raise ValueError(f"{p['op']} takes no second operand, so broadcast must be 'none', not {p['broadcast']!r}")
    op, rows, cols = p["op"], p["rows"], p["cols"]
    a = TensorSpec("a", rows, cols, "int32" if op in INT_INPUT_OPS else "fp32")
    b = [] if op in UNARY_OPS else \
        [TensorSpec("b", *{"none": (rows, cols), "row": (rows, 1), "col": (1, cols)}[p["broadcast"]],
                    _B_DTYPE.get(op, "fp32"))]
    return [a, *b, TensorSpec("y", rows, cols, "int32" if op in INT_RESULT_OPS else "fp32", role="out")]


SPECIALS = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -1e-45, 1.1754942e-38, 3.4028235e38, -3.4028235e38,
                     1.0, -1.0], np.float32)


def _inputs(p, seed, extremes):
    """N(0, 10^2) fp32 (exp: uniform over [-110, 95], past both ends of its range); int32 over the
    whole range, a third of them small; requant's parameters any 32-bit words. ``extremes``: the
    fp32 specials (zeros, infinities, NaN, subnormals, the largest values) in every seventh value
    of a and fifth of b, and i2f's rounding cases."""
    rng = np.random.default_rng(seed)
    op, shape = p["op"], (p["rows"], p["cols"])
    bshape = {"none": shape, "row": (shape[0], 1), "col": (1, shape[1])}[p["broadcast"]]
    if op in INT_INPUT_OPS:
        a = rng.integers(-2**31, 2**31, size=shape, dtype=np.int64).astype(np.int32)
        a.flat[::3] = rng.integers(-2**20, 2**20, size=a.flat[::3].shape)
        if extremes:
            a.flat[:4] = np.array([2**24 + 1, -(2**24 + 3), -2**31, 2**31 - 1], np.int64)[:a.size].astype(np.int32)
    elif op in ("exp", "expsub"):
        a = rng.uniform(-110, 95, size=shape).astype(np.float32)
    else:
        a = (rng.standard_normal(shape) * 10).astype(np.float32)
    if extremes and a.dtype == np.float32:
        a.flat[::7] = rng.choice(SPECIALS, size=a.flat[::7].shape)
    out = {"a": a}
    if op in UNARY_OPS:
        return out
    if op in _B_DTYPE:
        out["b"] = rng.integers(0, 2**32, size=bshape, dtype=np.uint64).astype(np.uint32).view(np.int32)
    else:
        b = (rng.standard_normal(bshape) * (1 if op in ("expsub", "deq") else 10)).astype(np.float32)
        if extremes:
            b.flat[::5] = rng.choice(SPECIALS, size=b.flat[::5].shape)
        out["b"] = b
    return out


def _golden(i, p, lanes):
    a = i["a"].view(np.uint32)
    b = None if "b" not in i else i["b"].view(np.uint32)  # (R, C), (R, 1) or (1, C): numpy broadcasts
    y = vector_op(p["op"], a, b)
    return {"y": y.view(np.int32 if p["op"] in INT_RESULT_OPS else np.float32)}


def _args(p, t):
    extra = {"op": p["op"], "broadcast": p["broadcast"]}
    return {**extra, "tile_rows": tile_rows(elementwise, _tensors, p, t.config, extra)}


SPECS = [KernelSpec(
    name="elementwise", summary="one vector-unit operation over every value: op(a, b), b of a's shape, "
                                "per row or per column", source=elementwise,
    params=(*SHAPE, Param("op", str, "fadd", "the vector-unit operation (golden.vector.VEC_OPS)", choices=VEC_OPS),
            Param("broadcast", str, "none", "b of a's shape, one value per row, or one per column",
                  choices=BROADCASTS), TILE_ROWS),
    tensors=_tensors, inputs=_inputs, golden=_golden, kernel_args=_args,
    bench=({"rows": 64, "cols": 256, "op": "fmul"},), bringup=({"rows": 5, "cols": 37, "op": "fadd", "broadcast": "col"},),
    examples=("--rows 16 --cols 100 --op fmul", "--rows 64 --cols 256 --op exp --extremes",
              "--rows 8 --cols 30 --op iadd --broadcast col"))]
