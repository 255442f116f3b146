"""Simulator jobs a sweep needs that ``firstlight run`` has no job for (run inside the simulator)."""

from __future__ import annotations

import numpy as np

import workarounds

__all__ = ["gemm_lowp_job", "bringup_check_job"]


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


async def bringup_check_job(dev, emit, seed: int, revision: str) -> dict:
    """The whole first-light checklist (firstlight/bringup) on this chip, as one verdict: passed
    when no stage failed or was blocked; a stage the harness broke is ``harness_error``."""
    from firstlight.bringup.plan import STAGES
    from firstlight.bringup.stages import bringup_job

    c0 = dev.now_cycles()
    res = await bringup_job(dev, emit, selected=[s.name for s in STAGES], seed=seed, faults=[],
                            built_revision=revision)
    stages = res["stages"]
    bad = {k: v for k, v in stages.items() if v in ("failed", "blocked")}
    broken = sorted(k for k, v in stages.items() if v == "error")
    return {"passed": not bad and not broken, "mismatch": bad or None, "stages": stages,
            "harness_error": f"bring-up stages {', '.join(broken)} ended in a harness error" if broken else None,
            "stats": {"cycles": dev.now_cycles() - c0}}
