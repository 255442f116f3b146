"""Simulator jobs a sweep needs that ``firstlight run`` has no job for (run inside the simulator)."""

from __future__ import annotations

import numpy as np

import workarounds

__all__ = ["gemm_lowp_job"]


async def gemm_lowp_job(dev, emit, m: int, n: int, k: int, recipe: str, seed: int) -> dict:
    """A float GEMM on seeded N(0, 1) operands, quantized by ``recipe`` (golden/quant.py), checked
    bit for bit against the chip's golden (:func:`firstlight.jobs.checks.lowp_reference`) and by
    SQNR against float64."""
    from firstlight.jobs.checks import lowp_mismatch
    from kernels.lowp import gemm_lowp

    mit = workarounds.attach(dev, None, warn=False)
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    res = await gemm_lowp(dev, a, b, recipe, mitigations=mit)
    mismatch = lowp_mismatch(res)
    return {"passed": mismatch is None, "mismatch": mismatch, "stats": res.stats.to_dict(), "sqnr_db": res.sqnr_db}
