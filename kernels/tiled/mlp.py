# kernels/tiled/mlp.py: a fused int8 MLP block, computed transposed (tokens are columns):
#   H^T = W1^T X^T (int32); h = DEQ(H^T, s1); g = GELU(h) (tanh form as a sigmoid, nine VEC ops);
#   q = to_b(g, s2) (int8, straight into the B SRAM); Y^T = W2^T q (int32).
# The token panels go in groups of `gb`, the hidden panels in groups of `gh` (one to_b tile each: a
# K chunk of the second GEMM), the out panels in groups of `go`, d_in in chunks of `kc` K steps.
# One pipeline runs over the work items of every token group, so each item's loads are few and the
# next item's are issued while this one computes. Three orders (kernel_args picks one that fits):
#   stream:   per hidden group, q is made and used at once by every out group's accumulator
#             (the whole Y^T of the token group stays in ACC; q lives one hidden group);
#   resident: every hidden group's q of the token group stays in the B SRAM, then the out groups
#             run one after the other (Y^T of one out group in ACC);
#   spill:    g goes to the DRAM scratch tensor gt and comes back (ACC) before each to_b.
import itertools
import math

import numpy as np

from kernels import tile
from kernels.tile.runtime import TensorSpec
from kernels.tile.spec import KernelSpec, Param

ORDERS = ("stream", "resident", "spill")
C3, K_GELU = 0.044715, -2.0 * math.sqrt(2.0 / math.pi)   # GELU's constants, each rounded once to fp32


def _f32(v):  # the fp32 bit pattern of v, rounded once from the Python float
    return int(np.array([v], dtype=np.float32).view(np.uint32)[0])


def _items(order, tp, hp, op, nk, gb, gh, go):
    for j in range(0, tp, gb):
        for hg in range(0, hp, gh):
            yield from (("h", j, hg, c) for c in range(nk))
            if order == "stream":
                yield from (("o", j, og, hg) for og in range(0, op, go))
        if order != "stream":
            yield from (("o", j, og, hg) for og in range(0, op, go) for hg in range(0, hp, gh))


def mlp(w1t, xt, w2t, yt, gt=None, *, rows, order, gb, gh, go, kc, keep_x, stages, s1, s2):
    c3, kg, one = tile.scalar(bits=_f32(C3)), tile.scalar(bits=_f32(K_GELU)), tile.scalar(1.0)
    sc1, sc2 = tile.scalar(bits=_f32(s1)), tile.scalar(bits=_f32(s2))
    hp, op, nk = w1t.panels, w2t.panels, -(-w1t.steps // kc)
    last_hg = (hp - 1) // gh * gh
    xs, qs, ys, acc, g_next = {}, {}, {}, None, None
    for kind, j, a, b in tile.pipeline(_items(order, xt.panels, hp, op, nk, gb, gh, go), stages=stages):
        hg = a if kind == "h" else b                      # "h": hidden group a, K chunk b of the first GEMM
        view = w1t[hg:hg + gh, b * kc:(b + 1) * kc] if kind == "h" else \
            w2t[a:a + go, hg * rows:min(hg + gh, hp) * rows]   # "o": out group a, hidden group b
        w = tile.load(view)                               # one load line: one slot size for every A tile
        if kind == "h":
            if hg == 0 or not keep_x:                     # X^T's chunks: kept for every hidden group, or reloaded
                xs[b] = tile.load(xt[j:j + gb, b * kc:(b + 1) * kc])
            acc = tile.matmul(w, xs[b], acc if b else None)
            if b < nk - 1:
                continue
            h = tile.dequant(acc, sc1)
            t = h * h                                     # GELU(h) = h * recip(1 + exp(K (h + C3 h^3)))
            t = t * h
            t = t * c3
            t = t + h
            t = t * kg
            t = tile.exp(t)
            t = t + one
            t = tile.recip(t)
            g = h * t
            if order != "spill":
                qs[hg] = tile.to_b(g, sc2)
                continue
            for p in range(min(gh, hp - hg)):
                tile.store(gt[hg + p, j:j + gb], g[p])
            if hg == last_hg:                             # the first reload, issued by hand: the compiler
                g_next = tile.load(gt[0:gh, j:j + gb])    # issues no load of written data early
            continue
        if order == "spill":                              # this item's g, and the next item's load
            g, nh = g_next, (hg + gh if hg < last_hg else 0)
            if hg < last_hg or a + go < op:
                g_next = tile.load(gt[nh:nh + gh, j:j + gb])
            qs[hg] = tile.to_b(g, sc2)
        ys[a] = tile.matmul(w, qs[hg], ys[a] if hg else None)
        if hg == last_hg:
            for p in range(min(go, op - a)):
                tile.store(yt[a + p, j:j + gb], ys[a][p])


# ---- the declaration --------------------------------------------------------------------------

def _pad16(n):  # W2^T's K (d_hidden) padded to 16, a multiple of every ROWS (2, 4, 8, 16)
    return -(-n // 16) * 16


def _tensors(p):
    ts = [TensorSpec("w1t", p["d_hidden"], p["d_in"], "int8", layout="a_panels"),
          TensorSpec("xt", p["d_in"], p["tokens"], "int8", layout="b_panels"),
          TensorSpec("w2t", p["d_out"], _pad16(p["d_hidden"]), "int8", layout="a_panels"),
          TensorSpec("yt", p["d_out"], p["tokens"], "int32", role="out", layout="c_tiles")]
    if p["order"] in ("auto", "spill"):                # the scratch for a spill (auto: if one is planned)
        ts.append(TensorSpec("gt", p["d_hidden"], p["tokens"], "fp32", role="out", layout="c_tiles"))
    return ts


def _inputs(p, seed, extremes):
    """X ~ N(0, 32^2) in int8; W1 scaled so that h = s1 W1^T X^T ~ N(0, 1); W2 ~ N(0, 32^2 / d_hidden).
    W2^T's columns past d_hidden are zero. --extremes: every value one of -128, -127, -1, 0, 1, 127."""
    rng = np.random.default_rng(seed)
    dh = p["d_hidden"]

    def draw(shape, std):
        if extremes:
            return rng.choice(np.array([-128, -127, -1, 0, 1, 127], np.int8), size=shape)
        return np.clip(np.rint(rng.standard_normal(shape) * std), -127, 127).astype(np.int8)

    w2 = np.zeros((p["d_out"], _pad16(dh)), np.int8)
    w2[:, :dh] = draw((p["d_out"], dh), 32.0 / math.sqrt(dh))
    return {"w1t": draw((dh, p["d_in"]), 1.0 / (p["s1"] * 32.0 * math.sqrt(p["d_in"]))),
            "xt": draw((p["d_in"], p["tokens"]), 32.0), "w2t": w2}


def _golden(ins, p, lanes):  # p["order"]: the order kernel_args chose; gt is compared only if it spilled
    from golden.mlp import mlp as golden_mlp
    y, g = golden_mlp(ins["w1t"], ins["xt"], ins["w2t"][:, :p["d_hidden"]], p["s1"], p["s2"])
    return {"yt": y, "gt": g} if p["order"] == "spill" else {"yt": y}


def _reference(ins, p):
    from golden.mlp import reference
    return {"yt": reference(ins["w1t"], ins["xt"], ins["w2t"][:, :p["d_hidden"]], p["s1"], p["s2"])}


def _fits(order, cfg, dims, gb, gh, go, kc, keep_x, st):
    """Words of each SRAM the order needs, with room for the pipeline's next loads and the A0
    mitigations (one more A word per panel: FL-ME-002; B's top word: FL-SR-001)."""
    R = cfg.rows
    K1, hp, op = dims
    nk = -(-K1 // kc)
    w1, w2 = gh * (kc + 1), go * (gh * R + 1)         # the A tiles of W1^T and of W2^T
    a = st * max(w1, w2)                              # one load line: st slots of one size in flight
    xb = (gb * (K1 + (st - 1) * kc) if nk > 1 else st * gb * K1) if keep_x else st * gb * kc
    b = xb + 2 * gb * gh * R + (gb * hp * R if order == "resident" else 0)
    t = gh * gb * R
    acc = 3 * t + {"stream": op * gb * R, "resident": 2 * go * gb * R, "spill": 2 * go * gb * R + 2 * t}[order]
    slack = 8
    return a + slack <= cfg.operand_depth and b + slack <= cfg.operand_depth and acc + 16 <= cfg.acc_depth


def _cost(order, cfg, bw, p, dims, gb, gh, go, kc, keep_x, st):
    """Estimated cycles: the busiest of DRAM and the command stream (MATMULs + VECs), plus items."""
    R, C = cfg.rows, cfg.cols
    K1, hp, op = dims
    tp = -(-p["tokens"] // C)
    groups, nk, nh, no = -(-tp // gb), -(-K1 // kc), -(-hp // gh), -(-op // go)
    w = hp * R * K1 + op * R * hp * R
    dram = groups * w + tp * C * K1 * (1 if keep_x else nh) + op * R * tp * C * 4
    if order == "spill":
        dram += (1 + no) * hp * R * tp * C * 4
    mm = tp * hp * nk * (max(kc, R, C) + 4) + tp * op * nh * (max(gh * R, R, C) + 4)
    vec = 11 * (hp * R * tp + 2 * nh * groups)
    items = groups * nh * (nk + no)
    return max(dram / bw, mm + vec) + (20 if st > 2 else 30) * items


def _candidates(n, fixed):
    if fixed:
        return [fixed]
    return sorted({-(-n // d) for d in range(1, min(n, 64) + 1)}, reverse=True)


def _plan(p, target):
    cfg = target.config
    R, C = cfg.rows, cfg.cols
    dims = (p["d_in"], -(-p["d_hidden"] // R), -(-p["d_out"] // R))
    tp = -(-p["tokens"] // C)
    try:                                   # the board's DRAM bandwidth; docs/chip.md's default if unset
        bw = float(target.board.bytes_per_cycle)
    except (AttributeError, TypeError):
        bw = R * C / 16
    orders = ORDERS if p["order"] == "auto" else (p["order"],)
    best = None
    for order in orders:
        for kc in _candidates(p["d_in"], p["kc"]):
            for gh in _candidates(dims[1], p["gh"]):
                for go in _candidates(dims[2], p["go"]):
                    for keep_x, st in itertools.product((True, False), (p["stages"],) if p["stages"] else (3, 2)):
                        for gb in _candidates(tp, p["gb"]):
                            if _fits(order, cfg, dims, gb, gh, go, kc, keep_x, st):
                                c = _cost(order, cfg, bw, p, dims, gb, gh, go, kc, keep_x, st)
                                if best is None or c < best[0]:
                                    best = (c, order, gb, gh, go, kc, keep_x, st)
                                break                  # a smaller gb only costs more
    if best is None and all(p[n] for n in ("gb", "gh", "go", "kc")):   # the user's tiling: the
        return orders[0], p["gb"], p["gh"], p["go"], p["kc"], True, p["stages"] or 2  # compiler judges it
    if best is None:
        hint = " (--order spill or auto keeps g in DRAM between the two GEMMs)" if p["order"] != "spill" else ""
        raise ValueError(f"mlp: no tiling of {p['tokens']} tokens, {p['d_in']} -> {p['d_hidden']} -> "
                         f"{p['d_out']} fits a {R}x{C} chip's SRAMs in order {p['order']}{hint}")
    return best[1:]


def _kernel_args(p, target):
    order, gb, gh, go, kc, keep_x, stages = _plan(p, target)
    return {"rows": target.config.rows, "order": order, "gb": gb, "gh": gh, "go": go, "kc": kc,
            "keep_x": keep_x, "stages": stages, "s1": p["s1"], "s2": p["s2"]}


SPECS = [KernelSpec(
    name="mlp", summary="fused int8 MLP block, Y^T = W2^T int8(GELU(DEQ(W1^T X^T, s1)) s2)", source=mlp,
    params=(Param("tokens", int, 16, "tokens (columns of X^T and Y^T)", 1, 4096, shape=True),
            Param("d_in", int, 16, "input features (K of the first GEMM)", 1, 4096, shape=True),
            Param("d_hidden", int, 32, "hidden features (K of the second GEMM)", 1, 4096, shape=True),
            Param("d_out", int, 16, "output features", 1, 4096, shape=True),
            Param("s1", float, 2.0 ** -10, "the dequant scale of H^T (fp32)", 2.0 ** -126, 2.0 ** 64),
            Param("s2", float, 16.0, "the int8 scale of GELU(h): q = int8(g * s2)", 2.0 ** -126, 2.0 ** 64),
            Param("order", str, "auto", "loop order: stream (Y^T of a token group in ACC), resident (its q "
                  "in B), spill (g through the DRAM tensor gt); auto: the cheapest that fits (auto and spill "
                  "declare gt, an output checked only when the kernel spilled)", choices=("auto",) + ORDERS),
            Param("gb", int, 0, "token panels per group (0: the planner's)", 0, 4096),
            Param("gh", int, 0, "hidden panels per group (0: the planner's)", 0, 4096),
            Param("go", int, 0, "out panels per group (0: the planner's)", 0, 4096),
            Param("kc", int, 0, "K steps of d_in per chunk (0: the planner's)", 0, 4096),
            Param("stages", int, 0, "pipeline stages (0: the planner's, 3 or 2)", 0, 4)),
    tensors=_tensors, inputs=_inputs, golden=_golden, reference=_reference, kernel_args=_kernel_args,
    units=("ENGINE", "SRAM", "CMDPROC", "DMA", "VECTOR"),
    macs=lambda p: p["tokens"] * p["d_hidden"] * (p["d_in"] + p["d_out"]),
    shape_from={"tokens": ("xt", 1), "d_in": ("xt", 0), "d_hidden": ("w1t", 0), "d_out": ("w2t", 0)},
    bench=({"tokens": 64, "d_in": 64, "d_hidden": 256, "d_out": 64},),
    bringup=({"tokens": 5, "d_in": 7, "d_hidden": 9, "d_out": 6},),
    examples=("--tokens 16 --d-in 16 --d-hidden 32 --d-out 16",
              "--tokens 37 --d-in 19 --d-hidden 50 --d-out 13 --rev A0",
              "--tokens 8 --d-in 8 --d-hidden 24 --d-out 8 --order spill"))]
