"""A happens-before checker over a lowered command stream: races, deadlocks, semaphores left
counting, reads of words never written, commands the chip would refuse.

The chip runs three queues at once (docs/chip.md): the command stream's units (MATMUL, REDUCE,
VEC, FENCE; NOP and DMA_STRIDE retire at once), the DMA load queue and the DMA store queue. What
orders two commands of different queues is only this:

* each queue starts its commands in stream order, and the stream pushes a DMA to its queue only
  once it reaches it (so a DMA starts after every earlier stream command has started);
* a VEC, REDUCE or FENCE starts once every earlier unit command is done, a MATMUL once every
  earlier VEC, REDUCE and FENCE is (rtl/cmdproc.py's issue rule); the units' commands, and each
  DMA queue's, complete in order;
* a command that waits on a semaphore starts after enough signals of it have completed: the k-th
  wait on semaphore s knows that k signals of s are done, so at least k - (the signals of s in
  other queues) of each queue's, in that queue's order. With one signalling queue, the k-th wait
  follows the k-th signal.

"Known complete" is therefore a prefix of each queue's ordered commands, so a vector clock of
three counters describes it exactly: ``(units done, loads done, stores done)``. One pass over the
stream gives each command the clock of what is known complete when it starts and when it ends.
Two commands of different queues that touch a common word, one of them writing it, race when
the later one's start clock does not cover the earlier one. Per word and queue the checker keeps
the last writer and the last reader (an unordered pair is found through the last one of its
queue, since a queue's commands are a chain): O(words touched) per command.

This is the current chip's rule, one issue stream (revision B1's; the errata that change what a
command reads, such as FL-ME-002's stale A word, are not modelled here). A sound checker may
order less than the chip does, never more: a signal that only a later command of the stream
gives is not used to order anything (the stream's own order never needs it).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from rtl.board import BoardConfig
from rtl.config import ChipConfig
from rtl.csr_map import SEMAPHORES
from rtl.dma import word_bytes
from rtl.isa import BLOCK, VEC_UNARY, DmaQueue, ErrCode, Opcode, VecB, VecDst, decode
from rtl.memories import MEMORIES, Region

from .machine import check_command

__all__ = ["Finding", "check_stream", "check_compiled", "format_findings"]

UNITS, LOADS, STORES = 0, 1, 2
_QUEUE_NAMES = ("the units", "the DMA load queue", "the DMA store queue")


@dataclass
class Finding:
    """One problem of a stream. ``kind``: ``race``, ``deadlock``, ``semaphore``, ``uninitialised``
    or ``refused``; ``commands``: the indices involved (the earlier first); ``space`` and
    ``words``: the SRAM (or ``DRAM``, in bytes) and the [first, end) range; ``lines``: the kernel
    source line of each command, where the stream came from the tile compiler."""

    kind: str
    message: str
    commands: tuple[int, ...] = ()
    space: str | None = None
    words: tuple[int, int] | None = None
    lines: tuple[str, ...] = field(default_factory=tuple)

    def __str__(self) -> str:
        where = "; ".join(f"command {c} at {ln}" for c, ln in zip(self.commands, self.lines) if ln)
        return f"{self.kind}: {self.message}" + (f" ({where})" if where else "")


@dataclass
class _Cmd:
    index: int
    d: dict
    queue: int  # UNITS, LOADS or STORES
    kind: str  # "matmul", "unit" (VEC, REDUCE, FENCE), "nop" (NOP, DMA_STRIDE), "dma"
    reads: list  # (space, first, end)
    writes: list
    order: int = -1  # its index among its queue's ordered commands (units: matmul and unit kinds)


def _ranges(space: str, first: int, words: int, rows: int, stride: int) -> list[tuple[str, int, int]]:
    if rows <= 1 or stride == words:
        return [(space, first, first + words * max(rows, 1))]
    return [(space, first + r * stride, first + r * stride + words) for r in range(rows)]


def _accesses(d: dict, cfg: ChipConfig, strides: dict) -> tuple[int, str, list, list]:
    """(queue, kind, reads, writes) of one decoded command, from rtl/isa.py's fields; DMA ranges
    with the strides its queue has when the stream pushes it. DRAM ranges are in bytes."""
    op = d["opcode"]
    if op in (Opcode.DMA_LOAD, Opcode.DMA_STORE):
        load = op == Opcode.DMA_LOAD
        name = Region(d["flags"]["region"]).name if load else "ACC"
        sstride, dstride = strides[DmaQueue.LOAD if load else DmaQueue.STORE]
        words, rows = d["length"], d["arg1"]
        wb = word_bytes(cfg, name)
        sram = _ranges(name, d["arg0"], words, rows, sstride)
        dram = _ranges("DRAM", d["dram"], words * wb, rows, dstride)
        return (LOADS, "dma", dram, sram) if load else (STORES, "dma", sram, dram)
    if op == Opcode.MATMUL:
        k, a, b, c = d["length"], d["arg0"], d["arg1"], d["arg2"]
        reads = [("A", a, a + k), ("B", b, b + k)]
        if d["flags"]["accumulate"]:
            reads.append(("ACC", c, c + cfg.rows))
        if d["flags"]["fmt"]:  # FP: one scale word per block of K from SA and SB
            nblk = -(-k // BLOCK)
            sa, sb = d["arg3"]["sa"], d["arg3"]["sb"]
            reads += [("SA", sa, sa + nblk), ("SB", sb, sb + nblk)]
        return UNITS, "matmul", reads, [("ACC", c, c + cfg.rows)]
    if op == Opcode.REDUCE:
        a0, n = d["arg0"], d["length"]
        return UNITS, "unit", [("ACC", a0, a0 + n)], [("ACC", d["arg2"], d["arg2"] + 1)]
    if op == Opcode.VEC:
        f = d["flags"]
        n, a0, b0, out = d["length"], d["arg0"], d["arg1"], d["arg2"]
        fold = f["b"] == VecB.FOLD
        reads = [("ACC", a0, a0 + n)]
        if f["op"] not in {int(o) for o in VEC_UNARY} and not fold:
            reads.append(("ACC", b0, b0 + (n if f["b"] == VecB.VECTOR else 1)))
        dst = {VecDst.ACC: "ACC", VecDst.A: "A", VecDst.B: "B"}[VecDst(f["dst"])]
        return UNITS, "unit", reads, [(dst, out, out + (1 if fold else n))]
    if op == Opcode.FENCE:
        return UNITS, "unit", [], []
    return UNITS, "nop", [], []  # NOP, DMA_STRIDE: retire at once, complete nothing before them


class _Words:
    """Per queue and word of one space: the queue-order index of the last writer and the last
    reader (-1: none), and of the first writer (for reads of words never written)."""

    def __init__(self, size: int):
        self.last_w = np.full((3, size), -1, np.int64)
        self.last_r = np.full((3, size), -1, np.int64)
        self.first_w = np.full((3, size), np.iinfo(np.int64).max, np.int64)


def check_stream(commands, config: ChipConfig, board: BoardConfig | None = None, *, lines=None,
                 initialised_dram=None, sram_initialised: bool = False) -> list[Finding]:
    """Every finding of ``commands`` (packed words) on a chip of ``config`` and ``board``.

    ``lines``: per command, the kernel source line that made it (``Compiled.dump``'s). Reads of
    SRAM words that no earlier-ordered command wrote are findings (``uninitialised``) unless
    ``sram_initialised`` (a stream that runs after a host backdoor load); DRAM reads are checked
    only when ``initialised_dram`` lists the byte ranges the host wrote before the stream (a
    compiled kernel's input, constant and scratch tensors)."""
    board = board or BoardConfig().resolve(config)
    if not board.beats:
        board = board.resolve(config)
    lines = list(lines) if lines is not None else [None] * len(commands)
    cmds: list[_Cmd] = []
    findings: list[Finding] = []
    strides = {q: (0, 0) for q in DmaQueue}
    counts = [0, 0, 0]
    for i, c in enumerate(commands):
        d = decode(int(c))
        err = check_command(d, config, board, strides)
        if err != ErrCode.NONE:
            findings.append(Finding("refused", f"the chip drops command {i} ({_opname(d)}) with ERR {err.name}",
                                    (i,), lines=(lines[i] or "",)))
            q, kind, r, w = UNITS, "nop", [], []
        else:
            q, kind, r, w = _accesses(d, config, strides)
            if d["opcode"] == Opcode.DMA_STRIDE:
                strides[DmaQueue(d["flags"]["queue"])] = (d["arg0"], d["dram_stride"])
        x = _Cmd(i, d, q, kind, r, w)
        if kind != "nop":
            x.order = counts[q]
            counts[q] += 1
        cmds.append(x)

    # the signals of each semaphore, per queue, in order (a queue's signals complete in order)
    sig_by: dict[int, list[list[int]]] = {s: [[], [], []] for s in range(SEMAPHORES)}
    for x in cmds:
        s = x.d["sync"]
        for k in ("signal", "signal2"):
            if s[k]:
                sig_by[s[f"{k}_sem"]][x.queue].append(x.index)
    total = {s: sum(map(len, v)) for s, v in sig_by.items()}

    start = [None] * len(cmds)
    end = [None] * len(cmds)
    last_in = [None, None, None]  # the last command of each queue, by stream order
    last_ordered_unit = None  # the last MATMUL / VEC / REDUCE / FENCE
    last_unit = None  # the last VEC / REDUCE / FENCE
    waits_taken = [0] * SEMAPHORES

    def join(a, b):
        return a if b is None else (max(a[0], b[0]), max(a[1], b[1]), max(a[2], b[2]))

    for x in cmds:
        i = x.index
        vs = (0, 0, 0)
        vs = join(vs, start[last_in[x.queue]] if last_in[x.queue] is not None else None)
        vs = join(vs, start[last_in[UNITS]] if last_in[UNITS] is not None else None)  # pushed in stream order
        if x.kind == "unit" and last_ordered_unit is not None:
            vs = join(vs, end[last_ordered_unit])
        elif x.kind == "matmul" and last_unit is not None:
            vs = join(vs, end[last_unit])
        s = x.d["sync"]
        if s["wait"]:
            sem = s["wait_sem"]
            k = waits_taken[sem] + 1
            waits_taken[sem] = k
            if k > total[sem]:
                findings.append(Finding(
                    "deadlock", f"command {i} ({_opname(x.d)}, in {_QUEUE_NAMES[x.queue]}) is wait number {k} on "
                    f"semaphore {sem}, which the whole stream signals {total[sem]} time(s): it waits for ever",
                    (i,), lines=(lines[i] or "",)))
            for q in range(3):
                need = k - (total[sem] - len(sig_by[sem][q]))  # the signals of q that must be done
                if need >= 1 and need <= len(sig_by[sem][q]):
                    j = sig_by[sem][q][need - 1]
                    if j < i:  # a later command's signal cannot order what comes before it in the stream
                        vs = join(vs, end[j])
        start[i] = vs
        ve = vs
        if x.kind in ("unit", "matmul"):
            ve = join(ve, end[last_ordered_unit] if last_ordered_unit is not None else None)
            ve = _with(ve, UNITS, x.order + 1)
            last_ordered_unit = i
            if x.kind == "unit":
                last_unit = i
        elif x.kind == "dma":
            prev = last_in[x.queue]
            ve = join(ve, end[prev] if prev is not None else None)
            ve = _with(ve, x.queue, x.order + 1)
        end[i] = ve
        last_in[x.queue] = i

    for sem in range(SEMAPHORES):
        if waits_taken[sem] < total[sem]:
            who = [j for q in range(3) for j in sig_by[sem][q]]
            findings.append(Finding(
                "semaphore", f"semaphore {sem} is signalled {total[sem]} time(s) and waited on {waits_taken[sem]}: it "
                f"is left at {total[sem] - waits_taken[sem]}, and the next stream's first wait on it passes early "
                f"(last signal: command {max(who)})", (max(who),), lines=(lines[max(who)] or "",)))

    findings += _conflicts(cmds, start, config, board, lines, initialised_dram, sram_initialised)
    return findings


def _with(v: tuple, q: int, n: int) -> tuple:
    out = list(v)
    out[q] = max(out[q], n)
    return tuple(out)


def _opname(d: dict) -> str:
    try:
        return Opcode(d["opcode"]).name
    except ValueError:
        return f"opcode 0x{d['opcode']:02x}"


def _conflicts(cmds, start, cfg, board, lines, initialised_dram, sram_initialised) -> list[Finding]:
    sizes = {m.name: m.depth(cfg) for m in MEMORIES}
    # DRAM in bus beats (every DMA address is beat-aligned: the chip refuses others), and only as
    # far as the stream reaches: a per-byte map of the whole DRAM cost 0.3 GB a check
    unit = board.bus_bytes
    for x in cmds:
        x.reads = [(n, lo // unit, -(-hi // unit)) if n == "DRAM" else (n, lo, hi) for n, lo, hi in x.reads]
        x.writes = [(n, lo // unit, -(-hi // unit)) if n == "DRAM" else (n, lo, hi) for n, lo, hi in x.writes]
    sizes["DRAM"] = max([hi for x in cmds for n, _, hi in x.reads + x.writes if n == "DRAM"], default=0)
    spaces: dict[str, _Words] = {}
    by_queue: list[list[int]] = [[], [], []]  # queue order -> stream index
    for x in cmds:
        if x.order >= 0:
            by_queue[x.queue].append(x.index)
    dram_ok = None
    if initialised_dram is not None:
        dram_ok = np.zeros(sizes["DRAM"], bool)
        for lo, hi in initialised_dram:
            dram_ok[max(lo // unit, 0):min(-(-hi // unit), sizes["DRAM"])] = True
    out: list[Finding] = []
    reported: set = set()

    def space(name):
        if name not in spaces:
            spaces[name] = _Words(sizes[name])
        return spaces[name]

    def report(kind, j, i, name, lo, hi, what):
        key = (kind, j, i)
        if key in reported:
            return
        reported.add(key)
        a, b = cmds[j], cmds[i]
        what_unit = "words"
        if name == "DRAM":
            lo, hi, what_unit = lo * unit, hi * unit, "bytes"
        out.append(Finding(kind, f"command {j} ({_opname(a.d)}, {_QUEUE_NAMES[a.queue]}) and command {i} "
                                 f"({_opname(b.d)}, {_QUEUE_NAMES[b.queue]}) {what} {name} {what_unit} [{lo}, {hi}) "
                                 "with nothing ordering them",
                           (j, i), name, (lo, hi), (lines[j] or "", lines[i] or "")))

    for x in cmds:
        if x.order < 0:
            continue
        vs = start[x.index]
        for name, lo, hi in x.reads:
            w = space(name)
            for q in range(3):
                if q == x.queue:
                    continue
                seg = w.last_w[q, lo:hi]
                bad = np.flatnonzero(seg >= vs[q])
                if bad.size:
                    j = by_queue[q][int(seg[bad[0]])]
                    report("race", j, x.index, name, lo + int(bad[0]), lo + int(bad[-1]) + 1,
                           "read and write")
            if name == "DRAM":
                if dram_ok is not None:
                    ok = dram_ok[lo:hi].copy()
                    for q in range(3):
                        ok |= w.first_w[q, lo:hi] < vs[q]
                    if not ok.all():
                        first = (lo + int(np.flatnonzero(~ok)[0])) * unit
                        out.append(Finding("uninitialised", f"command {x.index} ({_opname(x.d)}) reads DRAM byte "
                                           f"{first}, which neither the host nor any command ordered before it wrote",
                                           (x.index,), name, (lo * unit, hi * unit), (lines[x.index] or "",)))
            elif not sram_initialised:
                ok = w.first_w[x.queue, lo:hi] < x.order  # its own queue's earlier commands: in order
                for q in range(3):
                    ok |= w.first_w[q, lo:hi] < vs[q]
                if not ok.all():
                    first = lo + int(np.flatnonzero(~ok)[0])
                    out.append(Finding("uninitialised", f"command {x.index} ({_opname(x.d)}) reads {name} word {first}, "
                                       "which no command ordered before it wrote (the SRAM holds whatever was there)",
                                       (x.index,), name, (lo, hi), (lines[x.index] or "",)))
        for name, lo, hi in x.writes:
            w = space(name)
            for q in range(3):
                if q == x.queue:
                    continue
                for arr, what in ((w.last_w, "both write"), (w.last_r, "read and write")):
                    seg = arr[q, lo:hi]
                    bad = np.flatnonzero(seg >= vs[q])
                    if bad.size:
                        j = by_queue[q][int(seg[bad[0]])]
                        report("race", j, x.index, name, lo + int(bad[0]), lo + int(bad[-1]) + 1, what)
        for name, lo, hi in x.reads:
            space(name).last_r[x.queue, lo:hi] = x.order
        for name, lo, hi in x.writes:
            w = space(name)
            w.last_w[x.queue, lo:hi] = x.order
            np.minimum(w.first_w[x.queue, lo:hi], x.order, out=w.first_w[x.queue, lo:hi])
    return out


def format_findings(findings: list[Finding], limit: int = 20) -> str:
    """The findings, one a line (the first ``limit``), for a message or a report."""
    lines = [str(f) for f in findings[:limit]]
    if len(findings) > limit:
        lines.append(f"... and {len(findings) - limit} more")
    return "\n".join(lines)


def check_compiled(compiled, config: ChipConfig, board: BoardConfig | None = None, commands=None) -> list[Finding]:
    """:func:`check_stream` of a tile-compiled kernel (a ``kernels.tile.compiler.Compiled``), or of
    ``commands`` in its place (a mutant of its stream, command for command): each finding names
    the kernel source lines, and DRAM reads are checked against the tensors the runtime writes
    before the stream (inputs, constants, scratch)."""
    lines = [compiled.ops[o].line if o >= 0 else "(compiler)" for o in compiled.cmd_ops]
    host = [(t.dram, t.dram + t.nbytes) for t in compiled.tensors if t.role in ("in", "const", "scratch")]
    return check_stream(compiled.commands if commands is None else commands, config, board, lines=lines,
                        initialised_dram=host)


# ---- mutants: the checker's score (firstlight mutants) ------------------------------------------

MUTANT_KINDS = ("delete wait", "delete signal", "delete signal2", "move wait later")


def mutants(commands) -> list[tuple[str, int]]:
    """Every mutant of a stream, as (kind, command index): each wait deleted; each signal deleted
    (``delete signal2``: a command's second signal); each wait moved to the next command, where
    that one has no wait of its own. :func:`apply_mutant` makes the mutated stream."""
    out = []
    syncs = [decode(int(c))["sync"] for c in commands]
    for i, s in enumerate(syncs):
        if s["wait"]:
            out.append(("delete wait", i))
            if i + 1 < len(syncs) and not syncs[i + 1]["wait"]:
                out.append(("move wait later", i))
        if s["signal"]:
            out.append(("delete signal", i))
        if s["signal2"]:
            out.append(("delete signal2", i))
    return out


def apply_mutant(commands, kind: str, i: int) -> list[int]:
    """``commands`` with mutant (``kind``, ``i``) of :func:`mutants` applied."""
    from rtl.isa import with_sync

    def parts(c):
        s = decode(int(c))["sync"]
        return (s["wait_sem"] if s["wait"] else None, s["signal_sem"] if s["signal"] else None,
                s["signal2_sem"] if s["signal2"] else None)

    out = [int(c) for c in commands]
    w, s1, s2 = parts(out[i])
    if kind == "delete wait":
        out[i] = with_sync(out[i], wait=None, signal=s1, signal2=s2)
    elif kind == "move wait later":
        out[i] = with_sync(out[i], wait=None, signal=s1, signal2=s2)
        _, t1, t2 = parts(out[i + 1])
        out[i + 1] = with_sync(out[i + 1], wait=w, signal=t1, signal2=t2)
    elif kind == "delete signal":
        out[i] = with_sync(out[i], wait=w, signal=s2, signal2=None)
    elif kind == "delete signal2":
        out[i] = with_sync(out[i], wait=w, signal=s1, signal2=None)
    else:
        raise ValueError(f"unknown mutant kind {kind!r}; kinds: {', '.join(MUTANT_KINDS)}, delete signal2")
    return out
