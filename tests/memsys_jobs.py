"""Jobs for tests/test_memsys.py: the DRAM, the DMA and the semaphores on the simulated chip.

Expected values come from numpy on the host-side data (the spec: a DMA copies bytes), never
from the chip.
"""

from __future__ import annotations

import numpy as np

from rtl import isa
from rtl.isa import DmaQueue, ErrCode
from rtl.memories import Region


def _words_of(raw: np.ndarray, word_bytes: int) -> list[int]:
    return [int.from_bytes(raw[i:i + word_bytes].tobytes(), "little") for i in range(0, len(raw), word_bytes)]


async def dma_roundtrip_job(dev, emit, seed: int, dram_base: int = 0) -> dict:
    """DRAM -> A, B, SA, SB, ACC by 1D and 2D loads, ACC -> DRAM by a 2D store; every word
    checked against the bytes the host wrote (seed reproduces)."""
    rng = np.random.default_rng(seed)
    cfg, board = dev.config, dev.board
    bad = []
    src = rng.integers(0, 256, size=48 * 1024, dtype=np.uint8)
    dev.dram_write(dram_base, src)
    for region in (Region.A, Region.B, Region.SA, Region.SB, Region.ACC):
        wb = dev.mem_width(region) // 8
        depth = dev.mem_depth(region)
        rows = 3
        words = min(7, (depth - 3) // 3)  # rows at stride words + 1 from word 1 fit the SRAM
        sstride = words + 1
        dstride = (words * wb + 3 * board.bus_bytes)
        sram0 = 1
        dram0 = dram_base + 4096 - 2 * board.bus_bytes  # rows straddle a 4 KiB page
        await dev.run([isa.dma_stride(DmaQueue.LOAD, sram=sstride, dram=dstride),
                       isa.dma_load(region, sram=sram0, dram=dram0, words=words, rows=rows)])
        got = dev.read_words(region, 0, depth)
        for r in range(rows):
            a = dram0 - dram_base + r * dstride
            want = _words_of(src[a:a + words * wb], wb)
            for w in range(words):
                if got[sram0 + r * sstride + w] != want[w]:
                    bad.append({"region": region.name, "row": r, "word": w, "got": got[sram0 + r * sstride + w],
                                "want": want[w]})
    # store: ACC words -> DRAM, 2D
    acc_wb = dev.mem_width(Region.ACC) // 8
    acc = [int(x) for x in rng.integers(0, 1 << 62, size=16)]
    acc = [(v << (acc_wb * 8 - 62)) ^ v for v in acc]
    acc = [v & ((1 << (acc_wb * 8)) - 1) for v in acc]
    dev.load_words(Region.ACC, 0, acc)
    out = dram_base + 32 * 1024 - board.bus_bytes * 2
    dstride = 3 * acc_wb
    await dev.run([isa.dma_stride(DmaQueue.STORE, sram=4, dram=dstride),
                   isa.dma_store(sram=0, dram=out, words=2, rows=3)])
    await dev.check_no_error()
    raw = dev.dram_read(out, 3 * dstride)
    for r in range(3):
        for w in range(2):
            got = int.from_bytes(raw[r * dstride + w * acc_wb:r * dstride + (w + 1) * acc_wb].tobytes(), "little")
            if got != acc[r * 4 + w]:
                bad.append({"store_row": r, "word": w, "got": got, "want": acc[r * 4 + w]})
    perf = await dev.read_perf()
    return {"mismatches": bad[:8], "count": len(bad), "perf": perf.counters}


async def bad_descriptor_job(dev, emit) -> dict:
    """Every malformed DMA sets ERR with its code and is dropped; the chip goes on."""
    b = dev.board
    cases = {
        "cmdq_region": (isa.dma_load(Region.CMDQ, sram=0, dram=0, words=1), ErrCode.DMA_REGION),
        "zero_words": (isa.pack_command(isa.Opcode.DMA_LOAD, length=0, arg1=1), ErrCode.BAD_LENGTH),
        "zero_rows": (isa.dma_load(Region.A, sram=0, dram=0, words=1, rows=0), ErrCode.BAD_LENGTH),
        "unaligned": (isa.dma_load(Region.A, sram=0, dram=b.bus_bytes // 2 or 1, words=1), ErrCode.DMA_ALIGN),
        "sram_range": (isa.dma_load(Region.A, sram=dev.mem_depth(Region.A) - 1, dram=0, words=2), ErrCode.DMA_SRAM_RANGE),
        "dram_range": (isa.dma_load(Region.A, sram=0, dram=b.dram_bytes - b.bus_bytes, words=2), ErrCode.DMA_DRAM_RANGE),
        "store_not_acc": (isa.pack_command(isa.Opcode.DMA_STORE, flags={"dma": {"region": int(Region.A)}}, length=1,
                                           arg1=1), ErrCode.DMA_REGION),
    }
    seen = {}
    for name, (cmd, code) in cases.items():
        await dev.write_csr("CTRL", 1 << 2)  # clear_err
        await dev.run([cmd, isa.nop()])
        seen[name] = {"err": await dev.read_csr("ERR"), "want": int(code), "done": await dev.read_csr("DONE_COUNT")}
    return seen


async def missing_wait_job(dev, emit, with_wait: bool) -> dict:
    """Load a tile of B by DMA and multiply it right behind: with the wait the result is right;
    without it the MATMUL reads B before the DMA has written it (the race is real)."""
    cfg = dev.config
    R, C = cfg.rows, cfg.cols
    k = 64
    rng = np.random.default_rng(1)
    a = rng.integers(-8, 8, size=(R, k), dtype=np.int8)
    b = rng.integers(-8, 8, size=(k, C), dtype=np.int8)
    from kernels.layout import pack_a_panels, pack_b_panels, words_to_int32

    aw, bw = pack_a_panels(a, R), pack_b_panels(b, C)
    dev.load_words(Region.B, 0, [0] * k)
    dev.dram_write(0, np.frombuffer(b"".join(int(w).to_bytes(C, "little") for w in bw[0]), np.uint8))
    dev.dram_write(8192, np.frombuffer(b"".join(int(w).to_bytes(R, "little") for w in aw[0]), np.uint8))
    if with_wait:  # the stream waits for both loads (NOP takes B's count, the MATMUL A's)
        cmds = [isa.dma_load(Region.A, sram=0, dram=8192, words=k, signal=0),
                isa.dma_load(Region.B, sram=0, dram=0, words=k, signal=1),
                isa.nop(wait=1), isa.matmul(a=0, b=0, c=0, k=k, wait=0)]
    else:
        cmds = [isa.dma_load(Region.A, sram=0, dram=8192, words=k), isa.dma_load(Region.B, sram=0, dram=0, words=k),
                isa.matmul(a=0, b=0, c=0, k=k)]
    await dev.run(cmds)
    got = words_to_int32(dev.read_words(Region.ACC, 0, R), C).reshape(R, C)
    want = a.astype(np.int32) @ b.astype(np.int32)
    return {"equal": bool(np.array_equal(got, want))}


async def impossible_wait_job(dev, emit) -> str:
    """A wait nothing will ever signal trips the watchdog; the dump names the semaphore and unit."""
    from cosim.device import DeviceTimeout

    await dev.submit([isa.dma_load(Region.A, sram=0, dram=0, words=4, wait=5)])
    try:
        await dev.wait_idle(5000)
    except DeviceTimeout as e:
        return str(e)
    return "no timeout"


async def start_phase_job(dev, emit, seed: int) -> list[int]:
    """The same RMSNorm (6x77) first, after a small GEMM and after 1, 2 and 3 NOPs: its cycles each
    time (a kernel's cycles must not depend on the absolute cycle it starts at)."""
    from kernels.tile.spec import get, run_spec
    from workarounds import attach

    mit = attach(dev, warn=False)
    norm, gemm = get("rmsnorm"), get("gemm")
    p, gp = norm.resolve({"rows": 6, "cols": 77}), gemm.resolve({"m": 5, "n": 3, "k": 7})
    ins = norm.inputs(p, seed, False)
    cycles = []

    async def run_norm():
        _, st = await run_spec(dev, norm, p, dict(ins), mitigations=mit)
        cycles.append(st.cycles)

    await run_norm()
    await run_spec(dev, gemm, gp, gemm.inputs(gp, seed, False), mitigations=mit)
    await run_norm()
    for n in (1, 2, 3):
        await dev.run([isa.nop()] * n)
        await run_norm()
    return cycles
