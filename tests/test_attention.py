"""Flash attention without a simulator: the recipes (names, errors), the kernel golden against an
independent float64 model of each recipe, the error attribution, the tile order, and the
kernel's plan and command stream (SRAM fits, semaphores, the loads the tile order saves)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from conftest import SEED
from golden.attention import (
    ATTENTION_RECIPES,
    AttentionPlan,
    attention_golden,
    attention_recipe,
    attention_reference,
    quantize_attention,
)
from golden.metrics import sqnr_db
from golden.quant import int8_symmetric

REPRO = f"reproduce: FIRSTLIGHT_SEED={SEED} pytest tests/test_attention.py"
FP8_DTYPES = {"e4m3": ml_dtypes.float8_e4m3fn, "e5m2": ml_dtypes.float8_e5m2}


def _inputs(seed: int, seq: int, dim: int):
    rng = np.random.default_rng([seed, 94, seq, dim])
    return tuple(rng.standard_normal((seq, dim)).astype(np.float32) for _ in range(3))


def _model(q, k, v, recipe: str, plan: AttentionPlan) -> np.ndarray:
    """The recipe in float64, written apart from the golden: int8 Q, K (and V) from
    golden.quant, V's MX codes decoded by ml_dtypes with their E8M0 scales applied here, P
    rounded by ml_dtypes (from float32, no double rounding), the same tiles and online softmax."""
    r = attention_recipe(recipe)
    S, D = q.shape
    (q8, sq), (k8, sk) = int8_symmetric(q), int8_symmetric(k)
    s_all = (q8.astype(np.float64) @ k8.T.astype(np.float64)) * (sq * sk / np.sqrt(D))
    if r.fp8:
        ops = quantize_attention(q, k, v, recipe)
        vals = ops.v_codes.view(FP8_DTYPES[r.fmt]).astype(np.float64)
        v_deq = vals * np.exp2(np.repeat(ops.v_scales.astype(np.float64) - 127, 32, axis=0)[:S])
    else:
        v8, sv = int8_symmetric(v)
        v_deq = v8 * sv
    out = np.zeros((S, D))
    for q0 in plan.blocks():
        qs = slice(q0, min(q0 + plan.bq, S))
        m = l = o = None
        for k0 in plan.tiles(q0):
            keys = np.arange(k0, min(k0 + plan.tk, S))
            s = s_all[qs][:, keys]
            if plan.causal:
                s = np.where(keys[None, :] > np.arange(qs.start, qs.stop)[:, None], -np.inf, s)
            m_new = s.max(axis=1) if m is None else np.maximum(m, s.max(axis=1))
            p = np.exp(s - m_new[:, None])
            if r.fp8:
                pq = (p * 2.0 ** r.p_exp).astype(np.float32).astype(FP8_DTYPES[r.fmt]).astype(np.float64) \
                    / 2.0 ** r.p_exp
            else:
                pq = np.rint(p * 127) / 127
            alpha = 1.0 if m is None else np.exp(m - m_new)[:, None]
            l = p.sum(axis=1) if m is None else l * alpha[:, 0] + p.sum(axis=1)
            o = pq @ v_deq[keys] if m is None else o * alpha + pq @ v_deq[keys]
            m = m_new
        out[qs] = o / l[:, None]
    return out


@pytest.mark.parametrize("recipe", list(ATTENTION_RECIPES))
@pytest.mark.parametrize("seq,dim,causal,bq,tk", [(13, 8, False, 4, 8), (37, 12, True, 8, 8), (70, 16, False, 8, 32),
                                                  (45, 8, False, 4, 64)])
def test_golden_matches_a_float64_model_of_the_recipe(recipe, seq, dim, causal, bq, tk):
    """The golden's fp32 steps differ from float64 by rounding only, and a P that rounds the
    other way where fp32 and float64 disagree on a tie: far above the recipe's own error."""
    q, k, v = _inputs(SEED, seq, dim)
    plan = AttentionPlan(seq, dim, 4, 4, bq, tk, causal)
    got = attention_golden(quantize_attention(q, k, v, recipe), plan)
    model = _model(q, k, v, recipe, plan)
    ref = attention_reference(q, k, v, causal)
    assert sqnr_db(model, got) > 60, f"{recipe} {seq}x{dim}: golden vs model {sqnr_db(model, got):.1f} dB; {REPRO}"
    assert sqnr_db(ref, got) < 45, "the recipe's quantization should be visible against float64"


def test_error_attribution_swaps_one_stage_to_exact():
    q, k, v = _inputs(SEED, 64, 32)
    plan = AttentionPlan(64, 32, 4, 4, 16, 32, False)
    ref = attention_reference(q, k, v, False)
    for recipe in ATTENTION_RECIPES:
        ops = quantize_attention(q, k, v, recipe)
        full = sqnr_db(ref, attention_golden(ops, plan))
        exact = {st: sqnr_db(ref, attention_golden(ops, plan, exact={st})) for st in ("qk", "p", "v")}
        # taking a stage out never costs much, one of them gains at least 1 dB, and with none
        # left only fp32 and exp remain
        assert min(exact.values()) > full - 0.5 and max(exact.values()) > full + 1, (recipe, full, exact, REPRO)
        assert sqnr_db(ref, attention_golden(ops, plan, exact={"qk", "p", "v"})) > 100
    with pytest.raises(ValueError, match="accepted: qk, p, v"):
        attention_golden(quantize_attention(q, k, v), plan, exact={"softmax"})


def test_unknown_recipe_lists_the_accepted_ones():
    q, k, v = _inputs(SEED, 8, 4)
    with pytest.raises(ValueError, match="unknown attention recipe 'fp16'; accepted: int8, fp8-e4m3, fp8-e5m2"):
        quantize_attention(q, k, v, "fp16")


@pytest.mark.parametrize("seq,bq,tk,causal",
                         [(70, 8, 16, False), (70, 8, 8, True), (13, 4, 4, True), (64, 32, 32, False)])
def test_tile_order_starts_each_block_where_the_last_one_ended(seq, bq, tk, causal):
    plan = AttentionPlan(seq, 8, 4, 4, bq, tk, causal)
    blocks = plan.blocks()
    for i, q0 in enumerate(blocks):
        tiles = plan.tiles(q0)
        assert sorted(tiles) == [t for t in range(0, plan.seq_k, tk) if not causal or t < min(q0 + bq, seq)]
        if i and (not causal or i % 2 == 0):
            assert tiles[0] == plan.tiles(blocks[i - 1])[-1], (i, tiles)
    q, k, v = _inputs(SEED, seq, 8)
    assert np.isfinite(attention_golden(quantize_attention(q, k, v), plan)).all()


def _compiled(seq, dim, causal, recipe, nq=0, tk=0, constraints=None, cfg=None):
    """The tile kernel compiled for the default chip (no device: the compiler alone)."""
    from kernels.tile.spec import get
    from rtl.board import BoardConfig
    from rtl.config import ChipConfig

    cfg = cfg or ChipConfig()
    spec = get("attention")  # the alias of flash_attention
    p = spec.resolve({"seq": seq, "dim": dim, "causal": causal, "recipe": recipe, "nq": nq, "tk": tk})
    return spec.compile(p, cfg, BoardConfig().resolve(cfg), constraints)


@pytest.mark.parametrize("recipe", list(ATTENTION_RECIPES))
def test_stream_loads_a_kv_tile_only_when_the_tile_changes(recipe):
    """The tile order saves the K and V loads at each block's start: 256 x 64 in 32 x 32 pairs
    loads 57 K and 57 V tiles (64 pairs, 7 block starts), not 64 of each."""
    from rtl.config import ChipConfig
    from rtl.isa import Format, Opcode, decode
    from rtl.memories import Region

    cfg = ChipConfig()
    c = _compiled(256, 64, False, recipe, nq=32 // cfg.lanes, tk=32)
    d = [decode(x) for x in c.commands]
    a_loads = [x for x in d if x["opcode"] == Opcode.DMA_LOAD and x["flags"]["region"] == Region.A]
    assert len(a_loads) == 2 * (64 - 7), len(a_loads)
    mms = [x for x in d if x["opcode"] == Opcode.MATMUL]
    assert len(mms) == 64 * 8 * (8 + 16)  # pairs x query tiles x (S^T: key panels, O^T: dim panels)
    fp = [x for x in mms if x["flags"]["fmt"] != Format.INT8]
    if attention_recipe(recipe).fp8:
        assert len(fp) == 64 * 8 * 16 and max(x["arg3"]["sa"] for x in fp) < cfg.scale_depth
        assert sum(x["opcode"] == Opcode.DMA_LOAD and x["flags"]["region"] == Region.SA for x in d) == 64 - 7
        # O (+)= the product from the second tile of a block on: accumulate in the engine
        assert sum(x["flags"]["accumulate"] for x in fp) == (64 - 8) * 8 * 16
        # P's block scales: loaded into SB once, for the whole kernel
        assert sum(x["opcode"] == Opcode.DMA_LOAD and x["flags"]["region"] == Region.SB for x in d) == 1
    else:
        assert not fp


def test_fp8_plans_keep_a_key_tile_within_one_mx_block():
    from kernels.tile.ir import TileError

    for seq, dim, causal in ((256, 64, False), (100, 24, True), (37, 8, False), (300, 128, False)):
        tk = _compiled(seq, dim, causal, "fp8-e4m3").kernel_args["tk"]
        assert tk % 32 == 0 or 32 % tk == 0, (seq, dim, causal, tk)
    with pytest.raises(TileError, match="takes key tiles that divide 32 or are a multiple of it"):
        _compiled(64, 8, False, "fp8-e5m2", nq=1, tk=12)
    _compiled(64, 8, False, "int8", nq=1, tk=12)  # the int8 recipe has no blocks


def test_fl_nu_001_flushes_p_before_its_fp8_conversion_only_where_it_is_active():
    """On a revision whose PE reads FP8 subnormals as zero, the compiler flushes P's would-be
    subnormal values before CVT_F8 (an FMIN per conversion marks the rule); elsewhere, and for
    the int8 recipe, the stream has no such pass."""
    from rtl.isa import Opcode, VecOp, decode
    from workarounds.constraints import LowpConstraints

    daz = {"lowp": LowpConstraints(fp8_subnormals_flushed=True)}

    def counts(recipe, constraints):
        d = [decode(x) for x in _compiled(37, 8, False, recipe, nq=1, tk=32, constraints=constraints).commands]
        vec = [x["flags"]["op"] for x in d if x["opcode"] == Opcode.VEC]
        return vec.count(VecOp.CVT_F8), vec.count(VecOp.FMIN)

    steps = 10 * 2  # 10 blocks of one query tile, two key tiles each: one conversion a step
    assert counts("fp8-e4m3", None) == (steps, 0)
    assert counts("fp8-e4m3", daz) == (steps, steps)
    assert counts("int8", daz) == (0, 0)


@pytest.mark.parametrize("recipe", ["fp8-e4m3", "fp8-e5m2"])
def test_golden_flush_zeroes_exactly_the_p_values_below_the_normal_range(recipe):
    """flush_p changes only the outputs that draw on a P value whose code would be subnormal: on
    scores where no such P occurs the golden is the same bits, on one-hot scores it differs."""
    r = attention_recipe(recipe)
    q, k, v = _inputs(SEED, 16, 8)
    plan = AttentionPlan(16, 8, 4, 4, 4, 8, False)
    ops = quantize_attention(q * 0.1, k * 0.1, v, recipe)  # small scores: every P is near 1
    assert np.array_equal(attention_golden(ops, plan).view(np.uint32),
                          attention_golden(ops, plan, flush_p=True).view(np.uint32))
    # the threshold lies between two keys' probabilities: exp(-d) just above and below 2^-(6+e)
    thr = {"e4m3": 2.0 ** -6, "e5m2": 2.0 ** -14}[r.fmt] * 2.0 ** -r.p_exp
    k2 = k.copy()
    k2[3] = q.mean(axis=0) * 60  # one key far above the rest: the others' P fall through the range
    ops = quantize_attention(q, k2, v, recipe)
    a, b = attention_golden(ops, plan), attention_golden(ops, plan, flush_p=True)
    assert thr > 0 and not np.array_equal(a.view(np.uint32), b.view(np.uint32)), REPRO
    assert np.allclose(a, b, atol=1e-3), REPRO  # the flushed values are below 2^-14 of the largest


def test_cli_recipe_errors(capsys):
    from firstlight import cli

    assert cli.main(["run", "attention", "--seq", "8", "--dim", "4", "--recipe", "fp16"]) == cli.EXIT_CANNOT_START
    assert "invalid choice: 'fp16' (choose from 'int8', 'fp8-e4m3', 'fp8-e5m2')" in capsys.readouterr().err
    argv = ["run", "attention", "--seq", "8", "--dim", "4", "--recipe", "fp8-e5m2", "--rev", "B1", "--formats", "int8"]
    assert cli.main(argv) == cli.EXIT_CANNOT_START
    err = capsys.readouterr().err
    assert "recipe fp8-e5m2 runs an e5m2 MATMUL, and this chip is built without that format" in err
    assert cli.main(["run", "attention", "--help"]) == 0
    out = capsys.readouterr().out
    assert all(name in out for name in ATTENTION_RECIPES)


def test_fl_nu_001_refuses_a_conversion_it_cannot_flush(tmp_path, monkeypatch):
    """The flush needs x >= 0 (P = exp(...)); converting any other tile to FP8 on such a revision
    is refused with the kernel's line, not converted with subnormals left in."""
    from conftest import source_module
    from kernels import tile
    from kernels.tile.ir import TileError
    from rtl.config import ChipConfig
    from workarounds.constraints import LowpConstraints

    m = source_module(tmp_path, monkeypatch, "cvt_toys", """
        from kernels import tile

        def signed(x, out):
            t = tile.load(x[0:1])
            tile.to_b(t - 1.0, 256.0, by="b", fmt="e4m3")
            tile.store(out[0:1], t)
    """)
    specs = [tile.TensorSpec("x", 1, 16), tile.TensorSpec("out", 1, 16, role="out")]
    daz = {"lowp": LowpConstraints(fp8_subnormals_flushed=True)}
    with pytest.raises(TileError, match=r"cvt_toys.py:\d+: on this revision FP8 subnormals read as zero"):
        tile.build("signed", m.signed, ChipConfig(), specs, {}, dram_bytes=1 << 20, bus_bytes=4, constraints=daz)
    tile.build("signed", m.signed, ChipConfig(), specs, {}, dram_bytes=1 << 20, bus_bytes=4)  # no erratum: fine
