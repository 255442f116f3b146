"""The GEMM epilogue as the chip computes it (kernels/epilogue.py, docs/numerics.md
"Requantization"), and its float64 reference.

``out[m, n] = requant(wrap32(acc[m, n] + bias[n]), requant_params(scale[n], relu))`` with
``acc = a @ b`` in int32 (golden.int_gemm.gemm_int8): the bias added with wrap-around, then one
rounding, half away from zero, of the exact product with the 24-bit multiplier.
"""

from __future__ import annotations

import numpy as np

from .int_gemm import gemm_int8
from .vector import requant, requant_params

__all__ = ["gemm_epilogue", "gemm_epilogue_words", "gemm_epilogue_reference", "calibrate_scales"]


def gemm_epilogue(a: np.ndarray, b: np.ndarray, bias: np.ndarray, scale: np.ndarray, relu: bool = False) -> np.ndarray:
    """int8 (M, N): the chip's result, bit for bit."""
    return gemm_epilogue_words(a, b, bias, requant_params(np.asarray(scale, np.float64), relu)).astype(np.int8)


def gemm_epilogue_words(a: np.ndarray, b: np.ndarray, bias: np.ndarray, params: np.ndarray) -> np.ndarray:
    """int32 (M, N) holding the int8 results (as the store moves them), from the REQUANT
    parameter words themselves (``params``: uint32 (N,), golden.vector.requant_params)."""
    acc = gemm_int8(a, b)
    summed = (acc.astype(np.int64) + np.asarray(bias, np.int64)[None, :]).astype(np.uint32).view(np.int32)  # wrap32
    return requant(summed, np.asarray(params, np.uint32)[None, :]).astype(np.int32)


def gemm_epilogue_reference(a: np.ndarray, b: np.ndarray, bias: np.ndarray, scale: np.ndarray,
                            relu: bool = False) -> np.ndarray:
    """float64 (M, N): (a @ b + bias) * scale, ReLU'd, without rounding or clamping."""
    y = (a.astype(np.float64) @ b.astype(np.float64) + np.asarray(bias, np.float64)) * np.asarray(scale, np.float64)
    return np.maximum(y, 0.0) if relu else y


def calibrate_scales(a: np.ndarray, b: np.ndarray, bias: np.ndarray) -> np.ndarray:
    """Per-output-channel scales that map each column's largest |a @ b + bias| to 127 (a
    calibration on the data itself, as a post-training quantization flow does on sample data);
    a column of zeros gets scale 1."""
    y = np.abs(a.astype(np.float64) @ b.astype(np.float64) + np.asarray(bias, np.float64)).max(axis=0)
    return np.where(y > 0, 127.0 / np.where(y > 0, y, 1.0), 1.0)
