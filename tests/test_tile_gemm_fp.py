"""The low-precision (FP8 / MX) GEMM in the tile language (kernels/tiled/gemm_fp.py, "gemm_fp"; the
golden is golden.mx.mx_matmul_bits, written from docs/numerics.md).

Host tests: it compiles at the bench shape with FP MATMULs that read their scales from SA / SB;
the errata passes on FP (FL-ME-002 a FENCE, never an int8 spacer; FL-ME-001 an fp32 FADD);
FL-NU-001's mitigation reaching the host recipe through Target.lowp; clear refusals (mixed
formats, a format the chip lacks, missing scales, a tile off a block, int8 recipes). The race
checker of tests/test_tile.py covers it through its CASES. Simulator tests (``-m sim``):
bit-exact for every FP recipe on a ragged shape on B1 and A0 (Verilator), the extremes, the
FL-NU-001 mitigation seen failing when it is turned off, and once on Icarus.
"""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from conftest import SEED, source_module
from golden import quant
from kernels import tile
from kernels.tile.ir import TileError
from kernels.tile.spec import KernelRefused, Target, registry
from rtl.board import BoardConfig
from rtl.config import ChipConfig
from rtl.isa import Format, Opcode, VecOp, decode
from workarounds import GemmConstraints
from workarounds.constraints import LowpConstraints

CHIP = ChipConfig()
SMALL_FP = ChipConfig(operand_depth=64, acc_depth=64, cmdq_depth=64)  # the smallest SRAMs an FP chip may have
BOARD = BoardConfig().resolve(CHIP)
A0 = GemmConstraints(b_reserved_top_words=1, avoid_unit_chunk=True, repeat_first_a_word=True)
FP_RECIPES = [n for n, r in quant.RECIPES.items() if r.kind != "int8"]


def _spec():
    return registry()["gemm_fp"]


def _compile(config=CHIP, constraints=None, **kw):
    spec = _spec()
    return spec.compile(spec.resolve(kw), config, BoardConfig().resolve(config), constraints)


def _matmuls(c):
    return [decode(x) for x in c.commands if decode(x)["opcode"] == Opcode.MATMUL]


# ---- compiling -----------------------------------------------------------------------------------

@pytest.mark.parametrize("constraints", [None, A0], ids=["B1", "A0"])
def test_compiles_at_the_bench_shape_with_scaled_fp_matmuls(constraints):
    (bench,) = _spec().bench
    c = _compile(constraints=constraints, **bench)
    assert c.compile_s < 5
    mm = _matmuls(c)
    assert mm and all(d["flags"]["fmt"] == Format.E4M3 for d in mm)
    # every K chunk is whole blocks, so each MATMUL reads one scale word per 32 steps
    assert all(d["length"] % 32 == 0 for d in mm)
    assert {"SA", "SB"} <= set(c.sram_words)
    # 64 x 64 output: 16 x 16 tiles of 256 steps, one MATMUL per tile and chunk
    assert len(mm) == 16 * 16 * (256 // c.kernel_args["kc"])


def test_a_small_chip_on_a0_takes_one_buffer_race_free():
    """64-word operand SRAMs: two buffers of a 32-step block fit (B1), but not with FL-ME-002's
    word per A panel and spacer words (A0): one buffer then, the loads after the MATMULs."""
    from test_tile import races

    assert _compile(config=SMALL_FP, m=9, n=7, k=100).kernel_args["stages"] == 2
    c = _compile(config=SMALL_FP, constraints=A0, m=9, n=7, k=100)
    assert c.kernel_args == {"ga": 1, "gb": 1, "kc": 32, "stages": 1}
    assert races(c.commands, 4 * SMALL_FP.lanes, True) == [], c.dump()


def test_fl_me_002_on_fp_is_a_fence_never_an_int8_spacer():
    c = _compile(constraints=A0, m=21, n=19, k=70, recipe="mxfp8-e4m3-rceil")
    cmds = [decode(x) for x in c.commands]
    mm = [i for i, d in enumerate(cmds) if d["opcode"] == Opcode.MATMUL]
    assert all(cmds[i]["flags"]["fmt"] == Format.E4M3 for i in mm)  # no INT8 spacer among them
    for prev, i in zip(mm, mm[1:]):
        if cmds[prev]["arg0"] != cmds[i]["arg0"]:  # another A panel: drained first
            assert any(cmds[j]["opcode"] == Opcode.FENCE for j in range(prev + 1, i)), c.dump()


FP_TOY = '''
    from kernels import tile

    def one_step_tail(a, b, sa, sb, c):
        """K = 33 in chunks of 32 and 1: the second MATMUL accumulates one step (FL-ME-001)."""
        acc = tile.matmul(tile.load(a[0:1, 0:32]), tile.load(b[0:1, 0:32]))
        acc = tile.matmul(tile.load(a[0:1, 32:33]), tile.load(b[0:1, 32:33]), acc)
        tile.store(c[0, 0:1], acc[0])

    def mixed(a, b, sa, sb, b2, sb2, c):
        tile.store(c[0, 0:1], tile.matmul(tile.load(a[0:1, 0:32]), tile.load(b2[0:1, 0:32]))[0])

    def off_block(a, b, sa, sb, c):
        tile.store(c[0, 0:1], tile.matmul(tile.load(a[0:1, 16:48]), tile.load(b[0:1, 16:48]))[0])

    def plain(a, b, c):
        tile.store(c[0, 0:1], tile.matmul(tile.load(a[0:1, 0:32]), tile.load(b[0:1, 0:32]))[0])
'''


@pytest.fixture
def fp_toys(tmp_path, monkeypatch):
    return source_module(tmp_path, monkeypatch, "fp_toys", FP_TOY)


def _fp_tensors(k=64, fmt="e4m3", scales=True, extra=()):
    T = tile.TensorSpec
    return [T("a", 4, k, fmt, layout="a_panels", scales="sa" if scales else None),
            T("b", k, 4, fmt, layout="b_panels", scales="sb" if scales else None),
            *([T("sa", 4, -(-k // 32), "e8m0", layout="a_panels"), T("sb", -(-k // 32), 4, "e8m0", layout="b_panels")]
              if scales else []),
            *extra, T("c", 4, 4, "fp32", role="out", layout="c_tiles")]


def _build(fn, tensors, config=CHIP, constraints=None):
    return tile.build(fn.__name__, fn, config, tensors, {}, dram_bytes=1 << 22, bus_bytes=4, constraints=constraints)


def test_fl_me_001_on_fp_adds_the_one_step_chunk_in_fp32(fp_toys):
    c = _build(fp_toys.one_step_tail, _fp_tensors(k=33), constraints=A0)
    cmds = [decode(x) for x in c.commands]
    mm = [d for d in cmds if d["opcode"] == Opcode.MATMUL]
    assert [(d["length"], d["flags"]["accumulate"]) for d in mm] == [(32, 0), (1, 0)]  # the tail into scratch
    vecs = [VecOp(d["flags"]["op"]) for d in cmds if d["opcode"] == Opcode.VEC]
    assert vecs == [VecOp.FADD]  # C_old (+) acc, the engine's FP write-back; an IADD would add the bit patterns
    plain = _build(fp_toys.one_step_tail, _fp_tensors(k=33))  # without the erratum: one accumulating MATMUL
    assert [(d["length"], d["flags"]["accumulate"]) for d in _matmuls(plain)] == [(32, 0), (1, 1)]


def test_refusals_name_the_kernel_line(fp_toys):
    T = tile.TensorSpec
    e5 = (T("b2", 64, 4, "e5m2", layout="b_panels", scales="sb2"), T("sb2", 2, 4, "e8m0", layout="b_panels"))
    with pytest.raises(TileError, match=r"fp_toys.py:\d+: matmul of a0 \(e4m3\) and b20 \(e5m2\): one MATMUL has one"):
        _build(fp_toys.mixed, _fp_tensors(extra=e5))
    with pytest.raises(TileError, match=r"fp_toys.py:\d+: this chip was built without the e4m3 format"):
        _build(fp_toys.plain, _fp_tensors(scales=False), config=ChipConfig(formats=("int8", "e5m2")))
    with pytest.raises(TileError, match=r"fp_toys.py:\d+: the e4m3 A tile a0 has no block scales: declare"):
        _build(fp_toys.plain, _fp_tensors(scales=False))
    with pytest.raises(TileError, match=r"fp_toys.py:\d+: a .* blocks of 32 K steps.*lies within one, not steps 16:48"):
        _build(fp_toys.off_block, _fp_tensors())
    with pytest.raises(TileError, match=r"its scales 'sa' must be a 4x2 e8m0 tensor"):
        _build(fp_toys.plain, [*_fp_tensors()[:2], T("sa", 4, 3, "e8m0", layout="a_panels"), *_fp_tensors()[3:]])
    # and through the declaration: a chip without the recipe's format (refused before tracing, so
    # the bring-up and the bench leave it out), an int8 recipe
    spec = _spec()
    no_fp4 = ChipConfig(formats=("int8", "e4m3", "e5m2"))
    p = spec.resolve({"m": 8, "n": 8, "k": 64, "recipe": "mxfp4-e2m1-rceil"})
    assert "runs e2m1 MATMULs, and this chip was built without that format" in spec.refusal(no_fp4, p)
    assert spec.refusal(no_fp4, dict(p, recipe="mxfp8-e5m2-floor")) is None
    with pytest.raises(KernelRefused, match=r"recipe mxfp4-e2m1-rceil runs e2m1 MATMULs"):
        _compile(config=no_fp4, m=8, n=8, k=64, recipe="mxfp4-e2m1-rceil")
    with pytest.raises(TileError, match=r"recipe int8-channel is int8: run it with gemm"):
        _compile(m=8, n=8, k=64, recipe="int8-channel")


# ---- the recipe on the host, FL-NU-001 -------------------------------------------------------------

def _subnormals(codes, fmt):
    man = 3 if fmt == "e4m3" else 2
    return int(np.count_nonzero((codes & 0x7F) >> man == 0) - np.count_nonzero((codes & 0x7F) == 0))


def test_fl_nu_001_reaches_the_host_recipe_through_the_target():
    spec = _spec()
    p = spec.resolve({"m": 8, "n": 8, "k": 64, "recipe": "fp8-e4m3-cast"})
    ins = spec.inputs(p, SEED, True)  # the extremes: many values below E4M3's normal range
    assert _subnormals(ins["a"], "e4m3") > 0 and (ins["a_scales"] == 127).all()
    assert spec.prepare(ins, p, Target(CHIP, BOARD, None, LowpConstraints())) == {}
    fixed = spec.prepare(ins, p, Target(CHIP, BOARD, A0, LowpConstraints(fp8_subnormals_flushed=True)))
    assert _subnormals(fixed["a"], "e4m3") == 0 and _subnormals(fixed["b"], "e4m3") == 0
    assert (fixed["a_scales"] != 127).any()  # per-block rceil scales keep the elements normal
    want = quant.mx_quantize(quant.pad_to_block(ins["a_f32"], axis=1), "e4m3", "rceil", axis=1)
    assert np.array_equal(fixed["a_scales"], want[1])
    # codes a session gives without their floats are flushed as they are
    codes_only = {k: v for k, v in ins.items() if not k.endswith("_f32")}
    flushed = spec.prepare(codes_only, p, Target(CHIP, BOARD, A0, LowpConstraints(fp8_subnormals_flushed=True)))
    assert set(flushed) == {"a", "b"} and _subnormals(flushed["a"], "e4m3") == 0


def test_the_golden_follows_the_chunks_and_the_scales():
    """The golden is not blind to what it checks: another K chunking (fp32 rounding per MATMUL)
    or unit scales in place of the MX ones give other bits."""
    spec = _spec()
    p = spec.resolve({"m": 8, "n": 8, "k": 256, "recipe": "mxfp8-e4m3-floor", "kc": 64})
    ins = spec.inputs(p, SEED, True)  # blocks of very different scales: their fp32 sums round
    c = spec.golden(ins, p, 4)["c"].view(np.uint32)
    assert not np.array_equal(c, spec.golden(ins, dict(p, kc=256), 4)["c"].view(np.uint32))
    unit = dict(ins, a_scales=np.full_like(ins["a_scales"], 127))
    assert not np.array_equal(c, spec.golden(unit, p, 4)["c"].view(np.uint32))
    normal = spec.inputs(p, SEED, False)
    from golden.metrics import sqnr_db
    assert sqnr_db(spec.reference(normal, p)["c"], spec.golden(normal, p, 4)["c"].astype(np.float64)) > 25


# ---- on the simulators ----------------------------------------------------------------------------

RAGGED = {"m": 21, "n": 19, "k": 70}  # K padded to 96: three blocks, in chunks of whole blocks


def _repro(params, rev, sim, extremes, policy=None, config=CHIP):
    flags = " ".join(f"--{k} {v}" for k, v in params.items())
    if config is not CHIP:
        flags += " (on ChipConfig(operand_depth=64, acc_depth=64, cmdq_depth=64): tests/test_tile_gemm_fp.py SMALL_FP)"
    pol = "".join(f" --errata-policy {k}={v}" for k, v in (policy or {}).items())
    return f"firstlight run gemm_fp {flags} --rev {rev} --sim {sim} --seed {SEED}" + (" --extremes" if extremes else "") + pol


def _run(cases, rev, sim, policy=None, expect=True, config=CHIP):
    from cosim.build import Variant
    from cosim.jobs import run_job
    from firstlight.jobs.tile import tile_cases_job

    results = run_job(tile_cases_job, {"cases": [["gemm_fp", p, x] for p, x in cases], "seed": SEED,
                                       "errata_policy": policy},
                      variant=Variant(config=config, revision=rev), sim=sim).value
    assert len(results) == len(cases)
    bad = [(r, _repro(p, rev, sim, x, policy, config)) for r, (p, x) in zip(results, cases) if r["passed"] != expect]
    what = "first wrong word" if expect else "expected a mismatch, got a pass"
    assert not bad, "\n".join(f"{r['params']['recipe']}: {what} {r['mismatch']}; reproduce: {cmd}" for r, cmd in bad)
    return results


@pytest.mark.sim
@pytest.mark.parametrize("rev", ["B1", "A0"])
def test_every_fp_recipe_bit_exact_verilator(rev):
    cases = [({**RAGGED, "recipe": r}, False) for r in FP_RECIPES]
    cases += [({"m": 9, "n": 7, "k": 300, "recipe": "fp8-e5m2-tensor"}, True),
              ({"m": 16, "n": 12, "k": 130, "recipe": "mxfp8-e4m3-floor", "ga": 2, "gb": 3, "kc": 64}, True),
              ({"m": 8, "n": 8, "k": 64, "recipe": "fp8-e4m3-cast"}, True)]
    results = _run(cases, rev, "verilator")
    for r, (p, extremes) in zip(results, cases):
        if not extremes:  # N(0, 1) data: about 28 dB for FP8 E4M3, 22 for E5M2, 15 for E2M1
            assert r["sqnr_db"] > 12, (p, r["sqnr_db"])
    if rev == "A0":
        assert {"FL-ME-002", "FL-NU-001"} <= set(results[0]["mitigations"])


@pytest.mark.sim
@pytest.mark.parametrize("rev", ["B1", "A0"])
def test_small_srams_bit_exact_verilator(rev):
    """The 64-word FP chip: double-buffered on B1, one buffer on A0."""
    cases = [({"m": 9, "n": 7, "k": 100, "recipe": "mxfp8-e5m2-rceil"}, False),
             ({"m": 9, "n": 7, "k": 100, "recipe": "fp8-e4m3-tensor"}, True)]
    _run(cases, rev, "verilator", config=SMALL_FP)


@pytest.mark.sim
def test_fl_nu_001_mitigation_is_what_makes_a0_match():
    """Seen failing: on A0 with FL-NU-001's mitigation off, cast FP8 on the extremes (subnormal
    codes the chip reads as zero) differs from the golden as specified."""
    _run([({"m": 8, "n": 8, "k": 64, "recipe": "fp8-e4m3-cast"}, True)], "A0", "verilator",
         policy={"FL-NU-001": "off"}, expect=False)


ONE_STEP = '''
    import numpy as np

    import golden
    from kernels import tile
    from kernels.tile.runtime import TensorSpec
    from kernels.tile.spec import KernelSpec


    def one_step_tail(a, b, sa, sb, c):
        acc = tile.matmul(tile.load(a[0:1, 0:32]), tile.load(b[0:1, 0:32]))
        acc = tile.matmul(tile.load(a[0:1, 32:33]), tile.load(b[0:1, 32:33]), acc)  # one step: FL-ME-001
        tile.store(c[0, 0:1], acc[0])


    def _codes(rng, shape):  # normal E4M3 codes only (no NaN, no subnormal: FL-NU-001 is not this test's)
        e, m = rng.integers(1, 16, shape), rng.integers(0, 8, shape)
        m = np.where((e == 15) & (m == 7), 6, m)
        return ((rng.integers(0, 2, shape) << 7) | (e << 3) | m).astype(np.uint8)


    def _inputs(p, seed, extremes):
        rng = np.random.default_rng(seed)
        return {"a": _codes(rng, (4, 33)), "b": _codes(rng, (33, 4)),
                "sa": rng.integers(120, 135, (4, 2)).astype(np.uint8), "sb": rng.integers(120, 135, (2, 4)).astype(np.uint8)}


    SPECS = [KernelSpec(
        name="toyfpk1", summary="an FP MATMUL chain whose last chunk is one step", source=one_step_tail, params=(),
        tensors=lambda p: [TensorSpec("a", 4, 33, "e4m3", layout="a_panels", scales="sa"),
                           TensorSpec("b", 33, 4, "e4m3", layout="b_panels", scales="sb"),
                           TensorSpec("sa", 4, 2, "e8m0", layout="a_panels"), TensorSpec("sb", 2, 4, "e8m0", layout="b_panels"),
                           TensorSpec("c", 4, 4, "fp32", role="out", layout="c_tiles")],
        inputs=_inputs, kernel_args=lambda p, t: {},
        golden=lambda i, p, lanes: {"c": golden.mx.mx_matmul(i["a"], i["b"], i["sa"], i["sb"], "e4m3", chunks=[32, 1])})]
'''


@pytest.mark.sim
def test_fl_me_001_fadd_lowering_is_bit_exact_and_needed_on_a0(tmp_path, monkeypatch):
    """A chain of a 32-step and a 1-step FP MATMUL, in a kernel module of its own (the simulator
    process imports it too): bit-exact on B1 and on A0 with the FADD lowering; on A0 with
    FL-ME-001's mitigation off the one-step MATMUL overwrites the first chunk (seen failing)."""
    from cosim.build import Variant
    from cosim.jobs import run_job
    from firstlight.jobs.tile import tile_cases_job

    source_module(tmp_path, monkeypatch, "toy_fp_k1", ONE_STEP, register=True)
    for rev, policy, passes in (("B1", None, True), ("A0", None, True), ("A0", {"FL-ME-001": "off"}, False)):
        (r,) = run_job(tile_cases_job, {"cases": [["toyfpk1", {}, False]], "seed": SEED, "errata_policy": policy},
                       variant=Variant(config=CHIP, revision=rev), sim="verilator").value
        assert r["passed"] == passes, (rev, policy, r["mismatch"],
                                       f"reproduce: FIRSTLIGHT_SEED={SEED} .venv/bin/python -m pytest "
                                       f"tests/test_tile_gemm_fp.py -k fl_me_001_fadd")


@pytest.mark.sim
@pytest.mark.skipif(shutil.which("iverilog") is None, reason="Icarus Verilog is not installed")
def test_bit_exact_icarus():
    _run([({"m": 9, "n": 6, "k": 40, "recipe": "mxfp8-e5m2-rceil"}, False)], "A0", "icarus")
