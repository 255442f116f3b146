"""Jobs for tests/test_vector_sim.py: the vector unit's elementwise kernel on the simulated chip.

The job only runs the kernel and hands back the chip's bits with the inputs it made from the
seed; the test compares them with golden/vector.py on the host.
"""

from __future__ import annotations

import numpy as np

from golden.vector import UNARY_OPS
from kernels.vector import elementwise
from workarounds import attach

SPECIALS = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -1e-45, 1.1754942e-38, 3.4028235e38, -3.4028235e38,
                     1.0, -1.0], np.float32)


def case_inputs(seed: int, op: str, broadcast: str, shape: tuple[int, int]):
    """The inputs of one case: normal values with specials sprinkled in (a function of the seed)."""
    rng = np.random.default_rng([seed, len(op), shape[0], shape[1], ("none", "row", "col").index(broadcast)])
    rows, cols = shape
    if op == "i2f":
        a = rng.integers(-2**31, 2**31, size=shape, dtype=np.int64).astype(np.int32)
        a.flat[:4] = [2**24 + 1, -(2**24 + 3), -2**31, 2**31 - 1][:a.size]
        return a, None
    if op in ("iadd", "requant"):  # int32 accumulators; int32 addends or parameter words (any bits)
        a = rng.integers(-2**31, 2**31, size=shape, dtype=np.int64).astype(np.int32)
        a.flat[::3] = rng.integers(-2**20, 2**20, size=a.flat[::3].shape)
        bshape = {"none": shape, "row": (rows,), "col": (cols,)}[broadcast]
        b = rng.integers(0, 2**32, size=bshape, dtype=np.uint64).astype(np.uint32)
        return a, (b.view(np.int32) if op == "iadd" else b)
    if op == "exp":  # the whole range and past both ends: -Inf, large negative (flush), overflow
        a = rng.uniform(-110, 95, size=shape).astype(np.float32)
    else:
        a = (rng.standard_normal(shape) * 10).astype(np.float32)
    a.flat[::7] = rng.choice(SPECIALS, size=a.flat[::7].shape)
    if op in UNARY_OPS:
        return a, None
    bshape = {"none": shape, "row": (rows,), "col": (cols,)}[broadcast]
    b = (rng.standard_normal(bshape) * 10).astype(np.float32)
    b.flat[::5] = rng.choice(SPECIALS, size=b.flat[::5].shape)
    return a, b


async def elementwise_job(dev, emit, seed: int, cases: list) -> list[dict]:
    """Each case (op, broadcast, rows, cols): the result bits and the kernel's stats."""
    mit = attach(dev, warn=False)
    out = []
    for op, broadcast, rows, cols in cases:
        a, b = case_inputs(seed, op, broadcast, (rows, cols))
        got, stats = await elementwise(dev, op, a, b, broadcast=broadcast, mitigations=mit)
        out.append({"case": [op, broadcast, rows, cols], "bits": got.view(np.uint32).ravel().tolist(),
                    "cycles": stats.cycles, "vector_busy": stats.vector_busy_cycles,
                    "vector_elems": stats.vector_elems, "chunks": stats.host["chunks"]})
    return out


def softmax_inputs(seed: int, rows: int, cols: int) -> np.ndarray:
    """Logits with a large offset on some rows, -Inf entries, one row of -Inf only and one very
    negative row (exp of large negative numbers flushes)."""
    rng = np.random.default_rng([seed, 90, rows, cols])
    x = (rng.standard_normal((rows, cols)) * 4).astype(np.float32)
    x[1::3] += 1000.0
    x.flat[2::11] = -np.inf
    if rows > 3:
        x[3] = -np.inf
    if rows > 4:
        x[4] -= 200.0
    return x


async def softmax_job(dev, emit, seed: int, shapes: list) -> list[dict]:
    from kernels.softmax import softmax

    mit = attach(dev, warn=False)
    out = []
    for rows, cols in shapes:
        got, stats = await softmax(dev, softmax_inputs(seed, rows, cols), mitigations=mit)
        out.append({"shape": [rows, cols], "bits": got.view(np.uint32).ravel().tolist(), "cycles": stats.cycles,
                    "chunks": stats.host["chunks"], "bound": stats.bound, "roof_utilization": stats.roof_utilization})
    return out


def norm_inputs(seed: int, rows: int, cols: int):
    """Rows with a large offset (|mean| >> std: where E[x^2] - E[x]^2 would cancel), a constant
    row (zero variance), a zero row, ordinary rows; gamma and beta."""
    rng = np.random.default_rng([seed, 91, rows, cols])
    x = (rng.standard_normal((rows, cols)) * 3).astype(np.float32)
    if rows > 1:
        x[1] += 10000.0
    if rows > 2:
        x[2] = 7.5
    if rows > 3:
        x[3] = 0.0
    gamma = (1 + 0.1 * rng.standard_normal(cols)).astype(np.float32)
    beta = (0.5 * rng.standard_normal(cols)).astype(np.float32)
    return x, gamma, beta


async def norm_job(dev, emit, seed: int, shapes: list) -> list[dict]:
    from kernels.norms import layer_norm, rms_norm

    mit = attach(dev, warn=False)
    out = []
    for kind, rows, cols in shapes:
        x, gamma, beta = norm_inputs(seed, rows, cols)
        if kind == "layer":
            got, stats = await layer_norm(dev, x, gamma, beta, 1e-5, mitigations=mit)
        else:
            got, stats = await rms_norm(dev, x, gamma, 1e-6, mitigations=mit)
        out.append({"case": [kind, rows, cols], "bits": got.view(np.uint32).ravel().tolist(),
                    "chunks": stats.host["chunks"], "cycles": stats.cycles})
    return out


def attention_inputs(seed: int, seq: int, dim: int):
    rng = np.random.default_rng([seed, 92, seq, dim])
    return tuple(rng.standard_normal((seq, dim)).astype(np.float32) for _ in range(3))


async def attention_job(dev, emit, seed: int, cases: list) -> list[dict]:
    from kernels.attention import attention

    mit = attach(dev, warn=False)
    out = []
    for seq, dim, causal, bq, tk in cases:
        q, k, v = attention_inputs(seed, seq, dim)
        got, stats = await attention(dev, q, k, v, causal=causal, mitigations=mit, bq=bq, tk=tk)
        out.append({"case": [seq, dim, causal, bq, tk], "bits": got.view(np.uint32).ravel().tolist(),
                    "cycles": stats.cycles, "plan": stats.plan, "bound": stats.bound,
                    "roof_utilization": stats.roof_utilization})
    return out


def epilogue_inputs(seed: int, m: int, n: int, k: int, relu: bool):
    """int8 operands (one row and column of extremes), an int32 bias (one column's wraps around)
    and per-column scales: calibrated on the data, one column scaled so that it saturates."""
    from golden.epilogue import calibrate_scales

    rng = np.random.default_rng([seed, 95, m, n, k, relu])
    a = rng.integers(-128, 128, (m, k), dtype=np.int64).astype(np.int8)
    b = rng.integers(-128, 128, (k, n), dtype=np.int64).astype(np.int8)
    a[0], b[:, 0] = -128, -128  # the largest products
    bias = rng.integers(-(2**16), 2**16, n).astype(np.int32)
    bias[-1] = 2**31 - 1  # acc + bias wraps in int32, as the chip adds
    scale = calibrate_scales(a, b, bias)
    bias[n // 2] = 0
    scale[n // 2] *= 8  # saturates at both ends
    return a, b, bias, scale


async def epilogue_job(dev, emit, seed: int, cases: list) -> list[dict]:
    """Each case (m, n, k, relu): the fused-epilogue GEMM's int8 result and its stats."""
    from kernels.epilogue import Epilogue
    from kernels.gemm import gemm

    mit = attach(dev, warn=False)
    out = []
    for m, n, k, relu in cases:
        a, b, bias, scale = epilogue_inputs(seed, m, n, k, relu)
        c, stats = await gemm(dev, a, b, mitigations=mit, epilogue=Epilogue.checked(n, bias, scale, relu))
        out.append({"case": [m, n, k, relu], "dtype": str(c.dtype), "values": c.astype(np.int32).ravel().tolist(),
                    "groups": stats.plan["ga"], "vector_busy": stats.vector_busy_cycles, "notes": stats.notes})
    return out


async def cvt_f8_job(dev, emit, seed: int) -> dict:
    """CVT_F8 through the command processor (arg3 names the format) into B, both formats, read
    back through the backdoor: fp32 words of N(0, 100^2) values with specials, scale 1."""
    from rtl.isa import Format, VecB, VecDst, VecOp, vec
    from rtl.memories import Region

    cfg = dev.config
    rng = np.random.default_rng([seed, 96])
    x = (rng.standard_normal((6, cfg.lanes)) * 100).astype(np.float32)
    x.flat[::5] = rng.choice(SPECIALS, size=x.flat[::5].shape)
    words = [sum(int(v) << (32 * j) for j, v in enumerate(row)) for row in x.view(np.uint32)]
    dev.load_words(Region.ACC, 0, words + [int(np.float32(1.0).view(np.uint32))])
    await dev.run([vec(VecOp.CVT_F8, a=0, b=6, b_form=VecB.SCALAR, count=6, dst=0, dst_sram=VecDst.B, fp8=Format.E4M3),
                   vec(VecOp.CVT_F8, a=0, b=6, b_form=VecB.SCALAR, count=6, dst=8, dst_sram=VecDst.B, fp8=Format.E5M2)])
    b = dev.read_words(Region.B, 0, 14)
    codes = [[(w >> (8 * j)) & 0xFF for j in range(cfg.lanes)] for w in b]
    return {"x": x.view(np.uint32).tolist(), "e4m3": codes[:6], "e5m2": codes[8:14], "err": await dev.read_csr("ERR")}


def activation_inputs(seed: int, rows: int, cols: int) -> np.ndarray:
    """N(0, 3^2) values with the specials: +-Inf, NaN, +-100, zeros, subnormals."""
    rng = np.random.default_rng([seed, 97, rows, cols])
    x = (rng.standard_normal((rows, cols)) * 3).astype(np.float32)
    x.flat[::7] = rng.choice(SPECIALS, size=x.flat[::7].shape)
    x.flat[3::11] = 100.0
    return x


async def activation_job(dev, emit, seed: int, cases: list) -> list[dict]:
    """Each case (kind, rows, cols): the result bits and the number of chunks."""
    from kernels.activations import activation

    mit = attach(dev, warn=False)
    out = []
    for kind, rows, cols in cases:
        got, stats = await activation(dev, activation_inputs(seed, rows, cols), kind, mitigations=mit)
        out.append({"case": [kind, rows, cols], "bits": got.view(np.uint32).ravel().tolist(),
                    "chunks": stats.host["chunks"], "bound": stats.bound})
    return out
