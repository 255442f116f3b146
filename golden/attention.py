"""Kernel golden of single-head flash attention on the chip (kernels/attention.py), step for step,
and the float64 reference of the mathematics.

The recipe (``int8``): Q, K and V are quantized per tensor to symmetric int8 on the host
(golden.quant.int8_symmetric). The chip computes S^T = K Q^T exactly in int32 (the matrix
engine), so that a word of S^T holds one key's scores for LANES queries and every per-query
quantity (running max m, running sum l, the rescale factor) is a word of LANES lanes. Per query
block of ``bq`` queries and key tile of ``tk`` keys:

1. S = fp32(S^T_int32) * s_qk, with s_qk = fp32(s_q * s_k / sqrt(D)); masked entries (causal:
   key > query; padding keys past the sequence) get + (-Inf);
2. mt = the lane-wise maximum over the tile's keys (FOLD, first key first);
3. first tile: m = mt; later: m_new = max(m, mt), alpha = exp(m - m_new);
4. P = exp(S - m_new);  lt = the lane-wise sum over the keys (FOLD);
5. first: l = lt; later: l = l * alpha + lt;
6. P8 = int8(P * 127) (ties to even), the B operand of O^T = V^T P8^T, exact in int32;
7. T = fp32(O^T_int32) * s_pv, s_pv = fp32(s_v / 127); first: O = T; later: O = O * alpha + T;
8. after the last tile: O = O * recip(l).

Every fp32 step is golden.vector's (IEEE RNE, the documented exp and reciprocal), so the chip's
result is this function's bit for bit. Key tiles wholly above the diagonal of a causal block are
skipped, as the kernel skips them.
"""

from __future__ import annotations

import numpy as np

from .quant import int8_symmetric
from .vector import bits, floats, fold_words, to_int8, vector_op

__all__ = ["AttentionPlan", "quantize_qkv", "attention_rows", "attention_reference", "tile_mask", "needed_tiles",
           "attention_scales"]

NEG_INF = 0xFF800000


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
        return needed_tiles(self, q0)


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


def quantize_qkv(q, k, v):
    """Per-tensor symmetric int8 of Q, K and V (and their scales)."""
    (q8, sq), (k8, sk), (v8, sv) = int8_symmetric(q), int8_symmetric(k), int8_symmetric(v)
    return q8, k8, v8, sq, sk, sv


def attention_scales(sq: float, sk: float, sv: float, dim: int) -> tuple[int, int, int]:
    """fp32 bits of s_qk = s_q * s_k / sqrt(D), of 127.0 and of s_pv = s_v / 127 (host constants,
    each rounded once from float64)."""
    s_qk = np.float32(sq * sk / np.sqrt(dim))
    return int(bits(s_qk)[0]), int(bits(np.float32(127.0))[0]), int(bits(np.float32(sv / 127.0))[0])


def attention_rows(q8, k8, v8, sq: float, sk: float, sv: float, plan: AttentionPlan) -> np.ndarray:
    """The kernel's output O (seq, dim) fp32, computed the kernel's way (see the module doc)."""
    S, D, L, nq = plan.seq, plan.dim, plan.lanes, plan.nq
    s_qk, c127, s_pv = attention_scales(sq, sk, sv, D)
    qp = np.zeros((plan.seq_q, D), np.int64)
    qp[:S] = q8
    kp = np.zeros((plan.seq_k, D), np.int64)
    kp[:S] = k8
    vp = np.zeros((plan.seq_k, D), np.int64)
    vp[:S] = v8
    out = np.zeros((plan.seq_q, D), np.float32)
    for q0 in plan.blocks():
        qb = qp[q0:q0 + plan.bq]  # (bq, D)
        m = l = o = None
        for i, k0 in enumerate(plan.tiles(q0)):
            kt, vt = kp[k0:k0 + plan.tk], vp[k0:k0 + plan.tk]
            st = (kt @ qb.T).astype(np.int32)  # (tk, bq): S^T, exact
            # words: (nq, tk, L) -- query tile, key, lane
            w = st.reshape(plan.tk, nq, L).transpose(1, 0, 2).astype(np.int32).view(np.uint32)
            s = vector_op("fmul", vector_op("i2f", w), np.uint32(s_qk))
            mask = tile_mask(plan, q0, k0)
            if mask is not None:
                s = vector_op("fadd", s, mask)
            mt = np.stack([fold_words("fmax", s[t]) for t in range(nq)])  # (nq, L)
            if i == 0:
                m_new = mt
            else:
                m_new = vector_op("fmax", m, mt)
                alpha = vector_op("exp", vector_op("fsub", m, m_new))
            p = vector_op("exp", vector_op("fsub", s, m_new[:, None, :]))
            lt = np.stack([fold_words("fadd", p[t]) for t in range(nq)])
            l = lt if i == 0 else vector_op("fadd", vector_op("fmul", l, alpha), lt)
            p8 = to_int8(p, np.uint32(c127))  # (nq, tk, L): P^T words, key-major per query tile
            pv = np.einsum("tkl,kd->tdl", p8.astype(np.int64), vt).astype(np.int32)  # O^T words (nq, D, L)
            t_ = vector_op("fmul", vector_op("i2f", pv.view(np.uint32)), np.uint32(s_pv))
            o = t_ if i == 0 else vector_op("fadd", vector_op("fmul", o, alpha[:, None, :]), t_)
            m = m_new
        o = vector_op("fmul", o, vector_op("recip", l)[:, None, :])  # (nq, D, L)
        out[q0:q0 + plan.bq] = floats(o).transpose(0, 2, 1).reshape(plan.bq, D)
    return out[:S]


def attention_reference(q, k, v, causal: bool) -> np.ndarray:
    """softmax(Q K^T / sqrt(D) [+ causal mask]) V in float64."""
    q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
    s = q @ k.T / np.sqrt(q.shape[1])
    if causal:
        s = np.where(np.triu(np.ones_like(s, dtype=bool), 1), -np.inf, s)
    s = s - s.max(axis=1, keepdims=True)
    p = np.exp(s)
    return (p / p.sum(axis=1, keepdims=True)) @ v
