"""The performance stage's verdict: a GEMM's measured cycles against what the GEMM planner's own
schedule model predicts for that plan on that chip and board (``kernels/gemm_plan.py``).

The model (:func:`schedule_model`) is the planner's: the MATMULs' feed occupancy plus one drain
per wait (``GemmPlan.predicted_cycles``), the plan's DRAM traffic (``plan_traffic``), and the
DMA-fed schedule over the board's bandwidth (``GemmPlan.dma_cycles``); it predicts the larger of
the compute and the DMA-fed schedule. A chip (or board) that takes more than :data:`TOLERANCE`
times that fails, and the verdict says which term of the gap grew, each against its model:

* **MAC time**: ENGINE_BUSY against the feed occupancy and drains;
* **DRAM bytes**: DRAM_RD_BYTES + DRAM_WR_BYTES against the plan's traffic (and the compulsory
  bytes);
* **DRAM bandwidth**: DRAM_BUSY against the bytes moved at the board's published bandwidth;
* **overlap**: the cycles in which neither the engine nor the DRAM was busy, against the cycles
  the schedule model expects beyond the busier of the two (with the semaphore waits, WAIT_EXEC).

The tolerance comes from measurement on good chips (docs/bringup.md, "The performance stage").
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from kernels.gemm_plan import GemmPlan, plan_traffic
from rtl.board import BoardConfig
from rtl.config import ChipConfig

__all__ = ["TOLERANCE", "Term", "Verdict", "schedule_model", "compare"]

# Measured cycles may be at most this many times the schedule model's prediction. Good chips
# measured 0.81x to 1.09x (docs/bringup.md gives the commands and the numbers).
TOLERANCE = 1.2
# A term is named as grown when it costs more than this share of the predicted cycles beyond its model.
GREW = 0.05


@dataclass(frozen=True)
class Term:
    """One term of the gap: its model and measured values and what it cost beyond the model."""

    name: str
    model: float
    measured: float
    excess_cycles: float  # cycles beyond the model this term accounts for (<= 0: none)
    text: str  # the term in words, with both values


@dataclass(frozen=True)
class Verdict:
    passed: bool
    cycles: int
    predicted: int
    ratio: float
    terms: tuple[Term, ...]
    grew: tuple[Term, ...]  # the terms past GREW, the largest first (a failure names at least one)

    def figures(self) -> dict:
        return {"model_cycles": self.predicted, "model_ratio": round(self.ratio, 3), "model_tolerance": TOLERANCE,
                **{f"model_{t.name.replace(' ', '_').lower()}": [round(t.model), round(t.measured)]
                   for t in self.terms}}

    def sentence(self) -> str:
        head = (f"{self.cycles:,} cycles, {self.ratio:.2f}x the {self.predicted:,} the schedule model predicts for "
                f"this plan (fails past {TOLERANCE:.2f}x)")
        if self.passed:
            return head
        return head + "; what grew: " + "; ".join(t.text for t in self.grew)


def schedule_model(cfg: ChipConfig, board: BoardConfig, plan: GemmPlan) -> dict:
    """What the planner's schedule model predicts for ``plan``: compute, traffic (bytes),
    memory (the traffic at the board's bandwidth), the DMA-fed schedule, and the prediction."""
    compute = plan.predicted_cycles(cfg)
    traffic = plan_traffic(cfg, plan)
    schedule = plan.dma_cycles(cfg, board.bytes_per_cycle, board.latency)
    return {"compute": compute, "traffic": traffic, "memory": traffic / board.bytes_per_cycle,
            "schedule": schedule, "predicted": math.ceil(max(compute, schedule))}


def compare(st: dict, cfg: ChipConfig, board: BoardConfig, tolerance: float = TOLERANCE) -> Verdict:
    """The measured GEMM (``st``: its KernelStats as a dict, with its ``plan``) against the model."""
    plan = GemmPlan(**st["plan"])
    m = schedule_model(cfg, board, plan)
    bw = board.bytes_per_cycle
    cycles, engine, moved, busy = st["cycles"], st["engine_busy_cycles"], st["dram_bytes"], st["dram_busy_cycles"]
    at_bw = moved / bw  # the bytes moved, at the published bandwidth
    exposed_model = max(0.0, m["predicted"] - max(m["compute"], m["memory"]))
    exposed = max(0, cycles - max(engine, busy))
    waits = (st.get("wait_cycles") or {}).get("stream", 0)
    terms = (
        Term("MAC time", m["compute"], engine, engine - m["compute"],
             f"MAC time: the engine was busy {engine:,} cycles, the model's feed occupancy and drains are "
             f"{m['compute']:,}"),
        Term("DRAM bytes", m["traffic"], moved, (moved - m["traffic"]) / bw,
             f"DRAM bytes: {moved:,} moved where the plan moves {m['traffic']:,} (compulsory "
             f"{st.get('compulsory_bytes', 0):,})"),
        Term("DRAM bandwidth", at_bw, busy, busy - at_bw,
             f"DRAM bandwidth: the DRAM was busy {busy:,} cycles for {moved:,} bytes, {moved / busy if busy else 0:.2f} "
             f"B/cycle where the board publishes {bw:g}"),
        Term("overlap", exposed_model, exposed, exposed - exposed_model,
             f"overlap: {exposed:,} cycles with neither the engine nor the DRAM busy where the model expects "
             f"{round(exposed_model):,} (the command stream waited {waits:,} cycles on semaphores)"),
    )
    ratio = cycles / m["predicted"] if m["predicted"] else math.inf
    passed = ratio <= tolerance
    grew = sorted((t for t in terms if t.excess_cycles > GREW * m["predicted"]), key=lambda t: -t.excess_cycles)
    if not passed and not grew:  # no single term past GREW: the largest one, whatever it is
        grew = [max(terms, key=lambda t: t.excess_cycles)]
    return Verdict(passed, cycles, m["predicted"], ratio, terms, tuple(grew))
