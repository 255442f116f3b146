"""Jobs for tests/test_trace.py: the trace buffer on the simulated chip.

The jobs run a stream, read the trace back with ``firstlight.trace`` and return what they saw;
the test holds it to the stream as it was written (the spec), never to the chip's own idea.
"""

from __future__ import annotations

import numpy as np

from firstlight.trace import clear_trace, disable_trace, enable_trace, read_trace
from rtl import isa
from rtl.isa import ReduceOp
from rtl.memories import Region

K = 32  # K steps per chunk: two chunks fill a 64-word operand SRAM


def _bytes_of(words, nbytes: int) -> np.ndarray:
    return np.frombuffer(b"".join(int(w).to_bytes(nbytes, "little") for w in words), np.uint8)


def double_buffered_stream(cfg, dram: dict[str, int]) -> list[tuple[str, int]]:
    """Two chunks of K: load both by DMA (chunk 1 signals semaphore 0, chunk 2 semaphore 1), multiply
    chunk 1 as soon as its loads are in (while chunk 2 still loads), accumulate chunk 2, reduce the
    C tile, store C and the sum. Each command has its own tag; returned as (name, command)."""
    R = cfg.rows
    tags = iter(range(0x101, 0x200))
    return [
        ("ld_a0", isa.dma_load(Region.A, sram=0, dram=dram["a0"], words=K, signal=0, tag=next(tags))),
        ("ld_b0", isa.dma_load(Region.B, sram=0, dram=dram["b0"], words=K, signal=0, tag=next(tags))),
        ("ld_a1", isa.dma_load(Region.A, sram=K, dram=dram["a1"], words=K, signal=1, tag=next(tags))),
        ("ld_b1", isa.dma_load(Region.B, sram=K, dram=dram["b1"], words=K, signal=1, tag=next(tags))),
        ("wait0", isa.nop(wait=0, tag=next(tags))),  # takes chunk 1's first count, the MATMUL the second
        ("mm0", isa.matmul(a=0, b=0, c=0, k=K, wait=0, tag=next(tags))),
        ("wait1", isa.nop(wait=1, tag=next(tags))),
        ("mm1", isa.matmul(a=K, b=K, c=0, k=K, accumulate=True, wait=1, signal=2, tag=next(tags))),
        ("red", isa.reduce(ReduceOp.SUM, src=0, count=R, dst=R, signal=3, tag=next(tags))),
        ("vec", isa.vec(isa.VecOp.I2F, a=0, count=R, dst=2 * R, tag=next(tags))),  # a copy nothing reads
        ("st_c", isa.dma_store(sram=0, dram=dram["c"], words=R, wait=2, tag=next(tags))),
        ("st_sum", isa.dma_store(sram=R, dram=dram["sum"], words=1, wait=3, tag=next(tags))),
    ]


async def trace_stream_job(dev, emit, seed: int) -> dict:
    """The double-buffered stream with the trace on; also: with the trace off nothing is recorded,
    and the window reads a recorded entry as the backdoor does."""
    from kernels.layout import pack_a_panels, pack_b_panels, words_to_int32

    cfg = dev.config
    R, C = cfg.rows, cfg.cols
    rng = np.random.default_rng(seed)
    a = rng.integers(-128, 128, size=(R, 2 * K), dtype=np.int8)
    b = rng.integers(-128, 128, size=(2 * K, C), dtype=np.int8)
    dram = {"a0": 0, "b0": 1024, "a1": 2048, "b1": 3072, "c": 4096, "sum": 8192}
    for c in range(2):
        aw = pack_a_panels(a[:, c * K:(c + 1) * K], R)[0]
        bw = pack_b_panels(b[c * K:(c + 1) * K, :], C)[0]
        dev.dram_write(dram[f"a{c}"], _bytes_of(aw, R))
        dev.dram_write(dram[f"b{c}"], _bytes_of(bw, C))

    # off (the reset state): a stream leaves nothing behind
    await dev.run([isa.nop(tag=1), isa.dma_load(Region.A, sram=0, dram=0, words=4, tag=2)])
    off = {"count": await dev.read_csr("TRACE_COUNT"), "dropped": await dev.read_csr("TRACE_DROPPED")}

    stream = double_buffered_stream(cfg, dram)
    await enable_trace(dev)
    await dev.run([cmd for _, cmd in stream])
    await dev.check_no_error()
    trace = await read_trace(dev)

    acc_bytes = cfg.acc_word_bits // 8
    got_c = words_to_int32([int.from_bytes(dev.dram_read(dram["c"] + r * acc_bytes, acc_bytes).tobytes(), "little")
                            for r in range(R)], C).reshape(R, C)
    want_c = a.astype(np.int64) @ b.astype(np.int64)
    want_c = ((want_c + 2**31) % 2**32 - 2**31).astype(np.int32)
    got_sum = int(words_to_int32([int.from_bytes(dev.dram_read(dram["sum"], acc_bytes).tobytes(), "little")], C)[0, 0])
    want_sum = int((int(want_c.astype(np.int64).sum()) + 2**31) % 2**32 - 2**31)
    front = await dev.window_read(Region.TRACE, 0, 4)  # entry 0, four 32-bit chunks, low first
    back = dev.read_words(Region.TRACE, 0, 1)[0]
    return {"stream": [(name, cmd) for name, cmd in stream], "trace": trace.summary(), "off": off,
            "c_equal": bool(np.array_equal(got_c, want_c)), "sum": [got_sum, want_sum],
            "window_entry0": sum(v << (32 * i) for i, v in enumerate(front)), "backdoor_entry0": back}


async def trace_overflow_job(dev, emit, nops: int) -> dict:
    """``nops`` NOPs (tags 1..nops) into a buffer smaller than that; then clear, three more;
    then off, three more."""
    await enable_trace(dev)
    await dev.run([isa.nop(tag=i + 1) for i in range(nops)])
    full = await read_trace(dev)
    await clear_trace(dev)
    after_clear = {"count": await dev.read_csr("TRACE_COUNT"), "dropped": await dev.read_csr("TRACE_DROPPED"),
                   "ctrl": await dev.read_csr("TRACE_CTRL")}
    await dev.run([isa.nop(tag=0x1000 + i) for i in range(3)])
    again = await read_trace(dev)
    await disable_trace(dev)
    await dev.run([isa.nop(tag=0x2000 + i) for i in range(3)])
    off = await read_trace(dev)
    return {"full": full.summary(), "after_clear": after_clear, "again": again.summary(), "off": off.summary()}


async def discovered_job(dev, emit) -> dict:
    """What the Device discovered (ID, REV, CAPS, TRACE_DEPTH) and the trace buffer it then sees."""
    return {"config": dev.config.as_dict(), "trace_entries": dev.mem_depth(Region.TRACE),
            "TRACE_DEPTH": await dev.read_csr("TRACE_DEPTH")}
