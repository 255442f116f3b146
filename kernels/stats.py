"""Per-kernel measurement: perf-counter deltas, roofline, and where the wall time went.

Every kernel returns a :class:`KernelStats`; it becomes a dict (``to_dict``) only at the job
boundary, where it crosses into JSON.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field

from .roofline import roofline_terms, utilization

__all__ = ["KernelStats", "Measure"]


@dataclass
class KernelStats:
    """What one kernel call did on the chip.

    Counters are deltas of the chip's perf counters over the call; ``ideal_cycles`` is the
    roofline's count for the useful work (:mod:`kernels.roofline`).
    """

    kernel: str
    array: str
    revision: str
    cycles: int
    ideal_cycles: int
    utilization: float
    engine_busy_cycles: int
    macs_issued: int
    reduce_busy_cycles: int
    stall_cycles: int
    wall_s: float
    sim_wait_s: float
    python_s: float
    python_share: float
    sim_cycles_per_s: float
    shape: list[int] = field(default_factory=list)
    host: dict = field(default_factory=dict)  # host-side work: words loaded, commands, waits
    useful_macs: int | None = None
    plan: dict | None = None  # the tiling: a GEMM's kernels.gemm_plan.GemmPlan.as_dict, a tile kernel's kernel_args
    predicted_cycles: int | None = None  # the schedule model's prediction
    op: str | None = None  # reductions
    format: str | None = None  # FP GEMMs
    chunks: list[int] = field(default_factory=list)  # FP GEMMs: K of each MATMUL, for the golden
    recipe: str | None = None  # low-precision GEMMs
    notes: list[str] = field(default_factory=list)
    vector_busy_cycles: int | None = None  # VEC_BUSY
    vector_elems: int | None = None  # VEC_ELEMS: lanes the vector unit wrote
    # errata, from workarounds.Mitigations.report
    mitigations: list[str] = field(default_factory=list)
    errata_status: dict[str, str] = field(default_factory=dict)
    errata_warnings: list[str] = field(default_factory=list)
    stream_pass_insertions: dict[str, int] = field(default_factory=dict)
    # the memory system and the two-sided roofline (kernels.roofline.roofline_terms)
    dram_bytes: int | None = None  # moved, from DRAM_RD_BYTES + DRAM_WR_BYTES
    dram_read_bytes: int | None = None
    dram_write_bytes: int | None = None
    compulsory_bytes: int | None = None
    intensity: float | None = None
    compute_cycles: int | None = None
    vector_cycles: int | None = None  # the vector roof (kernels/roofline.py)
    memory_cycles: int | None = None
    attainable_cycles: int | None = None
    bound: str | None = None
    roof_utilization: float | None = None
    overlap: float | None = None
    ridge_point: float | None = None
    dram_bytes_per_cycle: float | None = None
    dma_in_busy_cycles: int | None = None
    dma_out_busy_cycles: int | None = None
    dram_busy_cycles: int | None = None
    wait_cycles: dict = field(default_factory=dict)  # per unit: cycles waiting on a semaphore
    dma_engine_overlap_cycles: int | None = None
    double_buffer: bool | None = None
    epilogue: str | None = None  # a GEMM's fused epilogue (kernels/epilogue.py): "requant" or "requant+relu"
    dram: dict | None = None  # the board's DRAM (rtl.board.BoardConfig.as_dict)
    # the testbench clock's cycles at the start and the end of the measurement: the window a
    # replay of the run times (cosim/limit.py), so both count the same simulated cycles
    sim_window: list[int] | None = None

    def add_errata(self, report: dict) -> None:
        for k, v in report.items():
            setattr(self, k, v)

    def to_dict(self) -> dict:
        return {k: v for k, v in asdict(self).items() if v is not None}


@dataclass
class Measure:
    """Wraps one kernel call: ``async with Measure(dev, name, ideal, **extra) as m: ...; m.stats``."""

    dev: object
    kernel: str
    ideal: int
    extra: dict = field(default_factory=dict)
    stats: KernelStats | None = None
    compulsory_bytes: int | None = None  # each operand read once, each result written once
    useful_macs: int | None = None
    compute_cycles: int | None = None  # a non-GEMM kernel's compute roof (else useful MACs / peak)
    vector_cycles: int | None = None  # the vector and reduction units' passes (the vector roof)

    async def __aenter__(self):
        self._sim0 = self.dev.timing.sim_s
        self._t0 = time.perf_counter()
        self._c0 = self.dev.now_cycles()
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
        self.stats = KernelStats(
            kernel=self.kernel,
            array=f"{cfg.rows}x{cfg.cols}",
            revision=self.dev.revision,
            cycles=d["CYCLES"],
            ideal_cycles=self.ideal,
            utilization=utilization(self.ideal, d["CYCLES"]),
            engine_busy_cycles=d["ENGINE_BUSY"],
            macs_issued=d["MACS"],
            reduce_busy_cycles=d["REDUCE_BUSY"],
            stall_cycles=d["STALLS"],
            wall_s=wall,
            sim_wait_s=sim,
            python_s=wall - sim,
            python_share=(wall - sim) / wall if wall > 0 else 0.0,
            sim_cycles_per_s=d["CYCLES"] / wall if wall > 0 else 0.0,
            dram_read_bytes=d["DRAM_RD_BYTES"],
            dram_write_bytes=d["DRAM_WR_BYTES"],
            dma_in_busy_cycles=d["DMA_IN_BUSY"],
            dma_out_busy_cycles=d["DMA_OUT_BUSY"],
            dram_busy_cycles=d["DRAM_BUSY"],
            wait_cycles={"stream": d["WAIT_EXEC"], "dma_in": d["WAIT_DMA_IN"], "dma_out": d["WAIT_DMA_OUT"]},
            dma_engine_overlap_cycles=d["DMA_ENGINE_OVERLAP"],
            dram=self.dev.board.as_dict(),
            vector_busy_cycles=d["VEC_BUSY"],
            vector_elems=d["VEC_ELEMS"],
            sim_window=[self._c0, self.dev.now_cycles()],
            **self.extra,
        )
        if self.useful_macs is not None:
            self.stats.useful_macs = self.useful_macs
        if self.compulsory_bytes is not None:
            macs = self.useful_macs if self.useful_macs is not None else self.extra.get("useful_macs", 0)
            terms = roofline_terms(cfg, self.dev.board, useful_macs=macs, compulsory_bytes=self.compulsory_bytes,
                                   moved_bytes=d["DRAM_RD_BYTES"] + d["DRAM_WR_BYTES"], cycles=d["CYCLES"],
                                   engine_busy=d["ENGINE_BUSY"] + d["REDUCE_BUSY"] + d["VEC_BUSY"],
                                   # DMA busy: either direction (DRAM_BUSY: an AXI transaction in flight)
                                   dma_busy=max(d["DMA_IN_BUSY"], d["DMA_OUT_BUSY"], d["DRAM_BUSY"]),
                                   compute_cycles=self.compute_cycles, vector_cycles=self.vector_cycles)
            for k, v in terms.items():
                setattr(self.stats, k, v)
        return False
