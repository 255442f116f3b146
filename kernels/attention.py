"""Single-head flash attention on the chip: ``attention(dev, q, k, v, causal=...)`` -> fp32 (S, D).

The algorithm and its order of operations are golden/attention.py's (which computes the same
bits in numpy). The chip computes S^T = K Q^T (so that an accumulator word holds one key's
scores for LANES queries, and the running max, sum and rescale factor of LANES queries are one
word each), runs the online softmax on the vector unit, converts P to int8 straight into the B
SRAM, and computes O^T = V^T P^T on the matrix engine. Q, K and V tiles come from DRAM by DMA
(host-packed panel-major, like the GEMM's operands), the output goes back by DMA.

Per query block (``bq`` queries, kept in the B SRAM) the key tiles (``tk`` keys) stream in: the
next K tile loads while the vector unit works on this one (K_FREE is signalled once S^T is
scaled), the next V tile once this one's O^T MATMULs are done. The vector unit and the matrix
engine take turns (a VEC issues when the engine has drained, a MATMUL when the unit is idle).

ACC layout (words): S^T / P (nq x tk), O^T (nq x D), the O^T product T (nq x D), the mask
(nq x tk), two running-max vectors, the tile max, alpha, l, the tile sum (nq each), and three
constants (s_qk, 127, s_pv in lane 0).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from golden.attention import AttentionPlan, attention_scales, quantize_qkv, tile_mask
from rtl.isa import DmaQueue, VecB, VecDst, VecOp, dma_load, dma_store, dma_stride, matmul, nop, vec
from rtl.memories import Region
from workarounds import Mitigations, Unit

from .acc_pass import units_busy_cycles
from .dma_stream import ATTN_SEM as SEM
from .dma_stream import Ledger
from .stats import KernelStats, Measure
from .validate import check_matrix, require_vector

if TYPE_CHECKING:
    from cosim.device import KernelDevice

__all__ = ["attention", "plan_attention", "attention_stream"]

ATTN_UNITS = (Unit.ENGINE, Unit.SRAM, Unit.CMDPROC, Unit.DMA, Unit.VECTOR)


MAX_MASKS = 2  # distinct masks kept in ACC for the whole kernel (causal: the diagonal tile, and the last one)


def _acc_layout(plan: AttentionPlan, dp: int, n_masks: int = MAX_MASKS) -> dict[str, int]:
    nq, tk = plan.nq, plan.tk
    lay, at = {}, 0
    for name, n in (("ST", nq * tk), ("O", nq * dp), ("T", nq * dp), ("MASK", n_masks * nq * tk), ("M0", nq), ("M1", nq),
                    ("MT", nq), ("AL", nq), ("L", nq), ("LT", nq), ("CONST", 3)):
        lay[name] = at
        at += n
    lay["end"] = at
    return lay


def _n_masks(seq: int, b: int, t: int, causal: bool) -> int:
    """Distinct masks a plan needs: none, the padded last key tile, or (causal, b == t) the
    diagonal tile, and the last block's diagonal tile with the padding too."""
    padded = int(seq % t != 0)
    return 1 + padded if causal else padded


def _tile_cycles(cfg, nq: int, tk: int, dp: int, masked: bool, bytes_per_cycle: float) -> float:
    """Schedule model of one (query block, key tile): the engine's and the vector unit's turns
    (they do not overlap) against the DMA of the K and V tiles (which does)."""
    mm = max(cfg.rows, cfg.cols)
    engine = nq * (tk // cfg.rows) * max(dp, mm) + nq * (dp // cfg.rows) * max(tk, mm) + 2 * cfg.engine_drain_cycles
    words = nq * tk
    vecs = [words, nq * tk, 3 * nq, nq * tk, nq * tk, 2 * nq, words, nq * dp, nq * dp, nq * dp]  # lanes' passes
    n_cmds = 4 + 4 * nq + 6 + nq + (1 if masked else 0)
    vu = sum(vecs) + (words if masked else 0) + 4 * n_cmds  # count + 2 per VEC and its issue
    return max(engine + vu, 2 * tk * dp / bytes_per_cycle)


def plan_attention(cfg, seq: int, dim: int, causal: bool, bq: int | None = None, tk: int | None = None,
                   bytes_per_cycle: float = 1.0, b_reserved_top_words: int = 0) -> AttentionPlan:
    """The query block and key tile that fit the SRAMs with the fewest modelled cycles (or the
    ones given, checked). Causal plans take bq == tk (one diagonal mask serves every block)."""
    dp = -(-dim // cfg.rows) * cfg.rows
    lanes, rows = cfg.lanes, cfg.rows

    def fits(b: int, t: int) -> bool:
        nq = b // lanes
        a_words = (t // rows) * dp + (dp // rows) * t  # K tile + V^T tile
        b_words = nq * (dp + t)  # Q^T panels + P^T panels
        acc = _acc_layout(AttentionPlan(seq, dim, lanes, rows, b, t, causal), dp,
                          _n_masks(seq, b, t, causal))["end"]
        return (a_words <= cfg.operand_depth and b_words <= cfg.operand_depth - b_reserved_top_words
                and acc <= cfg.acc_depth)

    if bq is not None or tk is not None:
        b = bq or lanes
        t = tk or (b if causal else rows)
        if b % lanes or t % rows or b < 1 or t < 1:
            raise ValueError(f"bq must be a multiple of LANES ({lanes}) and tk of ROWS ({rows}); got bq={b}, tk={t}")
        if causal and b != t:
            raise ValueError(f"a causal plan needs bq == tk (one diagonal mask for every block); got bq={b}, tk={t}")
        if not fits(b, t):
            raise ValueError(f"bq={b}, tk={t} with head dim {dim} do not fit the SRAMs of this chip")
        return AttentionPlan(seq, dim, lanes, rows, b, t, causal)
    step = lanes * rows // math.gcd(lanes, rows)
    best, best_cost = None, math.inf
    for b in range(lanes, min(16 * lanes, -(-seq // lanes) * lanes) + 1, lanes):
        for t in ((b,) if causal else range(rows, min(16 * rows, -(-seq // rows) * rows) + 1, rows)):
            if (causal and b % step) or not fits(b, t):
                continue
            p = AttentionPlan(seq, dim, lanes, rows, b, t, causal)
            cost = sum(_tile_cycles(cfg, b // lanes, t, dp, causal or seq % t != 0, bytes_per_cycle)
                       for q0 in p.blocks() for _ in p.tiles(q0))
            if cost < best_cost:
                best, best_cost = p, cost
    if best is None:
        raise ValueError(f"head dim {dim} does not fit this chip's SRAMs even with one query tile and one key tile "
                         f"(operand depth {cfg.operand_depth}, accumulator depth {cfg.acc_depth})")
    return best


def attention_stream(cfg, plan: AttentionPlan, addr: dict, masks: dict) -> list[int]:
    """The whole attention as one command stream; ``addr``: DRAM addresses of the packed
    operands, constants, masks (``addr["masks"]``: one after the other) and output; ``masks``:
    (block, tile) -> which of the distinct masks (loaded once, kept in ACC) the pair adds."""
    R, L = cfg.rows, cfg.lanes
    nq, tk = plan.nq, plan.tk
    dp = plan.dim_pad
    n_masks = len(set(masks.values()))
    A = _acc_layout(plan, dp, n_masks)
    k_a, v_a = 0, (tk // R) * dp  # A SRAM: the K tile, then the V^T tile
    qb, pb = 0, nq * dp  # B SRAM: Q^T panels, then P^T panels
    led = Ledger()
    out = [dma_stride(DmaQueue.LOAD, sram=tk, dram=plan.seq_k * R),  # the V^T tile's rows (one per panel)
           dma_load(Region.ACC, sram=A["CONST"], dram=addr["const"], words=3)]
    if n_masks:
        out.append(dma_load(Region.ACC, sram=A["MASK"], dram=addr["masks"], words=n_masks * nq * tk))
    blocks = plan.blocks()
    n_words = nq * tk
    pairs = [(bi, ti, k0) for bi, q0 in enumerate(blocks) for ti, k0 in enumerate(plan.tiles(q0))]

    # The loads are issued one (block, tile) pair ahead, right after the command that frees
    # their buffer: the stream is in order, so a load written at the top of its own pair would
    # only reach its queue once the pair before had issued every command.
    def load_q(bi: int) -> None:
        out.append(dma_load(Region.B, sram=qb, dram=addr["q"] + bi * nq * dp * L, words=nq * dp,
                            wait=led.queue_wait(SEM["Q_FREE"]) if bi else None, signal=SEM["Q_RDY"]))
        led.signal(SEM["Q_RDY"])

    def load_k(j: int) -> None:
        k0 = pairs[j][2]
        out.append(dma_load(Region.A, sram=k_a, dram=addr["k"] + (k0 // R) * dp * R, words=(tk // R) * dp,
                            wait=led.queue_wait(SEM["K_FREE"]) if j else None, signal=SEM["K_RDY"]))
        led.signal(SEM["K_RDY"])

    def load_v(j: int) -> None:
        k0 = pairs[j][2]
        out.append(dma_load(Region.A, sram=v_a, dram=addr["v"] + k0 * R, words=tk, rows=dp // R,
                            wait=led.queue_wait(SEM["V_FREE"]) if j else None, signal=SEM["V_RDY"]))
        led.signal(SEM["V_RDY"])

    load_q(0)
    load_k(0)
    load_v(0)
    j = -1
    for bi, q0 in enumerate(blocks):
        tiles = plan.tiles(q0)
        for ti, k0 in enumerate(tiles):
            j += 1
            last_tile = ti == len(tiles) - 1
            mask = (bi, ti) in masks
            more = j + 1 < len(pairs)
            # S^T = K Q^T
            if ti == 0:
                out.append(nop(wait=led.stream_wait(SEM["Q_RDY"])))
            wait = led.stream_wait(SEM["K_RDY"])
            for t in range(nq):
                for r in range(tk // R):
                    out.append(matmul(a=k_a + r * dp, b=qb + t * dp, c=A["ST"] + t * tk + r * R, k=dp, wait=wait))
                    wait = None
            # S = fp32(S^T) * s_qk (+ mask); the K tile (and, last, Q) are then free
            free = (SEM["K_FREE"], SEM["Q_FREE"] if last_tile else None)
            out.append(vec(VecOp.DEQ, a=A["ST"], b=A["CONST"], b_form=VecB.SCALAR, count=n_words, dst=A["ST"],
                           signal=free[0], signal2=free[1]))
            led.signal(*free)
            if more:
                if pairs[j + 1][0] != bi:
                    load_q(bi + 1)
                load_k(j + 1)
            if mask:
                out.append(vec(VecOp.FADD, a=A["ST"], b=A["MASK"] + masks[(bi, ti)] * n_words, count=n_words,
                               dst=A["ST"]))
            # running max and the rescale factor
            m_cur, m_prev = (A["M0"], A["M1"]) if ti % 2 == 0 else (A["M1"], A["M0"])
            if ti == 0:
                out += [vec(VecOp.FMAX, a=A["ST"] + t * tk, count=tk, dst=m_cur + t, b_form=VecB.FOLD) for t in range(nq)]
            else:
                out += [vec(VecOp.FMAX, a=A["ST"] + t * tk, count=tk, dst=A["MT"] + t, b_form=VecB.FOLD)
                        for t in range(nq)]
                out.append(vec(VecOp.FMAX, a=m_prev, b=A["MT"], count=nq, dst=m_cur))
                out.append(vec(VecOp.FSUB, a=m_prev, b=m_cur, count=nq, dst=A["AL"]))
                out.append(vec(VecOp.EXP, a=A["AL"], count=nq, dst=A["AL"]))
            # P = exp(S - m); its sum
            out += [vec(VecOp.EXPSUB, a=A["ST"] + t * tk, b=m_cur + t, b_form=VecB.LANE, count=tk,
                        dst=A["ST"] + t * tk) for t in range(nq)]
            if ti == 0:
                out += [vec(VecOp.FADD, a=A["ST"] + t * tk, count=tk, dst=A["L"] + t, b_form=VecB.FOLD) for t in range(nq)]
            else:
                out += [vec(VecOp.FADD, a=A["ST"] + t * tk, count=tk, dst=A["LT"] + t, b_form=VecB.FOLD)
                        for t in range(nq)]
                out.append(vec(VecOp.FMUL, a=A["L"], b=A["AL"], count=nq, dst=A["L"]))
                out.append(vec(VecOp.FADD, a=A["L"], b=A["LT"], count=nq, dst=A["L"]))
            # P8 into the B SRAM, then O^T += V^T P8^T
            out.append(vec(VecOp.CVT_I8, a=A["ST"], b=A["CONST"] + 1, b_form=VecB.SCALAR, count=n_words, dst=pb,
                           dst_sram=VecDst.B))
            wait = led.stream_wait(SEM["V_RDY"])
            for t in range(nq):
                for i in range(dp // R):
                    out.append(matmul(a=v_a + i * tk, b=pb + t * tk, c=A["T"] + t * dp + i * R, k=tk, wait=wait))
                    wait = None
            if ti == 0:
                ow = led.stream_wait(SEM["O_FREE"]) if bi else None
                out.append(vec(VecOp.DEQ, a=A["T"], b=A["CONST"] + 2, b_form=VecB.SCALAR, count=nq * dp, dst=A["O"],
                               wait=ow, signal=SEM["V_FREE"]))
            else:
                out.append(vec(VecOp.DEQ, a=A["T"], b=A["CONST"] + 2, b_form=VecB.SCALAR, count=nq * dp, dst=A["T"],
                               signal=SEM["V_FREE"]))
            led.signal(SEM["V_FREE"])
            if more:
                load_v(j + 1)
            if ti:
                out += [vec(VecOp.FMUL, a=A["O"] + t * dp, b=A["AL"] + t, b_form=VecB.LANE, count=dp, dst=A["O"] + t * dp)
                        for t in range(nq)]
                out.append(vec(VecOp.FADD, a=A["O"], b=A["T"], count=nq * dp, dst=A["O"]))
        # O = O / l, stored
        out.append(vec(VecOp.RECIP, a=A["L"], count=nq, dst=A["L"]))
        out += [vec(VecOp.FMUL, a=A["O"] + t * dp, b=A["L"] + t, b_form=VecB.LANE, count=dp, dst=A["O"] + t * dp,
                    signal=SEM["O_RDY"] if t == nq - 1 else None) for t in range(nq)]
        led.signal(SEM["O_RDY"])
        more = bi + 1 < len(blocks)
        out.append(dma_store(sram=A["O"], dram=addr["o"] + bi * nq * dp * 4 * L, words=nq * dp,
                             wait=led.queue_wait(SEM["O_RDY"]), signal=SEM["O_FREE"] if more else None))
        if more:
            led.signal(SEM["O_FREE"])
    return out + led.drain()


async def attention(dev: KernelDevice, q: np.ndarray, k: np.ndarray, v: np.ndarray, *, causal: bool = False,
                    mitigations: Mitigations, bq: int | None = None, tk: int | None = None,
                    budget_cycles: int | None = None) -> tuple[np.ndarray, KernelStats]:
    """softmax(Q K^T / sqrt(D) [causal]) V for fp32 Q, K, V of shape (S, D), with the int8 recipe
    (golden/attention.py). Returns ``(fp32 (S, D), stats)``."""
    q = check_matrix("q", q, (np.float32,), "fp32 queries, shape (S, D)")
    k = check_matrix("k", k, (np.float32,), "fp32 keys, shape (S, D)")
    v = check_matrix("v", v, (np.float32,), "fp32 values, shape (S, D)")
    if not (q.shape == k.shape == v.shape):
        raise ValueError(f"q, k and v must have the same shape (S, D); got {q.shape}, {k.shape}, {v.shape}")
    for name, x in (("q", q), ("k", k), ("v", v)):
        if not np.isfinite(x).all():
            raise ValueError(f"{name} has non-finite values: the int8 recipe scales by the tensor's amax and cannot "
                             "carry Inf or NaN (mask with causal=True instead of -Inf scores)")
    cfg = dev.config
    require_vector(cfg, "attention")
    gc = mitigations.gemm
    if gc.repeat_first_a_word or gc.avoid_unit_chunk:
        raise ValueError("the active errata mitigations ask the MATMUL streams for a repeated first A word or no "
                         "single-step chunks (GemmConstraints), which attention does not implement yet: run it on "
                         "a revision without those errata, or with their mitigations off to see the defect")
    seq, dim = q.shape
    plan = plan_attention(cfg, seq, dim, causal, bq, tk, dev.board.bytes_per_cycle, gc.b_reserved_top_words)
    R, C, L = cfg.rows, cfg.cols, cfg.lanes
    dp, nq = plan.dim_pad, plan.nq
    q8, k8, v8, sq, sk, sv = quantize_qkv(q, k, v)

    def pad(x, n):
        out = np.zeros((n, dp), np.int8)
        out[:x.shape[0], :x.shape[1]] = x
        return out

    qp, kp, vp = pad(q8, plan.seq_q), pad(k8, plan.seq_k), pad(v8, plan.seq_k)
    q_words = qp.reshape(-1, nq, C, dp).transpose(0, 1, 3, 2)  # block, query tile, d, lane
    k_words = kp.reshape(-1, R, dp).transpose(0, 2, 1)  # key panel, d, row
    v_words = vp.reshape(plan.seq_k, dp // R, R).transpose(1, 0, 2)  # d panel, key, row
    consts = np.zeros((3, L), np.uint32)
    consts[:, 0] = attention_scales(sq, sk, sv, dim)
    dev.dram.reset()
    addr = {}
    for name, arr in (("q", q_words), ("k", k_words), ("v", v_words)):
        buf = dev.dram.alloc(arr.nbytes, name.upper())
        dev.dram_write(buf, np.ascontiguousarray(arr).tobytes())
        addr[name] = buf.addr
    cbuf = dev.dram.alloc(consts.nbytes, "const")
    dev.dram_write(cbuf, consts.astype("<u4"))
    addr["const"] = cbuf.addr
    masks, distinct = {}, []
    for bi, q0 in enumerate(plan.blocks()):
        for ti, k0 in enumerate(plan.tiles(q0)):
            mw = tile_mask(plan, q0, k0)
            if mw is not None:
                key = mw.tobytes()
                if key not in distinct:
                    distinct.append(key)
                masks[(bi, ti)] = distinct.index(key)
    if len(distinct) > _n_masks(seq, plan.bq, plan.tk, causal):  # the plan made room for that many
        raise AssertionError(f"{len(distinct)} distinct masks for plan bq={plan.bq} tk={plan.tk}")
    if distinct:
        mbuf = dev.dram.alloc(sum(len(k) for k in distinct), "masks")
        dev.dram_write(mbuf, np.frombuffer(b"".join(distinct), np.uint8))
        addr["masks"] = mbuf.addr
    obuf = dev.dram.alloc(len(plan.blocks()) * nq * dp * 4 * L, "O")
    addr["o"] = obuf.addr
    cmds = attention_stream(cfg, plan, addr, masks)
    pairs = sum(min(q0 + 1, seq) if causal else seq for q0 in range(seq))  # (query, key) pairs computed
    useful = 2 * dim * pairs
    host = {"commands": len(cmds), "masks": len(masks), "bytes_staged": int(q_words.nbytes + k_words.nbytes
                                                                             + v_words.nbytes)}
    async with Measure(dev, "attention", -(-useful // cfg.peak_macs_per_cycle),
                       {"shape": [seq, dim], "host": host, "plan": {"bq": plan.bq, "tk": plan.tk, "causal": causal}},
                       compulsory_bytes=3 * seq * dim + 4 * seq * dim, useful_macs=useful,
                       vector_cycles=units_busy_cycles(cfg, cmds)) as meas:
        await dev.submit(cmds, budget_cycles)
        await dev.wait_idle(budget_cycles)
        await dev.check_no_error()
    raw = dev.dram_read(obuf).view("<f4").reshape(-1, nq, dp, L)  # block, query tile, d, lane
    o = raw.transpose(0, 1, 3, 2).reshape(plan.seq_q, dp)[:seq, :dim].copy()
    meas.stats.add_errata(mitigations.report(ATTN_UNITS))
    return o, meas.stats
