"""The chips the torch operators name, and their ledger: a session's integer handle (an
operator argument), and the record of every operator call on it (cycles, kernel calls, errata
mitigations), which the ``torch.compile`` backend and :func:`ledger` read. Shared by the
operators of PyTorch's semantics (:mod:`.operators`) and the generated ones (:mod:`.generated`)."""

from __future__ import annotations

import itertools
import threading
import weakref
from dataclasses import dataclass, field

__all__ = ["handle", "session_of", "ledger", "OpRecord"]

_SESSIONS: dict[int, weakref.ref] = {}
_HANDLES = itertools.count(1)
_LOCK = threading.Lock()


def handle(chip) -> int:
    """The integer that names ``chip`` (an open :class:`firstlight.session.Session`) in the
    operators' arguments; the same session always gets the same handle."""
    from firstlight.session import Session

    if not isinstance(chip, Session):
        raise TypeError(f"expected an open firstlight session (firstlight.open(...)), not {type(chip).__name__}")
    h = getattr(chip, "torch_handle", None)
    if h is None:
        with _LOCK:
            h = next(_HANDLES)
            _SESSIONS[h] = weakref.ref(chip)
            chip.torch_handle = h
            chip.torch_ledger = []
    return h


def session_of(h: int):
    ref = _SESSIONS.get(int(h))
    chip = ref() if ref else None
    if chip is None:
        raise ValueError(f"chip handle {h} names no open firstlight session (firstlight.torch.handle(chip) gives one)")
    return chip


@dataclass
class OpRecord:
    """One operator call on the chip: the kernel calls it took, their cycles and mitigations."""

    op: str
    recipe: str
    cycles: int = 0
    kernel_calls: int = 0
    mitigations: set = field(default_factory=set)
    notes: list = field(default_factory=list)


def ledger(chip) -> list[OpRecord]:
    """The chip's operator calls so far (oldest first); clear it with ``ledger(chip).clear()``."""
    handle(chip)
    return chip.torch_ledger


def _record(h: int, op: str, recipe: str, stats: list) -> None:
    chip = session_of(h)
    rec = OpRecord(op, recipe)
    for st in stats:
        rec.cycles += st.cycles
        rec.kernel_calls += 1
        rec.mitigations |= set(st.mitigations or [])
        rec.notes += [n for n in (st.notes or []) if n not in rec.notes and not n.endswith("useful)")]
    chip.torch_ledger.append(rec)
