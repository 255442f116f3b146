"""Jobs that run inside the simulator for the CLI: make data, run a kernel, check the golden.

Each job is ``async def job(dev, emit, **kwargs) -> dict`` (see :mod:`cosim.jobs`).
"""

from __future__ import annotations

import numpy as np

import golden
from kernels.gemm import gemm
from kernels.reduce import reduce_rows


def _int8(rng, shape, extremes: bool) -> np.ndarray:
    if extremes:
        return rng.choice(np.array([-128, 127, -1, 0, 1], np.int8), size=shape)
    return rng.integers(-128, 128, size=shape, dtype=np.int8)


def _first_mismatch(got: np.ndarray, ref: np.ndarray) -> dict | None:
    bad = np.argwhere(got != ref)
    if not len(bad):
        return None
    idx = tuple(int(i) for i in bad[0])
    return {"index": list(idx), "got": int(got[idx]), "expected": int(ref[idx]), "count": int(len(bad))}


async def gemm_job(dev, emit, m: int, n: int, k: int, seed: int, extremes: bool = False) -> dict:
    rng = np.random.default_rng(seed)
    a, b = _int8(rng, (m, k), extremes), _int8(rng, (k, n), extremes)
    c, stats = await gemm(dev, a, b)
    ref = golden.gemm_int8(a, b)
    mismatch = _first_mismatch(c, ref)
    return {"passed": mismatch is None, "mismatch": mismatch, "stats": stats}


async def reduce_job(dev, emit, rows: int, cols: int, op: str, seed: int, extremes: bool = False) -> dict:
    rng = np.random.default_rng(seed)
    if extremes:
        x = rng.choice(np.array([-(2**31), 2**31 - 1, -1, 0, 1], np.int32), size=(rows, cols))
    else:
        x = rng.integers(-(2**31), 2**31, size=(rows, cols), dtype=np.int64).astype(np.int32)
    got, stats = await reduce_rows(dev, x, op)
    ref = golden.reduce_rows(x, op)
    mismatch = _first_mismatch(got, ref)
    return {"passed": mismatch is None, "mismatch": mismatch, "stats": stats}


async def bench_job(dev, emit, shapes: list[list[int]], seed: int) -> dict:
    """Run several GEMMs in one simulator process, emitting a record per shape as it finishes."""
    out = []
    for m, n, k in shapes:
        r = await gemm_job(dev, emit, m, n, k, seed)
        rec = {"type": "bench", "shape": [m, n, k], **r}
        emit(rec)
        out.append(rec)
    return {"runs": len(out)}
