"""int8 GEMM, C = A (M x K) @ B (K x N): groups of ga x gb output tiles, K in chunks of kc steps,
the next chunk's operands loaded while this one multiplies; a tile row is stored as soon as its
last chunk is done. With an epilogue, the row first gets its bias added (int32, wrapping) and is
requantized to int8 by each column's parameters (scale, ReLU), in place, before its store.
golden.gemm_int8 and golden.epilogue are the references."""

from __future__ import annotations

from kernels import tile


def chains(a, b, *, ga: int, gb: int, kc: int, stages: int):
    """The GEMM loop every GEMM kernel shares (int8 here, FP8/MX in gemm_fp.py): groups of ga x gb
    output tiles, K in chunks of kc steps, the loads pipelined ``stages`` deep; yields each group
    once its accumulation chain is done, as (first A panel, first B panel, accumulator, last B tile)."""
    K = a.steps
    steps = [(i, j, k) for i in range(0, a.panels, ga) for j in range(0, b.panels, gb) for k in range(0, K, kc)]
    acc = None
    for i, j, k in tile.pipeline(steps, stages=stages):
        bt = tile.load(b[j:j + gb, k:k + kc])
        acc = tile.matmul(tile.load(a[i:i + ga, k:k + kc]), bt, acc if k else None)
        if k + kc >= K:  # the chain is done
            yield i, j, acc, bt


def gemm(a, b, *rest, ga: int, gb: int, kc: int, total: bool = False, stages: int = 2):
    *epilogue, c = rest[:-1] if total else rest  # (bias, qparams): an int32 word per C tile column, lane j for column j
    bias, qparams = [tile.load(t[0]) for t in epilogue] or (None, None)
    per_row = -(-b.panels // gb)
    partials = tile.scratch("partials", 1, -(-a.panels // ga) * per_row) if total else None  # a word per group
    for i, j, acc, bt in chains(a, b, ga=ga, gb=gb, kc=kc, stages=stages):
        for p in range(acc.rows):  # the chain is done: each tile row, requantized if asked, stored
            row = acc[p]
            if bias is not None:
                row = tile.requant(row + bias[0, j:j + bt.rows], qparams[0, j:j + bt.rows])
            tile.store(c[i + p, j:j + gb], row)
        if total:  # the group's sum right behind its MATMULs, one REDUCE over its accumulator words
            g = i // ga * per_row + j // gb
            tile.store(partials[0, g:g + 1], tile.row_sum(acc.reshape(1, acc.rows * acc.words_per_row)))
    if total:  # and the groups' partial sums reduced again
        tile.store(rest[-1][0:1], tile.row_sum(tile.load(partials[0:1])))


# ---- declaration ---------------------------------------------------------------------------------

import numpy as np  # noqa: E402

import golden  # noqa: E402
from kernels.tile.runtime import TensorSpec  # noqa: E402
from kernels.tile.spec import AtenOp, KernelRefused, KernelSpec, Param  # noqa: E402


EPILOGUES = ("none", "requant", "relu", "sum")
_QUANT = ("requant", "relu")


def _tensors(p):
    m, n, k = p["m"], p["n"], p["k"]
    epi = [TensorSpec("bias", 1, n, "int32"), TensorSpec("qparams", 1, n, "int32")] if p["epilogue"] in _QUANT else []
    total = [TensorSpec("total", 1, 1, "int32", role="out")] if p["epilogue"] == "sum" else []
    return [TensorSpec("a", m, k, "int8", layout="a_panels"), TensorSpec("b", k, n, "int8", layout="b_panels"),
            *epi, TensorSpec("c", m, n, "int32", role="out", layout="c_tiles"), *total]


def _inputs(p, seed, extremes):
    """Uniform int8 operands; ``extremes``: only -128, 127, -1, 0 and 1 (sums that wrap int32 at
    large K). An epilogue adds a seeded int32 bias in [-2**16, 2**16) and per-column scales
    calibrated on the data (golden.epilogue.calibrate_scales), as REQUANT parameter words."""
    rng = np.random.default_rng(seed)
    if extremes:
        pick = np.array([-128, 127, -1, 0, 1], np.int8)
        out = {"a": rng.choice(pick, (p["m"], p["k"])), "b": rng.choice(pick, (p["k"], p["n"]))}
    else:
        out = {"a": rng.integers(-128, 128, (p["m"], p["k"]), dtype=np.int8),
               "b": rng.integers(-128, 128, (p["k"], p["n"]), dtype=np.int8)}
    if p["epilogue"] in _QUANT:
        from golden.epilogue import calibrate_scales
        from kernels.epilogue import Epilogue

        bias = rng.integers(-(2**16), 2**16, p["n"]).astype(np.int32)
        scale = calibrate_scales(out["a"], out["b"], bias)
        out.update(Epilogue.checked(p["n"], bias, scale, p["epilogue"] == "relu").tensors())
    return out


def _golden(i, p, lanes):
    if p["epilogue"] == "sum":  # C, and the sum of all of it wrapped to int32
        c = golden.gemm_int8(i["a"], i["b"])
        return {"c": c, "total": np.array([[golden.wrap_int32(int(c.astype(np.int64).sum()))]], np.int32)}
    if p["epilogue"] == "none":
        return {"c": golden.gemm_int8(i["a"], i["b"])}
    from golden.epilogue import gemm_epilogue_words

    return {"c": gemm_epilogue_words(i["a"], i["b"], i["bias"][0], i["qparams"][0].view(np.uint32))}


def _reference(i, p):
    """float64 (a @ b + bias) * scale (ReLU'd), the scale read back from the parameter words."""
    if p["epilogue"] in ("none", "sum"):
        c = i["a"].astype(np.float64) @ i["b"].astype(np.float64)
        return {"c": c} if p["epilogue"] == "none" else {"c": c, "total": np.array([[c.sum()]])}
    q = i["qparams"][0].view(np.uint32).astype(np.int64)
    scale = (q & 0xFFFFFF) * 2.0 ** -((q >> 24) & 63)
    y = (i["a"].astype(np.float64) @ i["b"].astype(np.float64) + i["bias"][0]) * scale
    return {"c": np.maximum(y, 0.0) if p["epilogue"] == "relu" else y}


def _args(p, t, block: int = 1, acc_reserved: int = 0, nbuf: int | None = None):
    """Tile groups and K chunk from the GEMM planner (kernels/gemm_plan.py plan_gemm) for the SRAM the
    errata passes leave (FL-ME-002: a word more per A panel and the spacers' words; FL-SR-001:
    B's top word), unless
    given. Candidates: groups that fill the accumulator SRAM or half of it (the next group's
    MATMULs then never wait for this one's stores), K in chunks as long as fit or in four; the
    planner's DRAM model picks. ``block``: K chunks a multiple of it (the FP path's 32-step scale
    blocks, kernels/tiled/gemm_fp.py), whose FL-ME-002 gaps are FENCEs; ``acc_reserved``: accumulator
    words the kernel keeps for itself (a scalar); ``nbuf``: operand buffers (2: double buffering,
    1: the chunks take turns with their loads)."""
    from kernels.gemm_plan import plan_gemm

    nbuf = nbuf or p.get("stages", 2)
    cfg, cons = t.config, t.constraints
    extra = 1 if cons is not None and cons.repeat_first_a_word else 0
    spacer = 2 * extra  # FL-ME-002's spacers: A words below the first buffer, zero B words (kernels/tile/errata.py)
    reserved = (cons.b_reserved_top_words if cons is not None else 0) + spacer
    bw = t.board.bytes_per_cycle
    best, best_key = None, None
    # an epilogue keeps its bias and parameter words (one of each per C tile column) in the
    # accumulator SRAM for the whole run: the groups get the rest
    # (a sum keeps its result words there: its REDUCE's, and FL-RU-002's pair)
    room = cfg.acc_depth - (2 * -(-p["n"] // cfg.cols) if p["epilogue"] in _QUANT else 4 if p["epilogue"] == "sum"
                            else 0) - acc_reserved
    for acc_words in ((None, room // 2) if room == cfg.acc_depth else (room, room // 2, room // 4)):
        if acc_words is not None and acc_words < cfg.rows:
            continue
        for k_chunk in ((p["kc"],) if p["kc"] else (None, -(-p["k"] // 4))):
            try:
                plan = plan_gemm(cfg, p["m"], p["n"], p["k"], operand_words=cfg.operand_depth // nbuf, nbuf=nbuf,
                                 a_words=(cfg.operand_depth - spacer) // nbuf,
                                 b_words=(cfg.operand_depth - reserved) // nbuf,
                                 a_panel_extra=extra, avoid_unit_chunk=cons is not None and cons.avoid_unit_chunk,
                                 acc_words=acc_words, k_chunk=k_chunk, bytes_per_cycle=bw, block=block,
                                 row_gap=("spacer" if block == 1 else "fence") if extra else "")
            except ValueError:
                continue
            # the model's cycles, then more chunks: where it sees no difference, a chunk more to
            # overlap is what measured faster (8x8, 128^3 at 8 B/cycle: 35,275 cycles in 4 chunks,
            # 36,785 in 2)
            key = (round(max(plan.predicted_cycles(cfg), plan.dma_cycles(cfg, bw))), -plan.chunks)
            if best is None or key < best_key:
                best, best_key = plan, key
    if best is None:
        raise ValueError(f"no tile groups fit a {p['m']}x{p['n']}x{p['k']} GEMM on this chip")
    # as many groups, of balanced sizes: a thin edge group (16 x 15 then 16 x 1 tiles) starves
    # the engine while its operands arrive (64^3 with an epilogue: 36,678 cycles; 16 x 8: 31,662)
    tm, tn = -(-p["m"] // cfg.rows), -(-p["n"] // cfg.cols)
    bga, bgb = -(-tm // -(-tm // best.ga)), -(-tn // -(-tn // best.gb))
    ga, gb = p["ga"] or bga, p["gb"] or bgb
    total = {"total": True} if p["epilogue"] == "sum" else {}
    if nbuf == 1:
        total["stages"] = 1
    if (ga, gb) == (bga, bgb):
        return {"ga": ga, "gb": gb, "kc": best.kc, **total}
    # groups given: the longest chunk (at most kc) their buffers hold, no trailing one-step chunk
    kc = min(p["k"], p["kc"] or p["k"], (cfg.operand_depth - spacer) // nbuf // ga - extra,
             (cfg.operand_depth - reserved) // nbuf // gb)
    if kc < p["k"] and kc >= block:
        kc -= kc % block
    while kc > 1 and p["k"] % kc == 1 and cons is not None and cons.avoid_unit_chunk:
        kc -= block
    return {"ga": ga, "gb": gb, "kc": max(kc, 1), **total}


def _requires(p, config):
    """An epilogue runs on the vector unit and keeps two words per C tile column in the
    accumulator SRAM (kernels/epilogue.py max_columns)."""
    from kernels.epilogue import max_columns

    if p["epilogue"] in _QUANT and not config.vector:
        return (f"epilogue {p['epilogue']} runs on the vector unit, and this chip was built without it "
                "(vector=False; --no-vector)")
    if p["epilogue"] in _QUANT and p["n"] > max_columns(config):
        return (f"epilogue {p['epilogue']} keeps two parameter words per {config.cols} columns in the accumulator "
                f"SRAM ({config.acc_depth} words), so n can be at most {max_columns(config)}; got {p['n']}")
    return None


def _aten_int_mm(a, b):
    """aten::_int_mm (``torch._int_mm``): int8 (M, K) @ int8 (K, N) -> int32, the kernel itself."""
    for name, t in (("self", a), ("mat2", b)):
        if t.dtype != np.int8 or t.ndim != 2:
            raise KernelRefused(f"_int_mm's {name} must be a 2-D int8 matrix, not {t.ndim}-D {t.dtype}")
    return {"a": a, "b": b}, {}, lambda c: c


SPECS = [KernelSpec(
    name="gemm", summary="int8 x int8 -> int32 GEMM written in the tile language, C = A(MxK) @ B(KxN)",
    source=gemm,
    params=(Param("m", int, 64, "rows of A and C", 1, 4096, shape=True),
            Param("n", int, 64, "columns of B and C", 1, 4096, shape=True),
            Param("k", int, 64, "the inner dimension", 1, 1 << 20, shape=True),
            Param("ga", int, 0, "tile rows per group (0: the planner's)", 0, 4096),
            Param("gb", int, 0, "tiles per group row (0: the planner's)", 0, 4096),
            Param("kc", int, 0, "at most this many K steps per chunk (0: the planner's choice)", 0, 65535),
            Param("epilogue", str, "none", "on the vector unit before each store: 'requant' adds an int32 bias "
                  "per column and requantizes to int8 by per-column scales; 'relu' the same, clamped at 0; 'sum': C "
                  "and the wrapping int32 sum of all of it (a REDUCE per tile group behind its MATMULs)",
                  choices=EPILOGUES),
            Param("stages", int, 2, "operand buffers: 2 loads the next K chunk while this one multiplies, 1 makes "
                  "loads and MATMULs take turns (what the overlap is worth)", 1, 2)),
    tensors=_tensors, inputs=_inputs, golden=_golden, reference=_reference, requires=_requires,
    kernel_args=_args, macs=lambda p: p["m"] * p["n"] * p["k"],
    shape_from={"m": ("a", 0), "k": ("a", 1), "n": ("b", 1)}, needs=(), units=("ENGINE", "SRAM", "CMDPROC", "DMA", "REDUCE"), aten=AtenOp("aten::_int_mm", _aten_int_mm),
    bench=({"m": 256, "n": 256, "k": 256}, {"m": 4, "n": 512, "k": 512}),
    bringup=({"m": 37, "n": 19, "k": 100},),
    examples=("--m 64 --n 64 --k 64", "--m 37 --n 19 --k 100 --rev A0", "--m 256 --n 256 --k 256 --epilogue requant"))]
