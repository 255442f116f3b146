"""Accuracy metrics for comparing low-precision results against a reference.

* :func:`sqnr_db` -- signal-to-quantisation-noise ratio in dB (float64 math).
* :func:`ulp_distance` -- element-wise distance in units in the last place.
* :func:`max_abs_error` -- largest element-wise absolute difference.

All metrics compare arrays of *identical* shape (no broadcasting) and refuse
NaN inputs, because a NaN would silently poison the answer.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

__all__ = ["max_abs_error", "sqnr_db", "ulp_distance"]

_LOG10_2 = math.log10(2.0)

# IEEE binary formats supported by ulp_distance: itemsize -> same-width int.
_ULP_INT_VIEW: dict[int, type[np.signedinteger[Any]]] = {
    2: np.int16,  # float16
    4: np.int32,  # float32
    8: np.int64,  # float64
}
_INT64_MAX = np.iinfo(np.int64).max


def _first_index(mask: np.ndarray) -> tuple[int, ...]:
    """Index (as plain ints) of the first True element of ``mask``."""
    flat = int(np.flatnonzero(mask.reshape(-1))[0])
    return tuple(int(i) for i in np.unravel_index(flat, mask.shape))


def _as_float64(name: str, x: Any) -> np.ndarray:
    """Convert a real numeric array_like to float64 (exact for float16/32/64)."""
    arr = np.asarray(x)
    dt = arr.dtype
    if dt.kind == "b" or not (dt.kind in "iuf" or np.can_cast(dt, np.float64, "safe")):
        raise TypeError(
            f"{name} must be a real numeric array (float or integer dtypes, or a float type "
            f"that casts safely to float64), got dtype {dt}"
        )
    return arr.astype(np.float64)


def _check_pair(ref: Any, test: Any) -> tuple[np.ndarray, np.ndarray]:
    """Shared validation for sqnr_db / max_abs_error."""
    r = _as_float64("ref", ref)
    t = _as_float64("test", test)
    if r.shape != t.shape:
        raise ValueError(
            f"ref and test must have the same shape (no broadcasting), got {r.shape} and {t.shape}"
        )
    if r.size == 0:
        raise ValueError(f"ref and test must be non-empty, got shape {r.shape}")
    for name, arr in (("ref", r), ("test", t)):
        nan = np.isnan(arr)
        if nan.any():
            raise ValueError(f"{name} contains NaN at index {_first_index(nan)}")
        inf = np.isinf(arr)
        if inf.any():
            raise ValueError(
                f"{name} contains {arr[inf][0]} at index {_first_index(inf)}; "
                "only finite values are accepted"
            )
    return r, t


def _log10_sum_squares(x: np.ndarray) -> float:
    """``log10(sum(x**2))`` for a float64 array with at least one non-zero.

    The array is first scaled by an exact power of two so that its largest
    magnitude lies in [0.5, 1); this avoids float64 overflow (values above
    ~1e154) and underflow (values below ~1e-162) of the squares.
    """
    _, e = np.frexp(np.max(np.abs(x)))
    scaled = np.ldexp(x, -int(e))
    return math.log10(float(np.sum(scaled * scaled))) + 2 * int(e) * _LOG10_2


def sqnr_db(ref: Any, test: Any) -> float:
    """Signal-to-quantisation-noise ratio of ``test`` relative to ``ref``, in dB.

    ``10 * log10(sum(ref**2) / sum((ref - test)**2))``, evaluated in float64
    (inputs of narrower float types are converted exactly first).

    Parameters
    ----------
    ref : array_like
        Reference (signal). Real numeric, finite, not all zero.
    test : array_like
        Value under test, same shape as ``ref``. Real numeric, finite.

    Returns
    -------
    float
        SQNR in dB; ``math.inf`` when ``test`` equals ``ref`` exactly
        (``+0.0`` and ``-0.0`` compare equal). May be negative.

    Raises
    ------
    TypeError
        On non-real dtypes (bool, complex, str, object...).
    ValueError
        On shape mismatch, empty inputs, NaN or infinite values, when ``ref``
        is all zero (signal power 0: SQNR undefined), or when ``ref - test``
        overflows float64.

    Examples
    --------
    >>> round(sqnr_db([1.0, -2.0, 3.0], [1.01, -2.02, 3.03]), 6)
    40.0
    """
    r, t = _check_pair(ref, test)
    if not np.any(r):
        raise ValueError("ref is all zero: signal power is 0, so SQNR is undefined")
    with np.errstate(over="ignore"):  # reported below with the index
        d = r - t
    if not np.all(np.isfinite(d)):
        raise ValueError(
            f"ref - test overflows float64 at index {_first_index(~np.isfinite(d))}"
        )
    if not np.any(d):
        return math.inf
    # Power sums in the log domain so a tiny error next to a huge signal (or
    # vice versa) is not lost to float64 under/overflow.
    return 10.0 * (_log10_sum_squares(r) - _log10_sum_squares(d))


def max_abs_error(ref: Any, test: Any) -> float:
    """Largest element-wise absolute difference ``max(|ref - test|)``.

    Parameters
    ----------
    ref, test : array_like
        Real numeric, finite arrays of identical, non-empty shape. Computed in
        float64 (exact conversion for float16/32/64 inputs).

    Returns
    -------
    float
        The maximum absolute error (``0.0`` for identical inputs). May be
        ``inf`` if a difference of two finite float64 values overflows.

    Raises
    ------
    TypeError
        On non-real dtypes.
    ValueError
        On shape mismatch, empty inputs, NaN or infinite values.
    """
    r, t = _check_pair(ref, test)
    with np.errstate(over="ignore"):  # documented: may return inf
        return float(np.max(np.abs(r - t)))


def _check_ulp_operand(name: str, x: Any) -> np.ndarray:
    if not isinstance(x, (np.ndarray, np.floating)):
        raise TypeError(
            f"{name} must be a numpy float16, float32 or float64 array, got {type(x).__name__} "
            "(wrap Python floats with np.asarray(..., dtype=...) to pick the format)"
        )
    arr = np.asarray(x)
    if arr.dtype.kind != "f" or arr.dtype.itemsize not in _ULP_INT_VIEW:
        raise TypeError(
            f"{name} must be a float16, float32 or float64 array, got dtype {arr.dtype}"
        )
    return arr


def ulp_distance(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Element-wise distance between two float arrays in units in the last place.

    The bit pattern of each value is mapped to an *ordered integer*:
    non-negative floats keep their bit pattern, negative floats map to minus
    their magnitude bits. The mapping is monotonic in the float value,
    sends ``+0.0`` and ``-0.0`` both to 0, and the distance is
    ``|ord(a) - ord(b)|`` -- the number of representable values stepped over
    going from one to the other (so the two smallest subnormals of opposite
    sign are 2 apart, and the largest finite value is 1 away from ``inf``).

    Parameters
    ----------
    a, b : numpy.ndarray
        Arrays (or numpy float scalars) of the same dtype -- float16, float32
        or float64 -- and the same shape (no broadcasting). No NaNs.

    Returns
    -------
    numpy.ndarray
        int64 array with the shape of the inputs (0-d for scalar inputs).

    Raises
    ------
    TypeError
        If an input is not a numpy float16/float32/float64 array or scalar,
        or the dtypes differ.
    ValueError
        On shape mismatch, or if either input contains NaN (the message
        names the argument and the index).
    OverflowError
        float64 only: if a distance exceeds the int64 range (values of
        opposite sign near the extremes, e.g. ``-inf`` vs ``+inf``).
    """
    a = _check_ulp_operand("a", a)
    b = _check_ulp_operand("b", b)
    if a.dtype.kind != b.dtype.kind or a.dtype.itemsize != b.dtype.itemsize:
        raise TypeError(
            f"a and b must have the same dtype, got {a.dtype} and {b.dtype} "
            "(convert explicitly; precision matters for ULPs)"
        )
    if a.shape != b.shape:
        raise ValueError(
            f"a and b must have the same shape (no broadcasting), got {a.shape} and {b.shape}"
        )
    for name, arr in (("a", a), ("b", b)):
        nan = np.isnan(arr)
        if nan.any():
            raise ValueError(
                f"{name} contains NaN at index {_first_index(nan)}; "
                "ULP distance is undefined for NaN"
            )

    shape = a.shape
    ord_a = _ordered_int64(a)
    ord_b = _ordered_int64(b)
    # |ord_a - ord_b| may reach ~2**64 for float64, so subtract in uint64
    # (wrap-around is exact because the true distance is < 2**64), on 1-D
    # arrays to stay clear of numpy *scalar* overflow warnings.
    ua = ord_a.astype(np.uint64)
    ub = ord_b.astype(np.uint64)
    dist = np.where(ord_a >= ord_b, ua - ub, ub - ua)
    too_far = dist > np.uint64(_INT64_MAX)
    if too_far.any():
        i = int(np.flatnonzero(too_far)[0])
        idx = tuple(int(j) for j in np.unravel_index(i, shape))
        raise OverflowError(
            f"ULP distance at index {idx} is {int(dist[i])}, which exceeds the int64 range"
        )
    return dist.astype(np.int64).reshape(shape)


def _ordered_int64(x: np.ndarray) -> np.ndarray:
    """Flat int64 'ordered integer' view of a float16/32/64 array (no NaNs)."""
    native = x.astype(x.dtype.newbyteorder("="), copy=False).reshape(-1)
    bits = native.view(_ULP_INT_VIEW[native.dtype.itemsize]).astype(np.int64)
    magnitude = bits & ((1 << (8 * native.dtype.itemsize - 1)) - 1)  # clear the sign bit
    return np.where(bits < 0, -magnitude, magnitude)
