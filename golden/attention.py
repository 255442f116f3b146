"""Kernel golden of single-head flash attention on the chip (kernels/tiled/attention.py), step for step,
and the float64 reference of the mathematics.

Recipes (:data:`ATTENTION_RECIPES`, ``run attention --recipe NAME``). In every recipe Q and K are
quantized per tensor to symmetric int8 on the host (golden.quant.int8_symmetric) and S^T = K Q^T
is exact in int32 on the matrix engine; the recipes differ in P and V:

* ``int8``: V per tensor int8; P8 = int8(P * 127) (CVT_I8); O^T = V^T P8^T exact in int32, then
  scaled by s_pv = fp32(s_v / 127) (DEQ).
* ``fp8-e4m3``, ``fp8-e5m2``: V^T in that FP8 format with MX block scales (golden.quant.mx_quantize,
  rule ``rceil``, one E8M0 scale per 32 consecutive keys of one head dimension, the K axis of
  the product); P8 = FP8(P * 2^e) (CVT_F8, e = 8 for E4M3, 15 for E5M2: P's largest value 1
  lands on 2^e, below the format's maximum, and P's small values stay clear of the subnormals),
  with the block scale 2^-e (E8M0 code 127 - e) for every query. O^T = V^T P8^T is then one FP8
  MATMUL per (query tile, head-dimension panel) (golden.mx.mx_matmul_bits, K = the key tile),
  already in the output's units, accumulated into O by the engine (C_old (+) acc).

The chip computes S^T = K Q^T exactly in int32 (the matrix engine), so that a word of S^T holds
one key's scores for LANES queries and every per-query quantity (running max m, running sum l,
the rescale factor) is a word of LANES lanes. Per query block of ``bq`` queries and key tile of
``tk`` keys:

1. S = fp32(S^T_int32) * s_qk, with s_qk = fp32(s_q * s_k / sqrt(D)); masked entries (causal:
   key > query; padding keys past the sequence) get + (-Inf);
2. mt = the lane-wise maximum over the tile's keys (FOLD, first key first);
3. first tile: m = mt; later: m_new = max(m, mt), alpha = exp(m - m_new);
4. P = exp(S - m_new);  lt = the lane-wise sum over the keys (FOLD);
5. first: l = lt; later: l = l * alpha + lt;
6. P8 = the recipe's conversion of P, the B operand of O^T = V^T P8^T;
7. T = the product in fp32 (int8: fp32(O^T_int32) * s_pv; FP8: the MATMUL's result);
   first: O = T; later: O = O * alpha + T (one FMUL, then one IEEE add);
8. after the last tile: O = O * recip(l).

Every fp32 step is golden.vector's (IEEE RNE, the documented exp and reciprocal), and the FP8
product golden.mx's, so the chip's result is this function's bit for bit. Key tiles wholly above
the diagonal of a causal block are skipped, as the kernel skips them; odd blocks take their key
tiles in reverse order (AttentionPlan.tiles).

Error attribution: :func:`attention_golden` takes ``exact=`` a set of stages (``"qk"``: S from
the unquantized Q and K in float64; ``"p"``: P not converted; ``"v"``: V not quantized) whose
quantization it skips, computing that stage's product in float64 and rounding it once to fp32;
the SQNR with one stage exact shows how much of the error that stage's quantization causes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .mx import BLOCK as MX_BLOCK
from .mx import mx_matmul_bits
from .attention_recipes import ATTENTION_RECIPES, AttentionRecipe, attention_recipe
from .quant import FORMATS, decode_elements, int8_symmetric, mx_dequantize, mx_quantize, pad_to_block
from .vector import bits, floats, fold_words, to_fp8, to_int8, vector_op

__all__ = ["AttentionPlan", "AttentionRecipe", "ATTENTION_RECIPES", "AttentionOperands", "EXACT_STAGES",
           "attention_recipe", "quantize_attention", "attention_golden", "attention_constants", "padded_v",
           "quantize_qkv", "attention_rows", "attention_reference", "tile_mask", "needed_tiles", "attention_scales"]

NEG_INF = 0xFF800000
E8M0_BIAS = 127
EXACT_STAGES = ("qk", "p", "v")  # what attention_golden(exact=...) can take out of the quantization


class AttentionPlan:
    """Sequence length, head dim, the chip's LANES and ROWS, query block and key tile sizes."""

    def __init__(self, seq: int, dim: int, lanes: int, rows: int, bq: int, tk: int, causal: bool):
        self.seq, self.dim, self.lanes, self.rows, self.bq, self.tk, self.causal = seq, dim, lanes, rows, bq, tk, causal
        self.nq = bq // lanes  # query tiles per block (words per key in S^T)
        self.seq_q = -(-seq // bq) * bq  # queries padded to whole blocks
        self.seq_k = -(-seq // tk) * tk  # keys padded to whole tiles
        self.dim_pad = -(-dim // rows) * rows

    def blocks(self) -> list[int]:
        return list(range(0, self.seq_q, self.bq))

    def tiles(self, q0: int) -> list[int]:
        """The key tiles of the block at ``q0`` in the order they are processed: forwards in even
        blocks, backwards in odd ones, so that a block starts with the tile the one before ended
        with (the kernel then loads no K or V tile between them). Either way the first tile has
        a key at or below every query of the block (causal: the block's diagonal tile comes
        first or is tile 0), so the running max starts finite."""
        t = needed_tiles(self, q0)
        return t[::-1] if (q0 // self.bq) % 2 else t


def needed_tiles(plan: AttentionPlan, q0: int) -> list[int]:
    """Key tiles (first key) the block of queries from ``q0`` needs: all, or (causal) those with a
    key at or below the block's last query."""
    last_q = min(q0 + plan.bq, plan.seq) - 1
    return [k0 for k0 in range(0, plan.seq_k, plan.tk) if not plan.causal or k0 <= last_q]


def tile_mask(plan: AttentionPlan, q0: int, k0: int) -> np.ndarray | None:
    """The additive mask words of a (block, tile) pair, shape (nq, tk, lanes) as the kernel lays
    S^T out (query tile, key, lane): 0 or -Inf bits; None when nothing in the pair is masked."""
    q = q0 + np.arange(plan.bq).reshape(plan.nq, 1, plan.lanes)
    k = k0 + np.arange(plan.tk).reshape(1, plan.tk, 1)
    masked = np.broadcast_to(k >= plan.seq, (plan.nq, plan.tk, plan.lanes)).copy()
    if plan.causal:
        masked |= k > q
    if not masked.any():
        return None
    return np.where(masked, np.uint32(NEG_INF), np.uint32(0)).astype(np.uint32)


@dataclass
class AttentionOperands:
    """What the host stages for one attention: the recipe, the fp32 inputs (kept for the error
    attribution), int8 Q and K with their scales, and V: int8 with its scale (``int8``) or FP8
    codes (seq, D) with E8M0 scales (ceil(seq / 32), D), one per 32 keys and head dimension."""

    recipe: AttentionRecipe
    q: np.ndarray
    k: np.ndarray
    v: np.ndarray
    q8: np.ndarray
    k8: np.ndarray
    sq: float
    sk: float
    v8: np.ndarray | None = None
    sv: float | None = None
    v_codes: np.ndarray | None = None
    v_scales: np.ndarray | None = None

    def v_values(self) -> np.ndarray:
        """V as the chip multiplies it (dequantized, float64, exact)."""
        if not self.recipe.fp8:
            return self.v8.astype(np.float64) * self.sv
        seq = self.v.shape[0]
        codes = pad_to_block(self.v_codes, axis=0)
        return mx_dequantize(codes, self.v_scales, self.recipe.fmt, axis=0)[:seq]


def quantize_qkv(q, k, v):
    """Per-tensor symmetric int8 of Q, K and V (and their scales): the ``int8`` recipe's."""
    (q8, sq), (k8, sk), (v8, sv) = int8_symmetric(q), int8_symmetric(k), int8_symmetric(v)
    return q8, k8, v8, sq, sk, sv


def quantize_attention(q, k, v, recipe: str | AttentionRecipe = "int8") -> AttentionOperands:
    """Quantize fp32 Q, K, V (each (S, D)) the way ``recipe`` says."""
    r = attention_recipe(recipe)
    (q8, sq), (k8, sk) = int8_symmetric(q), int8_symmetric(k)
    ops = AttentionOperands(r, q, k, v, q8, k8, float(sq), float(sk))
    if r.fp8:
        codes, scales = mx_quantize(pad_to_block(np.asarray(v, np.float32), axis=0), r.fmt, r.v_rule, axis=0)
        ops.v_codes, ops.v_scales = codes[:v.shape[0]], scales
    else:
        v8, sv = int8_symmetric(v)
        ops.v8, ops.sv = v8, float(sv)
    return ops


def padded_v(ops: AttentionOperands, plan: AttentionPlan) -> tuple[np.ndarray, np.ndarray | None]:
    """V as the kernel stages it: (seq_k, dim_pad) int8 values or FP8 codes (zero padding), and
    for FP8 the scale codes (ceil(seq_k / 32), dim_pad), padded with 127 (2^0)."""
    S, D = ops.v.shape
    if not ops.recipe.fp8:
        out = np.zeros((plan.seq_k, plan.dim_pad), np.int8)
        out[:S, :D] = ops.v8
        return out, None
    codes = np.zeros((plan.seq_k, plan.dim_pad), np.uint8)
    codes[:S, :D] = ops.v_codes
    scales = np.full((-(-plan.seq_k // MX_BLOCK), plan.dim_pad), E8M0_BIAS, np.uint8)
    scales[:ops.v_scales.shape[0], :D] = ops.v_scales
    return codes, scales


def attention_scales(sq: float, sk: float, sv: float, dim: int) -> tuple[int, int, int]:
    """fp32 bits of s_qk = s_q * s_k / sqrt(D), of 127.0 and of s_pv = s_v / 127 (host constants,
    each rounded once from float64): the ``int8`` recipe's constants."""
    s_qk = np.float32(sq * sk / np.sqrt(dim))
    return int(bits(s_qk)[0]), int(bits(np.float32(127.0))[0]), int(bits(np.float32(sv / 127.0))[0])


def attention_constants(ops: AttentionOperands) -> tuple[int, int, int]:
    """The three fp32 constants the kernel loads (bits): s_qk, P's conversion scale (127, or
    2**p_exp) and s_pv (int8; 0 for FP8, where the block scales carry V's and P's scales)."""
    dim = ops.q.shape[1]
    if not ops.recipe.fp8:
        return attention_scales(ops.sq, ops.sk, ops.sv, dim)
    s_qk = attention_scales(ops.sq, ops.sk, 1.0, dim)[0]
    return s_qk, int(bits(np.float32(2.0 ** ops.recipe.p_exp))[0]), 0


def _check_exact(exact) -> frozenset:
    ex = frozenset(exact)
    bad = sorted(ex - set(EXACT_STAGES))
    if bad:
        raise ValueError(f"unknown stage(s) {bad} in exact=; accepted: {', '.join(EXACT_STAGES)}")
    return ex


def _words(x: np.ndarray, nq: int, lanes: int) -> np.ndarray:
    """(rows, bq) -> (nq, rows, lanes) words: a row of a query tile's LANES columns per word."""
    return x.reshape(x.shape[0], nq, lanes).transpose(1, 0, 2)


def attention_golden(ops: AttentionOperands, plan: AttentionPlan, exact=(), flush_p: bool = False) -> np.ndarray:
    """The kernel's output O (seq, dim) fp32, computed the kernel's way (see the module doc).

    ``exact``: stages (:data:`EXACT_STAGES`) computed without their quantization, for the error
    attribution; with the default (none) the result is the chip's, bit for bit. ``flush_p``
    (FP8 recipes; FL-NU-001's mitigation, on a chip that reads subnormal FP8 codes as zero): P is
    set to +0 where P * 2^e is below the format's smallest normal (2^-6 E4M3, 2^-14 E5M2) before
    the conversion, so that no code of P is subnormal."""
    exact = _check_exact(exact)
    r = ops.recipe
    S, D, L, nq = plan.seq, plan.dim, plan.lanes, plan.nq
    if ops.q.shape != (S, D):
        raise ValueError(f"the operands are {ops.q.shape}, the plan is for ({S}, {D})")
    s_qk, c_p, s_pv = attention_constants(ops)
    qp = np.zeros((plan.seq_q, D), np.int64)
    qp[:S] = ops.q8
    kp = np.zeros((plan.seq_k, D), np.int64)
    kp[:S] = ops.k8
    qf = np.zeros((plan.seq_q, D), np.float64)
    qf[:S] = ops.q
    kf = np.zeros((plan.seq_k, D), np.float64)
    kf[:S] = ops.k
    v_chip, v_scales = padded_v(ops, plan)
    v_chip = v_chip[:, :D]
    v_eff = np.zeros((plan.seq_k, D), np.float64)  # V as the product sees it (float64, exact)
    v_eff[:S] = ops.v if "v" in exact else ops.v_values()
    sb = None
    if r.fp8:
        nblk = -(-plan.tk // MX_BLOCK)
        sb = np.full((nblk, plan.bq), E8M0_BIAS - r.p_exp, np.uint8)
    out = np.zeros((plan.seq_q, D), np.float32)
    for q0 in plan.blocks():
        m = l = o = None
        for i, k0 in enumerate(plan.tiles(q0)):
            ks = slice(k0, k0 + plan.tk)
            if "qk" in exact:  # (tk, bq) scores from the fp32 inputs, rounded once
                sf = (kf[ks] @ qf[q0:q0 + plan.bq].T / np.sqrt(D)).astype(np.float32)
                s = _words(bits(sf), nq, L)
            else:
                st = (kp[ks] @ qp[q0:q0 + plan.bq].T).astype(np.int32)  # (tk, bq): S^T, exact
                s = vector_op("fmul", vector_op("i2f", _words(st, nq, L).view(np.uint32)), np.uint32(s_qk))
            mask = tile_mask(plan, q0, k0)
            if mask is not None:
                s = vector_op("fadd", s, mask)
            mt = np.stack([fold_words("fmax", s[t]) for t in range(nq)])  # (nq, L)
            if i == 0:
                m_new = mt
            else:
                m_new = vector_op("fmax", m, mt)
                alpha = vector_op("exp", vector_op("fsub", m, m_new))
            p = vector_op("exp", vector_op("fsub", s, m_new[:, None, :]))  # (nq, tk, L): P^T words
            lt = np.stack([fold_words("fadd", p[t]) for t in range(nq)])
            l = lt if i == 0 else vector_op("fadd", vector_op("fmul", l, alpha), lt)
            if not exact & {"p", "v"}:  # the chip's product
                if r.fp8:
                    if flush_p:
                        normal = np.float32(2.0 ** (FORMATS[r.fmt].emin - r.p_exp))  # the smallest normal
                        p = np.where(floats(p) >= normal, p, np.uint32(0))
                    codes = to_fp8(p, np.uint32(c_p), r.fmt)
                    b_codes = codes.transpose(1, 0, 2).reshape(plan.tk, plan.bq)  # P^T (keys, queries)
                    a_codes = np.ascontiguousarray(v_chip[ks].T)  # V^T (D, keys)
                    groups = [(k0 + b * MX_BLOCK) // MX_BLOCK for b in range(sb.shape[0])]
                    a_scales = np.ascontiguousarray(v_scales[groups, :D].T)
                    t_ = _words(mx_matmul_bits(a_codes, b_codes, a_scales, sb, r.fmt, chunks=[plan.tk]), nq, L)
                else:
                    p8 = to_int8(p, np.uint32(c_p))  # (nq, tk, L)
                    pv = np.einsum("tkl,kd->tdl", p8.astype(np.int64), v_chip[ks].astype(np.int64)).astype(np.int32)
                    t_ = vector_op("fmul", vector_op("i2f", pv.view(np.uint32)), np.uint32(s_pv))
            else:  # a stage taken out of the quantization: the product in float64, rounded once
                if "p" in exact:
                    p_eff = floats(p).astype(np.float64)
                elif r.fp8:
                    p_eff = decode_elements(to_fp8(p, np.uint32(c_p), r.fmt), r.fmt) * 2.0 ** -r.p_exp
                else:
                    p_eff = to_int8(p, np.uint32(c_p)).astype(np.float64) / 127.0
                t_ = bits(np.einsum("tkl,kd->tdl", p_eff, v_eff[ks]).astype(np.float32))
            o = t_ if i == 0 else vector_op("fadd", vector_op("fmul", o, alpha[:, None, :]), t_)
            m = m_new
        o = vector_op("fmul", o, vector_op("recip", l)[:, None, :])  # (nq, D, L)
        out[q0:q0 + plan.bq] = floats(o).transpose(0, 2, 1).reshape(plan.bq, D)
    return out[:S]


def attention_rows(q8, k8, v8, sq: float, sk: float, sv: float, plan: AttentionPlan) -> np.ndarray:
    """The ``int8`` recipe's output from already quantized operands (``quantize_qkv``'s)."""
    S, D = q8.shape
    z = np.zeros((S, D), np.float32)
    ops = AttentionOperands(ATTENTION_RECIPES["int8"], z, z, z, q8, k8, float(sq), float(sk), v8, float(sv))
    return attention_golden(ops, plan)


def attention_reference(q, k, v, causal: bool) -> np.ndarray:
    """softmax(Q K^T / sqrt(D) [+ causal mask]) V in float64."""
    q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
    s = q @ k.T / np.sqrt(q.shape[1])
    if causal:
        s = np.where(np.triu(np.ones_like(s, dtype=bool), 1), -np.inf, s)
    s = s - s.max(axis=1, keepdims=True)
    p = np.exp(s)
    return (p / p.sum(axis=1, keepdims=True)) @ v
