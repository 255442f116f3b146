"""The numerics report's figure and attention section, from fake job records (no simulator): every
part of the report is on the figure (issue 15 item 11: the figure used to show the GEMM SQNR at
the largest K only), and the attention table names the stage that costs the most."""

from __future__ import annotations

import matplotlib.colors
import matplotlib.figure
import numpy as np
import pytest

import firstlight.numerics as nu

RECIPES = ["int8-tensor", "fp8-e4m3-tensor", "mxfp8-e4m3-rceil"]
DISTS = ["normal", "small"]
KS = [64, 256, 1024]
CASE_OFFSET = {None: 0.0, "off": 100.0, "on": 200.0}  # FL-NU-001 policy -> a distinct band of values


def _gemm_sqnr(recipe, dist, k, policy):
    """A value per (recipe, distribution, K, case) that no other cell has."""
    return 10 + RECIPES.index(recipe) if recipe in RECIPES else 50 + nu.ERRATUM_RECIPES.index(recipe) \
        + DISTS.index(dist) * 0.25 + np.log2(k) * 0.01 + CASE_OFFSET[(policy or {}).get("FL-NU-001")]


def _attention_row(recipe, seq):
    i = ["int8", "fp8-e4m3", "fp8-e5m2"].index(recipe)
    full = 30.0 - 2 * i - seq / 256
    return {"type": "attention_numerics", "recipe": recipe, "seq": seq, "dim": 16, "sqnr_db": full,
            "bit_identical": True, "exact_sqnr_db": {"qk": full + 0.5, "p": full + 1.0 + 1.5 * i, "v": full + 3.0 - i}}


def _fake_job(variant, sim, kwargs, job=None):
    if "seqs" in kwargs:
        return [_attention_row(r, s) for s in kwargs["seqs"] for r in kwargs["recipes"]], None, False
    return [{"type": "numerics", "recipe": r, "dist": d, "k": k, "m": 8, "n": 8, "bit_identical": True,
             "sqnr_db": _gemm_sqnr(r, d, k, kwargs.get("policy"))}
            for d in kwargs["dists"] for k in kwargs["ks"] for r in kwargs["recipes"]], None, False


@pytest.fixture
def figures(monkeypatch):
    saved = []

    def keep(self, *a, **kw):
        self.saved_kwargs = kw  # what savefig was given: the PNG's provenance chunks
        saved.append(self)

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", keep)
    monkeypatch.setattr(nu, "_job", _fake_job)
    return saved


def _panel(fig, words):
    hits = [ax for ax in fig.axes if all(w in ax.get_title() for w in words)]
    assert len(hits) == 1, f"no single panel titled with {words}: {[ax.get_title() for ax in fig.axes]}"
    return hits[0]


def _bar_heights(ax):
    return sorted(round(p.get_height(), 6) for p in ax.patches)


def test_the_figure_has_k_dependence_erratum_operands_and_provenance(figures, tmp_path):
    res = nu.run_numerics(sim="icarus", revision="B0", recipes=RECIPES, dists=DISTS, ks=KS, m=8, n=8, seed=7,
                          report_dir=tmp_path, erratum=True)
    assert (tmp_path / "numerics.json").exists() and len(figures) == 1
    fig = figures[0]
    title = fig._suptitle.get_text() if fig._suptitle else ""
    assert "revision B0" in title and "icarus" in title and "seed 7" in title, title
    meta = fig.saved_kwargs.get("metadata") or {}
    assert "commit " in meta.get("Comment", "") and "icarus " in meta["Comment"] and meta.get("Source"), meta
    # the K dependence: a line per recipe through every K (normal distribution)
    lines = {ln.get_label(): ln for ln in _panel(fig, ["vs K"]).get_lines()}
    for rc in RECIPES:
        assert list(lines[rc].get_xdata()) == KS
        assert np.allclose(lines[rc].get_ydata(), [_gemm_sqnr(rc, "normal", k, None) for k in KS])
    # FL-NU-001: as specified, vulnerable and mitigated, every erratum recipe
    want = sorted(round(_gemm_sqnr(rc, "small", max(KS), {"FL-NU-001": p} if p else None), 6)
                  for rc in nu.ERRATUM_RECIPES for p in (None, "off", "on"))
    assert _bar_heights(_panel(fig, ["FL-NU-001"])) == want
    # the operand SQNR beside the published points
    ops = _bar_heights(_panel(fig, ["Operand", "published"]))
    for rc in RECIPES:
        assert round(nu.REFERENCE_POINTS[rc], 6) in ops and round(res["operand_sqnr_normal"][rc], 6) in ops


class _Recorder:
    def __init__(self):
        self.tables, self.notes = [], []

    def table(self, title, headers, rows):
        self.tables.append((title, headers, rows))

    def note(self, text, style=None):
        self.notes.append(text)


def test_attention_section_names_the_costliest_stage_and_is_on_the_figure(figures, tmp_path, monkeypatch):
    out = _Recorder()
    res = nu.run_numerics(sim="verilator", revision="B1", recipes=RECIPES[:1], dists=["normal"], ks=[64], m=8, n=8,
                          seed=3, report_dir=tmp_path, out=out, erratum=False, attention_seqs=[32, 64],
                          attention_dim=16)
    rows = {(r["recipe"], r["seq"]): r for r in res["attention"]["rows"]}
    assert {k: r["largest_source"] for k, r in rows.items() if k[1] == 64} == \
        {("int8", 64): "v", ("fp8-e4m3", 64): "p", ("fp8-e5m2", 64): "p"}
    title, headers, table = next(t for t in out.tables if t[0].startswith("Attention"))
    assert "head dim 16" in title and "revision B1" in title
    assert ["int8", "64"] == table[3][:2] and table[3][-2:] == ["V (+3.0)", "yes"], table
    fig = figures[0]
    lines = {ln.get_label(): ln for ln in _panel(fig, ["Attention output SQNR vs sequence length"]).get_lines()}
    for rc in ("int8", "fp8-e4m3", "fp8-e5m2"):
        assert list(lines[f"P, V in {rc}"].get_xdata()) == [32, 64]
        assert np.allclose(lines[f"P, V in {rc}"].get_ydata(), [rows[(rc, n)]["sqnr_db"] for n in (32, 64)])
    heights = _bar_heights(_panel(fig, ["Attention error by stage", "seq 64"]))
    assert heights == sorted(round(v, 6) for (rc, n), r in rows.items() if n == 64
                             for v in (r["sqnr_db"], *r["exact_sqnr_db"].values()))
    assert res["all_bit_identical"]
    # one attention row whose bits differ makes the whole report a failure
    monkeypatch.setattr(nu, "_job", lambda v, s, kw, job=None: (
        [{**r, "bit_identical": r["recipe"] != "fp8-e5m2"} for r in _fake_job(v, s, kw, job)[0]], None, False))
    assert not nu.run_numerics(sim="verilator", revision="B1", recipes=RECIPES[:1], dists=["normal"], ks=[64], m=8,
                               n=8, seed=3, report_dir=None, erratum=False, attention_seqs=[32],
                               attention_dim=16)["all_bit_identical"]


def test_every_recipe_has_its_own_colour_and_empty_bars_are_marked(figures, tmp_path, monkeypatch):
    """Twelve recipes once shared a 10-colour cycle (int8-tensor and mxfp4-floor both blue), a 0.0 dB
    bar was invisible, and a recipe with no published point had nothing where its bar would be."""
    from golden.quant import RECIPES as ALL

    many = list(ALL)[:12]
    monkeypatch.setattr(nu, "_job", lambda variant, sim, kwargs, job=None: (
        [{"type": "numerics", "recipe": r, "dist": d, "k": k, "m": 8, "n": 8, "bit_identical": True,
          "sqnr_db": 0.0 if r == many[0] else 20.0 + i} for d in kwargs["dists"] for k in kwargs["ks"]
         for i, r in enumerate(kwargs["recipes"])], None, False))
    nu.run_numerics(sim="verilator", revision="B1", recipes=many, dists=["normal"], ks=[64, 256], m=8, n=8, seed=1,
                    report_dir=tmp_path, erratum=False)
    fig = figures[-1]
    lines = [ln for ln in _panel(fig, ["vs K"]).get_lines() if not ln.get_label().startswith("_")]
    assert len(lines) == 12
    looks = {(tuple(np.round(matplotlib.colors.to_rgba(ln.get_color()), 3)), ln.get_marker(), ln.get_linestyle())
             for ln in lines}
    assert len(looks) == 12, "two recipes look the same"
    dist_panel = _panel(fig, ["by distribution"])
    assert any(ln.get_label() == "_zero" for ln in dist_panel.get_lines()), "a 0 dB bar must be marked"
    missing = [r for r in many if r not in nu.REFERENCE_POINTS]
    if missing:
        assert any(ln.get_label() == "_missing" for ln in _panel(fig, ["Operand", "published"]).get_lines())


def test_each_measurement_is_announced_as_it_arrives(monkeypatch, caplog):
    """`numerics` once printed nothing until its tables, minutes in."""
    import logging
    from types import SimpleNamespace

    from cosim import jobs

    def run_job(fn, kwargs, *, variant, sim, on_record=None, **kw):
        recs = _fake_job(variant, sim, kwargs)[0]
        for r in recs:
            on_record(r)
        return SimpleNamespace(records=recs)

    monkeypatch.setattr(jobs, "run_job", run_job)
    with caplog.at_level(logging.INFO, logger="firstlight"):
        rows, err, harness = nu._job(None, "verilator", {"recipes": RECIPES, "dists": ["normal"], "ks": [64, 256],
                                                         "m": 8, "n": 8, "seed": 1})
    msgs = [r.getMessage() for r in caplog.records]
    assert len(rows) == 6 and err is None
    assert "numerics verilator 1/6: int8-tensor normal K=64: 10.0 dB" in msgs[0], msgs
    assert msgs[-1].startswith("numerics verilator 6/6: "), msgs
