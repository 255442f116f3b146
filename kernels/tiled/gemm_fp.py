"""Low-precision GEMM, C = A (M x K) @ B (K x N) in FP8 / MX formats: the tile kernel of
kernels/lowp.py's FP path. The host quantizes float32 a and b by the recipe (golden/quant.py) into
element codes and E8M0 block scales (one per 32 K steps); every load of an A or B tile brings its
scales into SA / SB, and the MATMULs accumulate fp32, K in chunks of whole blocks. Per-tensor FP8
multiplies each tile row by the product of the two tensor scales (VEC FMUL) before its store.
golden.mx.mx_matmul_bits is the reference, bit for bit."""

from __future__ import annotations

from kernels import tile
from kernels.tiled.gemm import chains


def lowp_gemm(a, b, a_scales, b_scales, *rest, ga: int, gb: int, kc: int, stages: int = 2):
    *tensor_scale, c = rest  # a_scales, b_scales: loaded with a and b (their TensorSpec names them)
    ts = tile.load(tensor_scale[0][0], scalar=True) if tensor_scale else None
    for i, j, acc, _ in chains(a, b, ga=ga, gb=gb, kc=kc, stages=stages):  # the int8 GEMM's loop
        for p in range(acc.rows):  # the chain is done: each tile row (times the tensor scales) stored
            tile.store(c[i + p, j:j + gb], acc[p] if ts is None else acc[p] * ts)


# ---- declaration ---------------------------------------------------------------------------------

import numpy as np  # noqa: E402

import golden  # noqa: E402
from golden import quant  # noqa: E402
from golden.vector import bits, floats, vector_op  # noqa: E402
from kernels.tile.ir import TileError  # noqa: E402
from kernels.tile.runtime import TensorSpec  # noqa: E402
from kernels.tile.spec import KernelSpec, Param  # noqa: E402
from rtl.isa import BLOCK  # noqa: E402  (K steps per E8M0 scale)

FP_RECIPES = tuple(n for n, r in quant.RECIPES.items() if r.kind != "int8")


def _recipe(p):
    r = quant.recipe(p["recipe"])
    if r.kind == "int8":
        raise TileError(f"gemm_fp runs the FP path; recipe {p['recipe']} is int8: run it with gemm "
                        f"(firstlight run gemm), dequantizing on the host as kernels/lowp.py does")
    return r


def _kp(p) -> int:
    """K zero-padded to whole blocks (exact: zero codes add nothing)."""
    return -(-p["k"] // BLOCK) * BLOCK


def _tensors(p):
    r, m, n, kp = _recipe(p), p["m"], p["n"], _kp(p)
    ts = [TensorSpec("tscale", 1, 1)] if r.kind == "fp8" and r.granularity == "tensor" else []
    return [TensorSpec("a", m, kp, r.fmt, layout="a_panels", scales="a_scales"),
            TensorSpec("b", kp, n, r.fmt, layout="b_panels", scales="b_scales"),
            TensorSpec("a_scales", m, kp // BLOCK, "e8m0", layout="a_panels"),
            TensorSpec("b_scales", kp // BLOCK, n, "e8m0", layout="b_panels"),
            *ts, TensorSpec("c", m, n, "fp32", role="out", layout="c_tiles")]


def quantize(a: np.ndarray, b: np.ndarray, recipe: str, flush: bool = False) -> dict:
    """The recipe on the host, as kernels/lowp.py runs it: K padded to whole blocks; per-tensor /
    cast FP8 with unit block scales (and the product of the tensor scales), MX with its rule.
    ``flush`` (FL-NU-001, the chip reads FP8 subnormals as zero): FP8 takes per-block rceil
    scales, and any code still subnormal is flushed to zero, so the chip and the golden agree
    (``flushed``: how many codes were; ``tensor_scale``: the float64 product of the tensor scales)."""
    r = quant.recipe(recipe)
    ap, bp = quant.pad_to_block(a, axis=1), quant.pad_to_block(b, axis=0)
    kp = ap.shape[1]
    ts = 1.0
    if r.kind == "fp8" and not flush:
        if r.granularity == "cast":
            ca, cb = quant.quantize_elements(ap, r.fmt), quant.quantize_elements(bp, r.fmt)
        else:
            (ca, ta), (cb, tb) = quant.fp8_per_tensor(ap, r.fmt), quant.fp8_per_tensor(bp, r.fmt)
            ts = float(ta) * float(tb)
        sa = np.full((ap.shape[0], kp // BLOCK), 127, np.uint8)
        sb = np.full((kp // BLOCK, bp.shape[1]), 127, np.uint8)
    else:
        rule = r.rule or "rceil"
        ca, sa = quant.mx_quantize(ap, r.fmt, rule, axis=1)
        cb, sb = quant.mx_quantize(bp, r.fmt, rule, axis=0)
    flushed = 0
    if flush and r.fmt in ("e4m3", "e5m2"):
        ca, fa = quant.flush_subnormals(ca, r.fmt)
        cb, fb = quant.flush_subnormals(cb, r.fmt)
        flushed = fa + fb
    out = {"a": ca, "b": cb, "a_scales": sa, "b_scales": sb, "flushed": flushed, "tensor_scale": ts}
    if r.kind == "fp8" and r.granularity == "tensor":
        out["tscale"] = np.array([[ts]], np.float32)
    return out


def _inputs(p, seed, extremes):
    """Seeded float32 a, b (normal; ``extremes``: each value scaled by 2**[-24, 24) and a tenth
    of them zero, so blocks span the formats' range and the subnormals), quantized by the recipe
    as the chip is specified (``_prepare`` redoes it under FL-NU-001). The floats ride along as
    ``a_f32`` / ``b_f32`` for the reference."""
    _recipe(p)
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((p["m"], p["k"])).astype(np.float32)
    b = rng.standard_normal((p["k"], p["n"])).astype(np.float32)
    if extremes:
        a *= np.exp2(rng.integers(-24, 24, a.shape)).astype(np.float32) * (rng.random(a.shape) > 0.1)
        b *= np.exp2(rng.integers(-24, 24, b.shape)).astype(np.float32) * (rng.random(b.shape) > 0.1)
    return {**quantize(a, b, p["recipe"]), "a_f32": a, "b_f32": b}


def _prepare(ins, p, target):
    """FL-NU-001's mitigation where the revision has it (target.lowp): the recipe again, with
    per-block rceil scales and the remaining subnormal codes flushed (codes given without their
    floats, as a session may: only flushed)."""
    if target.lowp is None or not target.lowp.fp8_subnormals_flushed:
        return {}
    if "a_f32" in ins:
        return quantize(ins["a_f32"], ins["b_f32"], p["recipe"], flush=True)
    fmt = _recipe(p).fmt
    if fmt not in ("e4m3", "e5m2"):
        return {}
    return {t: quant.flush_subnormals(ins[t], fmt)[0] for t in ("a", "b")}


def _golden(i, p, lanes):
    """golden.mx (docs/numerics.md's block sums, fp32 rounding and accumulation, per MATMUL of
    ``kc`` K steps), then VEC FMUL by the tensor scale for per-tensor FP8."""
    kp, kc = _kp(p), p["kc"]
    chunks = [min(kc, kp - k0) for k0 in range(0, kp, kc)]
    c = golden.mx.mx_matmul_bits(i["a"], i["b"], i["a_scales"], i["b_scales"], _recipe(p).fmt, chunks=chunks)
    if "tscale" in i:
        c = vector_op("fmul", c, bits(i["tscale"].reshape(())))
    return {"c": floats(c)}


def _reference(i, p):
    if "a_f32" not in i:
        return {}
    return {"c": golden.mx.ideal_matmul(i["a_f32"].astype(np.float64), i["b_f32"].astype(np.float64))}


def _args(p, t):
    """The int8 GEMM's planner (kernels/tiled/gemm.py) on the padded K, chunks of whole blocks
    (a block's scale is per MATMUL), a word kept for the tensor scale; double-buffered, or (an
    operand SRAM too small for two buffers of a block, as a 64-word one on A0, whose A panels take
    a word more) one buffer, each chunk's loads after the last one's MATMULs (stages=1)."""
    from kernels.tiled.gemm import _args as plan

    r = _recipe(p)
    q = {**p, "k": _kp(p), "epilogue": "none"}
    reserve = 1 if r.kind == "fp8" and r.granularity == "tensor" else 0
    try:
        return {**plan(q, t, block=BLOCK, acc_reserved=reserve), "stages": 2}
    except ValueError:
        pass
    try:
        return {**plan(q, t, block=BLOCK, acc_reserved=reserve, nbuf=1), "stages": 1}
    except ValueError as e:
        extra = t.constraints is not None and t.constraints.repeat_first_a_word
        raise TileError(f"{e}: an operand buffer needs a panel of at least one {BLOCK}-step block"
                        + (" plus FL-ME-002's copy of its first word" if extra else "")
                        + f" ({t.config.operand_depth} words per operand SRAM)") from None


def _requires(p, config):
    fmt = _recipe(p).fmt
    if fmt not in config.formats:
        return (f"recipe {p['recipe']} runs {fmt} MATMULs, and this chip was built without that format "
                f"(its formats: {', '.join(config.formats)}; --formats chooses them)")
    return None


SPECS = [KernelSpec(
    name="gemm_fp", summary="FP8 / MX block-scaled GEMM written in the tile language, C = A(MxK) @ B(KxN), "
    "quantized on the host by a recipe, fp32 out",
    source=lowp_gemm,
    params=(Param("m", int, 64, "rows of A and C", 1, 4096, shape=True),
            Param("n", int, 64, "columns of B and C", 1, 4096, shape=True),
            Param("k", int, 256, "the inner dimension (zero-padded to a multiple of 32)", 1, 65535, shape=True),
            Param("recipe", str, "mxfp8-e4m3-rceil", "the quantization recipe (golden/quant.py; the int8 ones run "
                  "with gemm)", choices=tuple(quant.RECIPES)),
            Param("ga", int, 0, "tile rows per group (0: the planner's)", 0, 4096),
            Param("gb", int, 0, "tiles per group row (0: the planner's)", 0, 4096),
            Param("kc", int, 0, "at most this many K steps per chunk, whole blocks of 32 (0: the planner's)",
                  0, 65535)),
    tensors=_tensors, inputs=_inputs, golden=_golden, reference=_reference, prepare=_prepare, requires=_requires,
    kernel_args=_args, macs=lambda p: p["m"] * p["n"] * p["k"],
    shape_from={"m": ("a", 0), "k": ("a", 1), "n": ("b", 1)}, needs=(), units=("ENGINE", "SRAM", "CMDPROC", "DMA"),
    bench=({"m": 64, "n": 64, "k": 256, "recipe": "mxfp8-e4m3-rceil"},),
    bringup=({"m": 21, "n": 19, "k": 70},),
    examples=("--m 64 --n 64 --k 256 --recipe mxfp8-e4m3-rceil", "--m 21 --n 19 --k 70 --recipe fp8-e4m3-tensor --rev A0",
              "--m 32 --n 32 --k 128 --recipe mxfp4-e2m1-floor"))]
