"""Mitigations that only reshape a command stream, written once and applied to every stream.

Like the Linux alternatives mechanism: :func:`install` patches the device's submit path with
the passes its active errata need, so every kernel's stream goes through them. A pass keeps a
small state across submits until the chip is seen idle (``Device.reset_stream_state``).
"""

from __future__ import annotations

from rtl.isa import Opcode, pack_command

__all__ = ["PASSES", "install"]

_FENCE = pack_command(Opcode.FENCE)


def _opcode(cmd: int) -> int:
    return cmd & 0xFF


def _fence_reduce_after_matmul(cmds: list[int], state: dict) -> tuple[list[int], int]:
    """FL-CP-001: a FENCE before any REDUCE queued while a MATMUL may still be draining.

    ``state`` persists across submits until the chip is seen idle: it remembers whether a
    MATMUL was queued since the last FENCE (a NOP in between does not make the REDUCE safe).
    """
    out, inserted = [], 0
    pending = state.get("matmul_pending", False)
    for c in cmds:
        op = _opcode(c)
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


def install(dev, active: frozenset[str]) -> None:
    """Replace the device's stream passes with those of the active errata (idempotent)."""
    dev.stream_passes = [(err_id, PASSES[err_id]) for err_id in sorted(active) if err_id in PASSES]
