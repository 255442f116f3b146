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

The reduction unit's errata are lowering rules of ``tile.row_sum`` / ``row_max`` (they read
:class:`workarounds.ReduceConstraints` from the trace):

* ``max_via_min`` (FL-RU-001, REDUCE MAX folds from zero): an int32 row maximum is ~MIN(~x)
  (the bitwise complement is an exact, order-reversing map of int32): the tensor it was loaded
  from is stored complemented (the host writes ~x, or the kernel stored partial results that
  are complemented already), the REDUCE is a MIN, and the tensor its result is stored into is
  read back complemented. :func:`check_complements` refuses a kernel that uses a complemented
  tile any other way, naming the line;
* ``even_sum_count`` (FL-RU-002, REDUCE SUM drops the last word of an odd count): scratch tensors
  store their rows in an even number of words (the extra word holds the padding the kernel
  declared: zero for a sum), and so does an input whose first tile of whole rows is summed, so
  whole rows and even chunks of them reduce with even counts at no command; a view of an odd number of words is reduced as its first (even) words into
  a scratch word, the last word added to it by a VEC IADD, and that word and a zero word beside it
  reduced (a count of 2).

The engine's FP8 erratum is a lowering rule of ``tile.to_b(fmt=...)`` (it reads
:class:`workarounds.LowpConstraints` from the trace; the rule is written with the language's own
operations, so it lives beside ``to_b`` in kernels/tile/lang.py, ``_flush_fp8_subnormals``):

* ``fp8_subnormals_flushed`` (FL-NU-001, the PE reads subnormal FP8 codes as zero): a tile
  converted to FP8 on the chip first has every value whose code would be subnormal (``|x| *
  scale`` below the format's smallest normal) set to +0, with no compare: ``x * min(relu(x -
  T^-) * 2^k, 1)`` (T^- the float just below the threshold, 2^k so that the smallest step above
  it reaches 1); the rule needs a tile known to be non-negative (made by exp or relu) and refuses
  any other, naming the line. The MATMUL then reads no
  subnormal code, and the golden applies the same flush (golden/attention.py's ``flush_p``).

The stream passes of workarounds/passes.py (FL-CP-001, FL-DM-001, FL-DM-002, FL-VU-001) still
run on every submitted stream, through the device's submit filter.
"""

from __future__ import annotations

import numpy as np

from .ir import Buffer, Op, Queue, Storage, TileError

__all__ = ["max_via_min", "sum_of_odd_rows", "check_complements", "families", "rewrite", "layout", "reserved", "gaps"]


def families(constraints) -> dict:
    """The active mitigations' constraints by kernel family ("gemm", "reduce", "lowp"; what
    workarounds.constraints_for gives, or one GemmConstraints alone, or None: none)."""
    if constraints is None:
        return {}
    if isinstance(constraints, dict):
        return {k: v for k, v in constraints.items() if v is not None}
    return {"gemm": constraints}


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
    # a tile whose MATMULs all go panel after panel (compiler._panel_order) needs no copy words
    by_panels = {}
    for op in order:
        if op.kind == "matmul" and not op.args.get("spacer"):
            t = id(op.args["a_tile"])
            by_panels[t] = by_panels.get(t, True) and op.args.get("order") == "b"
    for op in loaded.values():
        buf = op.writes[0]
        if by_panels.get(id(buf)):
            continue
        buf.stride = buf.wpr + 1  # each panel, then the copy of its first word
        buf.storage.words = buf.span + 1
        op.args["repeat_first"] = True
    for op in order:
        if op.kind == "matmul":
            a = op.args["a_tile"]
            if id(a) not in loaded:
                raise TileError(f"{op.line}: with FL-ME-002's mitigation a MATMUL takes its A tile as loaded "
                                f"(not a view of one)")
            op.args["a_view"].offset = a.offset + op.args.get("p", 0) * a.row_stride


from kernels.gemm_plan import SPACER_K  # noqa: E402  (a spacer MATMUL's steps: not 1, FL-ME-001)


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
    # after a MATMUL: the address its successor's stale first read takes (its last command's A
    # base + K) and the panel whose first word is stored there (a copy word), if any; None after
    # a drain (a VEC, REDUCE or FENCE: no stale read)
    stale = None
    for op in order:
        if op.kind == "matmul":
            a = op.args["a_view"]
            at = a.storage.addr + a.offset
            k = op.args["k"]
            ok = stale is None or at in stale
            if not ok and "fmt" in op.args:
                # FP: a FENCE (an FP spacer could make NaN of NaN x 0 or +0 of -0), as the hand stream does
                fe = Op("fence", Queue.EXEC, op.line, {"op": "FL-ME-002 fence"})
                fe.loop, fe.iteration = op.loop, op.iteration
                out.append(fe)
                n += 1
            elif not ok:
                c = op.args["c_view"]
                slot = Buffer(c.own, 1, config.rows, "int32", False, c.offset)
                sp = Op("matmul", Queue.EXEC, op.line, {"op": "FL-ME-002 spacer", "spacer": True, "a_addr": at - SPACER_K,
                                                        "b_addr": top, "k": SPACER_K, "c_view": slot},
                        reads=[zbuf, slot], writes=[slot])
                sp.loop, sp.iteration = op.loop, op.iteration
                out.append(sp)
                n += 1
            if op.args.get("order") == "b":  # panel after panel, packed: the last one's end
                stride = op.args["a_tile"].row_stride
                if stride != k:
                    raise TileError(f"{op.line}: FL-ME-002: a MATMUL run panel by panel needs its A panels packed "
                                    f"(stride {k}), not {stride}")
                stale = {at + (op.args["pa"] - 1) * stride + k}
            else:  # one panel: the word after it, a copy of its first word (layout)
                stale = {at + k, at}
        elif op.queue == Queue.EXEC:
            stale = None
        out.append(op)
    return out, n


# ---- the reduction unit: lowering rules of the row reductions -----------------------------------

def max_via_min(tr, a: Buffer, out: Buffer, line: str) -> str:
    """FL-RU-001: the REDUCE code for an int32 row maximum of ``a`` into ``out`` ("MIN", of
    complemented words); marks what holds complemented values (checked by check_complements)."""
    load = next((op for op in reversed(tr.ops) if op.kind == "load" and any(w.own is a.own for w in op.writes)), None)
    src = load.dram_reads[0][0] if load is not None else None
    if src is None or src.layout != "rows" or src.role == "const":
        raise TileError(f"{line}: on this revision REDUCE MAX folds from zero (FL-RU-001); its mitigation, MAX as "
                        f"~MIN(~x), needs the int32 row_max of a tile loaded from a kernel input or from partial "
                        f"maxima the kernel stored, and {a.storage.name} was computed on the chip")
    src.complement = True
    tr.complemented[id(a.own)] = a.own
    tr.complemented[id(out.own)] = out.own
    tr.via_min = getattr(tr, "via_min", set()) | {id(out.own)}
    return "MIN"


def check_complements(tr) -> None:
    """After the trace: every tile of complemented words is only reduced (MIN for MAX) or stored;
    a tensor holds complemented words throughout or not at all; outputs read back complemented."""
    comp = dict(tr.complemented)
    if not comp:
        return
    changed = True
    while changed:  # a tensor that gets complemented words makes the tiles loaded from it complemented
        changed = False
        for op in tr.ops:
            if op.kind == "store" and id(op.reads[0].own) in comp and not op.dram_writes[0][0].complement:
                op.dram_writes[0][0].complement = changed = True
            if op.kind == "load" and op.dram_reads[0][0].complement and id(op.writes[0].own) not in comp:
                comp[id(op.writes[0].own)] = op.writes[0].own
                changed = True
    via_min = getattr(tr, "via_min", set())
    for op in tr.ops:
        if op.kind == "store":
            t = op.dram_writes[0][0]
            if t.complement and id(op.reads[0].own) not in comp:
                raise TileError(f"{op.line}: {t.name} holds complemented row maxima (FL-RU-001's ~MIN(~x)); this "
                                f"store would put plain values beside them: store them into another tensor")
            continue
        if op.kind == "load":
            continue
        bad = [b for b in op.reads if id(b.own) in comp]
        ok = op.kind == "reduce" and all(id(w.own) in via_min for w in op.writes)
        if bad and not ok:
            raise TileError(f"{op.line}: {bad[0].own.name} holds complemented words (FL-RU-001's MAX as ~MIN(~x) "
                            f"on this revision); a tile reduced by row_max is only stored or reduced again")


def pad_to_even(tr, a: Buffer) -> bool:
    """FL-RU-002 by layout, where it can be (no extra command): ``a`` is a tile of whole rows, the
    first loaded from a kernel input whose padding is zero, and nothing has read it yet; the
    input's rows get one more word (the host writes it zero) and so do the tile's rows. True if
    done."""
    ld = [op for op in tr.ops if op.kind == "load" and any(w.own is a.own for w in op.writes)]
    if len(ld) != 1 or len(ld[0].dram_reads) != 1 or any(b.own is a.own for op in tr.ops for b in op.reads):
        return False
    t, r0, n, w0, words = ld[0].dram_reads[0]
    if (t.layout != "rows" or t.role != "in" or t.pad != 0 or w0 != 0 or words != t.wpr or ld[0].writes[0] is not a
            or a.offset or a.stride is not None or a.storage is not a.own):
        return False
    if any(op.kind == "load" and op is not ld[0] and any(d[0] is t for d in op.dram_reads) for op in tr.ops):
        return False  # other tiles were shaped by the old rows
    t.wpr += 1
    a.wpr += 1
    a.own.words = a.rows * a.wpr
    ld[0].dram_reads[0] = (t, r0, n, w0, words + 1)
    return True


def sum_of_odd_rows(tr, a: Buffer, out: Buffer, line: str) -> None:
    """FL-RU-002: the int32 sum of each row of ``a`` (an odd number of words) into ``out`` with
    REDUCEs of even counts: the first words into a scratch word, the last one added by a VEC
    IADD, then the scratch word and a zero word after it reduced."""
    import numpy as np

    if not tr.vector:
        raise TileError(f"{line}: on this revision REDUCE SUM drops the last word of an odd count (FL-RU-002); "
                        f"rows of {a.wpr} words are mitigated with a VEC IADD, and this chip has no vector unit: "
                        f"give the rows an even number of words")
    if tr.zero_pair is None:
        ref = tr.tensor(tr.name("ru_zero"), 1, 2 * tr.lanes, "int32", 0, "const", np.zeros((1, 2, tr.lanes), np.uint32))
        pair = tr.new_buffer("ru_pair", 1, 2, "int32", False, line)
        tr.emit(Op("load", Queue.LOAD, line, writes=[pair], dram_reads=[(ref.decl, 0, 1, 0, 2)]))
        tr.zero_pair = pair
    pair = tr.zero_pair
    s0 = Buffer(pair.own, 1, 1, "int32", False, pair.offset)
    w = a.wpr
    for r in range(a.rows):
        base = r * a.row_stride
        if w >= 3:
            tr.emit(Op("reduce", Queue.EXEC, line, {"op": "row_sum (FL-RU-002)", "cmds": [("SUM", base, w - 1, 0)]},
                       reads=[a], writes=[s0]))
            tr.emit(Op("vec", Queue.EXEC, line, {"op": "iadd (FL-RU-002)", "cmds": [("iadd", 0, base + w - 1, "vector", 1, 0)]},
                       reads=[s0, a], writes=[s0]))
        else:  # one word: copied beside the zero (plus zero)
            tr.emit(Op("vec", Queue.EXEC, line, {"op": "iadd (FL-RU-002)", "cmds": [("iadd", base, 1, "vector", 1, 0)]},
                       reads=[a, pair], writes=[s0]))
        tr.emit(Op("reduce", Queue.EXEC, line, {"op": "row_sum (FL-RU-002)", "cmds": [("SUM", 0, 2, r)]},
                   reads=[pair], writes=[out]))

