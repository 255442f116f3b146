"""Golden models for the int8 x int8 -> int32 GEMM unit.

Hardware semantics (from the spec)
----------------------------------
* Each product ``a[m, k] * b[k, n]`` of two int8 values is formed exactly
  (it lies in ``[-16256, 16384]`` and fits in int16).
* Products are accumulated into a 32-bit two's-complement accumulator that
  **wraps around** on overflow (mod 2**32, read as signed int32).
* Wrap-around addition is associative and commutative mod 2**32, so the
  accumulation order does not matter: the result is simply the exact integer
  dot product reduced mod 2**32.

The golden therefore computes the exact dot product in int64 and wraps once.
|product| <= 2**14, so the int64 sum is exact for any K < 2**49 -- far beyond
anything that fits in memory.

numpy traps this module avoids
------------------------------
* ``int8 @ int8`` returns **int8** and wraps every element mod 2**8: wrong.
* ``int32_array.sum()`` silently *widens* to int64 (no wrap at all), while
  ``int32 @ int32`` stays int32 and relies on C signed overflow, which is not
  a guaranteed semantic. Neither is used: we widen explicitly to int64 and
  wrap explicitly with :func:`golden.reduce.wrap_int32`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .reduce import wrap_int32

__all__ = ["gemm_int8", "gemm_int8_accumulate"]


def _check_matrix(name: str, x: Any, dtype_name: str, itemsize: int, dims: str) -> np.ndarray:
    """Validate one operand: ndarray, exact integer dtype, 2-D, no empty dims."""
    if not isinstance(x, np.ndarray):
        raise TypeError(f"{name} must be an {dtype_name} numpy.ndarray, got {type(x).__name__}")
    # Compare kind + itemsize so that a non-native byte order of the same
    # type is still accepted; anything else (int16, uint8, float32, bool...)
    # is rejected rather than silently cast.
    if x.dtype.kind != "i" or x.dtype.itemsize != itemsize:
        raise TypeError(f"{name} must be an {dtype_name} array, got dtype {x.dtype}")
    if x.ndim != 2:
        raise ValueError(f"{name} must be 2-D {dims}, got shape {x.shape} ({x.ndim}-D)")
    if 0 in x.shape:
        raise ValueError(
            f"{name} must have no empty dimensions (all of {dims} >= 1), got shape {x.shape}"
        )
    return np.asarray(x)  # drop ndarray subclasses (e.g. np.matrix semantics)


def _check_gemm_operands(a: Any, b: Any) -> tuple[np.ndarray, np.ndarray]:
    a = _check_matrix("a", a, "int8", 1, "(M, K)")
    b = _check_matrix("b", b, "int8", 1, "(K, N)")
    if a.shape[1] != b.shape[0]:
        raise ValueError(
            f"inner dimensions must match: a has shape {a.shape} (K={a.shape[1]}) but b has "
            f"shape {b.shape} (K={b.shape[0]}); a.shape[1] == b.shape[0] is required"
        )
    return a, b


def _exact_product(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Exact (unwrapped) int64 matrix product of two validated int8 matrices."""
    return a.astype(np.int64) @ b.astype(np.int64)


def gemm_int8(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """int8 x int8 matrix product with a wrapping 32-bit accumulator.

    Parameters
    ----------
    a : numpy.ndarray
        int8 array of shape ``(M, K)``, ``M, K >= 1``.
    b : numpy.ndarray
        int8 array of shape ``(K, N)``, ``N >= 1``.

    Returns
    -------
    numpy.ndarray
        New int32 array of shape ``(M, N)``: ``sum_k a[m,k]*b[k,n]`` reduced
        mod 2**32 and interpreted as two's-complement signed.

    Raises
    ------
    TypeError
        If ``a`` or ``b`` is not an ndarray of dtype int8.
    ValueError
        If an operand is not 2-D, has an empty dimension, or the inner
        dimensions differ.

    Examples
    --------
    >>> import numpy as np
    >>> k = 131072  # 131072 * (-128 * -128) == 2**31 overflows int32
    >>> gemm_int8(np.full((1, k), -128, np.int8), np.full((k, 1), -128, np.int8))
    array([[-2147483648]], dtype=int32)
    """
    a, b = _check_gemm_operands(a, b)
    return wrap_int32(_exact_product(a, b))


def gemm_int8_accumulate(c0: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Add an int8 GEMM into an existing int32 accumulator, with wrap-around.

    Computes ``wrap32(c0 + a @ b)``, i.e. the hardware continuing to
    accumulate into a non-zero 32-bit accumulator.

    Parameters
    ----------
    c0 : numpy.ndarray
        int32 array of shape ``(M, N)``: the initial accumulator contents.
    a : numpy.ndarray
        int8 array of shape ``(M, K)``.
    b : numpy.ndarray
        int8 array of shape ``(K, N)``.

    Returns
    -------
    numpy.ndarray
        New int32 array of shape ``(M, N)``. ``c0`` is not modified.

    Raises
    ------
    TypeError
        If ``c0`` is not an int32 ndarray or ``a``/``b`` are not int8 ndarrays.
    ValueError
        On non-2-D operands, empty dimensions, mismatched inner dimensions,
        or ``c0.shape != (M, N)``.
    """
    a, b = _check_gemm_operands(a, b)
    c0 = _check_matrix("c0", c0, "int32", 4, "(M, N)")
    expected = (a.shape[0], b.shape[1])
    if c0.shape != expected:
        raise ValueError(
            f"c0 must have shape (M, N) = {expected} to match a {a.shape} @ b {b.shape}, "
            f"got shape {c0.shape}"
        )
    # Wrapping the product first keeps both terms inside int32, so their
    # int64 sum can never overflow; (x mod 2**32 + y) mod 2**32 is unchanged.
    return wrap_int32(c0.astype(np.int64) + wrap_int32(_exact_product(a, b)).astype(np.int64))
