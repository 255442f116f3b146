"""cocotb tests of the whole chip on a real simulator (driven by tests/test_chip_sim.py).

Every test resets the chip first; random data comes from FIRSTLIGHT_SEED.
"""

from __future__ import annotations

import os

import cocotb
import numpy as np

import golden
import workarounds
from cosim.device import Device, DeviceTimeout
from cosim.testbench import Testbench
from kernels.gemm import gemm
from kernels.layout import int32_to_words, words_to_int32
from kernels.reduce import reduce_rows
from rtl.csr_map import ID_MAGIC, REG
from rtl.isa import ErrCode, Opcode, ReduceOp, matmul, pack_command, reduce
from rtl.memories import Region

SEED = int(os.environ.get("FIRSTLIGHT_SEED", "1"))


async def open_device(dut) -> Device:
    tb = Testbench(dut, clock=os.environ.get("FIRSTLIGHT_CLOCK", "hdl"))
    return await Device.open(tb)


def mit(dev) -> workarounds.Mitigations:
    """The chip's errata mitigations (auto policy, from its REV), attached before a kernel call."""
    return workarounds.attach(dev)


def rng_for(name: str) -> np.random.Generator:
    return np.random.default_rng([SEED, sum(name.encode())])


def assert_equal(got: np.ndarray, ref: np.ndarray, what: str) -> None:
    bad = np.argwhere(got != ref)
    assert not len(bad), (
        f"{what}: {len(bad)} mismatches, first at {tuple(bad[0])}: got {got[tuple(bad[0])]}, "
        f"expected {ref[tuple(bad[0])]} (seed {SEED})"
    )


@cocotb.test()
async def csr_identity_and_scratch(dut):
    dev = await open_device(dut)
    assert await dev.read_csr("ID") == ID_MAGIC
    caps0 = await dev.read_csr("CAPS0")
    assert REG["CAPS0"].field("rows").get(caps0) == dev.config.rows
    for v in (0xDEADBEEF, 0, 0xFFFFFFFF, 0x12345678):
        await dev.write_csr("SCRATCH", v)
        assert await dev.read_csr("SCRATCH") == v
    await dev.write_csr("ID", 0)
    assert await dev.read_csr("ID") == ID_MAGIC, "ID is read-only"


@cocotb.test()
async def backdoor_matches_front_door(dut):
    """The backdoor (simulator handles) and the window (real bus path) see the same words."""
    dev = await open_device(dut)
    rng = rng_for("backdoor")
    for region, name in ((Region.A, "A"), (Region.B, "B"), (Region.ACC, "ACC"), (Region.CMDQ, "CMDQ")):
        depth = dev.mem_depth(region)
        width = dev.mem_width(region)
        chunks = max(1, width // 32)
        addrs = [0, 1, depth - 1]
        words = [int(rng.integers(0, 2**63)) * (2**64) + int(rng.integers(0, 2**63)) for _ in addrs]
        words = [w & ((1 << width) - 1) for w in words]
        for a, w in zip(addrs, words):
            dev.load_words(region, a, [w])
            got = await dev.window_read(region, a * chunks, chunks)
            back = sum(c << (32 * i) for i, c in enumerate(got))
            assert back == w, f"{name}[{a}]: backdoor wrote {w:#x}, window read {back:#x}"
        # and the other way round
        w = words[0] ^ ((1 << width) - 1)
        await dev.window_write(region, 2 * chunks, [(w >> (32 * i)) & 0xFFFFFFFF for i in range(chunks)])
        assert dev.read_words(region, 2, 1)[0] == w, f"{name}[2]: window write not seen by the backdoor"


@cocotb.test()
async def backdoor_ranges_land_on_their_words(dut):
    """A range of words written through the backdoor (on Verilator one whole-array VPI call,
    cosim/vpi_arrays.py, with the word order Verilator needs for descending arrays) lands word
    for word where cocotb's own per-word handles see it, and leaves the words around it alone;
    the same for an unaligned DRAM write. The words are read back through cocotb's indexing, not
    through the backdoor under test."""
    from rtl.dram import DRAM_INSTANCE, ROW_BYTES
    from rtl.dram_array import ARRAY_VAR
    from rtl.memories import MEMORIES

    dev = await open_device(dut)
    rng = rng_for("backdoor ranges")
    for mem in MEMORIES:
        depth, width = dev.mem_depth(mem.region), dev.mem_width(mem.region)
        array = getattr(dev.tb.chip, mem.backdoor)
        for start, count in ((0, 3), (depth // 3, 7), (depth - 5, 5)):
            lo, hi = max(0, start - 1), min(depth, start + count + 1)
            dev.load_words(mem.region, lo, [0] * (hi - lo))
            words = [int(rng.integers(1, 2**62)) << max(0, width - 62) & ((1 << width) - 1) | 1 for _ in range(count)]
            dev.load_words(mem.region, start, words)
            await dev.tb.wait_cycles(1)  # Icarus applies a deposit at the end of the time step
            want = [words[i - start] if start <= i < start + count else 0 for i in range(lo, hi)]
            seen = [int(array[i].value) for i in range(lo, hi)]
            assert seen == want, f"{mem.name} words [{lo}, {hi}) after writing [{start}, {start + count}): {seen} != {want}"
            assert dev.read_words(mem.region, lo, hi - lo) == want, f"{mem.name}: backdoor read of [{lo}, {hi})"
    rows = getattr(getattr(dev.tb.dut.dram, DRAM_INSTANCE), ARRAY_VAR)
    first, n_rows = 5, 4
    dev.dram_write(first * ROW_BYTES, np.full(n_rows * ROW_BYTES, 0xAA, np.uint8))
    # Icarus: a read in the time step of a deposit sees the old word, and the unaligned write
    # below reads its first and last rows (buffers are 4 KiB-aligned: kernels never share a row)
    await dev.tb.wait_cycles(1)
    data = rng.integers(0, 256, 70, dtype=np.uint8)
    at = first * ROW_BYTES + 2 * dev.board.bus_bytes  # whole beats, not whole rows
    dev.dram_write(at, data)
    await dev.tb.wait_cycles(1)
    want = np.full(n_rows * ROW_BYTES, 0xAA, np.uint8)
    off = at - first * ROW_BYTES
    want[off:off + 70] = data
    pad = -(-70 // dev.board.bus_bytes) * dev.board.bus_bytes
    want[off + 70:off + pad] = 0  # the last beat's tail is zero-filled
    seen = b"".join(int(rows[first + r].value).to_bytes(ROW_BYTES, "little") for r in range(n_rows))
    assert seen == want.tobytes(), "DRAM rows around an unaligned write"
    assert bytes(dev.dram_read(first * ROW_BYTES, n_rows * ROW_BYTES)) == want.tobytes(), "DRAM backdoor read"


# (9, 6, 1500) and (33, 65, 256): K in several chunks, operand panels and C tile rows that straddle
# 4 KiB DRAM pages, several tile groups (so consecutive groups share a chunk's operands)
GEMM_SHAPES = [(1, 1, 1), (4, 4, 4), (37, 19, 100), (5, 7, 3), (9, 6, 1500), (13, 29, 17), (33, 65, 256)]
# Icarus runs the same Verilog as Verilator ~40x slower (the K = 131073 wrap alone: 300 s against
# 8 s): it gets the short problems, its value being 4-state semantics, not more datapath coverage.
ON_ICARUS = cocotb.SIM_NAME.lower().startswith("icarus")
ICARUS_SHAPES = [(1, 1, 1), (4, 4, 4), (37, 19, 100), (5, 7, 3), (13, 29, 17)]


@cocotb.test()
async def gemm_shapes_bit_exact(dut):
    dev = await open_device(dut)
    rng = rng_for("gemm")
    for m, n, k in ICARUS_SHAPES if ON_ICARUS else GEMM_SHAPES:
        a = rng.integers(-128, 128, (m, k), dtype=np.int8)
        b = rng.integers(-128, 128, (k, n), dtype=np.int8)
        c, stats = await gemm(dev, a, b, mitigations=mit(dev))
        assert_equal(c, golden.gemm_int8(a, b), f"gemm {m}x{n}x{k}")
        assert stats.macs_issued >= m * n * k


@cocotb.test()
async def gemm_extremes_wrap(dut):
    """-128 * -128 summed over K = 131073 passes 2**31: the int32 accumulator must wrap (on
    Icarus a shorter K with the extreme values only: the wrap is Verilator's, 1M cycles)."""
    dev = await open_device(dut)
    k = 4097 if ON_ICARUS else 131073
    a = np.full((1, k), -128, np.int8)
    b = np.full((k, 1), -128, np.int8)
    c, _ = await gemm(dev, a, b, mitigations=mit(dev))
    ref = golden.gemm_int8(a, b)
    assert int(ref[0, 0]) == (-2147467264 if k == 131073 else 16384 * k)  # spec: (16384 * k) mod 2**32, as signed
    assert_equal(c, ref, "wrapping gemm")
    rng = rng_for("extremes")
    a = rng.choice(np.array([-128, 127], np.int8), (6, 300))
    b = rng.choice(np.array([-128, 127], np.int8), (300, 5))
    c, _ = await gemm(dev, a, b, mitigations=mit(dev))
    assert_equal(c, golden.gemm_int8(a, b), "extreme-value gemm")


@cocotb.test()
async def reductions_bit_exact(dut):
    dev = await open_device(dut)
    rng = rng_for("reduce")
    cases = [
        (np.full((2, 9), 2**31 - 1, np.int32), "sum"),  # wraps
        (rng.integers(-1000, -1, (3, 7), dtype=np.int32), "max"),  # all negative
        (rng.integers(1, 1000, (3, 7), dtype=np.int32), "min"),
        (rng.integers(-(2**31), 2**31, (5, 33), dtype=np.int64).astype(np.int32), "sum"),
        (rng.integers(-(2**31), 2**31, (1, 1), dtype=np.int64).astype(np.int32), "max"),
        (rng.integers(-(2**31), 2**31, (2, 5000), dtype=np.int64).astype(np.int32), "min"),  # two rounds
    ]
    for x, op in cases:
        got, _ = await reduce_rows(dev, x, op, mitigations=mit(dev))
        assert_equal(got, golden.reduce_rows(x, op), f"reduce {op} {x.shape}")


@cocotb.test()
async def bad_commands_set_err_and_chip_recovers(dut):
    dev = await open_device(dut)
    cfg = dev.config
    dev.load_words(Region.A, 0, [0x01010101] * 4)
    dev.load_words(Region.B, 0, [0x01010101] * 4)
    bad = pack_command(0x7E, tag=0xBAD)
    good = matmul(a=0, b=0, c=0, k=4)
    await dev.run([bad, good])
    assert await dev.read_csr("ERR") == ErrCode.BAD_OPCODE
    words = [await dev.read_csr(f"ERR_CMD{i}") for i in range(4)]
    assert sum(w << (32 * i) for i, w in enumerate(words)) == bad
    assert await dev.read_csr("ERR_COUNT") == 1
    assert await dev.read_csr("DONE_COUNT") == 1, "the good MATMUL after the bad command must retire"
    c = words_to_int32(dev.read_words(Region.ACC, 0, cfg.rows), cfg.lanes)
    assert (c[:, : cfg.cols] == 4).all(), f"MATMUL after a dropped command gave {c}"
    # Range errors are caught as well, and clear_err clears them.
    await dev.write_csr("CTRL", REG["CTRL"].pack(clear_err=1))
    assert await dev.read_csr("ERR") == 0
    await dev.run([matmul(a=cfg.operand_depth - 4, b=0, c=0, k=8)])
    assert await dev.read_csr("ERR") == ErrCode.A_RANGE
    await dev.write_csr("CTRL", REG["CTRL"].pack(clear_err=1))
    await dev.run([pack_command(Opcode.REDUCE, flags={"reduce": {"op": 7}}, length=1)])  # no ReduceOp 7
    assert await dev.read_csr("ERR") == ErrCode.BAD_REDUCE_OP


@cocotb.test()
async def watchdog_reports_state_instead_of_hanging(dut):
    dev = await open_device(dut)
    long_mm = matmul(a=0, b=0, c=0, k=1000, tag=0x77)
    await dev.submit([long_mm])
    try:
        await dev.wait_idle(budget_cycles=50)
    except DeviceTimeout as e:
        text = str(e)
        assert "did not go idle within 50 cycles" in text
        assert "STATUS" in text and "engine_busy=1" in text, text
        assert "MATMUL" in text and "length=1000" in text, text
    else:
        raise AssertionError("a 1000-cycle MATMUL finished inside a 50-cycle watchdog")
    # soft reset brings the chip back without a power cycle
    await dev.soft_reset()
    await dev.wait_idle(budget_cycles=100)
    x = np.arange(8, dtype=np.int32).reshape(1, 8)
    got, _ = await reduce_rows(dev, x, "sum", mitigations=mit(dev))
    assert int(got[0]) == 28


@cocotb.test()
async def perf_counters_consistent(dut):
    dev = await open_device(dut)
    cfg = dev.config
    a = np.ones((cfg.rows, 50), np.int8)
    b = np.ones((50, cfg.cols), np.int8)
    _, st = await gemm(dev, a, b, mitigations=mit(dev))
    assert st.macs_issued == cfg.rows * cfg.cols * 50
    assert st.cycles >= st.engine_busy_cycles >= 50
