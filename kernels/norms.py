"""LayerNorm and RMSNorm over rows on the reduction and vector units.

``layer_norm(dev, x, gamma, beta, eps)`` and ``rms_norm(dev, x, gamma, eps)`` -> fp32 (R, C).
The sequence of operations, and why LayerNorm takes two passes, is golden/norms.py's (which is
the same sequence in numpy). Per chunk of rows, ACC holds (from word 0): the rows (row-major,
zero-padded), their squares, one word per row for the sums (then means) and one for the sums
of squares (then variances, then reciprocal square roots), and the constants the host prepares:
1/C and eps (lane 0), the last word's lane mask, gamma and beta (one row of words each). One DMA
brings all of it in, one takes the rows out (kernels/acc_pass.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from golden.norms import inv_count, lane_mask
from golden.vector import row_words
from golden.vector import bits
from rtl.isa import MAX_COUNT, ReduceOp, VecB, VecOp, reduce, vec
from workarounds import Mitigations, Unit

from .acc_pass import acc_pass, chunked_busy_cycles
from .stats import KernelStats, Measure
from .validate import check_matrix, require_vector

if TYPE_CHECKING:
    from cosim.device import KernelDevice

__all__ = ["layer_norm", "rms_norm", "norm_stream"]

NORM_UNITS = (Unit.REDUCE, Unit.CMDPROC, Unit.DMA, Unit.VECTOR)


def _layout(n: int, wpr: int) -> dict[str, int]:
    """ACC word of each region for a chunk of ``n`` rows of ``wpr`` words."""
    x = 0
    sq = n * wpr
    sums = 2 * n * wpr
    sqs = sums + n
    inv = sqs + n
    return {"x": x, "sq": sq, "sums": sums, "sqs": sqs, "inv": inv, "eps": inv + 1, "mask": inv + 2,
            "gamma": inv + 3, "beta": inv + 3 + wpr, "end": inv + 3 + 2 * wpr}


def norm_stream(kind: str, n: int, wpr: int, masked: bool) -> list[int]:
    """The commands of one chunk (``kind`` "layer" or "rms"); ``masked``: the rows' last word has
    padding lanes, which the LayerNorm deviations must not count."""
    L = _layout(n, wpr)
    words = n * wpr
    out = []
    rows = range(n)
    if kind == "layer":
        out += [reduce(ReduceOp.FSUM, src=L["x"] + r * wpr, count=wpr, dst=L["sums"] + r) for r in rows]
        out.append(vec(VecOp.FMUL, a=L["sums"], b=L["inv"], b_form=VecB.SCALAR, count=n, dst=L["sums"]))
        out += [vec(VecOp.FSUB, a=r * wpr, b=L["sums"] + r, b_form=VecB.SCALAR, count=wpr, dst=r * wpr) for r in rows]
        if masked:
            last = [r * wpr + wpr - 1 for r in rows]
            out += [vec(VecOp.FMUL, a=w, b=L["mask"], b_form=VecB.LANE, count=1, dst=w) for w in last]
    out.append(vec(VecOp.FMUL, a=L["x"], b=L["x"], count=words, dst=L["sq"]))
    out += [reduce(ReduceOp.FSUM, src=L["sq"] + r * wpr, count=wpr, dst=L["sqs"] + r) for r in rows]
    out.append(vec(VecOp.FMUL, a=L["sqs"], b=L["inv"], b_form=VecB.SCALAR, count=n, dst=L["sqs"]))
    out.append(vec(VecOp.FADD, a=L["sqs"], b=L["eps"], b_form=VecB.SCALAR, count=n, dst=L["sqs"]))
    out.append(vec(VecOp.RSQRT, a=L["sqs"], count=n, dst=L["sqs"]))
    out += [vec(VecOp.FMUL, a=r * wpr, b=L["sqs"] + r, b_form=VecB.SCALAR, count=wpr, dst=r * wpr) for r in rows]
    out += [vec(VecOp.FMUL, a=r * wpr, b=L["gamma"], count=wpr, dst=r * wpr) for r in rows]
    if kind == "layer":
        out += [vec(VecOp.FADD, a=r * wpr, b=L["beta"], count=wpr, dst=r * wpr) for r in rows]
    return out


def _check_vec(name: str, v, cols: int) -> np.ndarray:
    if not isinstance(v, np.ndarray) or v.dtype != np.float32:
        raise TypeError(f"{name} must be a float32 numpy array of {cols} values (one per column), "
                        f"not {type(v).__name__} {getattr(v, 'dtype', '')}".rstrip())
    if v.shape != (cols,):
        raise ValueError(f"{name} must have shape ({cols},), one value per column of x; got {v.shape}")
    return np.ascontiguousarray(v)


async def _norm(dev, kind: str, x, gamma, beta, eps: float, mitigations: Mitigations,
                budget_cycles: int | None) -> tuple[np.ndarray, KernelStats]:
    x = check_matrix("x", x, (np.float32,), "fp32 rows to normalise, shape (R, C)")
    rows, cols = x.shape
    gamma = _check_vec("gamma", gamma, cols)
    beta = _check_vec("beta", beta, cols) if kind == "layer" else None
    if not isinstance(eps, (int, float)) or not np.isfinite(eps) or eps < 0:
        raise ValueError(f"eps must be a finite number >= 0, not {eps!r}")
    cfg = dev.config
    require_vector(cfg, f"{kind}_norm")
    lanes, depth = cfg.lanes, cfg.acc_depth
    wpr = -(-cols // lanes)
    per_chunk = min(rows, (depth - 3 - 2 * wpr) // (2 * wpr + 2), MAX_COUNT // (2 * wpr))
    if per_chunk < 1:
        raise ValueError(f"a row of {cols} values ({wpr} words), its squares, gamma, beta and four scratch words "
                         f"do not fit the accumulator SRAM ({depth} words)")
    xw = row_words(x, lanes, 0)
    consts = np.zeros((3 + 2 * wpr, lanes), np.uint32)
    consts[0, 0] = inv_count(cols)
    consts[1, 0] = int(bits(np.float32(eps))[0])
    consts[2] = lane_mask(cols, lanes)
    consts[3:3 + wpr] = row_words(gamma.reshape(1, -1), lanes, 0)[0]
    if beta is not None:
        consts[3 + wpr:] = row_words(beta.reshape(1, -1), lanes, 0)[0]
    masked = cols % lanes != 0
    out = np.zeros_like(xw)
    host: dict = {}
    busy = chunked_busy_cycles(cfg, rows, per_chunk, lambda n: norm_stream(kind, n, wpr, masked))
    param_bytes = 4 * cols * (2 if beta is not None else 1)
    async with Measure(dev, f"{kind}_norm", rows * wpr, {"shape": [rows, cols], "host": host},
                       compulsory_bytes=8 * rows * cols + param_bytes, useful_macs=0, vector_cycles=busy) as meas:
        for r0 in range(0, rows, per_chunk):
            n = min(per_chunk, rows - r0)
            L = _layout(n, wpr)
            words = np.zeros((L["end"], lanes), np.uint32)
            words[:n * wpr] = xw[r0:r0 + n].reshape(-1, lanes)
            words[L["inv"]:] = consts
            got = await acc_pass(dev, words, norm_stream(kind, n, wpr, masked), n * wpr, host, budget_cycles)
            out[r0:r0 + n] = got.reshape(n, wpr, lanes)
        await dev.check_no_error()
    meas.stats.add_errata(mitigations.report(NORM_UNITS))
    return out.reshape(rows, -1)[:, :cols].copy().view(np.float32), meas.stats


async def layer_norm(dev: KernelDevice, x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, eps: float = 1e-5, *,
                     mitigations: Mitigations, budget_cycles: int | None = None) -> tuple[np.ndarray, KernelStats]:
    """LayerNorm of every row: ``(x - mean) / sqrt(var + eps) * gamma + beta`` (population
    variance, two passes), in golden/norms.py's order of operations."""
    return await _norm(dev, "layer", x, gamma, beta, eps, mitigations, budget_cycles)


async def rms_norm(dev: KernelDevice, x: np.ndarray, gamma: np.ndarray, eps: float = 1e-6, *,
                   mitigations: Mitigations, budget_cycles: int | None = None) -> tuple[np.ndarray, KernelStats]:
    """RMSNorm of every row: ``x / sqrt(mean(x**2) + eps) * gamma``."""
    return await _norm(dev, "rms", x, gamma, None, eps, mitigations, budget_cycles)
