"""Mitigations that only reshape a command stream, written once and applied to every stream.

Like the Linux alternatives mechanism: :func:`stream_filter` builds one submit filter from the
passes the active errata need, and ``workarounds.attach`` installs it on the device's generic
submit hook, so every kernel's stream goes through them. A pass keeps a small state across
submits until the chip is seen idle (the device calls ``chip_idle``).
"""

from __future__ import annotations

from rtl.isa import Opcode, fence, opcode_of

__all__ = ["PASSES", "StreamFilter", "stream_filter"]

_FENCE = fence()


def _fence_reduce_after_matmul(cmds: list[int], state: dict) -> tuple[list[int], int]:
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


PASSES = {
    # A FENCE retires only once the engine has written its last rows.
    "FL-CP-001": _fence_reduce_after_matmul,
}


class StreamFilter:
    """The submit filter of a set of passes: ``filter(cmds) -> cmds``, counting what each inserted.

    Implements the device's submit-filter protocol (``__call__`` and ``chip_idle``).
    """

    def __init__(self, passes: list[tuple[str, object]]):
        self.passes = passes
        self.insertions: dict[str, int] = {}
        self._state: dict[str, dict] = {}

    def __call__(self, cmds: list[int]) -> list[int]:
        for name, fn in self.passes:
            cmds, inserted = fn(cmds, self._state.setdefault(name, {}))
            self.insertions[name] = self.insertions.get(name, 0) + inserted
        return cmds

    def chip_idle(self) -> None:
        """Nothing queued can still be in flight: forget what the passes remembered."""
        self._state = {}


def stream_filter(active: frozenset[str]) -> StreamFilter:
    return StreamFilter([(err_id, PASSES[err_id]) for err_id in sorted(active) if err_id in PASSES])
