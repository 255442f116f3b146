"""Kernel goldens of LayerNorm and RMSNorm on the vector unit (kernels/norms.py), op for op, and
float64 references.

LayerNorm takes the mean, corrects it by the mean of its residual, then sums the squared
deviations (no E[x^2] - E[x]^2 cancellation): s = FSUM(x); m0 = s * inv_c; d0 = x - m0; c =
FSUM(d0) * inv_c; d = d0 - c (after each subtraction the padding lanes of a row's last word are
multiplied by 0 again); v = FSUM(d * d); var = v * inv_c; r = rsqrt(var + eps);
y = d * r * gamma + beta. The correction: m0 is the rounded mean, up to an ulp of it off (0.79
ulp, 7.6e-6, on a row of mean -100 and std 0.5, which every output then carried); d0 is exact
where x is within a factor of 2 of m0, c is m0's error to a few bits, and d = x - mean is then
off by about an ulp of d, not of the mean. RMSNorm: v = FSUM(x * x); r = rsqrt(v * inv_c + eps); y = x * r * gamma.
``inv_c`` is 1/C rounded once to fp32 (:func:`inv_count`), ``eps`` the fp32 nearest the given
value; both are constants the host prepares. Row sums are in the reduction unit's order
(golden.vector.reduce_words).
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from .vector import bits, floats, reduce_words, row_words, vector_op

__all__ = ["inv_count", "layer_norm_rows", "rms_norm_rows", "layer_norm_reference", "rms_norm_reference",
           "lane_mask"]

ONE = 0x3F800000


def inv_count(c: int) -> int:
    """fp32 bits of 1/c rounded to nearest even (exactly: no float64 on the way)."""
    if c < 1:
        raise ValueError(f"a row has at least one value, not {c}")
    v = Fraction(1, c)
    e = 0
    while v < 1:
        v *= 2
        e -= 1
    q = v * 2**23  # 24 significant bits
    fl = q.numerator // q.denominator
    rem = q - fl
    if rem > Fraction(1, 2) or (rem == Fraction(1, 2) and fl % 2):
        fl += 1
    if fl == 1 << 24:
        fl, e = fl >> 1, e + 1
    return ((e + 127) << 23) | (fl & 0x7FFFFF)  # 1/c >= 2**-24 > 2**-126 for c < 2**24: always normal


def lane_mask(c: int, lanes: int) -> np.ndarray:
    """The last word's mask: 1.0 in the lanes a row of ``c`` values uses, +0 in the padding."""
    used = c - (-(-c // lanes) - 1) * lanes
    return np.array([ONE if j < used else 0 for j in range(lanes)], np.uint32)


def _scalar(v) -> np.ndarray:
    return np.asarray(v, np.uint32)[:, None, None]


def layer_norm_rows(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, eps: float, lanes: int) -> np.ndarray:
    x = np.asarray(x, np.float32)
    r, c = x.shape
    w = row_words(x, lanes, 0)
    inv = np.uint32(inv_count(c))
    eps_b = bits(np.float32(eps))
    mask = lane_mask(c, lanes)
    mean = vector_op("fmul", reduce_words("fsum", w), inv)
    d0 = vector_op("fsub", w, _scalar(mean))
    d0[:, -1, :] = vector_op("fmul", d0[:, -1, :], mask)
    d = vector_op("fsub", d0, _scalar(vector_op("fmul", reduce_words("fsum", d0), inv)))
    d[:, -1, :] = vector_op("fmul", d[:, -1, :], mask)
    var = vector_op("fmul", reduce_words("fsum", vector_op("fmul", d, d)), inv)
    rs = vector_op("rsqrt", vector_op("fadd", var, eps_b))
    y = vector_op("fmul", d, _scalar(rs))
    y = vector_op("fmul", y, row_words(gamma.reshape(1, -1), lanes, 0))
    y = vector_op("fadd", y, row_words(beta.reshape(1, -1), lanes, 0))
    return floats(y.reshape(r, -1)[:, :c]).copy()


def rms_norm_rows(x: np.ndarray, gamma: np.ndarray, eps: float, lanes: int) -> np.ndarray:
    x = np.asarray(x, np.float32)
    r, c = x.shape
    w = row_words(x, lanes, 0)
    ms = vector_op("fmul", reduce_words("fsum", vector_op("fmul", w, w)), np.uint32(inv_count(c)))
    rs = vector_op("rsqrt", vector_op("fadd", ms, bits(np.float32(eps))))
    y = vector_op("fmul", vector_op("fmul", w, _scalar(rs)), row_words(gamma.reshape(1, -1), lanes, 0))
    return floats(y.reshape(r, -1)[:, :c]).copy()


def layer_norm_reference(x, gamma, beta, eps: float) -> np.ndarray:
    x = np.asarray(x, np.float64)
    mean = x.mean(axis=1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * np.asarray(gamma, np.float64) + np.asarray(beta, np.float64)


def rms_norm_reference(x, gamma, eps: float) -> np.ndarray:
    x = np.asarray(x, np.float64)
    return x / np.sqrt((x * x).mean(axis=1, keepdims=True) + eps) * np.asarray(gamma, np.float64)
