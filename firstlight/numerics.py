"""``firstlight numerics``: SQNR of every quantization recipe on the real RTL, vs float64.

For each recipe x input distribution x K, the chip runs the GEMM; the output is compared with
the float64 ideal (SQNR in dB) and the chip's bits with the golden (they must be identical).
A second part shows erratum FL-NU-001: the same recipe on A1 with its mitigation off
(vulnerable) and on, next to B0 (as specified).

The tables go to ``out`` as they are ready (``out.table(title, headers, rows)`` and
``out.note(text, style)``; the CLI's :class:`firstlight.cli.common.Reporter` fits them to the
terminal); this module builds no terminal output itself.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

__all__ = ["run_numerics", "REFERENCE_POINTS"]

# Published N(0,1) reference points (shared/NUMERICS.md), for the closing comparison.
REFERENCE_POINTS = {"int8-tensor": 39.0, "fp8-e4m3-tensor": 31.5, "mxfp8-e4m3-floor": 30.6,
                    "mxfp8-e4m3-rceil": 31.5, "mxfp4-e2m1-floor": 19.0, "mxfp4-e2m1-rceil": 19.0}

ERRATUM_RECIPES = ["fp8-e4m3-cast", "fp8-e4m3-tensor", "mxfp8-e4m3-rceil"]


def _job(variant, sim, kwargs):
    """(records, error or None, harness error?)"""
    from cosim.jobs import JobFailed, SimulatorDied, run_job
    from firstlight.jobs.numerics import numerics_job

    try:
        res = run_job(numerics_job, kwargs, variant=variant, sim=sim)
        return [r for r in res.records if r.get("type") == "numerics"], None, False
    except JobFailed as e:
        return [r for r in e.records if r.get("type") == "numerics"], str(e), isinstance(e, SimulatorDied)


class _Silent:
    def table(self, *args, **kwargs) -> None:
        pass

    def note(self, *args, **kwargs) -> None:
        pass


def operand_sqnr(recipe_name: str, x) -> float:
    """Quantization SQNR of one operand (as A, K along axis 1): comparable to published points."""
    import numpy as np

    import golden
    from golden import quant

    r = quant.recipe(recipe_name)
    x64 = x.astype(np.float64)
    if r.kind == "int8":
        q, s = quant.int8_symmetric(x, axis=None if r.granularity == "tensor" else 0)
        xq = q.astype(np.float64) * (np.asarray(s, np.float64).reshape(-1, 1) if r.granularity != "tensor" else float(s))
    elif r.kind == "fp8":
        if r.granularity == "cast":
            xq = quant.decode_elements(quant.quantize_elements(x, r.fmt), r.fmt)
        else:
            c, s = quant.fp8_per_tensor(x, r.fmt)
            xq = quant.decode_elements(c, r.fmt) * s
    else:
        c, s = quant.mx_quantize(x, r.fmt, r.rule, axis=1)
        xq = quant.mx_dequantize(c, s, r.fmt, axis=1)
    return float(golden.sqnr_db(x64, xq))


def _plot(rows: list[dict], recipes: list[str], dists: list[str], k: int, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, ax = plt.subplots(figsize=(11, 4.8))
    width = 0.8 / len(dists)
    x = np.arange(len(recipes))
    for i, d in enumerate(dists):
        vals = [next((r["sqnr_db"] for r in rows if r["recipe"] == rc and r["dist"] == d and r["k"] == k), math.nan)
                for rc in recipes]
        ax.bar(x + (i - (len(dists) - 1) / 2) * width, vals, width, label=d)
    ax.set_xticks(x, recipes, rotation=35, ha="right", fontsize=8)
    ax.set_ylabel("SQNR vs float64 (dB)")
    ax.set_title(f"GEMM output SQNR on the RTL, K={k} (bit-identical to the golden)")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(title="distribution")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def run_numerics(*, sim: str, revision: str, recipes: list[str], dists: list[str], ks: list[int], m: int, n: int,
                 seed: int, report_dir: Path | None, out=None, erratum: bool = True) -> dict:
    from cosim.build import Variant

    out = out or _Silent()
    rows, err, harness = _job(Variant(revision=revision), sim, {"recipes": recipes, "dists": dists, "ks": ks, "m": m,
                                                                "n": n, "seed": seed})
    cols = [(d, k) for d in dists for k in ks]
    main_rows = []
    for rc in recipes:
        cells = []
        ident = True
        for d, k in cols:
            r = next((r for r in rows if r["recipe"] == rc and r["dist"] == d and r["k"] == k), None)
            cells.append("-" if r is None else f"{r['sqnr_db']:.1f}")
            ident &= r is not None and r["bit_identical"]
        main_rows.append([rc, *cells, "yes" if ident else "NO"])
    out.table(f"SQNR (dB) of a {m}x{n}xK GEMM vs float64, revision {revision}, {sim}",
              ["recipe", *[f"{d}\nK={k}" for d, k in cols], "RTL ==\ngolden"], main_rows)
    # The published reference points are for quantizing one N(0,1) tensor; a GEMM output carries
    # the errors of both operands (about 3 dB lower). Both are shown.
    import numpy as np

    x = np.random.default_rng(seed).standard_normal((64, 4096)).astype(np.float32)
    op = {rc: operand_sqnr(rc, x) for rc in recipes}
    t3 = []
    for rc in recipes:
        out_row = next((r for r in rows if r["recipe"] == rc and r["dist"] == "normal" and r["k"] == max(ks)), None)
        t3.append([rc, f"{op[rc]:.1f}", f"{REFERENCE_POINTS[rc]:.1f}" if rc in REFERENCE_POINTS else "-",
                   f"{out_row['sqnr_db']:.1f}" if out_row else "-"])
    out.table("Operand quantization SQNR (dB), one N(0,1) tensor 64x4096, vs published points",
              ["recipe", "measured", "published", "GEMM output\n(normal,\nlargest K)"], t3)
    erratum_rows = []
    if erratum:
        small = {"recipes": ERRATUM_RECIPES, "dists": ["small"], "ks": [max(ks)], "m": m, "n": n, "seed": seed}
        for label, rev, pol in (("as specified (B0)", "B0", None), ("vulnerable (A1, FL-NU-001 off)", "A1", {"FL-NU-001": "off"}),
                                ("mitigated (A1, FL-NU-001 on)", "A1", {"FL-NU-001": "on"})):
            got, e2, h2 = _job(Variant(revision=rev), sim, {**small, "policy": pol})
            for r in got:
                erratum_rows.append({**r, "case": label})
            err = err or e2
            harness |= h2
        cases = ["as specified (B0)", "vulnerable (A1, FL-NU-001 off)", "mitigated (A1, FL-NU-001 on)"]
        t2 = [[rc, *[next((f"{r['sqnr_db']:.1f}" for r in erratum_rows if r["recipe"] == rc and r["case"] == c), "-")
                     for c in cases]] for rc in ERRATUM_RECIPES]
        out.table(f"Erratum FL-NU-001 (FP8 subnormals read as zero): 'small' distribution, K={max(ks)}",
                  ["recipe", "as specified\n(B0)", "vulnerable\n(A1, FL-NU-001\noff)", "mitigated\n(A1, FL-NU-001\non)"],
                  t2)
    result = {"sim": sim, "revision": revision, "shape": [m, n], "ks": ks, "seed": seed, "rows": rows,
              "erratum_FL-NU-001": erratum_rows, "reference_points_normal": REFERENCE_POINTS,
              "operand_sqnr_normal": op,
              # the vulnerable case differs from the golden by design (that is the erratum)
              "all_bit_identical": all(r["bit_identical"] for r in rows + erratum_rows if not r.get("case", "").startswith("vulnerable"))
              if erratum_rows else all(r["bit_identical"] for r in rows),
              "vulnerable_differs_from_golden": any(not r["bit_identical"] for r in erratum_rows
                                                    if r["case"].startswith("vulnerable")),
              "error": err,
              "harness_error": harness}
    if report_dir:
        report_dir.mkdir(parents=True, exist_ok=True)
        (report_dir / "numerics.json").write_text(json.dumps(result, indent=2, default=str))
        _plot(rows, recipes, dists, max(ks), report_dir / "numerics.png")
        out.note(f"wrote {report_dir / 'numerics.json'} and {report_dir / 'numerics.png'}")
    if err:
        out.note(f"incomplete: {err}", "red")
    return result
