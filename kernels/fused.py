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

from rtl.isa import ReduceOp, dma_store, reduce
from workarounds import Mitigations, Unit

from .dma_stream import SEM
from .gemm import (
    GEMM_UNITS,
    check_gemm_operands,
    gemm_compulsory_bytes,
    new_host_counts,
    plan_for,
    prepare_operands,
    run_tile_groups,
)
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
    plan = plan_for(cfg, mitigations.gemm, m, n, k, acc_words=cfg.acc_depth - 1, board=dev.board)
    a_words, b_words = prepare_operands(a, b, cfg, plan)
    out = np.zeros((plan.tm * cfg.rows, plan.tn * cfg.cols), np.int32)
    host = new_host_counts()
    groups = plan.groups
    acc_wb = 4 * cfg.lanes

    def reduce_group(g, gi, gj, na, nb, led, bufs):
        """Queued right behind the group's last MATMULs: its SUM, and the store of that one word
        into the partials buffer (the next group's SUM waits until the store has read it)."""
        wait = led.stream_wait(SEM["AUX_FREE"]) if g else None
        cmds = [reduce(ReduceOp.SUM, src=0, count=na * nb * cfg.rows, dst=dst, wait=wait, signal=SEM["AUX"])]
        led.signal(SEM["AUX"])
        more = g + 1 < groups
        cmds.append(dma_store(sram=dst, dram=bufs.scratch.addr + g * acc_wb, words=1,
                              wait=led.queue_wait(SEM["AUX"]), signal=SEM["AUX_FREE"] if more else None))
        if more:
            led.signal(SEM["AUX_FREE"])
        return cmds

    extra = {"shape": [m, n, k], "useful_macs": m * n * k, "plan": plan.as_dict(), "host": host}
    async with Measure(dev, "gemm_sum", ideal_cycles(cfg, m * n * k), extra,
                       compulsory_bytes=gemm_compulsory_bytes(m, n, k) + 4) as meas:
        bufs = await run_tile_groups(dev, plan, a_words, b_words, out, constraints=mitigations.gemm, host=host,
                                     budget=budget_cycles, group_tail=reduce_group, scratch_bytes=groups * acc_wb)
        await dev.check_no_error()
        raw = dev.dram_read(bufs.scratch).view("<i4").reshape(groups, cfg.lanes)
        partials = [int(v) for v in raw[:, 0]]
    stats = meas.stats
    if len(partials) == 1:
        total = np.int32(partials[0])
    else:  # fold the group partials on the chip too
        total_arr, _ = await reduce_rows(dev, np.array([partials], np.int32), "sum", mitigations=mitigations,
                                         budget_cycles=budget_cycles)
        total = total_arr[0]
    stats.add_errata(mitigations.report((*GEMM_UNITS, Unit.REDUCE)))
    return out[:m, :n].copy(), total, stats
