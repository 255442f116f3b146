"""Host side of ``firstlight bench --limit``: the harness against the simulator's own limit.

For one chip and one GEMM shape: a harness run records its board stimulus
(:mod:`cosim.stimulus`); then harness runs (cocotb on Verilator, the normal path) and replays
of that stimulus on the bare Verilator build (:mod:`cosim.limit`) alternate, so both see the
same machine load. Both time the same simulated cycles, the kernel's window; the ratio of each
pair is taken, and the median of the ratios reported (the harness's and the limit's medians
beside it).
"""

from __future__ import annotations

import statistics
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

from cosim.build import Variant, build_simulator
from cosim.jobs import JobFailed, run_job
from cosim.limit import build_limit, run_limit

from .kernels import gemm_job

__all__ = ["LimitRow", "chip_name", "measure_limit"]


def chip_name(variant: Variant) -> str:
    """``"4x4-fp"``, ``"4x4-int8"``, ``"8x8-fp-novec"``: the chip a limit row is about."""
    cfg = variant.config
    kind = "int8" if tuple(cfg.formats) == ("int8",) else "fp"
    return f"{cfg.rows}x{cfg.cols}-{kind}" + ("" if cfg.vector else "-novec")


@dataclass
class LimitRow:
    chip: str
    shape: str
    revision: str
    cycles: int  # the kernel's window, simulated cycles
    harness_cycles_per_s: float  # medians over the repetitions
    limit_cycles_per_s: float
    ratio: float  # median of the per-repetition ratios harness / limit
    harness_runs: list[float] = field(default_factory=list)
    limit_runs: list[float] = field(default_factory=list)
    python_share: float = 0.0  # of the harness's kernel wall time, median
    build_s: float | None = None  # the harness build, when it was made
    limit_build_s: float = 0.0  # this call's build or cache lookup of the limit

    def as_dict(self) -> dict:
        return asdict(self)


class LimitMeasureError(RuntimeError):
    """A harness run of the limit measurement failed (a wrong result is not timed)."""


def _harness_run(variant: Variant, shape: list[int], seed: int, stimulus: Path | None = None) -> dict:
    m, n, k = shape
    try:
        res = run_job(gemm_job, {"m": m, "n": n, "k": k, "seed": seed}, variant=variant, stimulus=stimulus)
    except JobFailed as e:
        raise LimitMeasureError(f"the harness run of {'x'.join(map(str, shape))} failed: {e}") from e
    if not res.value["passed"]:
        raise LimitMeasureError(f"the GEMM {'x'.join(map(str, shape))} differed from its golden "
                                f"({res.value['mismatch']}): not timed")
    return res.value["stats"]


def measure_limit(variant: Variant, shape: list[int], reps: int = 3, seed: int = 1,
                  progress: Callable[[str], None] | None = None) -> LimitRow:
    """Harness and limit cycles/s on one GEMM shape, ``reps`` alternating pairs."""
    say = progress or (lambda _msg: None)
    name, shape_s = chip_name(variant), "x".join(map(str, shape))
    build = build_simulator(variant)
    say(f"{name} {shape_s}: building the bare reference")
    lb = build_limit(variant)
    with tempfile.TemporaryDirectory(prefix="firstlight-limit-") as tmp:
        work = Path(tmp)
        stim = work / "stimulus.txt"
        say(f"{name} {shape_s}: recording a harness run")
        first = _harness_run(variant, shape, seed, stimulus=stim)
        window = tuple(first["sim_window"])
        cycles = window[1] - window[0]
        h_runs, l_runs, ratios, py = [], [], [], []
        for i in range(reps):
            say(f"{name} {shape_s}: repetition {i + 1} of {reps}")
            st = _harness_run(variant, shape, seed)
            if tuple(st["sim_window"]) != window:  # deterministic chip: a different window is other work
                raise LimitMeasureError(f"the harness run took cycles {st['sim_window']}, the recorded one {list(window)}: "
                                        "the runs are not the same work, so their speeds cannot be compared")
            h = cycles / st["wall_s"]
            lim = run_limit(lb, stim, window, work).cycles_per_s
            h_runs.append(h)
            l_runs.append(lim)
            ratios.append(h / lim)
            py.append(st["python_share"])
    return LimitRow(name, shape_s, variant.revision, cycles, statistics.median(h_runs), statistics.median(l_runs),
                    statistics.median(ratios), h_runs, l_runs, statistics.median(py), build.first_build_s,
                    lb.build_s)
