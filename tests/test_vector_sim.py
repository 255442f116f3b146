"""The vector unit on both simulators: the elementwise kernel (DMA in, VEC, DMA out) bit-exact
against golden/vector.py for every op and broadcast, with specials, rows longer than one word,
and matrices larger than the accumulator SRAM (several chunks)."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import SEED
from conftest import VECTOR_CHIP as SMALL_CHIP
from cosim.build import Variant
from cosim.jobs import run_job
from golden.vector import vector_op

import vector_jobs as jobs

pytestmark = pytest.mark.sim
VARIANT = Variant(config=SMALL_CHIP, revision="B1")
# (op, broadcast, rows, cols): 9 columns are three words with a padded last one; 20 x 9 is more
# than the 64-word accumulator SRAM holds beside its operand, so it runs in chunks.
CASES = [("fadd", "none", 20, 9), ("fsub", "row", 5, 9), ("fmul", "col", 20, 9), ("fmax", "none", 3, 4),
         ("fmin", "row", 4, 3), ("i2f", "none", 4, 5), ("relu", "none", 6, 7), ("fmul", "row", 1, 1),
         ("exp", "none", 12, 9), ("recip", "none", 5, 8), ("rsqrt", "none", 5, 8), ("iadd", "col", 6, 9),
         ("requant", "col", 7, 9), ("requant", "row", 3, 5)]


def test_elementwise_bit_exact(sim, tmp_path):
    results = run_job(jobs.elementwise_job, {"seed": SEED, "cases": CASES}, variant=VARIANT, sim=sim,
                      work_dir=tmp_path).value
    failures = []
    for r in results:
        op, broadcast, rows, cols = r["case"]
        a, b = jobs.case_inputs(SEED, op, broadcast, (rows, cols))
        bb = None if b is None else (b.reshape(-1, 1) if broadcast == "row" else b)
        want = vector_op(op, a.view(np.uint32), None if bb is None else bb.view(np.uint32))
        got = np.array(r["bits"], np.uint32).reshape(rows, cols)
        if not np.array_equal(got, want):
            i, j = np.argwhere(got != want)[0]
            failures.append(f"{op}/{broadcast} {rows}x{cols}: {int((got != want).sum())} differ, first [{i},{j}] "
                            f"a={a.view(np.uint32)[i, j]:#x} rtl={got[i, j]:#x} golden={want[i, j]:#x}")
        words = rows * -(-cols // SMALL_CHIP.lanes)
        assert r["vector_elems"] == words * SMALL_CHIP.lanes, r
    assert not failures, "\n".join(failures) + f"\nreproduce: FIRSTLIGHT_SEED={SEED} pytest tests/test_vector_sim.py -k {sim}"
    assert any(r["chunks"] > 1 for r in results), "no case ran in more than one chunk"


def test_softmax_bit_exact(sim, tmp_path):
    """Rows longer than one word, not a multiple of LANES, several chunks; -Inf entries, a row of
    -Inf only (NaN, documented), large offsets and a very negative row; SQNR vs float64 on the
    finite rows."""
    from golden.metrics import sqnr_db
    from golden.softmax import softmax_reference, softmax_rows

    shapes = [(7, 13), (1, 1), (30, 5)]
    results = run_job(jobs.softmax_job, {"seed": SEED, "shapes": shapes}, variant=VARIANT, sim=sim,
                      work_dir=tmp_path).value
    for r, (rows, cols) in zip(results, shapes):
        x = jobs.softmax_inputs(SEED, rows, cols)
        got = np.array(r["bits"], np.uint32).reshape(rows, cols)
        want = softmax_rows(x, SMALL_CHIP.lanes).view(np.uint32)
        assert np.array_equal(got, want), (f"softmax {rows}x{cols}: {int((got != want).sum())} lanes differ; "
                                           f"reproduce: FIRSTLIGHT_SEED={SEED} pytest tests/test_vector_sim.py -k softmax")
        ok = np.isfinite(x).any(axis=1)
        if rows > 3:
            assert np.isnan(got[3].view(np.float32)).all(), "a row of -Inf only is NaN"
        sq = sqnr_db(softmax_reference(x[ok]), got[ok].view(np.float32).astype(np.float64))
        assert sq > 120, f"softmax {rows}x{cols}: SQNR {sq:.1f} dB vs float64"
    assert results[2]["chunks"] > 1


def test_norms_bit_exact(sim, tmp_path):
    """LayerNorm and RMSNorm: rows longer than a word and not a multiple of LANES, several chunks,
    a zero-variance row (gives beta), a row offset by 1e4 (two passes keep it accurate), a zero row."""
    from golden.metrics import sqnr_db
    from golden.norms import layer_norm_reference, layer_norm_rows, rms_norm_reference, rms_norm_rows

    cases = [("layer", 6, 10), ("rms", 6, 10), ("layer", 20, 3), ("rms", 1, 1)]
    results = run_job(jobs.norm_job, {"seed": SEED, "shapes": cases}, variant=VARIANT, sim=sim,
                      work_dir=tmp_path).value
    for r, (kind, rows, cols) in zip(results, cases):
        x, gamma, beta = jobs.norm_inputs(SEED, rows, cols)
        got = np.array(r["bits"], np.uint32).reshape(rows, cols)
        if kind == "layer":
            want, ref = layer_norm_rows(x, gamma, beta, 1e-5, SMALL_CHIP.lanes), layer_norm_reference(x, gamma, beta, 1e-5)
        else:
            want, ref = rms_norm_rows(x, gamma, 1e-6, SMALL_CHIP.lanes), rms_norm_reference(x, gamma, 1e-6)
        assert np.array_equal(got, want.view(np.uint32)), (
            f"{kind}_norm {rows}x{cols}: {int((got != want.view(np.uint32)).sum())} lanes differ; reproduce: "
            f"FIRSTLIGHT_SEED={SEED} pytest tests/test_vector_sim.py -k norms")
        sq = sqnr_db(ref, got.view(np.float32).astype(np.float64))
        assert sq > 90, f"{kind}_norm {rows}x{cols}: SQNR {sq:.1f} dB vs float64"
        if kind == "layer" and rows > 2:
            np.testing.assert_array_equal(got[2].view(np.float32), beta, err_msg="a constant row gives beta")
    assert results[2]["chunks"] > 1




def test_attention_bit_exact(sim, tmp_path):
    """Flash attention against its kernel golden, bit for bit: a sequence that is not a multiple
    of the key tile or the query block, causal and not, one and several query blocks; SQNR vs
    float64 as the int8 recipe allows."""
    from golden.attention import AttentionPlan, attention_reference, attention_rows, quantize_qkv
    from golden.metrics import sqnr_db

    cases = [(13, 8, False, 4, 8), (13, 8, True, 4, 4), (6, 5, True, 4, 4)]
    results = run_job(jobs.attention_job, {"seed": SEED, "cases": cases}, variant=VARIANT, sim=sim,
                      work_dir=tmp_path).value
    cfg = VARIANT.config
    for r, (seq, dim, causal, bq, tk) in zip(results, cases):
        q, k, v = jobs.attention_inputs(SEED, seq, dim)
        plan = AttentionPlan(seq, dim, cfg.lanes, cfg.rows, bq, tk, causal)
        want = attention_rows(*quantize_qkv(q, k, v), plan)
        got = np.array(r["bits"], np.uint32).reshape(seq, dim)
        bad = got != want.view(np.uint32)
        assert not bad.any(), (f"attention {r['case']}: {int(bad.sum())} of {bad.size} differ, first at "
                               f"{np.argwhere(bad)[0].tolist()}; reproduce: FIRSTLIGHT_SEED={SEED} pytest "
                               f"tests/test_vector_sim.py -k 'attention and {sim}'")
        sq = sqnr_db(attention_reference(q, k, v, causal), got.view(np.float32).astype(np.float64))
        assert sq > 25, f"attention {r['case']}: SQNR {sq:.1f} dB"


def test_gemm_epilogue_bit_exact(sim, tmp_path):
    """The fused epilogue (bias, per-channel requantization, ReLU) against golden.epilogue, bit for
    bit: several K chunks, several tile groups, edge tiles in M and N, a bias that wraps, a
    column that saturates."""
    from golden.epilogue import gemm_epilogue

    cases = [(9, 10, 70, False), (21, 30, 33, True), (4, 4, 1, False)]
    results = run_job(jobs.epilogue_job, {"seed": SEED, "cases": cases}, variant=VARIANT, sim=sim,
                      work_dir=tmp_path).value
    ends = set()
    for r, (m, n, k, relu) in zip(results, cases):
        a, b, bias, scale = jobs.epilogue_inputs(SEED, m, n, k, relu)
        want = gemm_epilogue(a, b, bias, scale, relu)
        got = np.array(r["values"], np.int32).reshape(m, n)
        assert r["dtype"] == "int8", r["notes"]
        bad = got != want
        assert not bad.any(), (f"epilogue {r['case']}: {int(bad.sum())} of {bad.size} differ, first at "
                               f"{np.argwhere(bad)[0].tolist()} (chip {got[bad][0]}, golden {want[bad][0]}); "
                               f"reproduce: FIRSTLIGHT_SEED={SEED} pytest tests/test_vector_sim.py -k 'epilogue and {sim}'")
        assert r["vector_busy"] > 0
        ends.update(int(v) for v in want[:, n // 2] if v in (127, -128))
    assert ends == {127, -128}, f"the scaled-up columns saturate at both ends: {ends}"


def test_cvt_f8_through_the_command_stream(sim, tmp_path):
    """CVT_F8's format travels in arg3 through the command processor to the unit (both formats)."""
    from golden.vector import to_fp8

    r = run_job(jobs.cvt_f8_job, {"seed": SEED}, variant=VARIANT, sim=sim, work_dir=tmp_path).value
    assert r["err"] == 0
    x = np.array(r["x"], np.uint32)
    one = np.float32(1.0).view(np.uint32)
    for fmt in ("e4m3", "e5m2"):
        np.testing.assert_array_equal(np.array(r[fmt], np.uint8), to_fp8(x, one, fmt), err_msg=f"{fmt} {sim}")


def test_activations_bit_exact(sim, tmp_path):
    """SiLU and GELU against golden/activations.py, bit for bit, with specials, a padded last word
    and more rows than one chunk; SQNR against float64 on the finite inputs."""
    from golden.activations import activation_reference, activation_rows
    from golden.metrics import sqnr_db

    cases = [("silu", 13, 9), ("gelu", 13, 9), ("gelu", 2, 3)]
    results = run_job(jobs.activation_job, {"seed": SEED, "cases": cases}, variant=VARIANT, sim=sim,
                      work_dir=tmp_path).value
    for r, (kind, rows, cols) in zip(results, cases):
        x = jobs.activation_inputs(SEED, rows, cols)
        want = activation_rows(kind, x, SMALL_CHIP.lanes).view(np.uint32)
        got = np.array(r["bits"], np.uint32).reshape(rows, cols)
        bad = got != want
        assert not bad.any(), (f"{kind} {rows}x{cols}: {int(bad.sum())} differ, first at {np.argwhere(bad)[0].tolist()}; "
                               f"reproduce: FIRSTLIGHT_SEED={SEED} pytest tests/test_vector_sim.py -k 'activations and {sim}'")
        fin = np.isfinite(x)
        floor = 120 if kind == "silu" else 60  # GELU: the tanh form's own error against erf
        assert sqnr_db(activation_reference(kind, x[fin]), got.view(np.float32)[fin].astype(np.float64)) > floor
    assert results[0]["chunks"] > 1, results[0]
