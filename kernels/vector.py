"""Elementwise fp32 operations on the vector unit: ``elementwise(dev, op, a, b)`` -> fp32 array.

The matrix goes to DRAM (host memory) in the layout its broadcast needs, into the accumulator
SRAM by DMA, through VEC commands in place, and back by DMA (docs/kernels.md, "Elementwise"):

* ``broadcast="none"`` (``b`` has ``a``'s shape) and ``"row"`` (``b`` has one value per row):
  row-major words, a row of C values in ``ceil(C / LANES)`` words; one VEC over the whole
  chunk, or one VEC per row with the row's scalar (``VecB.SCALAR``);
* ``broadcast="col"`` (``b`` has one value per column, a bias): word-column-major, the R words
  of one word column consecutive; one VEC per word column with that column's word of ``b``
  (``VecB.LANE``).

Rows are padded to whole words with zeros (their results are dropped). A matrix larger than the
accumulator SRAM goes through in chunks of rows, one after the other.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from golden.vector import UNARY_OPS as UNARY
from golden.vector import BROADCASTS, INT_INPUT_OPS, INT_RESULT_OPS, VEC_OPS, row_words
from rtl.isa import MAX_COUNT, VecB, VecOp, vec
from workarounds import Mitigations, Unit

from .acc_pass import acc_pass
from .stats import KernelStats, Measure
from .validate import check_matrix, require_vector

if TYPE_CHECKING:
    from cosim.device import KernelDevice

__all__ = ["elementwise", "BROADCASTS", "UNARY"]

VECTOR_UNITS = (Unit.CMDPROC, Unit.DMA, Unit.VECTOR)  # the units an elementwise kernel's errata can live in


def _check(op: str, a, b, broadcast: str) -> tuple[np.ndarray, np.ndarray | None]:
    if op not in VEC_OPS:
        raise ValueError(f"op must be one of {', '.join(VEC_OPS)}, got {op!r}")
    if broadcast not in BROADCASTS:
        raise ValueError(f"broadcast must be one of {', '.join(BROADCASTS)}, got {broadcast!r}")
    ints = op in INT_INPUT_OPS  # the ops that read int32
    dtype = np.int32 if ints else np.float32
    a = check_matrix("a", a, (dtype,), "int32 values to convert" if ints else "fp32 values, shape (R, C)")
    rows, cols = a.shape
    if op in UNARY:
        if b is not None:
            raise ValueError(f"{op} takes no second operand; got b of shape {np.shape(b)}")
        if broadcast != "none":
            raise ValueError(f"{op} takes no second operand, so broadcast must be 'none', not {broadcast!r}")
        return a, None
    if b is None:
        raise ValueError(f"{op} needs a second operand b")
    b_dtype, b_what = {"iadd": (np.int32, "int32"), "requant": (np.uint32, "uint32 REQUANT parameter words "
                                                                          "(golden.vector.requant_params)")
                       }.get(op, (np.float32, "float32"))
    if not isinstance(b, np.ndarray) or b.dtype != b_dtype:
        raise TypeError(f"b of {op} must be a {b_what} numpy array, got {type(b).__name__} "
                        f"{getattr(b, 'dtype', '')}".rstrip())
    want = {"none": (rows, cols), "row": (rows,), "col": (cols,)}[broadcast]
    if b.shape != want and b.size == int(np.prod(want)) and b.ndim == 2 and broadcast != "none":
        b = b.reshape(want)  # (R, 1) / (1, C) are the same thing
    if b.shape != want:
        raise ValueError(f"with broadcast={broadcast!r}, b must have shape {want} for a of shape {a.shape}; "
                         f"got {b.shape}")
    return a, np.ascontiguousarray(b)


async def elementwise(dev: KernelDevice, op: str, a: np.ndarray, b: np.ndarray | None = None, *,
                      broadcast: str = "none", mitigations: Mitigations,
                      budget_cycles: int | None = None) -> tuple[np.ndarray, KernelStats]:
    """``op(a, b)`` elementwise on the vector unit; returns ``(result of a's shape, stats)``:
    fp32, or int32 for iadd and requant.

    ``op`` is one of golden.vector.VEC_OPS; ``b`` is ``a``'s shape (``broadcast="none"``), one
    value per row (``"row"``) or one per column (``"col"``); the unary ops (``i2f``, ``relu``, ``exp``) take no ``b``.
    The arithmetic is docs/numerics.md's ("The vector unit"); golden.vector.vector_op is its
    reference.
    """
    a, b = _check(op, a, b, broadcast)
    cfg = dev.config
    require_vector(cfg, f"elementwise {op}")
    lanes, depth = cfg.lanes, cfg.acc_depth
    rows, cols = a.shape
    aw = row_words(a, lanes, 0)  # (R, W, LANES)
    wpr = aw.shape[1]
    # words of b per chunk of n rows, and the rows a chunk may hold (a words + b words <= depth)
    b_words = {"none": lambda n: n * wpr, "row": lambda n: n, "col": lambda n: wpr}[broadcast] if b is not None \
        else (lambda n: 0)
    per_chunk = 0
    while per_chunk < rows and (per_chunk + 1) * wpr + b_words(per_chunk + 1) <= depth \
            and (per_chunk + 1) * wpr <= MAX_COUNT:
        per_chunk += 1
    if per_chunk == 0:
        raise ValueError(f"one row of {cols} values ({wpr} words) and its operand do not fit the accumulator "
                         f"SRAM ({depth} words)")
    out = np.zeros_like(aw)
    code = VecOp[op.upper()]
    host: dict = {}
    elems = rows * wpr * lanes
    b_bytes = 0 if b is None else 4 * b.size
    async with Measure(dev, "elementwise", rows * wpr, {"shape": [rows, cols], "op": op, "host": host},
                       compulsory_bytes=4 * a.size * 2 + b_bytes, useful_macs=0, vector_cycles=rows * wpr) as meas:
        for r0 in range(0, rows, per_chunk):
            n = min(per_chunk, rows - r0)
            chunk = aw[r0:r0 + n]  # (n, W, LANES)
            if broadcast == "col":
                a_layout = chunk.transpose(1, 0, 2)  # word-column-major: (W, n, LANES)
            else:
                a_layout = chunk
            words_a = np.ascontiguousarray(a_layout).reshape(-1, lanes)
            if b is None:
                words_b = np.zeros((0, lanes), np.uint32)
            elif broadcast == "none":
                words_b = row_words(b[r0:r0 + n], lanes, 0).reshape(-1, lanes)
            elif broadcast == "row":
                words_b = np.zeros((n, lanes), np.uint32)
                words_b[:, 0] = b[r0:r0 + n].view(np.uint32)
            else:
                words_b = row_words(b.reshape(1, -1), lanes, 0).reshape(-1, lanes)
            na = len(words_a)
            if b is None:  # a unary op: b is not read
                vecs = [dict(a=0, b=0, count=na, b_form=VecB.VECTOR)]
            elif broadcast == "none":
                vecs = [dict(a=0, b=na, count=na, b_form=VecB.VECTOR)]
            elif broadcast == "row":
                vecs = [dict(a=r * wpr, b=na + r, count=wpr, b_form=VecB.SCALAR) for r in range(n)]
            else:
                vecs = [dict(a=j * n, b=na + j, count=n, b_form=VecB.LANE) for j in range(wpr)]
            body = [vec(code, dst=v["a"], **v) for v in vecs]
            got = (await acc_pass(dev, np.concatenate([words_a, words_b]), body, na, host, budget_cycles)
                   ).reshape(a_layout.shape)
            out[r0:r0 + n] = got.transpose(1, 0, 2) if broadcast == "col" else got
        await dev.check_no_error()
    meas.stats.add_errata(mitigations.report(VECTOR_UNITS))
    meas.stats.notes.append(f"{elems} lanes computed ({rows * cols} useful)")
    result = out.reshape(rows, -1)[:, :cols].copy()
    return result.view(np.int32 if op in INT_RESULT_OPS else np.float32), meas.stats
