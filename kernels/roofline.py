"""The roofline over three roofs, and which one binds a problem.

* Compute roof: ``ROWS * COLS`` int8 MACs per cycle (``ideal_cycles``); a reduction kernel's
  own unit instead (one accumulator word per cycle).
* Vector roof: the element passes of the vector unit and the reduction unit, one accumulator
  word (LANES elements) per cycle, the two taking turns (they issue only when both are idle):
  the words the kernel's algorithm streams through them, as its commands say.
* Memory roof: the board's sustained DRAM bytes per cycle (``BoardConfig.bytes_per_cycle``)
  times the arithmetic intensity.

For one problem on one chip, ``attainable_cycles`` = max(compute, vector, memory): the limit of
*this problem*, where the compulsory bytes read each operand once and write each result once, so
a kernel that moves more than it must is not excused by its own traffic. ``bound`` names the
largest term ("compute", "vector" or "memory"). The *schedule* model of the
GEMM planner adds what the hardware structurally costs (a MATMUL occupies the feed
``max(K, ROWS, COLS)`` cycles; a wait for idle drains the array, ``engine_drain_cycles``).
"""

from __future__ import annotations

import math

from rtl.board import BoardConfig
from rtl.config import ChipConfig
from rtl.isa import Opcode, decode, feed_cycles

__all__ = ["ideal_cycles", "utilization", "drain_cycles", "memory_cycles", "roofline_terms", "units_busy_cycles"]


def ideal_cycles(config: ChipConfig, macs: int) -> int:
    """Cycles at peak compute: useful MACs / (ROWS * COLS), rounded up."""
    return math.ceil(macs / config.peak_macs_per_cycle)


def memory_cycles(board: BoardConfig, nbytes: int) -> int:
    """Cycles to move ``nbytes`` at the DRAM's sustained bandwidth, rounded up."""
    return math.ceil(nbytes * board.period / (board.beats * board.bus_bytes))


def drain_cycles(config: ChipConfig) -> int:
    return config.engine_drain_cycles


def utilization(ideal: int, measured: int) -> float:
    return ideal / measured if measured else 0.0


def roofline_terms(config: ChipConfig, board: BoardConfig, *, useful_macs: int, compulsory_bytes: int,
                   moved_bytes: int, cycles: int, engine_busy: int, dma_busy: int,
                   compute_cycles: int | None = None, vector_cycles: int | None = None) -> dict:
    """The roofline keys every kernel's stats carry (the names scripts read from ``run --json``).

    ``compute_cycles`` overrides the compute roof for a kernel whose unit is not the matrix
    engine (a reduction: one accumulator word per cycle); ``useful_macs`` then counts its
    useful operations (elements reduced), for the intensity. ``vector_cycles`` is the vector roof
    (0 for a kernel that does not use the vector unit)."""
    compute = ideal_cycles(config, useful_macs) if compute_cycles is None else compute_cycles
    vector = vector_cycles or 0
    memory = memory_cycles(board, compulsory_bytes)
    roofs = {"compute": compute, "vector": vector, "memory": memory}
    bound = max(roofs, key=lambda k: (roofs[k], -list(roofs).index(k)))  # a tie goes to the earlier roof
    attainable = roofs[bound]
    busiest = max(engine_busy, dma_busy)
    return {
        "dram_bytes": moved_bytes,
        "compulsory_bytes": compulsory_bytes,
        "intensity": useful_macs / moved_bytes if moved_bytes else math.inf,
        "compute_cycles": compute,
        "vector_cycles": vector,
        "memory_cycles": memory,
        "attainable_cycles": attainable,
        "bound": bound,
        "roof_utilization": attainable / cycles if cycles else 0.0,
        "overlap": cycles / busiest if busiest else 0.0,
        "ridge_point": board.ridge_point(config),
        "dram_bytes_per_cycle": board.bytes_per_cycle,
    }


# The roofline keys of ``run --json`` (top level) and of every kernel's stats.
ROOFLINE_KEYS = ("dram_bytes", "compulsory_bytes", "intensity", "attainable_cycles", "bound", "roof_utilization",
                 "overlap")


def explain(st: dict) -> str:
    """One sentence: which roof binds, how close the kernel came, and where the rest went."""
    bound, cycles, att = st["bound"], st["cycles"], st["attainable_cycles"]
    vec = f", vector roof {st['vector_cycles']:,}" if st.get("vector_cycles") else ""
    head = (f"{bound}-bound (compute roof {st['compute_cycles']:,} cycles{vec}, memory roof {st['memory_cycles']:,}): "
            f"{st['roof_utilization']:.0%} of the attainable {att:,} cycles")
    if cycles <= att * 1.02:
        return head + ", at the roof"
    why = []
    moved, comp = st["dram_bytes"], st["compulsory_bytes"]
    if comp and moved > 1.05 * comp:
        why.append(f"it moved {moved / comp:.2f}x the compulsory bytes (padding to the array, operands re-read "
                   f"once per tile group)")
    if st["overlap"] > 1.1:
        why.append(f"DMA and compute overlapped only in part (cycles = {st['overlap']:.2f}x the busiest unit)")
    fixed = st["dram"]["latency"] * 4 if st.get("dram") else 0
    if att < 50 * max(fixed, 1):
        why.append(f"a problem this small pays fixed costs (DRAM latency {st['dram']['latency']} cycles per "
                   f"dependent load, the array's fill and drain) that do not shrink with it")
    waits = st.get("wait_cycles") or {}
    if waits.get("stream"):
        why.append(f"the command stream waited {waits['stream']:,} cycles on semaphores")
    return head + ("; " + "; ".join(why) if why else "")


def units_busy_cycles(cfg, cmds: list[int]) -> int:
    """The reduction and vector units' busy cycles for ``cmds`` if nothing waited: a REDUCE of
    ``count`` words ``cfg.reduce_busy_cycles(count)``, a VEC ``count + 2`` (rtl/vector.py). The
    vector roof of a kernel (the two units run one at a time; kernels/roofline.py)."""
    total = 0
    for c in cmds:
        d = decode(c)
        if d["opcode"] == Opcode.REDUCE:
            total += cfg.reduce_busy_cycles(d["length"])
        elif d["opcode"] == Opcode.VEC:
            total += d["length"] + 2
    return total


def serial_cycles_bound(cfg, board, cmds: list[int]) -> int:
    """Cycles ``cmds`` would take if nothing overlapped: every MATMUL's feed (``isa.feed_cycles``)
    and drain, the reduction and vector units' busy cycles (:func:`units_busy_cycles`), every DMA's
    bytes (counted at the widest word, 4 x LANES bytes) at the board's bandwidth plus its latency,
    a cycle for anything else. An upper bound of a healthy run, so a watchdog budget scaled from it
    fires on a hung chip and never on a long kernel."""
    total = float(units_busy_cycles(cfg, cmds))
    word = 4 * cfg.lanes
    for c in cmds:
        feed = feed_cycles(c, cfg.min_matmul_cycles)
        if feed:
            total += feed + drain_cycles(cfg)
            continue
        d = decode(c)
        if d["opcode"] in (Opcode.DMA_LOAD, Opcode.DMA_STORE):
            total += d["length"] * max(1, d["arg1"]) * word / board.bytes_per_cycle + board.latency
        elif d["opcode"] not in (Opcode.REDUCE, Opcode.VEC):
            total += 1
    return math.ceil(total)
