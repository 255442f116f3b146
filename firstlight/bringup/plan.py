"""The stage ladder: names, order and dependencies (shared by the host and the simulator side)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Stage", "STAGES", "STAGE_NAMES", "STATUSES", "closure"]

# failed: the chip is wrong. error: the harness could not tell (simulator crash, failed build,
# corrupt cache, a bug in a stage). interrupted: SIGINT/SIGTERM arrived while it ran.
STATUSES = ("passed", "failed", "error", "interrupted", "blocked", "skipped")


@dataclass(frozen=True)
class Stage:
    name: str
    title: str
    depends_on: tuple[str, ...]


STAGES: tuple[Stage, ...] = (
    Stage("build", "elaborate + build", ()),
    Stage("reset", "reset values, no X on outputs", ("build",)),
    Stage("identity", "ID, REV, CAPS; errata set", ("reset",)),
    Stage("csr_bus", "CSR bus: walking ones/zeros, read-only registers", ("identity",)),
    Stage("memories", "SRAMs through the front door: data bus, address bus, address-in-address, March C-",
          ("csr_bus",)),
    Stage("command_path", "NOP, FENCE, DONE_COUNT, bad opcode and recovery", ("memories",)),
    Stage("engine_smoke", "identity and random MATMUL, reductions vs golden", ("command_path",)),
    Stage("errata", "every reproducer vs the registry", ("engine_smoke",)),
    Stage("kernels", "GEMM and reduction suite with mitigations", ("engine_smoke",)),
    Stage("performance", "perf counters consistent, utilisation vs roofline", ("kernels",)),
)
STAGE_NAMES = tuple(s.name for s in STAGES)
BY_NAME = {s.name: s for s in STAGES}


def closure(names) -> set[str]:
    """The named stages and everything they depend on."""
    out, todo = set(), list(names)
    while todo:
        n = todo.pop()
        if n not in BY_NAME:
            raise ValueError(f"unknown stage {n!r}; stages: {', '.join(STAGE_NAMES)}")
        if n not in out:
            out.add(n)
            todo.extend(BY_NAME[n].depends_on)
    return out
