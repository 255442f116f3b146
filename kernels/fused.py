"""Fused GEMM + reduction: ``gemm_sum(dev, a, b)`` -> (C, sum of every element of C).

A global sum of a GEMM's output (a checksum, the numerator of a mean, a loss) is reduced on the
chip right behind the MATMULs that produce it: each tile group's MATMUL stream is followed in
the same submission by a REDUCE over the group's accumulator words. That REDUCE must not start
before the engine has written its last rows (the FENCE the FL-CP-001 pass inserts on B0).
The per-group partial words are then reduced again on the chip. SUM wraps modulo 2**32.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from rtl.isa import ReduceOp, reduce
from rtl.memories import Region
from workarounds import Mitigations, Unit

from .gemm import (
    GEMM_UNITS,
    check_gemm_operands,
    new_host_counts,
    plan_for,
    prepare_operands,
    run_tile_groups,
)
from .layout import words_to_int32
from .reduce import reduce_rows
from .roofline import ideal_cycles
from .stats import Measure

if TYPE_CHECKING:  # the protocol of the device surface a kernel uses
    from cosim.device import KernelDevice

__all__ = ["gemm_sum"]


async def gemm_sum(dev: KernelDevice, a: np.ndarray, b: np.ndarray, *, mitigations: Mitigations, budget_cycles: int | None = None):
    """Returns ``(c, total, stats)`` with ``total`` = wrap-around int32 sum of ``c``."""
    a, b = check_gemm_operands(a, b)
    cfg = dev.config
    m, k = a.shape
    n = b.shape[1]
    # One accumulator word per group is kept for the group's partial sum.
    dst = cfg.acc_depth - 1
    plan = plan_for(cfg, mitigations.gemm, m, n, k, acc_words=cfg.acc_depth - 1)
    a_words, b_words = prepare_operands(a, b, cfg, plan)
    out = np.zeros((plan.tm * cfg.rows, plan.tn * cfg.cols), np.int32)
    host = new_host_counts()
    partials = []

    async def reduce_group(gi, gj, na, nb):  # queued behind the MATMULs, no wait in between
        await dev.submit([reduce(ReduceOp.SUM, src=0, count=na * nb * cfg.rows, dst=dst)], budget_cycles)
        host["commands"] += 1

    async def read_partial(gi, gj, na, nb):
        partials.append(int(words_to_int32(dev.read_words(Region.ACC, dst, 1), cfg.lanes)[0, 0]))

    extra = {"shape": [m, n, k], "useful_macs": m * n * k, "plan": plan.as_dict(), "host": host}
    async with Measure(dev, "gemm_sum", ideal_cycles(cfg, m * n * k), extra) as meas:
        await run_tile_groups(dev, plan, a_words, b_words, out, constraints=mitigations.gemm, host=host,
                              budget=budget_cycles, after_queue=reduce_group, after_read=read_partial)
        await dev.check_no_error()
    stats = meas.stats
    if len(partials) == 1:
        total = np.int32(partials[0])
    else:  # fold the group partials on the chip too
        total_arr, _ = await reduce_rows(dev, np.array([partials], np.int32), "sum", mitigations=mitigations,
                                         budget_cycles=budget_cycles)
        total = total_arr[0]
    stats.add_errata(mitigations.report((*GEMM_UNITS, Unit.REDUCE)))
    return out[:m, :n].copy(), total, stats
