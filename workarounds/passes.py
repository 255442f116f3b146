"""Mitigations that only reshape a command stream, written once and applied to every stream.

Like the Linux alternatives mechanism: :func:`stream_filter` builds one submit filter from the
passes the active errata need, and ``workarounds.attach`` installs it on the device's generic
submit hook, so every kernel's stream goes through them.

A pass is ``pass(cmds, state, chip) -> (cmds, inserted)``: a pure function of the stream, of
its own ``state`` dict and of the chip's DMA geometry (:class:`DmaGeometry`, None when the filter
was built without one). ``state`` persists across submits until the chip is seen idle (the
device calls ``chip_idle``), except the entries in :data:`CHIP_STATE`: those mirror registers of
the chip that keep their value while it is idle -- the DMA queues' strides, which only a soft
reset clears -- and survive ``chip_idle``.

What the DMA passes cannot see (their stride state is only as good as the streams they saw):
a stream submitted with the filter suspended (``dev.submit_filter_suspended()``) may set
strides behind their back. A stream that uses multi-row DMAs after one sets its strides again,
as every stream that uses them should. A soft reset the device reports as ``chip_reset``:
the passes forget the stream and know the strides are 0 (:data:`RESET_STATE`).
"""

from __future__ import annotations

from dataclasses import dataclass

from rtl.board import PAGE_BYTES
from rtl.dma import LOAD_REGIONS
from rtl.isa import DmaQueue, Opcode, VecB, VecOp, decode, dma_load, dma_store, fence, opcode_of, vec
from rtl.memories import MEM, Region

__all__ = ["PASSES", "CHIP_STATE", "RESET_STATE", "DmaGeometry", "PassError", "StreamFilter", "stream_filter"]

_FENCE = fence()

# Pass-state entries that mirror chip state surviving idle (chip_idle keeps them), at the values a
# soft reset gives them (chip_reset): both DMA queues' strides (SRAM, DRAM) are 0.
RESET_STATE = {"strides": {q: (0, 0) for q in DmaQueue}}
CHIP_STATE = frozenset(RESET_STATE)


class PassError(ValueError):
    """A stream a pass cannot make safe; the message says what to change in the stream."""


@dataclass(frozen=True)
class DmaGeometry:
    """What the DMA passes need of the chip and its board: the command processor's DMA checks
    (so that a descriptor the chip would refuse is passed on untouched, to be refused as
    written) and the byte length of an SRAM word."""

    word_bytes: dict[int, int]  # Region -> bytes per word, for the SRAMs DMA_LOAD may write
    depth: dict[int, int]  # Region -> words
    bus_bytes: int
    dram_bytes: int
    page_bytes: int = PAGE_BYTES

    @classmethod
    def of(cls, config, board) -> "DmaGeometry":
        """From the chip's :class:`~rtl.config.ChipConfig` and resolved :class:`~rtl.board.BoardConfig`."""
        return cls(word_bytes={int(Region[n]): MEM[n].width(config) // 8 for n in LOAD_REGIONS},
                   depth={int(Region[n]): MEM[n].depth(config) for n in LOAD_REGIONS},
                   bus_bytes=board.bus_bytes, dram_bytes=board.dram_bytes)


def _fence_reduce_after_matmul(cmds: list[int], state: dict, chip: DmaGeometry | None = None) -> tuple[list[int], int]:
    """FL-CP-001: a FENCE before any REDUCE queued while a MATMUL may still be draining.

    ``state`` persists across submits until the chip is seen idle: it remembers whether a
    MATMUL was queued since the last FENCE (a NOP in between does not make the REDUCE safe).
    """
    out, inserted = [], 0
    pending = state.get("matmul_pending", False)
    for c in cmds:
        op = opcode_of(c)
        if op == Opcode.REDUCE and pending:
            out.append(_FENCE)
            inserted += 1
            pending = False
        elif op == Opcode.FENCE:
            pending = False
        elif op == Opcode.MATMUL:
            pending = True
        out.append(c)
    state["matmul_pending"] = pending
    return out, inserted


def _split_expsub(cmds: list[int], state: dict, chip: DmaGeometry | None = None) -> tuple[list[int], int]:
    """FL-VU-001: every VEC EXPSUB becomes FSUB (same operands, into the destination) then EXP
    of the destination in place. The FSUB takes the wait, the EXP the signals; both keep the tag.
    A FOLD's one result word is exponentiated. A VEC the chip refuses for its destination SRAM or
    a reserved field is passed on untouched (to be refused as written); one out of range is
    split and refused as the FSUB."""
    out, inserted = [], 0
    for c in cmds:
        if opcode_of(c) != Opcode.VEC:
            out.append(c)
            continue
        d = decode(c)
        f = d["flags"]
        if f["op"] != VecOp.EXPSUB or f["dst"] != 0 or d["arg3"]:  # refused by the chip as written
            out.append(c)
            continue
        wait, signal, signal2 = _sems(d["sync"])
        count = 1 if f["b"] == VecB.FOLD else d["length"]
        out.append(vec(VecOp.FSUB, a=d["arg0"], b=d["arg1"], count=d["length"], dst=d["arg2"], b_form=VecB(f["b"]),
                       tag=d["tag"], wait=wait))
        out.append(vec(VecOp.EXP, a=d["arg2"], count=count, dst=d["arg2"], tag=d["tag"], signal=signal,
                       signal2=signal2))
        inserted += 1
    return out, inserted


# ---- DMA descriptors ------------------------------------------------------------------------

_DMA_OPS = (Opcode.DMA_LOAD, Opcode.DMA_STORE)


@dataclass(frozen=True)
class _Dma:
    """A decoded DMA_LOAD / DMA_STORE with the strides its queue will attach to it."""

    op: int
    region: int
    sram: int
    dram: int
    words: int
    rows: int
    tag: int
    wait: int | None
    signal: int | None
    signal2: int | None
    sram_stride: int | None  # None: this queue's stride is unknown to the pass
    dram_stride: int | None

    @property
    def queue(self) -> DmaQueue:
        return DmaQueue.STORE if self.op == Opcode.DMA_STORE else DmaQueue.LOAD

    def row_dram(self, r: int) -> int:
        return self.dram + r * self.dram_stride if r else self.dram

    def row_sram(self, r: int) -> int:
        return self.sram + r * self.sram_stride if r else self.sram


def _sems(sync: dict) -> tuple[int | None, int | None, int | None]:
    return tuple(sync[f"{n}_sem"] if sync[n] else None for n in ("wait", "signal", "signal2"))


def _track_stride(d: dict, strides: dict) -> None:
    """A DMA_STRIDE the chip accepts sets its queue's strides for every later DMA of the queue.
    One with a reserved field set is dropped by the chip (RESERVED_NONZERO) and changes nothing."""
    if d["flags"]["reserved"] == 0 and d["length"] == 0 and d["arg1"] == 0:
        strides[DmaQueue(d["flags"]["queue"])] = (d["arg0"], d["dram_stride"])


def _as_dma(d: dict, strides: dict) -> _Dma:
    queue = DmaQueue.STORE if d["opcode"] == Opcode.DMA_STORE else DmaQueue.LOAD
    ss, ds = strides.get(queue, (None, None))
    wait, signal, signal2 = _sems(d["sync"])
    return _Dma(op=d["opcode"], region=d["flags"]["region"], sram=d["arg0"], dram=d["dram"], words=d["length"],
                rows=d["arg1"], tag=d["tag"], wait=wait, signal=signal, signal2=signal2, sram_stride=ss,
                dram_stride=ds)


def _chip_refuses(d: dict, dma: _Dma, chip: DmaGeometry, pass_id: str) -> bool:
    """Would the command processor drop this descriptor with an error? (rtl/cmdproc.py, in its
    order.) Such a descriptor is passed on as written, so the chip reports what was written.
    Raises :class:`PassError` when that depends on a stride the pass does not know."""
    if dma.op == Opcode.DMA_LOAD:
        region_ok = dma.region in chip.word_bytes
    else:
        region_ok = dma.region == Region.ACC
    if d["flags"]["reserved"] or not region_ok or dma.words == 0 or dma.rows == 0:
        return True
    if dma.rows > 1 and dma.sram_stride is None:
        raise PassError(
            f"{pass_id}: a {Opcode(dma.op).name} of {dma.rows} rows (tag {dma.tag}), but no DMA_STRIDE for the "
            f"{dma.queue.name} queue has gone through the submit filter since it was installed, so the pass "
            f"cannot tell where its rows are; put a DMA_STRIDE for that queue in the stream before its first "
            f"multi-row DMA")
    more = dma.rows - 1
    if dma.dram % chip.bus_bytes or (more and dma.dram_stride % chip.bus_bytes):
        return True
    if dma.sram + (more * dma.sram_stride if more else 0) + dma.words > chip.depth[dma.region]:
        return True
    return dma.dram + (more * dma.dram_stride if more else 0) + dma.words * chip.word_bytes[dma.region] > chip.dram_bytes


def _emit(dma: _Dma, pieces: list[tuple[int, int, int, int]]) -> list[int]:
    """The DMAs ``(sram, dram, words, rows)`` that replace ``dma``, in order: the wait goes on
    the first (the queue runs in order, so the rest wait behind it), the signals on the last
    (it completes after every earlier piece of the same queue)."""
    out = []
    for i, (sram, dram, words, rows) in enumerate(pieces):
        sync = {"wait": dma.wait if i == 0 else None}
        if i == len(pieces) - 1:
            sync.update(signal=dma.signal, signal2=dma.signal2)
        if dma.op == Opcode.DMA_LOAD:
            out.append(dma_load(dma.region, sram=sram, dram=dram, words=words, rows=rows, tag=dma.tag, **sync))
        else:
            out.append(dma_store(sram=sram, dram=dram, words=words, rows=rows, tag=dma.tag, **sync))
    return out


def _dma_pass(pass_id: str, split, concerns):
    """A pass that rewrites the DMA descriptors it ``concerns(dma)`` with ``split(dma, chip,
    pass_id) -> pieces | None`` (None: leave it), tracking each queue's strides in stream order
    (kept across idle: CHIP_STATE). A descriptor the chip would refuse is left as written."""

    def run(cmds: list[int], state: dict, chip: DmaGeometry | None = None) -> tuple[list[int], int]:
        strides = dict(state.get("strides", {}))  # kept only if the whole stream goes through
        out, inserted = [], 0
        for c in cmds:
            op = opcode_of(c)
            if op == Opcode.DMA_STRIDE:
                _track_stride(decode(c), strides)
            elif op in _DMA_OPS:
                if chip is None:
                    raise PassError(f"{pass_id}: the DMA passes need the chip's DMA geometry "
                                    f"(stream_filter(active, config, board); workarounds.attach passes it)")
                d = decode(c)
                dma = _as_dma(d, strides)
                pieces = None
                if concerns(dma) and not _chip_refuses(d, dma, chip, pass_id):
                    pieces = split(dma, chip, pass_id)
                if pieces is not None:
                    new = _emit(dma, pieces)
                    out += new
                    inserted += len(new) - 1
                    continue
            out.append(c)
        state["strides"] = strides
        return out, inserted

    run.__name__ = run.__qualname__ = f"pass_{pass_id.replace('-', '_').lower()}"
    run.__doc__ = split.__doc__
    return run


def _split_at_pages(dma: _Dma, chip: DmaGeometry, pass_id: str) -> list[tuple[int, int, int, int]] | None:
    """FL-DM-001: no DMA row may cross a 4 KiB page (the defective DMA's bursts would wrap).

    Each row that crosses becomes 1-row DMAs, one per page it touches (no stride change is
    needed); runs of rows that do not cross stay one DMA with the queue's strides. A row that
    crosses a page inside an SRAM word (its DRAM address is not a multiple of the word size)
    cannot be split into whole words and is refused.
    """
    wb, page = chip.word_bytes[dma.region], chip.page_bytes
    row_bytes = dma.words * wb
    pieces, run = [], None  # run: first row of the current run of rows that do not cross

    def close_run(end: int) -> None:
        if run is not None:
            pieces.append((dma.row_sram(run), dma.row_dram(run), dma.words, end - run))

    for r in range(dma.rows):
        a = dma.row_dram(r)
        b = a + row_bytes
        first_cut = (a // page + 1) * page
        if first_cut >= b:
            run = r if run is None else run
            continue
        close_run(r)
        run = None
        edges = [a, *range(first_cut, b, page), b]
        for x, y in zip(edges, edges[1:]):
            if (x - a) % wb:
                raise PassError(
                    f"{pass_id}: row {r} of a {Opcode(dma.op).name} (tag {dma.tag}) crosses the page at DRAM "
                    f"0x{x:x} inside its {wb}-byte SRAM word at 0x{x - (x - a) % wb:x}: it cannot be split into "
                    f"whole words; place DRAM rows at multiples of {wb} bytes")
            pieces.append((dma.row_sram(r) + (x - a) // wb, x, (y - x) // wb, 1))
    close_run(dma.rows)
    return None if len(pieces) == 1 else pieces


def _split_odd_rows(dma: _Dma, chip: DmaGeometry, pass_id: str) -> list[tuple[int, int, int, int]] | None:
    """FL-DM-002: a DMA_LOAD with an odd number of rows > 1 becomes rows - 1 rows and a 1-row DMA
    for the last row (the defective row counter steps over pairs of rows)."""
    last = dma.rows - 1
    return [(dma.sram, dma.dram, dma.words, last), (dma.row_sram(last), dma.row_dram(last), dma.words, 1)]


PASSES = {
    # A FENCE retires only once the engine has written its last rows.
    "FL-CP-001": _fence_reduce_after_matmul,
    # DMAs whose rows stay inside their 4 KiB page.
    "FL-DM-001": _dma_pass("FL-DM-001", _split_at_pages, lambda dma: True),
    # Odd multi-row loads give their last row to a 1-row DMA of its own.
    "FL-DM-002": _dma_pass("FL-DM-002", _split_odd_rows,
                           lambda dma: dma.op == Opcode.DMA_LOAD and dma.rows > 1 and dma.rows % 2 == 1),
    # The fused EXPSUB as its two correct halves.
    "FL-VU-001": _split_expsub,
}


class StreamFilter:
    """The submit filter of a set of passes: ``filter(cmds) -> cmds``, counting what each inserted.

    Implements the device's submit-filter protocol (``__call__``, ``chip_idle`` and ``chip_reset``).
    """

    def __init__(self, passes: list[tuple[str, object]], chip: DmaGeometry | None = None):
        self.passes = passes
        self.chip = chip
        self.insertions: dict[str, int] = {}
        self._state: dict[str, dict] = {}

    def __call__(self, cmds: list[int]) -> list[int]:
        """The stream after every pass. A pass that raises leaves every pass's state as it was:
        the stream is not submitted, so the chip never sees what the passes saw in it."""
        state, inserted = {}, {}
        for name, fn in self.passes:
            state[name] = dict(self._state.get(name, {}))
            cmds, inserted[name] = fn(cmds, state[name], self.chip)
        self._state.update(state)
        for name, n in inserted.items():
            self.insertions[name] = self.insertions.get(name, 0) + n
        return cmds

    def chip_idle(self) -> None:
        """Nothing queued can still be in flight: forget what the passes remembered about the
        stream, but not the chip state they mirror (:data:`CHIP_STATE`)."""
        self._state = {name: {k: v for k, v in st.items() if k in CHIP_STATE} for name, st in self._state.items()}

    def chip_reset(self) -> None:
        """A soft reset: the chip state the passes mirror is back at its reset value too."""
        self._state = {name: {k: dict(v) for k, v in RESET_STATE.items()} for name, _ in self.passes}


def stream_filter(active: frozenset[str], config=None, board=None) -> StreamFilter:
    """The filter of the active errata's passes; the DMA passes need the chip's ``config`` and
    (resolved) ``board``."""
    chip = DmaGeometry.of(config, board) if config is not None and board is not None else None
    return StreamFilter([(err_id, PASSES[err_id]) for err_id in sorted(active) if err_id in PASSES], chip)
