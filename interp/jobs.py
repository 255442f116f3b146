"""A job (``async def job(dev, emit, **kwargs)``, the functions cosim.jobs.run_job runs inside a
simulator) run in this process on an :class:`~interp.device.InterpDevice` instead.

The same job function, the same keyword arguments, the same return value: what the RTL run
returns, with ``cycles`` and the other timed figures at 0 (the interpreter has no timing model
yet, docs/interpret.md). No build, no simulator process, no watchdog: a stream that can never
finish raises :class:`~interp.errors.Deadlock` at once, naming the commands that wait.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

from rtl.board import BoardConfig
from rtl.config import ChipConfig

from .device import InterpDevice

__all__ = ["InterpretedRun", "run_job"]


@dataclass
class InterpretedRun:
    """What :func:`run_job` gives back: the job's value, the records it emitted, its seconds."""

    value: object
    records: list = field(default_factory=list)
    run_s: float = 0.0


def run_job(job, kwargs: dict, *, config: ChipConfig, board: BoardConfig, revision: str, dma_order: str = "eager",
            seed: int = 0) -> InterpretedRun:
    """Run ``job(dev, emit, **kwargs)`` on a fresh interpreted chip of ``config`` and ``board`` at
    ``revision`` (one without defects, else :class:`~interp.errors.UnmodelledRevision`), its DMAs
    in ``dma_order`` (InterpDevice)."""
    dev = InterpDevice(config, board, revision, dma_order=dma_order, seed=seed)
    records: list = []
    t0 = time.perf_counter()
    value = asyncio.run(job(dev, records.append, **kwargs))
    return InterpretedRun(value, records, time.perf_counter() - t0)
