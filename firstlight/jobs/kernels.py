"""Kernel jobs for ``firstlight run`` and ``firstlight bench``: seeded data, the kernel, its golden."""

from __future__ import annotations

import numpy as np

import golden
import workarounds
from kernels.gemm import gemm
from kernels.reduce import reduce_rows

from .checks import first_mismatch, int8_operands
from .traced import traced as _traced

__all__ = ["gemm_job", "reduce_job", "bench_job", "vector_bench_job"]


async def gemm_job(dev, emit, m: int, n: int, k: int, seed: int, extremes: bool = False,
                   errata_policy: dict | None = None, double_buffer: bool = True, trace: bool = False,
                   epilogue: str | None = None) -> dict:
    """int8 GEMM on seeded operands against golden.gemm_int8; with ``epilogue`` ("requant" or
    "relu") also a seeded int32 bias and per-column scales calibrated on the data, against
    golden.epilogue (bit for bit) and float64 (SQNR)."""
    mit = workarounds.attach(dev, errata_policy)
    rng = np.random.default_rng(seed)
    a, b = int8_operands(rng, (m, k), extremes), int8_operands(rng, (k, n), extremes)
    if epilogue is None:
        (c, stats), events = await _traced(dev, trace, lambda: gemm(dev, a, b, mitigations=mit,
                                                                    double_buffer=double_buffer))
        mismatch = first_mismatch(c, golden.gemm_int8(a, b))
        return {"passed": mismatch is None, "mismatch": mismatch, "stats": stats.to_dict(), "trace": events}
    from golden.epilogue import calibrate_scales, gemm_epilogue, gemm_epilogue_reference
    from golden.metrics import sqnr_db
    from kernels.epilogue import Epilogue

    relu = epilogue == "relu"
    bias = rng.integers(-(2**16), 2**16, n).astype(np.int32)
    scale = calibrate_scales(a, b, bias)
    epi = Epilogue.checked(n, bias, scale, relu)
    (c, stats), events = await _traced(dev, trace, lambda: gemm(dev, a, b, mitigations=mit,
                                                                double_buffer=double_buffer, epilogue=epi))
    mismatch = first_mismatch(c.astype(np.int32), gemm_epilogue(a, b, bias, scale, relu).astype(np.int32))
    return {"passed": mismatch is None, "mismatch": mismatch, "stats": stats.to_dict(), "trace": events,
            "sqnr_db": sqnr_db(gemm_epilogue_reference(a, b, bias, scale, relu), c.astype(np.float64))}


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


async def vector_bench_job(dev, emit, kernels: list, seed: int) -> dict:
    """The vector-unit kernels for ``firstlight bench``: each tile-language kernel per [name,
    params] (``firstlight.cli.bench.row_kernel_cases``: the KernelSpecs' bench entries) through
    ``tile_job``, the job of ``firstlight run <kernel>``; a record each as soon as it finishes."""
    from .tile import shape_label, tile_job

    n = 0
    for name, params in kernels:
        r = await tile_job(dev, emit, name, params, seed)
        emit({"type": "vector_bench", **r, "shape": shape_label(name, r["params"]), "trace": None})
        n += 1
    return {"runs": n}


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
