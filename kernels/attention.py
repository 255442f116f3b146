"""Single-head flash attention on the chip: ``attention(dev, q, k, v, causal=..., recipe=...)`` ->
fp32 (S, D). The device entry point of the tile-language kernel (kernels/tiled/attention.py,
"flash_attention"): the host quantizes Q, K and V by the recipe (golden/attention.py), the
compiler places the tiles, pipelines the K and V loads, finds the semaphores and applies the
revision's errata passes (kernels/tile/errata.py), so it runs on every revision.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from golden.attention import attention_recipe
from workarounds import Mitigations

from .stats import KernelStats
from .tile.spec import get, run_spec
from .validate import check_matrix, require_vector

if TYPE_CHECKING:
    from cosim.device import KernelDevice

__all__ = ["attention", "attention_params"]


def attention_params(cfg, seq: int, dim: int, causal: bool, recipe: str = "int8", bq: int | None = None,
                     tk: int | None = None) -> dict:
    """The kernel's resolved parameters (ValueError, saying what is accepted, for bad ones):
    ``bq`` queries a block (a multiple of LANES) and ``tk`` keys a tile, or None for the most
    that fit."""
    r = attention_recipe(recipe)
    if bq is not None and (bq < 1 or bq % cfg.lanes):
        raise ValueError(f"bq must be a positive multiple of LANES ({cfg.lanes}), not {bq}")
    spec = get("flash_attention")
    p = spec.resolve({"seq": seq, "dim": dim, "causal": causal, "recipe": r.name,
                      "nq": (bq or 0) // cfg.lanes, "tk": tk or 0})
    why = spec.refusal(cfg, p)
    if why:
        raise ValueError(why)
    return p


async def attention(dev: KernelDevice, q: np.ndarray, k: np.ndarray, v: np.ndarray, *, causal: bool = False,
                    mitigations: Mitigations, recipe: str = "int8", bq: int | None = None, tk: int | None = None,
                    budget_cycles: int | None = None) -> tuple[np.ndarray, KernelStats]:
    """softmax(Q K^T / sqrt(D) [causal]) V for fp32 Q, K, V of shape (S, D), with the attention
    ``recipe`` (golden/attention.py: ATTENTION_RECIPES). Returns ``(fp32 (S, D), stats)``;
    ``stats.plan``: the query block ``bq`` and key tile ``tk`` taken, and ``flush_p`` (FL-NU-001's
    mitigation ran: golden.attention.attention_golden(flush_p=True) is then the chip's result)."""
    from kernels.tiled.attention import operands

    r = attention_recipe(recipe)
    q = check_matrix("q", q, (np.float32,), "fp32 queries, shape (S, D)")
    k = check_matrix("k", k, (np.float32,), "fp32 keys, shape (S, D)")
    v = check_matrix("v", v, (np.float32,), "fp32 values, shape (S, D)")
    if not (q.shape == k.shape == v.shape):
        raise ValueError(f"q, k and v must have the same shape (S, D); got {q.shape}, {k.shape}, {v.shape}")
    for name, x in (("q", q), ("k", k), ("v", v)):
        if not np.isfinite(x).all():
            raise ValueError(f"{name} has non-finite values: the {r.name} recipe scales by amax and cannot "
                             "carry Inf or NaN (mask with causal=True instead of -Inf scores)")
    cfg = dev.config
    require_vector(cfg, "attention")
    seq, dim = q.shape
    p = attention_params(cfg, seq, dim, causal, r.name, bq, tk)
    ins = operands(q, k, v, r.name)
    out, stats = await run_spec(dev, get("flash_attention"), p, ins, mitigations=mitigations,
                                budget_cycles=budget_cycles)
    args = stats.plan
    stats.plan = {"bq": args["nq"] * cfg.lanes, "tk": args["tk"], "causal": causal, "stages": args["stages"],
                  "flush_p": bool(ins.get("flush"))}
    stats.recipe = r.name
    return np.ascontiguousarray(out["ot"].T), stats
