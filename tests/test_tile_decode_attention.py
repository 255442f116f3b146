"""Decode attention in the tile language (kernels/tiled/decode_attention.py): its golden against the
float64 mathematics (host only), its refusals, and the kernel bit-exact against its golden on the
simulators, on A0 (errata mitigated by the compiler) and B1."""
import shutil
from types import SimpleNamespace

import numpy as np
import pytest

from cosim.build import Variant
from cosim.jobs import run_job
from firstlight.jobs.tile import tile_cases_job
from golden.decode_attention import decode_attention_bits
from kernels.tile.spec import registry

NAME = "decode_attention"
SEED = 1


def sqnr_db(ref, got):
    return 10 * np.log10(np.sum(ref ** 2) / np.sum((ref - got) ** 2))


def spec():
    return registry()[NAME]


def full(p):
    """The parameters with the declaration's defaults filled in."""
    return {prm.name: prm.default for prm in spec().params} | p


def command(p, extremes, rev, sim, seed=SEED):
    opts = " ".join(f"--{k.replace('_', '-')} {v}" for k, v in p.items())
    return (f"firstlight run {NAME} {opts}{' --extremes' if extremes else ''} --rev {rev} "
            f"--sim {sim} --seed {seed}")


def run_cases(cases, rev, sim):
    """Run [(params, extremes), ...] in one simulator job; fail with how to reproduce each one."""
    results = run_job(tile_cases_job, {"cases": [[NAME, p, x] for p, x in cases], "seed": SEED},
                      variant=Variant(revision=rev), sim=sim).value
    bad = [f"{command(p, x, rev, sim)}\n    mismatch: {r['mismatch']}"
           for (p, x), r in zip(cases, results) if not r["passed"]]
    assert not bad, "decode_attention differs from its golden; reproduce with:\n  " + "\n  ".join(bad)
    return results


# --- host only -------------------------------------------------------------------------------

@pytest.mark.parametrize("p", [
    {"seq": 37, "dim": 8, "heads": 3, "block": 16, "chunk": 8},
    {"seq": 300, "dim": 16, "heads": 4, "block": 64, "chunk": 32},
    {"seq": 257, "dim": 32, "heads": 2, "block": 256, "chunk": 16},
])
def test_golden_follows_the_mathematics(p):
    p = full(p)
    ins = spec().inputs(p, SEED, False)
    got = spec().golden(ins, p, 4)["out"].astype(np.float64)
    want = spec().reference(ins, p)["out"]
    assert got.shape == want.shape == (p["dim"], p["heads"])
    assert sqnr_db(want, got) > 33, (p, sqnr_db(want, got))


def test_golden_ignores_the_cache_past_seq():
    p = full({"seq": 45, "dim": 8, "heads": 4, "block": 16, "chunk": 8})
    ins = spec().inputs(p, SEED, False)
    other = {n: a.copy() for n, a in ins.items()}
    other["k"][45:] = 127
    other["vt"][:, 45:] = -128
    a, b = (decode_attention_bits(x["k"], x["qt"], x["vt"], p, 4)["out"] for x in (ins, other))
    assert np.array_equal(a, b)


def test_dram_partials_change_no_bit_of_the_output():
    p = full({"seq": 101, "dim": 8, "heads": 3, "block": 32, "chunk": 16})
    ins = spec().inputs(p, SEED, False)
    chip = spec().golden(ins, p, 4)
    dram = spec().golden(ins, p | {"partials": "dram"}, 4)
    assert chip.keys() == {"out"} and dram.keys() == {"out", "m_part", "l_part", "o_part"}
    assert np.array_equal(chip["out"].view(np.uint32), dram["out"].view(np.uint32))
    assert dram["m_part"].shape == dram["l_part"].shape == (4, 3)
    assert dram["o_part"].shape == (4 * 8, 3)


@pytest.mark.parametrize("p, words", [
    ({"block": 30}, "block must be a multiple"),
    ({"chunk": 6}, "chunk must be a multiple"),
    ({"heads": 5}, "heads must be at most"),
    ({"cap": 40}, "cap must be a multiple"),
    ({"dim": 10, "partials": "dram"}, "dim must be a multiple"),
])
def test_refuses_what_it_cannot_tile(p, words):
    v = Variant(revision="B1")
    with pytest.raises(ValueError, match=words):
        spec().compile(full({"seq": 100} | p), v.config, v.resolved_board)


def test_refuses_a_non_square_array():
    target = SimpleNamespace(config=SimpleNamespace(rows=4, cols=8, lanes=8))   # a 4x8 chip
    with pytest.raises(ValueError, match="square array"):
        spec().kernel_args(full({"seq": 100}), target)


def test_bench_and_bringup_shapes_compile():
    v = Variant(revision="B1")
    for p in spec().bench + spec().bringup:
        assert spec().compile(full(p), v.config, v.resolved_board).commands


@pytest.mark.parametrize("p", [
    {"seq": 37, "dim": 8, "heads": 3, "block": 16, "chunk": 8},
    {"seq": 101, "dim": 8, "heads": 4, "block": 48, "chunk": 16},
    {"seq": 90, "dim": 8, "heads": 2, "block": 32, "chunk": 16, "partials": "dram"},
])
def test_compiled_stream_is_race_free(p):
    from test_tile import races        # docs/tile.md: tests/test_tile.py's races(...) checker
    v = Variant(revision="B1")
    c = spec().compile(full(p), v.config, v.resolved_board)
    assert races(list(c.commands), 4 * v.config.lanes) == [], p


# --- on the simulators -----------------------------------------------------------------------

CASES = [
    ({"seq": 37, "dim": 8, "heads": 3, "block": 16, "chunk": 8}, False),     # ragged panel
    ({"seq": 64, "dim": 8, "heads": 4, "block": 32, "chunk": 32}, False),    # no ragged panel
    ({"seq": 101, "dim": 12, "heads": 4, "block": 48, "chunk": 16}, True),   # extremes
    ({"seq": 3, "dim": 5, "heads": 1, "block": 64, "chunk": 32}, False),     # one panel, 3 keys
    ({"seq": 90, "dim": 8, "heads": 2, "block": 32, "chunk": 16, "cap": 112,
      "partials": "dram"}, False),                                           # partials via DRAM
]


@pytest.mark.sim
@pytest.mark.parametrize("rev", ["A0", "B1"])
def test_bit_exact_on_verilator(rev):
    results = run_cases(CASES, rev, "verilator")
    for (p, x), r in zip(CASES, results):
        assert x or r["sqnr_db"] > 33, (command(p, x, rev, "verilator"), r["sqnr_db"])
    if rev == "A0":
        assert {"FL-ME-002", "FL-SR-001"} <= set(results[0]["mitigations"]), results[0]


@pytest.mark.sim
def test_a_longer_cache_on_verilator():
    run_cases([({"seq": 501, "dim": 16, "heads": 4, "block": 64, "chunk": 64}, False)],
              "A0", "verilator")


@pytest.mark.sim
@pytest.mark.skipif(shutil.which("iverilog") is None, reason="Icarus Verilog is not installed")
@pytest.mark.parametrize("rev", ["A0", "B1"])
def test_bit_exact_on_icarus(rev):
    run_cases([CASES[0], CASES[4]], rev, "icarus")
