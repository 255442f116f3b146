"""Per-kernel measurement: perf-counter deltas, roofline, and where the wall time went."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from .roofline import utilization

__all__ = ["Measure"]


@dataclass
class Measure:
    """Wraps one kernel call: ``async with Measure(dev, name, ideal) as m: ...; m.stats``.

    ``ideal`` is the roofline's cycle count for the work (see :mod:`kernels.roofline`).
    """

    dev: object
    kernel: str
    ideal: int
    extra: dict = field(default_factory=dict)
    stats: dict = field(default_factory=dict)

    async def __aenter__(self):
        self._sim0 = self.dev.timing.sim_s
        self._t0 = time.perf_counter()
        self._p0 = await self.dev.read_perf()
        return self

    async def __aexit__(self, exc_type, exc, tb):
        if exc_type is not None:
            return False
        p1 = await self.dev.read_perf()
        wall = time.perf_counter() - self._t0
        sim = self.dev.timing.sim_s - self._sim0
        d = p1 - self._p0
        cfg = self.dev.config
        ideal = self.ideal
        self.stats = {
            "kernel": self.kernel,
            "array": f"{cfg.rows}x{cfg.cols}",
            "revision": self.dev.revision,
            "cycles": d["CYCLES"],
            "ideal_cycles": ideal,
            "utilization": utilization(ideal, d["CYCLES"]),
            "engine_busy_cycles": d["ENGINE_BUSY"],
            "macs_issued": d["MACS"],
            "reduce_busy_cycles": d["REDUCE_BUSY"],
            "stall_cycles": d["STALLS"],
            "wall_s": wall,
            "sim_wait_s": sim,
            "python_s": wall - sim,
            "python_share": (wall - sim) / wall if wall > 0 else 0.0,
            "sim_cycles_per_s": d["CYCLES"] / wall if wall > 0 else 0.0,
            "mitigations": [],
            **self.extra,
        }
        return False
