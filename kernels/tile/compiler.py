"""The tile-language compiler: a traced kernel to the command stream of rtl/isa.py.

Passes, each over the op list of kernels/tile/ir.py (docs/tile.md, "The compiler"):

1. **schedule**: a ``pipeline(stages=S)`` loop's loads from DRAM are issued ``S - 1`` iterations
   ahead of the work that reads them (software pipelining); everything else keeps program order.
2. **coalesce**: an elementwise result takes its first operand's SRAM words when that operand
   dies there (VEC in place is safe, docs/chip.md).
3. **place**: every tile gets SRAM words by linear scan over the scheduled order (live from its
   first write to its last read), first fit; a working set that does not fit is an error that
   names the tile, the words it needs and the words left.
4. **synchronise**: the chip runs three in-order queues (the command stream, the load DMA, the
   store DMA). For each op and each other queue, the last earlier op of that queue whose words
   (SRAM or DRAM) conflict with it (read after write, write after read, write after write) must
   complete first, unless an earlier wait already implies it (a vector clock of what is known
   complete at each op's start). Each edge left becomes a semaphore signal on the producer and
   a wait on the consumer, one semaphore per (producer queue, consumer queue): both queues
   complete in order, so the k-th wait pairs with the k-th signal and every count returns to 0.
5. **lower**: commands with their semaphore fields; a second wait becomes a NOP (command
   stream) or a FENCE relay (a DMA); every command's tag is its op's index, so an error or a
   trace names the kernel line.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from rtl.isa import (MAX_COUNT, DmaQueue, Format, ReduceOp, VecB, VecDst, VecOp, decode, dma_load, dma_store, dma_stride,
                     fence, matmul, nop, reduce, vec)
from rtl.memories import Region

from .ir import Buffer, Op, Queue, Storage, TensorDecl, TileError

__all__ = ["Compiled", "compile_trace", "SEMAPHORE_OF"]

# one counting semaphore per (producer queue, consumer queue)
SEMAPHORE_OF = {(p, c): i for i, (p, c) in enumerate((p, c) for p in Queue.ALL for c in Queue.ALL if p != c)}
_DRAM_ALIGN = 4096


@dataclass
class Compiled:
    """A kernel ready to run: its commands, the op and source line of each, the DRAM tensors with
    their addresses, and the placement."""

    name: str
    commands: list[int]
    cmd_ops: list[int]  # per command: the index of its op in ``ops``
    ops: list[Op]
    tensors: list[TensorDecl]
    storages: list[Storage]
    waits: int = 0
    signals: int = 0
    relays: int = 0
    sram_words: dict = field(default_factory=dict)  # region -> peak words used
    edges: list[tuple[int, int]] = field(default_factory=list)  # (producer op, consumer op): the waits kept
    errata_insertions: int = 0  # FL-ME-002 spacers put in
    compile_s: float = 0.0  # host time to trace and compile (set by kernels.tile.runtime.build)
    kernel_args: dict = field(default_factory=dict)  # what the source was called with besides its tensors

    def tensor(self, name: str) -> TensorDecl:
        for t in self.tensors:
            if t.name == name:
                return t
        raise KeyError(name)

    def dump(self) -> str:
        """The lowered stream, a command a line, with the kernel source line that made it."""
        lines = [f"# {self.name}: {len(self.commands)} commands, {len(self.ops)} tile ops, {self.waits} waits "
                 f"({self.relays} relays), SRAM words used: "
                 + ", ".join(f"{r} {w}" for r, w in sorted(self.sram_words.items()))]
        for t in self.tensors:
            lines.append(f"# DRAM {t.name:<10} {t.role:<5} {t.rows}x{t.cols} {t.dtype} at {t.dram:#x} "
                         f"({t.rows} rows of {t.wpr} words)")
        for s in self.storages:
            lines.append(f"# SRAM {s.name:<10} {s.region}[{s.addr}:{s.addr + s.words}]  {s.line}")
        for i, (c, oi) in enumerate(zip(self.commands, self.cmd_ops)):
            op = self.ops[oi] if oi >= 0 else None
            where = op.line if op is not None else "(compiler)"
            lines.append(f"{i:5d}  {format_command(c):<58} # {where}")
        return "\n".join(lines)


def format_command(c: int) -> str:
    d = decode(c)
    op = d["opcode"]
    s = d["sync"]
    sync = (f" wait s{s['wait_sem']}" if s["wait"] else "") + (f" signal s{s['signal_sem']}" if s["signal"] else "") \
        + (f",s{s['signal2_sem']}" if s["signal2"] else "")
    from rtl.isa import Opcode

    if op == Opcode.VEC:
        f = d["flags"]
        b = "" if VecOp(f["op"]).name in ("EXP", "RECIP", "RSQRT", "RELU", "I2F") or f["b"] == VecB.FOLD else \
            f" b={d['arg1']}{'' if f['b'] == 0 else '/' + VecB(f['b']).name.lower()}"
        into = {1: "A:", 2: "B:"}.get(f["dst"], "")
        fold = "/fold" if f["b"] == VecB.FOLD else ""
        return f"VEC {VecOp(f['op']).name}{fold} a={d['arg0']}{b} n={d['length']} dst={into}{d['arg2']}{sync}"
    if op == Opcode.REDUCE:
        return f"REDUCE {ReduceOp(d['flags']['op']).name} src={d['arg0']} n={d['length']} dst={d['arg2']}{sync}"
    if op == Opcode.MATMUL:
        f = d["flags"]
        fp = "" if not f.get("fmt") else \
            f" {Format(f['fmt']).name.lower()} sa={d['arg3']['sa']} sb={d['arg3']['sb']}"
        return (f"MATMUL a={d['arg0']} b={d['arg1']} c={d['arg2']} k={d['length']}"
                f"{' acc' if f['accumulate'] else ''}{fp}{sync}")
    if op == Opcode.DMA_STRIDE:
        return f"DMA_STRIDE {DmaQueue(d['flags']['queue']).name} sram={d['arg0']} dram={d['dram_stride']}{sync}"
    if op in (Opcode.DMA_LOAD, Opcode.DMA_STORE):
        region = Region(d["flags"]["dma"]["region"]) if "dma" in d["flags"] else Region.ACC
        region = Region(d["flags"]["region"]) if "region" in d["flags"] else region
        name = "DMA_LOAD" if op == Opcode.DMA_LOAD else "DMA_STORE"
        return f"{name} {region.name}[{d['arg0']}] dram={d['dram']:#x} words={d['length']} rows={d['arg1']}{sync}"
    return f"{Opcode(op).name}{sync}"


def compile_trace(name: str, ops: list[Op], tensors: list[TensorDecl], config, dram_bytes: int,
                  bus_bytes: int, constraints=None, bytes_per_cycle: float = 1.0,
                  fit_only: bool = False) -> Compiled | None:
    """``constraints``: the active mitigations' GEMM constraints (workarounds.GemmConstraints),
    which the errata passes of kernels/tile/errata.py apply to every kernel. ``fit_only``: stop
    once the SRAMs are placed (a TileError if they do not fit) and return None: a planner trying
    tilings needs no semaphores or commands for the ones it rejects."""
    from . import errata

    constraints = errata.families(constraints).get("gemm")
    ops = _fuse_expsub(_panel_order(errata.rewrite(ops, constraints, config), config))
    order = _hoist_stores(_hoist_past_matmuls(_interleave_tails(_schedule(ops), config, bytes_per_cycle)))
    for i, op in enumerate(order):
        op.index = i
    _coalesce(order)
    errata.layout(order, constraints)
    storages, peak = _place(order, config, errata.reserved(constraints))
    order, gaps = errata.gaps(order, constraints, config, tensors)
    if fit_only:
        return None
    _place_dram(tensors, dram_bytes, bus_bytes)
    order, plan, edges, relays = _synchronise(order)
    cmds, cmd_ops, waits, signals = _lower(order, plan, config)
    return Compiled(name, cmds, cmd_ops, order, tensors, storages, waits, signals, relays, peak, edges, gaps)


# ---- 0. fuse ------------------------------------------------------------------------------

def _fuse_expsub(ops: list[Op]) -> list[Op]:
    """``exp(x - y)`` where nothing else reads the difference: one EXPSUB pass (the VEC rounds the
    difference, then exponentiates: the same bits as FSUB then EXP) instead of two over the words,
    at the subtraction's place. (On a revision with FL-VU-001 the submit filter splits it again.)"""
    readers: dict[int, int] = {}
    writer: dict[int, Op] = {}
    for op in ops:
        for b in op.reads:
            readers[id(b.own)] = readers.get(id(b.own), 0) + 1
        for b in op.writes:
            writer.setdefault(id(b.own), op)
    fused: dict[int, Op] = {}  # id(the FSUB) -> its EXPSUB
    dropped: set[int] = set()
    for op in ops:
        if op.kind != "vec" or op.args["op"] != "exp":
            continue
        x = op.reads[0]
        sub = writer.get(id(x.own))
        if (sub is None or sub.kind != "vec" or sub.args["op"] != "fsub" or readers[id(x.own)] != 1
                or sub.writes[0] is not x or sub.loop is not op.loop or sub.iteration != op.iteration):
            continue
        e = Op("vec", Queue.EXEC, op.line, {"op": "expsub", "cmds": [("expsub", *c[1:]) for c in sub.args["cmds"]]},
               reads=sub.reads, writes=op.writes)
        e.loop, e.iteration = sub.loop, sub.iteration
        fused[id(sub)] = e
        dropped.add(id(op))
    return [fused.get(id(op), op) for op in ops if id(op) not in dropped]


# ---- 1. schedule -----------------------------------------------------------------------------

def _schedule(ops: list[Op]) -> list[Op]:
    """Program order, except that in a pipelined loop the loads of iteration ``i + S - 1`` are
    issued before the rest of iteration ``i`` (S >= 2), or (S = 1) each load of iteration
    ``i + 1`` right after the last reader of the same load line's tile in iteration ``i``."""
    out: list[Op] = []
    i = 0
    while i < len(ops):
        loop = ops[i].loop
        if loop is None:
            out.append(ops[i])
            i += 1
            continue
        j = i
        while j < len(ops) and ops[j].loop is loop:
            j += 1
        its = loop.iterations
        early: list[list[Op]] = [[] for _ in range(its)]
        rest: list[list[Op]] = [[] for _ in range(its)]
        for o in ops[i:j]:
            (early if _prefetchable(o) else rest)[o.iteration].append(o)
        ahead = loop.stages - 1
        if ahead == 0:
            out += _refill(early, rest)
            i = j
            continue
        for k in range(min(ahead, its)):
            out += early[k]
        for k in range(its):
            if k + ahead < its:
                out += early[k + ahead]
            out += rest[k]
        i = j
    return out


def _refill(early: list[list[Op]], rest: list[list[Op]]) -> list[Op]:
    """One buffer per load line, refilled as soon as it is read: a load of iteration ``k`` goes
    into the stream right after the last op of iteration ``k - 1`` that reads the tile the same
    line loaded last (in ``k - 1`` or before: a block's queries, loaded once a block), so that
    placement gives it that tile's words and the DMA fetches it while the rest of iteration
    ``k - 1`` computes; else at the start of its iteration. A command in the
    stream is dispatched only once those before it are, so a load left at the start of its
    iteration would wait for the whole previous iteration to issue."""
    out: list[Op] = list(early[0]) + list(rest[0])
    base = 0  # where iteration k - 1's own segment starts in ``out``
    latest: dict[str, list[Op]] = {}  # load line -> its loads in the last iteration that had them
    for k in range(1, len(early)):
        prev = out[base:]
        for line in {op.line for op in early[k - 1]}:  # the latest loads of each line
            latest[line] = [op for op in early[k - 1] if op.line == line]
        by_line = latest
        after: dict[int, list[Op]] = {}  # id(op of iteration k - 1) -> loads to put after it
        head: list[Op] = []
        seen: dict[str, int] = {}
        for op in early[k]:
            n = seen.get(op.line, 0)
            seen[op.line] = n + 1
            same = by_line.get(op.line, [])
            if n >= len(same):
                head.append(op)
                continue
            own = same[n].writes[0].own
            last = None
            for x in prev:
                if x.kind != "load" and any(b.own is own for b in x.reads):
                    last = x
            if last is None:
                head.append(op)
            else:
                after.setdefault(id(last), []).append(op)
        if after:
            merged = []
            for x in prev:
                merged.append(x)
                merged += after.get(id(x), [])
            out[base:] = merged
        base = len(out)
        out += head + rest[k]
    return out


def _interleave_tails(order: list[Op], config, bytes_per_cycle: float) -> list[Op]:
    """The last two steps of an accumulation chain, interleaved by rows: in a pipelined loop, when
    iteration ``i + 1`` ends the chains it continues (it stores them), its MATMUL rows go between
    iteration ``i``'s, after the ``lead`` rows that cover the arrival of its operands. A tile
    row is then complete two rows of MATMULs apart from early in iteration ``i``, and its store
    uses the DRAM while the rest computes, instead of every store queueing at the end (where
    the next chain's first rows would wait for them). Each tile still accumulates in K order.
    Only in a loop of two or more stages: interleaved, both steps' operand tiles are live at
    once, which a single-buffered loop's planner did not leave room for (gemm 64^3 --stages 1
    was refused: "the tile a1 needs 528 words of A, but only 494 ... are left")."""
    out = list(order)
    by: dict[tuple, list[Op]] = {}  # (loop, iteration, kind) -> its ops, in order
    for x in out:
        if x.loop is not None:
            by.setdefault((id(x.loop), x.iteration, x.kind), []).append(x)

    def ops_of(loop, it: int, kind: str) -> list[Op]:
        return by.get((id(loop), it, kind), [])

    i = 0
    while i < len(out):
        op = out[i]
        if op.kind != "matmul" or op.loop is None or op.loop.stages < 2:
            i += 1
            continue
        it = op.iteration
        first = ops_of(op.loop, it, "matmul")
        second = ops_of(op.loop, it + 1, "matmul")
        stores = ops_of(op.loop, it + 1, "store")
        key = lambda x: (id(x.args["c_view"].storage), x.args["c_view"].offset)  # noqa: E731
        nxt = ops_of(op.loop, it + 2, "matmul")
        chain_ends = stores and not any(key(x) in {key(y) for y in second} for x in nxt)
        if not (chain_ends and len(first) == len(second) > 1
                and [key(x) for x in first] == [key(x) for x in second]):
            i = _after(out, i, first[-1])
            continue
        where = {id(x): n for n, x in enumerate(out[i:], i)}
        pos = [where[id(x)] for x in first + second]
        if pos != list(range(pos[0], pos[0] + len(pos))) and not _only_loads_between(out, pos):
            i = _after(out, i, first[-1])
            continue
        loads = sum(x.writes[0].span * _word_bytes(x, config) for x in ops_of(op.loop, it + 1, "load"))
        step = max(first[0].args["k"], config.min_matmul_cycles)
        row_cycles = first[0].args["pb"] * step
        lead = max(0, min(len(first), -(-int(loads / bytes_per_cycle) // max(row_cycles, 1)) - 1))
        between = [out[j] for j in range(pos[0], pos[-1] + 1) if out[j] not in first and out[j] not in second]
        # the loads between them (the pipeline's next ones) go after the first step's last row: they
        # fill that step's buffers, so they cannot start before it is done, and emitted earlier
        # they would hold both its buffers and theirs
        merged = first[:lead]
        for j in range(len(second)):
            if lead + j < len(first):
                merged.append(first[lead + j])
                if lead + j == len(first) - 1:
                    merged += between
            merged.append(second[j])
        if lead >= len(first):
            merged += between
        out[pos[0]:pos[-1] + 1] = merged
        i = pos[0] + len(merged)
    return out


def _after(out: list[Op], start: int, op: Op) -> int:
    """The position after ``op``, which is at or after ``start``."""
    for n in range(start, len(out)):
        if out[n] is op:
            return n + 1
    return start + 1


def _only_loads_between(out: list[Op], pos: list[int]) -> bool:
    span = set(range(pos[0], pos[-1] + 1)) - set(pos)
    return all(out[j].kind == "load" for j in span)


def _word_bytes(op: Op, config) -> int:
    region = op.writes[0].storage.region
    return {"A": config.rows, "B": config.cols, "SA": config.rows, "SB": config.cols}.get(region, 4 * config.lanes)


_PASSABLE = ("matmul", "store", "load")


def _hoist_past_matmuls(order: list[Op]) -> list[Op]:
    """A vector or reduction op moves up past the MATMULs it does not depend on, to just after the
    last op it must follow: a GEMM's epilogue of one tile row then runs as soon as that row's
    MATMULs are done, between the next rows', and the row's store leaves that much sooner (as the
    hand-written epilogue did), instead of every row's epilogue waiting for the whole group. Only
    MATMULs and stores are passed (stores move again in _hoist_stores); an op keeps its order with
    every other op. Keys are tuples: a moved op sorts right after the key of what it follows."""
    writes: dict[int, list[tuple[int, int, int]]] = {}  # id(storage) -> (position, lo, hi) of writers
    reads: dict[int, list[tuple[int, int, int]]] = {}
    keys: list[tuple] = []
    barrier = -1  # the last op that nothing moves past
    matmuls = [0]  # matmuls[n]: MATMULs before position n
    for op in order:
        matmuls.append(matmuls[-1] + (op.kind == "matmul"))
    for n, op in enumerate(order):
        if op.kind in ("vec", "reduce") and op.queue == Queue.EXEC and barrier >= 0:
            after = keys[barrier]
            for b, lists in [(b, (writes,)) for b in op.reads] + [(b, (writes, reads)) for b in op.writes]:
                lo, hi = b.offset, b.offset + b.span
                for d in lists:
                    for i, x, y in d.get(id(b.storage), ()):
                        if x < hi and lo < y and keys[i] > after:
                            after = keys[i]
            # only past MATMULs: an op that would pass loads alone stays (it would delay them)
            key = after + (n,) if len(after) > 1 or matmuls[n] > matmuls[after[0] + 1] else (n,)
        else:
            key = (n,)
        if op.kind not in _PASSABLE:
            barrier = n
        keys.append(key)
        for b in op.reads:
            reads.setdefault(id(b.storage), []).append((n, b.offset, b.offset + b.span))
        for b in op.writes:
            writes.setdefault(id(b.storage), []).append((n, b.offset, b.offset + b.span))
    return [order[n] for n in sorted(range(len(order)), key=lambda n: keys[n])]


def _hoist_stores(order: list[Op]) -> list[Op]:
    """Each store moves up to just after the last op it must follow (the last writer of the words it
    reads, the last op touching the DRAM it writes), keeping the stores' own order: the command
    stream pushes it to its queue that much sooner (a GEMM's tile row is stored while the next
    rows multiply). Positions stay those of ``order``: a store sorts right after its anchor."""
    writers: dict[int, list[tuple[int, int, int]]] = {}  # id(storage) -> (position, lo, hi)
    dram: dict[int, list[tuple[int, int, int]]] = {}  # id(tensor) -> (position, first byte, end)
    keys = []
    last_store = -1

    def drange(d):
        t, r0, n, w0, nw = d
        row = t.wpr * t.word_bytes
        return r0 * row + w0 * t.word_bytes, (r0 + n - 1) * row + (w0 + nw) * t.word_bytes

    for n, op in enumerate(order):
        if op.kind == "store":
            b = op.reads[0]
            lo, hi = b.offset, b.offset + b.span
            after = max((i for i, x, y in reversed(writers.get(id(b.storage), ())) if x < hi and lo < y), default=-1)
            for d in op.dram_writes:
                x, y = drange(d)
                after = max(after, max((i for i, u, v in dram.get(id(d[0]), ()) if u < y and x < v), default=-1))
            last_store = max(after, last_store)
            keys.append((last_store, 1, n))
        else:
            keys.append((n, 0, n))
        for b in op.writes:
            writers.setdefault(id(b.storage), []).append((n, b.offset, b.offset + b.span))
        for d in op.dram_reads + op.dram_writes:
            dram.setdefault(id(d[0]), []).append((n, *drange(d)))
    return [order[k[2]] for k in sorted(keys)]


def _prefetchable(op: Op) -> bool:
    """A load of data the kernel never writes: it may be issued as early as its words are free."""
    return op.kind == "load" and all(d[0].role not in ("out", "scratch") for d in op.dram_reads)


# ---- 2. coalesce ----------------------------------------------------------------------------

def _last_uses(order: list[Op]) -> dict[int, int]:
    """id(Buffer) -> index of the last op that reads it (its writer's index if nothing does)."""
    last: dict[int, int] = {}
    for op in order:
        for b in op.writes:
            last.setdefault(id(b), op.index)
        for b in op.reads:
            last[id(b)] = op.index
    return last


def _coalesce(order: list[Op]) -> None:
    """A VEC writes its result over its first operand when those words are dead after it: the
    whole storage (an alias, any shape of as many words), or a view of part of it (a GEMM
    result's tile row, whose bias add and requantization then need no words of their own),
    when the shapes agree. An in-place VEC (mask_tail) is refused if the storage is read later.
    "Dead" counts every view of the storage, also those the kernel makes after this op."""
    uses, views = _storage_uses(order)
    # for an in-place op: the last use of the buffers seen before it (the values it overwrites;
    # its result is a buffer of the same storage, read later by design)
    last = _last_uses(order)
    before: dict[int, int] = {}
    for op in order:
        if op.kind == "vec" and op.reads and op.args.get("in_place"):
            a = op.reads[0]
            if max(before.get(id(a.storage), -1), last[id(a)]) > op.index:
                later = next(o for o in order[op.index + 1:] if any(b.storage is a.storage for b in o.reads))
                raise TileError(f"{op.line}: {op.args['op']} overwrites {a.storage.name} in place, but "
                                f"{later.line} reads it afterwards; use the result instead")
        for b in op.reads + op.writes:
            before[id(b.storage)] = max(before.get(id(b.storage), -1), last[id(b)])
        if op.kind != "vec" or not op.reads or op.args.get("in_place"):
            continue
        a, out = op.reads[0], op.writes[0]
        st, ost = a.storage, out.storage
        if (ost is st or st.region != ost.region or out.offset != 0 or out.span != ost.words
                or min(i for i, _, _ in uses[id(ost)]) < op.index):
            continue
        lo, hi = a.offset, a.offset + a.span
        if any(i > op.index and x < hi and lo < y for i, x, y in uses[id(st)]):
            continue  # the operand's words are read or written later
        if a.offset == 0 and a.span == st.words and a.words == out.words:
            ost.alias = st  # the whole storage
            uses[id(st)] += uses.pop(id(ost))
            views[id(st)] += views.pop(id(ost))
        elif ((a.rows, a.wpr) == (out.rows, out.wpr) and a.row_stride == a.wpr
              and not any(b.storage is st and b.offset < hi and lo < b.offset + b.span for b in op.reads[1:])):
            _rebase(ost, a, uses, views)


def _storage_uses(order: list[Op]) -> tuple[dict[int, list[tuple[int, int, int]]], dict[int, list[Buffer]]]:
    """Per root storage: every access (op index, first word, past the last) and every buffer on it
    (also the views an op keeps in its args, which lowering reads)."""
    uses: dict[int, list[tuple[int, int, int]]] = {}
    views: dict[int, list[Buffer]] = {}
    seen: set[int] = set()
    def view(b: Buffer, st: int) -> None:
        if id(b) not in seen:
            seen.add(id(b))
            views.setdefault(st, []).append(b)
            uses.setdefault(st, [])

    for op in order:
        i = op.index
        for b in op.reads + op.writes:
            st = id(b.storage)
            uses.setdefault(st, []).append((i, b.offset, b.offset + b.span))
            view(b, st)
        for v in op.args.values():
            if isinstance(v, Buffer):  # a view lowering reads (it is also among reads or writes if accessed)
                view(v, id(v.storage))
    return uses, views


def _rebase(ost: Storage, a: Buffer, uses: dict, views: dict) -> None:
    """Every buffer of ``ost`` (a fresh result as large as ``a``) moved onto ``a``'s words."""
    st = a.storage
    for b in views.pop(id(ost)):
        b.own, b.offset = st, b.offset + a.offset
        views[id(st)].append(b)
    uses[id(st)] += [(i, x + a.offset, y + a.offset) for i, x, y in uses.pop(id(ost))]


# ---- 3. place -------------------------------------------------------------------------------

def _place(order: list[Op], config, reserved: dict[str, tuple[int, int]] | None = None
           ) -> tuple[list[Storage], dict[str, int]]:
    """``reserved``: (bottom, top) words of a region no tile may use (an erratum's)."""
    depth = {"ACC": config.acc_depth, "A": config.operand_depth, "B": config.operand_depth,
             "SA": config.scale_depth, "SB": config.scale_depth}
    low = {r: 0 for r in depth}
    for r, (bottom, top) in (reserved or {}).items():
        depth[r] -= top
        low[r] = bottom
    first: dict[int, int] = {}
    last: dict[int, int] = {}
    stores: dict[int, Storage] = {}
    for op in order:
        for b in op.writes + op.reads:
            s = b.storage
            stores[id(s)] = s
            first.setdefault(id(s), op.index)
            last[id(s)] = max(last.get(id(s), op.index), op.index)
    free: dict[str, list[list[int]]] = {r: [[low[r], d]] for r, d in depth.items()}  # [start, end) holes
    live: list[Storage] = []
    peak = {r: 0 for r in depth}
    used = {r: 0 for r in depth}
    starts: dict[int, list[Storage]] = {}
    for s in stores.values():
        starts.setdefault(first[id(s)], []).append(s)
    # the tiles one load line makes take the same words each (the largest of them), so a ragged
    # last tile cannot leave a hole the next full one does not fit (the buffers of a pipeline are
    # slots of one size)
    slot: dict[tuple, int] = {}
    for op in order:
        if op.kind == "load":
            st = op.writes[0].storage
            key = (st.line, st.region)
            slot[key] = max(slot.get(key, 0), st.words)
    for op in order:
        if op.kind == "load":
            st = op.writes[0].storage
            st.words = slot[(st.line, st.region)]
    # a unit's result that a store reads: the DMA reads it, so it goes with the DMA's tiles at the
    # bottom (a later unit result at the top would otherwise wait for that store to finish)
    dma_read = {id(op.reads[0].storage) for op in order if op.kind == "store"}
    placed = []
    for op in order:
        for s in [s for s in live if last[id(s)] < op.index]:
            live.remove(s)
            _release(free[s.region], s.addr, s.words)
            used[s.region] -= s.words
        for s in starts.get(op.index, []):
            if s.words > MAX_COUNT:
                raise TileError(f"{s.line}: the tile {s.name} needs {s.words} words; one command moves at most "
                                f"{MAX_COUNT}: use fewer rows per tile")
            # tiles the DMA fills go at the bottom, the units' own results at the top: a unit's
            # scratch then reuses words only the command stream touched, never words a DMA may still
            # be reading, so it needs no wait on a store
            holes = [h for h in free[s.region] if h[1] - h[0] >= s.words]
            top = op.queue == Queue.EXEC and id(s) not in dma_read
            hole = (holes[-1] if top else holes[0]) if holes else None
            if hole is None:
                biggest = max((h[1] - h[0] for h in free[s.region]), default=0)
                held = ", ".join(f"{x.name} {x.words} ({x.line})" for x in live if x.region == s.region) \
                    or "nothing else"
                raise TileError(
                    f"{s.line}: the tile {s.name} needs {s.words} words of {s.region}, but only {biggest} "
                    f"contiguous words are left of {depth[s.region]} (live: {held}); use fewer rows per tile "
                    f"or fewer pipeline stages")
            if top:
                s.addr = hole[1] - s.words
                hole[1] -= s.words
            else:
                s.addr = hole[0]
                hole[0] += s.words
            free[s.region] = [h for h in free[s.region] if h[1] > h[0]]
            live.append(s)
            placed.append(s)
            used[s.region] += s.words
            peak[s.region] = max(peak[s.region], used[s.region])
    return placed, {r: w for r, w in peak.items() if w}


def _release(holes: list[list[int]], addr: int, words: int) -> None:
    holes.append([addr, addr + words])
    holes.sort()
    merged = [holes[0]]
    for h in holes[1:]:
        if h[0] <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], h[1])
        else:
            merged.append(h)
    holes[:] = merged


def _place_dram(tensors: list[TensorDecl], dram_bytes: int, bus_bytes: int) -> None:
    at = 0
    for t in tensors:
        at = -(-at // _DRAM_ALIGN) * _DRAM_ALIGN
        t.dram = at
        at += -(-t.nbytes // bus_bytes) * bus_bytes
    if at > dram_bytes:
        need = ", ".join(f"{t.name} {t.nbytes:,}" for t in tensors)
        raise TileError(f"the kernel's tensors need {at:,} bytes of DRAM ({need}), but the board has "
                        f"{dram_bytes:,}: build a larger board (--dram-size) or a smaller problem")


def _panel_order(ops: list[Op], config) -> list[Op]:
    """A ``matmul(by="b")`` with more A panels than B panels is issued B panel by B panel, each
    one's MATMULs on A panels 0, 1, ... in turn (one op per B panel: a result row, which is what a
    store of that row waits for), not A panel by A panel. Flash attention's O^T = V^T P^T (16 V^T
    panels against 1-4 P^T panels on 4x4, 256x64) is the case: a quarter of the ops to compile
    and, on B1, 740,501 -> 729,749 cycles (FP8 670,178 -> 660,308). With FL-ME-002 its A tile
    is packed, with no copy words (errata.layout), so a back-to-back MATMUL's stale read (the
    previous base + K) is its own first word and a spacer (FP: a FENCE) goes only before each B
    panel's first MATMUL (errata.gaps): pb - 1 of them, where A panel by A panel needs pa - 1.
    One order per A tile: a tile another matmul takes panel by panel keeps that order."""
    calls: list[list[Op]] = []  # one matmul() call: its ops (one per A panel), in order
    for op in ops:
        if op.kind != "matmul":
            continue
        a = op.args
        if calls and calls[-1][-1].args.get("a_tile") is a.get("a_tile") and calls[-1][-1].args.get("c_tile") is \
                a.get("c_tile") and a.get("p") == calls[-1][-1].args.get("p", -2) + 1:
            calls[-1].append(op)
        else:
            calls.append([op])
    wants: dict[int, bool] = {}
    for call in calls:
        a = call[0].args
        b_outer = (a.get("by") == "b" and a["k"] >= 2 and len(call) == a.get("pa") and a["pa"] > a["pb"])
        tile = id(a.get("a_tile"))
        wants[tile] = wants.get(tile, True) and b_outer
    swap = {}
    for call in calls:
        a = call[0].args
        if not wants.get(id(a.get("a_tile"))) or a.get("by") != "b":
            continue
        A, B, C = a["a_tile"], a["b_view"], a["c_tile"]
        rows = config.rows
        new = []
        if "fmt" in a:  # FP: A's scale words, panel after panel, and each B panel's
            sa0, sb = a["sa_view"], a["sb_view"]
            sa_step = call[1].args["sa_view"].offset - sa0.offset
            sa = Buffer(sa0.own, a["pa"], sa0.wpr, sa0.dtype, False, sa0.offset, sa_step)
        for q in range(a["pb"]):
            bq = Buffer(B.own, 1, B.wpr, B.dtype, False, B.offset + q * B.row_stride)
            cq = Buffer(C.own, 1, a["pa"] * rows, C.dtype, False, C.offset + q * C.row_stride)
            args = {"op": "matmul", "accumulate": a["accumulate"], "k": a["k"], "pb": 1, "pa": a["pa"], "by": "b",
                    "order": "b", "a_view": Buffer(A.own, A.rows, A.wpr, A.dtype, False, A.offset, A.stride),
                    "b_view": bq, "c_view": cq, "c_step": rows, "a_tile": A, "c_tile": C}
            reads = [A, bq] + ([cq] if a["accumulate"] else [])
            if "fmt" in a:
                sbq = Buffer(sb.own, 1, sb.wpr, sb.dtype, False, sb.offset + q * sb.row_stride)
                args.update(fmt=a["fmt"], sa_view=sa, sb_view=sbq)
                reads += [sa, sbq]
            op = Op("matmul", Queue.EXEC, call[0].line, args, reads=reads, writes=[cq])
            op.loop, op.iteration = call[0].loop, call[0].iteration
            new.append(op)
        swap[id(call[0])] = new
        for old in call[1:]:
            swap[id(old)] = []
    out = []
    for op in ops:
        out += swap.get(id(op), [op])
    return out


# ---- 4. synchronise ---------------------------------------------------------------------------

def _accesses(op: Op) -> tuple[list[tuple], list[tuple]]:
    """(reads, writes) as (space, first, end) ranges: SRAM words or DRAM bytes."""
    def sram(b: Buffer):
        at = b.storage.addr + b.offset
        return (b.storage.region, at, at + b.span)

    def dram(t: TensorDecl, r0: int, n: int, w0: int, nw: int):
        row = t.wpr * t.word_bytes
        return ("DRAM", t.dram + r0 * row + w0 * t.word_bytes, t.dram + (r0 + n - 1) * row + (w0 + nw) * t.word_bytes)

    reads = [sram(b) for b in op.reads] + [dram(*d) for d in op.dram_reads]
    writes = [sram(b) for b in op.writes] + [dram(*d) for d in op.dram_writes]
    return reads, writes


def _overlap(x: tuple, y: tuple) -> bool:
    return x[0] == y[0] and x[1] < y[2] and y[1] < x[2]


def _conflict(ra, wa, rb, wb) -> bool:
    return any(_overlap(w, x) for w in wa for x in rb + wb) or any(_overlap(r, w) for r in ra for w in wb)


@dataclass
class _Sync:
    wait: int | None = None  # the op (index into the final order) this op waits on
    extra: int | None = None  # a second producer, waited on by a NOP before it (command stream only)
    signal_to: set = field(default_factory=set)  # the consumer queues this op signals


def _synchronise(order: list[Op]) -> tuple[list[Op], list[_Sync], list[tuple[int, int]], int]:
    """The final order (with any FENCE relays) and each op's waits and signals."""
    final: list[Op] = []
    acc: list[tuple] = []
    pos: dict[str, list[int]] = {q: [] for q in Queue.ALL}  # op indices per queue, in order
    qpos: list[int] = []  # an op's position in its queue
    start_kc: list[dict[str, int]] = []  # per op: queue -> highest position known complete at its start
    last_start: dict[str, dict[str, int]] = {q: {} for q in Queue.ALL}
    plan: list[_Sync] = []
    edges = []
    relays = 0
    last_unit = [-1]  # queue position of the last command-stream op that is not a MATMUL
    last_touch = _LastTouch()

    def done(j):  # what is known complete once op j has completed
        d = dict(start_kc[j])
        d[final[j].queue] = max(d.get(final[j].queue, -1), qpos[j])
        return d

    def covers(kcx, j):
        return kcx.get(final[j].queue, -1) >= qpos[j]

    def add(op: Op, forced: int | None = None) -> None:
        nonlocal relays
        q = op.queue
        i = len(final)
        final.append(op)
        acc.append(_accesses(op))
        kc = dict(last_start[q])
        if q != Queue.EXEC:  # the stream pushes a DMA only once it got there: after its last command started
            kc = _join(kc, last_start[Queue.EXEC])
        if q == Queue.EXEC and pos[q]:
            if op.kind == "matmul":  # issues once the reduction and vector units are idle, not the engine
                if last_unit[0] >= 0:
                    kc[q] = max(kc.get(q, -1), last_unit[0])
            else:
                kc[q] = len(pos[q]) - 1  # a VEC, REDUCE or FENCE issues once every earlier one is done
        need = []
        if forced is not None:
            need = [forced]
        else:
            for other in Queue.ALL:
                if other == q:
                    continue
                j = last_touch.conflict(other, *acc[i])
                if j >= 0 and not covers(kc, j):
                    need.append(j)
        if len(need) == 2:
            a, b = need
            if covers(done(a), b):
                need = [a]
            elif covers(done(b), a):
                need = [b]
        if len(need) == 2 and q != Queue.EXEC:
            # a DMA that must wait for the command stream and for the other DMA queue: a FENCE in the
            # stream waits for the other queue and, once everything before it is done, signals this one
            ex = next(j for j in need if final[j].queue == Queue.EXEC)
            other_dma = next(j for j in need if j != ex)
            final.pop()
            acc.pop()
            relay = Op("fence", Queue.EXEC, op.line, {"op": "relay"})
            relay.loop, relay.iteration = op.loop, op.iteration
            add(relay, forced=other_dma)
            relays += 1
            add(op, forced=len(final) - 1)
            return
        s = _Sync()
        for j in need:
            kc = _join(kc, done(j))
            edges.append((j, i))
            plan[j].signal_to.add(q)
        if len(need) == 1:
            s.wait = need[0]
        elif len(need) == 2:
            s.extra, s.wait = need
        plan.append(s)
        start_kc.append(kc)
        last_start[q] = kc
        last_touch.record(q, i, *acc[i])
        qpos.append(len(pos[q]))
        if q == Queue.EXEC and op.kind != "matmul":
            last_unit[0] = len(pos[q])
        pos[q].append(i)

    for op in order:
        add(op)
    for i, op in enumerate(final):
        op.index = i
    return final, plan, edges, relays


class _LastTouch:
    """Per queue, the last op that wrote and that read each SRAM word (numpy arrays, so finding an
    op's latest conflict is a few slice maxima, not a scan back over the queue), and the DMA
    ops' DRAM ranges (few: scanned)."""

    def __init__(self):
        self.write: dict = {}
        self.read: dict = {}
        self.dram: dict[tuple, list[tuple[int, tuple, tuple]]] = {}  # (queue, 4 KiB page) -> DMA ops

    def _arr(self, table: dict, q: str, region: str, end: int):
        a = table.get((q, region))
        if a is None or len(a) < end:
            grown = np.full(max(end, 1024), -1, np.int64)
            if a is not None:
                grown[:len(a)] = a
            table[(q, region)] = a = grown
        return a

    def conflict(self, q: str, reads: list, writes: list) -> int:
        """The latest op of queue ``q`` that writes what this op reads or writes, or reads what it writes."""
        best = -1
        for space, lo, hi in reads + writes:
            if space == "DRAM" or hi <= lo:
                continue
            best = max(best, int(self._arr(self.write, q, space, hi)[lo:hi].max()))
        for space, lo, hi in writes:
            if space == "DRAM" or hi <= lo:
                continue
            best = max(best, int(self._arr(self.read, q, space, hi)[lo:hi].max()))
        dr = [x for x in reads if x[0] == "DRAM"]
        dw = [x for x in writes if x[0] == "DRAM"]
        for page in {p for x in dr + dw for p in _pages(x)}:
            for j, r, w in reversed(self.dram.get((q, page), ())):
                if j <= best:
                    break
                if _conflict(list(r), list(w), dr, dw):
                    best = j
                    break
        return best

    def record(self, q: str, i: int, reads: list, writes: list) -> None:
        for space, lo, hi in writes:
            if space != "DRAM" and hi > lo:
                self._arr(self.write, q, space, hi)[lo:hi] = i
        for space, lo, hi in reads:
            if space != "DRAM" and hi > lo:
                self._arr(self.read, q, space, hi)[lo:hi] = i
        r = tuple(x for x in reads if x[0] == "DRAM")
        w = tuple(x for x in writes if x[0] == "DRAM")
        for page in {p for x in r + w for p in _pages(x)}:
            self.dram.setdefault((q, page), []).append((i, r, w))


def _pages(x: tuple) -> range:
    return range(x[1] >> 12, ((x[2] - 1) >> 12) + 1)


def _join(a: dict, b: dict) -> dict:
    out = dict(a)
    for k, v in b.items():
        out[k] = max(out.get(k, -1), v)
    return out


# ---- 5. lower --------------------------------------------------------------------------------

def _lower(order: list[Op], plan: list[_Sync], config) -> tuple[list[int], list[int], int, int]:
    cmds: list[int] = []
    cmd_ops: list[int] = []
    waits = signals = 0
    strides = {DmaQueue.LOAD: (0, 0), DmaQueue.STORE: (0, 0)}  # a soft reset's; the stream sets what it needs
    first_2d = {DmaQueue.LOAD: True, DmaQueue.STORE: True}
    for op in order:
        s = plan[op.index]
        wait = None if s.wait is None else SEMAPHORE_OF[(order[s.wait].queue, op.queue)]
        if s.extra is not None:  # the command stream's second wait: a NOP at its head
            cmds.append(nop(tag=op.index, wait=SEMAPHORE_OF[(order[s.extra].queue, op.queue)]))
            cmd_ops.append(op.index)
            waits += 1
        sig = sorted(SEMAPHORE_OF[(op.queue, c)] for c in s.signal_to)
        waits += wait is not None
        signals += len(sig)
        body = _commands(op, config)
        if op.kind in ("load", "store"):
            q = DmaQueue.LOAD if op.kind == "load" else DmaQueue.STORE
            wants = {kw.pop("_strides") for _make, kw in body if "_strides" in kw}
            assert len(wants) <= 1, "the DMAs of one op share their strides"
            for want in wants:
                if want != strides[q] or first_2d[q]:
                    # in stream order: the DMAs queued after it use these strides
                    cmds.append(dma_stride(q, sram=want[0], dram=want[1], tag=op.index))
                    cmd_ops.append(op.index)
                    strides[q], first_2d[q] = want, False
        for i, (make, kw) in enumerate(body):
            sync = {}
            if i == 0 and wait is not None:
                sync["wait"] = wait
            if i == len(body) - 1:
                if sig:
                    sync["signal"] = sig[0]
                if len(sig) > 1:
                    sync["signal2"] = sig[1]
            cmds.append(make(tag=op.index, **kw, **sync))
            cmd_ops.append(op.index)
    return cmds, cmd_ops, waits, signals


def _commands(op: Op, config) -> list[tuple]:
    """(constructor, fields) of each command of one op, addresses resolved."""
    if op.kind in ("load", "store"):
        buf = op.writes[0] if op.kind == "load" else op.reads[0]
        t, r0, n, w0, nw = (op.dram_reads if op.kind == "load" else op.dram_writes)[0]
        base = buf.storage.addr + buf.offset
        dram = t.dram + (r0 * t.wpr + w0) * t.word_bytes
        region = Region[buf.storage.region]
        out = []
        if n == 1 or (nw == t.wpr and buf.row_stride == nw):  # contiguous on both sides: 1D
            words = n * nw
            for x in range(0, words, MAX_COUNT):
                w = min(MAX_COUNT, words - x)
                kw = {"sram": base + x, "dram": dram + x * t.word_bytes, "words": w}
                out.append((_loader(region) if op.kind == "load" else dma_store, kw))
        else:  # 2D: a row per panel / tile row, the queue's strides set before it
            if nw > MAX_COUNT or n > MAX_COUNT:
                raise TileError(f"{op.line}: a 2D transfer of {n} rows of {nw} words exceeds one DMA's {MAX_COUNT}")
            kw = {"sram": base, "dram": dram, "words": nw, "rows": n,
                  "_strides": (buf.row_stride, t.wpr * t.word_bytes)}
            out.append((_loader(region) if op.kind == "load" else dma_store, kw))
        if op.args.get("repeat_first"):  # FL-ME-002 (kernels/tile/errata.py): each panel's first word again
            kw = {"sram": base + nw, "dram": dram, "words": 1, "rows": n}
            if n > 1:
                kw["_strides"] = (buf.row_stride, t.wpr * t.word_bytes)
            out.append((_loader(region), kw))
        return out
    if op.kind == "matmul" and op.args.get("spacer"):
        c = op.args["c_view"]
        return [(matmul, {"a": op.args["a_addr"], "b": op.args["b_addr"], "c": c.storage.addr + c.offset,
                          "k": op.args["k"], "accumulate": True})]
    if op.kind == "matmul":
        a, b, c = op.args["a_view"], op.args["b_view"], op.args["c_view"]
        aa = a.storage.addr + a.offset
        ca = c.storage.addr + c.offset
        rows = config.rows
        step = op.args.get("c_step", rows)  # from one B panel's tile to the next in C
        if op.args.get("order") == "b":  # B panel by B panel (_panel_order): A panel after A panel
            stride = op.args["a_tile"].row_stride
            fp = []
            if "fmt" in op.args:  # FP: panel p's scale words and this B panel's
                sa, sb = op.args["sa_view"], op.args["sb_view"]
                fp = [{"fmt": Format[op.args["fmt"].upper()], "sa": sa.storage.addr + sa.offset + p * sa.row_stride,
                       "sb": sb.storage.addr + sb.offset} for p in range(op.args["pa"])]
            return [(matmul, {"a": aa + p * stride, "b": b.storage.addr + b.offset, "c": ca + p * rows,
                              "k": op.args["k"], "accumulate": op.args["accumulate"], **(fp[p] if fp else {})})
                    for p in range(op.args["pa"])]
        fp = {}
        if "fmt" in op.args:  # FP: the format and the first scale word of A's panel and of each B panel
            sa, sb = op.args["sa_view"], op.args["sb_view"]
            fp = {"fmt": Format[op.args["fmt"].upper()], "sa": sa.storage.addr + sa.offset}
        return [(matmul, {"a": aa, "b": b.storage.addr + b.offset + q * b.row_stride, "c": ca + q * step,
                          "k": op.args["k"], "accumulate": op.args["accumulate"],
                          **({**fp, "sb": sb.storage.addr + sb.offset + q * sb.row_stride} if fp else {})})
                for q in range(op.args["pb"])]
    if op.kind == "vec":
        a = op.reads[0].storage.addr + op.reads[0].offset
        b = op.reads[1].storage.addr + op.reads[1].offset if len(op.reads) > 1 else 0
        d = op.writes[0].storage.addr + op.writes[0].offset
        out = []
        dst_sram = VecDst[op.args.get("dst_sram", "ACC")]
        for name, ao, bo, form, count, do in op.args["cmds"]:
            kw = {"op": VecOp[name.upper()], "a": a + ao, "count": count, "dst": d + do}
            if bo is not None:
                kw.update(b=b + bo, b_form=VecB[form.upper()])
            elif form == "fold":
                kw.update(b_form=VecB.FOLD)
            if dst_sram != VecDst.ACC:
                kw.update(dst_sram=dst_sram)
            if "fp8" in op.args:  # CVT_F8: the format of the codes it writes
                kw.update(fp8=Format[op.args["fp8"].upper()])
            out.append((vec, kw))
        return out
    if op.kind == "fence":
        return [(fence, {})]
    if op.kind == "reduce":
        a = op.reads[0].storage.addr + op.reads[0].offset
        d = op.writes[0].storage.addr + op.writes[0].offset
        return [(reduce, {"op": ReduceOp[code], "src": a + so, "count": count, "dst": d + do})
                for code, so, count, do in op.args["cmds"]]
    raise AssertionError(f"no lowering for {op.kind}")


def _loader(region: Region):
    def load(**kw) -> int:
        return dma_load(region, **kw)
    return load
