"""Minimal device programs, one per erratum, that show the defect on the real RTL.

Each returns ``{"fired": bool, "detail": str}``. They submit raw command streams: the
device's submit filter (the mitigation passes) is suspended while they run, since the point is
the bug. The DMA reproducers also run their stream through their erratum's own pass and say
whether that came out right (``"mitigated"``); the expected bytes come from numpy on what the
host wrote, never from the chip.
"""

from __future__ import annotations

import numpy as np

from rtl.board import PAGE_BYTES
from rtl.csr_map import REG
from rtl.isa import DmaQueue, Format, ReduceOp, VecOp, dma_load, dma_store, dma_stride, fence, matmul, reduce, vec
from rtl.memories import Region

from .dma_streams import address_tags, page_buffer
from .passes import PASSES, DmaGeometry

__all__ = ["REPRODUCERS", "run_reproducer"]


def _acc_lanes(dev, word: int) -> list[int]:
    w = dev.read_words(Region.ACC, word, 1)[0]
    out = []
    for j in range(dev.config.lanes):
        v = (w >> (32 * j)) & 0xFFFFFFFF
        out.append(v - (1 << 32) if v & 0x80000000 else v)
    return out


def _ones_word(nbytes: int, value: int = 1) -> int:
    return int.from_bytes(bytes([value & 0xFF]) * nbytes, "little")


def _acc_word(dev, lanes: list[int]) -> int:
    return sum((v & 0xFFFFFFFF) << (32 * j) for j, v in enumerate(lanes))


async def _prepare(dev):
    await dev.wait_idle()
    await dev.write_csr("CTRL", REG["CTRL"].pack(clear_err=1))


async def repro_k1_accumulate(dev) -> dict:
    """MATMUL K=4 writes 4 into C; MATMUL K=1 with accumulate must make it 5."""
    cfg = dev.config
    await _prepare(dev)
    dev.load_words(Region.A, 0, [_ones_word(cfg.rows)] * 4)
    dev.load_words(Region.B, 0, [_ones_word(cfg.cols)] * 4)
    await dev.run([matmul(a=0, b=0, c=0, k=4), fence(), matmul(a=0, b=0, c=0, k=1, accumulate=True)])
    got = _acc_lanes(dev, 0)[0]
    return {"fired": got != 5, "detail": f"C[0,0] = {got} after K=4 then accumulating K=1 (expected 5)"}


async def repro_b2b_stale_a(dev) -> dict:
    """Two MATMULs with no gap; the second reads A at 8.. where A[4] differs from A[8]."""
    cfg = dev.config
    await _prepare(dev)
    dev.load_words(Region.A, 0, [_ones_word(cfg.rows, 1)] * 8 + [_ones_word(cfg.rows, 2)] * 4)
    dev.load_words(Region.B, 0, [_ones_word(cfg.cols, 1)] * 4)
    await dev.run([matmul(a=0, b=0, c=0, k=4), matmul(a=8, b=0, c=cfg.rows, k=4)])
    got = _acc_lanes(dev, cfg.rows)[0]
    return {"fired": got != 8, "detail": f"second tile C[0,0] = {got} (expected 4 steps of 2*1 = 8)"}


async def repro_max_from_zero(dev) -> dict:
    await _prepare(dev)
    lanes = dev.config.lanes
    dev.load_words(Region.ACC, 0, [_acc_word(dev, [-7 - j for j in range(lanes)]),
                                      _acc_word(dev, [-3 - j for j in range(lanes)])])
    await dev.run([reduce(ReduceOp.MAX, src=0, count=2, dst=4)])
    got = _acc_lanes(dev, 4)[0]
    return {"fired": got != -3, "detail": f"MAX over all-negative words = {got} (expected -3)"}


async def repro_sum_odd_count(dev) -> dict:
    await _prepare(dev)
    lanes = dev.config.lanes
    dev.load_words(Region.ACC, 0, [_acc_word(dev, [1] * lanes)] * 3)
    await dev.run([reduce(ReduceOp.SUM, src=0, count=3, dst=4)])
    got = _acc_lanes(dev, 4)[0]
    return {"fired": got != 3 * lanes, "detail": f"SUM of 3 words of ones = {got} (expected {3 * lanes})"}


async def repro_top_word(dev) -> dict:
    cfg = dev.config
    await _prepare(dev)
    top = cfg.operand_depth - 1
    dev.load_words(Region.A, 0, [_ones_word(cfg.rows, 1)])
    dev.load_words(Region.B, top, [_ones_word(cfg.cols, 3)])
    await dev.run([matmul(a=0, b=top, c=0, k=1)])
    got = _acc_lanes(dev, 0)[0]
    return {"fired": got != 3, "detail": f"MATMUL K=1 on B[{top}] gave C[0,0] = {got} (expected 3)"}


async def repro_reduce_overtakes_drain(dev) -> dict:
    """MATMUL writes 4s over a sentinel; a REDUCE queued right behind must see the 4s."""
    cfg = dev.config
    await _prepare(dev)
    dev.load_words(Region.ACC, 0, [_acc_word(dev, [1000] * cfg.lanes)] * cfg.rows)
    dev.load_words(Region.A, 0, [_ones_word(cfg.rows)] * 4)
    dev.load_words(Region.B, 0, [_ones_word(cfg.cols)] * 4)
    await dev.run([matmul(a=0, b=0, c=0, k=4), reduce(ReduceOp.SUM, src=0, count=cfg.rows, dst=cfg.rows)])
    got = _acc_lanes(dev, cfg.rows)[0]
    want = 4 * cfg.rows * cfg.lanes
    return {"fired": got != want, "detail": f"REDUCE right behind MATMUL = {got} (expected {want})"}


async def repro_fp8_subnormal(dev) -> dict:
    """E4M3 2**-9 (code 0x01) times 1.0 (0x38), unit scales: fp32 2**-9 = 0x3B000000."""
    cfg = dev.config
    if "e4m3" not in cfg.formats:
        return {"fired": False, "applicable": False, "detail": "chip has no E4M3 path (CAPS): cannot occur"}
    await _prepare(dev)
    dev.load_words(Region.A, 0, [_ones_word(cfg.rows, 0x01)])
    dev.load_words(Region.B, 0, [_ones_word(cfg.cols, 0x38)])
    dev.load_words(Region.SA, 0, [_ones_word(cfg.rows, 127)])
    dev.load_words(Region.SB, 0, [_ones_word(cfg.cols, 127)])
    await dev.run([matmul(a=0, b=0, c=0, k=1, fmt=Format.E4M3)])
    got = dev.read_words(Region.ACC, 0, 1)[0] & 0xFFFFFFFF
    return {"fired": got != 0x3B000000, "detail": f"E4M3 subnormal 2^-9 x 1.0 = 0x{got:08x} (expected 0x3b000000)"}


def _word_bytes(words: list[int], wb: int) -> np.ndarray:
    """SRAM words as the bytes DMA moves (little endian, ``wb`` bytes each)."""
    return np.frombuffer(b"".join(int(w).to_bytes(wb, "little") for w in words), np.uint8)


async def _raw_and_mitigated(dev, err_id: str, experiment) -> tuple[list[str], list[str]]:
    """Run ``experiment(dev, transform) -> [what went wrong]`` on the raw stream, then on the
    same stream through the erratum's own pass (the proof that the mitigation fixes exactly this
    stream); the filter stays suspended, so only that pass runs."""
    chip = DmaGeometry.of(dev.config, dev.board)
    raw = await experiment(dev, lambda cmds: cmds)
    mitigated = await experiment(dev, lambda cmds: PASSES[err_id](cmds, {}, chip)[0])
    return raw, mitigated


async def _page_crossing(dev, transform) -> list[str]:
    """A 4-word load into A starting one A word before a page end (its first burst crosses the
    page), and a 4-word store from ACC starting one ACC word before a page end."""
    await _prepare(dev)
    wa, wc = dev.mem_width(Region.A) // 8, dev.mem_width(Region.ACC) // 8
    src = page_buffer(dev, 2 * PAGE_BYTES, "repro source")
    dst = page_buffer(dev, 2 * PAGE_BYTES, "repro destination")
    src_bytes, dst_bytes = address_tags(src), address_tags(dst)
    dev.dram_write(src, src_bytes)
    dev.dram_write(dst, dst_bytes)
    dev.load_words(Region.A, 0, [0] * 4)
    acc = [int.from_bytes(bytes([0xC0 + i]) * wc, "little") for i in range(4)]
    dev.load_words(Region.ACC, 0, acc)
    ld = PAGE_BYTES - wa  # offsets into the buffers
    st = PAGE_BYTES - wc
    await dev.run(transform([dma_load(Region.A, sram=0, dram=src.addr + ld, words=4),
                             dma_store(sram=0, dram=dst.addr + st, words=4)]))
    wrong = []
    got = _word_bytes(dev.read_words(Region.A, 0, 4), wa)
    want = src_bytes[ld:ld + 4 * wa]
    if not np.array_equal(got, want):
        bad = int(np.argmax(got != want)) // 4 * 4  # the first wrong address tag
        came = int(got[bad:bad + 4].view("<u4")[0])
        wrong.append(f"load across 0x{src.addr + PAGE_BYTES:x}: bytes {bad}.. of the row came from DRAM "
                     f"0x{came:x} (expected 0x{src.addr + ld + bad:x})")
    want_dst = dst_bytes.copy()
    want_dst[st:st + 4 * wc] = _word_bytes(acc, wc)
    got_dst = dev.dram_read(dst)
    if not np.array_equal(got_dst, want_dst):
        bad = np.flatnonzero(got_dst != want_dst)
        wrong.append(f"store across 0x{dst.addr + PAGE_BYTES:x}: {len(bad)} DRAM bytes wrong, the first at "
                     f"0x{dst.addr + int(bad[0]):x}")
    return wrong


async def repro_dma_page_crossing(dev) -> dict:
    raw, mitigated = await _raw_and_mitigated(dev, "FL-DM-001", _page_crossing)
    return {"fired": bool(raw), "mitigated": not mitigated,
            "detail": "; ".join(raw) or "a load and a store across a 4 KiB page moved the right bytes"}


async def _odd_rows(dev, transform) -> list[str]:
    """A 3-row, 2-word 2D load into A from a page-aligned buffer (rows 64 bytes apart, inside
    one page) over a sentinel."""
    await _prepare(dev)
    wa = dev.mem_width(Region.A) // 8
    src = page_buffer(dev, PAGE_BYTES, "repro source")
    src_bytes = address_tags(src)
    dev.dram_write(src, src_bytes)
    sentinel = int.from_bytes(b"\x5a" * wa, "little")
    dev.load_words(Region.A, 0, [sentinel] * 6)
    await dev.run(transform([dma_stride(DmaQueue.LOAD, sram=2, dram=64),
                             dma_load(Region.A, sram=0, dram=src.addr, words=2, rows=3)]))
    got = dev.read_words(Region.A, 0, 6)
    wrong = []
    for r in range(3):
        want = src_bytes[64 * r:64 * r + 2 * wa]
        if not np.array_equal(_word_bytes(got[2 * r:2 * r + 2], wa), want):
            kept = all(w == sentinel for w in got[2 * r:2 * r + 2])
            wrong.append(f"row {r} (A words {2 * r}..{2 * r + 1}) " + ("was never written" if kept else "is wrong"))
    return wrong


async def repro_dma_odd_rows(dev) -> dict:
    raw, mitigated = await _raw_and_mitigated(dev, "FL-DM-002", _odd_rows)
    return {"fired": bool(raw), "mitigated": not mitigated,
            "detail": ("3-row load: " + "; ".join(raw)) if raw else "a 3-row load wrote all 3 rows"}


async def repro_expsub_unrounded(dev) -> dict:
    """EXPSUB on differences that round up (1.75, 1.5 and 1.5 ulps past a float) against the
    golden exp of the rounded difference."""
    from golden.vector import vector_op

    if not dev.config.vector:
        return {"fired": False, "detail": "this chip has no vector unit"}
    await _prepare(dev)
    lanes = dev.config.lanes
    pairs = [(0x3F800001, -3 * 2**-25), (0x40A00001, -3 * 2**-23), (0xC1200001, 3 * 2**-22)]
    a = np.array([pairs[j % 3][0] for j in range(lanes)], np.uint32)
    b = np.array([pairs[j % 3][1] for j in range(lanes)], np.float32).view(np.uint32)
    dev.load_words(Region.ACC, 0, [_acc_word(dev, a.tolist()), _acc_word(dev, b.tolist())])
    await dev.run([vec(VecOp.EXPSUB, a=0, b=1, count=1, dst=2)])
    got = np.array(_acc_lanes(dev, 2), np.int64).astype(np.uint32)
    want = vector_op("expsub", a, b)
    bad = [j for j in range(lanes) if got[j] != want[j]]
    return {"fired": bool(bad), "detail": (f"EXPSUB lanes {bad} gave {[hex(got[j]) for j in bad]}, expected "
                                           f"{[hex(want[j]) for j in bad]}") if bad else
            "EXPSUB of differences that round up matched exp of the rounded difference"}


REPRODUCERS = {
    "repro_fp8_subnormal": repro_fp8_subnormal,
    "repro_k1_accumulate": repro_k1_accumulate,
    "repro_b2b_stale_a": repro_b2b_stale_a,
    "repro_max_from_zero": repro_max_from_zero,
    "repro_sum_odd_count": repro_sum_odd_count,
    "repro_top_word": repro_top_word,
    "repro_reduce_overtakes_drain": repro_reduce_overtakes_drain,
    "repro_dma_page_crossing": repro_dma_page_crossing,
    "repro_dma_odd_rows": repro_dma_odd_rows,
    "repro_expsub_unrounded": repro_expsub_unrounded,
}


async def run_reproducer(dev, name: str) -> dict:
    with dev.submit_filter_suspended():
        result = await REPRODUCERS[name](dev)
        err = await dev.read_csr("ERR")
    if err:
        result["detail"] += f" [ERR={err}]"
    return result
