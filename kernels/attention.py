"""Single-head flash attention on the chip: ``attention(dev, q, k, v, causal=..., recipe=...)`` -> fp32 (S, D).

The algorithm and its order of operations are golden/attention.py's (which computes the same
bits in numpy), for each recipe there (int8; P and V in FP8 E4M3 or E5M2 with block scales). The
chip computes S^T = K Q^T (so that an accumulator word holds one key's scores for LANES queries,
and the running max, sum and rescale factor of LANES queries are one word each), runs the online
softmax on the vector unit, converts P (CVT_I8, or CVT_F8 for the FP8 recipes) straight into the
B SRAM, and computes O^T = V^T P^T on the matrix engine. Q, K and V tiles come from DRAM by DMA
(host-packed panel-major, like the GEMM's operands), the output goes back by DMA.

Per query block (``bq`` queries, kept in the B SRAM) the key tiles (``tk`` keys) stream in: the
next K tile loads once this tile's S^T MATMULs are done, the next V tile (with its block scales
for FP8) once its O^T MATMULs are. The vector unit and the matrix engine take turns (a VEC issues
when the engine has drained, a MATMUL when the unit is idle: rtl/cmdproc.py), so the kernel's
cycles are about the engine's plus the vector unit's; the schedule keeps the vector unit's passes
few and the DMA (K and V re-read once per query block) off the critical path.

int8: the O^T product T of a few query tiles at a time lands in the S^T words (dead once P is in
B), is scaled (DEQ) and added to O (O * alpha + T). FP8: the product is already in O's units, so
O is rescaled by alpha first and the MATMULs accumulate into O (C_old (+) acc, the same IEEE add).

ACC layout (words): S^T / P (nq x tk; int8: at least the T of a chunk of query tiles), O^T
(nq x D), the masks (nq x tk each), two running-max vectors, the tile max, alpha, l, the tile sum
(nq each), and three constants (s_qk, P's conversion scale, s_pv in lane 0).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from golden.attention import (
    AttentionOperands,
    AttentionPlan,
    attention_constants,
    attention_recipe,
    padded_v,
    quantize_attention,
    tile_mask,
)
from golden.mx import BLOCK as MX_BLOCK
from rtl.isa import DmaQueue, Format, VecB, VecDst, VecOp, dma_load, dma_store, dma_stride, matmul, nop, vec
from rtl.memories import Region
from workarounds import Mitigations, Unit

from .roofline import units_busy_cycles
from .dma_stream import ATTN_SEM as SEM
from .dma_stream import Ledger
from .stats import KernelStats, Measure
from .validate import check_matrix, require_vector

if TYPE_CHECKING:
    from cosim.device import KernelDevice

__all__ = ["attention", "plan_attention", "attention_stream", "AttentionLayout"]

ATTN_UNITS = (Unit.ENGINE, Unit.SRAM, Unit.CMDPROC, Unit.DMA, Unit.VECTOR)
FP8_FORMATS = {"e4m3": Format.E4M3, "e5m2": Format.E5M2}

def _n_masks(seq: int, b: int, t: int, causal: bool) -> int:
    """Distinct masks a plan needs: none, the padded last key tile, or (causal, b == t) the
    diagonal tile, and the last block's diagonal tile with the padding too."""
    padded = int(seq % t != 0)
    return 1 + padded if causal else padded


class AttentionLayout:
    """Where everything lives for one plan: ACC words (``acc[name]``), the A and B SRAM words,
    and (int8) ``nc``, the query tiles whose O^T product one turn of the engine computes into the
    S^T words. ``fits`` says whether it all fits the chip (``why`` otherwise)."""

    def __init__(self, cfg, plan: AttentionPlan, fp8: bool, n_masks: int, b_reserved_top_words: int = 0):
        R = cfg.rows
        nq, tk, dp = plan.nq, plan.tk, plan.dim_pad
        self.fp8 = fp8
        self.k_a, self.v_a = 0, (tk // R) * dp  # A SRAM: the K tile, then the V^T tile
        self.a_words = 2 * (tk // R) * dp
        self.qb, self.pb = 0, nq * dp  # B SRAM: Q^T panels, then P^T panels
        self.b_words = nq * (dp + tk)
        self.nblk = -(-tk // MX_BLOCK)  # FP8: blocks per O^T MATMUL (its K is the key tile)
        self.sa_words = (dp // R) * self.nblk if fp8 else 0  # one V^T tile's scales: per panel, per block
        rest = nq * dp + n_masks * nq * tk + 6 * nq + 3
        room = cfg.acc_depth - rest
        self.nc = nq
        if not fp8:  # chunks of query tiles whose T fits beside everything else, evenly sized
            nc_max = min(nq, room // dp)
            self.nc = -(-nq // -(-nq // nc_max)) if nc_max >= 1 else 0
        st = nq * tk if fp8 else max(nq * tk, self.nc * dp)
        self.acc, at = {}, 0
        for name, n in (("ST", st), ("O", nq * dp), ("MASK", n_masks * nq * tk), ("M0", nq), ("M1", nq), ("MT", nq),
                        ("AL", nq), ("L", nq), ("LT", nq), ("CONST", 3)):
            self.acc[name] = at
            at += n
        self.acc_words = at
        problems = []
        if self.a_words > cfg.operand_depth:
            problems.append(f"a K tile and a V^T tile take {self.a_words} A words (of {cfg.operand_depth})")
        if self.b_words > cfg.operand_depth - b_reserved_top_words:
            problems.append(f"Q^T and P^T take {self.b_words} B words (of {cfg.operand_depth - b_reserved_top_words})")
        if (not fp8 and self.nc < 1) or at > cfg.acc_depth:
            problems.append(f"the accumulator needs {max(at, rest + dp)} words (of {cfg.acc_depth})")
        if fp8 and (tk % MX_BLOCK and MX_BLOCK % tk):
            problems.append(f"tk={tk} must divide {MX_BLOCK} or be a multiple of it (V's block scales cover "
                            f"{MX_BLOCK} keys)")
        if fp8 and max(self.sa_words, self.nblk) > cfg.scale_depth:
            problems.append(f"a V^T tile's {self.sa_words} block scales exceed the SA SRAM ({cfg.scale_depth} words)")
        self.why = "; ".join(problems)
        self.fits = not problems


def _pair_cycles(cfg, nq: int, tk: int, dp: int, nc: int, fp8: bool, masked: bool, first: bool) -> float:
    """Schedule model of one (query block, key tile): the engine's and the vector unit's turns,
    which do not overlap (the DMA does, and is counted for the whole kernel)."""
    mm = max(cfg.rows, cfg.cols)
    turns = 2 if fp8 else 1 + -(-nq // nc)
    engine = nq * (tk // cfg.rows) * max(dp, mm) + nq * (dp // cfg.rows) * max(tk, mm) + turns * cfg.engine_drain_cycles
    words = nq * tk * (5 + masked) + (0 if first else 5 * nq)
    vecs = 4 + 3 * nq + masked + (0 if first else 5)
    if fp8:
        words += 0 if first else nq * dp
        vecs += 0 if first else nq
    else:
        words += nq * dp * (1 if first else 3)
        vecs += -(-nq // nc) * (1 if first else 2) + (0 if first else nq)
    return engine + words + 3 * vecs


def plan_attention(cfg, seq: int, dim: int, causal: bool, bq: int | None = None, tk: int | None = None,
                   bytes_per_cycle: float = 1.0, b_reserved_top_words: int = 0,
                   recipe: str = "int8") -> AttentionPlan:
    """The query block and key tile that fit the SRAMs with the fewest modelled cycles (or the
    ones given, checked). Causal plans take bq == tk (one diagonal mask serves every block)."""
    fp8 = attention_recipe(recipe).fp8
    dp = -(-dim // cfg.rows) * cfg.rows
    lanes, rows = cfg.lanes, cfg.rows

    def layout(b: int, t: int) -> AttentionLayout:
        return AttentionLayout(cfg, AttentionPlan(seq, dim, lanes, rows, b, t, causal), fp8,
                               _n_masks(seq, b, t, causal), b_reserved_top_words)

    if bq is not None or tk is not None:
        b = bq or lanes
        t = tk or (b if causal else rows)
        if b % lanes or t % rows or b < 1 or t < 1:
            raise ValueError(f"bq must be a multiple of LANES ({lanes}) and tk of ROWS ({rows}); got bq={b}, tk={t}")
        if causal and b != t:
            raise ValueError(f"a causal plan needs bq == tk (one diagonal mask for every block); got bq={b}, tk={t}")
        lay = layout(b, t)
        if not lay.fits:
            raise ValueError(f"bq={b}, tk={t} with head dim {dim} do not fit this chip: {lay.why}")
        return AttentionPlan(seq, dim, lanes, rows, b, t, causal)
    step = lanes * rows // math.gcd(lanes, rows)
    best, best_cost, why = None, math.inf, ""
    for b in range(lanes, min(16 * lanes, -(-seq // lanes) * lanes) + 1, lanes):
        for t in ((b,) if causal else range(rows, min(16 * rows, -(-seq // rows) * rows) + 1, rows)):
            if causal and b % step:
                continue
            lay = layout(b, t)
            if not lay.fits:
                why = why or lay.why
                continue
            p = AttentionPlan(seq, dim, lanes, rows, b, t, causal)
            masked = causal or seq % t != 0
            compute = sum(_pair_cycles(cfg, b // lanes, t, dp, lay.nc, fp8, masked, ti == 0)
                          for q0 in p.blocks() for ti, _ in enumerate(p.tiles(q0)))
            order = [k0 for q0 in p.blocks() for k0 in p.tiles(q0)]
            kv_loads = sum(j == 0 or k0 != order[j - 1] for j, k0 in enumerate(order))
            dram = (kv_loads * (2 * t * dp + lay.sa_words * rows) + len(p.blocks()) * 5 * b * dp) / bytes_per_cycle
            # The DMA overlaps the compute, but not wholly: the first Q and K tiles come before
            # anything can start, the last block's store after everything, and loads and stores
            # contend at block boundaries (about a fifth of the DRAM time in the runs measured in
            # docs/kernels.md)
            ends = (b * dp + t * dp + 4 * b * dp) / bytes_per_cycle
            cost = max(compute, dram) + 0.2 * dram + ends
            if cost < best_cost:
                best, best_cost = p, cost
    if best is None:
        raise ValueError(f"head dim {dim} does not fit this chip's SRAMs even with one query tile and one key tile "
                         f"({why})")
    return best


def attention_stream(cfg, plan: AttentionPlan, addr: dict, masks: dict, fmt: str = "int8") -> list[int]:
    """The whole attention as one command stream; ``addr``: DRAM addresses of the packed
    operands, constants, masks (``addr["masks"]``: one after the other), output and (FP8) V's
    block scales (``addr["vs"]``, one V^T tile's after the other) and P's (``addr["ps"]``);
    ``masks``: (block, tile) -> which of the distinct masks (loaded once, kept in ACC) the pair
    adds; ``fmt``: "int8", or the FP8 format of P and V."""
    R, L = cfg.rows, cfg.lanes
    nq, tk = plan.nq, plan.tk
    dp = plan.dim_pad
    fp8 = fmt != "int8"
    n_masks = len(set(masks.values()))
    lay = AttentionLayout(cfg, plan, fp8, n_masks)
    A = lay.acc
    k_a, v_a, qb, pb = lay.k_a, lay.v_a, lay.qb, lay.pb
    led = Ledger()
    out = [dma_stride(DmaQueue.LOAD, sram=tk, dram=plan.seq_k * R),  # the V^T tile's rows (one per panel)
           dma_load(Region.ACC, sram=A["CONST"], dram=addr["const"], words=3)]
    if n_masks:
        out.append(dma_load(Region.ACC, sram=A["MASK"], dram=addr["masks"], words=n_masks * nq * tk))
    if fp8:  # P's block scales: the same word for every block of every O^T MATMUL
        out.append(dma_load(Region.SB, sram=0, dram=addr["ps"], words=lay.nblk))
    blocks = plan.blocks()
    n_words = nq * tk
    pairs = [(bi, ti, k0) for bi, q0 in enumerate(blocks) for ti, k0 in enumerate(plan.tiles(q0))]
    # a pair loads its K and V tiles unless the pair before used the same ones (the last tile of
    # a block is the first of the next one: AttentionPlan.tiles)
    new_kv = [j == 0 or pairs[j][2] != pairs[j - 1][2] for j in range(len(pairs))]
    # O is written back one chunk of query tiles at a time; the next block's first write into a
    # chunk waits for that chunk's store (int8: the chunks of the O^T product; FP8: each tile)
    o_chunks = [range(c0, min(c0 + lay.nc, nq)) for c0 in range(0, nq, lay.nc)] if not fp8 else \
        [range(t, t + 1) for t in range(nq)]

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
        wait = led.queue_wait(SEM["V_FREE"]) if j else None
        out.append(dma_load(Region.A, sram=v_a, dram=addr["v"] + k0 * R, words=tk, rows=dp // R, wait=wait,
                            signal=None if fp8 else SEM["V_RDY"]))
        if fp8:  # its block scales, after it in the same queue (which completes in order)
            out.append(dma_load(Region.SA, sram=0, dram=addr["vs"] + (k0 // tk) * lay.sa_words * R,
                                words=lay.sa_words, signal=SEM["V_RDY"]))
        led.signal(SEM["V_RDY"])

    def pv_matmuls(ts: range, c_at, accumulate: bool, waits: dict, free_v: bool) -> None:
        """O^T (+)= V^T P^T for the query tiles ``ts``: panel i of tile t into ``c_at(t) + i R``;
        ``waits``: tile -> the semaphores its first MATMUL waits on (NOPs take all but one)."""
        for t in ts:
            for i in range(dp // R):
                w = waits.get(t, []) if i == 0 else []
                out.extend(nop(wait=x) for x in w[:-1])
                kw = {"fmt": FP8_FORMATS[fmt], "sa": i * lay.nblk, "sb": 0} if fp8 else {}
                last = free_v and t == ts[-1] and i == dp // R - 1
                out.append(matmul(a=v_a + i * tk, b=pb + t * tk, c=c_at(t) + i * R, k=tk, accumulate=accumulate,
                                  wait=w[-1] if w else None, signal=SEM["V_FREE"] if last else None, **kw))

    load_k(0)
    load_q(0)
    load_v(0)
    j = -1
    for bi, q0 in enumerate(blocks):
        tiles = plan.tiles(q0)
        more_blocks = bi + 1 < len(blocks)
        for ti, k0 in enumerate(tiles):
            j += 1
            last_tile = ti == len(tiles) - 1
            mask = (bi, ti) in masks
            more = j + 1 < len(pairs)
            next_kv = more and new_kv[j + 1]
            # S^T = K Q^T; the last MATMUL frees the K tile (if the next pair loads one) and, in
            # the last tile, Q
            if ti == 0:
                out.append(nop(wait=led.stream_wait(SEM["Q_RDY"])))
            wait = led.stream_wait(SEM["K_RDY"]) if new_kv[j] else None
            free = (SEM["K_FREE"] if next_kv else None, SEM["Q_FREE"] if last_tile and more_blocks else None)
            for t in range(nq):
                for r in range(tk // R):
                    last = t == nq - 1 and r == tk // R - 1
                    out.append(matmul(a=k_a + r * dp, b=qb + t * dp, c=A["ST"] + t * tk + r * R, k=dp, wait=wait,
                                      signal=free[0] if last else None, signal2=free[1] if last else None))
                    wait = None
            led.signal(*free)
            if more:
                if pairs[j + 1][0] != bi:
                    load_q(bi + 1)
                if next_kv:
                    load_k(j + 1)
            # S = fp32(S^T) * s_qk (+ mask)
            out.append(vec(VecOp.DEQ, a=A["ST"], b=A["CONST"], b_form=VecB.SCALAR, count=n_words, dst=A["ST"]))
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
            # P8 into the B SRAM, then O^T (+)= V^T P8^T; the last MATMUL frees the V tile (if the
            # next pair loads one)
            o_wait = {ch[0]: led.stream_wait(SEM["O_FREE"]) for ch in o_chunks} if ti == 0 and bi else {}
            v_wait = led.stream_wait(SEM["V_RDY"]) if new_kv[j] else None
            if fp8:
                out.append(vec(VecOp.CVT_F8, a=A["ST"], b=A["CONST"] + 1, b_form=VecB.SCALAR, count=n_words, dst=pb,
                               dst_sram=VecDst.B, fp8=FP8_FORMATS[fmt]))
                if ti:  # O * alpha, then the engine adds the product (C_old (+) acc)
                    out += [vec(VecOp.FMUL, a=A["O"] + t * dp, b=A["AL"] + t, b_form=VecB.LANE, count=dp,
                                dst=A["O"] + t * dp) for t in range(nq)]
                waits = {t: [w for w in ((v_wait if t == 0 else None), o_wait.get(t)) if w is not None]
                         for t in range(nq)}
                pv_matmuls(range(nq), lambda t: A["O"] + t * dp, bool(ti), waits, next_kv)
            else:
                out.append(vec(VecOp.CVT_I8, a=A["ST"], b=A["CONST"] + 1, b_form=VecB.SCALAR, count=n_words, dst=pb,
                               dst_sram=VecDst.B))
                for ts in o_chunks:  # T of a chunk of query tiles at a time, in the S^T words
                    c0 = ts[0]
                    t_at = A["ST"] - c0 * dp
                    waits = {c0: [v_wait]} if c0 == 0 and v_wait is not None else {}
                    pv_matmuls(ts, lambda t: t_at + t * dp, False, waits, next_kv and ts.stop == nq)
                    span = dict(count=len(ts) * dp, b=A["CONST"] + 2, b_form=VecB.SCALAR)
                    if ti == 0:
                        out.append(vec(VecOp.DEQ, a=A["ST"], dst=A["O"] + c0 * dp, wait=o_wait.get(c0), **span))
                    else:
                        out.append(vec(VecOp.DEQ, a=A["ST"], dst=A["ST"], **span))
                        out += [vec(VecOp.FMUL, a=A["O"] + t * dp, b=A["AL"] + t, b_form=VecB.LANE, count=dp,
                                    dst=A["O"] + t * dp) for t in ts]
                        out.append(vec(VecOp.FADD, a=A["O"] + c0 * dp, b=A["ST"], count=len(ts) * dp,
                                       dst=A["O"] + c0 * dp))
            if next_kv:
                led.signal(SEM["V_FREE"])
                load_v(j + 1)
        # O = O / l, stored one query tile at a time as soon as it is final; the store of a
        # chunk's last tile frees the chunk for the next block
        out.append(vec(VecOp.RECIP, a=A["L"], count=nq, dst=A["L"]))
        for ts in o_chunks:
            for t in ts:
                out.append(vec(VecOp.FMUL, a=A["O"] + t * dp, b=A["L"] + t, b_form=VecB.LANE, count=dp,
                               dst=A["O"] + t * dp, signal=SEM["O_RDY"]))
                led.signal(SEM["O_RDY"])
                free_o = more_blocks and t == ts[-1]
                out.append(dma_store(sram=A["O"] + t * dp, dram=addr["o"] + (bi * nq + t) * dp * 4 * L, words=dp,
                                     wait=led.queue_wait(SEM["O_RDY"]), signal=SEM["O_FREE"] if free_o else None))
                if free_o:
                    led.signal(SEM["O_FREE"])
    return out + led.drain()


async def attention(dev: KernelDevice, q: np.ndarray, k: np.ndarray, v: np.ndarray, *, causal: bool = False,
                    mitigations: Mitigations, recipe: str = "int8", bq: int | None = None, tk: int | None = None,
                    budget_cycles: int | None = None) -> tuple[np.ndarray, KernelStats]:
    """softmax(Q K^T / sqrt(D) [causal]) V for fp32 Q, K, V of shape (S, D), with the attention
    ``recipe`` (golden/attention.py: ATTENTION_RECIPES). Returns ``(fp32 (S, D), stats)``."""
    r = attention_recipe(recipe)
    q = check_matrix("q", q, (np.float32,), "fp32 queries, shape (S, D)")
    k = check_matrix("k", k, (np.float32,), "fp32 keys, shape (S, D)")
    v = check_matrix("v", v, (np.float32,), "fp32 values, shape (S, D)")
    if not (q.shape == k.shape == v.shape):
        raise ValueError(f"q, k and v must have the same shape (S, D); got {q.shape}, {k.shape}, {v.shape}")
    for name, x in (("q", q), ("k", k), ("v", v)):
        if not np.isfinite(x).all():
            raise ValueError(f"{name} has non-finite values: the {r.name} recipe scales by amax and cannot "
                             "carry Inf or NaN (mask with causal=True instead of -Inf scores)")
    cfg = dev.config
    require_vector(cfg, "attention")
    if r.fp8 and r.fmt not in cfg.formats:
        raise ValueError(f"the {r.name} recipe runs an {r.fmt} MATMUL, and this chip is built without that format "
                         f"(formats: {', '.join(cfg.formats)}); use the int8 recipe")
    gc = mitigations.gemm
    if gc.repeat_first_a_word or gc.avoid_unit_chunk:
        raise ValueError("the active errata mitigations ask the MATMUL streams for a repeated first A word or no "
                         "single-step chunks (GemmConstraints), which attention does not implement yet: run it on "
                         "a revision without those errata, or with their mitigations off to see the defect")
    seq, dim = q.shape
    plan = plan_attention(cfg, seq, dim, causal, bq, tk, dev.board.bytes_per_cycle, gc.b_reserved_top_words,
                          recipe=r.name)
    ops = quantize_attention(q, k, v, r)
    addr, obuf, masks, host = _stage(dev, plan, ops)
    cmds = attention_stream(cfg, plan, addr, masks, r.fmt)
    pairs = sum(min(q0 + 1, seq) if causal else seq for q0 in range(seq))  # (query, key) pairs computed
    useful = 2 * dim * pairs
    host["commands"] = len(cmds)
    scale_bytes = 0 if ops.v_scales is None else ops.v_scales.size  # one E8M0 code per 32 keys and dim
    async with Measure(dev, "attention", -(-useful // cfg.peak_macs_per_cycle),
                       {"shape": [seq, dim], "host": host, "recipe": r.name,
                        "plan": {"bq": plan.bq, "tk": plan.tk, "causal": causal}},
                       compulsory_bytes=3 * seq * dim + scale_bytes + 4 * seq * dim, useful_macs=useful,
                       vector_cycles=units_busy_cycles(cfg, cmds)) as meas:
        await dev.submit(cmds, budget_cycles)
        await dev.wait_idle(budget_cycles)
        await dev.check_no_error()
    raw = dev.dram_read(obuf).view("<f4").reshape(-1, plan.nq, plan.dim_pad, cfg.lanes)  # block, query tile, d, lane
    o = raw.transpose(0, 1, 3, 2).reshape(plan.seq_q, plan.dim_pad)[:seq, :dim].copy()
    meas.stats.recipe = r.name
    meas.stats.add_errata(mitigations.report(ATTN_UNITS))
    return o, meas.stats


def _stage(dev, plan: AttentionPlan, ops: AttentionOperands):
    """Pack the operands, constants and masks into DRAM; (addresses, the output buffer, the
    masks of each (block, tile), host counts)."""
    cfg = dev.config
    R, C, L = cfg.rows, cfg.cols, cfg.lanes
    dp, nq = plan.dim_pad, plan.nq
    seq = plan.seq

    def pad(x, n):
        out = np.zeros((n, dp), np.int8)
        out[:x.shape[0], :x.shape[1]] = x
        return out

    qp, kp = pad(ops.q8, plan.seq_q), pad(ops.k8, plan.seq_k)
    vp, v_scales = padded_v(ops, plan)
    q_words = qp.reshape(-1, nq, C, dp).transpose(0, 1, 3, 2)  # block, query tile, d, lane
    k_words = kp.reshape(-1, R, dp).transpose(0, 2, 1)  # key panel, d, row
    v_words = vp.reshape(plan.seq_k, dp // R, R).transpose(1, 0, 2)  # d panel, key, row
    consts = np.zeros((3, L), np.uint32)
    consts[:, 0] = attention_constants(ops)
    dev.dram.reset()
    addr = {}
    arrays = [("q", q_words), ("k", k_words), ("v", v_words)]
    if v_scales is not None:
        r = ops.recipe
        nblk = -(-plan.tk // MX_BLOCK)
        tiles = range(0, plan.seq_k, plan.tk)  # per V^T tile, per panel, per block: ROWS codes
        vs = np.stack([v_scales[[(k0 + b * MX_BLOCK) // MX_BLOCK for b in range(nblk)]].reshape(nblk, dp // R, R)
                       .transpose(1, 0, 2) for k0 in tiles])
        ps = np.full((nblk, C), 127 - r.p_exp, np.uint8)  # P's block scale 2**-p_exp for every query
        arrays += [("vs", vs), ("ps", ps)]
    for name, arr in arrays:
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
    if len(distinct) > _n_masks(seq, plan.bq, plan.tk, plan.causal):  # the plan made room for that many
        raise AssertionError(f"{len(distinct)} distinct masks for plan bq={plan.bq} tk={plan.tk}")
    if distinct:
        mbuf = dev.dram.alloc(sum(len(k) for k in distinct), "masks")
        dev.dram_write(mbuf, np.frombuffer(b"".join(distinct), np.uint8))
        addr["masks"] = mbuf.addr
    obuf = dev.dram.alloc(len(plan.blocks()) * nq * dp * 4 * L, "O")
    addr["o"] = obuf.addr
    host = {"masks": len(masks), "bytes_staged": int(sum(a.nbytes for _, a in arrays))}
    return addr, obuf, masks, host
