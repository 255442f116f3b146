"""Golden models for row reductions and the int32 two's-complement wrap.

The hardware reduction unit works on an int32 ``(R, C)`` tile and produces one
int32 value per row:

* ``"sum"`` accumulates in a 32-bit two's-complement register that **wraps**
  on overflow (the result is the exact sum reduced mod 2**32, read as signed);
* ``"max"`` / ``"min"`` are the plain per-row extrema (they cannot overflow).

:func:`wrap_int32` is the single definition of "wrap to int32" used by every
golden in this package.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["REDUCE_OPS", "reduce_rows", "wrap_int32"]

#: The reduction operators the hardware supports, in documentation order.
REDUCE_OPS: tuple[str, ...] = ("sum", "max", "min")

_MASK32 = 0xFFFFFFFF
_HALF32 = 1 << 31
_MOD32 = 1 << 32


def _wrap_pyint(v: int) -> int:
    """Wrap one Python int to the signed 32-bit range (exact, any size)."""
    return ((v + _HALF32) % _MOD32) - _HALF32


def _is_int_scalar(v: Any) -> bool:
    # bool is a subclass of int (and np.bool_ is not an np.integer); booleans
    # are rejected on purpose: wrapping a truth value is almost surely a bug.
    return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))


def wrap_int32(x: Any) -> np.ndarray | np.int32:
    """Reduce integers mod 2**32 and reinterpret them as signed int32.

    This is two's-complement wrap-around: ``2**31 -> -2**31``,
    ``-2**31 - 1 -> 2**31 - 1``, ``2**32 + 5 -> 5``.

    Parameters
    ----------
    x : int, numpy integer scalar, integer ndarray, or sequence of ints
        Any integer values. Python ints of any size are handled exactly
        (arbitrary precision); numpy arrays of any signed/unsigned integer
        dtype are handled exactly (only their low 32 bits matter). Nested
        lists/tuples of Python ints are converted with exact Python
        arithmetic (never via float). Object arrays must hold only ints.

    Returns
    -------
    numpy.int32 or numpy.ndarray
        ``numpy.int32`` for a scalar input, otherwise a new int32 array with
        the shape of ``x``.

    Raises
    ------
    TypeError
        If ``x`` (or any element) is not an integer: floats, bools, complex,
        strings, ... are rejected rather than silently truncated.
    """
    if _is_int_scalar(x):
        return np.int32(_wrap_pyint(int(x)))
    if isinstance(x, (list, tuple)):
        # np.asarray([-1, 2**64 - 1]) silently becomes float64, so sequences
        # always take the exact object (Python int) path.
        x = np.array(x, dtype=object)
    if not isinstance(x, np.ndarray):
        raise TypeError(
            "x must be an int, a numpy integer, an integer ndarray or a sequence of ints, "
            f"got {type(x).__name__}"
        )
    kind = x.dtype.kind
    if kind in "iu":
        # Widen to 64 bits first: `int8_array & 0xFFFFFFFF` would raise under
        # NEP 50 because the mask does not fit in int8. Bitwise AND on the
        # two's-complement int64 (or on uint64) keeps exactly the low 32 bits;
        # those are < 2**32 so the cast to uint32 is exact, and the uint32 ->
        # int32 *view* is the two's-complement reinterpretation by definition.
        wide = x.astype(np.uint64 if kind == "u" else np.int64)
        low = (wide & _MASK32).astype(np.uint32)
        return low.view(np.int32)
    if kind == "O":
        flat = x.reshape(-1)
        out = np.empty(flat.shape, dtype=np.int32)
        for i, v in enumerate(flat):
            if not _is_int_scalar(v):
                idx = tuple(int(j) for j in np.unravel_index(i, x.shape))
                raise TypeError(
                    f"x must contain only integers, got {type(v).__name__} {v!r} at index {idx}"
                )
            out[i] = _wrap_pyint(int(v))
        return out.reshape(x.shape)
    raise TypeError(
        f"x must be an integer array (signed/unsigned int or object array of ints), "
        f"got dtype {x.dtype}"
    )


def _check_int32_matrix(name: str, x: Any) -> np.ndarray:
    if not isinstance(x, np.ndarray):
        raise TypeError(f"{name} must be an int32 numpy.ndarray, got {type(x).__name__}")
    if x.dtype.kind != "i" or x.dtype.itemsize != 4:
        raise TypeError(f"{name} must be an int32 array, got dtype {x.dtype}")
    if x.ndim != 2:
        raise ValueError(f"{name} must be 2-D (R, C), got shape {x.shape} ({x.ndim}-D)")
    if 0 in x.shape:
        raise ValueError(
            f"{name} must have no empty dimensions (R >= 1 and C >= 1), got shape {x.shape}"
        )
    return np.asarray(x)


def reduce_rows(x: np.ndarray, op: str) -> np.ndarray:
    """Per-row reduction of an int32 tile, as the hardware computes it.

    Parameters
    ----------
    x : numpy.ndarray
        int32 array of shape ``(R, C)`` with ``R, C >= 1``.
    op : {"sum", "max", "min"}
        ``"sum"`` wraps mod 2**32 (signed int32 result, like a 32-bit
        accumulator); ``"max"`` and ``"min"`` are the plain row extrema.

    Returns
    -------
    numpy.ndarray
        New int32 array of shape ``(R,)``.

    Raises
    ------
    TypeError
        If ``x`` is not an int32 ndarray, or ``op`` is not a str.
    ValueError
        If ``op`` is not one of :data:`REDUCE_OPS`, ``x`` is not 2-D, or
        ``x`` has an empty dimension.

    Notes
    -----
    ``x.sum(axis=1)`` on int32 silently *widens* to int64 on 64-bit
    platforms, i.e. it does **not** wrap; the result must be wrapped
    explicitly. The int64 sum is exact for ``C < 2**32`` (each term is at
    most ``2**31`` in magnitude).
    """
    accepted = ", ".join(repr(o) for o in REDUCE_OPS)
    if not isinstance(op, str):
        raise TypeError(f"op must be a str, one of {accepted}; got {type(op).__name__}")
    if op not in REDUCE_OPS:
        raise ValueError(f"op must be one of {accepted}; got {op!r}")
    x = _check_int32_matrix("x", x)
    if op == "sum":
        return wrap_int32(x.astype(np.int64).sum(axis=1))
    if op == "max":
        return x.max(axis=1).astype(np.int32)
    return x.min(axis=1).astype(np.int32)
