"""The on-chip trace buffer from the host: switch it on, read it back, write a Chrome trace.

The chip records one event per command per unit into its TRACE SRAM while TRACE_CTRL.enable is
set (``rtl/trace.py``, docs/chip.md "Trace buffer"). Use it like this::

    from firstlight.trace import enable_trace, read_trace, write_chrome_trace

    await enable_trace(dev)                      # empty the buffer and start recording
    await dev.run(commands)                      # anything: kernels, hand-built streams
    events = await read_trace(dev)               # after the chip is idle
    write_chrome_trace(events, "run.json", meta={"command": "bench gemm 64"})

then open ``run.json`` in https://ui.perfetto.dev (or chrome://tracing): one named track per
unit, one slice per event, time in cycles shown as microseconds.

* :func:`read_trace` returns a :class:`Trace`: a list of event dicts (keys below) that also
  carries ``dropped`` (events the buffer could not keep), ``overflow`` and ``lost``. It reads the
  SRAM through the simulator backdoor (the trace is debug state, like the bring-up memory
  tests' view), so it needs no bus time.
* :func:`write_chrome_trace` takes that list and writes the JSON. Inside a job (the simulator
  process) return ``trace.summary()`` in the job's result; on the host,
  ``write_chrome_trace(Trace.from_summary(result["trace"]), path, meta=...)``.
* :func:`clear_trace` empties the buffer and keeps recording as it was; :func:`disable_trace`
  stops recording and keeps what was recorded.

An event dict: ``unit`` (``"stream"``, ``"dma_in"``, ``"dma_out"``, ``"matrix"``, ``"reduce"``),
``track`` (the unit's display name), ``opcode`` (name, e.g. ``"MATMUL"``, or ``"0x5a"`` for an
unknown code), ``opcode_code``, ``tag``, ``start`` and ``end`` (chip cycles since reset, both
inclusive), ``cycles`` (``end - start + 1``) and ``dropped`` (a stream event whose command failed
a check and was dropped), in the order the chip wrote them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterable

from rtl.csr_map import REG
from rtl.isa import Opcode
from rtl.memories import Region
from rtl.trace import UNIT_NAMES, Unit, decode_entry

__all__ = ["Trace", "enable_trace", "disable_trace", "clear_trace", "read_trace", "decode_words",
           "chrome_trace", "write_chrome_trace", "dropped_note", "UNIT_KEYS"]

UNIT_KEYS = {u: u.name.lower() for u in Unit}  # Unit.DMA_IN -> "dma_in"
_PENDING_READS = 64  # TRACE_COUNT reads while events are still being written, at most


class Trace(list):
    """The events of one read of the buffer, plus what the buffer could not keep."""

    def __init__(self, events: Iterable[dict] = (), *, dropped: int = 0, overflow: bool = False,
                 lost: bool = False, depth: int | None = None):
        super().__init__(events)
        self.dropped, self.overflow, self.lost, self.depth = int(dropped), bool(overflow), bool(lost), depth

    def summary(self) -> dict:
        """JSON-friendly: the events and the flags (a job's result; ``Trace.from_summary`` undoes it)."""
        return {"events": list(self), "dropped": self.dropped, "overflow": self.overflow, "lost": self.lost,
                "depth": self.depth}

    @classmethod
    def from_summary(cls, d: dict) -> "Trace":
        return cls(d["events"], dropped=d["dropped"], overflow=d["overflow"], lost=d["lost"], depth=d.get("depth"))


def dropped_note(trace: Trace) -> str | None:
    """What a user reads when ``trace`` is not the whole run (None when it is): how many events
    were dropped and the ``--trace-depth`` that keeps them all. The CLI prints it once, as a
    warning on stderr; the trace file marks the same point with its instant event."""
    from rtl.config import MAX_TRACE_DEPTH

    if not trace.dropped:
        return None
    total = len(trace) + trace.dropped
    holds = f"the trace buffer holds {trace.depth:,} events" if trace.depth else "the trace buffer was full"
    note = f"{holds}: {trace.dropped:,} of the run's {total:,} were dropped, so the trace ends early"
    if trace.lost:  # the staging FIFOs overflowed: a deeper buffer does not bring those back
        note += " (some were lost because units finished faster than one event a cycle)"
    need = 1 << (total - 1).bit_length()
    if need <= MAX_TRACE_DEPTH:
        return note + f"; build with --trace-depth {need} to keep them all"
    return (note + f"; even the deepest buffer (--trace-depth {MAX_TRACE_DEPTH}) holds fewer: trace a smaller "
            "problem to see all of it")


# ---- the registers ------------------------------------------------------------------------------
async def enable_trace(dev) -> None:
    """Empty the buffer and record from now on (TRACE_CTRL: clear and enable in one write)."""
    await dev.write_csr("TRACE_CTRL", REG["TRACE_CTRL"].pack(enable=1, clear=1))


async def disable_trace(dev) -> None:
    """Stop recording; what was recorded stays readable."""
    await dev.write_csr("TRACE_CTRL", 0)


async def clear_trace(dev) -> None:
    """Empty the buffer (count, flags, dropped count); recording stays on or off as it was."""
    enable = REG["TRACE_CTRL"].field("enable").get(await dev.read_csr("TRACE_CTRL"))
    await dev.write_csr("TRACE_CTRL", REG["TRACE_CTRL"].pack(enable=enable, clear=1))


# ---- reading it back -------------------------------------------------------------------------------
def _opcode_name(code: int) -> str:
    try:
        return Opcode(code).name
    except ValueError:
        return f"0x{code:02x}"


def decode_words(words: Iterable[int]) -> list[dict]:
    """Event dicts from raw TRACE SRAM words (``rtl.trace.TRACE_ENTRY``)."""
    out = []
    for w in words:
        e = decode_entry(w)
        try:
            unit = Unit(e["unit"])
        except ValueError:
            raise ValueError(f"trace entry 0x{int(w):032x} names no unit ({e['unit']}): not a trace entry") from None
        out.append({"unit": UNIT_KEYS[unit], "track": UNIT_NAMES[unit], "opcode": _opcode_name(e["opcode"]),
                    "opcode_code": e["opcode"], "tag": e["tag"], "start": e["start"], "end": e["end"],
                    "cycles": e["end"] - e["start"] + 1, "dropped": bool(e["dropped"])})
    return out


async def read_trace(dev) -> Trace:
    """Every entry the chip has written since the last clear, decoded. Call it with the chip idle:
    it waits (a few register reads) until the events still in the staging FIFOs are written."""
    reg = REG["TRACE_COUNT"]
    for _ in range(_PENDING_READS):
        status = reg.unpack(await dev.read_csr("TRACE_COUNT"))
        if not status["pending"]:
            break
    dropped = await dev.read_csr("TRACE_DROPPED")
    words = dev.read_words(Region.TRACE, 0, status["count"]) if status["count"] else []
    return Trace(decode_words(words), dropped=dropped, overflow=status["overflow"], lost=status["lost"],
                 depth=dev.mem_depth(Region.TRACE))


# ---- Chrome trace event format (Perfetto) -------------------------------------------------------------
_PID = 1


def _lanes(events: list[dict]) -> list[int]:
    """A lane per event so that no two events of one lane overlap (greedy, by start): a pipelined
    unit (the matrix engine) gets a second track while one MATMUL feeds and another drains, since
    Perfetto nests the slices of one track and cannot show a partial overlap."""
    order = sorted(range(len(events)), key=lambda i: (events[i]["start"], events[i]["end"]))
    ends: list[int] = []
    lane = [0] * len(events)
    for i in order:
        for k, last in enumerate(ends):
            if last < events[i]["start"]:
                ends[k], lane[i] = events[i]["end"], k
                break
        else:
            lane[i] = len(ends)
            ends.append(events[i]["end"])
    return lane


def _tid(unit: Unit, lane: int) -> int:
    return 1 + int(unit) if lane == 0 else 16 * (1 + int(unit)) + lane


def chrome_trace(events: Iterable[dict], *, meta: dict | None = None, dropped: int | None = None) -> dict:
    """The Chrome trace event JSON object of ``events`` (see :func:`write_chrome_trace`)."""
    dropped = int(getattr(events, "dropped", 0) if dropped is None else dropped)
    events = list(events)
    origin = min((e["start"] for e in events), default=0)
    out: list[dict] = [{"ph": "M", "pid": _PID, "name": "process_name",
                        "args": {"name": (meta or {}).get("name", "firstlight chip")}}]
    used: set[tuple[Unit, int]] = {(u, 0) for u in Unit}  # every unit's track, used or not
    slices = []
    for unit in Unit:
        mine = [e for e in events if e["unit"] == UNIT_KEYS[unit]]
        for e, lane in zip(mine, _lanes(mine)):
            used.add((unit, lane))
            name = e["opcode"] + (" (dropped: failed a check)" if e.get("dropped") else "")
            args = {"tag": e["tag"], "tag_hex": f"0x{e['tag']:05x}", "start_cycle": e["start"], "end_cycle": e["end"]}
            if unit is Unit.STREAM:
                args["waited_cycles"] = e["end"] - e["start"]
            slices.append({"ph": "X", "pid": _PID, "tid": _tid(unit, lane), "name": name, "cat": UNIT_KEYS[unit],
                           "ts": e["start"] - origin, "dur": e["end"] - e["start"] + 1, "args": args})
    for unit, lane in sorted(used):
        label = UNIT_NAMES[unit] if lane == 0 else f"{UNIT_NAMES[unit]} ({lane + 1})"
        out.append({"ph": "M", "pid": _PID, "tid": _tid(unit, lane), "name": "thread_name", "args": {"name": label}})
        out.append({"ph": "M", "pid": _PID, "tid": _tid(unit, lane), "name": "thread_sort_index",
                    "args": {"sort_index": 16 * int(unit) + lane}})
    out += sorted(slices, key=lambda s: (s["ts"], s["tid"]))
    other = {"time_unit": "1 chip cycle is shown as 1 us", "origin_cycle": origin, "events": len(events),
             "trace_dropped": dropped, **(meta or {})}
    if dropped:
        last = max((e["end"] for e in events), default=origin)
        msg = f"trace buffer full: {dropped} events dropped"
        out.append({"ph": "i", "s": "g", "pid": _PID, "tid": _tid(Unit.STREAM, 0), "name": msg,
                    "ts": last - origin + 1, "args": {"dropped": dropped}})
        other["warning"] = msg
    return {"traceEvents": out, "otherData": other}


def write_chrome_trace(events: Iterable[dict], path, *, meta: dict | None = None, dropped: int | None = None) -> Path:
    """Write ``events`` as a Chrome trace event file (JSON) that Perfetto opens.

    One track (thread) per unit, named by ``thread_name`` metadata, with a complete event
    (``ph: "X"``) per trace event: ``ts`` = start cycle and ``dur`` = cycles, both shown as
    microseconds, counted from the earliest start (``otherData.origin_cycle``); ``args`` hold the
    tag and the absolute cycles. A unit whose events overlap (the pipelined matrix engine) gets
    extra lanes named "matrix engine (2)", ... ``meta`` (JSON-able) goes into ``otherData``. If
    events were dropped (``dropped``, by default the :class:`Trace`'s own count) a global instant
    event "trace buffer full: N events dropped" marks the end of the recorded part.
    """
    if dropped is None:
        dropped = getattr(events, "dropped", 0)
    doc = chrome_trace(events, meta=meta, dropped=dropped)
    path = Path(path)
    path.write_text(json.dumps(doc, indent=1) + "\n")
    return path
