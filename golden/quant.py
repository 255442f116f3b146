"""Host-side quantizers for the matrix engine's low-precision operands.

Turns float32 host tensors into the operand codes and scales described in
``docs/numerics.md``: INT8 (symmetric, per tensor or per channel), FP8 E4M3 / E5M2 with one
float64 scale per tensor, and MX blocks (32 elements along K sharing one E8M0 scale) for
E4M3, E5M2 and E2M1 (FP4) elements.

Rounding choices (each one a stated decision, see ``/work/shared/NUMERICS.md``):

* Every rounding is a single round-to-nearest-even from the *exact* value being quantized:
  ``x`` itself, ``x / 2**shared_exp`` (exact in float32, see :func:`mx_quantize`), or the real
  quotient ``x / scale`` (float64 division followed by an exact tie check, see
  :func:`fp8_per_tensor` and :func:`int8_symmetric`). The rounding to the element grid is done
  here with numpy arithmetic; ``ml_dtypes`` is only used to encode values that are already
  exactly representable, so its float64->float32->format double rounding (trap 3) and its
  non-saturating casts (trap 2) never apply.
* Conversion saturates: a magnitude above the format's largest finite value gives that value
  (465 -> 448 in E4M3, code 0x7E), never Inf or NaN.
* Inputs must be float32 and finite. NaN cannot be carried by the recipes (E4M3 has a NaN code
  but E2M1 and INT8 do not, and a NaN would poison every block scale it touches) and Inf has no
  finite scale, so both raise ``ValueError`` naming the first offending index.
* Zero-size arrays raise ``ValueError``: there is no amax to scale by, and an empty operand
  reaching the quantizer is a host-side bug.

Only numpy and ml_dtypes are used; nothing here imports the rest of the project.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import ml_dtypes
import numpy as np

__all__ = [
    "FORMATS",
    "RECIPES",
    "ElementFormat",
    "Recipe",
    "decode_elements",
    "flush_subnormals",
    "fp8_per_tensor",
    "int8_dequantize",
    "int8_symmetric",
    "mx_dequantize",
    "mx_quantize",
    "pad_to_block",
    "quantize_elements",
    "recipe",
]

MX_BLOCK = 32
"""Elements per MX block along K: the hardware's block (``docs/numerics.md``)."""

E8M0_BIAS = 127
E8M0_MIN_EXP = -127
E8M0_MAX_EXP = 127  # code 254; 0xFF (NaN) is never produced


@dataclass(frozen=True)
class ElementFormat:
    """One low-precision element format (``docs/numerics.md``, "Element decoding").

    Attributes
    ----------
    name : str
        ``"e4m3"``, ``"e5m2"`` or ``"e2m1"``.
    dtype : numpy dtype
        The matching ``ml_dtypes`` type, used only to encode/decode exact values.
    ebits, mbits, bias : int
        Exponent field width, mantissa field width and exponent bias.
    max : float
        Largest finite magnitude (the saturation value).
    emax : int
        ``floor(log2(max))``: the OCP ``emax_elem`` of the floor scale rule.
    """

    name: str
    dtype: type
    ebits: int
    mbits: int
    bias: int
    max: float
    emax: int

    @property
    def emin(self) -> int:
        """Exponent of the smallest normal value, ``1 - bias``."""
        return 1 - self.bias

    @property
    def max_significand(self) -> float:
        """``max / 2**emax``, in ``[1, 2)``: 1.75 for E4M3/E5M2, 1.5 for E2M1."""
        return self.max / 2.0**self.emax


FORMATS: dict[str, ElementFormat] = {
    "e4m3": ElementFormat("e4m3", ml_dtypes.float8_e4m3fn, 4, 3, 7, 448.0, 8),
    "e5m2": ElementFormat("e5m2", ml_dtypes.float8_e5m2, 5, 2, 15, 57344.0, 15),
    "e2m1": ElementFormat("e2m1", ml_dtypes.float4_e2m1fn, 2, 1, 1, 6.0, 2),
}
"""The hardware's FP element formats by name (OCP E4M3 with max 448, not ``float8_e4m3``)."""

_FP8 = ("e4m3", "e5m2")
_RULES = ("floor", "rceil")


# ----------------------------------------------------------------------------------------------
# Argument checks
# ----------------------------------------------------------------------------------------------


def _format(fmt: object, accepted: tuple[str, ...] = tuple(FORMATS)) -> ElementFormat:
    if not isinstance(fmt, str) or fmt not in accepted:
        raise ValueError(
            f"unknown element format {fmt!r}; accepted: {', '.join(map(repr, accepted))}"
        )
    return FORMATS[fmt]


def _rule(rule: object) -> str:
    if not isinstance(rule, str) or rule not in _RULES:
        raise ValueError(
            f"unknown MX scale rule {rule!r}; accepted: 'floor' (OCP: floor(log2(amax)) - "
            "emax_elem) or 'rceil' (ceil(log2(amax / max_elem)))"
        )
    return rule


def _float32_input(x: object, name: str = "x") -> np.ndarray:
    """Check ``x`` is a non-empty, finite float32 ndarray and return it."""
    if not isinstance(x, np.ndarray):
        raise TypeError(
            f"{name} must be a numpy.ndarray of dtype float32, not {type(x).__name__}; "
            "build it with np.asarray(..., dtype=np.float32)"
        )
    if x.dtype != np.float32:
        raise TypeError(
            f"{name} must have dtype float32, not {x.dtype}: the quantizers round once, from "
            "float32; a wider input would be rounded twice (to float32, then to the format), "
            "which can differ from one round-to-nearest-even. Convert with "
            f"{name}.astype(np.float32) if float32 is the intended source precision"
        )
    if x.size == 0:
        raise ValueError(
            f"{name} is empty (shape {x.shape}); expected at least one element: an empty "
            "operand has no amax to scale by"
        )
    bad = ~np.isfinite(x)
    if bad.any():
        first = tuple(int(i) for i in np.unravel_index(int(np.argmax(bad)), x.shape))
        what = "a NaN" if np.isnan(x[first]) else "an Inf"
        raise ValueError(
            f"{name} has {what} at index {first} (value {x[first]}); the quantizers accept "
            "finite values only: no recipe can carry a NaN, and an Inf has no finite scale"
        )
    return x


def _axis2(x: np.ndarray, axis: object, what: str) -> int:
    if x.ndim != 2:
        raise ValueError(f"{what} must be 2-D (rows, K) or (K, cols), got shape {x.shape}")
    if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)) or axis not in (0, 1):
        raise ValueError(
            f"axis must be 1 (blocks along the columns: A of shape (R, K)) or 0 (blocks along "
            f"the rows: B of shape (K, N)), not {axis!r}"
        )
    return int(axis)


def _block(block: object) -> int:
    if isinstance(block, bool) or not isinstance(block, (int, np.integer)) or block < 1:
        raise ValueError(f"block must be a positive integer (the hardware uses 32), not {block!r}")
    return int(block)


# ----------------------------------------------------------------------------------------------
# Exact round-to-nearest-even onto a grid
# ----------------------------------------------------------------------------------------------


def _grid_quantum(a: np.ndarray, f: ElementFormat) -> np.ndarray:
    """Spacing of the format's values in the binade of each magnitude ``a`` (float64, >= 0)."""
    _, e = np.frexp(a)  # a = m * 2**e, m in [0.5, 1): floor(log2(a)) = e - 1 (trap 1)
    return np.ldexp(1.0, np.maximum(e - 1, f.emin) - f.mbits)


def _rne_magnitude(
    a: np.ndarray, quantum: np.ndarray | float, top: float
) -> tuple[np.ndarray, np.ndarray]:
    """Round magnitudes ``a`` (float64) to multiples of ``quantum`` (powers of two), RNE.

    Returns ``(q, n)``: the rounded magnitudes, saturated at ``top``, and ``n = a / quantum``
    (exact) so callers can find the exact ties (``n - floor(n) == 0.5``).
    """
    n = a / quantum  # exact: division by a power of two, no float64 underflow at these ranges
    q = np.minimum(np.rint(n) * quantum, top)  # np.rint is half-to-even
    return q, n


def _fix_quotient_ties(
    q: np.ndarray, n: np.ndarray, quantum: np.ndarray | float, top: float,
    x: np.ndarray, scale: np.ndarray | float,
) -> None:
    """Make ``q`` the RNE of the real quotient ``|x| / scale``, not of its float64 rounding.

    ``n`` holds ``fl(|x| / scale) / quantum``. Rounding to float64 is monotonic and every grid
    midpoint is a float64, so if the float64 quotient is not exactly a midpoint it lies on the
    same side of it as the real quotient and ``q`` is already right. Only exact-midpoint float64
    quotients are re-decided, with rational arithmetic. ``q`` is modified in place.
    """
    ties = np.flatnonzero((n - np.floor(n)) == 0.5)
    if ties.size == 0:
        return
    qf, nf = q.reshape(-1), n.reshape(-1)
    xf = np.abs(x).astype(np.float64).reshape(-1)
    sf = np.broadcast_to(scale, x.shape).reshape(-1)
    qq = np.broadcast_to(quantum, x.shape).reshape(-1)
    for i in ties.tolist():
        lo = math.floor(nf[i])
        mid = Fraction(lo * 2 + 1, 2) * Fraction(float(qq[i]))
        exact = Fraction(float(xf[i])) / Fraction(float(sf[i]))
        if exact > mid:
            qf[i] = min((lo + 1) * float(qq[i]), top)
        elif exact < mid:
            qf[i] = lo * float(qq[i])
        # exact == mid: a true tie, np.rint already chose the even neighbour


def _encode(values: np.ndarray, f: ElementFormat) -> np.ndarray:
    """Codes of values that are exactly representable in ``f`` (the cast does no rounding)."""
    return values.astype(np.float32).astype(f.dtype).view(np.uint8)


def quantize_elements(x: np.ndarray, fmt: str) -> np.ndarray:
    """Round float32 values to an FP element format (RNE, saturating) and return the codes.

    Parameters
    ----------
    x : numpy.ndarray of float32
        Finite values, any shape, at least one element.
    fmt : {"e4m3", "e5m2", "e2m1"}
        OCP E4M3 (max 448), E5M2 (max 57344) or E2M1 (max 6).

    Returns
    -------
    numpy.ndarray of uint8
        Codes, same shape as ``x``. E2M1 codes sit in the low 4 bits (high 4 bits zero).
        Magnitudes above the format's max give ``±max`` (E4M3: 0x7E / 0xFE); the sign of zero
        is kept (``-0.0`` and negative values that round to zero give the negative-zero code).

    Raises
    ------
    TypeError
        ``x`` is not a float32 ndarray (a float64 input would be rounded twice).
    ValueError
        Unknown ``fmt``; empty ``x``; a NaN or ±Inf in ``x`` (the message names the first
        index). Inf is rejected rather than saturated because it is almost always an upstream
        overflow that saturation would hide.
    """
    f = _format(fmt)
    x = _float32_input(x)
    a = np.minimum(np.abs(x).astype(np.float64), f.max)  # exact; clamping first = saturating
    q, _ = _rne_magnitude(a, _grid_quantum(a, f), f.max)
    return _encode(np.copysign(q, x), f)


def decode_elements(codes: np.ndarray, fmt: str) -> np.ndarray:
    """Values of element codes as float64 (exact).

    Parameters
    ----------
    codes : numpy.ndarray of uint8
        Element codes; for E2M1 only the low 4 bits are used (the hardware ignores the rest).
    fmt : {"e4m3", "e5m2", "e2m1"}

    Returns
    -------
    numpy.ndarray of float64
        Same shape; E4M3 ``S.1111.111`` and E5M2 NaN codes give NaN, E5M2 Inf codes give ±Inf.
    """
    f = _format(fmt)
    codes = _codes_input(codes, "codes")
    if f.name == "e2m1":
        codes = codes & np.uint8(0x0F)
    return codes.view(f.dtype).astype(np.float64)


def _codes_input(codes: object, name: str) -> np.ndarray:
    if not isinstance(codes, np.ndarray) or codes.dtype != np.uint8:
        got = codes.dtype if isinstance(codes, np.ndarray) else type(codes).__name__
        raise TypeError(f"{name} must be a numpy.ndarray of dtype uint8, not {got}")
    return np.ascontiguousarray(codes)


# ----------------------------------------------------------------------------------------------
# MX blocks
# ----------------------------------------------------------------------------------------------


def flush_subnormals(codes: np.ndarray, fmt: str) -> tuple[np.ndarray, int]:
    """Replace every subnormal code (exponent field 0, mantissa != 0) by a zero of the same sign.

    Returns ``(codes, how many were flushed)``. For hardware that reads subnormals as zero: with
    them flushed in software, the chip and a golden that honours subnormals compute the same.
    """
    f = _format(fmt)
    codes = np.asarray(codes, np.uint8)
    exp_field = (codes >> f.mbits) & ((1 << f.ebits) - 1)
    sub = (exp_field == 0) & ((codes & ((1 << f.mbits) - 1)) != 0)
    out = codes.copy()
    out[sub] = codes[sub] & (1 << (f.ebits + f.mbits))
    return out, int(sub.sum())


def pad_to_block(x: np.ndarray, axis: int, block: int = MX_BLOCK) -> np.ndarray:
    """Zero-pad ``x`` along ``axis`` to a multiple of ``block``.

    Zeros change neither a block's amax (so its scale) nor the dot product, so padding K is
    the way to feed a K that is not a multiple of 32 to :func:`mx_quantize`. Pad A's columns
    and B's rows by the same amount.

    Parameters
    ----------
    x : numpy.ndarray
        Any dtype and shape with at least one dimension.
    axis : int
        The K axis (1 for A of shape (R, K), 0 for B of shape (K, N)).
    block : int, default 32

    Returns
    -------
    numpy.ndarray
        A new array (a copy even when no padding is needed), same dtype.
    """
    if not isinstance(x, np.ndarray) or x.ndim == 0:
        raise ValueError("x must be a numpy.ndarray with at least one dimension")
    block = _block(block)
    if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)) or not (
        -x.ndim <= axis < x.ndim
    ):
        raise ValueError(f"axis must be an integer in [{-x.ndim}, {x.ndim - 1}], not {axis!r}")
    width = [(0, 0)] * x.ndim
    width[axis] = (0, -x.shape[axis] % block)
    return np.pad(x, width)


def _shared_exponents(amax: np.ndarray, f: ElementFormat, rule: str) -> np.ndarray:
    """Per-block shared exponents (int64, clamped to [-127, 127]) from float32 block amax."""
    m, e = np.frexp(amax)  # amax = m * 2**e, m in [0.5, 1), exact for float32 subnormals too
    floor_log2 = e.astype(np.int64) - 1  # from the exponent bits, never np.log2 (trap 1)
    s = floor_log2 - f.emax  # OCP: floor(log2(amax)) - emax_elem
    if rule == "rceil":
        # ceil(log2(amax / max)) = floor rule + 1 exactly when amax's significand 2m (in [1, 2))
        # exceeds max's (1.75 or 1.5): then amax > max * 2**s, otherwise amax <= max * 2**s.
        s = s + (2.0 * m.astype(np.float64) > f.max_significand)
    s = np.where(amax == 0, 0, s)  # all-zero block: scale 2**0 (code 127)
    return np.clip(s, E8M0_MIN_EXP, E8M0_MAX_EXP)


def mx_quantize(
    x: np.ndarray, fmt: str, rule: str, axis: int = 1, block: int = MX_BLOCK
) -> tuple[np.ndarray, np.ndarray]:
    """MX-quantize a 2-D float32 operand: blocks of ``block`` elements along K share a scale.

    For each block, ``shared_exp`` is

    * ``"floor"`` (OCP MX v1.0): ``floor(log2(amax)) - emax_elem`` (E4M3 8, E5M2 15, E2M1 2),
      from the exponent bits (``np.frexp``). It clips the block max to ``max * 2**shared_exp``
      whenever amax's significand exceeds ``max / 2**emax_elem`` (1.75 for FP8, 1.5 for FP4);
    * ``"rceil"``: ``ceil(log2(amax / max_elem))``, computed exactly as the floor exponent plus
      one when amax's significand exceeds ``max / 2**emax_elem``. So
      ``amax / 2**shared_exp <= max`` always: nothing saturates.

    then clamped to the E8M0 range [-127, 127] (scale code ``shared_exp + 127``; 0xFF is never
    produced). The clamp only acts at the bottom, for blocks with amax below about 2**-118: the
    scale stays 2**-127 and such elements round on the format's subnormal grid (possibly to 0).
    An all-zero block gets scale code 127 (2**0) and zero elements.

    Elements are ``RNE(x / 2**shared_exp)`` saturated to ``±max``
    (:func:`quantize_elements`). The division is ``np.ldexp`` in float32, exact unless the
    quotient is below 2**-126 (a float32 subnormal), where ldexp may round. That cannot change
    a code: such a quotient is at least 2**-126 / 2**-17 times smaller than half the format's
    smallest subnormal (2**-10 E4M3, 2**-17 E5M2, 2**-2 E2M1), so both the exact and the
    float32 quotient round to a zero of the same sign. The scale never overflows float32
    (``shared_exp <= 126`` for any float32 amax).

    Parameters
    ----------
    x : numpy.ndarray of float32, 2-D
        A of shape (R, K) with ``axis=1``, or B of shape (K, N) with ``axis=0``. K must be a
        multiple of ``block``; pad with :func:`pad_to_block` otherwise.
    fmt : {"e4m3", "e5m2", "e2m1"}
    rule : {"floor", "rceil"}
    axis : {1, 0}, default 1
        The K axis, along which blocks run. MX quantization does not commute with transpose:
        for B, pass B itself with ``axis=0`` (the blocks follow K), not ``B.T`` with ``axis=1``
        unless you then transpose both results back.
    block : int, default 32
        Elements per block (the hardware uses 32).

    Returns
    -------
    codes : numpy.ndarray of uint8
        Same shape as ``x`` (E2M1 codes in the low 4 bits).
    scales : numpy.ndarray of uint8
        E8M0 codes, shape (R, K // block) for ``axis=1`` or (K // block, N) for ``axis=0``.

    Raises
    ------
    TypeError
        ``x`` is not float32.
    ValueError
        Unknown ``fmt`` or ``rule``; ``x`` not 2-D, empty, or with NaN/Inf; bad ``axis``; K not a
        multiple of ``block``.
    """
    f = _format(fmt)
    rule = _rule(rule)
    block = _block(block)
    x = _float32_input(x)
    axis = _axis2(x, axis, "x")
    k = x.shape[axis]
    if k % block:
        raise ValueError(
            f"K = x.shape[{axis}] = {k} is not a multiple of the MX block ({block}); zero-pad K "
            f"with pad_to_block(x, axis={axis}, block={block}) (pad the other operand's K too)"
        )
    xa = x if axis == 1 else x.T  # (rows, K) view
    xb = xa.reshape(xa.shape[0], k // block, block)
    amax = np.abs(xb).max(axis=2)  # float32, exact
    s = _shared_exponents(amax, f, rule)
    y = np.ldexp(xb, (-s)[:, :, None].astype(np.int32))  # float32 / 2**s, exact (see above)
    codes = quantize_elements(y.reshape(xa.shape), fmt)
    scales = (s + E8M0_BIAS).astype(np.uint8)
    if axis == 0:
        codes, scales = codes.T, scales.T
    return np.ascontiguousarray(codes), np.ascontiguousarray(scales)


def mx_dequantize(
    codes: np.ndarray, scales: np.ndarray, fmt: str, axis: int = 1, block: int = MX_BLOCK
) -> np.ndarray:
    """Values of MX codes and E8M0 scales as float64 (exact), for checks.

    Parameters
    ----------
    codes : numpy.ndarray of uint8, 2-D
    scales : numpy.ndarray of uint8
        Shape (R, K // block) for ``axis=1`` or (K // block, N) for ``axis=0``. Code 0xFF
        (E8M0 NaN) gives NaN for its whole block.
    fmt : {"e4m3", "e5m2", "e2m1"}
    axis : {1, 0}, default 1
    block : int, default 32

    Returns
    -------
    numpy.ndarray of float64
        ``decode(code) * 2**(scale - 127)``, same shape as ``codes``.
    """
    f = _format(fmt)
    block = _block(block)
    codes = _codes_input(codes, "codes")
    scales = _codes_input(scales, "scales")
    axis = _axis2(codes, axis, "codes")
    k = codes.shape[axis]
    want = (codes.shape[0], k // block) if axis == 1 else (k // block, codes.shape[1])
    if k % block or scales.shape != want:
        raise ValueError(
            f"scales shape {scales.shape} does not match codes shape {codes.shape} with axis="
            f"{axis} and block={block}: expected {want} (K a multiple of {block})"
        )
    exp = np.repeat(scales.astype(np.int64) - E8M0_BIAS, block, axis=axis)
    out = np.ldexp(decode_elements(codes, f.name), exp)
    out[np.repeat(scales == 0xFF, block, axis=axis)] = np.nan
    return out


# ----------------------------------------------------------------------------------------------
# Per-tensor FP8 and symmetric INT8
# ----------------------------------------------------------------------------------------------


def fp8_per_tensor(x: np.ndarray, fmt: str) -> tuple[np.ndarray, float]:
    """FP8 with one amax scale per tensor: ``codes = RNE(x / scale)``, ``scale = amax / max``.

    ``scale`` is the float64 quotient ``amax / max_elem``; each element is the
    round-to-nearest-even of the real quotient ``x / scale`` (float64 division, with exact
    rational re-checking of the rare quotients that land exactly on a rounding midpoint),
    saturated to ``±max``. The hardware runs it with every E8M0 scale code 127; software
    multiplies the fp32 result by ``scale_a * scale_b``.

    Parameters
    ----------
    x : numpy.ndarray of float32
        Finite, any shape, at least one element.
    fmt : {"e4m3", "e5m2"}

    Returns
    -------
    codes : numpy.ndarray of uint8
        Same shape as ``x``.
    scale : float
        ``amax / max_elem``; 1.0 when ``x`` is all zeros (the codes are then all ±0).
        Dequantize with ``decode_elements(codes, fmt) * scale``.
    """
    f = _format(fmt, _FP8)
    x = _float32_input(x)
    amax = float(np.abs(x).max())
    scale = amax / f.max if amax > 0 else 1.0
    a = np.abs(x).astype(np.float64) / scale
    a = np.minimum(a, f.max)
    quantum = _grid_quantum(a, f)
    q, n = _rne_magnitude(a, quantum, f.max)
    _fix_quotient_ties(q, n, quantum, f.max, x, scale)
    return _encode(np.copysign(q, x), f), scale


def int8_symmetric(x: np.ndarray, axis: int | None = None) -> tuple[np.ndarray, np.ndarray | float]:
    """Symmetric INT8: ``q = clip(RNE(x / scale), -127, 127)`` with ``scale = amax / 127``.

    Parameters
    ----------
    x : numpy.ndarray of float32
        Finite, at least one element.
    axis : int or None, default None
        ``None``: one scale for the whole tensor. An integer names the **channel** axis, the
        axis along which the scale varies (one scale per index of that axis, amax taken over
        all the other axes): ``axis=0`` is per row of A (R, K), ``axis=1`` per column of B
        (K, N). Note the contrast with :func:`mx_quantize`, whose ``axis`` is the K axis.

    Returns
    -------
    q : numpy.ndarray of int8
        Same shape as ``x``, in [-127, 127] (never -128). Ties round to even.
    scale : float or numpy.ndarray of float64
        A float (``axis=None``) or an array of shape ``(x.shape[axis],)``. A channel (or
        tensor) whose amax is 0 gets scale 1.0 and zero codes.
        Dequantize with :func:`int8_dequantize`.
    """
    x = _float32_input(x)
    if axis is not None:
        if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)) or not (
            -x.ndim <= axis < x.ndim
        ):
            raise ValueError(
                f"axis must be None (per tensor) or the channel axis, an integer in "
                f"[{-x.ndim}, {x.ndim - 1}], not {axis!r}"
            )
        axis = int(axis) % x.ndim
    ax = np.abs(x)
    if axis is None:
        amax = np.float64(ax.max())
        scale = np.float64(amax / 127.0) if amax > 0 else np.float64(1.0)
        bscale = scale
    else:
        others = tuple(i for i in range(x.ndim) if i != axis)
        amax = ax.max(axis=others, keepdims=True).astype(np.float64)
        bscale = np.where(amax > 0, amax / 127.0, 1.0)
        scale = bscale.reshape(-1)
    a = ax.astype(np.float64) / bscale
    q, n = _rne_magnitude(a, 1.0, 127.0)
    _fix_quotient_ties(q, n, 1.0, 127.0, x, bscale)
    q = np.copysign(q, x).astype(np.int8)
    return q, (float(scale) if axis is None else scale)


def int8_dequantize(
    q: np.ndarray, scale: np.ndarray | float, axis: int | None = None
) -> np.ndarray:
    """``q * scale`` as float64, broadcasting a per-channel scale along the channel ``axis``.

    Parameters
    ----------
    q : numpy.ndarray of int8
    scale : float or numpy.ndarray
        As returned by :func:`int8_symmetric` with the same ``axis``.
    axis : int or None, default None
    """
    if not isinstance(q, np.ndarray) or q.dtype != np.int8:
        raise TypeError("q must be a numpy.ndarray of dtype int8")
    s = np.asarray(scale, dtype=np.float64)
    if axis is not None:
        axis = int(axis) % q.ndim
        if s.shape != (q.shape[axis],):
            raise ValueError(
                f"scale shape {s.shape} does not match q.shape[{axis}] = {q.shape[axis]}: "
                "pass the scale and axis that int8_symmetric used"
            )
        s = np.expand_dims(s, tuple(i for i in range(q.ndim) if i != axis))
    return q.astype(np.float64) * s


# ----------------------------------------------------------------------------------------------
# Recipes
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Recipe:
    """A named quantization recipe.

    Attributes
    ----------
    name : str
    kind : {"int8", "fp8", "mx"}
        :func:`int8_symmetric`, :func:`fp8_per_tensor` or :func:`mx_quantize`.
    fmt : {"int8", "e4m3", "e5m2", "e2m1"}
    granularity : {"tensor", "channel", "block", "cast"}
    rule : {"floor", "rceil"} or None
        The MX scale rule; None for the other kinds.
    """

    name: str
    kind: str
    fmt: str
    granularity: str
    rule: str | None = None

    def __post_init__(self) -> None:
        ok = {
            "int8": (("int8",), ("tensor", "channel"), (None,)),
            "fp8": (_FP8, ("tensor", "cast"), (None,)),
            "mx": (tuple(FORMATS), ("block",), _RULES),
        }
        if self.kind not in ok:
            raise ValueError(
                f"unknown recipe kind {self.kind!r}; accepted: {', '.join(map(repr, ok))}"
            )
        fmts, grans, rules = ok[self.kind]
        for field, value, accepted in (
            ("fmt", self.fmt, fmts), ("granularity", self.granularity, grans),
            ("rule", self.rule, rules),
        ):
            if value not in accepted:
                raise ValueError(
                    f"recipe {self.name!r}: {field} {value!r} is not valid for kind "
                    f"{self.kind!r}; accepted: {', '.join(map(repr, accepted))}"
                )


RECIPES: dict[str, Recipe] = {
    r.name: r
    for r in (
        Recipe("int8-tensor", "int8", "int8", "tensor"),
        Recipe("int8-channel", "int8", "int8", "channel"),
        Recipe("fp8-e4m3-tensor", "fp8", "e4m3", "tensor"),
        Recipe("fp8-e5m2-tensor", "fp8", "e5m2", "tensor"),
        # "cast": no scaling at all (values already in the format's range, e.g. stored FP8
        # weights); small-magnitude data then lands on subnormals.
        Recipe("fp8-e4m3-cast", "fp8", "e4m3", "cast"),
        Recipe("fp8-e5m2-cast", "fp8", "e5m2", "cast"),
        Recipe("mxfp8-e4m3-floor", "mx", "e4m3", "block", "floor"),
        Recipe("mxfp8-e4m3-rceil", "mx", "e4m3", "block", "rceil"),
        Recipe("mxfp8-e5m2-floor", "mx", "e5m2", "block", "floor"),
        Recipe("mxfp8-e5m2-rceil", "mx", "e5m2", "block", "rceil"),
        Recipe("mxfp4-e2m1-floor", "mx", "e2m1", "block", "floor"),
        Recipe("mxfp4-e2m1-rceil", "mx", "e2m1", "block", "rceil"),
    )
}
"""Every supported recipe by name."""


def recipe(name: str) -> Recipe:
    """The recipe called ``name``; ``ValueError`` listing the known names otherwise."""
    try:
        return RECIPES[name]
    except (KeyError, TypeError):
        raise ValueError(
            f"unknown quantization recipe {name!r}; known: {', '.join(RECIPES)}"
        ) from None
