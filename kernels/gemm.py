"""Tiled int8 GEMM on the systolic engine: C (int32) = A (int8, MxK) @ B (int8, KxN).

Schedule (output-stationary, see docs/kernels.md): M and N are padded to the array; the
output tiles are taken in groups of ``ga x gb`` tiles whose accumulators all fit in the
accumulator SRAM; K is cut into chunks of ``kc`` steps so that ``ga`` A panels and ``gb`` B panels
fit the operand SRAMs. For each group and chunk the kernel loads the panels (backdoor), queues
one MATMUL per tile (accumulating after the first chunk) and moves on without waiting; it waits
only before it must overwrite operands, and reads a group's C back once all chunks are done.
The plan is chosen to minimise an estimate of host work plus simulated cycles.

:func:`run_tile_groups` is that loop, written once: the int8 GEMM, the fused GEMM + reduction
and the FP/MX GEMM all drive it (the latter two through its hooks and its ``fp`` argument).
Errata reach the planner and the driver only as :class:`workarounds.GemmConstraints`.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Awaitable, Callable

import numpy as np

from rtl.config import ChipConfig
from rtl.isa import BLOCK, Format, fence, matmul
from rtl.memories import Region
from workarounds import GemmConstraints, Mitigations, Unit

from .layout import pack_a_panels, pack_b_panels, words_to_int32
from .roofline import drain_cycles, ideal_cycles
from .stats import KernelStats, Measure
from .validate import check_matrix

if TYPE_CHECKING:  # the protocol of the device surface a kernel uses
    from cosim.device import KernelDevice

__all__ = ["GemmPlan", "plan_gemm", "plan_for", "gemm", "prepare_operands", "run_tile_groups",
           "check_gemm_operands", "new_host_counts", "read_group", "GEMM_UNITS"]

MAX_K_FIELD = 0xFFFF
GEMM_UNITS = (Unit.ENGINE, Unit.SRAM, Unit.CMDPROC)  # the units a GEMM's errata can live in
_FENCE = fence()
# Host cost weights for the planner (seconds); measured orders of magnitude on Verilator.
_HOST_S_PER_WORD = 3e-6
_HOST_S_PER_CMD = 3e-6
_HOST_S_PER_WAIT = 3e-4
_SIM_S_PER_CYCLE = 1e-6


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

    @property
    def chunks(self) -> int:
        return math.ceil(self.k / self.kc)

    @property
    def groups(self) -> int:
        return math.ceil(self.tm / self.ga) * math.ceil(self.tn / self.gb)

    def predicted_cycles(self, config: ChipConfig) -> int:
        """Schedule model: feed occupancy of every MATMUL plus one drain per wait."""
        full, last = divmod(self.k, self.kc)
        per_tile = full * max(self.kc, config.min_matmul_cycles)
        if last:
            per_tile += max(last, config.min_matmul_cycles)
        return self.tm * self.tn * per_tile + self.groups * self.chunks * drain_cycles(config)

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
              avoid_unit_chunk: bool = False, a_panel_extra: int = 0, block: int = 1) -> GemmPlan:
    """Choose group sizes and the K chunk for an ``m x n x k`` GEMM on ``config``.

    ``operand_words`` (A and B), ``b_words`` (B only) and ``acc_words`` limit the SRAM words the
    plan may use (errata, fused kernels); ``k_chunk`` caps the K steps per MATMUL (a tuning knob); ``a_panel_extra`` words
    are reserved after every A panel (FL-ME-002).
    """
    for name, v in (("m", m), ("n", n), ("k", k)):
        if not isinstance(v, (int, np.integer)) or v < 1:
            raise ValueError(f"{name} must be a positive integer, got {v!r}")
    if k_chunk is not None and (not isinstance(k_chunk, (int, np.integer)) or k_chunk < 1):
        raise ValueError(f"k_chunk must be a positive integer, got {k_chunk!r}")
    op_words = config.operand_depth if operand_words is None else operand_words
    bw = op_words if b_words is None else min(op_words, b_words)
    tm, tn = math.ceil(m / config.rows), math.ceil(n / config.cols)
    max_tiles = (config.acc_depth if acc_words is None else acc_words) // config.rows
    if max_tiles < 1:
        raise ValueError(f"acc_words={acc_words} cannot hold one {config.rows}-row C tile")
    best, best_cost, last_error = None, math.inf, None
    for ga in range(1, tm + 1):
        gb_max = min(tn, max_tiles // ga)
        if gb_max < 1:
            break
        for gb in {1, gb_max, min(tn, ga), min(gb_max, max(1, ga))}:
            if gb < 1 or ga * gb > max_tiles:
                continue
            cap = min(op_words // ga - a_panel_extra, bw // gb)
            if cap < 1:
                continue
            try:
                kc = _chunk(k, cap, k_chunk, avoid_unit_chunk, block)
            except ValueError as e:
                last_error = e
                continue
            plan = GemmPlan(m, n, k, tm, tn, ga, gb, kc)
            cmds = tm * tn * plan.chunks
            waits = plan.groups * plan.chunks
            cost = (plan.host_words() * _HOST_S_PER_WORD + cmds * _HOST_S_PER_CMD + waits * _HOST_S_PER_WAIT
                    + plan.predicted_cycles(config) * _SIM_S_PER_CYCLE)
            if cost < best_cost:
                best, best_cost = plan, cost
    if best is None:
        raise last_error or ValueError(f"no GEMM plan fits operand_words={op_words}, acc_words={acc_words}")
    return best


def plan_for(config: ChipConfig, constraints: GemmConstraints, m: int, n: int, k: int, *,
             acc_words: int | None = None, k_chunk: int | None = None, block: int = 1) -> GemmPlan:
    """Plan under the constraints the active mitigations set (workarounds.GemmConstraints)."""
    return plan_gemm(
        config, m, n, k,
        b_words=config.operand_depth - constraints.b_reserved_top_words,
        acc_words=acc_words, k_chunk=k_chunk, avoid_unit_chunk=constraints.avoid_unit_chunk,
        a_panel_extra=1 if constraints.repeat_first_a_word else 0, block=block,
    )


def prepare_operands(a, b, cfg: ChipConfig, plan: GemmPlan):
    """Pad to the array and transform into operand-SRAM words: (A words (TM, K), B words (TN, K))."""
    m, k = a.shape
    n = b.shape[1]
    a_pad = np.zeros((plan.tm * cfg.rows, k), np.int8)
    a_pad[:m] = a
    b_pad = np.zeros((k, plan.tn * cfg.cols), np.int8)
    b_pad[:, :n] = b
    return pack_a_panels(a_pad, cfg.rows), pack_b_panels(b_pad, cfg.cols)


async def _queue_group(dev, plan: GemmPlan, a_words, b_words, gi: int, gj: int, host: dict, budget,
                       constraints: GemmConstraints, fp: tuple | None = None) -> tuple[int, int]:
    """Load and queue every K chunk of one tile group; returns (tiles along M, along N).

    The group's C tile (p, q) lands at accumulator word ``(p * nb + q) * ROWS``. The last
    chunk's MATMULs are queued but not waited for. ``fp = (format, sa_words (TM, blocks),
    sb_words (TN, blocks))`` runs the FP path with block scales (docs/numerics.md).
    """
    R = dev.config.rows
    k = plan.k
    na = min(plan.ga, plan.tm - gi)
    nb = min(plan.gb, plan.tn - gj)
    # repeat_first_a_word (FL-ME-002: a MATMUL right behind another reads its first A word at
    # the previous base + K): each A panel gets a copy of its first word at base + K, so
    # back-to-back MATMULs on the same panel read the right value; a FENCE only where it changes.
    stale_a = constraints.repeat_first_a_word
    stride = plan.kc + 1 if stale_a else plan.kc
    for ci, k0 in enumerate(range(0, k, plan.kc)):
        kc = min(plan.kc, k - k0)
        await dev.wait_idle(budget)  # operands are about to be overwritten
        host["waits"] += 1
        for p in range(na):
            panel = a_words[gi + p, k0:k0 + kc].tolist()
            if stale_a:
                panel.append(panel[0])
            host["words_loaded"] += dev.load_words(Region.A, p * stride, panel)
        for q in range(nb):
            host["words_loaded"] += dev.load_words(Region.B, q * plan.kc, b_words[gj + q, k0:k0 + kc].tolist())
        spp = -(-plan.kc // BLOCK)  # scale words per panel chunk
        fmt = Format.INT8
        if fp is not None:
            fmt, sa_words, sb_words = fp
            b0, nblk = k0 // BLOCK, -(-kc // BLOCK)
            for p in range(na):
                dev.load_words(Region.SA, p * spp, sa_words[gi + p, b0:b0 + nblk].tolist())
            for q in range(nb):
                dev.load_words(Region.SB, q * spp, sb_words[gj + q, b0:b0 + nblk].tolist())
        cmds = []
        for p in range(na):
            if stale_a and p:
                cmds.append(_FENCE)
            for q in range(nb):
                scales = {"sa": p * spp, "sb": q * spp} if fp is not None else {}
                cmds.append(matmul(a=p * stride, b=q * plan.kc, c=(p * nb + q) * R, k=kc, accumulate=ci > 0,
                                   fmt=fmt, **scales))
        host["commands"] += len(cmds)
        await dev.submit(cmds, budget)
    return na, nb


def read_group(dev, out: np.ndarray, gi: int, gj: int, na: int, nb: int) -> None:
    """Copy a group's C tiles from the accumulator SRAM into ``out`` (int32, or uint32 fp32 bits)."""
    R, C = dev.config.rows, dev.config.cols
    words = dev.read_words(Region.ACC, 0, na * nb * R)
    tiles = words_to_int32(words, C).view(out.dtype).reshape(na, nb, R, C)
    out[gi * R:(gi + na) * R, gj * C:(gj + nb) * C] = tiles.transpose(0, 2, 1, 3).reshape(na * R, nb * C)


def check_gemm_operands(a, b):
    a = check_matrix("a", a, (np.int8,), "int8 activations, shape (M, K)")
    b = check_matrix("b", b, (np.int8,), "int8 weights, shape (K, N)")
    if a.shape[1] != b.shape[0]:
        raise ValueError(f"inner dimensions differ: a is {a.shape}, b is {b.shape}; need a (M, K) and b (K, N)")
    return a, b


GroupHook = Callable[[int, int, int, int], Awaitable[None]]


async def run_tile_groups(dev, plan: GemmPlan, a_words, b_words, out: np.ndarray, *, constraints: GemmConstraints,
                          host: dict, budget: int | None = None, fp: tuple | None = None,
                          after_queue: GroupHook | None = None, after_read: GroupHook | None = None) -> None:
    """The tile-group loop every GEMM-shaped kernel runs: per group, load and queue every K chunk,
    wait once, read the group's C tiles into ``out``.

    ``after_queue(gi, gj, na, nb)`` runs right after a group's MATMULs are queued (a fused
    kernel queues its own commands behind them, with no wait in between); ``after_read`` runs
    once the group's C is back in ``out``.
    """
    for gi in range(0, plan.tm, plan.ga):
        for gj in range(0, plan.tn, plan.gb):
            na, nb = await _queue_group(dev, plan, a_words, b_words, gi, gj, host, budget, constraints, fp)
            if after_queue is not None:
                await after_queue(gi, gj, na, nb)
            await dev.wait_idle(budget)
            host["waits"] += 1
            read_group(dev, out, gi, gj, na, nb)
            if after_read is not None:
                await after_read(gi, gj, na, nb)


def new_host_counts() -> dict:
    return {"words_loaded": 0, "commands": 0, "waits": 0}


async def gemm(dev: KernelDevice, a: np.ndarray, b: np.ndarray, *, mitigations: Mitigations, k_chunk: int | None = None,
               budget_cycles: int | None = None) -> tuple[np.ndarray, KernelStats]:
    """Run ``a @ b`` on the chip. Returns ``(c, stats)``; c is int32 with wrap-around.

    ``mitigations`` comes from ``workarounds.attach(dev, policy)``; ``k_chunk`` caps the K steps
    per MATMUL (default: as many as the operand SRAMs hold).
    """
    a, b = check_gemm_operands(a, b)
    cfg: ChipConfig = dev.config
    m, k = a.shape
    n = b.shape[1]
    plan = plan_for(cfg, mitigations.gemm, m, n, k, k_chunk=k_chunk)
    a_words, b_words = prepare_operands(a, b, cfg, plan)
    out = np.zeros((plan.tm * cfg.rows, plan.tn * cfg.cols), np.int32)
    host = new_host_counts()
    extra = {"shape": [m, n, k], "useful_macs": m * n * k, "plan": plan.as_dict(),
             "predicted_cycles": plan.predicted_cycles(cfg), "host": host}
    async with Measure(dev, "gemm", ideal_cycles(cfg, m * n * k), extra) as meas:
        await run_tile_groups(dev, plan, a_words, b_words, out, constraints=mitigations.gemm, host=host,
                              budget=budget_cycles)
        await dev.check_no_error()
    meas.stats.add_errata(mitigations.report(GEMM_UNITS))
    return out[:m, :n].copy(), meas.stats
