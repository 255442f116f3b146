"""The vector unit alone (Amaranth simulator, wrapped with an accumulator SRAM) against
golden/vector.py: every op, every operand-b form, specials and random bit patterns, in place
and back to back."""

from __future__ import annotations

import numpy as np
import pytest
from amaranth.hdl import Elaboratable, Module
from amaranth.lib.memory import Memory
from amaranth.sim import Simulator

from conftest import SEED
from golden.vector import vector_op
from rtl.config import ChipConfig
from rtl.isa import VEC_TO_OPERAND, VecB, VecDst, VecOp
from rtl.vector import VectorUnit

SPECIAL = np.array([0x00000000, 0x80000000, 0x00000001, 0x807FFFFF, 0x00800000, 0x3F800000, 0xBF800000,
                    0x7F7FFFFF, 0xFF7FFFFF, 0x7F800000, 0xFF800000, 0x7FC00000, 0xFF800001, 0x3F000000,
                    0x80000000, 0x7FFFFFFF, 0x00000007, 0xC0490FDB], np.uint32)


class _Harness(Elaboratable):
    def __init__(self, cfg: ChipConfig, defects: frozenset = frozenset()):
        self.cfg = cfg
        self.unit = VectorUnit(cfg, defects)
        self.acc_mem = Memory(shape=cfg.acc_word_bits, depth=cfg.acc_depth, init=[])
        self.b_mem = Memory(shape=8 * cfg.lanes, depth=cfg.operand_depth, init=[])  # the B SRAM (conversions)

    def elaborate(self, platform):
        m = Module()
        u = self.unit
        m.submodules.unit = u
        m.submodules.acc_mem = self.acc_mem
        m.submodules.b_mem = self.b_mem
        ra, rb, wp = self.acc_mem.read_port(), self.acc_mem.read_port(), self.acc_mem.write_port()
        bw = self.b_mem.write_port()
        m.d.comb += [ra.addr.eq(u.acc_rd_addr), u.acc_rd_data.eq(ra.data), rb.addr.eq(u.b_rd_addr),
                     u.b_rd_data.eq(rb.data), wp.addr.eq(u.acc_wr_addr), wp.data.eq(u.acc_wr_data),
                     wp.en.eq(u.acc_wr_en), bw.addr.eq(u.op_wr_addr), bw.data.eq(u.op_wr_data),
                     bw.en.eq(u.op_wr_en & u.op_wr_b)]
        return m


def _word(lanes_bits) -> int:
    return sum(int(v) << (32 * j) for j, v in enumerate(lanes_bits))


def run_vec(cfg: ChipConfig, acc: np.ndarray, cmds: list[tuple], dst_sram: VecDst = VecDst.ACC,
            out: dict | None = None, defects: frozenset = frozenset(), e5m2: int = 0) -> tuple[np.ndarray, list[int]]:
    """Run VECs (op, b_form, a, b, count, dst) one after another; the ACC after, and each one's
    busy cycles (``out["b"]``: the B SRAM's words after, when given)."""
    h = _Harness(cfg, defects)
    u = h.unit
    out = {} if out is None else out

    async def tb(ctx):
        for r in range(cfg.acc_depth):
            ctx.set(h.acc_mem.data[r], _word(acc[r]))
        cycles = []
        for n, (op, form, a, b, count, dst) in enumerate(cmds):
            for name, v in (("op", int(op)), ("b_form", int(form)), ("a", a), ("b", b), ("count", count),
                            ("dst", dst), ("dst_sram", int(dst_sram)), ("e5m2", e5m2)):
                ctx.set(getattr(u, name), v)
            ctx.set(u.start, 1)
            await ctx.tick()
            ctx.set(u.start, 0)
            busy = 0
            while ctx.get(u.busy):
                busy += 1
                assert busy < 10 * count + 20, f"VEC #{n}: busy for {busy} cycles"
                await ctx.tick()
            cycles.append(busy)
        out["acc"] = np.array([[(ctx.get(h.acc_mem.data[r]) >> (32 * j)) & 0xFFFFFFFF for j in range(cfg.lanes)]
                               for r in range(cfg.acc_depth)], np.uint32)
        out["cycles"] = cycles
        out["b"] = [ctx.get(h.b_mem.data[r]) for r in range(cfg.operand_depth)]

    sim = Simulator(h)
    sim.add_clock(1e-6)
    sim.add_testbench(tb)
    sim.run()
    return out["acc"], out["cycles"]


def expected(acc: np.ndarray, cmds: list[tuple]) -> np.ndarray:
    acc = acc.copy()
    for op, form, a, b, count, dst in cmds:
        src = acc[a:a + count]
        if form == VecB.VECTOR:
            bb = acc[b:b + count]
        elif form == VecB.LANE:
            bb = acc[b]
        else:
            bb = acc[b, 0]
        acc[dst:dst + count] = vector_op(op.name.lower(), src, bb)
    return acc


CFG = ChipConfig(rows=4, cols=4, operand_depth=64, acc_depth=64, cmdq_depth=16, formats=("int8",))


def _random_acc(rng, depth: int, lanes: int) -> np.ndarray:
    """Half specials, half random: random bits (all exponents, NaNs included) and ordinary values."""
    acc = rng.integers(0, 2**32, size=(depth, lanes), dtype=np.uint64).astype(np.uint32)
    plain = rng.standard_normal((depth, lanes)).astype(np.float32).view(np.uint32)
    acc[::3] = plain[::3]
    acc[1::5] = rng.choice(SPECIAL, size=acc[1::5].shape)
    return acc


@pytest.mark.parametrize("op", [o for o in VecOp if o not in VEC_TO_OPERAND], ids=lambda o: o.name)
def test_vector_op_matches_golden(op):
    rng = np.random.default_rng([SEED, 60, int(op)])
    acc = _random_acc(rng, CFG.acc_depth, CFG.lanes)
    cmds = [(op, VecB.VECTOR, 0, 16, 16, 32),  # disjoint
            (op, VecB.LANE, 40, 5, 6, 40),  # in place, one b word for all
            (op, VecB.SCALAR, 50, 7, 9, 50)]  # in place, lane 0 of b everywhere
    got, cycles = run_vec(CFG, acc, cmds)
    want = expected(acc, cmds)
    bad = np.argwhere(got != want)
    assert not len(bad), (
        f"{op.name}: {len(bad)} lanes differ (reproduce with FIRSTLIGHT_SEED={SEED}); first (word, lane, a, "
        f"rtl, golden): {[(int(r), int(c), hex(acc[r, c]), hex(got[r, c]), hex(want[r, c])) for r, c in bad[:4]]}")
    # one word per cycle: count reads, the compute register and the write
    assert cycles == [16 + 2, 6 + 2, 9 + 2], cycles


def test_vector_back_to_back_chain_reads_results():
    """A second VEC reads what the first wrote (no stale data), on every form."""
    rng = np.random.default_rng([SEED, 61])
    acc = rng.standard_normal((CFG.acc_depth, CFG.lanes)).astype(np.float32).view(np.uint32)
    cmds = [(VecOp.FMUL, VecB.VECTOR, 0, 8, 8, 16), (VecOp.FADD, VecB.SCALAR, 16, 16, 8, 16),
            (VecOp.FMAX, VecB.LANE, 16, 17, 8, 24), (VecOp.RELU, VecB.VECTOR, 24, 0, 8, 24)]
    got, _ = run_vec(CFG, acc, cmds)
    assert np.array_equal(got, expected(acc, cmds)), f"chain differs (seed {SEED})"


def test_vector_i2f_integers():
    """int32 -> fp32 at the rounding boundaries (2**24 + 1, odd values above 2**25, INT32_MIN)."""
    vals = np.array([0, 1, -1, 2**24, 2**24 + 1, 2**24 + 3, -(2**24 + 1), 2**25 + 3, 2**31 - 1, -2**31, 12345678,
                     -7, 33554435, -33554435, 2**30 + 64, 2**30 + 65], np.int64).astype(np.int32).view(np.uint32)
    acc = np.zeros((CFG.acc_depth, CFG.lanes), np.uint32)
    acc[:4] = vals.reshape(4, 4)
    cmds = [(VecOp.I2F, VecB.VECTOR, 0, 0, 4, 8)]
    got, _ = run_vec(CFG, acc, cmds)
    assert np.array_equal(got[8:12], expected(acc, cmds)[8:12]), got[8:12]


def test_vector_cvt_i8_into_b():
    """CVT_I8 with a scalar scale into B words: rounding ties to even, saturation both ways, NaN."""
    from golden.vector import to_int8

    rng = np.random.default_rng([SEED, 62])
    vals = (rng.standard_normal((8, CFG.lanes)) * 60).astype(np.float32)
    vals.flat[:12] = [0.5, 1.5, 2.5, -0.5, -1.5, 127.5, -128.5, 300.0, -300.0, np.nan, np.inf, -np.inf]
    acc = np.zeros((CFG.acc_depth, CFG.lanes), np.uint32)
    acc[:8] = vals.view(np.uint32)
    acc[20, 0] = np.float32(1.0).view(np.uint32)  # the scale (lane 0, SCALAR)
    acc[21, 0] = np.float32(0.75).view(np.uint32)
    out: dict = {}
    run_vec(CFG, acc, [(VecOp.CVT_I8, VecB.SCALAR, 0, 20, 8, 3), (VecOp.CVT_I8, VecB.SCALAR, 0, 21, 8, 30)],
            dst_sram=VecDst.B, out=out)
    got = np.array([[(w >> (8 * j)) & 0xFF for j in range(CFG.lanes)] for w in out["b"]], np.uint8).view(np.int8)
    np.testing.assert_array_equal(got[3:11], to_int8(acc[:8], acc[20, 0]), err_msg="scale 1.0")
    np.testing.assert_array_equal(got[30:38], to_int8(acc[:8], acc[21, 0]), err_msg="scale 0.75")
    assert got[3].tolist() == [0, 2, 2, 0], got[3]  # ties to even


@pytest.mark.parametrize("op", [VecOp.FADD, VecOp.FMAX, VecOp.FMUL], ids=lambda o: o.name)
def test_vector_fold(op):
    """FOLD: count words into one, lane by lane, left to right; one write, at dst."""
    from golden.vector import fold_words

    rng = np.random.default_rng([SEED, 63, int(op)])
    acc = rng.standard_normal((CFG.acc_depth, CFG.lanes)).astype(np.float32).view(np.uint32)
    acc[5, 2] = np.float32(-np.inf).view(np.uint32)
    before = acc.copy()
    got, cycles = run_vec(CFG, acc, [(op, VecB.FOLD, 2, 0, 11, 40), (op, VecB.FOLD, 50, 0, 1, 51)])
    np.testing.assert_array_equal(got[40], fold_words(op.name.lower(), before[2:13]))
    np.testing.assert_array_equal(got[51], before[50])
    changed = np.flatnonzero((got != before).any(axis=1))
    assert set(changed) <= {40, 51}, changed
    assert cycles == [11 + 2, 1 + 2], cycles


def _param(mult: int, shift: int, relu: int = 0) -> int:
    return mult | shift << 24 | relu << 31


def test_requant_by_hand():
    """REQUANT against values worked out from the spec by hand (docs/numerics.md,
    "Requantization"): the exact product rounded once, half away from zero, then clamped; into
    ACC sign-extended and into B packed."""
    a = [3, -3, 5, -5, 1000, -1000, 7, -7, 100, 200, -200, 0]
    p_half = _param(1 << 23, 24)  # 0.5
    p_relu = _param(1 << 23, 24, relu=1)
    p_one = _param(1, 0)  # 1.0, no rounding
    p_third = _param(0xAAAAAB, 25)  # ~1/3: 7 * 0xAAAAAB / 2**25 = 2.3333334 -> 2
    acc = np.zeros((CFG.acc_depth, CFG.lanes), np.uint32)
    acc[:3] = np.array(a, np.int32).view(np.uint32).reshape(3, 4)
    for w, p in ((20, p_half), (21, p_relu), (22, p_one), (23, p_third)):
        acc[w, 0] = p
    cmds = [(VecOp.REQUANT, VecB.SCALAR, 0, 20, 3, 30), (VecOp.REQUANT, VecB.SCALAR, 0, 21, 3, 33),
            (VecOp.REQUANT, VecB.SCALAR, 0, 22, 3, 36), (VecOp.REQUANT, VecB.SCALAR, 0, 23, 3, 39)]
    got, _ = run_vec(CFG, acc, cmds)
    want = {30: [2, -2, 3, -3, 127, -128, 4, -4, 50, 100, -100, 0],  # 1.5 -> 2, 2.5 -> 3, 3.5 -> 4
            33: [2, 0, 3, 0, 127, 0, 4, 0, 50, 100, 0, 0],
            36: [3, -3, 5, -5, 127, -128, 7, -7, 100, 127, -128, 0],
            39: [1, -1, 2, -2, 127, -128, 2, -2, 33, 67, -67, 0]}
    for w, vals in want.items():
        assert got[w:w + 3].view(np.int32).ravel().tolist() == vals, (w, got[w:w + 3].view(np.int32).ravel())
    out: dict = {}
    run_vec(CFG, acc, [(VecOp.REQUANT, VecB.SCALAR, 0, 20, 3, 5)], dst_sram=VecDst.B, out=out)
    packed = np.array([[(w >> (8 * j)) & 0xFF for j in range(CFG.lanes)] for w in out["b"][5:8]], np.uint8)
    assert packed.view(np.int8).ravel().tolist() == want[30]


def test_requant_per_lane_params_match_golden():
    """Realistic accumulators and per-channel parameters (LANE form), RTL vs golden.vector."""
    from golden.vector import requant, requant_params

    rng = np.random.default_rng([SEED, 64])
    acc = np.zeros((CFG.acc_depth, CFG.lanes), np.uint32)
    a = rng.integers(-(2**20), 2**20, (16, CFG.lanes)).astype(np.int32)
    a[0] = [2**31 - 1, -(2**31), 0, -1]
    acc[:16] = a.view(np.uint32)
    acc[40] = requant_params(rng.uniform(2.0**-14, 2.0**-8, CFG.lanes))
    acc[41] = requant_params(rng.uniform(2.0**-14, 2.0**-8, CFG.lanes), relu=True)
    got, _ = run_vec(CFG, acc, [(VecOp.REQUANT, VecB.LANE, 0, 40, 16, 20), (VecOp.REQUANT, VecB.LANE, 0, 41, 16, 44)])
    np.testing.assert_array_equal(got[20:36].view(np.int32), requant(a, acc[40]), err_msg=f"FIRSTLIGHT_SEED={SEED}")
    np.testing.assert_array_equal(got[44:60].view(np.int32), requant(a, acc[41]), err_msg=f"FIRSTLIGHT_SEED={SEED}")
    assert (got[44:60].view(np.int32) >= 0).all()


def test_expsub_unrounded_defect_is_the_truncated_difference():
    """B0's defect: EXPSUB's exp reads a - b truncated toward zero. On differences that round up
    the defective unit differs from the golden (EXP of the RNE difference) and equals EXP of the
    difference one ulp toward zero; on exact differences it agrees. FSUB and EXP stay correct."""
    from rtl.revisions import Defect

    a = np.array([0x3F800001, 0x40A00001, 0xC1200001, 0x3F800000], np.uint32)  # 1+u, 5+u, -10-u, 1
    b = np.array([-3 * 2**-25, -3 * 2**-23, 3 * 2**-22, 0.5], np.float32).view(np.uint32)  # 1.75, 1.5, 1.5 ulp; exact
    acc = np.zeros((CFG.acc_depth, CFG.lanes), np.uint32)
    acc[0], acc[1] = a, b
    cmds = [(VecOp.EXPSUB, VecB.VECTOR, 0, 1, 1, 4), (VecOp.FSUB, VecB.VECTOR, 0, 1, 1, 5),
            (VecOp.EXP, VecB.VECTOR, 5, 0, 1, 6)]
    bad, _ = run_vec(CFG, acc, cmds, defects=frozenset({Defect.VECTOR_EXPSUB_UNROUNDED}))
    good, _ = run_vec(CFG, acc, cmds)
    right = vector_op("expsub", a, b)
    np.testing.assert_array_equal(good[4], right)
    np.testing.assert_array_equal(bad[5], vector_op("fsub", a, b))  # FSUB has its own subtractor
    np.testing.assert_array_equal(bad[6], right)  # so FSUB then EXP is right on the defective unit
    toward_zero = vector_op("fsub", a, b) - np.array([1, 1, 1, 0], np.uint32)  # one ulp less in magnitude
    np.testing.assert_array_equal(bad[4], vector_op("exp", toward_zero))
    assert (bad[4, :3] != right[:3]).all() and bad[4, 3] == right[3]


@pytest.mark.parametrize("fmt", ["e4m3", "e5m2"])
def test_cvt_f8_matches_golden(fmt):
    """CVT_F8 into B words: random bit patterns (every exponent, NaN, Inf, subnormals), values
    near the format's ties, largest finite and subnormal range, against golden.vector.to_fp8 (its
    rounding is golden.quant's, written from the OCP spec)."""
    from golden.vector import to_fp8

    rng = np.random.default_rng([SEED, 65, fmt == "e5m2"])
    acc = _random_acc(rng, CFG.acc_depth, CFG.lanes)
    top = 448.0 if fmt == "e4m3" else 57344.0
    tiny = 2.0**-9 if fmt == "e4m3" else 2.0**-16
    near = np.concatenate([rng.uniform(-top * 1.1, top * 1.1, 24), rng.uniform(-8 * tiny, 8 * tiny, 24),
                           np.array([top, -top, tiny, tiny / 2, 1.5 * tiny, 2.5 * tiny, 465.0, 480.0, 1.0, 0.0,
                                     -0.0, 17.0, 18.0, 19.0, 2.0**-7, 3 * 2.0**-8], np.float64)])
    acc[:16] = near[:64].astype(np.float32).view(np.uint32).reshape(16, CFG.lanes)
    acc[60, 0] = np.float32(1.0).view(np.uint32)
    acc[61, 0] = np.float32(0.37).view(np.uint32)
    out: dict = {}
    run_vec(CFG, acc, [(VecOp.CVT_F8, VecB.SCALAR, 0, 60, 30, 0), (VecOp.CVT_F8, VecB.SCALAR, 0, 61, 30, 32)],
            dst_sram=VecDst.B, out=out, e5m2=int(fmt == "e5m2"))
    got = np.array([[(w >> (8 * j)) & 0xFF for j in range(CFG.lanes)] for w in out["b"]], np.uint8)
    for at, scale in ((0, acc[60, 0]), (32, acc[61, 0])):
        want = to_fp8(acc[:30], scale, fmt)
        bad = np.argwhere(got[at:at + 30] != want)
        assert not len(bad), (f"{fmt} scale {scale:#x}: {len(bad)} differ (FIRSTLIGHT_SEED={SEED}); first (word, "
                              f"lane, a, rtl, golden): {[(int(r), int(c), hex(acc[r, c]), hex(got[at + r, c]), hex(want[r, c])) for r, c in bad[:4]]}")


def test_a_shared_lane_unit_is_the_unit_with_a_lane_per_position():
    """A Verilog build's vector unit instances one converted lane module in every lane
    (``shared_lane``); flattened, it is the same hardware as the unit with a lane submodule per
    lane, cell for cell (the lane is combinational: nothing else to connect)."""
    from amaranth.hdl import Fragment

    from cosim.area import area_of
    from rtl.vector import LANE_MODULE

    cfg = ChipConfig(rows=2, cols=2)
    shared = VectorUnit(cfg, shared_lane=True)
    lanes = shared.instanced_modules()
    assert list(lanes) == [LANE_MODULE]
    Fragment.get(lanes[LANE_MODULE], None)  # it elaborates (and is not left unused: Amaranth warns)
    a, b = area_of(shared), area_of(VectorUnit(cfg))
    assert (a.proxy, a.ff_bits, a.cells) == (b.proxy, b.ff_bits, b.cells)
