"""The FP path of the engine in Amaranth's simulator: a whole small chip, operands and scales
through the front-door window, results against golden.mx bit for bit."""

from __future__ import annotations

import numpy as np
import pytest

import golden
from conftest import SEED
from rtl.config import ChipConfig
from rtl.isa import Format, matmul
from rtl.memories import Region
from test_rtl_units import csr, pack_a_words, pack_b_words, read_acc_rows, run_chip, submit, wait_idle, write_words

CFG = ChipConfig(rows=2, cols=2, operand_depth=128, acc_depth=16, cmdq_depth=8)  # A and B need 96 words


def _codes(rng, fmt, shape):
    c = rng.integers(0, 256, shape, dtype=np.uint8)
    if fmt == "e2m1":
        return c & 0x0F
    if fmt == "e4m3":
        c[(c & 0x7F) == 0x7F] &= 0xFE
    else:
        c[(c & 0x7C) == 0x7C] &= 0x83
    return c


@pytest.mark.parametrize("fmt", ["e4m3", "e5m2", "e2m1"])
def test_fp_matmul_two_blocks_then_accumulate(fmt):
    rng = np.random.default_rng([SEED, sum(fmt.encode())])
    k = 64
    a1, b1 = _codes(rng, fmt, (2, k)), _codes(rng, fmt, (k, 2))
    a2, b2 = _codes(rng, fmt, (2, 32)), _codes(rng, fmt, (32, 2))
    sa = rng.integers(118, 137, (2, 2), dtype=np.uint8)
    sb = rng.integers(118, 137, (2, 2), dtype=np.uint8)
    fcode = Format[fmt.upper()]

    async def body(ctx, dut, out):
        await write_words(ctx, dut, Region.A, 0, pack_a_words(a1.view(np.int8)) + pack_a_words(a2.view(np.int8)))
        await write_words(ctx, dut, Region.B, 0, pack_b_words(b1.view(np.int8)) + pack_b_words(b2.view(np.int8)))
        # SA word w: byte i = row i's scale for block w; SB word w: byte j = column j's scale
        await write_words(ctx, dut, Region.SA, 0, [int(sa[0, w]) | int(sa[1, w]) << 8 for w in range(2)])
        await write_words(ctx, dut, Region.SB, 0, [int(sb[w, 0]) | int(sb[w, 1]) << 8 for w in range(2)])
        await submit(ctx, dut, [
            matmul(a=0, b=0, c=0, k=k, fmt=fcode),
            matmul(a=k, b=k, c=0, k=32, fmt=fcode, accumulate=True, sa=1, sb=1),
        ])
        await wait_idle(ctx, dut, fmt, polls=400)
        out["acc"] = await read_acc_rows(ctx, dut, 0, 2)
        out["err"] = await csr(ctx, dut, "ERR")

    out = run_chip(CFG, body)
    assert out["err"] == 0, f"the chip dropped a command: ERR={out['err']}"
    first = golden.mx.mx_matmul_bits(a1, b1, sa, sb, fmt)
    second = golden.mx.mx_matmul_bits(a2, b2, sa[:, 1:2], sb[1:2, :], fmt)
    want = np.array([[golden.mx.fp32_add_bits(int(first[i, j]), int(second[i, j])) for j in range(2)]
                     for i in range(2)], np.uint32)
    got = np.asarray(out["acc"], np.int64).astype(np.uint32)
    assert (got == want).all(), f"{fmt} (seed {SEED}): chip {[hex(x) for x in got.ravel()]}, golden {[hex(x) for x in want.ravel()]}"


def test_fp_command_checks():
    """BAD_FORMAT (a format the chip lacks), SCALE_RANGE at its boundary, reserved flag bits."""
    from rtl.csr_map import REG
    from rtl.isa import ErrCode, Opcode, pack_command

    cfg_e4m3 = ChipConfig(rows=2, cols=2, operand_depth=128, acc_depth=16, cmdq_depth=8, formats=("int8", "e4m3"))
    e5, e4 = Format.E5M2, Format.E4M3
    depth = cfg_e4m3.scale_depth  # 4 scale words
    cases = [
        (matmul(a=0, b=0, c=0, k=32, fmt=e5), ErrCode.BAD_FORMAT),
        (matmul(a=0, b=0, c=0, k=64, fmt=e4, sa=depth - 2), ErrCode.NONE),  # last two words
        (matmul(a=0, b=0, c=0, k=64, fmt=e4, sa=depth - 1), ErrCode.SCALE_RANGE),
        (matmul(a=0, b=0, c=0, k=32, fmt=e4, sb=depth - 1), ErrCode.NONE),
        (matmul(a=0, b=0, c=0, k=33, fmt=e4, sb=depth - 1), ErrCode.SCALE_RANGE),
        (pack_command(Opcode.MATMUL, flags={"matmul": {"reserved": 0x8}}, length=4), ErrCode.RESERVED_NONZERO),
        (pack_command(Opcode.REDUCE, flags={"reduce": {"reserved": 0x1}}, length=1), ErrCode.RESERVED_NONZERO),
        (pack_command(Opcode.NOP, flags=0x01), ErrCode.RESERVED_NONZERO),
        (pack_command(0x7E, flags=0x01), ErrCode.BAD_OPCODE),  # an unknown opcode is reported as such
    ]

    async def body(ctx, dut, out):
        out["err"] = []
        for i, (cmd, _) in enumerate(cases):
            await submit(ctx, dut, [cmd], first_entry=i % 8)
            await wait_idle(ctx, dut, f"case {i}", polls=400)
            out["err"].append(await csr(ctx, dut, "ERR"))
            await csr(ctx, dut, "CTRL", REG["CTRL"].field("clear_err").mask)

    out = run_chip(cfg_e4m3, body)
    assert out["err"] == [int(e) for _, e in cases], list(zip(out["err"], [e.name for _, e in cases]))


@pytest.mark.parametrize("k", [1, 5, 37])
def test_fp_matmul_short_and_partial_blocks(k):
    """K below the array size, below one block, and a short last block (32 + 5)."""
    rng = np.random.default_rng([SEED, k])
    fmt = "e4m3"
    nblk = -(-k // 32)
    a, b = _codes(rng, fmt, (2, k)), _codes(rng, fmt, (k, 2))
    sa = rng.integers(118, 137, (2, nblk), dtype=np.uint8)
    sb = rng.integers(118, 137, (nblk, 2), dtype=np.uint8)

    async def body(ctx, dut, out):
        await write_words(ctx, dut, Region.A, 0, pack_a_words(a.view(np.int8)))
        await write_words(ctx, dut, Region.B, 0, pack_b_words(b.view(np.int8)))
        await write_words(ctx, dut, Region.SA, 0, [int(sa[0, w]) | int(sa[1, w]) << 8 for w in range(nblk)])
        await write_words(ctx, dut, Region.SB, 0, [int(sb[w, 0]) | int(sb[w, 1]) << 8 for w in range(nblk)])
        await submit(ctx, dut, [matmul(a=0, b=0, c=0, k=k, fmt=Format.E4M3)])
        await wait_idle(ctx, dut, f"K={k}", polls=400)
        out["acc"] = await read_acc_rows(ctx, dut, 0, 2)
        out["err"] = await csr(ctx, dut, "ERR")

    out = run_chip(CFG, body)
    assert out["err"] == 0
    got = np.asarray(out["acc"], np.int64).astype(np.uint32)
    want = golden.mx.mx_matmul_bits(a, b, sa, sb, fmt)
    assert (got == want).all(), f"K={k} (seed {SEED}): chip {[hex(x) for x in got.ravel()]}, golden {[hex(x) for x in want.ravel()]}"


def test_fp_blocks_ending_a_cycle_apart_share_the_row_finalize_units():
    """A 4x4 chip, E5M2 over its whole range (the `hi` part of the exact block sum carries the
    large products), MATMULs back to back whose blocks end one cycle apart (K=33: blocks of 32
    and 1; K=65) between short ones: the two finalize units of each row take turns, and every
    result is the golden's bit for bit, including one accumulated onto another."""
    cfg = ChipConfig(rows=4, cols=4, operand_depth=256, acc_depth=32, cmdq_depth=8)
    rng = np.random.default_rng([SEED, 4433])
    fmt, fcode = "e5m2", Format.E5M2
    ks = [33, 1, 65, 33]
    ops, a_at, s_at = [], 0, 0
    for n, k in enumerate(ks):
        nblk = -(-k // 32)
        ops.append({"k": k, "a": _codes(rng, fmt, (4, k)), "b": _codes(rng, fmt, (k, 4)),
                    "sa": rng.integers(100, 150, (4, nblk), dtype=np.uint8),
                    "sb": rng.integers(100, 150, (nblk, 4), dtype=np.uint8),
                    "at": a_at, "s": s_at, "c": 4 * n if n < 3 else 0, "acc": n == 3})
        a_at += k
        s_at += nblk

    async def body(ctx, dut, out):
        await write_words(ctx, dut, Region.A, 0, sum((pack_a_words(o["a"].view(np.int8)) for o in ops), []))
        await write_words(ctx, dut, Region.B, 0, sum((pack_b_words(o["b"].view(np.int8)) for o in ops), []))
        await write_words(ctx, dut, Region.SA, 0, [int.from_bytes(bytes(o["sa"][:, w]), "little")
                                                   for o in ops for w in range(o["sa"].shape[1])])
        await write_words(ctx, dut, Region.SB, 0, [int.from_bytes(bytes(o["sb"][w, :]), "little")
                                                   for o in ops for w in range(o["sb"].shape[0])])
        await submit(ctx, dut, [matmul(a=o["at"], b=o["at"], c=o["c"], k=o["k"], fmt=fcode, sa=o["s"], sb=o["s"],
                                       accumulate=o["acc"]) for o in ops])
        await wait_idle(ctx, dut, "back to back", polls=800)
        out["acc"] = await read_acc_rows(ctx, dut, 0, 12)
        out["err"] = await csr(ctx, dut, "ERR")

    out = run_chip(cfg, body)
    assert out["err"] == 0, f"the chip dropped a command: ERR={out['err']}"
    got = np.asarray(out["acc"], np.int64).astype(np.uint32).reshape(3, 4, 4)
    res = [golden.mx.mx_matmul_bits(o["a"], o["b"], o["sa"], o["sb"], fmt) for o in ops]
    want = np.stack([np.array([[golden.mx.fp32_add_bits(int(res[0][i, j]), int(res[3][i, j])) for j in range(4)]
                               for i in range(4)], np.uint32), res[1], res[2]])
    for n in range(3):
        assert (got[n] == want[n]).all(), (f"tile {n} (seed {SEED}): chip {[hex(x) for x in got[n].ravel()]}, "
                                           f"golden {[hex(x) for x in want[n].ravel()]}")


def test_fp_block_sums_beyond_64_bits_round_once():
    """E5M2 operands of the largest exponents: block sums of up to ~2**69 (the finalize unit
    rounds them from their top part with the low part as sticky), of both signs, cancelling and
    not, each against the golden bit for bit."""
    cfg = ChipConfig(rows=4, cols=4, operand_depth=128, acc_depth=16, cmdq_depth=8)
    rng = np.random.default_rng([SEED, 6969])
    k = 64

    def big(shape):  # sign, exponent 24..30, any mantissa
        return ((rng.integers(0, 2, shape) << 7) | (rng.integers(24, 31, shape) << 2)
                | rng.integers(0, 4, shape)).astype(np.uint8)

    a, b = big((4, k)), big((k, 4))
    # row 0 and column 0: positive, exponent 30: sums far beyond 2**64 without cancellation
    a[0] = 0x78 | rng.integers(0, 4, k)
    b[:, 0] = 0x78 | rng.integers(0, 4, k)
    sa = rng.integers(120, 130, (4, 2), dtype=np.uint8)
    sb = rng.integers(120, 130, (2, 4), dtype=np.uint8)

    async def body(ctx, dut, out):
        await write_words(ctx, dut, Region.A, 0, pack_a_words(a.view(np.int8)))
        await write_words(ctx, dut, Region.B, 0, pack_b_words(b.view(np.int8)))
        await write_words(ctx, dut, Region.SA, 0, [int.from_bytes(bytes(sa[:, w]), "little") for w in range(2)])
        await write_words(ctx, dut, Region.SB, 0, [int.from_bytes(bytes(sb[w, :]), "little") for w in range(2)])
        await submit(ctx, dut, [matmul(a=0, b=0, c=0, k=k, fmt=Format.E5M2)])
        await wait_idle(ctx, dut, "big E5M2", polls=400)
        out["acc"] = await read_acc_rows(ctx, dut, 0, 4)
        out["err"] = await csr(ctx, dut, "ERR")

    out = run_chip(cfg, body)
    assert out["err"] == 0
    got = np.asarray(out["acc"], np.int64).astype(np.uint32)
    want = golden.mx.mx_matmul_bits(a, b, sa, sb, "e5m2")
    assert (got == want).all(), f"(seed {SEED}): chip {[hex(x) for x in got.ravel()]}, golden {[hex(x) for x in want.ravel()]}"
    # the case the test is for: the all-positive PE(0, 0)'s block sums (in units of their last
    # place, what the PE accumulates) are beyond 2**64, and mixed-sign ones of PE(1, 1) too
    for blk in range(2):
        s00, _ = golden.mx.block_sum(a[0, 32 * blk:32 * blk + 32], b[32 * blk:32 * blk + 32, 0], "e5m2")
        assert abs(s00) >= 2**64, f"block {blk} of PE(0, 0) sums to {s00}: the test no longer reaches 2**64"
