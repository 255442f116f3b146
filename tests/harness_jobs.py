"""Jobs for tests/test_harness.py that end their own simulator process (they run inside it)."""

from __future__ import annotations

import os


async def die_by_signal_job(dev, emit, signum: int) -> None:
    emit({"type": "note", "text": "about to die"})
    os.kill(os.getpid(), signum)


async def exit_job(dev, emit, code: int) -> None:
    emit({"type": "note", "text": "about to exit"})
    os._exit(code)


__all__ = ["die_by_signal_job", "exit_job"]
