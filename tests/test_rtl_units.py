"""Fast per-block RTL unit tests in Amaranth's own simulator (no Verilator/Icarus needed).

Covers: ChipConfig validation, MatrixEngine alone (wrapped with its SRAMs), ReductionUnit
alone, and the whole Chip driven only through its host CSR bus (front-door window + command
ring). Every expected value comes from the independent numpy goldens in ``golden/``.

Randomised cases use ``numpy.random.default_rng(seed)``; the seed is in every assertion
message. Override the base seed with ``FIRSTLIGHT_SEED=<n>``; reproduce one case with
``FIRSTLIGHT_SEED=<n> python -m pytest tests/test_rtl_units.py -k <test id>``.
"""

from __future__ import annotations

import gc
import os
import re
import zlib

import numpy as np
import pytest
from amaranth.hdl import Elaboratable, Module
from amaranth.lib.memory import Memory
from amaranth.sim import Simulator

from golden import gemm_int8, gemm_int8_accumulate, reduce_rows
from rtl.chip import Chip
from rtl.revisions import REVISIONS
from rtl.board import BoardConfig
from rtl.config import ChipConfig
from rtl.csr_map import ID_MAGIC, REG, REGISTERS, Access
from rtl.memories import Region
from rtl.engine import MatrixEngine
from rtl.isa import ErrCode, Opcode, ReduceOp, pack_command
from rtl.reduce import ReductionUnit

BASE_SEED = int(os.environ.get("FIRSTLIGHT_SEED", "20261130"))
INT32_MIN = -(2**31)
INT32_MAX = 2**31 - 1
M32 = 0xFFFFFFFF


def case_seed(name: str) -> int:
    """A per-case seed: stable across runs and Python processes (no hash randomisation)."""
    return BASE_SEED + zlib.crc32(name.encode())


def small_cfg(rows=2, cols=2, **kw) -> ChipConfig:
    # int8-only engines: these tests pin the int8 path; the FP path has its own tests
    # (tests/test_rtl_fp32.py, tests/test_fp_engine.py) and this keeps the Amaranth sim fast.
    args = dict(rows=rows, cols=cols, operand_depth=16, acc_depth=16, cmdq_depth=8, formats=("int8",), trace_depth=4)
    args.update(kw)
    return ChipConfig(**args)


def cfg_id(cfg: ChipConfig) -> str:
    return f"{cfg.rows}x{cfg.cols}"


# ---- word packing (the documented SRAM layouts) -------------------------------------------


def pack_a_words(a: np.ndarray) -> list[int]:
    """A (ROWS x K) int8 -> K words; word k holds column k, byte i = row i."""
    rows, k = a.shape
    return [sum((int(a[i, kk]) & 0xFF) << (8 * i) for i in range(rows)) for kk in range(k)]


def pack_b_words(b: np.ndarray) -> list[int]:
    """B (K x COLS) int8 -> K words; word k holds row k, byte j = column j."""
    k, cols = b.shape
    return [sum((int(b[kk, j]) & 0xFF) << (8 * j) for j in range(cols)) for kk in range(k)]


def pack_acc_word(row) -> int:
    """One C row (int32 per lane) -> one accumulator word, lane j = bits [32j, 32j+32)."""
    return sum((int(v) & M32) << (32 * j) for j, v in enumerate(row))


def unpack_acc_word(word: int, lanes: int) -> list[int]:
    out = []
    for j in range(lanes):
        v = (word >> (32 * j)) & M32
        out.append(v - (1 << 32) if v & 0x80000000 else v)
    return out


def rand_int8(rng, shape) -> np.ndarray:
    return rng.integers(-128, 127, size=shape, endpoint=True).astype(np.int8)


def rand_int32(rng, shape) -> np.ndarray:
    return rng.integers(INT32_MIN, INT32_MAX, size=shape, endpoint=True).astype(np.int32)


def cmd_chunks(cmd: int) -> list[int]:
    return [(cmd >> (32 * i)) & M32 for i in range(4)]


def run_sim(dut, tb) -> None:
    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(tb)
    sim.run()


# =============================================================================================
# 1. ChipConfig validation
# =============================================================================================


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(rows=3), "rows must be one of (2, 4, 8, 16), not 3"),
        (dict(rows=32), "rows must be one of (2, 4, 8, 16), not 32"),
        (dict(rows=True), "rows must be one of (2, 4, 8, 16), not True"),
        (dict(rows=4.0), "rows must be one of (2, 4, 8, 16), not 4.0"),
        (dict(cols=1), "cols must be one of (2, 4, 8, 16), not 1"),
        (dict(cols=0), "cols must be one of (2, 4, 8, 16), not 0"),
        (dict(cols=4, lanes=8), "lanes must equal cols (4): an accumulator word holds one row of a C tile; got lanes=8"),
        (dict(rows=2, cols=8, lanes=2), "lanes must equal cols (8): an accumulator word holds one row of a C tile; got lanes=2"),
        (dict(operand_depth=15), "operand_depth must be a power of two in [16, 65536], not 15"),
        (dict(operand_depth=8), "operand_depth must be a power of two in [16, 65536], not 8"),
        (dict(operand_depth=131072), "operand_depth must be a power of two in [16, 65536], not 131072"),
        (dict(operand_depth=True), "operand_depth must be a power of two in [16, 65536], not True"),
        (dict(acc_depth=100), "acc_depth must be a power of two in [16, 65536], not 100"),
        (dict(acc_depth=0), "acc_depth must be a power of two in [16, 65536], not 0"),
        (dict(cmdq_depth=2), "cmdq_depth must be a power of two in [4, 65536], not 2"),
        (dict(cmdq_depth=6), "cmdq_depth must be a power of two in [4, 65536], not 6"),
        (dict(cmd_fifo_depth=1), "cmd_fifo_depth must be an integer in [2, 256], not 1"),
        (dict(cmd_fifo_depth=257), "cmd_fifo_depth must be an integer in [2, 256], not 257"),
        (dict(cmd_fifo_depth=False), "cmd_fifo_depth must be an integer in [2, 256], not False"),
    ],
    ids=lambda v: repr(v) if isinstance(v, dict) else "",
)
def test_config_rejects(kwargs, message):
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        ChipConfig(**kwargs)


def test_config_fp_depth_limits():
    with pytest.raises(ValueError, match="operand_depth must be <= 8192 on a chip with FP formats"):
        ChipConfig(operand_depth=16384)
    with pytest.raises(ValueError, match="operand_depth must be >= 64 on a chip with FP formats"):
        ChipConfig(operand_depth=32)
    assert ChipConfig(operand_depth=16384, formats=("int8",)).scale_depth == 512


def test_config_accepts_and_derives():
    c = ChipConfig()
    assert (c.rows, c.cols, c.lanes) == (4, 4, 4)
    c = ChipConfig(rows=2, cols=8, operand_depth=16, acc_depth=16, cmdq_depth=4, cmd_fifo_depth=2, formats=("int8",))
    assert c.lanes == 8
    assert (c.a_word_bits, c.b_word_bits, c.acc_word_bits) == (16, 64, 256)
    assert c.min_matmul_cycles == 8 and c.peak_macs_per_cycle == 16
    assert ChipConfig(rows=4, cols=4, lanes=4).lanes == 4
    assert ChipConfig.parse_array("8x2") == ChipConfig(rows=8, cols=2)


@pytest.mark.parametrize("text", ["4", "4x", "x4", "4x4x4", "ax4", "-4x4"])
def test_config_parse_array_rejects(text):
    with pytest.raises(ValueError, match=re.escape(f"array must look like ROWSxCOLS (e.g. 4x4, 8x8), not {text!r}")):
        ChipConfig.parse_array(text)


def test_config_parse_array_bad_dims():
    with pytest.raises(ValueError, match=re.escape("rows must be one of (2, 4, 8, 16), not 3")):
        ChipConfig.parse_array("3x4")


# =============================================================================================
# 2. MatrixEngine alone
# =============================================================================================


class EngineHarness(Elaboratable):
    """MatrixEngine + A/B/ACC SRAMs (sync read ports; one ACC write port)."""

    def __init__(self, cfg: ChipConfig):
        self.cfg = cfg
        self.engine = MatrixEngine(cfg)
        self.a_mem = Memory(shape=cfg.a_word_bits, depth=cfg.operand_depth, init=[])
        self.b_mem = Memory(shape=cfg.b_word_bits, depth=cfg.operand_depth, init=[])
        self.acc_mem = Memory(shape=cfg.acc_word_bits, depth=cfg.acc_depth, init=[])

    def elaborate(self, platform):
        m = Module()
        e = self.engine
        m.submodules.engine = e
        m.submodules.a_mem = self.a_mem
        m.submodules.b_mem = self.b_mem
        m.submodules.acc_mem = self.acc_mem
        a_rp = self.a_mem.read_port()
        b_rp = self.b_mem.read_port()
        acc_rp = self.acc_mem.read_port()
        acc_wp = self.acc_mem.write_port()
        m.d.comb += [
            a_rp.addr.eq(e.a_rd_addr),
            e.a_rd_data.eq(a_rp.data),
            b_rp.addr.eq(e.b_rd_addr),
            e.b_rd_data.eq(b_rp.data),
            acc_rp.addr.eq(e.acc_rd_addr),
            e.acc_rd_data.eq(acc_rp.data),
            acc_wp.addr.eq(e.acc_wr_addr),
            acc_wp.data.eq(e.acc_wr_data),
            acc_wp.en.eq(e.acc_wr_en),
        ]
        return m


def make_op(rng, cfg, k, *, a_addr, b_addr, c_addr, accumulate=False, a=None, b=None):
    a = rand_int8(rng, (cfg.rows, k)) if a is None else a
    b = rand_int8(rng, (k, cfg.cols)) if b is None else b
    assert a.shape == (cfg.rows, k) and b.shape == (k, cfg.cols)
    return dict(a=a, b=b, k=k, a_addr=a_addr, b_addr=b_addr, c_addr=c_addr, accumulate=bool(accumulate))


def run_engine(cfg: ChipConfig, ops: list[dict], acc_init: np.ndarray, what: str):
    """Load the SRAMs, issue ``ops`` back to back (each in the first cycle feed_ready is high),
    wait for busy to drop, and return (final ACC as int32 array, trace dict)."""
    h = EngineHarness(cfg)
    e = h.engine
    out = {}

    async def tb(ctx):
        for op in ops:
            for i, w in enumerate(pack_a_words(op["a"])):
                ctx.set(h.a_mem.data[op["a_addr"] + i], w)
            for i, w in enumerate(pack_b_words(op["b"])):
                ctx.set(h.b_mem.data[op["b_addr"] + i], w)
        for r in range(cfg.acc_depth):
            ctx.set(h.acc_mem.data[r], pack_acc_word(acc_init[r]))

        cycle = 0
        feeding = 0
        start_cycles = []

        async def step():
            nonlocal cycle, feeding
            feeding += ctx.get(e.feeding)
            await ctx.tick()
            cycle += 1

        for n, op in enumerate(ops):
            ctx.set(e.a_addr, op["a_addr"])
            ctx.set(e.b_addr, op["b_addr"])
            ctx.set(e.c_addr, op["c_addr"])
            ctx.set(e.k, op["k"])
            ctx.set(e.accumulate, int(op["accumulate"]))
            ctx.set(e.start, 1)
            for _ in range(200):
                if ctx.get(e.feed_ready):
                    break
                await step()
            else:
                raise AssertionError(f"{what}: feed_ready never rose for MATMUL #{n} within 200 cycles")
            start_cycles.append(cycle)
            await step()  # the edge that accepts this MATMUL
            ctx.set(e.start, 0)
            assert ctx.get(e.busy), f"{what}: busy low right after MATMUL #{n} was accepted"
        for _ in range(500):
            if not ctx.get(e.busy):
                break
            await step()
        else:
            raise AssertionError(f"{what}: engine busy never dropped within 500 cycles after the last start")
        out["busy_low_cycle"] = cycle
        # After busy drops nothing may be written any more.
        for _ in range(cfg.rows + cfg.cols + 8):
            assert not ctx.get(e.acc_wr_en), f"{what}: ACC write at cycle {cycle}, after busy dropped"
            await step()
        out["feeding"] = feeding
        out["start_cycles"] = start_cycles
        out["acc"] = np.array(
            [unpack_acc_word(ctx.get(h.acc_mem.data[r]), cfg.lanes) for r in range(cfg.acc_depth)],
            dtype=np.int64,
        ).astype(np.int32)

    run_sim(h, tb)
    return out["acc"], out


def expected_acc(cfg, ops, acc_init):
    exp = acc_init.copy()
    for op in ops:
        tile = slice(op["c_addr"], op["c_addr"] + cfg.rows)
        if op["accumulate"]:
            exp[tile] = gemm_int8_accumulate(exp[tile].copy(), op["a"], op["b"])
        else:
            exp[tile] = gemm_int8(op["a"], op["b"])
    return exp


def check_engine(cfg, ops, acc_init, what):
    acc, trace = run_engine(cfg, ops, acc_init, what)
    exp = expected_acc(cfg, ops, acc_init)
    if not np.array_equal(acc, exp):
        bad = sorted({int(r) for r in np.argwhere(acc != exp)[:, 0]})
        lines = [f"  word {r}: got {acc[r].tolist()} expected {exp[r].tolist()}" for r in bad]
        raise AssertionError(f"{what}: ACC mismatch in words {bad}\n" + "\n".join(lines))
    assert trace["feeding"] == sum(op["k"] for op in ops), (
        f"{what}: feeding was high {trace['feeding']} cycles, expected sum(K)={sum(op['k'] for op in ops)}"
    )
    return trace


ENGINE_CFGS = [
    small_cfg(2, 2, operand_depth=32),
    small_cfg(4, 4, operand_depth=32),
    small_cfg(2, 4, operand_depth=32),
    small_cfg(4, 2, operand_depth=32),
]


def sentinel_acc(cfg, rng):
    """Random ACC contents, so writes to the wrong word (or stray writes) show up."""
    return rand_int32(rng, (cfg.acc_depth, cfg.lanes))


@pytest.mark.parametrize("cfg", ENGINE_CFGS, ids=cfg_id)
@pytest.mark.parametrize("kname", ["1", "ROWS", "7"])
def test_engine_single_matmul(cfg, kname):
    k = {"1": 1, "ROWS": cfg.rows, "7": 7}[kname]
    name = f"engine_single_{cfg_id(cfg)}_K{kname}"
    seed = case_seed(name)
    rng = np.random.default_rng(seed)
    ops = [make_op(rng, cfg, k, a_addr=3, b_addr=5, c_addr=cfg.rows)]
    check_engine(cfg, ops, sentinel_acc(cfg, rng), f"{name} (K={k}, seed={seed})")


@pytest.mark.parametrize("cfg", ENGINE_CFGS[:2], ids=cfg_id)
@pytest.mark.parametrize("value", [(-128, -128), (127, 127), (-128, 127), (127, -128)], ids=str)
def test_engine_extreme_values(cfg, value):
    av, bv = value
    k = 7
    a = np.full((cfg.rows, k), av, np.int8)
    b = np.full((k, cfg.cols), bv, np.int8)
    ops = [dict(a=a, b=b, k=k, a_addr=0, b_addr=0, c_addr=0, accumulate=False)]
    check_engine(cfg, ops, np.zeros((cfg.acc_depth, cfg.lanes), np.int32), f"extreme A={av} B={bv} {cfg_id(cfg)}")


@pytest.mark.parametrize("cfg", ENGINE_CFGS[:2], ids=cfg_id)
def test_engine_extreme_mixed(cfg):
    """Checkerboard of -128/127 so every PE sees both signs (and mixed-sign products)."""
    name = f"engine_extreme_mixed_{cfg_id(cfg)}"
    seed = case_seed(name)
    rng = np.random.default_rng(seed)
    k = 7
    a = np.where(rng.integers(0, 2, (cfg.rows, k)) == 1, -128, 127).astype(np.int8)
    b = np.where(rng.integers(0, 2, (k, cfg.cols)) == 1, -128, 127).astype(np.int8)
    ops = [dict(a=a, b=b, k=k, a_addr=2, b_addr=9, c_addr=0, accumulate=False)]
    check_engine(cfg, ops, sentinel_acc(cfg, rng), f"{name} (seed={seed})")


@pytest.mark.parametrize("cfg", ENGINE_CFGS, ids=cfg_id)
@pytest.mark.parametrize("k", [1, 7])
def test_engine_accumulate(cfg, k):
    """accumulate=1 adds into preloaded ACC values, including values that wrap past int32."""
    name = f"engine_accumulate_{cfg_id(cfg)}_K{k}"
    seed = case_seed(name)
    rng = np.random.default_rng(seed)
    acc0 = sentinel_acc(cfg, rng)
    # Put values at the int32 edges into the target tile so the write-back add wraps.
    acc0[0, 0] = INT32_MAX
    acc0[1, 0] = INT32_MIN
    acc0[0, 1] = INT32_MAX - 5
    a = rand_int8(rng, (cfg.rows, k))
    b = rand_int8(rng, (k, cfg.cols))
    a[0, :] = 127
    b[:, 0] = 127
    a[1, :] = -128
    b[:, 1] = 127  # row 1 col 1: negative; row 0 col 0 positive -> wraps past INT32_MAX
    ops = [dict(a=a, b=b, k=k, a_addr=1, b_addr=4, c_addr=0, accumulate=True)]
    exp = expected_acc(cfg, ops, acc0)
    assert exp[0, 0] < 0, "test setup: row 0 col 0 should wrap"
    check_engine(cfg, ops, acc0, f"{name} (seed={seed})")


@pytest.mark.parametrize("cfg", ENGINE_CFGS, ids=cfg_id)
@pytest.mark.parametrize("ks", [(1, 1), ("R", "R"), (7, 3), (1, 7), (7, 1)], ids=lambda ks: f"K{ks[0]}-K{ks[1]}")
def test_engine_back_to_back_different_tiles(cfg, ks):
    k0, k1 = (cfg.rows if k == "R" else k for k in ks)
    name = f"engine_b2b_tiles_{cfg_id(cfg)}_K{k0}_K{k1}"
    seed = case_seed(name)
    rng = np.random.default_rng(seed)
    ops = [
        make_op(rng, cfg, k0, a_addr=0, b_addr=16, c_addr=0),
        make_op(rng, cfg, k1, a_addr=k0, b_addr=16 - k1, c_addr=cfg.rows + 1),
    ]
    what = f"{name} (seed={seed})"
    trace = check_engine(cfg, ops, sentinel_acc(cfg, rng), what)
    gap = trace["start_cycles"][1] - trace["start_cycles"][0]
    assert gap == max(k0, cfg.min_matmul_cycles), (
        f"{what}: second MATMUL accepted {gap} cycles after the first; the feed should take it after "
        f"max(K, ROWS, COLS) = {max(k0, cfg.min_matmul_cycles)} cycles (no gap)"
    )


@pytest.mark.parametrize("cfg", ENGINE_CFGS, ids=cfg_id)
@pytest.mark.parametrize("ks", [(1, 1), ("R", "R"), (7, 3), (1, 7), (7, 1)], ids=lambda ks: f"K{ks[0]}-K{ks[1]}")
def test_engine_back_to_back_accumulate_same_tile(cfg, ks):
    """Second MATMUL (started with zero gap) accumulates into the tile the first one writes."""
    k0, k1 = (cfg.rows if k == "R" else k for k in ks)
    name = f"engine_b2b_acc_{cfg_id(cfg)}_K{k0}_K{k1}"
    seed = case_seed(name)
    rng = np.random.default_rng(seed)
    ops = [
        make_op(rng, cfg, k0, a_addr=0, b_addr=16, c_addr=2),
        make_op(rng, cfg, k1, a_addr=k0, b_addr=16 + k0, c_addr=2, accumulate=True),
    ]
    what = f"{name} (seed={seed})"
    trace = check_engine(cfg, ops, sentinel_acc(cfg, rng), what)
    gap = trace["start_cycles"][1] - trace["start_cycles"][0]
    assert gap == max(k0, cfg.min_matmul_cycles), f"{what}: start gap {gap}"


@pytest.mark.parametrize("cfg", ENGINE_CFGS[:2], ids=cfg_id)
def test_engine_stream_of_four(cfg):
    """Four zero-gap MATMULs: overwrite, accumulate, other tile, accumulate again."""
    name = f"engine_stream4_{cfg_id(cfg)}"
    seed = case_seed(name)
    rng = np.random.default_rng(seed)
    ops = [
        make_op(rng, cfg, 3, a_addr=0, b_addr=0, c_addr=0),
        make_op(rng, cfg, 1, a_addr=3, b_addr=3, c_addr=0, accumulate=True),
        make_op(rng, cfg, 5, a_addr=4, b_addr=4, c_addr=cfg.rows, accumulate=True),
        make_op(rng, cfg, 2, a_addr=9, b_addr=9, c_addr=0, accumulate=True),
    ]
    check_engine(cfg, ops, sentinel_acc(cfg, rng), f"{name} (seed={seed})")


def test_engine_busy_covers_writeback():
    """busy stays high until the last accumulator write of a single MATMUL."""
    cfg = ENGINE_CFGS[1]
    rng = np.random.default_rng(case_seed("engine_busy"))
    ops = [make_op(rng, cfg, 1, a_addr=0, b_addr=0, c_addr=0)]
    _, trace = run_engine(cfg, ops, np.zeros((cfg.acc_depth, cfg.lanes), np.int32), "engine_busy")
    # run_engine already asserts no ACC write happens after busy drops; also bound the latency.
    assert trace["busy_low_cycle"] <= 1 + cfg.min_matmul_cycles + cfg.rows + cfg.cols + 4


@pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")  # designs only inspected
@pytest.mark.parametrize("formats", [("int8", "e4m3", "e5m2", "e2m1"), ("int8",)], ids=["fp", "int8"])
def test_a_shared_pe_engine_is_the_engine_with_a_pe_per_position(formats):
    """A Verilog build's engine instances one converted PE module in every position
    (``shared_pe``); flattened, it is the same hardware as the engine with a PE submodule per
    position, cell for cell, soft reset included (both on the gated FP clock, as Verilog builds
    are)."""
    from amaranth.hdl import Signal

    from cosim.area import area_of
    from rtl.pe import PE_MODULE

    from amaranth.hdl import ResetInserter
    from amaranth.lib import wiring
    from amaranth.lib.wiring import In

    class SoftReset(wiring.Component):
        """The engine as the chip has it: its ports, and a soft reset on its core clock."""

        def __init__(self, shared: bool):
            self.soft_rst = Signal()
            self.engine = MatrixEngine(cfg, gated_fp=True, shared_pe=shared, soft_rst=self.soft_rst if shared else None)
            super().__init__({**self.engine.signature.members, "srst": In(1)})

        def instanced_modules(self):
            return self.engine.instanced_modules()

        def elaborate(self, platform):
            m = Module()
            m.submodules.engine = ResetInserter(self.soft_rst)(self.engine)
            m.d.comb += self.soft_rst.eq(self.srst)
            for name, member in self.engine.signature.members.items():
                inner, outer = getattr(self.engine, name), getattr(self, name)
                m.d.comb += inner.eq(outer) if member.flow == In else outer.eq(inner)
            return m

    cfg = ChipConfig(rows=2, cols=2, formats=formats)
    assert list(SoftReset(True).instanced_modules()) == [PE_MODULE]
    a, b = area_of(SoftReset(True)), area_of(SoftReset(False))
    # an area report that was not given the instanced module refuses, rather than counting less
    unlisted = SoftReset(True)
    unlisted.instanced_modules = dict
    with pytest.raises(RuntimeError, match="fl_pe"):
        area_of(unlisted)
    diff = {k: a.cells.get(k, 0) - b.cells.get(k, 0) for k in a.cells.keys() | b.cells.keys()}
    # the one OR: the instances' reset is the chip's reset or the soft reset, where the flat
    # engine's ResetInserter folds the soft reset into each register's reset
    assert a.ff_bits == b.ff_bits and {k: d for k, d in diff.items() if d} == {"$_OR_": 1}
    gc.collect()  # the designs (in reference cycles) go while the warning filter is on


@pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")  # designs only inspected
def test_pe_faults_keep_a_pe_per_position():
    """An injected PE fault makes its PE differ from the others: that chip does not share one
    PE module, and the engine refuses to; a fault elsewhere keeps the PE shared."""
    from rtl.pe import PE_MODULE
    from rtl.vector import LANE_MODULE

    def shared(**kw):
        return set(Chip(**kw).instanced_modules())

    assert shared(gated_clocks=True) == {PE_MODULE, LANE_MODULE}
    assert shared(gated_clocks=True, faults=("csr:MACS_HI:stuck1:bit=0",)) == {PE_MODULE, LANE_MODULE}
    assert shared(gated_clocks=True, faults=("pe:1,2:product:stuck1:bit=3",)) == {LANE_MODULE}
    assert shared(gated_clocks=True, fault_port=True) == {LANE_MODULE}  # a campaign may set any fault
    assert shared() == set()  # Amaranth's simulator: a submodule per position
    chip = Chip(gated_clocks=True, faults=("pe:1,2:product:stuck1:bit=3",))
    with pytest.raises(ValueError, match="cannot be one shared module"):
        MatrixEngine(chip.config, faults=chip._fault_views(), gated_fp=True, shared_pe=True, soft_rst=object())
    del chip
    gc.collect()  # the designs (in reference cycles) go while the warning filter is on


# =============================================================================================
# 3. ReductionUnit alone
# =============================================================================================


class ReduceHarness(Elaboratable):
    def __init__(self, cfg: ChipConfig):
        self.cfg = cfg
        self.unit = ReductionUnit(cfg)
        self.acc_mem = Memory(shape=cfg.acc_word_bits, depth=cfg.acc_depth, init=[])

    def elaborate(self, platform):
        m = Module()
        u = self.unit
        m.submodules.unit = u
        m.submodules.acc_mem = self.acc_mem
        rp = self.acc_mem.read_port()
        wp = self.acc_mem.write_port()
        m.d.comb += [
            rp.addr.eq(u.acc_rd_addr),
            u.acc_rd_data.eq(rp.data),
            wp.addr.eq(u.acc_wr_addr),
            wp.data.eq(u.acc_wr_data),
            wp.en.eq(u.acc_wr_en),
        ]
        return m


IDENTITY = {ReduceOp.SUM: 0, ReduceOp.MAX: INT32_MIN, ReduceOp.MIN: INT32_MAX}
INT_REDUCE_OPS = [ReduceOp.SUM, ReduceOp.MAX, ReduceOp.MIN]  # the fp32 ones: test_reduce_fp32
GOLDEN_OP = {ReduceOp.SUM: "sum", ReduceOp.MAX: "max", ReduceOp.MIN: "min"}


def run_reduce(cfg, acc_init, reduces, what):
    """Run REDUCEs one after the other (each started as soon as busy is low)."""
    h = ReduceHarness(cfg)
    u = h.unit
    out = {}

    async def tb(ctx):
        for r in range(cfg.acc_depth):
            ctx.set(h.acc_mem.data[r], pack_acc_word(acc_init[r]))
        for n, (op, src, count, dst) in enumerate(reduces):
            for _ in range(100):
                if not ctx.get(u.busy):
                    break
                await ctx.tick()
            else:
                raise AssertionError(f"{what}: busy stuck before REDUCE #{n}")
            ctx.set(u.op, int(op))
            ctx.set(u.src, src)
            ctx.set(u.count, count)
            ctx.set(u.dst, dst)
            ctx.set(u.start, 1)
            await ctx.tick()
            ctx.set(u.start, 0)
            assert ctx.get(u.busy), f"{what}: busy low right after REDUCE #{n} started"
        for _ in range(200):
            if not ctx.get(u.busy):
                break
            await ctx.tick()
        else:
            raise AssertionError(f"{what}: reduction unit busy never dropped within 200 cycles")
        for _ in range(8):
            assert not ctx.get(u.acc_wr_en), f"{what}: ACC write after busy dropped"
            await ctx.tick()
        out["acc"] = np.array(
            [unpack_acc_word(ctx.get(h.acc_mem.data[r]), cfg.lanes) for r in range(cfg.acc_depth)],
            dtype=np.int64,
        ).astype(np.int32)

    run_sim(h, tb)
    return out["acc"]


def expected_reduce(cfg, acc_init, reduces):
    exp = acc_init.copy()
    for op, src, count, dst in reduces:
        tile = exp[src : src + count].reshape(1, -1)
        val = int(reduce_rows(np.ascontiguousarray(tile), GOLDEN_OP[op])[0])
        exp[dst] = [val] + [IDENTITY[op]] * (cfg.lanes - 1)
    return exp


def check_reduce(cfg, acc_init, reduces, what):
    acc = run_reduce(cfg, acc_init, reduces, what)
    exp = expected_reduce(cfg, acc_init, reduces)
    if not np.array_equal(acc, exp):
        bad = sorted({int(r) for r in np.argwhere(acc != exp)[:, 0]})
        lines = [f"  word {r}: got {acc[r].tolist()} expected {exp[r].tolist()}" for r in bad]
        raise AssertionError(f"{what}: ACC mismatch in words {bad}\n" + "\n".join(lines))


REDUCE_CFGS = [small_cfg(2, 2), small_cfg(4, 4), small_cfg(2, 8)]


@pytest.mark.parametrize("cfg", REDUCE_CFGS, ids=lambda c: f"lanes{c.lanes}")
@pytest.mark.parametrize("op", INT_REDUCE_OPS, ids=lambda o: o.name)
@pytest.mark.parametrize("count", [1, 5])
def test_reduce_random(cfg, op, count):
    name = f"reduce_{op.name}_lanes{cfg.lanes}_n{count}"
    seed = case_seed(name)
    rng = np.random.default_rng(seed)
    acc0 = rand_int32(rng, (cfg.acc_depth, cfg.lanes))
    check_reduce(cfg, acc0, [(op, 3, count, 12)], f"{name} (seed={seed})")


@pytest.mark.parametrize("cfg", REDUCE_CFGS, ids=lambda c: f"lanes{c.lanes}")
def test_reduce_sum_wraps(cfg):
    name = f"reduce_sum_wrap_lanes{cfg.lanes}"
    seed = case_seed(name)
    rng = np.random.default_rng(seed)
    acc0 = rand_int32(rng, (cfg.acc_depth, cfg.lanes))
    acc0[2:7] = rng.integers(INT32_MAX - 1000, INT32_MAX, size=(5, cfg.lanes), endpoint=True)
    exp = expected_reduce(cfg, acc0, [(ReduceOp.SUM, 2, 5, 0)])
    exact = int(acc0[2:7].astype(np.int64).sum())
    assert exact > INT32_MAX and exp[0, 0] != exact, "test setup: sum should wrap"
    check_reduce(cfg, acc0, [(ReduceOp.SUM, 2, 5, 0)], f"{name} (seed={seed})")


@pytest.mark.parametrize("cfg", REDUCE_CFGS, ids=lambda c: f"lanes{c.lanes}")
@pytest.mark.parametrize("count", [1, 5])
def test_reduce_max_all_negative(cfg, count):
    """MAX over all-negative values must not return 0 (signed compare; identity INT32_MIN)."""
    name = f"reduce_max_neg_lanes{cfg.lanes}_n{count}"
    seed = case_seed(name)
    rng = np.random.default_rng(seed)
    acc0 = rng.integers(INT32_MIN, -1, size=(cfg.acc_depth, cfg.lanes), endpoint=True).astype(np.int32)
    acc0[4, -1] = INT32_MIN
    check_reduce(cfg, acc0, [(ReduceOp.MAX, 4, count, 9)], f"{name} (seed={seed})")


@pytest.mark.parametrize("cfg", REDUCE_CFGS, ids=lambda c: f"lanes{c.lanes}")
@pytest.mark.parametrize("count", [1, 5])
def test_reduce_min_mixed_sign(cfg, count):
    """MIN with large positives and one INT32_MIN / one INT32_MAX (signed compare)."""
    name = f"reduce_min_lanes{cfg.lanes}_n{count}"
    seed = case_seed(name)
    rng = np.random.default_rng(seed)
    acc0 = rand_int32(rng, (cfg.acc_depth, cfg.lanes))
    acc0[1, 0] = INT32_MAX
    acc0[1 + count - 1, cfg.lanes - 1] = INT32_MIN
    check_reduce(cfg, acc0, [(ReduceOp.MIN, 1, count, 15)], f"{name} (seed={seed})")


@pytest.mark.parametrize("cfg", REDUCE_CFGS[:2], ids=lambda c: f"lanes{c.lanes}")
def test_reduce_chain_and_in_place(cfg):
    """Back-to-back REDUCEs, a destination inside its own source, and re-reducing a result word."""
    name = f"reduce_chain_lanes{cfg.lanes}"
    seed = case_seed(name)
    rng = np.random.default_rng(seed)
    acc0 = rand_int32(rng, (cfg.acc_depth, cfg.lanes))
    reduces = [
        (ReduceOp.SUM, 0, 4, 0),  # dst = first source word
        (ReduceOp.MAX, 4, 3, 10),
        (ReduceOp.MAX, 10, 1, 11),  # re-reduce a result word: identity lanes must not win
        (ReduceOp.MIN, 0, 16, 15),  # whole SRAM
    ]
    check_reduce(cfg, acc0, reduces, f"{name} (seed={seed})")


# =============================================================================================
# 4. The whole Chip through its CSR bus
# =============================================================================================


async def csr(ctx, dut, addr, wdata=None, limit=200):
    """One CSR transfer: drive the strobe, wait (bounded) for csr_ready, sample csr_rdata in that
    cycle, keep the strobe through the completing edge, then drop it. Returns csr_rdata."""
    if isinstance(addr, str):
        addr = REG[addr].addr
    strobe = dut.csr_re if wdata is None else dut.csr_we
    ctx.set(dut.csr_addr, addr)
    if wdata is not None:
        ctx.set(dut.csr_wdata, wdata & M32)
    ctx.set(strobe, 1)
    for _ in range(limit):
        await ctx.tick()
        if ctx.get(dut.csr_ready):
            rdata = ctx.get(dut.csr_rdata)
            break
    else:
        ctx.set(strobe, 0)
        raise AssertionError(f"csr_ready never rose within {limit} cycles for CSR 0x{addr:02x}")
    await ctx.tick()  # the edge where strobe and csr_ready are both high completes the transfer
    ctx.set(strobe, 0)
    assert not ctx.get(dut.csr_ready), f"csr_ready high for more than one cycle (CSR 0x{addr:02x})"
    return rdata


def win_addr(region: int, chunk: int) -> int:
    return (region << 28) | chunk


async def win_write(ctx, dut, region, chunk, values):
    await csr(ctx, dut, "MEM_ADDR", win_addr(region, chunk))
    for v in values:
        await csr(ctx, dut, "MEM_DATA", v)


async def win_read(ctx, dut, region, chunk, n):
    await csr(ctx, dut, "MEM_ADDR", win_addr(region, chunk))
    return [await csr(ctx, dut, "MEM_DATA") for _ in range(n)]


def word_chunks(word: int, chunks: int) -> list[int]:
    return [(word >> (32 * i)) & M32 for i in range(chunks)]


async def write_words(ctx, dut, region, first_word, words):
    chunks = dut.region_words()[region][1]
    flat = [c for w in words for c in word_chunks(w, chunks)]
    await win_write(ctx, dut, region, first_word * chunks, flat)


async def read_acc_rows(ctx, dut, first_word, n):
    lanes = dut.config.lanes
    flat = await win_read(ctx, dut, Region.ACC, first_word * lanes, n * lanes)
    rows = []
    for r in range(n):
        word = sum(flat[r * lanes + j] << (32 * j) for j in range(lanes))
        rows.append(unpack_acc_word(word, lanes))
    return np.array(rows, dtype=np.int64).astype(np.int32)


async def wait_idle(ctx, dut, what, polls=100):
    for _ in range(polls):
        status = await csr(ctx, dut, "STATUS")
        if REG["STATUS"].field("idle").get(status):
            return status
    raise AssertionError(f"{what}: STATUS.idle never set after {polls} polls (last STATUS=0x{status:08x})")


async def submit(ctx, dut, cmds, first_entry=0):
    """Write commands into the ring from ``first_entry`` and ring the doorbell."""
    depth = dut.config.cmdq_depth
    for n, cmd in enumerate(cmds):
        await win_write(ctx, dut, Region.CMDQ, ((first_entry + n) % depth) * 4, cmd_chunks(cmd))
    await csr(ctx, dut, "CMDQ_TAIL", (first_entry + len(cmds)) % depth)


def matmul_cmd(k, a, b, c, accumulate=False, tag=0):
    return pack_command(
        Opcode.MATMUL, flags={"matmul": {"accumulate": int(accumulate)}}, length=k, arg0=a, arg1=b, arg2=c, tag=tag
    )


def run_chip(cfg, tb_body):
    # The chip as specified: silicon revisions' defects are proven on the real simulators
    # (tests/test_errata_matrix.py); these tests pin the specified behaviour.
    dut = Chip(cfg, defects=frozenset())
    out = {}

    async def tb(ctx):
        await tb_body(ctx, dut, out)

    run_sim(dut, tb)
    return out


CHIP_SMALL = small_cfg(2, 2)
CHIP_CFGS = [CHIP_SMALL, ChipConfig(formats=("int8",))]


@pytest.mark.parametrize("cfg", CHIP_CFGS, ids=lambda c: f"{c.rows}x{c.cols}d{c.operand_depth}")
def test_chip_id_caps_rev(cfg):
    async def body(ctx, dut, out):
        for name in ("ID", "REV", "CAPS0", "CAPS1", "TRACE_DEPTH"):
            out[name] = await csr(ctx, dut, name)

    out = run_chip(cfg, body)
    assert out["ID"] == ID_MAGIC == 0x464C4954
    assert out["REV"] == REVISIONS["A0"].code == 0xA0
    caps0, caps1 = REG["CAPS0"], REG["CAPS1"]
    assert caps0.field("rows").get(out["CAPS0"]) == cfg.rows
    assert caps0.field("cols").get(out["CAPS0"]) == cfg.cols
    assert caps0.field("lanes").get(out["CAPS0"]) == cfg.lanes
    assert caps0.field("formats").get(out["CAPS0"]) & 1 == 1, "INT8 format bit"
    assert 1 << caps1.field("log2_operand_depth").get(out["CAPS1"]) == cfg.operand_depth
    assert 1 << caps1.field("log2_acc_depth").get(out["CAPS1"]) == cfg.acc_depth
    assert caps1.field("cmd_fifo_depth").get(out["CAPS1"]) == cfg.cmd_fifo_depth
    assert 1 << caps1.field("log2_cmdq_depth").get(out["CAPS1"]) == cfg.cmdq_depth
    # the trace buffer's depth is the build's, not derived from another SRAM (it was cmdq_depth / 2)
    assert out["TRACE_DEPTH"] == REG["TRACE_DEPTH"].field("entries").get(out["TRACE_DEPTH"]) == cfg.trace_depth
    assert ChipConfig.from_caps(out["CAPS0"], out["CAPS1"], out["TRACE_DEPTH"]) == cfg, "discovery is the build"


def test_chip_documented_reset_values():
    """Every register with a documented reset value reads it after reset (no traffic yet)."""
    cfg = CHIP_SMALL

    async def body(ctx, dut, out):
        for r in REGISTERS:
            if r.reset is not None and r.access is not Access.WO:
                out[r.name] = await csr(ctx, dut, r.addr)

    out = run_chip(cfg, body)
    wrong = {
        name: f"0x{got:08x} (documented 0x{REG[name].reset:08x})"
        for name, got in out.items()
        if got != REG[name].reset
    }
    assert not wrong, f"registers not at their documented reset value: {wrong}"


def test_chip_scratch_rw():
    async def body(ctx, dut, out):
        out["reset"] = await csr(ctx, dut, "SCRATCH")
        out["vals"] = []
        for v in (0xDEADBEEF, 0x00000000, 0xFFFFFFFF, 0x12345678):
            await csr(ctx, dut, "SCRATCH", v)
            out["vals"].append((v, await csr(ctx, dut, "SCRATCH")))
        out["id_after"] = await csr(ctx, dut, "ID")

    out = run_chip(CHIP_SMALL, body)
    assert out["reset"] == 0
    for v, got in out["vals"]:
        assert got == v, f"SCRATCH wrote 0x{v:08x}, read 0x{got:08x}"
    assert out["id_after"] == ID_MAGIC, "SCRATCH write leaked into ID"


def test_chip_readonly_ignores_writes():
    async def body(ctx, dut, out):
        for name in ("ID", "CAPS0", "ERR", "DONE_COUNT", "CMDQ_HEAD"):
            before = await csr(ctx, dut, name)
            await csr(ctx, dut, name, ~before & M32)
            out[name] = (before, await csr(ctx, dut, name))
        out["scratch"] = await csr(ctx, dut, "SCRATCH")

    out = run_chip(CHIP_SMALL, body)
    scratch = out.pop("scratch")
    for name, (before, after) in out.items():
        assert after == before, f"read-only {name} changed on write: 0x{before:08x} -> 0x{after:08x}"
    assert out["ID"][0] == ID_MAGIC
    assert scratch == 0, "a write to a read-only register landed in SCRATCH"


def test_chip_window_roundtrip_and_autoincrement():
    """Front-door writes/reads of every region; MEM_ADDR moves on by one chunk per access."""
    cfg = CHIP_SMALL
    seed = case_seed("chip_window")
    rng = np.random.default_rng(seed)

    async def body(ctx, dut, out):
        rw = dut.region_words()
        out["data"] = {}
        for region in (Region.A, Region.B, Region.ACC, Region.CMDQ):
            depth, chunks = rw[region]
            bits = {Region.A: cfg.a_word_bits, Region.B: cfg.b_word_bits}.get(region, 32 * chunks)
            words = [int(x) for x in rng.integers(0, 1 << min(bits, 62), size=3)]
            first = depth - 3  # the last three words: the top of each region is reachable
            await write_words(ctx, dut, region, first, words)
            out.setdefault("addr_after_write", {})[region] = await csr(ctx, dut, "MEM_ADDR")
            flat = await win_read(ctx, dut, region, first * chunks, 3 * chunks)
            out.setdefault("addr_after_read", {})[region] = await csr(ctx, dut, "MEM_ADDR")
            got = [sum(flat[w * chunks + c] << (32 * c) for c in range(chunks)) for w in range(3)]
            out["data"][region] = (words, got, first, chunks)
        out["err"] = await csr(ctx, dut, "ERR")

    out = run_chip(cfg, body)
    for region, (words, got, first, chunks) in out["data"].items():
        assert got == words, f"region {region}: wrote {words}, read back {got} (seed={seed})"
        end = win_addr(region, (first + 3) * chunks)
        assert out["addr_after_write"][region] == end, f"region {region}: MEM_ADDR after writes"
        assert out["addr_after_read"][region] == end, f"region {region}: MEM_ADDR after reads"
    assert out["err"] == 0


def golden_tile_cmds(rng, cfg, k, a_addr, b_addr, c_addr, accumulate=False, tag=0):
    a = rand_int8(rng, (cfg.rows, k))
    b = rand_int8(rng, (k, cfg.cols))
    return a, b, matmul_cmd(k, a_addr, b_addr, c_addr, accumulate, tag)


@pytest.mark.parametrize("cfg", CHIP_CFGS, ids=lambda c: f"{c.rows}x{c.cols}d{c.operand_depth}")
@pytest.mark.parametrize("k", [1, 5])
def test_chip_single_matmul_through_ring(cfg, k):
    """One MATMUL through the command ring; result read back through the window."""
    name = f"chip_matmul1_{cfg.rows}x{cfg.cols}_K{k}"
    seed = case_seed(name)
    rng = np.random.default_rng(seed)
    a, b, cmd = golden_tile_cmds(rng, cfg, k, 3, 7, cfg.rows, tag=0x1111)

    async def body(ctx, dut, out):
        await write_words(ctx, dut, Region.A, 3, pack_a_words(a))
        await write_words(ctx, dut, Region.B, 7, pack_b_words(b))
        await submit(ctx, dut, [cmd])
        await wait_idle(ctx, dut, name)
        out["c"] = await read_acc_rows(ctx, dut, cfg.rows, cfg.rows)
        out["other"] = await read_acc_rows(ctx, dut, 0, cfg.rows)
        for reg in ("ERR", "ERR_COUNT", "DONE_COUNT", "CMDQ_HEAD"):
            out[reg] = await csr(ctx, dut, reg)

    out = run_chip(cfg, body)
    what = f"{name} (seed={seed})"
    np.testing.assert_array_equal(out["c"], gemm_int8(a, b), err_msg=what)
    assert not out["other"].any(), f"{what}: MATMUL wrote outside its C tile"
    assert (out["ERR"], out["ERR_COUNT"], out["DONE_COUNT"], out["CMDQ_HEAD"]) == (0, 0, 1, 1), what


@pytest.mark.parametrize("cfg", CHIP_CFGS, ids=lambda c: f"{c.rows}x{c.cols}d{c.operand_depth}")
def test_chip_matmul_accumulate_onto_window_preload(cfg):
    """Short-then-long MATMUL pair; the second accumulates onto a tile preloaded via the window."""
    name = f"chip_matmul_acc_{cfg.rows}x{cfg.cols}"
    seed = case_seed(name)
    rng = np.random.default_rng(seed)
    k0, k1 = 3, 5
    a0, b0, cmd0 = golden_tile_cmds(rng, cfg, k0, 0, 2, 0, tag=0x1111)
    a1, b1, cmd1 = golden_tile_cmds(rng, cfg, k1, 8, 10, cfg.rows, accumulate=True, tag=0x2222)
    c1_init = rand_int32(rng, (cfg.rows, cfg.lanes))
    c1_init[0, 0] = INT32_MAX  # the write-back add may wrap

    async def body(ctx, dut, out):
        await write_words(ctx, dut, Region.A, 0, pack_a_words(a0))
        await write_words(ctx, dut, Region.B, 2, pack_b_words(b0))
        await write_words(ctx, dut, Region.A, 8, pack_a_words(a1))
        await write_words(ctx, dut, Region.B, 10, pack_b_words(b1))
        await write_words(ctx, dut, Region.ACC, cfg.rows, [pack_acc_word(r) for r in c1_init])
        await submit(ctx, dut, [cmd0, cmd1])
        await wait_idle(ctx, dut, name)
        out["c"] = await read_acc_rows(ctx, dut, 0, 2 * cfg.rows)
        for reg in ("ERR", "ERR_COUNT", "DONE_COUNT", "CMDQ_HEAD"):
            out[reg] = await csr(ctx, dut, reg)

    out = run_chip(cfg, body)
    what = f"{name} (seed={seed})"
    np.testing.assert_array_equal(out["c"][: cfg.rows], gemm_int8(a0, b0), err_msg=f"{what}: MATMUL tile 0")
    np.testing.assert_array_equal(
        out["c"][cfg.rows :], gemm_int8_accumulate(c1_init, a1, b1), err_msg=f"{what}: accumulating tile 1"
    )
    assert (out["ERR"], out["ERR_COUNT"], out["DONE_COUNT"], out["CMDQ_HEAD"]) == (0, 0, 2, 2), what


@pytest.mark.parametrize("cfg", CHIP_CFGS, ids=lambda c: f"{c.rows}x{c.cols}d{c.operand_depth}")
def test_chip_long_then_short_matmul(cfg):
    """MATMUL with K > max(ROWS, COLS) followed by one with K < max(ROWS, COLS): the command
    processor issues the second with zero gap, so this is the engine's back-to-back case seen
    from the host. Both tiles must match the golden."""
    name = f"chip_long_short_{cfg.rows}x{cfg.cols}"
    seed = case_seed(name)
    rng = np.random.default_rng(seed)
    k0, k1 = cfg.min_matmul_cycles + 3, 1
    a0, b0, cmd0 = golden_tile_cmds(rng, cfg, k0, 0, 0, 0)
    a1, b1, cmd1 = golden_tile_cmds(rng, cfg, k1, k0, k0, cfg.rows)

    async def body(ctx, dut, out):
        await write_words(ctx, dut, Region.A, 0, pack_a_words(a0) + pack_a_words(a1))
        await write_words(ctx, dut, Region.B, 0, pack_b_words(b0) + pack_b_words(b1))
        await submit(ctx, dut, [cmd0, cmd1])
        await wait_idle(ctx, dut, name)
        out["c"] = await read_acc_rows(ctx, dut, 0, 2 * cfg.rows)

    out = run_chip(cfg, body)
    what = f"{name} K0={k0} K1={k1} (seed={seed})"
    np.testing.assert_array_equal(out["c"][: cfg.rows], gemm_int8(a0, b0), err_msg=f"{what}: first (long) MATMUL")
    np.testing.assert_array_equal(out["c"][cfg.rows :], gemm_int8(a1, b1), err_msg=f"{what}: second (short) MATMUL")


def test_chip_matmul_then_reduce_through_ring():
    """REDUCE right behind a MATMUL must wait for the engine and reduce the fresh tile."""
    cfg = CHIP_SMALL
    name = "chip_matmul_reduce"
    seed = case_seed(name)
    rng = np.random.default_rng(seed)
    a, b, mm = golden_tile_cmds(rng, cfg, 4, 0, 0, 4)
    cmds = [
        mm,
        pack_command(Opcode.REDUCE, flags=ReduceOp.SUM, length=cfg.rows, arg0=4, arg2=10),
        pack_command(Opcode.FENCE),
        pack_command(Opcode.REDUCE, flags=ReduceOp.MAX, length=cfg.rows, arg0=4, arg2=11),
        pack_command(Opcode.NOP),
    ]

    async def body(ctx, dut, out):
        await write_words(ctx, dut, Region.A, 0, pack_a_words(a))
        await write_words(ctx, dut, Region.B, 0, pack_b_words(b))
        # move the ring head to entry 3 first, so the real commands wrap around the 8-entry ring
        await submit(ctx, dut, [pack_command(Opcode.NOP)] * 3, first_entry=0)
        await wait_idle(ctx, dut, name)
        out["head"] = await csr(ctx, dut, "CMDQ_HEAD")
        await submit(ctx, dut, cmds, first_entry=3)
        await wait_idle(ctx, dut, name)
        out["c"] = await read_acc_rows(ctx, dut, 4, cfg.rows)
        out["red"] = await read_acc_rows(ctx, dut, 10, 2)
        out["done"] = await csr(ctx, dut, "DONE_COUNT")
        out["err"] = await csr(ctx, dut, "ERR")

    out = run_chip(cfg, body)
    what = f"{name} (seed={seed})"
    c = gemm_int8(a, b)
    np.testing.assert_array_equal(out["c"], c, err_msg=what)
    flat = np.ascontiguousarray(c.reshape(1, -1))
    assert out["red"][0].tolist() == [int(reduce_rows(flat, "sum")[0])] + [0] * (cfg.lanes - 1), what
    assert out["red"][1].tolist() == [int(reduce_rows(flat, "max")[0])] + [INT32_MIN] * (cfg.lanes - 1), what
    assert out["head"] == 3, what
    assert (out["done"], out["err"]) == (3 + len(cmds), 0), what


def test_chip_bad_opcode_then_valid_and_clear_err():
    cfg = CHIP_SMALL
    name = "chip_bad_opcode"
    seed = case_seed(name)
    rng = np.random.default_rng(seed)
    bad = pack_command(0x7F, flags=0x5A, length=3, arg0=0x0102, arg1=0x0304, arg2=0x0506, tag=0xCAFEF)  # tag is [127:108]: ERR_CMD3 reads it above the 12 sync bits
    a, b, good = golden_tile_cmds(rng, cfg, 3, 0, 0, 0)
    bad_len = pack_command(Opcode.MATMUL, length=0, tag=0xBEEF)  # a second, different error

    async def body(ctx, dut, out):
        await write_words(ctx, dut, Region.A, 0, pack_a_words(a))
        await write_words(ctx, dut, Region.B, 0, pack_b_words(b))
        await submit(ctx, dut, [bad, good])
        out["status"] = await wait_idle(ctx, dut, name)
        for reg in ("ERR", "ERR_CMD0", "ERR_CMD1", "ERR_CMD2", "ERR_CMD3", "ERR_COUNT", "DONE_COUNT"):
            out[reg] = await csr(ctx, dut, reg)
        out["c"] = await read_acc_rows(ctx, dut, 0, cfg.rows)
        # A second error keeps the first one latched but is counted.
        await submit(ctx, dut, [bad_len], first_entry=2)
        await wait_idle(ctx, dut, name)
        out["ERR2"] = await csr(ctx, dut, "ERR")
        out["ERR_CMD3_2"] = await csr(ctx, dut, "ERR_CMD3")
        out["ERR_COUNT2"] = await csr(ctx, dut, "ERR_COUNT")
        # CTRL.clear_err (strobe, reads back 0)
        await csr(ctx, dut, "CTRL", 1 << REG["CTRL"].field("clear_err").lsb)
        out["ctrl"] = await csr(ctx, dut, "CTRL")
        for reg in ("ERR", "ERR_CMD0", "ERR_CMD1", "ERR_CMD2", "ERR_CMD3", "ERR_COUNT", "STATUS", "DONE_COUNT"):
            out["cleared_" + reg] = await csr(ctx, dut, reg)

    out = run_chip(cfg, body)
    what = f"{name} (seed={seed})"
    assert out["ERR"] == ErrCode.BAD_OPCODE, f"{what}: ERR={out['ERR']}"
    assert [out[f"ERR_CMD{i}"] for i in range(4)] == cmd_chunks(bad), f"{what}: ERR_CMD0..3"
    assert out["ERR_CMD3"] == 0xCAFEF << 12
    assert out["ERR_COUNT"] == 1, what
    assert out["DONE_COUNT"] == 1, f"{what}: the valid MATMUL after the bad command must retire"
    assert REG["STATUS"].field("err").get(out["status"]) == 1, what
    np.testing.assert_array_equal(out["c"], gemm_int8(a, b), err_msg=f"{what}: MATMUL after the bad command")
    assert out["ERR2"] == ErrCode.BAD_OPCODE and out["ERR_CMD3_2"] == 0xCAFEF << 12, f"{what}: ERR must keep the first error"
    assert out["ERR_COUNT2"] == 2, what
    assert out["ctrl"] == 0, f"{what}: CTRL strobe bits must read back 0"
    for reg in ("ERR", "ERR_CMD0", "ERR_CMD1", "ERR_CMD2", "ERR_CMD3", "ERR_COUNT"):
        assert out["cleared_" + reg] == 0, f"{what}: {reg} not cleared by CTRL.clear_err"
    assert REG["STATUS"].field("err").get(out["cleared_STATUS"]) == 0, what
    assert out["cleared_DONE_COUNT"] == 1, f"{what}: clear_err must not touch DONE_COUNT"


def test_chip_window_range_error():
    cfg = CHIP_SMALL

    async def body(ctx, dut, out):
        depth_a, chunks_a = dut.region_words()[Region.A]
        await write_words(ctx, dut, Region.A, 0, [0x1234])
        # write one word past the end of A: must fault and must not alias onto word 0
        bad = win_addr(Region.A, depth_a * chunks_a)
        await csr(ctx, dut, "MEM_ADDR", bad)
        await csr(ctx, dut, "MEM_DATA", 0xFFFF)
        out["addr_after"] = await csr(ctx, dut, "MEM_ADDR")
        out["ERR"] = await csr(ctx, dut, "ERR")
        out["ERR_COUNT"] = await csr(ctx, dut, "ERR_COUNT")
        out["STATUS"] = await csr(ctx, dut, "STATUS")
        out["a0"] = (await win_read(ctx, dut, Region.A, 0, 1))[0]
        # an unknown region (and a read) faults too
        await csr(ctx, dut, "MEM_ADDR", win_addr(7, 0))
        await csr(ctx, dut, "MEM_DATA")
        out["ERR_COUNT2"] = await csr(ctx, dut, "ERR_COUNT")
        # ACC past its depth
        depth_c, chunks_c = dut.region_words()[Region.ACC]
        await csr(ctx, dut, "MEM_ADDR", win_addr(Region.ACC, depth_c * chunks_c))
        await csr(ctx, dut, "MEM_DATA", 1)
        out["ERR_COUNT3"] = await csr(ctx, dut, "ERR_COUNT")
        out["ERR3"] = await csr(ctx, dut, "ERR")
        out["bad"] = bad

    out = run_chip(cfg, body)
    assert out["ERR"] == ErrCode.WINDOW_RANGE, f"ERR={out['ERR']}"
    assert out["ERR_COUNT"] == 1
    assert REG["STATUS"].field("err").get(out["STATUS"]) == 1
    assert out["a0"] == 0x1234, "out-of-range window write aliased onto A word 0"
    assert out["addr_after"] == out["bad"] + 1, "MEM_ADDR must still move on by one chunk"
    assert out["ERR_COUNT2"] == 2, "unknown window region must fault"
    assert out["ERR_COUNT3"] == 3 and out["ERR3"] == ErrCode.WINDOW_RANGE


@pytest.mark.parametrize("k", [1, 5])
def test_chip_perf_macs(k):
    cfg = CHIP_SMALL
    name = f"chip_perf_macs_K{k}"
    seed = case_seed(name)
    rng = np.random.default_rng(seed)
    a, b, cmd = golden_tile_cmds(rng, cfg, k, 0, 0, 0)

    async def body(ctx, dut, out):
        out["macs0"] = await csr(ctx, dut, "MACS_LO")
        await write_words(ctx, dut, Region.A, 0, pack_a_words(a))
        await write_words(ctx, dut, Region.B, 0, pack_b_words(b))
        await submit(ctx, dut, [cmd])
        await wait_idle(ctx, dut, name)
        out["macs"] = await csr(ctx, dut, "MACS_LO")
        out["macs_hi"] = await csr(ctx, dut, "MACS_HI")
        out["eng_busy"] = await csr(ctx, dut, "ENGINE_BUSY_LO")
        out["c"] = await read_acc_rows(ctx, dut, 0, cfg.rows)
        await csr(ctx, dut, "CTRL", 1 << REG["CTRL"].field("clear_perf").lsb)
        out["macs_cleared"] = await csr(ctx, dut, "MACS_LO")

    out = run_chip(cfg, body)
    what = f"{name} (seed={seed})"
    assert out["macs0"] == 0, what
    assert out["macs"] == cfg.rows * cfg.cols * k, f"{what}: MACS_LO={out['macs']}, expected rows*cols*K"
    assert out["macs_hi"] == 0, what
    assert out["eng_busy"] >= max(k, cfg.min_matmul_cycles), f"{what}: ENGINE_BUSY_LO={out['eng_busy']}"
    np.testing.assert_array_equal(out["c"], gemm_int8(a, b), err_msg=what)
    assert out["macs_cleared"] == 0, f"{what}: CTRL.clear_perf"


# ---- command checks: every ErrCode of the command path, plus the valid boundary cases ------

_D = 16  # CHIP_SMALL operand_depth == acc_depth
BAD_COMMANDS = {
    "opcode_0x02": (pack_command(0x02, tag=1), ErrCode.BAD_OPCODE),
    "opcode_0xff": (pack_command(0xFF, length=1, tag=2), ErrCode.BAD_OPCODE),
    "matmul_k0": (pack_command(Opcode.MATMUL, length=0, tag=3), ErrCode.BAD_LENGTH),
    "matmul_a_range": (pack_command(Opcode.MATMUL, length=3, arg0=_D - 2, tag=4), ErrCode.A_RANGE),
    "matmul_a_range_16bit_wrap": (pack_command(Opcode.MATMUL, length=2, arg0=0xFFFF, tag=5), ErrCode.A_RANGE),
    "matmul_b_range": (pack_command(Opcode.MATMUL, length=3, arg1=_D - 2, tag=6), ErrCode.B_RANGE),
    "matmul_c_range": (pack_command(Opcode.MATMUL, length=1, arg2=_D - 1, tag=7), ErrCode.C_RANGE),
    "reduce_op7": (pack_command(Opcode.REDUCE, flags=7, length=1, tag=8), ErrCode.BAD_REDUCE_OP),
    "reduce_k0": (pack_command(Opcode.REDUCE, length=0, tag=9), ErrCode.BAD_LENGTH),
    "reduce_src_range": (pack_command(Opcode.REDUCE, length=2, arg0=_D - 1, tag=10), ErrCode.SRC_RANGE),
    "reduce_dst_range": (pack_command(Opcode.REDUCE, length=1, arg2=_D, tag=11), ErrCode.DST_RANGE),
    "nop_arg3": (pack_command(Opcode.NOP, arg3=1, tag=12), ErrCode.RESERVED_NONZERO),
    "matmul_arg3": (pack_command(Opcode.MATMUL, length=1, arg3=0x8000, tag=13), ErrCode.RESERVED_NONZERO),
    "vec_op15": (pack_command(Opcode.VEC, flags=15, length=1, tag=14), ErrCode.BAD_VEC_OP),
    "vec_fold_unary": (pack_command(Opcode.VEC, flags=5 | 3 << 4, length=1, tag=15), ErrCode.BAD_VEC_OP),
    "vec_cvt_into_acc": (pack_command(Opcode.VEC, flags=10, length=1, tag=23), ErrCode.BAD_VEC_OP),
    "vec_dst3": (pack_command(Opcode.VEC, flags=3 << 6, length=1, tag=24), ErrCode.BAD_VEC_OP),
    "vec_cvt_b_range": (pack_command(Opcode.VEC, flags=10 | 2 << 6, length=2, arg2=_D - 1, tag=25),
                        ErrCode.DST_RANGE),
    "vec_k0": (pack_command(Opcode.VEC, length=0, tag=16), ErrCode.BAD_LENGTH),
    "vec_a_range": (pack_command(Opcode.VEC, length=2, arg0=_D - 1, tag=17), ErrCode.SRC_RANGE),
    "vec_b_range": (pack_command(Opcode.VEC, length=2, arg1=_D - 1, tag=18), ErrCode.SRC_RANGE),
    "vec_b_scalar_range": (pack_command(Opcode.VEC, flags=2 << 4, length=2, arg1=_D, tag=19), ErrCode.SRC_RANGE),
    "vec_dst_range": (pack_command(Opcode.VEC, length=2, arg2=_D - 1, tag=20), ErrCode.DST_RANGE),
    "vec_fadd_into_a": (pack_command(Opcode.VEC, flags=1 << 6, length=1, tag=21), ErrCode.BAD_VEC_OP),
    "vec_arg3": (pack_command(Opcode.VEC, length=1, arg3=1, tag=22), ErrCode.RESERVED_NONZERO),
    "vec_cvt_f8_no_format": (pack_command(Opcode.VEC, flags=15 | 2 << 6, length=1, tag=28), ErrCode.BAD_VEC_OP),
    "vec_cvt_f8_e2m1": (pack_command(Opcode.VEC, flags=15 | 2 << 6, length=1, arg3=3, tag=29), ErrCode.BAD_VEC_OP),
    "vec_cvt_f8_into_acc": (pack_command(Opcode.VEC, flags=15, length=1, arg3=1, tag=30), ErrCode.BAD_VEC_OP),
    "vec_requant_fold": (pack_command(Opcode.VEC, flags=14 | 3 << 4, length=1, tag=26), ErrCode.BAD_VEC_OP),
    "vec_requant_b_range": (pack_command(Opcode.VEC, flags=14 | 2 << 6, length=2, arg2=_D - 1, tag=27),
                            ErrCode.DST_RANGE),
}
GOOD_BOUNDARY_COMMANDS = {
    "matmul_a_top": pack_command(Opcode.MATMUL, length=3, arg0=_D - 3),
    "matmul_b_top": pack_command(Opcode.MATMUL, length=3, arg1=_D - 3),
    "matmul_c_top": pack_command(Opcode.MATMUL, length=1, arg2=_D - 2),
    "matmul_k_full": pack_command(Opcode.MATMUL, length=_D),
    "reduce_src_top": pack_command(Opcode.REDUCE, flags=ReduceOp.MIN, length=2, arg0=_D - 2),
    "reduce_whole": pack_command(Opcode.REDUCE, flags=ReduceOp.MAX, length=_D, arg2=_D - 1),
    "fence": pack_command(Opcode.FENCE),
    "vec_top": pack_command(Opcode.VEC, length=2, arg0=_D - 2, arg1=_D - 2, arg2=_D - 2),
    "vec_scalar_b_top": pack_command(Opcode.VEC, flags=2 << 4, length=_D, arg1=_D - 1),
    "vec_unary_b_unchecked": pack_command(Opcode.VEC, flags=5, length=_D, arg1=0xFFFF),  # I2F reads no b
    "vec_fold_whole_acc": pack_command(Opcode.VEC, flags=3 << 4, length=_D, arg1=0xFFFF, arg2=_D - 1),
    "vec_cvt_b_top": pack_command(Opcode.VEC, flags=10 | 2 << 6, length=2, arg2=_D - 2),
    "vec_cvt_f8_e5m2_b_top": pack_command(Opcode.VEC, flags=15 | 2 << 6, length=2, arg2=_D - 2, arg3=2),
    "vec_requant_into_acc": pack_command(Opcode.VEC, flags=14, length=2, arg2=_D - 2),
    "vec_requant_into_b": pack_command(Opcode.VEC, flags=14 | 2 << 6, length=2, arg2=_D - 2),
}


@pytest.mark.parametrize("case", list(BAD_COMMANDS))
def test_chip_command_check_errors(case):
    cmd, code = BAD_COMMANDS[case]
    assert CHIP_SMALL.operand_depth == CHIP_SMALL.acc_depth == _D

    async def body(ctx, dut, out):
        await submit(ctx, dut, [cmd, pack_command(Opcode.NOP)])
        await wait_idle(ctx, dut, case)
        for reg in ("ERR", "ERR_CMD0", "ERR_CMD1", "ERR_CMD2", "ERR_CMD3", "ERR_COUNT", "DONE_COUNT"):
            out[reg] = await csr(ctx, dut, reg)

    out = run_chip(CHIP_SMALL, body)
    assert out["ERR"] == code, f"{case}: ERR={out['ERR']}, expected {code!r}"
    assert [out[f"ERR_CMD{i}"] for i in range(4)] == cmd_chunks(cmd), f"{case}: ERR_CMD0..3"
    assert (out["ERR_COUNT"], out["DONE_COUNT"]) == (1, 1), f"{case}: ERR_COUNT/DONE_COUNT"


@pytest.mark.parametrize("case", list(GOOD_BOUNDARY_COMMANDS))
def test_chip_command_check_boundaries_accepted(case):
    cmd = GOOD_BOUNDARY_COMMANDS[case]

    async def body(ctx, dut, out):
        await submit(ctx, dut, [cmd])
        await wait_idle(ctx, dut, case)
        out["ERR"] = await csr(ctx, dut, "ERR")
        out["DONE_COUNT"] = await csr(ctx, dut, "DONE_COUNT")

    out = run_chip(CHIP_SMALL, body)
    assert (out["ERR"], out["DONE_COUNT"]) == (0, 1), f"{case}: valid boundary command rejected: {out}"


@pytest.mark.parametrize("fifo_depth", [2, 3])
def test_chip_fifo_backpressure(fifo_depth):
    """A full ring behind a long MATMUL with a tiny prefetch FIFO: nothing lost, order kept."""
    cfg = small_cfg(2, 2, operand_depth=64, cmd_fifo_depth=fifo_depth)
    name = f"chip_fifo_{fifo_depth}"
    seed = case_seed(name)
    rng = np.random.default_rng(seed)
    a0, b0, mm0 = golden_tile_cmds(rng, cfg, 40, 0, 0, 0)
    a1, b1, mm1 = golden_tile_cmds(rng, cfg, 2, 40, 40, 2)
    a2, b2, mm2 = golden_tile_cmds(rng, cfg, 3, 42, 42, 0, accumulate=True)
    cmds = [
        mm0,
        pack_command(Opcode.NOP),
        mm1,
        pack_command(Opcode.REDUCE, flags=ReduceOp.SUM, length=4, arg0=0, arg2=8),
        pack_command(Opcode.FENCE),
        mm2,
        pack_command(Opcode.REDUCE, flags=ReduceOp.MIN, length=2, arg0=0, arg2=9),
    ]
    assert len(cmds) == cfg.cmdq_depth - 1

    async def body(ctx, dut, out):
        await write_words(ctx, dut, Region.A, 0, pack_a_words(a0) + pack_a_words(a1) + pack_a_words(a2))
        await write_words(ctx, dut, Region.B, 0, pack_b_words(b0) + pack_b_words(b1) + pack_b_words(b2))
        await submit(ctx, dut, cmds)
        out["status_busy"] = await csr(ctx, dut, "STATUS")
        await wait_idle(ctx, dut, name, polls=200)
        out["acc"] = await read_acc_rows(ctx, dut, 0, 10)
        out["DONE_COUNT"] = await csr(ctx, dut, "DONE_COUNT")
        out["ERR"] = await csr(ctx, dut, "ERR")
        out["STALLS"] = await csr(ctx, dut, "STALLS_LO")

    out = run_chip(cfg, body)
    what = f"{name} (seed={seed})"
    t0 = gemm_int8(a0, b0)
    t1 = gemm_int8(a1, b1)
    red_sum = int(reduce_rows(np.ascontiguousarray(np.concatenate([t0, t1]).reshape(1, -1)), "sum")[0])
    t0b = gemm_int8_accumulate(t0, a2, b2)
    red_min = int(reduce_rows(np.ascontiguousarray(t0b.reshape(1, -1)), "min")[0])
    assert REG["STATUS"].field("busy").get(out["status_busy"]) == 1, f"{what}: STATUS.busy during the run"
    assert (out["DONE_COUNT"], out["ERR"]) == (len(cmds), 0), f"{what}: {out['DONE_COUNT']=} {out['ERR']=}"
    np.testing.assert_array_equal(out["acc"][0:2], t0b, err_msg=f"{what}: tile 0")
    np.testing.assert_array_equal(out["acc"][2:4], t1, err_msg=f"{what}: tile 1")
    assert out["acc"][8].tolist() == [red_sum, 0], f"{what}: REDUCE SUM"
    assert out["acc"][9].tolist() == [red_min, INT32_MAX], f"{what}: REDUCE MIN"
    assert out["STALLS"] > 0, f"{what}: commands waited behind the long MATMUL, STALLS must count"


def test_chip_irq_status_and_pin():
    cfg = CHIP_SMALL
    done_bit = 1 << REG["IRQ_STATUS"].field("done").lsb
    err_bit = 1 << REG["IRQ_STATUS"].field("err").lsb
    irq_en = 1 << REG["CTRL"].field("irq_en").lsb

    async def body(ctx, dut, out):
        await csr(ctx, dut, "IRQ_STATUS", done_bit | err_bit)  # w1c: start from a clean state
        out["cleared"] = await csr(ctx, dut, "IRQ_STATUS")
        out["pin_disabled"] = ctx.get(dut.irq)
        await submit(ctx, dut, [pack_command(Opcode.MATMUL, length=3)])
        await wait_idle(ctx, dut, "irq")
        out["after_done"] = await csr(ctx, dut, "IRQ_STATUS")
        out["pin_masked"] = ctx.get(dut.irq)
        await csr(ctx, dut, "CTRL", irq_en)
        out["ctrl"] = await csr(ctx, dut, "CTRL")
        out["pin_enabled"] = ctx.get(dut.irq)
        await csr(ctx, dut, "IRQ_STATUS", done_bit)
        out["after_w1c"] = await csr(ctx, dut, "IRQ_STATUS")
        out["pin_after_w1c"] = ctx.get(dut.irq)
        await submit(ctx, dut, [pack_command(0x33)], first_entry=1)
        await wait_idle(ctx, dut, "irq")
        out["after_err"] = await csr(ctx, dut, "IRQ_STATUS")
        out["pin_err"] = ctx.get(dut.irq)
        await csr(ctx, dut, "IRQ_STATUS", err_bit)
        out["after_err_w1c"] = await csr(ctx, dut, "IRQ_STATUS")

    out = run_chip(cfg, body)
    assert out["cleared"] == 0 and out["pin_disabled"] == 0
    assert out["after_done"] == done_bit, f"IRQ_STATUS after a command went idle: {out['after_done']:#x}"
    assert out["pin_masked"] == 0, "irq must stay low while CTRL.irq_en=0"
    assert out["ctrl"] == irq_en, "CTRL.irq_en must read back"
    assert out["pin_enabled"] == 1
    assert out["after_w1c"] == 0 and out["pin_after_w1c"] == 0, "w1c of IRQ_STATUS.done"
    assert out["after_err"] == done_bit | err_bit and out["pin_err"] == 1
    assert out["after_err_w1c"] == done_bit, "w1c clears only the written bits"


def test_chip_soft_reset():
    cfg = CHIP_SMALL
    rng = np.random.default_rng(case_seed("soft_reset"))
    a, b, cmd = golden_tile_cmds(rng, cfg, 3, 0, 0, 0)
    soft = 1 << REG["CTRL"].field("soft_reset").lsb

    async def body(ctx, dut, out):
        await write_words(ctx, dut, Region.A, 0, pack_a_words(a))
        await write_words(ctx, dut, Region.B, 0, pack_b_words(b))
        await submit(ctx, dut, [pack_command(0x99), cmd])
        await wait_idle(ctx, dut, "soft_reset")
        await csr(ctx, dut, "SCRATCH", 0xABCD)
        await csr(ctx, dut, "CTRL", soft)
        for reg in ("CTRL", "CMDQ_HEAD", "CMDQ_TAIL", "DONE_COUNT", "ERR", "ERR_COUNT", "STATUS", "SCRATCH"):
            out[reg] = await csr(ctx, dut, reg)
        out["c"] = await read_acc_rows(ctx, dut, 0, cfg.rows)
        # the ring restarts at entry 0
        await submit(ctx, dut, [pack_command(Opcode.MATMUL, length=3, arg2=2)])
        await wait_idle(ctx, dut, "soft_reset")
        out["c2"] = await read_acc_rows(ctx, dut, 2, cfg.rows)
        out["DONE2"] = await csr(ctx, dut, "DONE_COUNT")

    out = run_chip(cfg, body)
    assert out["CTRL"] == 0, "soft_reset is a strobe and reads back 0"
    for reg in ("CMDQ_HEAD", "CMDQ_TAIL", "DONE_COUNT", "ERR", "ERR_COUNT"):
        assert out[reg] == 0, f"{reg}={out[reg]:#x} after CTRL.soft_reset"
    assert out["STATUS"] == REG["STATUS"].reset, f"STATUS={out['STATUS']:#x} after soft reset"
    assert out["SCRATCH"] == 0xABCD, "soft reset is for the command path and units, not SCRATCH"
    np.testing.assert_array_equal(out["c"], gemm_int8(a, b), err_msg="SRAM contents must survive soft reset")
    np.testing.assert_array_equal(out["c2"], gemm_int8(a, b), err_msg="MATMUL after soft reset")
    assert out["DONE2"] == 1


@pytest.mark.parametrize("delay", range(10))
def test_chip_window_error_and_command_error_both_counted(delay):
    """A window range error and a dropped command, at every relative timing around the drop,
    are both counted in ERR_COUNT (ERR keeps whichever came first)."""
    cfg = CHIP_SMALL
    bad_cmd = pack_command(0x77, tag=0x5EED)

    async def body(ctx, dut, out):
        await win_write(ctx, dut, Region.CMDQ, 0, cmd_chunks(bad_cmd))
        await csr(ctx, dut, "MEM_ADDR", win_addr(Region.A, cfg.operand_depth))  # one past the end
        await csr(ctx, dut, "CMDQ_TAIL", 1)
        for _ in range(delay):
            await ctx.tick()
        await csr(ctx, dut, "MEM_DATA", 0)
        await wait_idle(ctx, dut, f"delay={delay}")
        out["ERR"] = await csr(ctx, dut, "ERR")
        out["ERR_COUNT"] = await csr(ctx, dut, "ERR_COUNT")
        out["DONE_COUNT"] = await csr(ctx, dut, "DONE_COUNT")

    out = run_chip(cfg, body)
    assert out["ERR"] in (ErrCode.BAD_OPCODE, ErrCode.WINDOW_RANGE), out
    assert out["ERR_COUNT"] == 2, (
        f"delay={delay}: ERR_COUNT={out['ERR_COUNT']} (ERR={ErrCode(out['ERR']).name}); one of the two errors was lost"
    )
    assert out["DONE_COUNT"] == 0


# ---- CommandProcessor alone: prefetch FIFO back-pressure -------------------------------------


class CmdProcHarness(Elaboratable):
    def __init__(self, cfg: ChipConfig):
        from rtl.cmdproc import CommandProcessor
        from rtl.isa import COMMAND_BITS

        self.cfg = cfg
        self.cp = CommandProcessor(cfg, BoardConfig().resolve(cfg))
        self.q_mem = Memory(shape=COMMAND_BITS, depth=cfg.cmdq_depth, init=[])

    def elaborate(self, platform):
        m = Module()
        m.submodules.cp = self.cp
        m.submodules.q_mem = self.q_mem
        rp = self.q_mem.read_port()
        m.d.comb += [rp.addr.eq(self.cp.cmdq_rd_addr), self.cp.cmdq_rd_data.eq(rp.data)]
        return m


@pytest.mark.parametrize("fifo_depth", [2, 3, 4])
def test_cmdproc_fifo_full_ring_behind_busy_unit(fifo_depth):
    """Seven FENCEs queued while a unit is busy: all must retire once it goes idle
    (every fetched ring entry must land in the prefetch FIFO)."""
    cfg = small_cfg(2, 2, cmd_fifo_depth=fifo_depth)
    h = CmdProcHarness(cfg)
    cp = h.cp
    n = cfg.cmdq_depth - 1
    out = {}

    async def tb(ctx):
        for i in range(n):
            ctx.set(h.q_mem.data[i], pack_command(Opcode.FENCE, tag=i))
        ctx.set(cp.mm_feed_ready, 1)
        ctx.set(cp.mm_busy, 1)  # hold the first FENCE at the FIFO head
        ctx.set(cp.tail, n)
        max_level = 0
        for _ in range(30):
            max_level = max(max_level, ctx.get(cp.fifo_level))
            await ctx.tick()
        out["head_while_blocked"] = ctx.get(cp.head)
        ctx.set(cp.mm_busy, 0)
        for _ in range(100):
            max_level = max(max_level, ctx.get(cp.fifo_level))
            if ctx.get(cp.idle):
                break
            await ctx.tick()
        else:
            raise AssertionError(f"fifo_depth={fifo_depth}: never idle; done_count={ctx.get(cp.done_count)}")
        out["done"] = ctx.get(cp.done_count)
        out["head"] = ctx.get(cp.head)
        out["max_level"] = max_level

    run_sim(h, tb)
    assert out["head"] == n
    assert out["max_level"] <= fifo_depth
    assert out["done"] == n, (
        f"cmd_fifo_depth={fifo_depth}: {n} FENCEs fetched, only {out['done']} retired -- "
        f"{n - out['done']} commands were dropped on the way into the prefetch FIFO "
        f"(CMDQ_HEAD advanced by {out['head_while_blocked']} while the FIFO head was blocked)"
    )
    assert out["head_while_blocked"] == fifo_depth, (
        f"fifo_depth={fifo_depth}: prefetched {out['head_while_blocked']} entries while the head was blocked"
    )


@pytest.mark.parametrize("kind", ["nop", "matmul", "reduce"])
def test_chip_idle_pin_after_doorbell(kind):
    """The idle pin is high out of reset, low once the doorbell transfer has completed, and
    rises only when the work is finished (results readable)."""
    cfg = CHIP_SMALL
    rng = np.random.default_rng(case_seed(f"idle_pin_{kind}"))
    a, b, mm = golden_tile_cmds(rng, cfg, 7, 0, 0, 0)
    acc0 = rand_int32(rng, (4, cfg.lanes))
    cmd = {
        "nop": pack_command(Opcode.NOP),
        "matmul": mm,
        "reduce": pack_command(Opcode.REDUCE, flags=ReduceOp.SUM, length=4, arg0=0, arg2=5),
    }[kind]

    async def body(ctx, dut, out):
        out["reset_pin"] = ctx.get(dut.idle)
        await write_words(ctx, dut, Region.A, 0, pack_a_words(a))
        await write_words(ctx, dut, Region.B, 0, pack_b_words(b))
        await write_words(ctx, dut, Region.ACC, 0, [pack_acc_word(r) for r in acc0])
        await win_write(ctx, dut, Region.CMDQ, 0, cmd_chunks(cmd))
        out["pin_before"] = ctx.get(dut.idle)
        await csr(ctx, dut, "CMDQ_TAIL", 1)
        out["pin_after_doorbell"] = ctx.get(dut.idle)
        for n in range(200):
            if ctx.get(dut.idle):
                break
            await ctx.tick()
        else:
            raise AssertionError(f"{kind}: idle pin never rose")
        out["status"] = await csr(ctx, dut, "STATUS")
        out["done"] = await csr(ctx, dut, "DONE_COUNT")
        out["acc"] = await read_acc_rows(ctx, dut, 0, 6)

    out = run_chip(cfg, body)
    assert out["reset_pin"] == 1 and out["pin_before"] == 1, f"{kind}: idle pin low with nothing to do"
    assert out["pin_after_doorbell"] == 0, f"{kind}: idle pin still high after the doorbell transfer completed"
    assert REG["STATUS"].field("idle").get(out["status"]) == 1, f"{kind}: STATUS.idle disagrees with the pin"
    assert out["done"] == 1, f"{kind}: idle pin rose before the command retired"
    exp = acc0.copy()
    exp = np.concatenate([exp, np.zeros((2, cfg.lanes), np.int32)])
    if kind == "matmul":
        exp[0:2] = gemm_int8(a, b)
    elif kind == "reduce":
        exp[5] = [int(reduce_rows(np.ascontiguousarray(acc0.reshape(1, -1)), "sum")[0]), 0]
    np.testing.assert_array_equal(out["acc"], exp, err_msg=f"{kind}: results not final when the idle pin rose")


# ---- the vector unit through the command processor ------------------------------------------

def test_chip_vec_runs_signals_and_counts():
    """A VEC from the ring: result in ACC equal to the golden, its semaphore signalled, VEC_BUSY
    and VEC_ELEMS counted; a chip built without the unit rejects the same command."""
    from golden.vector import vector_op
    from rtl.isa import VecB, VecOp, nop, vec

    cfg = small_cfg(2, 2)
    rng = np.random.default_rng([case_seed("chip_vec"), 1])
    acc = rng.standard_normal((8, cfg.lanes)).astype(np.float32)
    acc_bits = acc.view(np.uint32)
    cmds = [vec(VecOp.FMUL, a=0, b=4, count=4, dst=8, signal=3), nop(wait=3)]

    async def body(ctx, dut, out):
        await write_words(ctx, dut, Region.ACC, 0, [sum(int(v) << (32 * j) for j, v in enumerate(row))
                                                    for row in acc_bits])
        await submit(ctx, dut, cmds)
        await wait_idle(ctx, dut, "chip_vec")
        out["c"] = await read_acc_rows(ctx, dut, 8, 4)
        for reg in ("ERR", "DONE_COUNT", "VEC_BUSY_LO", "VEC_ELEMS_LO"):
            out[reg] = await csr(ctx, dut, reg)

    out = run_chip(cfg, body)
    want = vector_op("fmul", acc_bits[0:4], acc_bits[4:8])
    got = np.array(out["c"], np.int64).astype(np.uint32)
    np.testing.assert_array_equal(got, want, err_msg="VEC FMUL through the ring")
    assert (out["ERR"], out["DONE_COUNT"]) == (0, 2), out
    assert out["VEC_BUSY_LO"] == 4 + 2 and out["VEC_ELEMS_LO"] == 4 * cfg.lanes, out

    async def rejected(ctx, dut, out):
        await submit(ctx, dut, [cmds[0]])
        await wait_idle(ctx, dut, "chip_vec_absent")
        out["ERR"] = await csr(ctx, dut, "ERR")

    assert run_chip(small_cfg(2, 2, vector=False), rejected)["ERR"] == ErrCode.BAD_VEC_OP


@pytest.mark.parametrize("op", [ReduceOp.FSUM, ReduceOp.FMAX], ids=lambda o: o.name)
def test_reduce_fp32(op):
    """FSUM / FMAX: the lane tree then the word-by-word fold, bit-exact against
    golden.vector.reduce_words (which does that order in numpy float32), specials included."""
    from golden.vector import FP_REDUCE_IDENTITY, reduce_words

    cfg = small_cfg(4, 4)
    name = f"reduce_fp32_{op.name}"
    rng = np.random.default_rng(case_seed(name))
    vals = (rng.standard_normal((cfg.acc_depth, cfg.lanes)) * 1e3).astype(np.float32)
    vals[3, 1], vals[7, 2], vals[9, 0] = np.inf, -0.0, 1e-40  # one Inf in the first run, a -0, a subnormal
    vals[12, 3] = np.nan  # in the second run only
    bits = vals.view(np.uint32)
    reduces = [(op, 0, 10, 10), (op, 11, 4, 15), (op, 10, 1, 10)]
    acc = run_reduce(cfg, bits.view(np.int32), reduces, name).astype(np.int64).astype(np.uint32)
    exp = bits.copy()
    for _, src, count, dst in reduces:
        v = reduce_words(op.name.lower(), exp[src:src + count][None])[0]
        exp[dst] = [v] + [FP_REDUCE_IDENTITY[op.name.lower()]] * (cfg.lanes - 1)
    bad = sorted({int(r) for r in np.argwhere(acc != exp)[:, 0]})
    assert not bad, f"{name} (seed {case_seed(name)}): words {bad} got {[acc[r].tolist() for r in bad]} " \
                    f"want {[exp[r].tolist() for r in bad]}"
