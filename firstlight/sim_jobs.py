"""Jobs that run inside the simulator for the CLI: make data, run a kernel, check the golden.

Each job is ``async def job(dev, emit, **kwargs) -> dict`` (see :mod:`cosim.jobs`).
"""

from __future__ import annotations

import numpy as np

import golden
from kernels.gemm import gemm
from kernels.reduce import reduce_rows


def _int8(rng, shape, extremes: bool) -> np.ndarray:
    if extremes:
        return rng.choice(np.array([-128, 127, -1, 0, 1], np.int8), size=shape)
    return rng.integers(-128, 128, size=shape, dtype=np.int8)


def _first_mismatch(got: np.ndarray, ref: np.ndarray) -> dict | None:
    bad = np.argwhere(got != ref)
    if not len(bad):
        return None
    idx = tuple(int(i) for i in bad[0])
    return {"index": list(idx), "got": int(got[idx]), "expected": int(ref[idx]), "count": int(len(bad))}


async def gemm_job(dev, emit, m: int, n: int, k: int, seed: int, extremes: bool = False) -> dict:
    rng = np.random.default_rng(seed)
    a, b = _int8(rng, (m, k), extremes), _int8(rng, (k, n), extremes)
    c, stats = await gemm(dev, a, b)
    ref = golden.gemm_int8(a, b)
    mismatch = _first_mismatch(c, ref)
    return {"passed": mismatch is None, "mismatch": mismatch, "stats": stats}


async def reduce_job(dev, emit, rows: int, cols: int, op: str, seed: int, extremes: bool = False) -> dict:
    rng = np.random.default_rng(seed)
    if extremes:
        x = rng.choice(np.array([-(2**31), 2**31 - 1, -1, 0, 1], np.int32), size=(rows, cols))
    else:
        x = rng.integers(-(2**31), 2**31, size=(rows, cols), dtype=np.int64).astype(np.int32)
    got, stats = await reduce_rows(dev, x, op)
    ref = golden.reduce_rows(x, op)
    mismatch = _first_mismatch(got, ref)
    return {"passed": mismatch is None, "mismatch": mismatch, "stats": stats}


async def bench_job(dev, emit, shapes: list[list[int]], seed: int) -> dict:
    """Run several GEMMs in one simulator process, emitting a record per shape as it finishes."""
    out = []
    for m, n, k in shapes:
        r = await gemm_job(dev, emit, m, n, k, seed)
        rec = {"type": "bench", "shape": [m, n, k], **r}
        emit(rec)
        out.append(rec)
    return {"runs": len(out)}


# ---- errata --------------------------------------------------------------------------------

def poison_memories(dev) -> None:
    """Fill every data SRAM with a pattern, so a read of something not yet written shows."""
    from rtl.csr_map import MemRegion

    for region in (MemRegion.A, MemRegion.B, MemRegion.ACC):
        width = dev._mems[region].width
        pattern = int("5A" * (width // 8), 16)
        dev.load_words(region, 0, [pattern] * dev.mem_depth(region))


async def run_cell(dev, cell: dict | list, seed: int) -> dict:
    """Run the kernel(s) an erratum record names as meeting its conditions; check vs golden.

    A list of runs passes only if every run does (conditions that differ per revision).
    """
    if isinstance(cell, list):
        results = [await run_cell(dev, c, seed) for c in cell]
        bad = [r for r in results if not r["passed"]]
        return {"passed": not bad, "mismatch": bad[0]["mismatch"] if bad else None,
                "cycles": sum(r["cycles"] or 0 for r in results),
                "mitigations": sorted({m for r in results for m in r["mitigations"]})}
    from kernels.fused import gemm_sum

    await dev.wait_idle()
    poison_memories(dev)
    rng = np.random.default_rng(seed)
    kind = cell["kernel"]
    if kind in ("gemm", "gemm_sum"):
        a = _int8(rng, (cell["m"], cell["k"]), False)
        b = _int8(rng, (cell["k"], cell["n"]), False)
        ref = golden.gemm_int8(a, b)
        if kind == "gemm":
            c, stats = await gemm(dev, a, b, k_chunk=cell.get("k_chunk"))
            mismatch = _first_mismatch(c, ref)
        else:
            c, total, stats = await gemm_sum(dev, a, b)
            ref_total = golden.wrap_int32(int(ref.astype(np.int64).sum()))
            mismatch = _first_mismatch(c, ref)
            if mismatch is None and int(total) != int(ref_total):
                mismatch = {"index": ["total"], "got": int(total), "expected": int(ref_total), "count": 1}
    elif kind == "lowp":
        from kernels.lowp import gemm_lowp

        from .distributions import sample

        a = sample(cell["dist"], rng, (cell["m"], cell["k"]), role="a")
        b = sample(cell["dist"], rng, (cell["k"], cell["n"]), role="b")
        out = await gemm_lowp(dev, a, b, cell["recipe"])
        stats, mismatch = out["stats"], None
        if "run" in out:
            r = out["run"]
            ref = golden.mx.mx_matmul_bits(r["a_codes"], r["b_codes"], r["a_scales"], r["b_scales"], r["fmt"],
                                           chunks=r["chunks"])
            mismatch = _first_mismatch(out["bits"], ref)
        stats["sqnr_db"] = out["sqnr_db"]
    elif kind == "reduce":
        lo, hi = (-(2**31), -1) if cell.get("negative") else (-(2**31), 2**31)
        x = rng.integers(lo, hi, size=(cell["rows"], cell["cols"]), dtype=np.int64).astype(np.int32)
        got, stats = await reduce_rows(dev, x, cell["op"])
        mismatch = _first_mismatch(got, golden.reduce_rows(x, cell["op"]))
    else:
        raise ValueError(f"unknown cell kernel {kind!r}")
    return {"passed": mismatch is None, "mismatch": mismatch, "cycles": stats["cycles"],
            "mitigations": stats["mitigations"], "sqnr_db": stats.get("sqnr_db")}


async def errata_check_job(dev, emit) -> dict:
    """Run every reproducer on this chip; report what fired."""
    from workarounds.registry import ERRATA
    from workarounds.reproducers import run_reproducer

    out = {}
    for e in ERRATA:
        try:
            r = await run_reproducer(dev, e.reproducer)
        except Exception as exc:  # a reproducer that crashes the chip is a finding, not a lost run
            r = {"fired": True, "detail": f"reproducer crashed: {type(exc).__name__}: {exc}"}
            await dev.write_csr("CTRL", 1)  # soft reset, then go on with the next one
            dev._tail = 0
        out[e.id] = r
        emit({"type": "reproducer", "id": e.id, **r})
    return {"revision": dev.revision, "reproducers": out}


async def errata_matrix_job(dev, emit, ids: list[str] | None = None, seed: int = 1) -> dict:
    """For each erratum: its reproducer, then its kernel cell with the mitigation on and off."""
    import workarounds
    from workarounds.registry import ERRATA
    from workarounds.reproducers import run_reproducer

    cells = []
    for e in ERRATA:
        if ids and e.id not in ids:
            continue
        rep = await run_reproducer(dev, e.reproducer)
        for policy in ("on", "off"):
            workarounds.set_policy(dev, {e.id: policy})
            try:
                r = await run_cell(dev, e.cell, seed)
            except Exception as exc:
                r = {"passed": False, "mismatch": f"{type(exc).__name__}: {exc}", "cycles": None, "mitigations": []}
            rec = {"type": "cell", "id": e.id, "revision": dev.revision, "policy": policy,
                   "reproducer_fired": rep["fired"], **r}
            emit(rec)
            cells.append(rec)
        workarounds.set_policy(dev, None)
    return {"cells": len(cells)}


# ---- numerics report --------------------------------------------------------------------------

async def numerics_job(dev, emit, recipes: list[str], dists: list[str], ks: list[int], m: int, n: int,
                       seed: int, policy: dict | None = None) -> dict:
    """SQNR of every recipe x distribution x K on the chip, with the chip's bits checked vs golden."""
    import workarounds
    from kernels.lowp import gemm_lowp

    from .distributions import sample

    if policy:
        workarounds.set_policy(dev, policy)
    rows = 0
    for dist in dists:
        for k in ks:
            rng = np.random.default_rng([seed, k, sum(dist.encode())])
            a = sample(dist, rng, (m, k), role="a")
            b = sample(dist, rng, (k, n), role="b")
            for name in recipes:
                out = await gemm_lowp(dev, a, b, name)
                if "run" in out:
                    r = out["run"]
                    ref = golden.mx.mx_matmul_bits(r["a_codes"], r["b_codes"], r["a_scales"], r["b_scales"],
                                                   r["fmt"], chunks=r["chunks"])
                    identical = bool((ref == out["bits"]).all())
                else:
                    ri = out["run_int8"]
                    identical = bool((golden.gemm_int8(ri["qa"], ri["qb"]) == ri["c_int"]).all())
                emit({"type": "numerics", "recipe": name, "dist": dist, "k": k, "m": m, "n": n,
                      "sqnr_db": out["sqnr_db"], "max_abs": out["max_abs"], "bit_identical": identical,
                      "cycles": out["stats"]["cycles"], "mitigations": out["stats"]["mitigations"],
                      "notes": out["stats"].get("notes", []), "revision": dev.revision})
                rows += 1
    return {"rows": rows}


async def errata_scale_job(dev, emit, ids: list[str], seed: int = 1) -> dict:
    """Each erratum's at-scale workload with its mitigation on and off: the cycle cost that matters."""
    import workarounds
    from workarounds.registry import BY_ID

    for err_id in ids:
        e = BY_ID[err_id]
        for policy in ("on", "off"):
            workarounds.set_policy(dev, {e.id: policy})
            try:
                r = await run_cell(dev, e.scale, seed)
            except Exception as exc:
                r = {"passed": False, "mismatch": f"{type(exc).__name__}: {exc}", "cycles": None}
            emit({"type": "scale", "id": e.id, "revision": dev.revision, "policy": policy, "cycles": r["cycles"],
                  "passed": r["passed"], "sqnr_db": r.get("sqnr_db")})
        workarounds.set_policy(dev, None)
    return {"ids": ids}
