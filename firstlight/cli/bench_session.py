"""``firstlight bench``'s session table: what one call through a session costs.

A 4x4x4 int8 GEMM round trip from this process through an open session
(:mod:`firstlight.session`), against the wall time its handler took inside the simulator process
(the kernel with its host side: planning, staging, the simulated cycles, reading back): the
difference is the session's overhead per call (the request and the answer on the socket, the
arrays, the stats). An empty call (``ping``) is the transport alone, and
a fresh simulator process per call (``run_job``, the path ``firstlight run`` takes) is what the
session saves.
"""

from __future__ import annotations

import statistics
import time

import numpy as np

from .common import FittedTable, console, plain

__all__ = ["session_overhead", "overhead_table", "print_session_overhead", "JOB_CALLS"]

JOB_CALLS = 3  # fresh-process runs measured (each starts a simulator)


def _ms(xs: list[float]) -> float:
    return 1e3 * statistics.median(xs)


def session_overhead(variant, sim: str, calls: int, seed: int = 1) -> list[dict]:
    """Rows of the session table for one simulator (see the module docstring)."""
    import firstlight
    from cosim.jobs import run_job
    from firstlight.jobs.kernels import gemm_job

    rng = np.random.default_rng(seed)
    a = rng.integers(-128, 128, (4, 4), dtype=np.int8)
    b = rng.integers(-128, 128, (4, 4), dtype=np.int8)
    t0 = time.perf_counter()
    with firstlight.open(rev=variant.revision, sim=sim, config=variant.config, board=variant.board) as chip:
        open_s = time.perf_counter() - t0
        chip.gemm(a, b)  # the first call imports the kernel in the simulator: not a steady-state call
        pings = [chip.ping() for _ in range(calls)]
        trips, inside, cycles = [], [], []
        for _ in range(calls):
            t = time.perf_counter()
            _, st = chip.gemm(a, b)
            trips.append(time.perf_counter() - t)
            inside.append(chip.last_handler_s)
            cycles.append(st.cycles)
    jobs = []
    for _ in range(JOB_CALLS):
        t = time.perf_counter()
        run_job(gemm_job, {"m": 4, "n": 4, "k": 4, "seed": seed}, variant=variant, sim=sim)
        jobs.append(time.perf_counter() - t)
    over = [t - i for t, i in zip(trips, inside)]
    return [
        {"sim": sim, "path": "session: empty call (ping)", "calls": calls, "round_trip_ms": _ms(pings),
         "kernel_ms": 0.0, "overhead_ms": _ms(pings), "cycles": 0, "open_s": open_s},
        {"sim": sim, "path": "session: 4x4x4 GEMM", "calls": calls, "round_trip_ms": _ms(trips),
         "kernel_ms": _ms(inside), "overhead_ms": _ms(over), "cycles": int(statistics.median(cycles)),
         "open_s": open_s},
        {"sim": sim, "path": "a simulator process per call (run_job)", "calls": JOB_CALLS,
         "round_trip_ms": _ms(jobs), "kernel_ms": _ms(inside), "overhead_ms": _ms(jobs) - _ms(inside),
         "cycles": int(statistics.median(cycles)), "open_s": None},
    ]


def overhead_table(rows: list[dict], title: str) -> FittedTable:
    head = ["sim", "path", "calls", "round trip\nms (median)", "in the\nhandler ms", "overhead\nms per call",
            "GEMM\ncycles", "session\nopen s"]
    body = [[r["sim"], r["path"], str(r["calls"]), f"{r['round_trip_ms']:.2f}", f"{r['kernel_ms']:.2f}",
             f"{r['overhead_ms']:.2f}", f"{r['cycles']:,}" if r["cycles"] else "-",
             f"{r['open_s']:.1f}" if r["open_s"] is not None else "-"] for r in rows]
    return FittedTable(title, head, body, keys=2, justify=["left", "left"] + ["right"] * 6)


def print_session_overhead(variant, sims: list[str], calls: int, seed: int) -> bool:
    """Measure and print the table; False when a session could not run (a harness error)."""
    from cosim.build import HarnessError

    rows, ok = [], True
    for s in sims:
        try:
            rows += session_overhead(variant, s, calls, seed)
        except HarnessError as e:
            console.print(plain((f"{s}: session: harness error: ", "red"), str(e)))
            ok = False
    if rows:
        cfg = variant.config
        console.print(overhead_table(rows, f"Per-call overhead of a session ({cfg.rows}x{cfg.cols} chip, revision "
                                           f"{variant.revision}): round trip from this process minus the handler's "
                                           "wall time inside the simulator process"))
    return ok
