"""Jobs for tests/test_harness.py (they run inside the simulator): ones that end their own
simulator process, one that succeeds and one that raises."""

from __future__ import annotations

import os


async def die_by_signal_job(dev, emit, signum: int) -> None:
    emit({"type": "note", "text": "about to die"})
    os.kill(os.getpid(), signum)


async def exit_job(dev, emit, code: int) -> None:
    emit({"type": "note", "text": "about to exit"})
    os._exit(code)


async def ok_job(dev, emit) -> int:
    """Succeeds at once: what a run leaves behind afterwards."""
    return 42


async def raise_job(dev, emit) -> None:
    raise RuntimeError("this job fails on purpose")


async def vpi_lookup_job(dev, emit, path: str) -> None:
    """Looks an array up through the backdoor's whole-array VPI (Verilator): a harness error when
    the simulator has no such array."""
    from rtl.memories import Region

    dev._mems[Region.A]._vpi.handle(path)


__all__ = ["die_by_signal_job", "exit_job", "ok_job", "raise_job", "vpi_lookup_job"]
