"""Mitigations that only reshape a command stream, written once and applied to every stream.

Like the Linux alternatives mechanism: :func:`install` patches the device's submit path with
the passes its active errata need, so every kernel's stream goes through them. A pass sees the
command queued just before (since the chip was last idle) so it also works across submits.
"""

from __future__ import annotations

from rtl.isa import Opcode, pack_command

__all__ = ["PASSES", "install"]

_FENCE = pack_command(Opcode.FENCE)


def _opcode(cmd: int | None) -> int | None:
    return None if cmd is None else cmd & 0xFF


def _between(first_op: int, second_op: int, filler: int):
    def apply(cmds: list[int], previous: int | None) -> tuple[list[int], int]:
        out, inserted, prev = [], 0, _opcode(previous)
        for c in cmds:
            op = _opcode(c)
            if prev == first_op and op == second_op:
                out.append(filler)
                inserted += 1
            out.append(c)
            prev = op
        return out, inserted

    return apply


PASSES = {
    # A FENCE retires only once the engine has written its last rows.
    "FL-CP-001": _between(Opcode.MATMUL, Opcode.REDUCE, _FENCE),
}


def install(dev, active: frozenset[str]) -> None:
    """Replace the device's stream passes with those of the active errata (idempotent)."""
    dev.stream_passes = [(err_id, PASSES[err_id]) for err_id in sorted(active) if err_id in PASSES]
