"""Golden of the decode-attention kernel (kernels/tiled/decode_attention.py), from the documented
arithmetic (docs/numerics.md, docs/tile.md), not from the kernel (the two share no code).

One query per head against a KV cache, flash-decoding style: the valid keys ``0 .. seq-1`` are cut
into splits of ``block`` keys (the last one ends at seq). Everything is computed transposed: a word
per key (or head dimension), a lane per head. A split is one or more score tiles ("pieces"): its
whole ROWS-key panels in chunks of ``chunk`` keys (one load each), then, when it ends inside a
panel, that ragged panel, whose keys at and past seq (cache junk) get -Inf.

Per split b, per piece j (keys a0 .. a1-1, a multiple of ROWS):

    st_j = K8[a0:a1] @ Q8^T                      int32, exact (wrapping)
    s_j  = DEQ(st_j, sc)                         I2F then FMUL, each rounded
    s_j  = s_j FADD mask                         the ragged panel: +0 for keys < seq, -Inf after
    m_b  = FOLD FMAX (s_0) FMAX FOLD FMAX (s_1) ...    each FOLD over a piece's words (keys), left
    p_j  = EXP(s_j FSUB m_b)                            to right; then the pieces left to right
    l_b  = FOLD FADD (p_0) FADD FOLD FADD (p_1) ...
    ot   = V8^T[:, piece 0] @ CVT_I8(p_0, ps) + V8^T[:, piece 1] @ CVT_I8(p_1, ps) + ...   int32
    o_b  = DEQ(ot, os)                           CVT_I8: int8(p * ps), FMUL rounded, RNE, saturating

Combine (splits in order):

    m   = m_0 FMAX m_1 FMAX ... (left to right)
    a_b = EXP(m_b FSUB m)
    O   = o_0 FMUL a_0;  O = O FADD (o_b FMUL a_b)   for b = 1, 2, ...
    L   = l_0 FMUL a_0;  L = L FADD (l_b FMUL a_b)   for b = 1, 2, ...
    out = O FMUL RECIP(L)                        (D x H: O transposed)

The fp32 constants: sc = fp32(q_scale * k_scale / sqrt(dim)), ps = fp32(p_scale),
os = fp32(v_scale / p_scale), each computed in float64 and rounded once.
"""
from __future__ import annotations

import math

import numpy as np

import golden
from golden.vector import floats, fold_words, to_int8, vector_op

NEG_INF = np.uint32(0xFF800000)


def constants(p: dict) -> dict:
    """The kernel's three fp32 constants, as bit patterns."""
    sc = np.float32(p["q_scale"] * p["k_scale"] / math.sqrt(p["dim"]))
    ps = np.float32(p["p_scale"])
    os_ = np.float32(p["v_scale"] / p["p_scale"])
    return {n: np.array([x], np.float32).view(np.uint32)[0]
            for n, x in (("sc", sc), ("ps", ps), ("os", os_))}


def splits(seq: int, block: int) -> list[tuple[int, int]]:
    """The key ranges (k0, k1) of the splits: ``block`` keys each, the last one ending at seq."""
    return [(k0, min(k0 + block, seq)) for k0 in range(0, seq, block)]


def pieces(k0: int, k1: int, rows: int, chunk: int) -> list[tuple[int, int, bool]]:
    """A split's score tiles (a0, a1, masked): its whole ROWS-key panels in chunks of ``chunk``
    keys (the last one shorter), then, when the split ends inside a panel, that panel (masked)."""
    kf = k0 + (k1 - k0) // rows * rows
    whole = [(a, min(a + chunk, kf), False) for a in range(k0, kf, chunk)]
    return whole + ([(kf, kf + rows, True)] if k1 > kf else [])


def tail_mask(seq: int, k0: int, k1: int, lanes: int) -> np.ndarray:
    """The additive mask of a panel: (k1 - k0, lanes) bit patterns, +0 on keys < seq, -Inf after."""
    mask = np.zeros((k1 - k0, lanes), np.uint32)
    mask[max(seq - k0, 0):] = NEG_INF
    return mask


def decode_attention_bits(k8, qt8, vt8, p: dict, rows: int) -> dict:
    """fp32 bit patterns of O^T (dim x heads) and of the splits' partials, as the chip has them.

    ``k8`` (cap x dim), ``qt8`` (dim x heads) and ``vt8`` (dim x cap) are the int8 host arrays;
    keys at and past ``seq`` are ignored (masked). Returns out, m_part, l_part, o_part.
    """
    c = constants(p)
    sc, ps, os_ = c["sc"], c["ps"], c["os"]
    seq, heads = p["seq"], p["heads"]
    qt8 = np.asarray(qt8, np.int8)
    ms, ls, os_parts = [], [], []
    for k0, k1 in splits(seq, p["block"]):
        ss = []
        for a0, a1, masked in pieces(k0, k1, rows, p["chunk"]):
            st = golden.gemm_int8(np.asarray(k8[a0:a1], np.int8), qt8)
            s = vector_op("deq", st.astype(np.int32).view(np.uint32), sc)
            if masked:
                s = vector_op("fadd", s, tail_mask(seq, a0, a1, heads))
            ss.append(s)
        m = fold_words("fmax", ss[0])
        for s in ss[1:]:
            m = vector_op("fmax", m, fold_words("fmax", s))
        pr = [vector_op("exp", vector_op("fsub", s, m)) for s in ss]
        l = fold_words("fadd", pr[0])
        for x in pr[1:]:
            l = vector_op("fadd", l, fold_words("fadd", x))
        ot = np.zeros((p["dim"], heads), np.int32)
        for (a0, a1, _), x in zip(pieces(k0, k1, rows, p["chunk"]), pr):
            p8 = to_int8(x, ps).astype(np.int8)                   # CVT_I8 into the B operand
            prod = golden.gemm_int8(np.asarray(vt8[:, a0:a1], np.int8), p8).astype(np.int64)
            ot = (ot.astype(np.int64) + prod).astype(np.uint32).view(np.int32)   # int32, wraps
        ms.append(m)
        ls.append(l)
        os_parts.append(vector_op("deq", ot.view(np.uint32), os_))
    m = ms[0]
    for mb in ms[1:]:
        m = vector_op("fmax", m, mb)
    o = big_l = None
    for mb, lb, ob in zip(ms, ls, os_parts):
        a = vector_op("exp", vector_op("fsub", mb, m))
        if o is None:
            o, big_l = vector_op("fmul", ob, a), vector_op("fmul", lb, a)
        else:
            o = vector_op("fadd", o, vector_op("fmul", ob, a))
            big_l = vector_op("fadd", big_l, vector_op("fmul", lb, a))
    return {"out": vector_op("fmul", o, vector_op("recip", big_l)), "m_part": np.stack(ms),
            "l_part": np.stack(ls), "o_part": np.concatenate(os_parts)}


def golden_outputs(ins: dict, p: dict, lanes: int) -> dict:
    """The KernelSpec golden. Where a split's ragged panel starts depends on the array's ROWS, which
    a golden is not given (only LANES, and the kernel_args values of the declared parameters), so it
    takes ROWS = LANES: the kernel refuses a non-square array. With ``partials="dram"`` the
    splits' m, l and O^T are outputs too."""
    res = decode_attention_bits(ins["k"], ins["qt"], ins["vt"], p, lanes)
    names = ("out", "m_part", "l_part", "o_part") if p["partials"] == "dram" else ("out",)
    return {n: floats(res[n]).copy() for n in names}


def reference(ins: dict, p: dict) -> dict:
    """float64 mathematics, from the same int8 values and scales: per head
    softmax(q k^T * q_scale k_scale / sqrt(dim)) (v v_scale), as O^T; keys < seq only."""
    seq = p["seq"]
    q = ins["qt"].astype(np.float64).T * p["q_scale"]             # heads x dim
    k = ins["k"][:seq].astype(np.float64) * p["k_scale"]          # seq x dim
    v = ins["vt"][:, :seq].astype(np.float64).T * p["v_scale"]    # seq x dim
    s = q @ k.T / math.sqrt(p["dim"])                            # heads x seq
    e = np.exp(s - s.max(axis=1, keepdims=True))
    return {"out": ((e / e.sum(axis=1, keepdims=True)) @ v).T}    # dim x heads
