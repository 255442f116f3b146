"""Errata mitigations as compiler passes: written once, applied to every tile-language kernel.

The active errata reach the compiler as :class:`workarounds.GemmConstraints` (each registry
record names the knobs its mitigation sets); each knob is a pass at one stage of the compiler:

* ``avoid_unit_chunk`` (FL-ME-001, a MATMUL of one K step ignores accumulate): before
  scheduling, an accumulating one-step MATMUL becomes a MATMUL into a scratch tile and a VEC
  IADD of it into the accumulator (int32 addition wraps exactly as the engine's does);
* ``repeat_first_a_word`` (FL-ME-002, a back-to-back MATMUL reads its first A word at the
  previous one's base + K): before placement every A tile gets one more word per panel, a copy
  of the panel's first word, loaded by a second DMA; after lowering a FENCE goes before a MATMUL
  whose A panel differs from its predecessor's (only then is the stale word a wrong one);
* ``b_reserved_top_words`` (FL-SR-001, the engine reads the top word of B as zero): placement
  never uses those words.

The stream passes of workarounds/passes.py (FL-CP-001, FL-DM-001, FL-DM-002, FL-VU-001) still
run on every submitted stream, through the device's submit filter.
"""

from __future__ import annotations

import numpy as np

from .ir import Buffer, Op, Queue, Storage, TileError

__all__ = ["rewrite", "layout", "reserved", "gaps"]


def rewrite(ops: list[Op], constraints, config) -> list[Op]:
    if constraints is None or not constraints.avoid_unit_chunk:
        return ops
    out = []
    for op in ops:
        if op.kind != "matmul" or not op.args["accumulate"] or op.args["k"] != 1:
            out.append(op)
            continue
        if not config.vector:
            raise TileError(f"{op.line}: a one-step accumulating MATMUL on a revision with FL-ME-001 is mitigated "
                            f"with a VEC IADD, and this chip has no vector unit: choose K chunks with no "
                            f"trailing chunk of one step")
        c = op.args["c_view"]  # a row of tiles (matmul by="a") or a tile of each row (by="b")
        st = Storage("ACC", c.words, f"k1_{c.storage.name}", op.line)
        scratch = Buffer(st, c.rows, c.wpr, c.dtype)
        # the engine's write-back, C_old + the MATMUL's sum: int32 (wrapping), or fp32 for an FP MATMUL
        add_op = "fadd" if c.dtype == "fp32" else "iadd"
        step = op.args.get("c_step", config.rows)
        mm = Op("matmul", Queue.EXEC, op.line, {**op.args, "accumulate": False, "c_view": scratch,
                                                 "c_step": step if c.rows == 1 else c.wpr},
                reads=[r for r in op.reads if r is not c], writes=[scratch])
        cmds = [(add_op, r * c.row_stride, r * c.wpr, "vector", c.wpr, r * c.row_stride) for r in range(c.rows)]
        add = Op("vec", Queue.EXEC, op.line, {"op": f"{add_op} (FL-ME-001)", "cmds": cmds},
                 reads=[c, scratch], writes=[c])
        for x in (mm, add):
            x.loop, x.iteration = op.loop, op.iteration
        out += [mm, add]
    return out


def layout(order: list[Op], constraints) -> None:
    if constraints is None or not constraints.repeat_first_a_word:
        return
    loaded = {id(op.writes[0]): op for op in order if op.kind == "load" and op.writes[0].storage.region == "A"}
    for op in loaded.values():
        buf = op.writes[0]
        buf.stride = buf.wpr + 1  # each panel, then the copy of its first word
        buf.storage.words = buf.span + 1
        op.args["repeat_first"] = True
    for op in order:
        if op.kind == "matmul":
            a = op.args["a_tile"]
            if id(a) not in loaded:
                raise TileError(f"{op.line}: with FL-ME-002's mitigation a MATMUL takes its A tile as loaded "
                                f"(not a view of one)")
            op.args["a_view"].offset = a.offset + op.args["p"] * a.row_stride


SPACER_K = 2  # a spacer MATMUL's steps: not 1 (FL-ME-001), and as short as that allows


def reserved(constraints) -> dict[str, tuple[int, int]]:
    """SRAM words placement leaves alone, as (bottom, top) per region: FL-SR-001's top B word;
    with FL-ME-002 the spacers' A words at the bottom (they read any A word below the panel they
    precede) and their zero B words at the bottom of B (not at the top, where they would hide
    FL-SR-001's zero word from a stream that lacks its mitigation)."""
    out: dict[str, tuple[int, int]] = {}
    if constraints is None:
        return out
    bottom = SPACER_K if constraints.repeat_first_a_word else 0
    if bottom:
        out["A"] = (bottom, 0)
    if bottom or constraints.b_reserved_top_words:
        out["B"] = (bottom, constraints.b_reserved_top_words)
    return out


def gaps(order: list[Op], constraints, config, tensors: list) -> tuple[list[Op], int]:
    """FL-ME-002: before a MATMUL row that would issue back to back after one on another A panel, a
    spacer: a 2-step MATMUL on zero B words (it adds 0 into the row's first tile) whose A range
    ends where the panel starts, so the stale read of the row's first MATMUL is its right first
    word (a FENCE, VEC or REDUCE in between drains the engine: no stale read then, no spacer).
    A spacer holds the feed ``max(2, min_matmul_cycles)`` cycles, a FENCE drains the engine
    (4 against 12 cycles on 4x4). On the placed ops, before the semaphores are worked out."""
    if constraints is None or not constraints.repeat_first_a_word or not any(op.kind == "matmul" for op in order):
        return order, 0
    from .ir import TensorDecl

    top = 0  # the zero B words: the bottom of B (reserved)
    zeros = TensorDecl("spacer_zeros", 1, SPACER_K, "int8", SPACER_K, 0, "const", config.cols,
                       np.zeros(SPACER_K * config.cols // 4 or 1, np.uint32))
    tensors.append(zeros)
    zst = Storage("B", SPACER_K, "spacer_zeros", "(FL-ME-002)", addr=top)
    zbuf = Buffer(zst, 1, SPACER_K, "int8")
    zload = Op("load", Queue.LOAD, "(FL-ME-002: the spacers' zero B words)", writes=[zbuf],
               dram_reads=[(zeros, 0, 1, 0, SPACER_K)])
    out, n = [zload], 0
    prev = None
    for op in order:
        if op.kind == "matmul":
            a = op.args["a_view"]
            at = a.storage.addr + a.offset
            here = (at, op.args["k"])
            if prev is not None and prev != here and "fmt" in op.args:
                # FP: a FENCE (an FP spacer could make NaN of NaN x 0 or +0 of -0), as the hand stream does
                fe = Op("fence", Queue.EXEC, op.line, {"op": "FL-ME-002 fence"})
                fe.loop, fe.iteration = op.loop, op.iteration
                out.append(fe)
                n += 1
                prev = None
            if prev is not None and prev != here:
                c = op.args["c_view"]
                slot = Buffer(c.own, 1, config.rows, "int32", False, c.offset)
                sp = Op("matmul", Queue.EXEC, op.line, {"op": "FL-ME-002 spacer", "spacer": True, "a_addr": at - SPACER_K,
                                                        "b_addr": top, "k": SPACER_K, "c_view": slot},
                        reads=[zbuf, slot], writes=[slot])
                sp.loop, sp.iteration = op.loop, op.iteration
                out.append(sp)
                n += 1
                prev = (at - SPACER_K, SPACER_K)
            prev = here
        elif op.queue == Queue.EXEC:
            prev = None
        out.append(op)
    return out, n
