"""Bit-exact golden model of the matrix engine's low-precision (FP8 / FP4, MX) path.

Written from ``docs/numerics.md`` only (not from the RTL). Depends on numpy only.

Hardware semantics modelled (see the spec for the authoritative text)
---------------------------------------------------------------------
1. **Element decoding** (:func:`decode`, :func:`element_parts`). A code with sign ``s``,
   exponent field ``e`` and mantissa field ``m`` has ``ee = max(e, 1)``,
   ``sig = (e != 0) << M | m`` and value ``(-1)^s * sig * 2^(ee - B - M)`` (full subnormals).
   E4M3: ``S.1111.111`` is NaN, no Inf. E5M2: ``e = 31`` is Inf (``m = 0``) or NaN. E2M1: all
   codes finite; only the low 4 bits of each byte are used.
2. **Exact block sums** (:func:`block_sum`). A block is 32 consecutive K steps of one MATMUL
   (the last block of a MATMUL may be shorter). Each product is the integer
   ``(sig_a * sig_b) << (ee_a + ee_b - 2)`` with sign ``sa ^ sb``, in units of
   ``2^(2 - 2B - 2M)``; the block sum ``S`` is exact. Special values: any NaN product (NaN
   operand or Inf * 0) or both a +Inf and a -Inf product -> NaN; else an Inf product -> that Inf.
3. **Scales**. E8M0 code ``x`` is ``2^(x - 127)``, 0xFF is NaN (block result NaN).
   ``X = (xa - 127) + (xb - 127)`` as an integer.
4. **Rounding** (:func:`round_to_fp32_bits`): ``r_b = RNE32(S * 2^(2 - 2B - 2M + X))`` with
   full subnormals, overflow to Inf at ``|v| >= 2^128 * (1 - 2^-25)``, exact zero -> +0.
5. **Accumulation order** (:func:`fp32_add_bits`): within a MATMUL ``acc = r_0``, then
   ``acc = acc (+) r_b`` for ``b = 1, 2, ...`` in K order (IEEE binary32 RNE add). Write-back:
   first MATMUL ``C = acc``; a MATMUL with ``accumulate`` set gives ``C = C_old (+) acc``.
6. Every NaN written is the canonical quiet NaN ``0x7FC00000``.

Everything that decides a bit is computed with Python integers: rounding never goes through a
float conversion of a wide value (that would round twice). The per-block integer sums are
vectorised with int64 matrix products on 16-bit limbs (exactness argument in
:func:`_block_sums_int`).

Choices where the spec is silent (documented, tested)
-----------------------------------------------------
* A *nonzero* block value that rounds to zero keeps its sign (IEEE RNE underflow: a negative
  value gives -0). Only an *exact* zero sum gives +0 (spec step 1).
* In :func:`mx_matmul_bits` the scale of a block is looked up by its *global* block index
  ``k_start // 32`` (software programs ``arg3`` of each MATMUL to the matching SA/SB word); this
  is why every chunk but the last must be a multiple of 32.
* :func:`block_sum` returns ``S = 0`` when the block is special (the integer is meaningless).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

__all__ = [
    "BLOCK",
    "CANONICAL_NAN_BITS",
    "FORMATS",
    "FP32_INF_BITS",
    "FP32_MAX_BITS",
    "MxFormat",
    "block_sum",
    "decode",
    "element_parts",
    "fp32_add_bits",
    "ideal_matmul",
    "mx_matmul",
    "mx_matmul_bits",
    "round_to_fp32_bits",
]

BLOCK = 32
"""K steps per MX block (the last block of a MATMUL may be shorter)."""

CANONICAL_NAN_BITS = 0x7FC00000
"""The only NaN bit pattern the engine writes."""

FP32_INF_BITS = 0x7F800000
FP32_MAX_BITS = 0x7F7FFFFF
_SIGN32 = 0x80000000
_SCALE_NAN = 0xFF
_SCALE_BIAS = 127

Special = Literal["nan", "+inf", "-inf"]
Kind = Literal["finite", "nan", "inf"]


@dataclass(frozen=True)
class MxFormat:
    """Parameters of one element format (docs/numerics.md, "Element decoding").

    Attributes
    ----------
    name : str
        ``"e4m3"``, ``"e5m2"`` or ``"e2m1"``.
    ebits, mbits : int
        Exponent / mantissa field widths ``E`` and ``M``.
    bias : int
        Exponent bias ``B``.
    has_inf, has_nan : bool
        Whether the format encodes Inf / NaN.
    max : float
        Largest finite magnitude.
    """

    name: str
    ebits: int
    mbits: int
    bias: int
    has_inf: bool
    has_nan: bool
    max: float

    @property
    def nbits(self) -> int:
        """Width of a code in bits (1 + E + M)."""
        return 1 + self.ebits + self.mbits

    @property
    def product_exp(self) -> int:
        """Exponent of the integer unit of a product / block sum: ``2 - 2B - 2M``."""
        return 2 - 2 * self.bias - 2 * self.mbits


FORMATS: dict[str, MxFormat] = {
    "e4m3": MxFormat("e4m3", ebits=4, mbits=3, bias=7, has_inf=False, has_nan=True, max=448.0),
    "e5m2": MxFormat("e5m2", ebits=5, mbits=2, bias=15, has_inf=True, has_nan=True, max=57344.0),
    "e2m1": MxFormat("e2m1", ebits=2, mbits=1, bias=1, has_inf=False, has_nan=False, max=6.0),
}


# --------------------------------------------------------------------------
# validation helpers
# --------------------------------------------------------------------------


def _get_format(fmt: Any) -> MxFormat:
    if isinstance(fmt, MxFormat):
        return fmt
    if not isinstance(fmt, str) or fmt not in FORMATS:
        raise ValueError(f"unknown element format {fmt!r}; expected one of {sorted(FORMATS)}")
    return FORMATS[fmt]


def _check_codes(name: str, x: Any, ndim: int | None = None) -> np.ndarray:
    if not isinstance(x, np.ndarray):
        raise TypeError(f"{name} must be a uint8 numpy.ndarray, got {type(x).__name__}")
    if x.dtype != np.uint8:
        raise TypeError(f"{name} must have dtype uint8, got {x.dtype}")
    if ndim is not None and x.ndim != ndim:
        raise ValueError(f"{name} must be {ndim}-D, got shape {x.shape} ({x.ndim}-D)")
    return np.asarray(x)


def _check_bits32(name: str, x: Any) -> int:
    if isinstance(x, (bool, np.bool_)) or not isinstance(x, (int, np.integer)):
        raise TypeError(f"{name} must be an int fp32 bit pattern, got {type(x).__name__}")
    v = int(x)
    if not 0 <= v <= 0xFFFFFFFF:
        raise ValueError(f"{name} must be a 32-bit pattern in [0, 0xFFFFFFFF], got {v:#x}")
    return v


# --------------------------------------------------------------------------
# element decoding
# --------------------------------------------------------------------------


def _fields(codes: np.ndarray, f: MxFormat) -> dict[str, np.ndarray]:
    """Vectorised element parts of uint8 codes (int64 arrays / bool masks).

    Returns sign, e, m, ee, sig and the masks nan, inf, zero (finite zero).
    """
    c = codes.astype(np.int64) & ((1 << f.nbits) - 1)  # e2m1: high 4 bits ignored
    sign = (c >> (f.ebits + f.mbits)) & 1
    e = (c >> f.mbits) & ((1 << f.ebits) - 1)
    m = c & ((1 << f.mbits) - 1)
    ee = np.maximum(e, 1)
    sig = ((e != 0).astype(np.int64) << f.mbits) | m
    emax = (1 << f.ebits) - 1
    mmax = (1 << f.mbits) - 1
    if f.name == "e4m3":
        nan = (e == emax) & (m == mmax)
        inf = np.zeros_like(nan)
    elif f.name == "e5m2":
        nan = (e == emax) & (m != 0)
        inf = (e == emax) & (m == 0)
    else:
        nan = np.zeros(c.shape, dtype=bool)
        inf = np.zeros(c.shape, dtype=bool)
    zero = (sig == 0) & ~nan & ~inf
    return {"sign": sign, "e": e, "m": m, "ee": ee, "sig": sig, "nan": nan, "inf": inf,
            "zero": zero}


def decode(codes: np.ndarray, fmt: str) -> np.ndarray:
    """Decode element codes to their values.

    Parameters
    ----------
    codes : numpy.ndarray
        uint8 array of any shape. For ``"e2m1"`` only the low 4 bits of each byte are used.
    fmt : str
        ``"e4m3"``, ``"e5m2"`` or ``"e2m1"``.

    Returns
    -------
    numpy.ndarray
        float64 array of the same shape; NaN / +-Inf where the format has them. Every finite
        value is exact in float64.

    Raises
    ------
    TypeError
        If ``codes`` is not a uint8 ndarray.
    ValueError
        If ``fmt`` is unknown.
    """
    f = _get_format(fmt)
    codes = _check_codes("codes", codes)
    p = _fields(codes, f)
    mag = np.ldexp(p["sig"].astype(np.float64), (p["ee"] - f.bias - f.mbits).astype(np.int32))
    mag = np.where(p["inf"], np.inf, mag)
    mag = np.where(p["nan"], np.nan, mag)
    return np.where(p["sign"] == 1, -mag, mag)


def element_parts(code: int, fmt: str) -> tuple[int, int, int, Kind]:
    """Integer parts of one element code, as the PE sees them.

    Parameters
    ----------
    code : int
        Code in ``[0, 255]`` (for ``"e2m1"`` the high 4 bits are ignored).
    fmt : str
        ``"e4m3"``, ``"e5m2"`` or ``"e2m1"``.

    Returns
    -------
    tuple
        ``(sign, sig, ee, kind)`` with ``ee = max(e, 1)``, ``sig = (e != 0) << M | m`` and
        ``kind`` in ``{"finite", "nan", "inf"}``. For finite codes the value is
        ``(-1)^sign * sig * 2^(ee - B - M)``; ``sig``/``ee`` of NaN/Inf codes follow the same
        formula but carry no meaning.

    Raises
    ------
    TypeError
        If ``code`` is not an integer.
    ValueError
        If ``code`` is outside ``[0, 255]`` or ``fmt`` is unknown.
    """
    f = _get_format(fmt)
    if isinstance(code, (bool, np.bool_)) or not isinstance(code, (int, np.integer)):
        raise TypeError(f"code must be an int, got {type(code).__name__}")
    if not 0 <= int(code) <= 0xFF:
        raise ValueError(f"code must be in [0, 255], got {int(code)}")
    c = int(code) & ((1 << f.nbits) - 1)  # e2m1: high 4 bits ignored
    sign = c >> (f.ebits + f.mbits)
    e = (c >> f.mbits) & ((1 << f.ebits) - 1)
    m = c & ((1 << f.mbits) - 1)
    ee = max(e, 1)
    sig = (int(e != 0) << f.mbits) | m
    emax = (1 << f.ebits) - 1
    kind: Kind = "finite"
    if f.name == "e4m3" and e == emax and m == (1 << f.mbits) - 1:
        kind = "nan"
    elif f.name == "e5m2" and e == emax:
        kind = "inf" if m == 0 else "nan"
    return sign, sig, ee, kind


# --------------------------------------------------------------------------
# block sums
# --------------------------------------------------------------------------


def block_sum(a_codes: np.ndarray, b_codes: np.ndarray, fmt: str) -> tuple[int, Special | None]:
    """Exact integer sum of one block of products, with the special-value rule.

    Parameters
    ----------
    a_codes, b_codes : numpy.ndarray
        1-D uint8 arrays of equal length ``1 <= L <= 32`` (the K steps of one block).
    fmt : str
        Element format of both operands.

    Returns
    -------
    S : int
        ``sum_k (-1)^(sa^sb) * (sig_a * sig_b) << (ee_a + ee_b - 2)`` (exact Python int, in
        units of ``2^(2 - 2B - 2M)``); 0 when the block is special.
    special : {None, "nan", "+inf", "-inf"}
        ``"nan"`` if any product is NaN (NaN operand, or Inf times zero) or there are both +Inf
        and -Inf products; else ``"+inf"``/``"-inf"`` if there is an Inf product; else None.

    Raises
    ------
    TypeError
        If an operand is not a uint8 ndarray.
    ValueError
        On wrong dimensionality, mismatched or out-of-range length, or unknown ``fmt``.
    """
    f = _get_format(fmt)
    a_codes = _check_codes("a_codes", a_codes, 1)
    b_codes = _check_codes("b_codes", b_codes, 1)
    if a_codes.shape != b_codes.shape:
        raise ValueError(f"a_codes and b_codes must have the same length, got "
                         f"{a_codes.shape[0]} and {b_codes.shape[0]}")
    if not 1 <= a_codes.shape[0] <= BLOCK:
        raise ValueError(f"a block has 1..{BLOCK} K steps, got {a_codes.shape[0]}")
    total = 0
    any_nan = pos_inf = neg_inf = False
    for ca, cb in zip(a_codes.tolist(), b_codes.tolist()):
        sa, ga, ea, ka = element_parts(ca, f.name)
        sb, gb, eb, kb = element_parts(cb, f.name)
        neg = bool(sa ^ sb)
        if ka == "nan" or kb == "nan":
            any_nan = True
        elif ka == "inf" or kb == "inf":
            other_zero = (kb == "finite" and gb == 0) if ka == "inf" else (ga == 0)
            if other_zero:
                any_nan = True  # Inf * 0
            elif neg:
                neg_inf = True
            else:
                pos_inf = True
        else:
            p = (ga * gb) << (ea + eb - 2)
            total += -p if neg else p
    if any_nan or (pos_inf and neg_inf):
        return 0, "nan"
    if pos_inf:
        return 0, "+inf"
    if neg_inf:
        return 0, "-inf"
    return total, None


# --------------------------------------------------------------------------
# fp32 rounding and addition (Python integers)
# --------------------------------------------------------------------------


def round_to_fp32_bits(S: int, exp2: int) -> int:
    """Round ``S * 2**exp2`` to binary32, round-to-nearest-even, and return its bit pattern.

    Parameters
    ----------
    S : int
        Exact signed integer (any size).
    exp2 : int
        Power-of-two exponent (any sign).

    Returns
    -------
    int
        The binary32 bit pattern in ``[0, 2**32)``. Full subnormals (no flush to zero); a
        magnitude ``>= 2^128 * (1 - 2^-25)`` gives +-Inf; ``S == 0`` gives +0 (``0x00000000``);
        a nonzero value that rounds to zero keeps its sign (IEEE underflow).

    Raises
    ------
    TypeError
        If ``S`` or ``exp2`` is not an integer.

    Notes
    -----
    Pure integer arithmetic. With ``n = S.bit_length()`` the result quantum is
    ``2^q``, ``q = max(exp2 + n - 24, -149)`` (24 significant bits, or the subnormal quantum);
    the integer ``m = round_half_even(|S| * 2^(exp2 - q))`` is then below ``2^24`` (or equal to
    it after a carry) and the pattern is ``((q + 149) << 23) + m``, which also encodes the carry
    and subnormal cases correctly.
    """
    for nm, v in (("S", S), ("exp2", exp2)):
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
            raise TypeError(f"{nm} must be an int, got {type(v).__name__}")
    S, exp2 = int(S), int(exp2)
    if S == 0:
        return 0
    sign = _SIGN32 if S < 0 else 0
    mag = -S if S < 0 else S
    # Overflow rule of the spec, checked exactly: mag * 2^exp2 >= (2^25 - 1) * 2^103.
    thr = (1 << 25) - 1
    if exp2 >= 103:
        overflow = (mag << (exp2 - 103)) >= thr
    else:
        overflow = mag >= (thr << (103 - exp2))
    if overflow:
        return sign | FP32_INF_BITS
    n = mag.bit_length()
    q = max(exp2 + n - 24, -149)
    if q <= exp2:
        m = mag << (exp2 - q)  # exact, fewer than 24 bits
    else:
        sh = q - exp2
        m = mag >> sh
        rem = mag - (m << sh)
        half = 1 << (sh - 1)
        if rem > half or (rem == half and (m & 1)):
            m += 1
    bits = ((q + 149) << 23) + m  # m == 0 only if q == -149: a signed zero
    # Below the threshold RNE never reaches 2^128 (it is exactly the rounding boundary).
    assert bits < FP32_INF_BITS, f"internal: {S}*2^{exp2} rounded to Inf below the threshold"
    return sign | bits


def _unpack32(bits: int) -> tuple[int, int, int, str]:
    """(sign, integer significand, exponent of its unit, kind) of a binary32 pattern."""
    sign = bits >> 31
    e = (bits >> 23) & 0xFF
    frac = bits & 0x7FFFFF
    if e == 0xFF:
        return sign, 0, 0, ("inf" if frac == 0 else "nan")
    if e == 0:
        return sign, frac, -149, "finite"
    return sign, frac | 0x800000, e - 150, "finite"


def fp32_add_bits(x: int, y: int) -> int:
    """IEEE binary32 addition ``x (+) y`` (round-to-nearest-even) on bit patterns.

    Parameters
    ----------
    x, y : int
        binary32 bit patterns in ``[0, 2**32)``.

    Returns
    -------
    int
        Bit pattern of the rounded sum. Any NaN result (NaN operand, ``Inf - Inf``) is the
        canonical ``0x7FC00000``. An exact zero sum is +0 unless both operands are -0
        (``x + (-x) = +0``, ``-0 + -0 = -0``). Subnormals are kept (no flush to zero).

    Raises
    ------
    TypeError
        If an operand is not an integer.
    ValueError
        If an operand is outside ``[0, 2**32)``.

    Notes
    -----
    Computed with Python integers: the exact sum of the two operands (as integers in units of
    the smaller operand's quantum) is rounded once by :func:`round_to_fp32_bits`.
    """
    x = _check_bits32("x", x)
    y = _check_bits32("y", y)
    sx, mx, ex, kx = _unpack32(x)
    sy, my, ey, ky = _unpack32(y)
    if kx == "nan" or ky == "nan":
        return CANONICAL_NAN_BITS
    if kx == "inf" and ky == "inf":
        return x if sx == sy else CANONICAL_NAN_BITS
    if kx == "inf":
        return x
    if ky == "inf":
        return y
    e0 = min(ex, ey)
    vx = mx << (ex - e0)
    vy = my << (ey - e0)
    total = (-vx if sx else vx) + (-vy if sy else vy)
    if total == 0:
        return _SIGN32 if (sx and sy) else 0
    return round_to_fp32_bits(total, e0)


# --------------------------------------------------------------------------
# the engine
# --------------------------------------------------------------------------

_LIMB = 16


def _limbs(p: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Signed (hi, lo) 16-bit limbs of ``sig << (ee - 1)`` (0 for NaN/Inf codes)."""
    mag = p["sig"] << (p["ee"] - 1)
    mag = np.where(p["nan"] | p["inf"], 0, mag)
    # Finite codes: sig < 2^(M+1), ee - 1 <= 2^E - 3 (E4M3 14, E5M2 29, E2M1 2), so
    # |mag| < 2^32 (E5M2: 7 * 2^29); NaN/Inf codes were zeroed above.
    if int(mag.max(initial=0)) >= 1 << (2 * _LIMB):  # pragma: no cover - format invariant
        raise AssertionError("internal: element magnitude exceeds two 16-bit limbs")
    s = np.where(p["sign"] == 1, -1, 1)
    return s * (mag >> _LIMB), s * (mag & ((1 << _LIMB) - 1))


def _block_sums_int(ahi: np.ndarray, alo: np.ndarray, bhi: np.ndarray,
                    blo: np.ndarray) -> np.ndarray:
    """Exact block sums ``S[i, j]`` (object array of Python ints) from limb matrices.

    Exactness: each product ``(sig_a*sig_b) << (ee_a+ee_b-2)`` equals
    ``(sig_a << (ee_a-1)) * (sig_b << (ee_b-1))``; each factor is split into 16-bit limbs
    ``v = hi * 2^16 + lo`` with ``|hi|, |lo| < 2^16``. A limb product is below ``2^32`` and a
    block has at most 32 terms, so each int64 partial sum is below ``2^37`` (no overflow, and
    numpy integer matmul is exact). The partial sums are then combined with Python ints.
    """
    hh = ahi @ bhi
    mid = ahi @ blo + alo @ bhi
    ll = alo @ blo
    return ((hh.astype(object) << (2 * _LIMB)) + (mid.astype(object) << _LIMB)
            + ll.astype(object))


def _check_chunks(chunks: Any, K: int) -> list[int]:
    if chunks is None:
        return [K]
    if not isinstance(chunks, (list, tuple)) or len(chunks) == 0:
        raise TypeError(f"chunks must be a non-empty list of ints, got {chunks!r}")
    out = []
    for i, c in enumerate(chunks):
        if isinstance(c, (bool, np.bool_)) or not isinstance(c, (int, np.integer)) or c < 1:
            raise ValueError(f"chunks[{i}] must be a positive int, got {c!r}")
        if i < len(chunks) - 1 and c % BLOCK:
            raise ValueError(f"chunks[{i}] = {c} is not a multiple of {BLOCK}; only the last "
                             f"MATMUL may end in a short block")
        out.append(int(c))
    if sum(out) != K:
        raise ValueError(f"chunks {out} sum to {sum(out)} but K = {K}")
    return out


def mx_matmul_bits(a_codes: np.ndarray, b_codes: np.ndarray, a_scales: np.ndarray,
                   b_scales: np.ndarray, fmt: str, *,
                   chunks: list[int] | None = None) -> np.ndarray:
    """The FP matrix engine: MX block products, fp32 rounding and accumulation, as bits.

    Parameters
    ----------
    a_codes : numpy.ndarray
        uint8 ``(M, K)`` element codes of A.
    b_codes : numpy.ndarray
        uint8 ``(K, N)`` element codes of B.
    a_scales : numpy.ndarray
        uint8 ``(M, nblk)`` E8M0 scale codes, ``nblk = ceil(K / 32)``; column ``g`` scales the
        K range ``[32 g, 32 g + 32)``.
    b_scales : numpy.ndarray
        uint8 ``(nblk, N)`` E8M0 scale codes.
    fmt : str
        ``"e4m3"``, ``"e5m2"`` or ``"e2m1"`` (both operands).
    chunks : list of int, optional
        K lengths of consecutive MATMUL commands covering ``K`` in order (default ``[K]``).
        All but the last must be multiples of 32. Blocks restart at each MATMUL; the first
        MATMUL writes ``C = acc``, each later one accumulates ``C = C_old (+) acc``.

    Returns
    -------
    numpy.ndarray
        uint32 ``(M, N)`` binary32 bit patterns of C (NaN always ``0x7FC00000``).

    Raises
    ------
    TypeError
        If an array is not a uint8 ndarray, or ``chunks`` is not a list.
    ValueError
        On bad shapes, an unknown ``fmt``, or invalid ``chunks``.

    Notes
    -----
    Per output ``(i, j)`` and per MATMUL, with block ``b`` covering global K range
    ``[k0, k1)``: ``r_b = NaN`` if a scale code is 0xFF or the block is NaN, ``+-Inf`` for an
    Inf block, else ``RNE32(S_b * 2^(2 - 2B - 2M + X_b))``; ``acc = r_0``, then
    ``acc = acc (+) r_b`` in K order.
    """
    f = _get_format(fmt)
    a_codes = _check_codes("a_codes", a_codes, 2)
    b_codes = _check_codes("b_codes", b_codes, 2)
    a_scales = _check_codes("a_scales", a_scales, 2)
    b_scales = _check_codes("b_scales", b_scales, 2)
    M, K = a_codes.shape
    K2, N = b_codes.shape
    if min(M, K, N) < 1:
        raise ValueError(f"empty dimension: a_codes {a_codes.shape}, b_codes {b_codes.shape}")
    if K2 != K:
        raise ValueError(f"inner dimensions differ: a_codes {a_codes.shape} (K={K}) vs "
                         f"b_codes {b_codes.shape} (K={K2})")
    nblk = -(-K // BLOCK)
    if a_scales.shape != (M, nblk):
        raise ValueError(f"a_scales must have shape (M, ceil(K/32)) = {(M, nblk)}, "
                         f"got {a_scales.shape}")
    if b_scales.shape != (nblk, N):
        raise ValueError(f"b_scales must have shape (ceil(K/32), N) = {(nblk, N)}, "
                         f"got {b_scales.shape}")
    chunk_list = _check_chunks(chunks, K)

    pa = _fields(a_codes, f)
    pb = _fields(b_codes, f)
    ahi, alo = _limbs(pa)
    bhi, blo = _limbs(pb)
    i64 = np.int64
    a_nan, b_nan = pa["nan"].astype(i64), pb["nan"].astype(i64)
    a_inf, b_inf = pa["inf"].astype(i64), pb["inf"].astype(i64)
    a_zero, b_zero = pa["zero"].astype(i64), pb["zero"].astype(i64)
    # nonzero, non-NaN (finite nonzero or Inf), split by sign
    a_pos = (~pa["zero"] & ~pa["nan"] & (pa["sign"] == 0)).astype(i64)
    a_neg = (~pa["zero"] & ~pa["nan"] & (pa["sign"] == 1)).astype(i64)
    b_pos = (~pb["zero"] & ~pb["nan"] & (pb["sign"] == 0)).astype(i64)
    b_neg = (~pb["zero"] & ~pb["nan"] & (pb["sign"] == 1)).astype(i64)
    a_ipos, a_ineg = a_inf * (pa["sign"] == 0), a_inf * (pa["sign"] == 1)
    b_ipos, b_ineg = b_inf * (pb["sign"] == 0), b_inf * (pb["sign"] == 1)

    sa_codes = a_scales.astype(i64)
    sb_codes = b_scales.astype(i64)
    C: list[list[int]] | None = None
    k_start = 0
    for clen in chunk_list:
        acc: list[list[int]] | None = None
        for k0 in range(k_start, k_start + clen, BLOCK):
            k1 = min(k0 + BLOCK, k_start + clen)
            g = k0 // BLOCK
            sl = slice(k0, k1)
            S = _block_sums_int(ahi[:, sl], alo[:, sl], bhi[sl, :], blo[sl, :])
            ones_a = np.ones((M, k1 - k0), i64)
            ones_b = np.ones((k1 - k0, N), i64)
            nan_cnt = (a_nan[:, sl] @ ones_b + ones_a @ b_nan[sl, :]
                       + a_inf[:, sl] @ b_zero[sl, :] + a_zero[:, sl] @ b_inf[sl, :])
            pinf_cnt = (a_ipos[:, sl] @ b_pos[sl, :] + a_ineg[:, sl] @ b_neg[sl, :]
                        + a_pos[:, sl] @ b_ipos[sl, :] + a_neg[:, sl] @ b_ineg[sl, :])
            ninf_cnt = (a_ipos[:, sl] @ b_neg[sl, :] + a_ineg[:, sl] @ b_pos[sl, :]
                        + a_pos[:, sl] @ b_ineg[sl, :] + a_neg[:, sl] @ b_ipos[sl, :])
            r = [[0] * N for _ in range(M)]
            for i in range(M):
                xa = int(sa_codes[i, g])
                for j in range(N):
                    xb = int(sb_codes[g, j])
                    if (xa == _SCALE_NAN or xb == _SCALE_NAN or nan_cnt[i, j]
                            or (pinf_cnt[i, j] and ninf_cnt[i, j])):
                        r[i][j] = CANONICAL_NAN_BITS
                    elif pinf_cnt[i, j]:
                        r[i][j] = FP32_INF_BITS
                    elif ninf_cnt[i, j]:
                        r[i][j] = _SIGN32 | FP32_INF_BITS
                    else:
                        X = (xa - _SCALE_BIAS) + (xb - _SCALE_BIAS)
                        r[i][j] = round_to_fp32_bits(S[i, j], f.product_exp + X)
            if acc is None:
                acc = r
            else:
                acc = [[fp32_add_bits(acc[i][j], r[i][j]) for j in range(N)] for i in range(M)]
        assert acc is not None
        if C is None:
            C = acc
        else:
            C = [[fp32_add_bits(C[i][j], acc[i][j]) for j in range(N)] for i in range(M)]
        k_start += clen
    return np.array(C, dtype=np.uint32)


def mx_matmul(a_codes: np.ndarray, b_codes: np.ndarray, a_scales: np.ndarray,
              b_scales: np.ndarray, fmt: str, *, chunks: list[int] | None = None) -> np.ndarray:
    """:func:`mx_matmul_bits` viewed as float32 (same arguments, same errors).

    Returns
    -------
    numpy.ndarray
        float32 ``(M, N)`` array sharing the bit patterns of :func:`mx_matmul_bits`.
    """
    return mx_matmul_bits(a_codes, b_codes, a_scales, b_scales, fmt, chunks=chunks).view(
        np.float32)


def ideal_matmul(a_values: np.ndarray, b_values: np.ndarray) -> np.ndarray:
    """float64 "ideal" product of the *unquantized* operands, for accuracy metrics.

    Parameters
    ----------
    a_values : array_like
        Real ``(M, K)`` values.
    b_values : array_like
        Real ``(K, N)`` values.

    Returns
    -------
    numpy.ndarray
        ``a @ b`` in float64 (BLAS order; not bit-exact, only a reference for metrics).

    Raises
    ------
    TypeError
        If an input is not real numeric.
    ValueError
        If an input is not 2-D or the inner dimensions differ.
    """
    arrs = []
    for nm, x in (("a_values", a_values), ("b_values", b_values)):
        arr = np.asarray(x)
        if arr.dtype.kind not in "biuf":
            raise TypeError(f"{nm} must be real numeric, got dtype {arr.dtype}")
        if arr.ndim != 2:
            raise ValueError(f"{nm} must be 2-D, got shape {arr.shape}")
        arrs.append(arr.astype(np.float64))
    a, b = arrs
    if a.shape[1] != b.shape[0]:
        raise ValueError(f"inner dimensions differ: a_values {a.shape} vs b_values {b.shape}")
    return a @ b
