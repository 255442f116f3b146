"""The int8 GEMM in the tile language with its epilogues (kernels/tiled/gemm.py; golden.gemm_int8
and golden/epilogue.py).

Host tests: the compiler's in-place rule for the epilogue's vector work on an accumulator row, a
clear refusal for mixed int32/fp32 operands and for a chip without the vector unit, the tile
groups the planner picks. Simulator tests (`-m sim`): bit-exact against the golden for every
epilogue on revisions B1 and A0 (whose errata the compiler mitigates), on ragged shapes and the
extreme values, on Verilator and once on Icarus.
"""
import shutil

import numpy as np
import pytest

from conftest import source_module
from kernels import tile
from kernels.tile.spec import KernelRefused, registry
from rtl.board import BoardConfig
from rtl.config import ChipConfig
from rtl.isa import Opcode, decode

SEED = 1
CHIP = ChipConfig()


def _compile(config=CHIP, **kw):
    spec = registry()["gemm"]
    return spec.compile(spec.resolve(kw), config, BoardConfig().resolve(config))


# ---- the compiler's rules for an epilogue on an accumulator row ---------------------------------

ROW_KERNELS = '''
    from kernels import tile

    def reread(a, b, bias, c, c2):
        acc = tile.matmul(tile.load(a[0:1, 0:1]), tile.load(b[0:1, 0:1]))
        bb = tile.load(bias[0])
        row = acc[0]
        tile.store(c[0, 0:1], row + bb[0, 0:1])
        tile.store(c2[0, 0:1], row)            # the raw row is still wanted: no in-place add

    def once(a, b, bias, c, c2):
        acc = tile.matmul(tile.load(a[0:1, 0:1]), tile.load(b[0:1, 0:1]))
        bb = tile.load(bias[0])
        tile.store(c[0, 0:1], acc[0] + bb[0, 0:1])

    def mixed(a, b, bias, x, c, c2):
        acc = tile.matmul(tile.load(a[0:1, 0:1]), tile.load(b[0:1, 0:1]))
        tile.store(c[0, 0:1], acc[0] + tile.load(x[0]))
'''


@pytest.fixture
def row_kernels(tmp_path, monkeypatch):
    return source_module(tmp_path, monkeypatch, "epilogue_rows", ROW_KERNELS)


def _tensors(*extra):
    return [tile.TensorSpec("a", 4, 4, "int8", layout="a_panels"), tile.TensorSpec("b", 4, 4, "int8", layout="b_panels"),
            tile.TensorSpec("bias", 1, 4, "int32"), *extra,
            tile.TensorSpec("c", 4, 4, "int32", role="out", layout="c_tiles"),
            tile.TensorSpec("c2", 4, 4, "int32", role="out", layout="c_tiles")]


def _iadd(c):
    (cmd,) = [decode(x) for x in c.commands if decode(x)["opcode"] == Opcode.VEC]
    return cmd["arg0"], cmd["arg2"]  # (first operand's word, destination word)


def test_the_bias_add_is_in_place_only_when_the_row_is_not_read_again(row_kernels):
    for fn, in_place in ((row_kernels.reread, False), (row_kernels.once, True)):
        c = tile.build(fn.__name__, fn, CHIP, _tensors(), {}, dram_bytes=1 << 22, bus_bytes=4)
        src, dst = _iadd(c)
        assert (src == dst) is in_place, (fn.__name__, src, dst, c.dump())


def test_int32_plus_fp32_is_refused_with_the_line(row_kernels):
    with pytest.raises(tile.TileError, match=r"epilogue_rows.py:\d+: .*int32"):
        tile.build("mixed", row_kernels.mixed, CHIP, _tensors(tile.TensorSpec("x", 1, 4, "fp32")), {},
                   dram_bytes=1 << 22, bus_bytes=4)


def test_an_epilogue_needs_the_vector_unit_and_says_so():
    _compile(ChipConfig(vector=False), m=8, n=8, k=8)  # no epilogue: the engine alone
    with pytest.raises((tile.TileError, KernelRefused), match="vector unit"):
        _compile(ChipConfig(vector=False), m=8, n=8, k=8, epilogue="requant")


def test_groups_are_balanced_and_leave_room_for_the_epilogue_words():
    # 16 x 16 tiles of C on a 4x4 array: the accumulator keeps 2 x 16 bias and parameter words,
    # so no group holds all 16 columns of tiles; groups of equal size, never 15 + 1
    c = _compile(m=64, n=64, k=64, epilogue="requant")
    ga, gb = c.kernel_args["ga"], c.kernel_args["gb"]
    assert ga * gb * CHIP.rows + 2 * 16 <= CHIP.acc_depth, (ga, gb)
    for t, g in ((16, ga), (16, gb)):
        assert g == -(-t // -(-t // g)), (ga, gb)  # no smaller group makes as few groups
    assert (ga, gb) == (16, 8)


# ---- on the simulators ----------------------------------------------------------------------------

CASES = [
    ({"m": 21, "n": 19, "k": 17, "epilogue": "requant"}, False),
    ({"m": 21, "n": 19, "k": 17, "epilogue": "relu"}, True),
    ({"m": 12, "n": 8, "k": 9, "kc": 4, "epilogue": "relu"}, False),
    ({"m": 32, "n": 24, "k": 40, "ga": 3, "gb": 2, "kc": 8, "epilogue": "requant"}, True),
    ({"m": 5, "n": 33, "k": 300, "epilogue": "requant"}, False),
    ({"m": 9, "n": 7, "k": 300}, True),  # no epilogue: int32 sums that wrap
    ({"m": 21, "n": 19, "k": 17, "epilogue": "sum"}, True),  # C and its sum, wrapping, over 3 x 3 groups
    ({"m": 4, "n": 4, "k": 20, "epilogue": "sum"}, False),
]


def _repro(params, rev, sim, extremes):
    flags = " ".join(f"--{k} {v}" for k, v in params.items())
    return f"firstlight run gemm {flags} --rev {rev} --sim {sim} --seed {SEED}" + (" --extremes" if extremes else "")


def _run(cases, rev, sim):
    from cosim.build import Variant
    from cosim.jobs import run_job
    from firstlight.jobs.tile import tile_cases_job

    results = run_job(tile_cases_job, {"cases": [["gemm", p, x] for p, x in cases], "seed": SEED},
                      variant=Variant(config=CHIP, revision=rev), sim=sim).value
    assert len(results) == len(cases)
    bad = [(r, _repro(p, rev, sim, x)) for r, (p, x) in zip(results, cases) if not r["passed"]]
    assert not bad, "\n".join(f"first wrong word {r['mismatch']}; reproduce: {cmd}" for r, cmd in bad)
    return results


@pytest.mark.sim
@pytest.mark.parametrize("rev", ["B1", "A0"])
def test_gemm_epilogues_bit_exact_verilator(rev):
    results = _run(CASES, rev, "verilator")
    for r, (p, extremes) in zip(results, CASES):
        if p.get("epilogue", "none") in ("requant", "relu") and not extremes:   # int8 out: about 40 dB
            assert r["sqnr_db"] > 30, (p, r["sqnr_db"])
    if rev == "A0":
        assert {"FL-ME-001", "FL-ME-002"} <= set(results[0]["mitigations"])


@pytest.mark.sim
@pytest.mark.skipif(shutil.which("iverilog") is None, reason="Icarus Verilog is not installed")
def test_gemm_epilogue_bit_exact_icarus():
    _run([({"m": 9, "n": 6, "k": 10, "epilogue": "relu"}, False)], "A0", "icarus")


def test_golden_relu_is_requant_clamped_at_zero():
    spec = registry()["gemm"]
    p = spec.resolve({"m": 9, "n": 7, "k": 30, "epilogue": "requant"})
    ins = spec.inputs(p, SEED, False)
    q = spec.golden(ins, p, 4)["c"]
    pr = dict(p, epilogue="relu")
    ins_r = spec.inputs(pr, SEED, False)
    assert np.array_equal(ins["a"], ins_r["a"]) and np.array_equal(ins["bias"], ins_r["bias"])
    r = spec.golden(ins_r, pr, 4)["c"]
    assert q.min() < 0 and np.array_equal(r, np.maximum(q, 0))
    assert q.min() >= -128 and q.max() <= 127
