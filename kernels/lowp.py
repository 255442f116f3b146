"""Low-precision GEMM: float32 in, a quantization recipe, the chip, float32 out plus metrics.

Recipes (golden/quant.py): int8 per-tensor / per-channel run on the int8 path and are
dequantized in software; FP8 per-tensor and MX (block-scaled E4M3/E5M2/E2M1) run on the FP path
(docs/numerics.md). Per-tensor FP8 is the FP path with unit block scales; the tensor scales are
applied to the fp32 result in software. K is zero-padded to a multiple of 32 for the FP path.

The result records exactly what ran (codes, scales, chunking) so that a golden can reproduce
the chip's output bit for bit (``firstlight.jobs.checks.lowp_reference``), and the metrics
against the float64 ideal.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

import golden
from golden import quant
from rtl.isa import BLOCK, Format
from workarounds import Mitigations

from .gemm import gemm
from .stats import KernelStats
from .tile.spec import get, run_spec

if TYPE_CHECKING:  # the protocol of the device surface a kernel uses
    from cosim.device import KernelDevice

__all__ = ["gemm_lowp", "mx_gemm_codes", "FMT_CODES", "LowpResult", "FpRun", "Int8Run"]

FMT_CODES = {"e4m3": Format.E4M3, "e5m2": Format.E5M2, "e2m1": Format.E2M1}


@dataclass
class FpRun:
    """What ran on the FP path: element codes, E8M0 block scales, K per MATMUL, the chip's bits."""

    fmt: str
    a_codes: np.ndarray
    b_codes: np.ndarray
    a_scales: np.ndarray
    b_scales: np.ndarray
    chunks: list[int]
    tensor_scale: float
    bits: np.ndarray  # uint32 fp32 bit patterns the chip produced


@dataclass
class Int8Run:
    """What ran on the int8 path: the quantized operands and the chip's int32 product."""

    qa: np.ndarray
    qb: np.ndarray
    c_int: np.ndarray


@dataclass
class LowpResult:
    recipe: str
    c: np.ndarray  # float32 (M, N)
    stats: KernelStats
    sqnr_db: float  # vs the float64 ideal
    max_abs: float
    fp: FpRun | None = None
    int8: Int8Run | None = None


def _check_float(name, x):
    if not isinstance(x, np.ndarray) or x.dtype != np.float32 or x.ndim != 2 or 0 in x.shape:
        got = f"{type(x).__name__} {getattr(x, 'dtype', '')} {getattr(x, 'shape', '')}"
        raise TypeError(f"{name} must be a non-empty 2-D float32 array (quantizers round from float32), got {got}")
    if not np.isfinite(x).all():
        bad = tuple(int(i) for i in np.argwhere(~np.isfinite(x))[0])
        raise ValueError(f"{name} has a non-finite value at {bad}: the quantization recipes cannot carry NaN/Inf")


async def mx_gemm_codes(dev: KernelDevice, a_codes, b_codes, a_scales, b_scales, fmt: str, *, mitigations: Mitigations,
                        k_chunk=None, budget_cycles=None) -> tuple[np.ndarray, KernelStats]:
    """Run element codes (M,K)/(K,N) with E8M0 block scales (M,K/32)/(K/32,N) on the FP path: the
    tile-language kernel kernels/tiled/gemm_fp.py.

    Returns ``(bits uint32 (M,N), stats)``; ``stats.chunks`` lists the K length of each MATMUL
    so ``golden.mx.mx_matmul_bits(..., chunks=...)`` reproduces the bits.
    """
    cfg = dev.config
    if fmt not in FMT_CODES:
        raise ValueError(f"format must be one of {', '.join(FMT_CODES)}, got {fmt!r}")
    if fmt not in cfg.formats:
        raise ValueError(f"this chip has no {fmt} path (CAPS formats: {', '.join(cfg.formats)})")
    m, k = a_codes.shape
    n = b_codes.shape[1]
    if k % BLOCK or b_codes.shape[0] != k:
        raise ValueError(f"K must match and be a multiple of {BLOCK} (pad with zeros), got {a_codes.shape} x {b_codes.shape}")
    for name, arr, shape in (("a_codes", a_codes, (m, k)), ("b_codes", b_codes, (k, n)),
                             ("a_scales", a_scales, (m, k // BLOCK)), ("b_scales", b_scales, (k // BLOCK, n))):
        what = "E8M0 codes" if "scales" in name else f"{fmt} element codes"
        if not isinstance(arr, np.ndarray) or arr.dtype != np.uint8 or arr.shape != shape:
            raise ValueError(f"{name} must be uint8 {what} of shape {shape}, "
                             f"got {getattr(arr, 'dtype', type(arr).__name__)} {getattr(arr, 'shape', '')}")
    # a recipe of this format without a tensor scale: the codes and scales are given, not derived
    recipe = "mxfp4-e2m1-floor" if fmt == "e2m1" else f"fp8-{fmt}-cast"
    spec = get("gemm_fp")
    p = spec.resolve({"m": m, "n": n, "k": k, "recipe": recipe, "kc": int(k_chunk or 0)})
    ins = {"a": a_codes, "b": b_codes, "a_scales": a_scales, "b_scales": b_scales}
    out, stats = await run_spec(dev, spec, p, ins, mitigations=mitigations, budget_cycles=budget_cycles)
    kc = stats.plan["kc"]
    stats.chunks = [min(kc, k - k0) for k0 in range(0, k, kc)]
    stats.kernel = f"gemm_{fmt}"  # the format it ran, as the FP GEMM has always been named
    return out["c"].view(np.uint32).copy(), stats


async def gemm_lowp(dev: KernelDevice, a: np.ndarray, b: np.ndarray, recipe: str, *, mitigations: Mitigations, k_chunk=None,
                    budget_cycles=None) -> LowpResult:
    """Quantize float32 ``a`` (M,K) and ``b`` (K,N) with ``recipe``, run on the chip, dequantize.

    Returns a :class:`LowpResult`: the float32 output, stats (with ``recipe`` and mitigations),
    the metrics vs the float64 ideal, and exactly what ran (``fp`` or ``int8``).
    """
    r = quant.recipe(recipe)
    _check_float("a", a)
    _check_float("b", b)
    if a.shape[1] != b.shape[0]:
        raise ValueError(f"inner dimensions differ: a is {a.shape}, b is {b.shape}")
    ideal = golden.mx.ideal_matmul(a.astype(np.float64), b.astype(np.float64))
    flush = mitigations.lowp.fp8_subnormals_flushed
    fp_run = int8_run = None
    if r.kind == "int8":
        axis_a, axis_b = (None, None) if r.granularity == "tensor" else (0, 1)
        qa, sa = quant.int8_symmetric(a, axis=axis_a)
        qb, sb = quant.int8_symmetric(b, axis=axis_b)
        c_int, stats = await gemm(dev, qa, qb, mitigations=mitigations, k_chunk=k_chunk, budget_cycles=budget_cycles)
        int8_run = Int8Run(qa, qb, c_int)
        sa_col = np.asarray(sa, np.float64).reshape(-1, 1) if axis_a is not None else float(sa)
        sb_row = np.asarray(sb, np.float64).reshape(1, -1) if axis_b is not None else float(sb)
        c = (c_int.astype(np.float64) * sa_col * sb_row).astype(np.float32)
    else:
        from .tiled.gemm_fp import quantize

        q = quantize(a, b, recipe, flush)
        ca, cb, a_sc, b_sc = q["a"], q["b"], q["a_scales"], q["b_scales"]
        tensor_scale = q["tensor_scale"]  # applied to the fp32 result in software, in float64
        notes = []
        if flush and r.kind == "fp8":
            notes.append(f"FL-NU-001: {r.granularity} FP8 ran with per-block rceil scales")
        if flush and r.fmt in ("e4m3", "e5m2"):
            notes.append(f"FL-NU-001: {q['flushed']} subnormal codes flushed to zero in software")
        bits, stats = await mx_gemm_codes(dev, ca, cb, a_sc, b_sc, r.fmt, mitigations=mitigations, k_chunk=k_chunk,
                                          budget_cycles=budget_cycles)
        c = (bits.view(np.float32).astype(np.float64) * tensor_scale).astype(np.float32)
        fp_run = FpRun(r.fmt, ca, cb, a_sc, b_sc, list(stats.chunks), tensor_scale, bits)
        stats.notes = notes
    stats.recipe = recipe
    with np.errstate(all="ignore"):
        sqnr = float(golden.sqnr_db(ideal, c.astype(np.float64))) if np.isfinite(c).all() else float("nan")
    max_abs = float(np.max(np.abs(ideal - c.astype(np.float64))))
    return LowpResult(recipe, c, stats, sqnr, max_abs, fp_run, int8_run)
