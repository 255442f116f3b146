"""Minimal device programs, one per erratum, that show the defect on the real RTL.

Each returns ``{"fired": bool, "detail": str}``. They submit raw command streams: the
device's mitigation passes are switched off while they run, since the point is the bug.
"""

from __future__ import annotations

from contextlib import contextmanager

from rtl.csr_map import REG, MemRegion
from rtl.isa import MATMUL_FLAG_ACCUMULATE, Opcode, ReduceOp, pack_command

__all__ = ["REPRODUCERS", "run_reproducer"]


@contextmanager
def _raw(dev):
    saved = dev.stream_passes
    dev.stream_passes = []
    try:
        yield
    finally:
        dev.stream_passes = saved


def _acc_lanes(dev, word: int) -> list[int]:
    w = dev.read_words(MemRegion.ACC, word, 1)[0]
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
    await dev.write_csr("CTRL", REG["CTRL"].field("clear_err").mask)


async def repro_k1_accumulate(dev) -> dict:
    """MATMUL K=4 writes 4 into C; MATMUL K=1 with accumulate must make it 5."""
    cfg = dev.config
    await _prepare(dev)
    dev.load_words(MemRegion.A, 0, [_ones_word(cfg.rows)] * 4)
    dev.load_words(MemRegion.B, 0, [_ones_word(cfg.cols)] * 4)
    await dev.run([pack_command(Opcode.MATMUL, length=4), pack_command(Opcode.FENCE),
                   pack_command(Opcode.MATMUL, flags=MATMUL_FLAG_ACCUMULATE, length=1)])
    got = _acc_lanes(dev, 0)[0]
    return {"fired": got != 5, "detail": f"C[0,0] = {got} after K=4 then accumulating K=1 (expected 5)"}


async def repro_b2b_stale_a(dev) -> dict:
    """Two MATMULs with no gap; the second reads A at 8.. where A[4] differs from A[8]."""
    cfg = dev.config
    await _prepare(dev)
    dev.load_words(MemRegion.A, 0, [_ones_word(cfg.rows, 1)] * 8 + [_ones_word(cfg.rows, 2)] * 4)
    dev.load_words(MemRegion.B, 0, [_ones_word(cfg.cols, 1)] * 4)
    await dev.run([pack_command(Opcode.MATMUL, length=4, arg0=0, arg2=0),
                   pack_command(Opcode.MATMUL, length=4, arg0=8, arg2=cfg.rows)])
    got = _acc_lanes(dev, cfg.rows)[0]
    return {"fired": got != 8, "detail": f"second tile C[0,0] = {got} (expected 4 steps of 2*1 = 8)"}


async def repro_max_from_zero(dev) -> dict:
    await _prepare(dev)
    lanes = dev.config.lanes
    dev.load_words(MemRegion.ACC, 0, [_acc_word(dev, [-7 - j for j in range(lanes)]),
                                      _acc_word(dev, [-3 - j for j in range(lanes)])])
    await dev.run([pack_command(Opcode.REDUCE, flags=ReduceOp.MAX, length=2, arg0=0, arg2=4)])
    got = _acc_lanes(dev, 4)[0]
    return {"fired": got != -3, "detail": f"MAX over all-negative words = {got} (expected -3)"}


async def repro_sum_odd_count(dev) -> dict:
    await _prepare(dev)
    lanes = dev.config.lanes
    dev.load_words(MemRegion.ACC, 0, [_acc_word(dev, [1] * lanes)] * 3)
    await dev.run([pack_command(Opcode.REDUCE, flags=ReduceOp.SUM, length=3, arg0=0, arg2=4)])
    got = _acc_lanes(dev, 4)[0]
    return {"fired": got != 3 * lanes, "detail": f"SUM of 3 words of ones = {got} (expected {3 * lanes})"}


async def repro_top_word(dev) -> dict:
    cfg = dev.config
    await _prepare(dev)
    top = cfg.operand_depth - 1
    dev.load_words(MemRegion.A, 0, [_ones_word(cfg.rows, 1)])
    dev.load_words(MemRegion.B, top, [_ones_word(cfg.cols, 3)])
    await dev.run([pack_command(Opcode.MATMUL, length=1, arg0=0, arg1=top, arg2=0)])
    got = _acc_lanes(dev, 0)[0]
    return {"fired": got != 3, "detail": f"MATMUL K=1 on B[{top}] gave C[0,0] = {got} (expected 3)"}


async def repro_reduce_overtakes_drain(dev) -> dict:
    """MATMUL writes 4s over a sentinel; a REDUCE queued right behind must see the 4s."""
    cfg = dev.config
    await _prepare(dev)
    dev.load_words(MemRegion.ACC, 0, [_acc_word(dev, [1000] * cfg.lanes)] * cfg.rows)
    dev.load_words(MemRegion.A, 0, [_ones_word(cfg.rows)] * 4)
    dev.load_words(MemRegion.B, 0, [_ones_word(cfg.cols)] * 4)
    await dev.run([pack_command(Opcode.MATMUL, length=4, arg2=0),
                   pack_command(Opcode.REDUCE, flags=ReduceOp.SUM, length=cfg.rows, arg0=0, arg2=cfg.rows)])
    got = _acc_lanes(dev, cfg.rows)[0]
    want = 4 * cfg.rows * cfg.lanes
    return {"fired": got != want, "detail": f"REDUCE right behind MATMUL = {got} (expected {want})"}


async def repro_fp8_subnormal(dev) -> dict:
    """E4M3 2**-9 (code 0x01) times 1.0 (0x38), unit scales: fp32 2**-9 = 0x3B000000."""
    from rtl.isa import FORMAT_SHIFT, Format

    cfg = dev.config
    if "e4m3" not in cfg.formats:
        return {"fired": False, "applicable": False, "detail": "chip has no E4M3 path (CAPS): cannot occur"}
    await _prepare(dev)
    dev.load_words(MemRegion.A, 0, [_ones_word(cfg.rows, 0x01)])
    dev.load_words(MemRegion.B, 0, [_ones_word(cfg.cols, 0x38)])
    dev.load_words(MemRegion.SA, 0, [_ones_word(cfg.rows, 127)])
    dev.load_words(MemRegion.SB, 0, [_ones_word(cfg.cols, 127)])
    await dev.run([pack_command(Opcode.MATMUL, flags=int(Format.E4M3) << FORMAT_SHIFT, length=1)])
    got = dev.read_words(MemRegion.ACC, 0, 1)[0] & 0xFFFFFFFF
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
    with _raw(dev):
        result = await REPRODUCERS[name](dev)
        err = await dev.read_csr("ERR")
    if err:
        result["detail"] += f" [ERR={err}]"
    return result
