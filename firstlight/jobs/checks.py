"""Golden checks shared by every job and bring-up stage (one home, so they cannot drift)."""

from __future__ import annotations

import numpy as np

import golden

__all__ = ["first_mismatch", "describe_mismatch", "lowp_reference", "lowp_mismatch", "int8_operands"]


def first_mismatch(got: np.ndarray, ref: np.ndarray) -> dict | None:
    """None when equal; else the first differing index, both values and how many differ."""
    got, ref = np.asarray(got), np.asarray(ref)
    if got.shape != ref.shape:
        return {"index": [], "got": f"shape {got.shape}", "expected": f"shape {ref.shape}", "count": max(got.size, 1)}
    bad = np.argwhere(got != ref)
    if not len(bad):
        return None
    idx = tuple(int(i) for i in bad[0])
    out = {"index": list(idx), "got": int(got[idx]), "expected": int(ref[idx]), "count": int(len(bad))}
    if got.dtype == np.uint32 and ref.dtype == np.uint32:  # fp32 results compared as bit patterns
        out["fp32_bits"] = True
    return out


def describe_mismatch(m: dict) -> str:
    """``first_mismatch``'s record as a sentence: "481 differ; first at [0, 4]: got -28377,
    expected 5" (fp32 bit patterns in hex with their value)."""
    def value(v):
        if m.get("fp32_bits") and isinstance(v, int):
            return f"{v:#010x} ({float(np.uint32(v).view(np.float32))!r})"
        return str(v)

    where = f"first at [{', '.join(map(str, m['index']))}]" if m.get("index") else "the shapes differ"
    return f"{m['count']:,} differ; {where}: got {value(m['got'])}, expected {value(m['expected'])}"


def lowp_reference(result) -> np.ndarray:
    """What the golden says the chip must have produced for a :class:`kernels.lowp.LowpResult`:
    fp32 bits for the FP path (same codes, scales and K chunks), int32 for the int8 path."""
    if result.fp is not None:
        r = result.fp
        return golden.mx.mx_matmul_bits(r.a_codes, r.b_codes, r.a_scales, r.b_scales, r.fmt, chunks=r.chunks)
    r = result.int8
    return golden.gemm_int8(r.qa, r.qb)


def lowp_mismatch(result) -> dict | None:
    """The chip's raw output (fp32 bits or int32) against :func:`lowp_reference`."""
    got = result.fp.bits if result.fp is not None else result.int8.c_int
    return first_mismatch(got, lowp_reference(result))


def int8_operands(rng: np.random.Generator, shape, extremes: bool = False) -> np.ndarray:
    """Seeded int8 operands: uniform over the range, or only the extreme values."""
    if extremes:
        return rng.choice(np.array([-128, 127, -1, 0, 1], np.int8), size=shape)
    return rng.integers(-128, 128, size=shape, dtype=np.int8)
