"""SiLU and GELU as the chip computes them (kernels/activations.py): compositions of the vector
unit's fp32 operations, each rounded, in this order; and their float64 references.

* SiLU: ``t = x * -1; t = exp(t); t = t + 1; t = recip(t); y = x * t`` (x * sigmoid(x)).
* GELU, tanh form through the sigmoid (``0.5 * (1 + tanh(z)) = sigmoid(2 z)``):
  ``t = x * x; t = t * CK; t = t + K; t = t * x; t = exp(t); t = t + 1; t = recip(t);
  y = x * t`` with ``K = fp32(-2 * sqrt(2 / pi))`` and ``CK = fp32(0.044715 * -2 * sqrt(2 / pi))``:
  ``K (x + 0.044715 x^3)`` in Horner's form, ``x (x^2 CK + K)``, eight vector passes, not nine
  (the kernel is held by the accumulator's write port, which each pass takes).

Both inherit exp's and recip's documented behaviour (docs/numerics.md): silu(-Inf) and
gelu(-Inf) are NaN (-Inf * 0), large negative inputs give -0, large positive ones give x.
"""

from __future__ import annotations

import math

import numpy as np

from .vector import bits, floats, row_words, vector_op

__all__ = ["ACTIVATIONS", "ACTIVATION_CONSTANTS", "activation_rows", "activation_reference"]

ACTIVATIONS = ("silu", "gelu")
# The scalar constants the kernel loads (fp32 bit patterns), in this order.
ACTIVATION_CONSTANTS = {"minus_one": -1.0, "one": 1.0, "gelu_k": -2 * math.sqrt(2 / math.pi),
                        "gelu_cubic_k": 0.044715 * -2 * math.sqrt(2 / math.pi)}


def _c(name: str) -> np.ndarray:
    return bits(np.float32(ACTIVATION_CONSTANTS[name]))


def activation_words(kind: str, w: np.ndarray) -> np.ndarray:
    """``kind`` over fp32 bit patterns ``w`` (any shape), in the kernel's order."""
    if kind == "silu":
        t = vector_op("fmul", w, _c("minus_one"))
    elif kind == "gelu":
        t = vector_op("fmul", w, w)
        t = vector_op("fmul", t, _c("gelu_cubic_k"))
        t = vector_op("fadd", t, _c("gelu_k"))
        t = vector_op("fmul", t, w)
    else:
        raise ValueError(f"kind must be one of {', '.join(ACTIVATIONS)}, got {kind!r}")
    t = vector_op("exp", t)
    t = vector_op("fadd", t, _c("one"))
    t = vector_op("recip", t)
    return vector_op("fmul", w, t)


def activation_rows(kind: str, x: np.ndarray, lanes: int) -> np.ndarray:
    """fp32 (R, C): the chip's result, bit for bit."""
    w = row_words(np.asarray(x, np.float32), lanes, 0)
    out = activation_words(kind, w).reshape(x.shape[0], -1)[:, :x.shape[1]]
    return floats(np.ascontiguousarray(out))


def activation_reference(kind: str, x: np.ndarray) -> np.ndarray:
    """float64: SiLU x / (1 + e^-x); GELU with erf (the exact one, so the tanh form's own error
    counts in the SQNR)."""
    from math import erf

    x = np.asarray(x, np.float64)
    if kind == "silu":
        with np.errstate(over="ignore"):
            return x / (1.0 + np.exp(-x))
    return 0.5 * x * (1.0 + np.vectorize(erf)(x / math.sqrt(2.0)))
