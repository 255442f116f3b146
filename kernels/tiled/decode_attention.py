# kernels/tiled/decode_attention.py: decode attention, one int8 query per head against an int8 KV
# cache in DRAM, split over the cache and combined at the end (flash decoding), fp32 softmax.
# Transposed throughout: S^T = K Q^T and O^T = V^T P^T hold a word per key (per head dimension)
# and a lane per head, so the max and sum over keys are col_max / col_sum, broadcast back with a
# one-word tile. golden/decode_attention.py states the fp32 order (and shares no code with this).
import math

import numpy as np

from golden.decode_attention import golden_outputs, reference
from kernels import tile
from kernels.tile.runtime import TensorSpec
from kernels.tile.spec import KernelSpec, Param


def splits(seq, block, rows, chunk):
    """Per split (``block`` keys, the last ending at seq): its pieces (a0, a1, masked), the whole
    ROWS-key panels in loads of ``chunk`` keys, then the panel holding seq (keys past it masked)."""
    out = []
    for k0 in range(0, seq, block):
        k1 = min(k0 + block, seq)
        kf = k0 + (k1 - k0) // rows * rows
        out.append([(a, min(a + chunk, kf), False) for a in range(k0, kf, chunk)]
                   + ([(kf, kf + rows, True)] if k1 > kf else []))
    return out


def decode_attention(k, qt, vt, out, m_part=None, l_part=None, o_part=None, *,
                     seq, block, chunk, rows, lanes, sc, ps, os, stages):
    q = tile.load(qt[0:1])                                   # Q^T: one B panel, a column per head
    s_scale, p_scale, o_scale = (tile.scalar(bits=b) for b in (sc, ps, os))
    dt = vt.panels                                           # tile rows of an O^T
    steps = [(i, phase, j, cut) for i, cut in enumerate(splits(seq, block, rows, chunk))
             for phase in "kv" for j in range(len(cut))]     # a split's K pieces, then its V pieces
    parts = []
    for i, phase, j, cut in tile.pipeline(steps, stages=stages):
        a0, a1, masked = cut[j]
        last = j == len(cut) - 1
        if phase == "k":                                      # S^T: a word per key, a lane per head
            s = tile.dequant(tile.matmul(tile.load(k[a0 // rows:a1 // rows]), q), s_scale)
            if masked:                                        # -Inf on the keys at and past seq
                mask = np.zeros((rows, lanes), np.uint32)
                mask[seq - a0:] = 0xFF800000
                s = s + tile.constant_row(mask)
            ss = [s] if j == 0 else ss + [s]
            if last:                                          # the split's softmax, pieces in order
                m = tile.col_max(ss[0])
                for s in ss[1:]:
                    m = tile.maximum(m, tile.col_max(s))
                pp = [tile.exp(s - m) for s in ss]
                l = tile.col_sum(pp[0])
                for p in pp[1:]:
                    l = l + tile.col_sum(p)
            continue
        pb = tile.to_b(pp[j], p_scale)                        # P8 of the piece: int8(p * p_scale)
        ot = tile.matmul(tile.load(vt[0:dt, a0:a1]), pb, acc=ot if j else None)   # O^T, int32
        if last:
            o = tile.dequant(ot, o_scale)
            if o_part is None:
                parts.append((m, l, o))                       # the partials stay on chip
            else:
                tile.store(m_part[i:i + 1], m)
                tile.store(l_part[i:i + 1], l)
                tile.store(o_part[i * dt:(i + 1) * dt, 0:1], o)
    if o_part is None:                                        # combine, splits in order
        m = parts[0][0]
        for mb, _, _ in parts[1:]:
            m = tile.maximum(m, mb)
        for i, (mb, lb, ob) in enumerate(parts):
            a = tile.exp(mb - m)
            o, l = (ob * a, lb * a) if i == 0 else (o + ob * a, l + lb * a)
    else:                                                     # the same order, from DRAM
        mb = tile.load(m_part[0:m_part.rows])                 # a row (one word) per split
        a = tile.exp(mb - tile.col_max(mb))
        l = tile.col_sum(tile.load(l_part[0:l_part.rows]) * a)
        for i in range(m_part.rows):
            ob = tile.load(o_part[i * dt:(i + 1) * dt, 0:1]) * a[i]
            o = ob if i == 0 else o + ob
    tile.store(out[0:out.panels, 0:1], o * tile.recip(l))


def _cap(p):
    return p["cap"] or -(-p["seq"] // 16) * 16               # 16: every ROWS divides it


def _bits(x):
    return int(np.array([x], np.float32).view(np.uint32)[0])


def _kernel_args(p, target):
    rows, cols = target.config.rows, target.config.cols
    if rows != cols:
        raise ValueError(f"decode_attention needs a square array (its golden is given LANES, "
                         f"not ROWS), not {rows}x{cols}")
    if p["heads"] > cols:
        raise ValueError(f"heads must be at most the array's {cols} columns, not {p['heads']}")
    for n in ("block", "chunk") + (("dim",) if p["partials"] == "dram" else ()):
        if p[n] % rows:
            raise ValueError(f"{n} must be a multiple of the array's {rows} rows, not {p[n]}")
    if _cap(p) % rows or _cap(p) < -(-p["seq"] // rows) * rows:
        raise ValueError(f"cap must be a multiple of {rows} holding seq rounded up to it, "
                         f"not {_cap(p)}")
    return {"seq": p["seq"], "block": p["block"], "chunk": p["chunk"], "rows": rows,
            "lanes": target.config.lanes, "stages": p["stages"],
            "sc": _bits(p["q_scale"] * p["k_scale"] / math.sqrt(p["dim"])),
            "ps": _bits(p["p_scale"]), "os": _bits(p["v_scale"] / p["p_scale"])}


def _tensors(p):
    n, d, h = -(-p["seq"] // p["block"]), p["dim"], p["heads"]
    ts = [TensorSpec("k", _cap(p), d, "int8", layout="a_panels"),
          TensorSpec("qt", d, h, "int8", layout="b_panels"),
          TensorSpec("vt", d, _cap(p), "int8", layout="a_panels"),
          TensorSpec("out", d, h, "fp32", role="out", layout="c_tiles")]
    if p["partials"] == "dram":
        ts += [TensorSpec("m_part", n, h, role="out"), TensorSpec("l_part", n, h, role="out"),
               TensorSpec("o_part", n * d, h, "fp32", role="out", layout="c_tiles")]
    return ts


def _inputs(p, seed, extremes):
    """Q, K, V drawn N(0, 1), quantized per tensor on the host with the fixed steps q/k/v_scale
    (round to nearest even, clipped to +-127); --extremes: every value +-127 (scores far apart:
    exps underflow to 0, ties for the max). The cache past seq holds junk (any int8): ignored."""
    rng = np.random.default_rng(seed)
    cap, seq, d, h = _cap(p), p["seq"], p["dim"], p["heads"]
    q, kk, v = ((rng.choice(np.array([-127, 127], np.int8), (n, d)) if extremes else
                 np.clip(np.rint(rng.standard_normal((n, d)) / p[f"{x}_scale"]), -127, 127)
                 .astype(np.int8)) for x, n in (("q", h), ("k", cap), ("v", cap)))
    kk[seq:] = rng.integers(-128, 128, (cap - seq, d), dtype=np.int8)
    v[seq:] = rng.integers(-128, 128, (cap - seq, d), dtype=np.int8)
    return {"k": kk, "qt": np.ascontiguousarray(q.T), "vt": np.ascontiguousarray(v.T)}


SPECS = [KernelSpec(
    name="decode_attention",
    summary="decode attention: one int8 query per head against an int8 KV cache, split over the "
            "cache and combined (flash decoding), fp32 softmax; out = O^T (dim x heads)",
    source=decode_attention,
    params=(Param("seq", int, 256, "valid keys in the cache", 1, 16384, shape=True),
            Param("cap", int, 0, "keys the k / vt tensors hold (0: seq rounded up to 16); the "
                  "keys past seq are ignored", 0, 16384),
            Param("dim", int, 16, "head dimension", 1, 512, shape=True),
            Param("heads", int, 4, "heads, one query and one lane each (at most the array's "
                  "columns)", 1, 16, shape=True),
            Param("block", int, 64, "keys per split (a multiple of the array's rows)", 1, 16384),
            Param("chunk", int, 32, "keys per load of K or V^T (a multiple of the rows)", 1, 4096),
            Param("stages", int, 2, "pipeline stages over the loads", 1, 4),
            Param("partials", str, "chip", "where the splits' m, l and O^T wait for the combine: "
                  "the accumulator SRAM, or DRAM (outputs m_part, l_part, o_part)",
                  choices=("chip", "dram")),
            Param("q_scale", float, 0.03125, "quantization step of q", 1e-12, 1e12),
            Param("k_scale", float, 0.03125, "quantization step of k", 1e-12, 1e12),
            Param("v_scale", float, 0.03125, "quantization step of v", 1e-12, 1e12),
            Param("p_scale", float, 127.0, "P's int8 scale (to_b); O^T is dequantized by "
                  "v_scale / p_scale", 1.0, 127.0)),
    tensors=_tensors, inputs=_inputs, golden=golden_outputs, reference=reference,
    kernel_args=_kernel_args, units=("ENGINE", "SRAM", "CMDPROC", "DMA", "VECTOR"),
    macs=lambda p: 2 * p["seq"] * p["dim"] * p["heads"],
    shape_from={"dim": ("k", 1), "heads": ("qt", 1)},
    bench=({"seq": 1024, "dim": 16, "heads": 4, "block": 64, "chunk": 64},),
    bringup=({"seq": 37, "dim": 8, "heads": 3, "block": 16, "chunk": 8},),
    examples=("--seq 1024 --dim 16 --heads 4 --block 64 --chunk 64",
              "--seq 1001 --dim 16 --heads 4 --block 64 --rev A0",
              "--seq 2048 --dim 64 --heads 4 --block 256 --chunk 16",
              "--seq 4099 --dim 32 --heads 4 --block 128 --partials dram"))]
