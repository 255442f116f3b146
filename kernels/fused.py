"""Fused GEMM + reduction: ``gemm_sum(dev, a, b)`` -> (C, sum of every element of C).

A global sum of a GEMM's output (a checksum, the numerator of a mean, a loss) is reduced on the
chip right behind the MATMULs that produce it: each tile group's MATMUL stream is followed in
the same submission by a REDUCE over the group's accumulator words. That REDUCE must not start
before the engine has written its last rows (the FENCE the FL-CP-001 pass inserts on B0).
The per-group partial words are then reduced again on the chip. SUM wraps modulo 2**32.
"""

from __future__ import annotations

import numpy as np

import workarounds
from rtl.csr_map import MemRegion
from rtl.isa import Opcode, ReduceOp, pack_command

from .gemm import check_gemm_operands, plan_for_device, prepare_operands, queue_group, read_group
from .layout import words_to_int32
from .reduce import reduce_rows
from .roofline import ideal_cycles
from .stats import Measure

__all__ = ["gemm_sum"]


async def gemm_sum(dev, a: np.ndarray, b: np.ndarray, *, budget_cycles: int | None = None):
    """Returns ``(c, total, stats)`` with ``total`` = wrap-around int32 sum of ``c``."""
    a, b = check_gemm_operands(a, b)
    cfg = dev.config
    m, k = a.shape
    n = b.shape[1]
    # One accumulator word per group is kept for the group's partial sum.
    plan = plan_for_device(dev, m, n, k, acc_words=cfg.acc_depth - 1)
    a_words, b_words = prepare_operands(a, b, cfg, plan)
    out = np.zeros((plan.tm * cfg.rows, plan.tn * cfg.cols), np.int32)
    host = {"words_loaded": 0, "commands": 0, "waits": 0}
    partials = []
    extra = {"shape": [m, n, k], "useful_macs": m * n * k, "plan": plan.as_dict(), "host": host}
    async with Measure(dev, "gemm_sum", ideal_cycles(cfg, m * n * k), extra) as meas:
        for gi in range(0, plan.tm, plan.ga):
            for gj in range(0, plan.tn, plan.gb):
                na, nb = await queue_group(dev, plan, a_words, b_words, gi, gj, host, budget_cycles)
                words = na * nb * cfg.rows
                dst = cfg.acc_depth - 1
                # queued behind the MATMULs, no wait in between: the chip orders them
                await dev.submit([pack_command(Opcode.REDUCE, flags=ReduceOp.SUM, length=words, arg0=0, arg2=dst)],
                                 budget_cycles)
                host["commands"] += 1
                await dev.wait_idle(budget_cycles)
                host["waits"] += 1
                read_group(dev, out, gi, gj, na, nb)
                partials.append(int(words_to_int32(dev.read_words(MemRegion.ACC, dst, 1), cfg.lanes)[0, 0]))
        await dev.check_no_error()
    stats = meas.stats
    if len(partials) == 1:
        total = np.int32(partials[0])
    else:  # fold the group partials on the chip too
        total_arr, _ = await reduce_rows(dev, np.array([partials], np.int32), "sum", budget_cycles=budget_cycles)
        total = total_arr[0]
    stats.update(workarounds.kernel_report(dev, ("engine", "sram", "reduce", "cmdproc")))
    return out[:m, :n].copy(), total, stats
