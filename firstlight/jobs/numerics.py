"""The numerics jobs: SQNR of every recipe x distribution x K on the chip, its bits vs the golden;
and attention per recipe and sequence length, with the error attributed to its stages."""

from __future__ import annotations

import numpy as np

import workarounds
from kernels.lowp import gemm_lowp

from golden.distributions import sample
from .checks import lowp_mismatch

__all__ = ["numerics_job", "attention_numerics_job", "attention_inputs"]


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


def attention_inputs(seed: int, seq: int, dim: int):
    """The numerics report's N(0, 1) Q, K, V for one sequence length (a function of the seed)."""
    rng = np.random.default_rng([seed, seq, dim, 97])
    return tuple(rng.standard_normal((seq, dim)).astype(np.float32) for _ in range(3))


async def attention_numerics_job(dev, emit, recipes: list[str], seqs: list[int], dim: int, seed: int,
                                 causal: bool = False, policy: dict | None = None) -> dict:
    """Attention with each recipe at each sequence length on the chip: its SQNR vs float64, its bits
    vs the kernel golden, and the golden's SQNR with one stage (QK^T, P, V) taken out of the
    quantization, which says where the error comes from. A chip that cannot run attention (a
    revision whose MATMUL errata it does not mitigate) gives one record saying why."""
    from golden.attention import (
        EXACT_STAGES,
        AttentionPlan,
        attention_golden,
        attention_reference,
        quantize_attention,
    )
    from golden.metrics import sqnr_db
    from kernels.attention import attention

    mit = workarounds.attach(dev, policy, warn=False)
    cfg = dev.config
    rows = 0
    for seq in seqs:
        q, k, v = attention_inputs(seed, seq, dim)
        ref = attention_reference(q, k, v, causal)
        for name in recipes:
            try:
                got, stats = await attention(dev, q, k, v, causal=causal, mitigations=mit, recipe=name)
            except ValueError as e:  # refused before anything ran (errata, formats, sizes)
                emit({"type": "attention_numerics", "recipe": name, "seq": seq, "dim": dim, "skipped": str(e)})
                continue
            plan = AttentionPlan(seq, dim, cfg.lanes, cfg.rows, stats.plan["bq"], stats.plan["tk"], causal)
            ops = quantize_attention(q, k, v, name)
            flush = stats.plan["flush_p"]  # FL-NU-001's mitigation ran: P's subnormal codes flushed
            want = attention_golden(ops, plan, flush_p=flush)
            emit({"type": "attention_numerics", "recipe": name, "seq": seq, "dim": dim, "causal": causal,
                  "sqnr_db": sqnr_db(ref, got.astype(np.float64)),
                  "bit_identical": _bits_equal(got, want),
                  "exact_sqnr_db": {st: sqnr_db(ref, attention_golden(ops, plan, exact={st}, flush_p=flush).astype(np.float64))
                                    for st in EXACT_STAGES},
                  "cycles": stats.cycles, "roof_utilization": stats.roof_utilization, "plan": stats.plan,
                  "mitigations": list(stats.mitigations), "revision": dev.revision})
            rows += 1
    return {"rows": rows}


def _bits_equal(got: np.ndarray, want: np.ndarray) -> bool:
    """fp32 results equal bit for bit (NaNs included)."""
    return got.shape == want.shape and bool((got.view(np.uint32) == want.view(np.uint32)).all())
