"""Temporary: the tile-language GEMM beside the hand-written stream (removed once ported)."""

from __future__ import annotations

from .kernels import gemm_job
from .tile import tile_job


async def gemm_vs_job(dev, emit, shapes: list, seed: int) -> list[dict]:
    out = []
    for m, n, k in shapes:
        h = await gemm_job(dev, emit, m, n, k, seed)
        t = await tile_job(dev, emit, "tgemm", {"m": m, "n": n, "k": k}, seed)
        out.append({"shape": [m, n, k], "hand": h["stats"]["cycles"], "hand_ok": h["passed"],
                    "tile": t["stats"]["cycles"], "tile_ok": t["passed"], "mismatch": t["mismatch"],
                    "tile_roof": t["stats"].get("roof_utilization"), "hand_roof": h["stats"].get("roof_utilization"),
                    "gaps": t["stats"]["host"].get("errata_insertions"), "mit": t["stats"].get("mitigations")})
    return out
