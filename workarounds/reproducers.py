"""Minimal device programs, one per erratum, that show the defect on the real RTL.

Each returns ``{"fired": bool, "detail": str}``. They submit raw command streams: the
device's submit filter (the mitigation passes) is suspended while they run, since the point is
the bug.
"""

from __future__ import annotations

from rtl.csr_map import REG
from rtl.isa import Format, ReduceOp, fence, matmul, reduce
from rtl.memories import Region

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


REPRODUCERS = {
    "repro_fp8_subnormal": repro_fp8_subnormal,
    "repro_k1_accumulate": repro_k1_accumulate,
    "repro_b2b_stale_a": repro_b2b_stale_a,
    "repro_max_from_zero": repro_max_from_zero,
    "repro_sum_odd_count": repro_sum_odd_count,
    "repro_top_word": repro_top_word,
    "repro_reduce_overtakes_drain": repro_reduce_overtakes_drain,
}


async def run_reproducer(dev, name: str) -> dict:
    with dev.submit_filter_suspended():
        result = await REPRODUCERS[name](dev)
        err = await dev.read_csr("ERR")
    if err:
        result["detail"] += f" [ERR={err}]"
    return result
