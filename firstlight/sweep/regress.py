"""The regression matrix over revisions x simulators x seeds (``firstlight regress``), through the
sweep engine and database: one small chip per revision (int8 with the vector unit, 64-word
SRAMs), the first-light checklist and a kernel of each unit on it, once per seed and simulator."""

from __future__ import annotations

from .spec import Spec, default_name, parse_spec

__all__ = ["REGRESS_CHIP", "REGRESS_WORKLOADS", "regress_specs"]

REGRESS_CHIP = {"array": "4x4", "sram_depth": 64, "cmdq_depth": 64, "formats": "int8", "vector": True}
REGRESS_WORKLOADS = (
    {"kind": "bringup"},
    {"kind": "gemm", "m": 16, "n": 16, "k": 32},
    {"kind": "reduce", "rows": 8, "cols": 32, "op": "max"},
    {"kind": "softmax", "rows": 4, "cols": 16},
    {"kind": "layernorm", "rows": 4, "cols": 16},
    {"kind": "attention", "seq": 8, "dim": 8},
)


def regress_specs(revisions: list[str], sims: list[str], seeds: list[int], workloads=REGRESS_WORKLOADS) -> list[Spec]:
    """One spec per simulator: the revisions as the grid, each workload once per seed (named
    ``<workload>-seed<N>``)."""
    from .spec import workload_kinds

    tables = []
    for w in workloads:
        kind = workload_kinds()[w["kind"]]
        p = {**kind.optional, **{k: v for k, v in w.items() if k != "kind"}}
        for s in seeds:
            tables.append({**w, "seed": s, "name": f"{default_name(w['kind'], p)}-seed{s}"})
    return [parse_spec({"name": f"regress-{sim}", "sim": sim, "grid": {**REGRESS_CHIP, "revision": list(revisions)},
                        "workload": tables}) for sim in sims]
