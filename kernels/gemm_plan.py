"""The GEMM planner: tile groups and K chunk of an ``m x n x k`` int8 (or FP) GEMM on a chip and
board, and the schedule model that predicts its cycles (docs/kernels.md).

Output-stationary: M and N are padded to the array; the output tiles are taken in groups of
``ga x gb`` tiles whose accumulators all fit in the accumulator SRAM; K is cut into chunks of
``kc`` steps so that ``ga`` A panels and ``gb`` B panels fit an operand buffer. The tile-language
GEMMs (kernels/tiled/gemm.py, kernels/tiled/gemm_fp.py) choose their tiling with :func:`plan_gemm`,
and the bring-up performance stage judges a GEMM's cycles against :meth:`GemmPlan.predicted_cycles`
and :meth:`GemmPlan.dma_cycles`.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

from rtl.config import ChipConfig

from .roofline import drain_cycles

__all__ = ["GemmPlan", "tail_lead", "plan_gemm", "plan_traffic", "SPACER_K", "MAX_K_FIELD"]

MAX_K_FIELD = 0xFFFF
# FL-ME-002's spacer: a MATMUL of this many steps (not 1: FL-ME-001) on zero B words, placed so
# that the word after its A range is the next tile row's first A word (docs/kernels.md).
SPACER_K = 2
# Host cost weights for the planner (seconds); measured orders of magnitude on Verilator.
_HOST_S_PER_WORD = 3e-6
_HOST_S_PER_CMD = 3e-6
_HOST_S_PER_WAIT = 3e-4
_SIM_S_PER_CYCLE = 1e-6
# The share of the DRAM roof a streaming DMA reaches (measured: M=4, N=K=512 runs at 0.94 of it):
# the planner prefers a plan with less traffic over one that would only just fit under the roof.
_DMA_EFFICIENCY = 0.9


def tail_lead(na: int, nb: int, load_bytes: float, step: int, bytes_per_cycle: float) -> int:
    """Rows of a group's second-to-last chunk that run before its last chunk's rows join in
    (the tile compiler interleaves the two, kernels/tile/compiler.py _interleave_tails): the last chunk's first row runs after ``lead + 1`` rows of
    MATMULs, which cover its ``load_bytes`` at the DRAM's rate. Measured on 256^3: one row more
    or fewer, or counting the DRAM latency too, is slower."""
    return max(0, min(na, math.ceil(load_bytes / bytes_per_cycle / (nb * step)) - 1))


@dataclass(frozen=True)
class GemmPlan:
    m: int
    n: int
    k: int
    tm: int  # tiles along M
    tn: int
    ga: int  # A panels (tile rows) per group
    gb: int
    kc: int  # K steps per chunk
    nbuf: int = 2  # operand buffers: 2 = DMA of the next chunk overlaps the MATMULs of this one
    # FL-ME-002: what parts the tile rows of a chunk (an A-panel change): "fence" (a FENCE, an
    # engine drain) or "spacer" (a 2-step MATMUL on zero B words; int8 only), "" for none
    row_gap: str = ""

    @property
    def chunks(self) -> int:
        return math.ceil(self.k / self.kc)

    @property
    def groups(self) -> int:
        return math.ceil(self.tm / self.ga) * math.ceil(self.tn / self.gb)

    @property
    def row_gaps(self) -> int:
        """FENCEs or spacers the stream puts between MATMULs: one per tile row of every chunk (a
        spacer not before the first: no MATMUL precedes it)."""
        rows = self.chunks * self.tm * math.ceil(self.tn / self.gb)
        return {"": 0, "fence": rows, "spacer": rows - 1}[self.row_gap]

    def gap_cycles(self, config: ChipConfig) -> int:
        """Cycles one row gap costs the engine: a FENCE drains it, a spacer holds the feed for
        its slot (``max(SPACER_K, min_matmul_cycles)``: 4 on 4x4 against a 12-cycle drain)."""
        return {"": 0, "fence": drain_cycles(config),
                "spacer": max(SPACER_K, config.min_matmul_cycles)}[self.row_gap]

    def predicted_cycles(self, config: ChipConfig) -> int:
        """Schedule model: feed occupancy of every MATMUL plus one drain per wait, plus the row gaps."""
        full, last = divmod(self.k, self.kc)
        per_tile = full * max(self.kc, config.min_matmul_cycles)
        if last:
            per_tile += max(last, config.min_matmul_cycles)
        return (self.tm * self.tn * per_tile + self.groups * self.chunks * drain_cycles(config)
                + self.row_gaps * self.gap_cycles(config))

    def dma_cycles(self, config: ChipConfig, bytes_per_cycle: float, latency: int = 32) -> float:
        """Schedule model of the DMA-fed GEMM stream, per group:

        * double-buffered: the slower of the group's MATMULs and its DRAM traffic, plus the part
          of its C stores that their window cannot hide. The window opens when the first tile row
          is complete (``tail_lead`` + 2 rows into the second-to-last chunk, with two or more
          chunks; a row into the last one with one) and ends with the next group's first chunk;
          the stores share it with two chunks of loads. For the last group it ends with its own
          last chunk;
        * single-buffered: every chunk's load, then its MATMULs, plus the same exposed stores.
        """
        R, C = config.rows, config.cols
        bw = bytes_per_cycle * _DMA_EFFICIENCY
        rows = [min(self.ga, self.tm - gi) for gi in range(0, self.tm, self.ga)]
        cols = [min(self.gb, self.tn - gj) for gj in range(0, self.tn, self.gb)]
        kinds: dict = {}  # group shape -> how many (at most four shapes: full and edge groups)
        for na in rows:
            for nb in cols:
                kinds[(na, nb)] = kinds.get((na, nb), 0) + 1
        last_shape = (rows[-1], cols[-1])
        step = max(min(self.kc, self.k), config.min_matmul_cycles)
        total = 0.0
        for (na, nb), count in kinds.items():
            tiles = na * nb
            chunk = tiles * step + (na * self.gap_cycles(config) if self.row_gap else 0)  # MATMUL cycles of one chunk
            compute = chunk * self.chunks
            chunk_load = (na * R + nb * C) * min(self.kc, self.k)
            stores = tiles * R * C * 4
            for last, n in ((False, count - ((na, nb) == last_shape)), (True, int((na, nb) == last_shape))):
                if not n:
                    continue
                if self.nbuf == 2:
                    busy = max(compute, (chunk_load * self.chunks + stores) / bw)
                    row = nb * step
                    if self.chunks >= 2:
                        tail = 2 * chunk - (tail_lead(na, nb, chunk_load, step, bytes_per_cycle) + 1) * row
                    else:
                        tail = chunk - row
                    window, demand = (tail, stores) if last else (tail + chunk, stores + 2 * chunk_load)
                else:
                    busy = self.chunks * (chunk_load / bw + latency + chunk)
                    window, demand = chunk, stores
                total += n * (busy + max(0.0, demand / bw - window))
        return total

    def host_words(self) -> int:
        words = 0
        for gi in range(0, self.tm, self.ga):
            for gj in range(0, self.tn, self.gb):
                words += (min(self.ga, self.tm - gi) + min(self.gb, self.tn - gj)) * self.k
        return words

    def as_dict(self) -> dict:
        return asdict(self)


def _chunk(k: int, cap: int, k_chunk: int | None, avoid_unit_chunk: bool, block: int = 1) -> int:
    """K steps per chunk: at most ``cap`` (and ``k_chunk``), a multiple of ``block`` unless it is
    all of K; with ``avoid_unit_chunk`` no chunk after the first has a single step (FL-ME-001)."""
    kc = min(k, cap, MAX_K_FIELD, k_chunk or k)
    if kc < k and block > 1:
        kc -= kc % block
        if kc == 0:
            raise ValueError(f"no room for one {block}-step block (capacity {cap}, k_chunk {k_chunk})")
    if kc < k and not k_chunk:  # the same number of chunks, as even as the block allows: no short last
        # chunk (a k_chunk the caller gives is kept as it is: the errata cells rely on its exact cut)
        n = math.ceil(k / kc)
        even = math.ceil(k / n)
        if block > 1:
            even = min(kc, math.ceil(even / block) * block)
        kc = even
    if avoid_unit_chunk and k > 1:
        while kc > 1 and k % kc == 1:
            kc -= 1
        if kc == 1:
            raise ValueError(f"K={k} cannot be cut into chunks of at most {min(cap, k_chunk or k)} steps "
                             "without a single-step chunk (erratum FL-ME-001); raise k_chunk")
    return kc


def plan_gemm(config: ChipConfig, m: int, n: int, k: int, *, operand_words: int | None = None,
              b_words: int | None = None,
              acc_words: int | None = None, k_chunk: int | None = None,
              avoid_unit_chunk: bool = False, a_panel_extra: int = 0, block: int = 1,
              bytes_per_cycle: float | None = None, nbuf: int = 2, a_words: int | None = None,
              row_gap: str | None = None) -> GemmPlan:
    """Choose group sizes and the K chunk for an ``m x n x k`` GEMM on ``config``.

    ``operand_words`` (A and B), ``a_words`` (A only), ``b_words`` (B only) and ``acc_words`` limit
    the SRAM words the plan may use (errata, fused kernels); ``k_chunk`` caps the K steps per MATMUL
    (a tuning knob); ``a_panel_extra`` words are reserved after every A panel and ``row_gap`` parts
    the tile rows (FL-ME-002; default: "fence" with a panel extra, else none).
    """
    if row_gap is None:
        row_gap = "fence" if a_panel_extra else ""
    if row_gap not in ("", "fence", "spacer"):
        raise ValueError(f"row_gap must be '', 'fence' or 'spacer', got {row_gap!r}")
    for name, v in (("m", m), ("n", n), ("k", k)):
        if not isinstance(v, (int, np.integer)) or v < 1:
            raise ValueError(f"{name} must be a positive integer, got {v!r}")
    if k_chunk is not None and (not isinstance(k_chunk, (int, np.integer)) or k_chunk < 1):
        raise ValueError(f"k_chunk must be a positive integer, got {k_chunk!r}")
    op_words = config.operand_depth if operand_words is None else operand_words
    bw = op_words if b_words is None else min(op_words, b_words)
    aw = op_words if a_words is None else min(op_words, a_words)
    tm, tn = math.ceil(m / config.rows), math.ceil(n / config.cols)
    max_tiles = (config.acc_depth if acc_words is None else acc_words) // config.rows
    if max_tiles < 1:
        raise ValueError(f"acc_words={acc_words} cannot hold one {config.rows}-row C tile")
    best, best_cost, last_error = None, (math.inf,), None
    for ga in range(1, tm + 1):
        gb_max = min(tn, max_tiles // ga)
        if gb_max < 1:
            break
        for gb in {1, gb_max, min(tn, ga), min(gb_max, max(1, ga))}:
            if gb < 1 or ga * gb > max_tiles:
                continue
            cap = min(aw // ga - a_panel_extra, bw // gb)
            if cap < 1:
                continue
            try:
                kc = _chunk(k, cap, k_chunk, avoid_unit_chunk, block)
            except ValueError as e:
                last_error = e
                continue
            plan = GemmPlan(m, n, k, tm, tn, ga, gb, kc, nbuf, row_gap=row_gap)
            cmds = tm * tn * plan.chunks
            waits = plan.groups * plan.chunks
            if bytes_per_cycle:  # operands arrive by DMA: the slower of compute and DRAM traffic
                cycles = max(plan.predicted_cycles(config), plan.dma_cycles(config, bytes_per_cycle))
                # The chip's cycles decide (a kernel is judged by them, as on silicon); the host's
                # cost per command only breaks ties. Weighing it against cycles had A0 pick 13x13
                # tile groups over 16x16 at 256^3, 0.5% slower on the chip for 8,192 fewer commands.
                cost = (round(cycles), cmds)
            else:
                cost = (plan.host_words() * _HOST_S_PER_WORD + cmds * _HOST_S_PER_CMD + waits * _HOST_S_PER_WAIT
                        + plan.predicted_cycles(config) * _SIM_S_PER_CYCLE,)
            if cost < best_cost:
                best, best_cost = plan, cost
    if best is None:
        raise last_error or ValueError(f"no GEMM plan fits operand_words={op_words}, acc_words={acc_words}")
    return best


def plan_traffic(cfg: ChipConfig, plan: GemmPlan) -> int:
    """DRAM bytes a plan moves: A once per group column, B once per group row, C once."""
    R, C = cfg.rows, cfg.cols
    col_groups, row_groups = math.ceil(plan.tn / plan.gb), math.ceil(plan.tm / plan.ga)
    return (plan.tm * R * plan.k * col_groups + plan.tn * C * plan.k * row_groups + plan.tm * plan.tn * R * C * 4)
