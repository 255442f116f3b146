"""The numerics job: SQNR of every recipe x distribution x K on the chip, its bits vs the golden."""

from __future__ import annotations

import numpy as np

import workarounds
from kernels.lowp import gemm_lowp

from golden.distributions import sample
from .checks import lowp_mismatch

__all__ = ["numerics_job"]


async def numerics_job(dev, emit, recipes: list[str], dists: list[str], ks: list[int], m: int, n: int,
                       seed: int, policy: dict | None = None) -> dict:
    mit = workarounds.attach(dev, policy, warn=False)
    rows = 0
    for dist in dists:
        for k in ks:
            rng = np.random.default_rng([seed, k, sum(dist.encode())])
            a = sample(dist, rng, (m, k), role="a")
            b = sample(dist, rng, (k, n), role="b")
            for name in recipes:
                res = await gemm_lowp(dev, a, b, name, mitigations=mit)
                emit({"type": "numerics", "recipe": name, "dist": dist, "k": k, "m": m, "n": n,
                      "sqnr_db": res.sqnr_db, "max_abs": res.max_abs, "bit_identical": lowp_mismatch(res) is None,
                      "cycles": res.stats.cycles, "mitigations": list(res.stats.mitigations),
                      "notes": list(res.stats.notes), "revision": dev.revision})
                rows += 1
    return {"rows": rows}
