"""Kernel jobs for ``firstlight run`` and ``firstlight bench``: seeded data, the kernel, its golden."""

from __future__ import annotations

import numpy as np

import golden
import workarounds
from kernels.gemm import gemm
from kernels.reduce import reduce_rows

from .checks import first_mismatch, int8_operands

__all__ = ["gemm_job", "reduce_job", "bench_job"]


async def _traced(dev, trace: bool, run):
    """``await run()``, recording the chip's trace buffer around it when ``trace``; returns
    (run's value, the trace summary or None)."""
    if not trace:
        return await run(), None
    from firstlight.trace import disable_trace, enable_trace, read_trace

    await enable_trace(dev)
    value = await run()
    events = await read_trace(dev)
    await disable_trace(dev)
    return value, events.summary()


async def gemm_job(dev, emit, m: int, n: int, k: int, seed: int, extremes: bool = False,
                   errata_policy: dict | None = None, double_buffer: bool = True, trace: bool = False) -> dict:
    mit = workarounds.attach(dev, errata_policy)
    rng = np.random.default_rng(seed)
    a, b = int8_operands(rng, (m, k), extremes), int8_operands(rng, (k, n), extremes)
    (c, stats), events = await _traced(dev, trace, lambda: gemm(dev, a, b, mitigations=mit,
                                                                double_buffer=double_buffer))
    mismatch = first_mismatch(c, golden.gemm_int8(a, b))
    return {"passed": mismatch is None, "mismatch": mismatch, "stats": stats.to_dict(), "trace": events}


async def reduce_job(dev, emit, rows: int, cols: int, op: str, seed: int, extremes: bool = False,
                     errata_policy: dict | None = None, trace: bool = False) -> dict:
    mit = workarounds.attach(dev, errata_policy)
    rng = np.random.default_rng(seed)
    if extremes:
        x = rng.choice(np.array([-(2**31), 2**31 - 1, -1, 0, 1], np.int32), size=(rows, cols))
    else:
        x = rng.integers(-(2**31), 2**31, size=(rows, cols), dtype=np.int64).astype(np.int32)
    (got, stats), events = await _traced(dev, trace, lambda: reduce_rows(dev, x, op, mitigations=mit))
    mismatch = first_mismatch(got, golden.reduce_rows(x, op))
    return {"passed": mismatch is None, "mismatch": mismatch, "stats": stats.to_dict(), "trace": events}


async def bench_job(dev, emit, shapes: list[list[int]], seed: int, errata_policy: dict | None = None,
                    double_buffer: list[bool] = (True,), trace: bool = False) -> dict:
    """Several GEMMs in one simulator process, a record per shape (and buffering) as soon as it
    finishes."""
    out = 0
    for m, n, k in shapes:
        for db in double_buffer:
            r = await gemm_job(dev, emit, m, n, k, seed, errata_policy=errata_policy, double_buffer=db, trace=trace)
            emit({"type": "bench", "shape": [m, n, k], "double_buffer": db, **r})
            out += 1
    return {"runs": out}
