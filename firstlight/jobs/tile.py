"""The job of every tile-language kernel (kernels/tile/spec.py): seeded inputs from its
declaration, the kernel on the chip, its golden bit for bit and its float64 reference (SQNR)."""

from __future__ import annotations

import numpy as np

import workarounds
from kernels.tile.ir import TileError
from kernels.tile.spec import get, run_spec

from .checks import first_mismatch
from .traced import traced as _traced

__all__ = ["tile_job", "tile_cases_job", "compare", "golden_mismatch", "shape_label"]


def golden_mismatch(spec, p: dict, ins: dict, outs: dict, lanes: int, plan: dict | None = None) -> dict | None:
    """The first output word that differs from the golden's bits (with its tensor), or None.
    ``plan``: what the kernel's ``kernel_args`` chose (KernelStats.plan), which the golden sees too."""
    want = spec.golden(ins, {**p, **{k: v for k, v in (plan or {}).items() if k in p}}, lanes)
    for name, w in want.items():
        m = first_mismatch(outs[name].view(np.uint32), np.ascontiguousarray(w).view(np.uint32))
        if m is not None:
            return {**m, "tensor": name}
    return None


def compare(spec, p: dict, ins: dict, outs: dict, lanes: int, plan: dict | None = None
            ) -> tuple[dict | None, float | None]:
    """(:func:`golden_mismatch`; SQNR in dB against the reference)."""
    from golden.metrics import sqnr_db

    mismatch = golden_mismatch(spec, p, ins, outs, lanes, plan)
    sq = None
    if spec.reference is not None:
        ref = spec.reference(ins, p)
        name = next(iter(ref))
        r, got = np.asarray(ref[name], np.float64), outs[name].astype(np.float64)
        ok = np.isfinite(r)
        sq = sqnr_db(r[ok], got[ok]) if ok.any() else None
    return mismatch, sq


def shape_label(kernel: str, p: dict) -> str:
    """How a table names one run of ``kernel`` with resolved ``p``: ``RxC`` (or its other shape
    parameters), then any parameter not at its default, so that two bench entries of one kernel
    never share a label."""
    spec = get(kernel)
    dims = [prm.name for prm in spec.params if prm.shape]
    parts = []
    if "rows" in dims and "cols" in dims:
        parts.append(f"{p['rows']}x{p['cols']}")
        dims = [d for d in dims if d not in ("rows", "cols")]
    parts += [f"{d}={p[d]}" for d in dims]
    parts += [f"{prm.name}={p[prm.name]}" for prm in spec.params if not prm.shape and p[prm.name] != prm.default]
    return " ".join(parts)


async def tile_job(dev, emit, kernel: str, params: dict, seed: int, extremes: bool = False,
                   errata_policy: dict | None = None, trace: bool = False) -> dict:
    spec = get(kernel)
    p = spec.resolve(params)
    mit = workarounds.attach(dev, errata_policy)
    ins = spec.inputs(p, seed, extremes)
    (outs, stats), events = await _traced(dev, trace, lambda: run_spec(dev, spec, p, ins, mitigations=mit))
    mismatch, sq = compare(spec, p, ins, outs, dev.config.lanes, stats.plan)
    return {"passed": mismatch is None, "mismatch": mismatch, "stats": stats.to_dict(), "trace": events,
            "sqnr_db": sq, "kernel": kernel, "params": p}


async def tile_cases_job(dev, emit, cases: list, seed: int, errata_policy: dict | None = None) -> list[dict]:
    """Several (kernel, params, extremes) in one simulator process, a result each."""
    out = []
    for kernel, params, extremes in cases:
        r = await tile_job(dev, emit, kernel, params, seed, extremes, errata_policy)
        out.append({k: r[k] for k in ("passed", "mismatch", "sqnr_db", "kernel", "params")}
                   | {"cycles": r["stats"]["cycles"], "roof_utilization": r["stats"].get("roof_utilization"),
                      "mitigations": r["stats"].get("mitigations", [])})
    return out

