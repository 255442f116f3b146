"""Single-head flash attention, int8 recipe, in the tile language: golden/attention.py's steps.

S^T = K Q^T on the engine (a word a key, a lane a query: a query block is one B panel of LANES
queries), the online softmax on the vector unit over each key tile, P converted into the B SRAM
and O^T = V^T P^T; the (block, key tile) steps are one pipeline, so the next tile's K and V load
while this one computes. Odd blocks take their key tiles backwards, as the golden's plan does.
"""

from __future__ import annotations

import math

import numpy as np

from kernels import tile


def flash_attention(k, qt, vt, s_qk, s_pv, ot, *, nq: int, tk: int, oc: int, stages: int, causal: bool,
                    lanes: int, rows: int):
    """Blocks of ``nq`` query tiles (LANES queries each, one B panel) against key tiles of ``tk``;
    O^T updated ``oc`` query tiles at a time (its product needs no more words than S^T's)."""
    seq, bq = k.rows, nq * lanes
    steps = []
    for b in range(-(-seq // bq)):
        last_q = min((b + 1) * bq, seq) - 1
        tiles = [k0 for k0 in range(0, seq, tk) if not causal or k0 <= last_q]
        steps += [(b, k0, i, i == len(tiles) - 1) for i, k0 in enumerate(tiles[::-1] if b % 2 else tiles)]
    sqk, spv = tile.load(s_qk[0:1], scalar=True), tile.load(s_pv[0:1], scalar=True)
    for b, k0, i, last in tile.pipeline(steps, stages=stages):
        t0, t1 = b * nq, min((b + 1) * nq, qt.panels)
        chunks = [(c, min(c + oc, t1 - t0)) for c in range(0, t1 - t0, oc)]
        if i == 0:
            q = tile.load(qt[t0:t1])                          # the block's query tiles: B panels
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
        pb = tile.to_b(p, 127.0, by="b")                     # P^T's panels, one per query tile
        if i:
            alpha = tile.exp(m - m_new)
            l = l * alpha + lt
        else:
            l, o = lt, {}
        for c0, c1 in chunks:                                # O^T: a row per query tile
            pv = tile.dequant(tile.matmul(v, pb[c0:c1], by="b"), spv)
            o[c0] = pv if i == 0 else o[c0] * alpha[c0:c1] + pv
        m = m_new
        if last:
            r = tile.recip(l)
            for c0, c1 in chunks:
                out = o[c0] * r[c0:c1]
                for t in range(c1 - c0):
                    tile.store(ot[:, t0 + c0 + t:t0 + c0 + t + 1], out[t].reshape(out.words_per_row, 1))


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

from golden.attention import (AttentionPlan, attention_golden, attention_reference,  # noqa: E402
                              attention_scales, quantize_attention)
from kernels.tile.runtime import TensorSpec  # noqa: E402
from kernels.tile.spec import KernelSpec, Param  # noqa: E402


def _tensors(p):
    s, d = p["seq"], p["dim"]
    return [TensorSpec("k", s, d, "int8", layout="a_panels"), TensorSpec("qt", d, s, "int8", layout="b_panels"),
            TensorSpec("vt", d, _padded(s), "int8", layout="a_panels"), TensorSpec("s_qk", 1, 1),
            TensorSpec("s_pv", 1, 1), TensorSpec("ot", d, s, role="out")]


def _padded(seq: int) -> int:
    """V^T's keys padded with zero columns to a multiple of 16 (any array's ROWS divides it): the
    last key panel's padding keys are then zeros in V as in K."""
    return -(-seq // 16) * 16


def _inputs(p, seed, extremes):
    """N(0, 1) Q, K, V quantized per tensor to int8 on the host (the int8 recipe); ``extremes``:
    one key far above the rest, so that P is one-hot. The scales are inputs: the data gives them.
    ``fp32`` keeps the unquantized Q, K, V for the golden and the reference."""
    rng = np.random.default_rng(seed)
    q, k, v = (rng.standard_normal((p["seq"], p["dim"])).astype(np.float32) for _ in range(3))
    if extremes:
        k[p["seq"] // 2] = q.mean(axis=0) * 40
    ops = quantize_attention(q, k, v, "int8")
    s_qk, _c127, s_pv = attention_scales(ops.sq, ops.sk, ops.sv, p["dim"])
    vt = np.zeros((p["dim"], _padded(p["seq"])), np.int8)
    vt[:, :p["seq"]] = ops.v8.T
    return {"k": ops.k8, "qt": np.ascontiguousarray(ops.q8.T), "vt": vt,
            "s_qk": np.array([[s_qk]], np.uint32).view(np.float32),
            "s_pv": np.array([[s_pv]], np.uint32).view(np.float32), "fp32": (q, k, v)}


def _golden(ins, p, lanes):
    """golden/attention.py's kernel golden (the int8 recipe) with this kernel's plan: blocks of
    ``nq`` query tiles, key tiles of ``tk``; O^T, as the kernel stores it."""
    plan = AttentionPlan(p["seq"], p["dim"], lanes, lanes, p["nq"] * lanes, p["tk"], p["causal"])
    return {"ot": np.ascontiguousarray(attention_golden(quantize_attention(*ins["fp32"], "int8"), plan).T)}


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
    base = {"causal": p["causal"], "lanes": cfg.lanes, "rows": cfg.rows}
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
                     t.constraints)
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


SPECS = [KernelSpec(
    name="flash_attention", summary="single-head flash attention, int8 recipe, written in the tile language "
    "(softmax(Q K^T / sqrt(D)) V)", source=flash_attention,
    params=(Param("seq", int, 64, "sequence length (queries = keys)", 1, 4096, shape=True),
            Param("dim", int, 16, "head dimension", 1, 256, shape=True),
            Param("causal", bool, False, "mask keys after each query"),
            Param("nq", int, 0, "query tiles (of LANES queries) a block (0: the most that fit)", 0, 64),
            Param("tk", int, 0, "keys a tile, a multiple of ROWS (0: the most that fit)", 0, 1024),
            Param("stages", int, 0, "load buffers per operand (2: double-buffered; 1: refilled once read; "
                  "0: 2 if it fits)", 0, 2)),
    tensors=_tensors, inputs=_inputs, golden=_golden, reference=_reference, kernel_args=_args,
    macs=lambda p: 2 * p["seq"] * p["seq"] * p["dim"] // (2 if p["causal"] else 1),
    shape_from={"seq": ("k", 0), "dim": ("k", 1)}, units=("ENGINE", "SRAM", "CMDPROC", "DMA", "VECTOR"),
    aten="aten::_scaled_dot_product_attention_math",
    bench=({"seq": 256, "dim": 64}, {"seq": 256, "dim": 64, "causal": True}),
    bringup=({"seq": 9, "dim": 8, "causal": True},), examples=("--seq 64 --dim 16", "--seq 256 --dim 64 --causal --rev A0"))]
