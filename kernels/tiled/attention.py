"""Single-head flash attention in the tile language: golden/attention.py's steps, every recipe.

S^T = K Q^T on the engine (a word a key, a lane a query: a query block is one B panel of LANES
queries), the online softmax on the vector unit over each key tile, P converted into the B SRAM
and O^T = V^T P^T; the (block, key tile) steps are one pipeline, so the next tile's K and V load
while this one computes. Odd blocks take their key tiles backwards, as the golden's plan does.
int8: P8 = int8(P * 127), the int32 product scaled by s_pv and added to O * alpha. FP8: P in FP8
with the block scale 2^-e (so the B tile stands for P), V^T in MXFP8 with its block scales, and
the engine adds the product, already in O's units, to O * alpha.
"""

from __future__ import annotations

import math

import numpy as np

from kernels import tile


def flash_attention(k, qt, vt, v_scale, s_qk, ot, *, nq: int, tk: int, oc: int, stages: int, causal: bool,
                    lanes: int, rows: int, fmt: str = "int8", p_exp: int = 0):
    """Blocks of ``nq`` query tiles (LANES queries each, one B panel) against key tiles of ``tk``;
    O^T updated ``oc`` query tiles at a time (its product needs no more words than S^T's).
    ``fmt``: P's and V's format; ``v_scale``: int8, s_pv (a scalar); FP8, V^T's block scales,
    which come with its tiles; ``p_exp``: FP8 P is converted as P * 2^p_exp."""
    seq, bq = k.rows, nq * lanes
    steps = []
    for b in range(-(-seq // bq)):
        last_q = min((b + 1) * bq, seq) - 1
        tiles = [k0 for k0 in range(0, seq, tk) if not causal or k0 <= last_q]
        steps += [(b, k0, i, i == len(tiles) - 1) for i, k0 in enumerate(tiles[::-1] if b % 2 else tiles)]
    sqk = tile.load(s_qk[0:1], scalar=True)
    spv = tile.load(v_scale[0:1], scalar=True) if fmt == "int8" else None
    for j, (b, k0, i, last) in enumerate(tile.pipeline(steps, stages=stages)):
        t0, t1 = b * nq, min((b + 1) * nq, qt.panels)
        chunks = [(c, min(c + oc, t1 - t0)) for c in range(0, t1 - t0, oc)]
        if i == 0:
            q = tile.load(qt[t0:t1])                          # the block's query tiles: B panels
        if j == 0 or k0 != steps[j - 1][1]:                   # a block starts with the tile the last one ended on
            kt = tile.load(k[k0 // rows:(k0 + tk) // rows])
            v = tile.load(vt[:, k0:k0 + kt.rows * rows])  # the tile's keys, the last one's padding included
        s = tile.dequant(tile.matmul(kt, q, by="b"), sqk)   # S^T: a row per query tile, a word per key
        mask = _mask(t0 * lanes, k0, t1 - t0, s.words_per_row, seq, causal, lanes)
        if mask is not None:
            s = s + tile.constant_row(mask)
        mt = tile.col_max(s, per_row=True)                  # each query's max over the tile's keys
        m_new = mt if i == 0 else tile.maximum(m, mt)
        p = tile.exp(s - m_new)
        lt = tile.col_sum(p, per_row=True)
        pb = tile.to_b(p, 127.0 if fmt == "int8" else 2.0 ** p_exp, by="b", fmt=fmt)  # P^T: a panel a query tile
        if i:
            alpha = tile.exp(m - m_new)
            l = l * alpha + lt
        else:
            l, o = lt, {}
        for c0, c1 in chunks:                                # O^T: a row per query tile
            if fmt == "int8":
                pv = tile.dequant(tile.matmul(v, pb[c0:c1], by="b"), spv)
                o[c0] = pv if i == 0 else o[c0] * alpha[c0:c1] + pv
            else:                                            # the engine adds the product to O * alpha
                o[c0] = tile.matmul(v, pb[c0:c1], None if i == 0 else o[c0] * alpha[c0:c1], by="b")
        m = m_new
        if last:
            r = tile.recip(l)
            for c0, c1 in chunks:
                out = o[c0] * r[c0:c1]
                for t in range(c1 - c0):
                    tile.store(ot[:, t0 + c0 + t:t0 + c0 + t + 1], out[t].reshape(out.words_per_row, 1)[:ot.rows])


def _mask(q0: int, k0: int, tiles: int, keys: int, seq: int, causal: bool, lanes: int) -> np.ndarray | None:
    """-Inf words where a key is past the sequence or (causal) after the query: for each of
    ``tiles`` query tiles from query ``q0``, ``keys`` words of LANES bits, as one row."""
    kk = k0 + np.arange(keys)[None, :, None]
    qq = q0 + np.arange(tiles)[:, None, None] * lanes + np.arange(lanes)[None, None, :]
    masked = (kk >= seq) | (causal & (kk > qq))
    if not masked.any():
        return None
    return np.where(masked, np.uint32(0xFF800000), np.uint32(0)).reshape(tiles * keys, lanes)


# ---- declaration ---------------------------------------------------------------------------------

from golden.attention import (ATTENTION_RECIPES, AttentionPlan, attention_constants,  # noqa: E402
                              attention_golden, attention_recipe, attention_reference, quantize_attention)
from golden.quant import flush_subnormals  # noqa: E402
from kernels.tile.runtime import TensorSpec  # noqa: E402
from kernels.tile.spec import AtenOp, KernelSpec, Param  # noqa: E402
from rtl.isa import BLOCK  # noqa: E402  (keys per E8M0 scale of an FP8 V)


def _tensors(p):
    s, d, fmt = p["seq"], p["dim"], attention_recipe(p["recipe"]).fmt
    v = [TensorSpec("vt", d, _padded(s), "int8", layout="a_panels"), TensorSpec("s_pv", 1, 1)] if fmt == "int8" else \
        [TensorSpec("vt", d, _padded(s), fmt, layout="a_panels", scales="vs"),
         TensorSpec("vs", d, -(-_padded(s) // BLOCK), "e8m0", layout="a_panels")]
    return [TensorSpec("k", s, d, "int8", layout="a_panels"), TensorSpec("qt", d, s, "int8", layout="b_panels"),
            *v, TensorSpec("s_qk", 1, 1), TensorSpec("ot", d, s, role="out")]


def _padded(seq: int) -> int:
    """V^T's keys padded with zero columns to a multiple of 16 (any array's ROWS divides it): the
    last key panel's padding keys are then zeros in V as in K."""
    return -(-seq // 16) * 16


def _inputs(p, seed, extremes):
    """N(0, 1) Q, K, V; ``extremes``: one key far above the rest, so that P is one-hot. ``fp32``
    keeps them for the golden and the reference; the rest is :func:`operands`."""
    rng = np.random.default_rng(seed)
    q, k, v = (rng.standard_normal((p["seq"], p["dim"])).astype(np.float32) for _ in range(3))
    if extremes:
        k[p["seq"] // 2] = q.mean(axis=0) * 40
    return operands(q, k, v, p["recipe"])


def operands(q: np.ndarray, k: np.ndarray, v: np.ndarray, recipe: str) -> dict:
    """fp32 (S, D) Q, K, V quantized on the host by the recipe (golden/attention.py), as the
    kernel's tensors: K, Q^T, V^T (int8, or FP8 codes with their E8M0 scales ``vs``; keys padded
    with zeros, scales with 2^0) and the fp32 constants; ``fp32`` keeps the inputs."""
    ops = quantize_attention(q, k, v, recipe)
    seq, dim = q.shape
    s_qk, _p_scale, s_pv = attention_constants(ops)
    out = {"k": ops.k8, "qt": np.ascontiguousarray(ops.q8.T), "s_qk": np.array([[s_qk]], np.uint32).view(np.float32),
           "fp32": (q, k, v)}
    if ops.recipe.fp8:
        vt = np.zeros((dim, _padded(seq)), np.uint8)
        vt[:, :seq] = ops.v_codes.T
        vs = np.full((dim, -(-_padded(seq) // BLOCK)), 127, np.uint8)
        vs[:, :ops.v_scales.shape[0]] = ops.v_scales.T
        return {**out, "vt": vt, "vs": vs}
    vt = np.zeros((dim, _padded(seq)), np.int8)
    vt[:, :seq] = ops.v8.T
    return {**out, "vt": vt, "s_pv": np.array([[s_pv]], np.uint32).view(np.float32)}


def _prepare(ins, p, target):
    """FL-NU-001's mitigation where the revision has it (target.lowp), FP8 recipes: V's subnormal
    codes flushed to zero on the host (the kernel's to_b flushes P's on the chip); ``flush``
    tells the golden."""
    fmt = attention_recipe(p["recipe"]).fmt
    if fmt == "int8" or target.lowp is None or not target.lowp.fp8_subnormals_flushed:
        return {}
    return {"vt": flush_subnormals(ins["vt"], fmt)[0], "flush": True}


def _golden(ins, p, lanes):
    """golden/attention.py's kernel golden (the recipe's) with this kernel's plan: blocks of
    ``nq`` query tiles, key tiles of ``tk``; with FL-NU-001's flush of V's codes and P's where it
    ran (``flush``); O^T, as the kernel stores it."""
    plan = AttentionPlan(p["seq"], p["dim"], lanes, lanes, p["nq"] * lanes, p["tk"], p["causal"])
    ops = quantize_attention(*ins["fp32"], p["recipe"])
    flush = bool(ins.get("flush"))
    if flush:
        ops.v_codes = flush_subnormals(ops.v_codes, ops.recipe.fmt)[0]
    return {"ot": np.ascontiguousarray(attention_golden(ops, plan, flush_p=flush).T)}


def _reference(ins, p):
    return {"ot": attention_reference(*ins["fp32"], p["causal"]).T}


_SHAPES = ((8, 32), (8, 28), (8, 24), (8, 16), (8, 12), (4, 16), (4, 12), (8, 8), (4, 8), (2, 8), (1, 8), (1, 4))  # (query tiles a block, keys a tile)


def _args(p, t):
    """The largest blocks (fewest K and V loads) and then key tiles that fit the SRAMs, unless
    given, each with its loads double-buffered (stages 2) if that fits, else with each buffer
    refilled as soon as its last reader is done (stages 1: the next tile's K loads during this
    one's softmax and O^T update, its V during the next S^T)."""
    from kernels.tile.ir import TileError
    from kernels.tile.runtime import fits

    cfg = t.config
    r = attention_recipe(p["recipe"])
    base = {"causal": p["causal"], "lanes": cfg.lanes, "rows": cfg.rows, "fmt": r.fmt, "p_exp": r.p_exp}
    # causal: a key tile as long as a query block, so that the first tile a block takes (its diagonal
    # one, backwards) has a key at or below every query and the running max starts finite
    # (on B1 256x64 causal, measured: 6 x 24 454,154 cycles, 7 x 28 466,322, 5 x 20 474,910, 4 x 16
    # 506,478; 8 x 32 does not fit the default SRAMs)
    shapes = [(nq, nq * cfg.lanes) for nq in (8, 6, 4, 2, 1)] if p["causal"] else \
        [(nq, tk * cfg.rows // 4) for nq, tk in _SHAPES]
    given = [(p["nq"], p["tk"])] if p["nq"] and p["tk"] else \
        [(nq, tk) for nq, tk in shapes if (not p["nq"] or nq == p["nq"]) and (not p["tk"] or tk == p["tk"])]
    if p["causal"] and any(tk != nq * cfg.lanes for nq, tk in given):
        raise TileError(f"causal flash attention takes key tiles of one query block (tk = nq x {cfg.lanes}), "
                        f"not nq={p['nq']}, tk={p['tk']}: a block's first tile must reach below every query")
    if r.fp8:  # a V^T tile's keys start at one of its MX blocks (of 32 keys) or lie within one
        if p["tk"] and p["tk"] % BLOCK and BLOCK % p["tk"]:
            raise TileError(f"the {r.name} recipe takes key tiles that divide {BLOCK} or are a multiple of it "
                            f"(V's block scales cover {BLOCK} keys), not tk={p['tk']}")
        given = [(nq, tk) for nq, tk in given if tk % BLOCK == 0 or BLOCK % tk == 0]
    errors = []
    for nq, tk in given:
        dp = -(-p["dim"] // cfg.rows) * cfg.rows
        oc = max(1, min(nq, nq * tk // dp))  # O^T's product in at most S^T's words
        # one buffer first: a shape that does not fit with it does not fit double-buffered either
        fitted = None
        for stages in ((p["stages"],) if p["stages"] else (1, 2)):
            args = {**base, "nq": nq, "tk": tk, "oc": oc, "stages": stages}
            try:
                fits(flash_attention, cfg, _tensors({**p, "seq": _fit_seq(p["seq"], nq * cfg.lanes, tk)}), args,
                     {"gemm": t.constraints, "lowp": t.lowp})
                fitted = args
            except TileError as e:
                errors.append(e)
                break
        if fitted is not None:
            return fitted
    if len(given) == 1 and p["stages"]:
        raise errors[-1]
    raise TileError(f"no query block and key tile of flash attention {p['seq']}x{p['dim']} fit this chip's SRAMs"
                    f" (the last tried: {errors[-1]})")


def _fit_seq(seq: int, bq: int, tk: int) -> int:
    """A sequence as long as three periods of (block, key tile) plus ``seq``'s tail: its steps reach
    the steady state of the pipeline, and its working set is the full sequence's (the placement
    holds at most two steps' tiles live), so a tiling is tried on it in a fraction of the time."""
    period = math.lcm(bq, tk)
    return seq if seq <= 4 * period else 3 * period + seq % period


def _requires(p, cfg) -> str | None:
    fmt = attention_recipe(p["recipe"]).fmt
    if fmt != "int8" and fmt not in cfg.formats:
        return (f"recipe {p['recipe']} runs an {fmt} MATMUL, and this chip is built without that format "
                f"(formats: {', '.join(cfg.formats)}); use the int8 recipe or --formats with {fmt}")
    return None


SPECS = [KernelSpec(
    name="flash_attention", aliases=("attention",), summary="single-head flash attention, written in the tile language "
    "(softmax(Q K^T / sqrt(D)) V; recipes int8, fp8-e4m3, fp8-e5m2)", source=flash_attention,
    params=(Param("seq", int, 64, "sequence length (queries = keys)", 1, 4096, shape=True),
            Param("dim", int, 16, "head dimension", 1, 256, shape=True),
            Param("causal", bool, False, "mask keys after each query"),
            Param("recipe", str, "int8", "how P and V are quantized (golden/attention_recipes.py)",
                  choices=tuple(ATTENTION_RECIPES)),
            Param("nq", int, 0, "query tiles (of LANES queries) a block (0: the most that fit)", 0, 64),
            Param("tk", int, 0, "keys a tile, a multiple of ROWS (0: the most that fit)", 0, 1024),
            Param("stages", int, 0, "load buffers per operand (2: double-buffered; 1: refilled once read; "
                  "0: 2 if it fits)", 0, 2)),
    tensors=_tensors, inputs=_inputs, golden=_golden, reference=_reference, kernel_args=_args, requires=_requires,
    prepare=_prepare,
    macs=lambda p: 2 * p["seq"] * p["seq"] * p["dim"] // (2 if p["causal"] else 1),
    shape_from={"seq": ("k", 0), "dim": ("k", 1)}, units=("ENGINE", "SRAM", "CMDPROC", "DMA", "VECTOR"),
    # SDPA of floats: firstlight/torch quantizes q, k, v with a recipe and calls this kernel per head
    aten=AtenOp("aten::scaled_dot_product_attention"),
    bench=({"seq": 256, "dim": 64}, {"seq": 256, "dim": 64, "causal": True}),
    bringup=({"seq": 9, "dim": 8, "causal": True}, {"seq": 9, "dim": 8, "causal": True, "recipe": "fp8-e4m3"}), 
    examples=("--seq 64 --dim 16", "--seq 256 --dim 64 --causal --rev A0", "--seq 128 --dim 32 --recipe fp8-e4m3"))]
