"""Fused GEMM + reduction: ``gemm_sum(dev, a, b)`` -> (C, sum of every element of C), the device
entry point of the tile-language GEMM with its "sum" epilogue (kernels/tiled/gemm.py): each tile
group's REDUCE over its accumulator words is queued right behind the group's MATMULs (on B0 the
FL-CP-001 stream pass puts a FENCE before it), its word stored into a scratch tensor, and the
groups' words reduced again on the chip. SUM wraps modulo 2**32.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from workarounds import Mitigations

from .gemm import check_gemm_operands
from .tile.spec import get, run_spec

if TYPE_CHECKING:  # the protocol of the device surface a kernel uses
    from cosim.device import KernelDevice

__all__ = ["gemm_sum"]


async def gemm_sum(dev: KernelDevice, a: np.ndarray, b: np.ndarray, *, mitigations: Mitigations,
                   budget_cycles: int | None = None):
    """Returns ``(c, total, stats)`` with ``total`` = wrap-around int32 sum of ``c``."""
    a, b = check_gemm_operands(a, b)
    spec = get("gemm")
    p = spec.resolve({"m": a.shape[0], "n": b.shape[1], "k": a.shape[1], "epilogue": "sum"})
    out, stats = await run_spec(dev, spec, p, {"a": a, "b": b}, mitigations=mitigations, budget_cycles=budget_cycles)
    return out["c"], np.int32(out["total"][0, 0]), stats
