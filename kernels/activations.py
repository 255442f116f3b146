"""SiLU and GELU on the vector unit: ``activation(dev, x, kind)`` -> fp32 (R, C).

No special command: each is a short fixed sequence of VECs (golden/activations.py gives the
order), run in place on chunks of rows in the accumulator SRAM. Per chunk of n words: x at word
0, the running term t at word n, the scalar constants (lane 0) after it; one DMA in, the VECs,
one DMA out of the x region (kernels/acc_pass.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from golden.activations import ACTIVATION_CONSTANTS, ACTIVATIONS
from golden.vector import row_words
from rtl.isa import MAX_COUNT, VecB, VecOp, vec
from workarounds import Mitigations, Unit

from .acc_pass import acc_pass, chunked_busy_cycles
from .stats import KernelStats, Measure
from .validate import check_matrix, require_vector

if TYPE_CHECKING:
    from cosim.device import KernelDevice

__all__ = ["activation", "activation_stream", "ACTIVATIONS"]

ACT_UNITS = (Unit.CMDPROC, Unit.DMA, Unit.VECTOR)
_CONST = list(ACTIVATION_CONSTANTS)  # the constants' order after t


def activation_stream(kind: str, n: int) -> list[int]:
    """The VECs of one chunk of ``n`` words (x at 0, t at n, constants at 2n)."""
    x, t = 0, n

    def c(name: str) -> dict:
        return {"b": 2 * n + _CONST.index(name), "b_form": VecB.SCALAR}

    out = []
    if kind == "silu":
        out.append(vec(VecOp.FMUL, a=x, count=n, dst=t, **c("minus_one")))
    else:
        out += [vec(VecOp.FMUL, a=x, b=x, count=n, dst=t), vec(VecOp.FMUL, a=t, b=x, count=n, dst=t),
                vec(VecOp.FMUL, a=t, count=n, dst=t, **c("gelu_cubic")), vec(VecOp.FADD, a=t, b=x, count=n, dst=t),
                vec(VecOp.FMUL, a=t, count=n, dst=t, **c("gelu_k"))]
    out += [vec(VecOp.EXP, a=t, count=n, dst=t), vec(VecOp.FADD, a=t, count=n, dst=t, **c("one")),
            vec(VecOp.RECIP, a=t, count=n, dst=t), vec(VecOp.FMUL, a=x, b=t, count=n, dst=x)]
    return out


async def activation(dev: KernelDevice, x: np.ndarray, kind: str, *, mitigations: Mitigations,
                     budget_cycles: int | None = None) -> tuple[np.ndarray, KernelStats]:
    """SiLU (``kind="silu"``) or GELU (tanh form, ``"gelu"``) of every element; fp32 (R, C)."""
    if kind not in ACTIVATIONS:
        raise ValueError(f"kind must be one of {', '.join(ACTIVATIONS)}, got {kind!r}")
    x = check_matrix("x", x, (np.float32,), "fp32 values, shape (R, C)")
    cfg = dev.config
    require_vector(cfg, kind)
    lanes, depth = cfg.lanes, cfg.acc_depth
    rows, cols = x.shape
    xw = row_words(x, lanes, 0)
    wpr = xw.shape[1]
    per_chunk = min(rows, (depth - len(_CONST)) // (2 * wpr), MAX_COUNT // wpr)
    if per_chunk == 0:
        raise ValueError(f"one row of {cols} values ({wpr} words) and its term do not fit the accumulator "
                         f"SRAM ({depth} words)")
    consts = np.zeros((len(_CONST), lanes), np.uint32)
    consts[:, 0] = np.array([ACTIVATION_CONSTANTS[k] for k in _CONST], np.float32).view(np.uint32)
    busy = chunked_busy_cycles(cfg, rows, per_chunk, lambda n: activation_stream(kind, n * wpr))
    out = np.zeros_like(xw)
    host: dict = {}
    async with Measure(dev, kind, rows * wpr, {"shape": [rows, cols], "host": host},
                       compulsory_bytes=8 * rows * cols, useful_macs=0, vector_cycles=busy) as meas:
        for r0 in range(0, rows, per_chunk):
            nr = min(per_chunk, rows - r0)
            n = nr * wpr
            words = np.concatenate([xw[r0:r0 + nr].reshape(-1, lanes), np.zeros((n, lanes), np.uint32), consts])
            got = await acc_pass(dev, words, activation_stream(kind, n), n, host, budget_cycles)
            out[r0:r0 + nr] = got.reshape(nr, wpr, lanes)
        await dev.check_no_error()
    meas.stats.add_errata(mitigations.report(ACT_UNITS))
    return out.reshape(rows, -1)[:, :cols].copy().view(np.float32), meas.stats
