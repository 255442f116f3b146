"""``firstlight numerics``: SQNR of every quantization recipe on the real RTL, vs float64.

For each recipe x input distribution x K, the chip runs the GEMM; the output is compared with
the float64 ideal (SQNR in dB) and the chip's bits with the golden (they must be identical).
A second part shows erratum FL-NU-001: the same recipe on A1 with its mitigation off
(vulnerable) and on, next to B0 (as specified). A third runs flash attention with each attention
recipe (P and V in int8, FP8 E4M3 or E5M2) at a few sequence lengths: its output SQNR vs float64,
its bits vs the kernel golden, and the golden's SQNR with one stage (QK^T, P, V) taken out of the
quantization, which says where the error comes from. The figure (``numerics.png``) shows all of
it, with the revision, simulator and seed.

The tables go to ``out`` as they are ready (``out.table(title, headers, rows)`` and
``out.note(text, style)``; the CLI's :class:`firstlight.cli.common.Reporter` fits them to the
terminal); this module builds no terminal output itself.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

__all__ = ["run_numerics", "numerics_figure", "REFERENCE_POINTS", "ATTENTION_STAGES"]

# Published N(0,1) reference points (shared/NUMERICS.md), for the closing comparison.
REFERENCE_POINTS = {"int8-tensor": 39.0, "fp8-e4m3-tensor": 31.5, "mxfp8-e4m3-floor": 30.6,
                    "mxfp8-e4m3-rceil": 31.5, "mxfp4-e2m1-floor": 19.0, "mxfp4-e2m1-rceil": 19.0}

ERRATUM_RECIPES = ["fp8-e4m3-cast", "fp8-e4m3-tensor", "mxfp8-e4m3-rceil"]
ERRATUM_CASES = ["as specified (B0)", "vulnerable (A1, FL-NU-001 off)", "mitigated (A1, FL-NU-001 on)"]
ATTENTION_STAGES = {"qk": "QK^T", "p": "P", "v": "V"}  # golden.attention.EXACT_STAGES, as the report names them


def _job(variant, sim, kwargs, job=None):
    """(records, error or None, harness error?) of ``job`` (default: the GEMM numerics job)."""
    from cosim.jobs import JobFailed, SimulatorDied, run_job
    from firstlight.jobs.numerics import attention_numerics_job, numerics_job

    import logging

    job = job or numerics_job
    kind = "attention_numerics" if job is attention_numerics_job else "numerics"
    if kind == "numerics":
        total = len(kwargs["recipes"]) * len(kwargs["dists"]) * len(kwargs["ks"])
    else:
        total = len(kwargs["recipes"]) * len(kwargs["seqs"])
    log, done = logging.getLogger("firstlight"), [0]

    def progress(r: dict) -> None:  # each measurement as it arrives: a report takes minutes
        if r.get("type") != kind:
            return
        done[0] += 1
        what = (f"{r['recipe']} {r['dist']} K={r['k']}" if kind == "numerics" else
                f"attention {r['recipe']} seq {r['seq']}")
        sq = r.get("sqnr_db")
        log.info("numerics %s %d/%d: %s%s", sim, done[0], total, what,
                 "" if sq is None else f": {sq:.1f} dB" + ("" if r.get("bit_identical", True) else ", NOT bit-identical"))

    try:
        res = run_job(job, kwargs, variant=variant, sim=sim, on_record=progress)
        return [r for r in res.records if r.get("type") == kind], None, False
    except JobFailed as e:
        return [r for r in e.records if r.get("type") == kind], str(e), isinstance(e, SimulatorDied)


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


def _row(rows, **match):
    return next((r for r in rows if all(r.get(k) == v for k, v in match.items())), None)


def numerics_figure(result: dict):
    """The report as one matplotlib Figure (six panels), from ``run_numerics``'s result: GEMM
    SQNR against K per recipe, and per distribution at the largest K; the operand SQNRs against
    the published points; FL-NU-001 as specified, vulnerable and mitigated; attention's SQNR
    against the sequence length per recipe, and its error attributed to QK^T, P and V."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    rows, ks = result["rows"], result["ks"]
    recipes = list(dict.fromkeys(r["recipe"] for r in rows))
    dists = list(dict.fromkeys(r["dist"] for r in rows))
    kmax = max(ks)
    fig, axes = plt.subplots(2, 3, figsize=(18, 9.5))
    (ak, ad, ao), (ae, aa, ax_src) = axes

    # one colour per recipe however many there are (the default cycle has 10: 12 recipes once
    # shared blues), and a marker for a bar of 0 dB (invisible as a bar) or a missing value
    palette = plt.get_cmap("tab20").colors
    recipe_colour = {rc: palette[(2 * i) % 20 + (2 * i // 20) % 2] for i, rc in enumerate(recipes)}

    def bars(ax, groups, series, value, labels=None):
        width = 0.8 / max(len(series), 1)
        x = np.arange(len(groups))
        for i, s in enumerate(series):
            xs = x + (i - (len(series) - 1) / 2) * width
            ys = [value(g, s) for g in groups]
            colour = palette[(2 * i) % 20]
            ax.bar(xs, ys, width, label=(labels or series)[i], color=colour)
            zero = [(a, 0.0) for a, y in zip(xs, ys) if y == 0]
            missing = [a for a, y in zip(xs, ys) if isinstance(y, float) and math.isnan(y)]
            if zero:
                ax.plot(*zip(*zero), linestyle="none", marker="_", markersize=12, markeredgewidth=2, color=colour,
                        label="_zero")
            if missing:
                ax.plot(missing, [0.0] * len(missing), linestyle="none", marker="x", color=colour, label="_missing")
        ax.set_xticks(x, groups, rotation=35, ha="right", fontsize=8)
        ax.grid(axis="y", alpha=0.3)

    def nan(r, key="sqnr_db"):
        return math.nan if r is None or r.get(key) is None else r[key]

    dist_k = "normal" if "normal" in dists else dists[0]
    styles = ("-", "--", "-.", ":")
    for i, rc in enumerate(recipes):
        ak.plot(ks, [nan(_row(rows, recipe=rc, dist=dist_k, k=k)) for k in ks], marker="os^vD<>"[i % 7],
                linestyle=styles[(i // 7) % 4], color=recipe_colour[rc], label=rc)
    ak.set_xscale("log", base=2)
    ak.set_xticks(ks, [str(k) for k in ks])
    ak.set_xlabel("K (inner dimension)")
    ak.set_ylabel("SQNR vs float64 (dB)")
    ak.set_title(f"GEMM output SQNR vs K ({dist_k} distribution)")
    ak.grid(alpha=0.3)
    ak.legend(fontsize=7, ncol=2)

    bars(ad, recipes, dists, lambda rc, d: nan(_row(rows, recipe=rc, dist=d, k=kmax)))
    ad.set_ylabel("SQNR vs float64 (dB)")
    ad.set_title(f"GEMM output SQNR by distribution, K={kmax}")
    ad.legend(title="distribution", fontsize=7)

    op, pub = result.get("operand_sqnr_normal", {}), result.get("reference_points_normal", {})
    bars(ao, recipes, ["measured", "published"],
         lambda rc, s: op.get(rc, math.nan) if s == "measured" else pub.get(rc, math.nan),
         ["measured (one N(0,1) tensor)", "published point"])
    ao.set_ylabel("operand SQNR (dB)")
    ao.set_title("Operand quantization SQNR vs published points")
    ao.legend(fontsize=7)

    er = result.get("erratum_FL-NU-001") or []
    if er:
        bars(ae, ERRATUM_RECIPES, ERRATUM_CASES, lambda rc, c: nan(_row(er, recipe=rc, case=c)))
        ae.legend(fontsize=7)
    else:
        ae.text(0.5, 0.5, "not run (--no-erratum)", ha="center", va="center", transform=ae.transAxes)
        ae.set_xticks([])
        ae.set_yticks([])
    ae.set_ylabel("SQNR vs float64 (dB)")
    ae.set_title(f"Erratum FL-NU-001 (FP8 subnormals read as zero): 'small', K={kmax}")

    att = [r for r in (result.get("attention") or {}).get("rows", []) if "sqnr_db" in r]
    if att:
        seqs = sorted({r["seq"] for r in att})
        a_recipes = list(dict.fromkeys(r["recipe"] for r in att))
        for rc in a_recipes:
            aa.plot(seqs, [nan(_row(att, recipe=rc, seq=n)) for n in seqs], marker="o", label=f"P, V in {rc}")
        aa.set_xscale("log", base=2)
        aa.set_xticks(seqs, [str(n) for n in seqs])
        aa.legend(fontsize=7)
        smax = max(seqs)
        stages = ["chip", *ATTENTION_STAGES]

        def stage_sqnr(rc, st):
            r = _row(att, recipe=rc, seq=smax) or {}
            return r.get("sqnr_db", math.nan) if st == "chip" else r.get("exact_sqnr_db", {}).get(st, math.nan)

        bars(ax_src, a_recipes, stages, stage_sqnr,
             ["as run (RTL == golden)", *[f"{ATTENTION_STAGES[s]} exact" for s in ATTENTION_STAGES]])
        ax_src.legend(fontsize=7)
        ax_src.set_title(f"Attention error by stage, seq {smax}")
        ax_src.set_xlabel("each stage in turn taken out of the quantization (golden)")
    else:
        for ax in (aa, ax_src):
            ax.text(0.5, 0.5, "attention not run", ha="center", va="center", transform=ax.transAxes)
            ax.set_xticks([])
            ax.set_yticks([])
        ax_src.set_title("Attention error by stage")
    dim = (result.get("attention") or {}).get("dim")
    aa.set_xlabel("sequence length")
    aa.set_ylabel("SQNR vs float64 (dB)")
    aa.set_title("Attention output SQNR vs sequence length" + (f" (head dim {dim})" if dim else ""))
    aa.grid(alpha=0.3)
    ax_src.set_ylabel("SQNR vs float64 (dB)")
    m, n = result["shape"]
    ident = "yes" if result.get("all_bit_identical") else "NO"
    fig.suptitle(f"firstlight numerics: revision {result['revision']}, simulator {result['sim']}, "
                 f"seed {result['seed']}; "
                 f"GEMMs {m}x{n}xK; every RTL result bit-identical to its golden: {ident}")
    fig.tight_layout(rect=(0, 0, 1, 0.96))
    return fig


def _plot(result: dict, path: Path) -> None:
    import matplotlib.pyplot as plt

    from firstlight.provenance import png_metadata

    fig = numerics_figure(result)
    fig.savefig(path, dpi=100, metadata=png_metadata(result.get("sim")))
    plt.close(fig)


def _attention_section(sim: str, revision: str, recipes: list[str] | None, seqs: list[int], dim: int, seed: int,
                       out) -> tuple[dict, str | None, bool]:
    """Attention per recipe and sequence length on ``revision``: the table, and the section of
    the result (its rows and, per row, the stage whose quantization costs the most)."""
    from cosim.build import Variant
    from firstlight.jobs.numerics import attention_numerics_job
    from golden.attention_recipes import ATTENTION_RECIPES

    recipes = recipes or list(ATTENTION_RECIPES)
    got, err, harness = _job(Variant(revision=revision), sim, {"recipes": recipes, "seqs": seqs, "dim": dim,
                                                                "seed": seed}, attention_numerics_job)
    table, skipped = [], []
    for r in got:
        if "skipped" in r:
            skipped.append(f"{r['recipe']} seq {r['seq']}: {r['skipped']}")
            continue
        gains = {st: r["exact_sqnr_db"][st] - r["sqnr_db"] for st in ATTENTION_STAGES}
        r["largest_source"] = max(gains, key=gains.get)
        table.append([r["recipe"], str(r["seq"]), f"{r['sqnr_db']:.1f}",
                      *[f"{r['exact_sqnr_db'][st]:.1f}" for st in ATTENTION_STAGES],
                      f"{ATTENTION_STAGES[r['largest_source']]} (+{gains[r['largest_source']]:.1f})",
                      "yes" if r["bit_identical"] else "NO"])
    out.table(f"Attention output SQNR (dB) vs float64: N(0,1) Q, K, V, head dim {dim}, revision {revision}, {sim}",
              ["recipe\n(P and V)", "seq", "SQNR", *[f"{n}\nexact" for n in ATTENTION_STAGES.values()],
               "largest\nsource", "RTL ==\ngolden"], table)
    out.note("'X exact': the kernel golden with stage X taken out of the quantization (its product in float64, "
             "rounded once to fp32); the gain over SQNR is what X's quantization costs. Q and K are int8 in every "
             "recipe.")
    for s_ in skipped:
        out.note(f"attention not run: {s_}", "yellow")
    return {"dim": dim, "seqs": seqs, "recipes": recipes, "rows": got}, err, harness


def run_numerics(*, sim: str, revision: str, recipes: list[str], dists: list[str], ks: list[int], m: int, n: int,
                 seed: int, report_dir: Path | None, out=None, erratum: bool = True,
                 attention_seqs: list[int] | None = None, attention_dim: int = 64,
                 attention_recipes: list[str] | None = None) -> dict:
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
        policies = (None, {"FL-NU-001": "off"}, {"FL-NU-001": "on"})
        for label, rev, pol in zip(ERRATUM_CASES, ("B0", "A1", "A1"), policies):
            got, e2, h2 = _job(Variant(revision=rev), sim, {**small, "policy": pol})
            for r in got:
                erratum_rows.append({**r, "case": label})
            err = err or e2
            harness |= h2
        t2 = [[rc, *[next((f"{r['sqnr_db']:.1f}" for r in erratum_rows if r["recipe"] == rc and r["case"] == c), "-")
                     for c in ERRATUM_CASES]] for rc in ERRATUM_RECIPES]
        out.table(f"Erratum FL-NU-001 (FP8 subnormals read as zero): 'small' distribution, K={max(ks)}",
                  ["recipe", "as specified\n(B0)", "vulnerable\n(A1, FL-NU-001\noff)", "mitigated\n(A1, FL-NU-001\non)"],
                  t2)
    attention = None
    if attention_seqs:
        attention, e3, h3 = _attention_section(sim, revision, attention_recipes, attention_seqs, attention_dim, seed,
                                               out)
        err = err or e3
        harness |= h3
    att_rows = [r for r in (attention or {}).get("rows", []) if "bit_identical" in r]
    result = {"sim": sim, "revision": revision, "shape": [m, n], "ks": ks, "seed": seed, "rows": rows,
              "erratum_FL-NU-001": erratum_rows, "reference_points_normal": REFERENCE_POINTS,
              "operand_sqnr_normal": op, "attention": attention,
              # the vulnerable case differs from the golden by design (that is the erratum)
              "all_bit_identical": all(r["bit_identical"] for r in rows + erratum_rows + att_rows
                                       if not r.get("case", "").startswith("vulnerable")),
              "vulnerable_differs_from_golden": any(not r["bit_identical"] for r in erratum_rows
                                                    if r["case"].startswith("vulnerable")),
              "error": err,
              "harness_error": harness}
    if report_dir:
        report_dir.mkdir(parents=True, exist_ok=True)
        from firstlight.provenance import with_provenance

        (report_dir / "numerics.json").write_text(json.dumps(with_provenance(result), indent=2, default=str))
        _plot(result, report_dir / "numerics.png")
        out.note(f"wrote {report_dir / 'numerics.json'} and {report_dir / 'numerics.png'}")
    if err:
        out.note(f"incomplete: {err}", "red")
    return result
