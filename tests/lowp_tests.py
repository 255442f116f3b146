"""cocotb tests: the FP8/FP4/MX path of the real RTL is bit-exact against golden.mx."""

from __future__ import annotations

import os

import cocotb
import numpy as np

import golden
import workarounds
from cosim.device import Device
from cosim.testbench import Testbench
from kernels.lowp import gemm_lowp, mx_gemm_codes
from golden.quant import RECIPES

SEED = int(os.environ.get("FIRSTLIGHT_SEED", "1"))
FMTS = ("e4m3", "e5m2", "e2m1")
# Icarus runs the same Verilog as Verilator ~40x slower: it gets the smaller problems (its own
# value is 4-state semantics, not more coverage of the datapath).
ON_ICARUS = cocotb.SIM_NAME.lower().startswith("icarus")


async def open_device(dut) -> Device:
    return await Device.open(Testbench(dut, clock=os.environ.get("FIRSTLIGHT_CLOCK", "hdl")))


def mit(dev) -> workarounds.Mitigations:
    """The chip's errata mitigations (auto policy, from its REV), attached before a kernel call."""
    return workarounds.attach(dev)


def rng_for(name):
    return np.random.default_rng([SEED, sum(name.encode())])


def finite_codes(rng, fmt, shape):
    c = rng.integers(0, 256, size=shape, dtype=np.uint8)
    if fmt == "e2m1":
        return c & 0x0F
    if fmt == "e4m3":
        c[(c & 0x7F) == 0x7F] &= 0xFE  # avoid NaN
    if fmt == "e5m2":
        c[(c & 0x7C) == 0x7C] &= 0x83  # avoid Inf/NaN (exponent 31)
    return c


def assert_bits(got, ref, what):
    bad = np.argwhere(got != ref)
    assert not len(bad), (f"{what}: {len(bad)} fp32 words differ, first at {tuple(bad[0])}: chip 0x{int(got[tuple(bad[0])]):08x}, "
                          f"golden 0x{int(ref[tuple(bad[0])]):08x} (seed {SEED})")


async def run_and_check(dev, a, b, sa, sb, fmt, what, k_chunk=None):
    bits, st = await mx_gemm_codes(dev, a, b, sa, sb, fmt, k_chunk=k_chunk, mitigations=mit(dev))
    ref = golden.mx.mx_matmul_bits(a, b, sa, sb, fmt, chunks=st.chunks)
    assert_bits(bits, ref, what)
    return st


@cocotb.test()
async def random_codes_and_scales_bit_exact(dut):
    dev = await open_device(dut)
    for fmt in FMTS:
        rng = rng_for("rand" + fmt)
        m, n, k = 5, 6, 96
        a, b = finite_codes(rng, fmt, (m, k)), finite_codes(rng, fmt, (k, n))
        sa = rng.integers(110, 145, (m, k // 32), dtype=np.uint8)
        sb = rng.integers(110, 145, (k // 32, n), dtype=np.uint8)
        await run_and_check(dev, a, b, sa, sb, fmt, f"{fmt} random 5x6x96")


@cocotb.test()
async def special_values_bit_exact(dut):
    dev = await open_device(dut)
    m, n, k = 4, 4, 64
    for fmt in FMTS:
        f = golden.mx.FORMATS[fmt]
        maxc = {"e4m3": 0x7E, "e5m2": 0x7B, "e2m1": 0x07}[fmt]
        a = np.zeros((m, k), np.uint8)
        b = np.zeros((k, n), np.uint8)
        a[0, :] = maxc                      # max normal x max normal, 32 per block
        b[:, 0] = maxc
        a[1, :] = 1                         # min subnormal
        b[:, 1] = 1
        a[2, :32] = 0                       # a zero block
        a[3, ::2] = maxc | (0x80 if fmt != "e2m1" else 0x08)
        b[:, 3] = 1
        sa = np.full((m, k // 32), 127, np.uint8)
        sb = np.full((k // 32, n), 127, np.uint8)
        sa[0, 1] = 254                      # pushes row 0's second block towards overflow
        sb[0, 2] = 0                        # 2**-127: deep into fp32 subnormals / zero
        sb[1, 2] = 0xFF                     # NaN scale
        if f.has_nan:
            a[1, 5] = 0x7F if fmt == "e4m3" else 0x7D  # a NaN operand
        if f.has_inf:
            a[2, 40] = 0x7C                 # +Inf x ...
            b[40, 2] = 0                    # ... 0 -> NaN in column 2
            b[41, 3] = 0xFC                 # -Inf in column 3
        await run_and_check(dev, a, b, sa, sb, fmt, f"{fmt} special values")


@cocotb.test()
async def long_k_chunks_and_accumulate(dut):
    dev = await open_device(dut)
    for fmt, k, kc in (("e4m3", 2048, None), ("e5m2", 320, 64), ("e2m1", 160, 32)):
        rng = rng_for("long" + fmt)
        m, n = 4, 8
        a, b = finite_codes(rng, fmt, (m, k)), finite_codes(rng, fmt, (k, n))
        sa = rng.integers(120, 135, (m, k // 32), dtype=np.uint8)
        sb = rng.integers(120, 135, (k // 32, n), dtype=np.uint8)
        st = await run_and_check(dev, a, b, sa, sb, fmt, f"{fmt} K={k} chunk={kc}", k_chunk=kc)
        assert len(st.chunks) > 1, f"{fmt} K={k}: expected several MATMULs, got {st.chunks}"


@cocotb.test()
async def recipes_end_to_end(dut):
    """Every recipe on N(0,1): the FP ones bit-exact vs golden, all within their SQNR band."""
    dev = await open_device(dut)
    rng = rng_for("recipes")
    m, k, n = (8, 64, 8) if ON_ICARUS else (16, 256, 16)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    floor = {"int8": 30, "fp8-e4m3": 24, "fp8-e5m2": 18, "mxfp8-e4m3": 24, "mxfp8-e5m2": 18, "mxfp4": 11}
    for name in RECIPES:
        out = await gemm_lowp(dev, a, b, name, mitigations=mit(dev))
        if out.fp is not None:
            r = out.fp
            ref = golden.mx.mx_matmul_bits(r.a_codes, r.b_codes, r.a_scales, r.b_scales, r.fmt, chunks=r.chunks)
            assert_bits(r.bits, ref, name)
        lo = next(v for k2, v in floor.items() if name.startswith(k2))
        assert out.sqnr_db > lo, f"{name}: SQNR {out.sqnr_db:.1f} dB below {lo} dB (seed {SEED})"
