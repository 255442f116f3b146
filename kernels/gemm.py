"""int8 GEMM on the systolic engine: ``gemm(dev, a, b)`` -> C (int32, wrapping) = A (int8, MxK) @
B (int8, KxN), or with an :class:`~kernels.epilogue.Epilogue` (bias, per-channel requantization,
optional ReLU on the vector unit before each store) int8. The device entry point of the
tile-language GEMM (kernels/tiled/gemm.py): the compiler places the tiles, double-buffers the
operand loads, finds the semaphores and applies the revision's errata passes
(kernels/tile/errata.py); the tiling is the planner's (kernels/gemm_plan.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from workarounds import Mitigations, Unit

from .epilogue import Epilogue
from .gemm_plan import GemmPlan
from .stats import KernelStats
from .tile.spec import get, run_spec
from .validate import check_matrix

if TYPE_CHECKING:  # the protocol of the device surface a kernel uses
    from cosim.device import KernelDevice

__all__ = ["gemm", "check_gemm_operands", "gemm_compulsory_bytes", "GEMM_UNITS"]

GEMM_UNITS = (Unit.ENGINE, Unit.SRAM, Unit.CMDPROC, Unit.DMA)  # the units a GEMM's errata can live in (operands arrive by DMA)


def check_gemm_operands(a, b):
    a = check_matrix("a", a, (np.int8,), "int8 activations, shape (M, K)")
    b = check_matrix("b", b, (np.int8,), "int8 weights, shape (K, N)")
    if a.shape[1] != b.shape[0]:
        raise ValueError(f"inner dimensions differ: a is {a.shape}, b is {b.shape}; need a (M, K) and b (K, N)")
    return a, b


def gemm_compulsory_bytes(m: int, n: int, k: int, operand_bytes: int = 1, result_bytes: int = 4) -> int:
    """Each operand read once, each result written once."""
    return (m * k + k * n) * operand_bytes + m * n * result_bytes


async def gemm(dev: KernelDevice, a: np.ndarray, b: np.ndarray, *, mitigations: Mitigations, k_chunk: int | None = None,
               budget_cycles: int | None = None, double_buffer: bool = True,
               epilogue: Epilogue | None = None) -> tuple[np.ndarray, KernelStats]:
    """Run ``a @ b`` on the chip. Returns ``(c, stats)``; c is int32 with wrap-around, or with an
    ``epilogue`` int8.

    The operands go into DRAM (host memory) and reach the chip only by DMA; C comes back by DMA.
    ``mitigations`` comes from ``workarounds.attach(dev, policy)``; ``k_chunk`` caps the K steps
    per MATMUL (default: as many as one operand buffer holds); ``double_buffer=False`` gives the
    operands one buffer, so loads and MATMULs take turns (to measure what the overlap is worth).
    ``stats.plan`` is the tiling as a :class:`~kernels.gemm_plan.GemmPlan` (the bring-up
    performance stage judges the cycles against its schedule model).
    """
    a, b = check_gemm_operands(a, b)
    cfg = dev.config
    m, k = a.shape
    n = b.shape[1]
    if k_chunk is not None and (not isinstance(k_chunk, (int, np.integer)) or k_chunk < 1):
        raise ValueError(f"k_chunk must be a positive integer, got {k_chunk!r}")
    inputs = {"a": a, "b": b}
    kind = "none"
    if epilogue is not None:  # no vector unit, or N too wide for its words: the declaration refuses (_requires)
        if not isinstance(epilogue, Epilogue):
            raise TypeError(f"epilogue must be a kernels.epilogue.Epilogue, got {type(epilogue).__name__}")
        if len(epilogue.bias) != n:
            raise ValueError(f"the epilogue has {len(epilogue.bias)} columns and b has {n}")
        inputs.update(epilogue.tensors())
        kind = "relu" if epilogue.relu else "requant"
    spec = get("gemm")
    p = spec.resolve({"m": m, "n": n, "k": k, "kc": int(k_chunk or 0), "epilogue": kind,
                      "stages": 2 if double_buffer else 1})
    out, stats = await run_spec(dev, spec, p, inputs, mitigations=mitigations, budget_cycles=budget_cycles)
    args = stats.plan
    cons = mitigations.gemm
    stale = cons is not None and cons.repeat_first_a_word
    plan = GemmPlan(m, n, k, -(-m // cfg.rows), -(-n // cfg.cols), args["ga"], args["gb"], args["kc"],
                    nbuf=args.get("stages", 2), row_gap="spacer" if stale else "")
    stats.plan, stats.predicted_cycles = plan.as_dict(), plan.predicted_cycles(cfg)
    stats.double_buffer = plan.nbuf == 2
    stats.epilogue = {"none": None, "requant": "requant", "relu": "requant+relu"}[kind]
    c = out["c"]
    if epilogue is not None:
        outside = int(((c < -128) | (c > 127)).sum())
        if outside:  # REQUANT writes sign-extended int8: anything else is a chip fault, kept visible
            stats.notes.append(f"{outside} results outside int8 (words the store read before the epilogue "
                               "requantized them?): returned as int32 so that no check can miss them")
            return c, stats
        return c.astype(np.int8), stats
    return c, stats
