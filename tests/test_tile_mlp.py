"""The fused int8 MLP block in the tile language (kernels/tiled/mlp.py, golden/mlp.py).

Host tests: the golden's arithmetic and the planner (every planned tiling compiles). Simulator
tests (`-m sim`): bit-exact against the golden on revisions B1 and A0 (whose errata the compiler
mitigates), on ragged shapes, in each loop order, on Verilator (4x4 and 8x8) and on Icarus.
"""
import shutil

import numpy as np
import pytest

from golden.mlp import gelu_bits, gelu_tanh64, mlp as golden_mlp, reference
from golden.vector import bits, floats
from kernels.tile.spec import registry
from rtl.board import BoardConfig
from rtl.config import ChipConfig

SEED = 1


def _params(**kw):
    p = {q.name: q.default for q in registry()["mlp"].params}
    p.update(kw)
    return p


def _compile(config, **kw):
    return registry()["mlp"].compile(_params(**kw), config, BoardConfig().resolve(config))


def _repro(params, rev, sim, extremes, array="4x4"):
    flags = " ".join(f"--{k.replace('_', '-')} {v}" for k, v in params.items())
    return (f"firstlight run mlp {flags} --rev {rev} --sim {sim} --array {array} --seed {SEED}"
            + (" --extremes" if extremes else ""))


# ---- the golden ---------------------------------------------------------------------------------

def test_gelu_of_zero_is_zero_so_padding_adds_nothing():
    assert floats(gelu_bits(bits(np.zeros(4, np.float32)))).tolist() == [0.0] * 4
    rng = np.random.default_rng(SEED)
    w1 = rng.integers(-20, 20, (9, 7), dtype=np.int8)
    x = rng.integers(-127, 127, (7, 5), dtype=np.int8)
    w2 = rng.integers(-127, 127, (6, 9), dtype=np.int8)
    y, _ = golden_mlp(w1, x, w2, 2.0 ** -10, 16.0)
    # the chip's padding: hidden rows of W1^T that are zero, W2^T columns of anything
    w1p = np.vstack([w1, np.zeros((3, 7), np.int8)])
    w2p = np.hstack([w2, rng.integers(-127, 127, (6, 3), dtype=np.int8)])
    yp, _ = golden_mlp(w1p, x, w2p, 2.0 ** -10, 16.0)
    assert np.array_equal(y, yp)


def test_gelu_bits_is_the_tanh_gelu_to_fp32_accuracy():
    h = np.linspace(-6, 6, 4001, dtype=np.float32)
    g = floats(gelu_bits(bits(h))).astype(np.float64)
    assert np.max(np.abs(g - gelu_tanh64(h))) < 2e-6


def test_golden_is_close_to_the_float64_reference():
    spec = registry()["mlp"]
    p = _params(tokens=16, d_in=16, d_hidden=32, d_out=16)
    ins = spec.inputs(p, SEED, False)
    y = spec.golden(ins, p, 4)["yt"].astype(np.float64)
    ref = reference(ins["w1t"], ins["xt"], ins["w2t"][:, :32], p["s1"], p["s2"])
    sqnr = 10 * np.log10(np.sum(ref ** 2) / np.sum((y - ref) ** 2))
    assert sqnr > 25, sqnr


# ---- the planner: every tiling it picks compiles (A0's layout rules not included here) ---------

SHAPES = [(5, 7, 9, 6), (37, 19, 50, 13), (64, 64, 256, 64), (33, 1000, 40, 20), (20, 64, 64, 300),
          (8, 4096, 16, 8), (1, 1, 1, 1)]


@pytest.mark.parametrize("array", [(4, 4), (8, 8)])
@pytest.mark.parametrize("shape", SHAPES)
def test_planned_tilings_compile(array, shape):
    t, i, h, o = shape
    for order in ("auto", "spill"):
        c = _compile(ChipConfig(rows=array[0], cols=array[1]), tokens=t, d_in=i, d_hidden=h, d_out=o, order=order)
        assert c.commands, (shape, order)


SMALL = ChipConfig(operand_depth=128, acc_depth=128)        # SRAMs of 128 words: a small MLP spills
SPILLS = dict(tokens=4, d_in=8, d_hidden=120, d_out=120)


def test_auto_spills_when_the_hidden_activations_do_not_fit():
    for order in ("stream", "resident"):
        with pytest.raises(Exception, match="order spill"):
            _compile(SMALL, order=order, **SPILLS)
    auto, spill = _compile(SMALL, **SPILLS), _compile(SMALL, order="spill", **SPILLS)
    assert len(auto.commands) == len(spill.commands)


# ---- on the simulators ----------------------------------------------------------------------------

RAGGED = [
    ({"tokens": 5, "d_in": 7, "d_hidden": 9, "d_out": 6}, False),
    ({"tokens": 10, "d_in": 6, "d_hidden": 13, "d_out": 7, "order": "resident", "gh": 2, "go": 1, "kc": 5}, False),
    ({"tokens": 10, "d_in": 6, "d_hidden": 13, "d_out": 7, "order": "stream", "gb": 1, "gh": 2, "go": 1, "kc": 4}, True),
    ({"tokens": 10, "d_in": 6, "d_hidden": 13, "d_out": 7, "order": "spill", "gh": 2, "go": 1}, False),
    ({"tokens": 19, "d_in": 21, "d_hidden": 30, "d_out": 11}, True),
    ({"tokens": 19, "d_in": 21, "d_hidden": 30, "d_out": 11, "order": "spill"}, False),
]


def _run(cases, rev, sim, array=(4, 4)):
    from cosim.build import Variant
    from cosim.jobs import run_job
    from firstlight.jobs.tile import tile_cases_job

    variant = Variant(config=ChipConfig(rows=array[0], cols=array[1]), revision=rev)
    results = run_job(tile_cases_job, {"cases": [["mlp", p, x] for p, x in cases], "seed": SEED},
                      variant=variant, sim=sim).value
    assert len(results) == len(cases)
    bad = [(r, _repro(p, rev, sim, x, f"{array[0]}x{array[1]}")) for r, (p, x) in zip(results, cases)
           if not r["passed"]]
    assert not bad, "\n".join(f"first wrong word {r['mismatch']}; reproduce: {cmd}" for r, cmd in bad)
    return results


@pytest.mark.sim
@pytest.mark.parametrize("rev", ["B1", "A0"])
def test_mlp_bit_exact_verilator(rev):
    results = _run(RAGGED, rev, "verilator")
    for r, (p, extremes) in zip(results, RAGGED):
        assert extremes or r["sqnr_db"] > 25, (p, r["sqnr_db"])         # --extremes saturates q
    if rev == "A0":
        assert {"FL-ME-001", "FL-ME-002", "FL-SR-001"} <= set(results[0]["mitigations"])


@pytest.mark.sim
@pytest.mark.parametrize("rev", ["B1", "A0"])
def test_mlp_bit_exact_verilator_8x8(rev):
    _run([({"tokens": 21, "d_in": 30, "d_hidden": 70, "d_out": 11}, False),
          ({"tokens": 21, "d_in": 30, "d_hidden": 70, "d_out": 11, "order": "spill", "gh": 3}, True)],
         rev, "verilator", array=(8, 8))


@pytest.mark.sim
@pytest.mark.skipif(shutil.which("iverilog") is None, reason="Icarus Verilog is not installed")
@pytest.mark.parametrize("rev", ["B1", "A0"])
def test_mlp_bit_exact_icarus(rev):
    _run([({"tokens": 5, "d_in": 7, "d_hidden": 9, "d_out": 6}, False),
          ({"tokens": 6, "d_in": 5, "d_hidden": 10, "d_out": 3, "order": "spill"}, False)], rev, "icarus")


@pytest.mark.sim
@pytest.mark.parametrize("rev", ["B1", "A0"])
def test_mlp_auto_spill_on_small_srams_verilator(rev):
    from cosim.build import Variant
    from cosim.jobs import run_job
    from firstlight.jobs.tile import tile_cases_job

    r, = run_job(tile_cases_job, {"cases": [["mlp", SPILLS, False]], "seed": SEED},
                 variant=Variant(config=SMALL, revision=rev), sim="verilator").value
    assert r["passed"], (f"first wrong word {r['mismatch']}; reproduce (no CLI option sets the SRAM depth): "
                         f"run_job(tile_cases_job, {{'cases': [['mlp', {SPILLS}, False]], 'seed': {SEED}}}, "
                         f"variant=Variant(config=ChipConfig(operand_depth=128, acc_depth=128), "
                         f"revision='{rev}'), sim='verilator')")
