"""Tiled int8 GEMM on the systolic engine: C (int32) = A (int8, MxK) @ B (int8, KxN).

Schedule (output-stationary, see docs/kernels.md): M and N are padded to the array; the
output tiles are taken in groups of ``ga x gb`` tiles whose accumulators all fit in the
accumulator SRAM; K is cut into chunks of ``kc`` steps so that ``ga`` A panels and ``gb`` B panels
fit the operand SRAMs. For each group and chunk the kernel loads the panels (backdoor), queues
one MATMUL per tile (accumulating after the first chunk) and moves on without waiting; it waits
only before it must overwrite operands, and reads a group's C back once all chunks are done.
The plan is chosen to minimise an estimate of host work plus simulated cycles.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

from rtl.config import ChipConfig
from rtl.csr_map import MemRegion
from rtl.isa import MATMUL_FLAG_ACCUMULATE, Opcode, pack_command

from .layout import pack_a_panels, pack_b_panels, words_to_int32
from .roofline import drain_cycles, ideal_cycles
from .stats import Measure
from .validate import check_matrix

__all__ = ["GemmPlan", "plan_gemm", "gemm"]

MAX_K_FIELD = 0xFFFF
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


def plan_gemm(config: ChipConfig, m: int, n: int, k: int) -> GemmPlan:
    """Choose group sizes and the K chunk for an ``m x n x k`` GEMM on ``config``."""
    for name, v in (("m", m), ("n", n), ("k", k)):
        if not isinstance(v, (int, np.integer)) or v < 1:
            raise ValueError(f"{name} must be a positive integer, got {v!r}")
    tm, tn = math.ceil(m / config.rows), math.ceil(n / config.cols)
    max_tiles = config.acc_depth // config.rows
    best, best_cost = None, math.inf
    for ga in range(1, tm + 1):
        gb_max = min(tn, max_tiles // ga)
        if gb_max < 1:
            break
        for gb in {1, gb_max, min(tn, ga), min(gb_max, max(1, ga))}:
            if gb < 1 or ga * gb > max_tiles:
                continue
            kc = min(k, config.operand_depth // max(ga, gb), MAX_K_FIELD)
            if kc < 1:
                continue
            plan = GemmPlan(m, n, k, tm, tn, ga, gb, kc)
            cmds = tm * tn * plan.chunks
            waits = plan.groups * plan.chunks
            cost = (plan.host_words() * _HOST_S_PER_WORD + cmds * _HOST_S_PER_CMD + waits * _HOST_S_PER_WAIT
                    + plan.predicted_cycles(config) * _SIM_S_PER_CYCLE)
            if cost < best_cost:
                best, best_cost = plan, cost
    assert best is not None
    return best


async def gemm(dev, a: np.ndarray, b: np.ndarray, *, budget_cycles: int | None = None) -> tuple[np.ndarray, dict]:
    """Run ``a @ b`` on the chip. Returns ``(c, stats)``; c is int32 with wrap-around."""
    a = check_matrix("a", a, (np.int8,), "int8 activations, shape (M, K)")
    b = check_matrix("b", b, (np.int8,), "int8 weights, shape (K, N)")
    if a.shape[1] != b.shape[0]:
        raise ValueError(f"inner dimensions differ: a is {a.shape}, b is {b.shape}; need a (M, K) and b (K, N)")
    cfg: ChipConfig = dev.config
    m, k = a.shape
    n = b.shape[1]
    plan = plan_gemm(cfg, m, n, k)
    R, C = cfg.rows, cfg.cols
    a_pad = np.zeros((plan.tm * R, k), np.int8)
    a_pad[:m] = a
    b_pad = np.zeros((k, plan.tn * C), np.int8)
    b_pad[:, :n] = b
    a_words = pack_a_panels(a_pad, R)  # (TM, K)
    b_words = pack_b_panels(b_pad, C)  # (TN, K)
    out = np.zeros((plan.tm * R, plan.tn * C), np.int32)

    host = {"words_loaded": 0, "commands": 0, "waits": 0}
    async with Measure(dev, "gemm", ideal_cycles(cfg, m * n * k), {"shape": [m, n, k], "useful_macs": m * n * k, "plan": plan.as_dict(),
                                               "predicted_cycles": plan.predicted_cycles(cfg),
                                               "host": host}) as meas:
        for gi in range(0, plan.tm, plan.ga):
            na = min(plan.ga, plan.tm - gi)
            for gj in range(0, plan.tn, plan.gb):
                nb = min(plan.gb, plan.tn - gj)
                for ci, k0 in enumerate(range(0, k, plan.kc)):
                    kc = min(plan.kc, k - k0)
                    await dev.wait_idle(budget_cycles)  # operands are about to be overwritten
                    host["waits"] += 1
                    for p in range(na):
                        host["words_loaded"] += dev.load_words(MemRegion.A, p * plan.kc, a_words[gi + p, k0:k0 + kc].tolist())
                    for q in range(nb):
                        host["words_loaded"] += dev.load_words(MemRegion.B, q * plan.kc, b_words[gj + q, k0:k0 + kc].tolist())
                    flags = MATMUL_FLAG_ACCUMULATE if ci else 0
                    cmds = [
                        pack_command(Opcode.MATMUL, flags=flags, length=kc, arg0=p * plan.kc, arg1=q * plan.kc,
                                     arg2=(p * nb + q) * R)
                        for p in range(na)
                        for q in range(nb)
                    ]
                    host["commands"] += len(cmds)
                    await dev.submit(cmds, budget_cycles)
                await dev.wait_idle(budget_cycles)
                host["waits"] += 1
                words = dev.read_words(MemRegion.ACC, 0, na * nb * R)
                tiles = words_to_int32(words, C).reshape(na, nb, R, C)
                out[gi * R:(gi + na) * R, gj * C:(gj + nb) * C] = tiles.transpose(0, 2, 1, 3).reshape(na * R, nb * C)
        await dev.check_no_error()
    return out[:m, :n].copy(), meas.stats
