"""Jobs for tests/test_attention_sim.py: flash attention with each recipe on the simulated chip.

The job only runs the kernel and hands back the chip's bits with the plan it took; the test
makes the inputs from the same seed and compares with golden/attention.py on the host.
"""

from __future__ import annotations

import numpy as np

from workarounds import attach


def attention_inputs(seed: int, seq: int, dim: int):
    """N(0, 1) Q, K, V of shape (seq, dim), a function of the seed and the shape."""
    rng = np.random.default_rng([seed, 93, seq, dim])
    return tuple(rng.standard_normal((seq, dim)).astype(np.float32) for _ in range(3))


async def attention_recipes_job(dev, emit, seed: int, cases: list) -> list[dict]:
    """Each case (seq, dim, causal, bq, tk, recipe): the chip's output bits and its stats."""
    from kernels.attention import attention

    mit = attach(dev, warn=False)
    out = []
    for seq, dim, causal, bq, tk, recipe in cases:
        q, k, v = attention_inputs(seed, seq, dim)
        got, stats = await attention(dev, q, k, v, causal=causal, mitigations=mit, recipe=recipe, bq=bq, tk=tk)
        out.append({"case": [seq, dim, causal, bq, tk, recipe], "bits": got.view(np.uint32).ravel().tolist(),
                    "cycles": stats.cycles, "plan": stats.plan, "recipe": stats.recipe,
                    "mitigations": list(stats.mitigations)})
    return out
