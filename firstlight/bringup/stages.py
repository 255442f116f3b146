"""The checklist stages that run inside the simulator (stage 1, the build, runs on the host).

Each stage is ``async def stage(ctx) -> (details, figures)`` and raises :class:`StageFailed`
with a diagnosis when the chip is wrong. :func:`bringup_job` walks the ladder, marks stages
whose dependencies failed as ``blocked`` and emits one record per stage as soon as it ends, so
what was reported survives a crash later on.
"""

from __future__ import annotations

import time
import traceback

import numpy as np

import golden
import workarounds
from golden import quant
from kernels.gemm import gemm
from kernels.gemm_plan import SPACER_K
from kernels.roofline import explain
from kernels.lowp import gemm_lowp, mx_gemm_codes
from kernels.reduce import reduce_rows
from kernels.vector import elementwise
from rtl.board import MAX_BURST_BEATS
from rtl.config import ChipConfig
from rtl.csr_map import ID_MAGIC, REG, REGISTERS, SEMAPHORES, UNITS_THAT_WAIT, WINDOW_DATA
from cosim.device import DeviceError, DeviceTimeout
from cosim.testbench import BusTimeout
from rtl.dma import LOAD_REGIONS
from rtl.faults import dram_lines
from rtl.isa import (DmaQueue, ErrCode, Opcode, ReduceOp, dma_load, dma_store, dma_stride, fence, field_of_bit, matmul,
                     nop, pack_command, reduce, with_opcode)
from rtl.memories import MEMORIES, Region
from rtl.revisions import BY_CODE, REVISIONS
from workarounds.check import NO_FINDING, compare
from workarounds.registry import ASSESSED_REVISIONS
from workarounds.reproducers import run_reproducer

from ..jobs.checks import lowp_mismatch
from . import diagnose, registers
from .performance import compare as compare_to_model
from .plan import STAGES, dram_test_bytes

__all__ = ["bringup_job", "StageFailed"]


class StageFailed(Exception):
    def __init__(self, details: str, figures: dict | None = None):
        super().__init__(details)
        self.details = details
        self.figures = figures or {}


class Ctx:
    def __init__(self, dev, seed: int, expected: ChipConfig, faults: list[str], built_revision: str | None = None,
                 dram_test_bytes: int | None = None):
        self.dev = dev
        self.dram_test_bytes = dram_test_bytes  # None: the plan's default region
        self.built_revision = built_revision
        self.seed = seed
        self.expected = expected
        self.faults = faults
        self.rng = np.random.default_rng(seed)
        self._mit = None

    @property
    def mit(self) -> workarounds.Mitigations:
        """The errata knowledge attached to the chip (the identity stage attaches it first)."""
        if self._mit is None:
            self._mit = workarounds.attach(self.dev)
        return self._mit

    def attach(self) -> workarounds.Mitigations:
        self._mit = workarounds.attach(self.dev)
        return self._mit


def _bits(v: int) -> list[int]:
    return [i for i in range(32) if v >> i & 1]


# ---- 2. reset ------------------------------------------------------------------------------
async def stage_reset(ctx: Ctx):
    dev = ctx.dev
    d = dev.tb.dut
    # 4-state check first, before any bus traffic: outputs right out of reset.
    xs = [n for n in ("csr_rdata", "csr_ready", "idle", "irq") if any(c in str(getattr(d, n).value).lower() for c in "xz")]
    bad = []
    for r in REGISTERS:
        if r.reset is None or r.name in WINDOW_DATA:
            continue
        v = await dev.read_csr(r.name)
        if v != r.reset:
            bad.append(f"{r.name} = 0x{v:08x}, documented reset 0x{r.reset:08x} (bits {_bits(v ^ r.reset)} differ)")
    x_note = ("outputs have X/Z: " + ", ".join(xs)) if xs else (
        "no X/Z on outputs" if _four_state() else "X check not applicable (2-state simulator)")
    for pin, want in (("idle", 1), ("irq", 0)):  # out of reset the chip is idle and quiet
        got = dev.read_pin(pin)
        if got != want and got != -1:
            bad.append(f"the {pin} pin reads {got} after reset, expected {want} (stuck at {got}?)")
    if bad or xs:
        raise StageFailed("; ".join(bad + ([x_note] if xs else [])), {"registers_wrong": len(bad)})
    checked = sum(1 for r in REGISTERS if r.reset is not None and r.name not in WINDOW_DATA)
    return f"{checked} registers at their reset values; {x_note}", {"registers_checked": checked}


def _four_state() -> bool:
    import cocotb

    return "icarus" in cocotb.SIM_NAME.lower()


# ---- 3. identity ----------------------------------------------------------------------------
async def stage_identity(ctx: Ctx):
    dev = ctx.dev
    ident = await dev.read_csr("ID")
    rev = await dev.read_csr("REV")
    published = {name: await dev.read_csr(name) for name in ctx.expected.caps()}  # CAPS0, CAPS1, TRACE_DEPTH
    caps0, caps1 = published["CAPS0"], published["CAPS1"]
    problems = []
    if ident != ID_MAGIC:
        problems.append(f"ID = 0x{ident:08x}, expected 0x{ID_MAGIC:08x} (bits {_bits(ident ^ ID_MAGIC)} differ)")
    try:
        found = ChipConfig.from_caps(caps0, caps1, published["TRACE_DEPTH"])
    except ValueError as e:
        found = None
        problems.append(f"{' '.join(f'{n}=0x{v:08x}' for n, v in published.items())} describe no valid chip: {e}")
    if found is not None and found != ctx.expected:
        diffs = {k: (v, ctx.expected.as_dict()[k]) for k, v in found.as_dict().items() if v != ctx.expected.as_dict()[k]}
        problems.append(f"CAPS say {diffs} (read, built)")
    # Word for word too: a bit no field decodes (a format the chip cannot have) must read 0.
    for name, got in published.items():
        want = ctx.expected.caps()[name]
        if got != want and not (found is not None and found != ctx.expected):
            problems.append(f"{name} = 0x{got:08x}, this chip's is 0x{want:08x} (bits {_bits(got ^ want)} differ)")
    for name, want in dev.board.regs().items():  # the board it was built for: its DRAM's size, bus, bandwidth
        got = await dev.read_csr(name)
        if got != want:
            problems.append(f"{name} = 0x{got:08x} ({REG[name].unpack(got)}), the board built has 0x{want:08x} "
                            f"(bits {_bits(got ^ want)} differ)")
    rev = await dev.read_revision()
    name = BY_CODE[rev].name if rev in BY_CODE else None
    if ctx.built_revision and name != ctx.built_revision:
        code = REVISIONS[ctx.built_revision].code
        problems.append(f"REV = 0x{rev:02x} ({name or 'unknown'}), but this chip was built as {ctx.built_revision} "
                        f"(code 0x{code:02x}; bits {_bits(rev ^ code)} differ)")
    res = ctx.attach().resolution
    figures = {"rev_code": f"0x{rev:02x}", "revision": dev.revision, "mitigations": sorted(res.active)}
    if problems:
        raise StageFailed("; ".join(problems), figures)
    note = (f"revision {name}: {len(res.active)} mitigations on ({', '.join(sorted(res.active)) or 'none'})"
            if res.assessed else f"REV 0x{rev:02x} is not in the errata registry: going on with no mitigations")
    return f"ID ok, {ctx.expected.rows}x{ctx.expected.cols} array, {note}", figures


# ---- 4. CSR bus ------------------------------------------------------------------------------
async def stage_csr_bus(ctx: Ctx):
    dev = ctx.dev
    rw_problems, written = await registers.check_rw(dev)
    ro_problems = await registers.check_read_only(dev)
    counter_problems, figures = await registers.check_counters(dev)
    window_problems = await registers.check_window_data(dev, ctx.expected)
    problems = rw_problems + ro_problems + counter_problems + window_problems
    figures = {"patterns": written, **figures}
    if problems:
        raise StageFailed("; ".join(problems), figures)
    return (f"{len(registers.RW_REGISTERS)} read/write registers pass {written} walking-1/0 patterns; "
            f"{len(registers.READ_ONLY)} read-only registers ignore writes; {len(registers.EVENT_COUNTERS)} "
            f"counter words load and read back {len(registers.COUNTER_PATTERNS)} patterns (CYCLES against the "
            "testbench clock); the window data registers read back on two SRAMs"), figures


# ---- 5. memories ----------------------------------------------------------------------------
def _regions(cfg: ChipConfig):
    """(name, region, words, chunks per word, bits per chunk) of every SRAM in the memory table."""
    return [(m.name, m.region, m.depth(cfg), m.chunks(cfg), m.chunk_bits(cfg)) for m in MEMORIES]


class _MemFault(Exception):
    pass


class _Window:
    def __init__(self, dev, name, region, words, chunks, width):
        self.dev, self.name, self.region, self.words, self.chunks, self.width = dev, name, region, words, chunks, width
        self.mask = (1 << width) - 1
        self.n = words * chunks

    def where(self, cell: int, got: int, want: int, test: str) -> str:
        """The failing bits as bits of the SRAM word; the values are the window's cell (a word
        wider than 32 bits is read 32 bits at a time), which the message says."""
        word, sub = divmod(cell, self.chunks)
        bits = [sub * 32 + b for b in range(self.width) if (got ^ want) >> b & 1]
        digits = (self.width + 3) // 4
        values = f"read 0x{got:0{digits}x}, expected 0x{want:0{digits}x}"
        if self.chunks > 1:  # say which 32 bits of the word those values are
            lo = sub * 32
            values = f"its bits {lo + self.width - 1}..{lo} {values}"
        return (f"SRAM {self.name}: {test} failed at word {word} (0x{word:x}), bit{'s' if len(bits) > 1 else ''} "
                f"{', '.join(map(str, bits[:8]))}: {values}")

    async def seek(self, cell):
        await self.dev.window_seek(self.region, cell)

    async def write(self, v, reg="MEM_DATA"):
        await self.dev.write_csr(reg, v & self.mask)

    async def read(self, reg="MEM_DATA"):
        return (await self.dev.read_csr(reg)) & self.mask


async def _data_bus(w: _Window):
    for cell in range(min(w.chunks, w.n)):  # every data line of word 0
        for b in range(w.width):
            for pat in (1 << b, w.mask ^ (1 << b)):
                await w.seek(cell)
                await w.write(pat, "MEM_DATA_KEEP")
                got = await w.read("MEM_DATA_KEEP")
                if got != pat:
                    raise _MemFault(w.where(cell, got, pat, "data-bus walk"))


async def _address_bus(w: _Window):
    lines = (w.words - 1).bit_length()
    addrs = [0] + [1 << i for i in range(lines)]
    pattern, anti = 0xAAAAAAAA & w.mask, 0x55555555 & w.mask
    for a in addrs:
        await w.seek(a * w.chunks)
        await w.write(pattern, "MEM_DATA_KEEP")
    # Each word must hold the pattern before the walk: a word that does not is a bad cell (with
    # its bit), not an address line.
    for a in addrs:
        await w.seek(a * w.chunks)
        got = await w.read("MEM_DATA_KEEP")
        if got != pattern:
            raise _MemFault(w.where(a * w.chunks, got, pattern, "address-bus pattern"))
    for i, a in enumerate(addrs):
        await w.seek(a * w.chunks)
        await w.write(anti, "MEM_DATA_KEEP")
        for b in addrs:
            if b == a:
                continue
            await w.seek(b * w.chunks)
            got = await w.read("MEM_DATA_KEEP")
            if got != pattern:
                line = (a.bit_length() - 1) if a else None
                other = (b.bit_length() - 1) if b else None
                culprit = line if line is not None else other
                raise _MemFault(f"SRAM {w.name}: address line {culprit} is stuck or shorted: writing word {a} "
                                f"changed word {b} (address-bus walking ones)")
        await w.seek(a * w.chunks)
        await w.write(pattern, "MEM_DATA_KEEP")


async def _address_in_address(w: _Window):
    await w.seek(0)
    for cell in range(w.n):
        await w.write(cell * 0x9E3779B1 + 0x1234567)
    await w.seek(0)
    for cell in range(w.n):
        got = await w.read()
        want = (cell * 0x9E3779B1 + 0x1234567) & w.mask
        if got != want:
            raise _MemFault(w.where(cell, got, want, "address-in-address"))


async def _march_c_minus(w: _Window):
    """March C-: (w0); up(r0,w1); up(r1,w0); down(r0,w1); down(r1,w0); (r0) with word-wide 0/1."""
    zero, one = 0, w.mask
    await w.seek(0)
    for _ in range(w.n):
        await w.write(zero)
    for name, up, exp, new in (("M1", True, zero, one), ("M2", True, one, zero), ("M3", False, zero, one),
                               ("M4", False, one, zero)):
        await w.seek(0 if up else w.n - 1)
        cells = range(w.n) if up else range(w.n - 1, -1, -1)
        for cell in cells:
            got = await w.read("MEM_DATA_KEEP")
            if got != exp:
                raise _MemFault(w.where(cell, got, exp, f"March C- {name}"))
            await w.write(new, "MEM_DATA" if up else "MEM_DATA_DEC")
    await w.seek(0)
    for cell in range(w.n):
        got = await w.read()
        if got != zero:
            raise _MemFault(w.where(cell, got, zero, "March C- M5"))


async def stage_memories(ctx: Ctx):
    dev = ctx.dev
    problems, cells = [], 0
    for name, region, words, chunks, width in _regions(ctx.expected):
        w = _Window(dev, name, region, words, chunks, width)
        try:
            for test in (_data_bus, _address_bus, _address_in_address, _march_c_minus):
                await test(w)
        except _MemFault as e:
            problems.append(str(e))
        cells += w.n
    err = await dev.read_csr("ERR")
    if err:
        problems.append(f"ERR = {err} ({ErrCode(err).name}) after the memory tests")
    if problems:
        raise StageFailed("; ".join(problems), {"srams_failed": len(problems)})
    return (f"{', '.join(m.name for m in MEMORIES)}: {cells} cells pass data bus, address bus, address-in-address, "
            "March C-"), {"cells": cells}


# ---- 6. command path ------------------------------------------------------------------------
# Two bad commands with complementary bits: every bit of ERR_CMD0..3 (and of the command's way
# from the ring through the FIFO) is seen at 0 and at 1. Opcodes 0x5A and 0xA5 are unknown, and
# so is every single-bit change of either, so a corrupted bit still faults and is shown.
_PATTERN = 0x0123456789ABCDEF_FEDCBA9876543210


async def _expect_error(dev, commands, code: ErrCode, problems: list, what: str) -> None:
    await dev.write_csr("CTRL", REG["CTRL"].pack(clear_err=1))
    await dev.run(commands)
    err = await dev.read_csr("ERR")
    if err != code:
        problems.append(f"{what} left ERR = {err}, expected {int(code)} ({code.name})")


async def stage_command_path(ctx: Ctx):
    dev = ctx.dev
    cfg = ctx.expected
    problems = []
    await dev.soft_reset()  # DONE_COUNT and ERR_COUNT from 0
    try:
        await dev.run([nop(), fence(), nop()])
    except DeviceTimeout as e:
        status = REG["STATUS"].unpack(await dev.read_csr("STATUS"))
        if status["idle"] and dev.read_pin("idle") == 0:
            raise StageFailed("the idle pin is stuck at 0: STATUS.idle = 1 but the pin never rose "
                              f"(waited {dev.default_budget()} cycles)") from e
        raise
    d1 = await dev.read_csr("DONE_COUNT")
    if d1 != 3:
        problems.append(f"NOP, FENCE, NOP left DONE_COUNT = {d1}, expected 3")
    # the faulting command, twice with complementary bits; ERR, ERR_CMD, ERR_COUNT absolute
    for opcode, pattern in ((0x5A, _PATTERN), (0xA5, ~_PATTERN)):
        bad = with_opcode(pattern, opcode)
        await dev.write_csr("CTRL", REG["CTRL"].pack(clear_err=1))
        await dev.run([bad, nop()])
        err = await dev.read_csr("ERR")
        words = [await dev.read_csr(f"ERR_CMD{i}") for i in range(4)]
        seen = sum(w << (32 * i) for i, w in enumerate(words))
        if err != ErrCode.BAD_OPCODE:
            problems.append(f"bad opcode 0x{opcode:02x} left ERR = {err}, expected {int(ErrCode.BAD_OPCODE)} "
                            "(BAD_OPCODE)")
        if err and seen != bad:
            diff = seen ^ bad
            bits = [b for b in range(128) if diff >> b & 1]
            if len(bits) <= 2:
                problems += [f"command bit {b} ({field_of_bit(b)}) reads {seen >> b & 1} in ERR_CMD{b // 32}: "
                             f"stuck at {seen >> b & 1} between the ring and the executor (the command FIFO or "
                             f"the ring's fetch port), or ERR_CMD{b // 32} bit {b % 32} stuck" for b in bits]
            else:
                problems.append(f"ERR_CMD0..3 do not hold the faulting command ({len(bits)} bits differ: {bits[:6]})")
        count = await dev.read_csr("ERR_COUNT")
        if count != 1:
            problems.append(f"one bad command left ERR_COUNT = {count}, expected 1")
    d2 = await dev.read_csr("DONE_COUNT")
    if d2 - d1 != 2:
        problems.append(f"the NOPs after the bad commands did not retire (DONE_COUNT moved by {d2 - d1}, expected 2)")
    # every ERR bit a code uses: BAD_LENGTH (2) and C_RANGE (5) beside BAD_OPCODE (1)
    await _expect_error(dev, [matmul(a=0, b=0, c=0, k=0)], ErrCode.BAD_LENGTH, problems, "a MATMUL with K = 0")
    await _expect_error(dev, [matmul(a=0, b=0, c=cfg.acc_depth - 1, k=4)], ErrCode.C_RANGE, problems,
                        "a MATMUL whose C rows pass the end of ACC")
    await dev.write_csr("CTRL", REG["CTRL"].pack(clear_err=1))
    if await dev.read_csr("ERR"):
        problems.append("CTRL.clear_err did not clear ERR")
    problems += await _status_while_busy(dev, cfg)
    problems += await _counters_count(dev, cfg)
    problems += await _interrupts(dev)
    await dev.soft_reset()
    if problems:
        raise StageFailed("; ".join(problems))
    return ("NOP/FENCE retire, bad commands set ERR/ERR_CMD/ERR_COUNT exactly and the chip goes on; STATUS, "
            "FIFO level and the idle pin track a busy chip; MACS/ENGINE_BUSY/REDUCE_BUSY count exactly; "
            "interrupts raise, mask and clear"), {"done_count": d2}


async def _status_while_busy(dev, cfg: ChipConfig) -> list[str]:
    """STATUS bits and the FIFO level while the engine or the reduction unit is busy."""
    problems = []
    status = REG["STATUS"]
    long_k = min(cfg.operand_depth - 1, 1000)
    # Four long MATMULs: the first feeds, the other three wait in the FIFO behind it (a MATMUL
    # leaves the FIFO when the feed takes it), then n NOPs: levels 3, 4, 8, 16 set and clear
    # every level bit of a 16-deep FIFO.
    for n in (0, 1, 5, 13):
        if 3 + n > cfg.cmd_fifo_depth:
            break
        cmds = [matmul(a=0, b=0, c=0, k=long_k) for _ in range(4)] + [nop()] * n
        await dev.submit(cmds)
        await dev.tb.wait_cycles(48)  # the fetcher has queued everything behind the waiting MATMUL
        st = status.unpack(await dev.read_csr("STATUS"))
        pin = dev.read_pin("idle")
        want = {"busy": 1, "engine_busy": 1, "idle": 0, "fifo_level": 3 + n}
        for f, v in want.items():
            if st[f] != v:
                problems.append(f"STATUS.{f} = {st[f]} while the engine is busy with {n} NOPs queued, expected {v}")
        if pin == 1:
            problems.append("the idle pin reads 1 while the engine is busy (stuck at 1?)")
        await dev.wait_idle()
        if problems:
            break
    await dev.submit([reduce(ReduceOp.SUM, src=0, count=cfg.acc_depth - 2, dst=cfg.acc_depth - 1)])
    await dev.tb.wait_cycles(8)  # fetched, decoded and started
    st = status.unpack(await dev.read_csr("STATUS"))
    if not st["reduce_busy"]:
        problems.append("STATUS.reduce_busy = 0 while a REDUCE runs")
    await dev.wait_idle()
    await dev.run([pack_command(0x5A)])
    if not status.unpack(await dev.read_csr("STATUS"))["err"]:
        problems.append("STATUS.err = 0 with ERR set")
    await dev.write_csr("CTRL", REG["CTRL"].pack(clear_err=1))
    return problems


async def _counters_count(dev, cfg: ChipConfig) -> list[str]:
    """Perf counters against what the commands must cost (absolute, from a clear)."""
    problems = []
    k = 64
    await dev.write_csr("CTRL", REG["CTRL"].pack(clear_perf=1))
    await dev.run([matmul(a=0, b=0, c=0, k=k)])
    await dev.run([reduce(ReduceOp.SUM, src=0, count=8, dst=16)])
    perf = await dev.read_perf()
    want = {"MACS": cfg.rows * cfg.cols * k, "ENGINE_BUSY": cfg.matmul_busy_cycles(k),
            "REDUCE_BUSY": cfg.reduce_busy_cycles(8), "STALLS": 0}
    for name, v in want.items():
        got = perf.counters[name]
        if got != v:
            diff = got ^ v
            bit = f" (bit{'s' if diff & (diff - 1) else ''} {[b for b in range(64) if diff >> b & 1][:4]} differ)"
            problems.append(f"{name} = {got} after one MATMUL (K={k}) and one REDUCE (8 words), expected {v}{bit}")
    return problems


async def _interrupts(dev) -> list[str]:
    """IRQ_STATUS causes, the irq_en mask, the irq pin and write-1-to-clear."""
    problems = []
    irq = REG["IRQ_STATUS"]
    ctrl = REG["CTRL"]

    async def expect(what, status, pin):
        got = irq.unpack(await dev.read_csr("IRQ_STATUS"))
        for f, v in status.items():
            if got[f] != v:
                problems.append(f"IRQ_STATUS.{f} = {got[f]} {what}, expected {v}")
        p = dev.read_pin("irq")
        if p != pin:
            problems.append(f"the irq pin reads {p} {what}, expected {pin}")

    await dev.write_csr("CTRL", ctrl.pack(irq_en=0))
    await dev.write_csr("IRQ_STATUS", irq.pack(done=1, err=1))
    await expect("after clearing both causes", {"done": 0, "err": 0}, 0)
    await dev.run([nop()])
    await expect("after a NOP with irq_en = 0", {"done": 1, "err": 0}, 0)
    await dev.write_csr("CTRL", ctrl.pack(irq_en=1))
    await expect("with irq_en = 1 and done pending", {"done": 1}, 1)
    await dev.write_csr("IRQ_STATUS", 0)
    await expect("after writing 0 (must not clear)", {"done": 1}, 1)
    await dev.write_csr("IRQ_STATUS", irq.pack(done=1))
    await expect("after writing 1 to done", {"done": 0, "err": 0}, 0)
    await dev.run([pack_command(0x5A)])
    await dev.write_csr("IRQ_STATUS", irq.pack(done=1))
    await expect("after a bad command (done cleared)", {"done": 0, "err": 1}, 1)
    await dev.write_csr("IRQ_STATUS", irq.pack(err=1))
    await expect("after writing 1 to err", {"done": 0, "err": 0}, 0)
    await dev.write_csr("CTRL", ctrl.pack(irq_en=0, clear_err=1))
    return problems


# ---- 7. DRAM through the DMA ----------------------------------------------------------------
# Everything the DRAM and DMA stages move stays inside one 4 KiB page and one row (the 2D
# smoke transfers have two rows), and goes in raw (no submit filter): no erratum of any
# revision touches them (a burst across a page, an odd row count), so what they check is the
# chip as specified. The DRAM backdoor is not used: every byte is written by DMA_STORE and
# checked after DMA_LOAD (docs/bringup.md says why).
STAGING_BYTES = 1024  # the most one DRAM-stage transfer moves: ACC staging words, inside one page


class _DmaHang(Exception):
    """A DMA transfer never finished (the watchdog expired)."""

    def __init__(self, what: str, dram: int, nbytes: int, timeout: DeviceTimeout):
        super().__init__(f"{what} of {nbytes} bytes at DRAM byte {dram} never finished: {timeout}")
        self.what, self.dram, self.nbytes, self.timeout = what, dram, nbytes, timeout


class _DramFault(Exception):
    pass


class _Mismatch(Exception):
    """A load read back other than what the DRAM should hold (internal to _DramCheck)."""

    def __init__(self, addr: int, got: list[int], want: list[int], test: str):
        super().__init__(test)
        self.addr, self.got, self.want, self.test = addr, got, want, test


def _dma_budget(dev, nbytes: int) -> int:
    """Cycles a transfer may take before it counts as hung: four times what the board needs
    (latency per burst, bytes at the board's bandwidth) plus slack, at most the watchdog."""
    b = dev.board
    bursts = 1 + nbytes // (b.bus_bytes * MAX_BURST_BEATS)
    need = b.latency * bursts + -(-nbytes * b.period // (b.beats * b.bus_bytes))
    return min(dev.default_budget(), 4 * need + 4096)


async def _run_dma(dev, cmds: list[int], what: str, dram: int, nbytes: int) -> None:
    """Run DMA commands raw; a hang raises _DmaHang, a command the chip refused _DramFault."""
    try:
        with dev.submit_filter_suspended():
            await dev.run(cmds, _dma_budget(dev, nbytes))
    except DeviceTimeout as e:
        raise _DmaHang(what, dram, nbytes, e) from None
    err = await dev.read_csr("ERR")
    if err:
        name = ErrCode(err).name if err in ErrCode._value2member_map_ else "unknown"
        raise _DramFault(f"{what} of {nbytes} bytes at DRAM byte {dram} set ERR = {err} ({name}); the descriptor is "
                         "valid")


class _DmaPort:
    """The DRAM stage's way to DRAM: DMA_STORE from and DMA_LOAD into ACC words 0..words-1
    (the staging area), in bus beats."""

    def __init__(self, dev):
        self.dev = dev
        b = dev.board
        self.bus, self.bits = b.bus_bytes, b.bus_bits
        self.mask = (1 << self.bits) - 1
        self.wbeats = dev.mem_width(Region.ACC) // self.bits
        self.wb = self.wbeats * self.bus
        self.words = min(dev.mem_depth(Region.ACC), STAGING_BYTES // self.wb)
        self.block = self.words * self.wb  # bytes of one staging-sized transfer
        self.transfers = 0
        self.moved = 0

    def pack(self, beats: list[int]) -> list[int]:
        w = self.wbeats
        return [sum(v << (self.bits * i) for i, v in enumerate(beats[k:k + w])) for k in range(0, len(beats), w)]

    def unpack(self, words: list[int]) -> list[int]:
        return [wd >> (self.bits * i) & self.mask for wd in words for i in range(self.wbeats)]

    async def store(self, dram: int, beats: list[int]) -> None:
        words = self.pack(beats)
        self.dev.load_words(Region.ACC, 0, words)
        await _run_dma(self.dev, [dma_store(sram=0, dram=dram, words=len(words))], "DMA_STORE", dram,
                       len(words) * self.wb)
        self.transfers += 1
        self.moved += len(words) * self.wb

    async def load(self, dram: int, nbeats: int) -> list[int]:
        n = nbeats // self.wbeats
        await _run_dma(self.dev, [dma_load(Region.ACC, sram=0, dram=dram, words=n)], "DMA_LOAD", dram, n * self.wb)
        self.transfers += 1
        self.moved += n * self.wb
        return self.unpack(self.dev.read_words(Region.ACC, 0, n))


class _DramCheck:
    """The DRAM tests, against a model of what the DRAM holds (diagnose.DramImage) and with the
    history of every transfer, which the diagnosis replays (diagnose.explain_dram). ``port``
    is anything with the _DmaPort interface (tests/test_faults.py runs a model of a faulty
    board through the same tests)."""

    def __init__(self, port, dram_bytes: int, lines, rng: np.random.Generator):
        self.port, self.size, self.lines, self.rng = port, dram_bytes, list(lines), rng
        self.image = diagnose.DramImage(port.bus, dram_bytes)
        self.history: list[tuple] = []

    async def write(self, dram: int, beats: list[int]) -> None:
        per = self.port.block // self.port.bus
        for k in range(0, len(beats), per):
            addr, chunk = dram + k * self.port.bus, list(beats[k:k + per])
            await self.port.store(addr, chunk)
            self.image.store(addr, chunk)
            self.history.append(("store", addr, chunk))

    async def check(self, dram: int, nbeats: int, test: str) -> None:
        per = self.port.block // self.port.bus
        for k in range(0, nbeats, per):
            addr, n = dram + k * self.port.bus, min(per, nbeats - k)
            got = await self.port.load(addr, n)
            want = self.image.load(addr, n)
            self.history.append(("load", addr, got))
            if got != want:
                raise _Mismatch(addr, got, want, test)

    async def run(self, region: int) -> list[int]:
        """Every test in order; the first load that reads wrong ends them with _DramFault and
        its diagnosis. Before the diagnosis every address bit is probed in both write orders
        (:meth:`probe_lines`; its reads join the history), so an address fault that first
        showed in another test is seen from both sides of every bit."""
        try:
            await self.data_bus()
            offsets = await self.address_bus()
            await self.address_in_address(region)
            await self.march(region)
            return offsets
        except _Mismatch as m:
            if len({(a, b) for a, b, _ in diagnose.dram_cells(m.addr, m.got, m.want, self.port.bus)}) > 1:
                await self.probe_lines()  # one wrong bit is a cell: no address fault reads one bit off
            raise _DramFault(self.explain(m.addr, m.got, m.want, m.test)) from None

    async def probe_lines(self) -> None:
        """For every address bit i: a unique word stored at byte 0, then one at 2**i, both read
        back; then the same in the other order. A write that lands on the other word's place,
        or a read that fetches it, shows in one order or the other whatever the bit is tied to
        and on which side. Nothing is checked here: the reads are for the diagnosis."""
        taken = {v for op, _, vals in self.history for v in vals}
        wb = self.port.wbeats
        for line in self.lines:
            for order in ((0, 1 << line), (1 << line, 0)):
                for o in order:
                    await self.write(o, self._unique(wb, taken))
                for o in (0, 1 << line):
                    self.history.append(("load", o, await self.port.load(o, wb)))

    def explain(self, addr: int, got: list[int], want: list[int], test: str) -> str:
        bus = self.port.bus
        nib = 2 * bus
        cells = diagnose.dram_cells(addr, got, want, bus)
        k = next(i for i, (g, w) in enumerate(zip(got, want)) if g != w)
        seen = (f"{test}: a {len(got) * bus}-byte DMA_LOAD from DRAM byte {addr} read 0x{got[k]:0{nib}x} at byte "
                f"{addr + k * bus} (0x{addr + k * bus:x}), expected 0x{want[k]:0{nib}x}")
        if len({(a, b) for a, b, _ in cells}) == 1:
            a, b, v = cells[0]
            return f"DRAM byte {a} (0x{a:x}) bit {b} reads {v}, expected {1 - v} ({seen})"
        ties = diagnose.explain_dram(self.history, bus, self.size, self.lines)
        if ties:
            return f"{diagnose.describe_ties(ties)}: {seen}"
        wrong = [(i, g ^ w) for i, (g, w) in enumerate(zip(got, want)) if g != w]
        common = wrong[0][1]
        for _, d in wrong:
            common &= d
        if len(wrong) > 1 and common and all(d == common for _, d in wrong) and common & (common - 1) == 0:
            j = common.bit_length() - 1
            v = got[wrong[0][0]] >> j & 1
            return (f"DRAM data bit {j} of the beat (byte lane {j // 8}, bit {j % 8}) reads {v} in all {len(wrong)} wrong "
                    f"beats: a data line stuck at {v} ({seen})")
        a, b, v = cells[0]
        return (f"DRAM byte {a} (0x{a:x}) bit {b} reads {v}, expected {1 - v}, and {len(cells) - 1} more bits in "
                f"{len(wrong)} beats read wrong; no tied address bit explains them ({seen})")

    def _unique(self, n: int, taken: set[int]) -> list[int]:
        """``n`` random beats at least two bits from each other and from ``taken``: a beat
        read with one bit wrong is never mistaken for another."""
        out: list[int] = []
        while len(out) < n:
            v = int(self.rng.integers(0, 1 << 63)) & self.port.mask
            if all(bin(v ^ t).count("1") >= 2 for t in taken) and all(bin(v ^ t).count("1") >= 2 for t in out):
                out.append(v)
        taken.update(out)
        return out

    async def data_bus(self) -> None:
        """Walking ones and zeros over one beat: every data line alone at 1 and at 0."""
        bits, mask = self.port.bits, self.port.mask
        beats = [1 << i for i in range(bits)] + [mask ^ (1 << i) for i in range(bits)]
        per = self.port.block // self.port.bus
        for k in range(0, len(beats), per):
            await self.write(0, beats[k:k + per])
            await self.check(0, len(beats[k:k + per]), "data-bus walk (walking ones and zeros over one beat)")

    async def address_bus(self) -> list[int]:
        """A unique ACC word at DRAM byte 0 and at every power of two the DRAM decodes, written
        in ascending order, then all read back: a tied or aliased address bit moves a write onto
        another's place or a read onto another's data. Every word is read before the first
        wrong one is reported (the diagnosis needs them all)."""
        offsets = [0] + [1 << i for i in self.lines]
        taken = {v for op, _, vals in self.history for v in vals}
        for o in offsets:
            await self.write(o, self._unique(self.port.wbeats, taken))
        first = None
        for o in offsets:
            try:
                await self.check(o, self.port.wbeats, "address-bus walk (a unique word at byte 0 and at every power "
                                 "of two)")
            except _Mismatch as m:
                first = first or m
        if first:
            raise first
        return offsets

    def _aia(self, addr: int) -> int:
        bits = self.port.bits
        v = addr & ((1 << (bits - 1)) - 1)
        return v | (bin(v).count("1") & 1) << (bits - 1)  # parity: two addresses differ in two bits at least

    async def address_in_address(self, region: int) -> None:
        """Each beat holds its own byte address (with a parity bit), then its complement: every
        bit of the region at 0 and at 1, every beat distinct."""
        bus, mask, blk = self.port.bus, self.port.mask, self.port.block
        for flip, name in ((0, "address-in-address"), (mask, "address-in-address, complemented")):
            for base in range(0, region, blk):
                await self.write(base, [self._aia(base + k * bus) ^ flip for k in range(blk // bus)])
            for base in range(0, region, blk):
                await self.check(base, blk // bus, name)

    async def march(self, region: int) -> None:
        """March C- block by block (a block is one staging transfer): (w0); up(r0,w1); up(r1,w0);
        down(r0,w1); down(r1,w0); (r0). Within a block the beats move in address order."""
        bus, mask, blk = self.port.bus, self.port.mask, self.port.block
        n = blk // bus
        up, down = list(range(0, region, blk)), list(range(region - blk, -1, -blk))
        for base in up:
            await self.write(base, [0] * n)
        for name, order, exp, new in (("M1 up(r0,w1)", up, 0, mask), ("M2 up(r1,w0)", up, mask, 0),
                                      ("M3 down(r0,w1)", down, 0, mask), ("M4 down(r1,w0)", down, mask, 0)):
            for base in order:
                await self.check(base, n, f"March C- {name}")
                await self.write(base, [new] * n)
        for base in up:
            await self.check(base, n, "March C- M5 (r0)")


async def _dma_hang_failure(ctx, port: _DmaPort, e: _DmaHang, figures: dict) -> StageFailed:
    """A transfer that never finished: find the beat a load lost, if one did."""
    where = await diagnose.locate_dropped_beat(ctx.dev, 0, port.words, _dma_budget(ctx.dev, port.block))
    return StageFailed(f"{where}; {e}" if where else str(e), {**figures, "located": where})


async def stage_dram(ctx: Ctx):
    dev = ctx.dev
    region = dram_test_bytes(ctx.dram_test_bytes, dev.board)
    port = _DmaPort(dev)
    lines = dram_lines(dev.config, dev.board)
    chk = _DramCheck(port, dev.board.dram_bytes, lines, ctx.rng)
    figures = {"cells": region, "dram_test_bytes": region, "address_lines": len(lines), "staging_words": port.words}
    try:
        offsets = await chk.run(region)
    except _DramFault as e:
        raise StageFailed(str(e), {**figures, "transfers": port.transfers}) from None
    except _DmaHang as e:
        raise await _dma_hang_failure(ctx, port, e, figures) from None
    figures.update(transfers=port.transfers, bytes_moved=port.moved)
    return (f"DRAM bytes 0..{region - 1} through DMA_STORE/DMA_LOAD and {port.words} ACC words: data bus "
            f"({2 * port.bits} walking patterns), address bus ({len(lines)} address bits, bytes 0x{offsets[1]:x}.."
            f"0x{offsets[-1]:x}), address-in-address and its complement, March C-; {port.transfers} transfers, "
            f"{port.moved:,} bytes"), figures


# ---- 8. DMA smoke ----------------------------------------------------------------------------
def _le_words(raw: np.ndarray, wb: int) -> list[int]:
    return [int.from_bytes(raw[i:i + wb].tobytes(), "little") for i in range(0, len(raw), wb)]


def _le_bytes(words: list[int], wb: int) -> np.ndarray:
    return np.frombuffer(b"".join(int(w).to_bytes(wb, "little") for w in words), np.uint8)


async def _smoke_loads(dev, src_addr: int, src: np.ndarray, rng) -> list[str]:
    """A 1D and a 2D load into every SRAM DMA_LOAD may write, against the bytes in DRAM; the
    SRAM words around them keep their background."""
    problems = []
    bus = dev.board.bus_bytes
    for name in LOAD_REGIONS:
        region = Region[name]
        depth, wb = dev.mem_depth(region), dev.mem_width(region) // 8
        span = min(depth, 16)
        w1 = max(1, min(span - 2, 8, len(src) // wb - 1))
        s1 = 1 if span > w1 else 0
        w2 = max(1, min((span - 1) // 2, 4))
        ss = w2 + 1 if 2 * w2 + 1 <= span else w2
        ds = w2 * wb + 3 * bus  # rows apart in DRAM, off the word grid
        d0 = 2 * bus
        cases = [
            (f"1D DMA_LOAD of {w1} words into {name} word {s1}", [dma_load(region, sram=s1, dram=src_addr + wb, words=w1)],
             {s1 + i: wb + i * wb for i in range(w1)}),
            (f"2D DMA_LOAD (2 rows of {w2} words, SRAM stride {ss}, DRAM stride {ds}) into {name}",
             [dma_stride(DmaQueue.LOAD, sram=ss, dram=ds), dma_load(region, sram=0, dram=src_addr + d0, words=w2, rows=2),
              dma_stride(DmaQueue.LOAD, sram=0, dram=0)],
             {r * ss + i: d0 + r * ds + i * wb for r in range(2) for i in range(w2)}),
        ]
        for what, cmds, where in cases:
            bg = [int(x) for x in rng.integers(0, 1 << 62, span)]
            bg = [(v | v << 62) & ((1 << (8 * wb)) - 1) for v in bg]
            dev.load_words(region, 0, bg)
            nbytes = len(where) * wb
            await _run_dma(dev, cmds, what, src_addr, nbytes)
            got = dev.read_words(region, 0, span)
            want = list(bg)
            for w, off in where.items():
                want[w] = _le_words(src[off:off + wb], wb)[0]
            bad = [w for w in range(span) if got[w] != want[w]]
            if bad:
                w = bad[0]
                src_note = f"DRAM byte {src_addr + where[w]}" if w in where else "not a word of the transfer"
                problems.append(f"{what}: {len(bad)} of SRAM {name} words 0..{span - 1} wrong, first word {w} "
                                f"({src_note}): read 0x{got[w]:0{2 * wb}x}, expected 0x{want[w]:0{2 * wb}x}")
    return problems


async def _smoke_stores(dev, port: _DmaPort, dst: int, rng) -> list[str]:
    """A 1D and a 2D store from ACC over a background stored first, all read back by one load."""
    wb, n, bus = port.wb, port.words, port.bus
    words = [int(x) for x in rng.integers(0, 1 << 62, 2 * n)]
    words = [(v | v << 62 | v << 124) & ((1 << (8 * wb)) - 1) for v in words]
    bg, data = words[:n], words[n:]
    image = _le_bytes(bg, wb).copy()
    dev.load_words(Region.ACC, 0, bg)
    await _run_dma(dev, [dma_store(sram=0, dram=dst, words=n)], "DMA_STORE of the background", dst, n * wb)
    dev.load_words(Region.ACC, 0, data)
    w1 = max(1, min(8, n // 4))
    s1 = 1
    w2 = max(1, min(4, n // 8))
    a2 = s1 + w1 + 1
    ss = w2 + 1
    o1, o2 = wb, (w1 + 2) * wb + bus
    ds = w2 * wb + 2 * bus
    assert a2 + ss + w2 <= n and o2 + ds + w2 * wb <= n * wb
    cmds = [dma_store(sram=s1, dram=dst + o1, words=w1), dma_stride(DmaQueue.STORE, sram=ss, dram=ds),
            dma_store(sram=a2, dram=dst + o2, words=w2, rows=2), dma_stride(DmaQueue.STORE, sram=0, dram=0)]
    for i in range(w1):
        image[o1 + i * wb:o1 + (i + 1) * wb] = _le_bytes([data[s1 + i]], wb)
    for r in range(2):
        for i in range(w2):
            off = o2 + r * ds + i * wb
            image[off:off + wb] = _le_bytes([data[a2 + r * ss + i]], wb)
    await _run_dma(dev, cmds, f"1D DMA_STORE of {w1} words and 2D DMA_STORE (2 rows of {w2} words, SRAM stride "
                   f"{ss}, DRAM stride {ds})", dst, (w1 + 2 * w2) * wb)
    raw = port.pack(await port.load(dst, n * port.wbeats))
    got = _le_bytes(raw, wb)
    bad = np.flatnonzero(got != image)
    if len(bad):
        i = int(bad[0])
        return [f"DMA_STORE (1D of {w1} words to DRAM byte {dst + o1}, 2D of 2 rows of {w2} words to byte {dst + o2}, "
                f"DRAM stride {ds}) over a background: {len(bad)} of DRAM bytes {dst}..{dst + n * wb - 1} read back "
                f"wrong, first byte {dst + i}: 0x{int(got[i]):02x}, expected 0x{int(image[i]):02x}"]
    return []


def _bad_descriptors(dev) -> list[tuple[str, list[int], ErrCode]]:
    """(what, commands, the code the last one must set): every DMA_* code and BAD_LENGTH, on
    loads and stores; strides are set before the command that needs them and reset after."""
    cfg, b = dev.config, dev.board
    bus, size = b.bus_bytes, b.dram_bytes
    da = dev.mem_depth(Region.A)
    acc = cfg.acc_depth
    regions = {m.region for m in MEMORIES}
    no_load = [m for m in MEMORIES if m.name not in LOAD_REGIONS]
    unknown = next((r for r in range(1 << 3) if r not in regions), None)
    out = [(f"DMA_LOAD into {m.name} (not a DMA region)", [dma_load(m.region, sram=0, dram=0, words=1)],
            ErrCode.DMA_REGION) for m in no_load]
    if unknown is not None:
        out.append((f"DMA_LOAD into region {unknown} (no SRAM)", [dma_load(unknown, sram=0, dram=0, words=1)],
                    ErrCode.DMA_REGION))
    store_from_a = pack_command(Opcode.DMA_STORE, flags={"dma": {"region": int(Region.A)}}, length=1, arg1=1)
    stride = dma_stride
    out += [
        ("DMA_STORE from A (stores come from ACC)", [store_from_a], ErrCode.DMA_REGION),
        ("DMA_LOAD of 0 words", [pack_command(Opcode.DMA_LOAD, flags={"dma": {"region": int(Region.A)}}, length=0,
                                              arg1=1)], ErrCode.BAD_LENGTH),
        ("DMA_LOAD of 0 rows", [dma_load(Region.A, sram=0, dram=0, words=1, rows=0)], ErrCode.BAD_LENGTH),
        ("DMA_STORE of 0 words", [pack_command(Opcode.DMA_STORE, flags={"dma": {"region": int(Region.ACC)}},
                                               length=0, arg1=1)], ErrCode.BAD_LENGTH),
        ("DMA_STORE of 0 rows", [dma_store(sram=0, dram=0, words=1, rows=0)], ErrCode.BAD_LENGTH),
        (f"DMA_LOAD from DRAM byte {bus // 2} (not a whole beat)", [dma_load(Region.A, sram=0, dram=bus // 2, words=1)],
         ErrCode.DMA_ALIGN),
        (f"2D DMA_LOAD with a DRAM stride of {bus + bus // 2} bytes (not a whole beat)",
         [stride(DmaQueue.LOAD, sram=1, dram=bus + bus // 2), dma_load(Region.A, sram=0, dram=0, words=1, rows=2)],
         ErrCode.DMA_ALIGN),
        (f"DMA_STORE to DRAM byte {bus // 2}", [dma_store(sram=0, dram=bus // 2, words=1)], ErrCode.DMA_ALIGN),
        (f"DMA_LOAD of 2 words into A word {da - 1} (past the end)", [dma_load(Region.A, sram=da - 1, dram=0, words=2)],
         ErrCode.DMA_SRAM_RANGE),
        (f"2D DMA_LOAD whose second row (SRAM stride {da}) starts past the end of A",
         [stride(DmaQueue.LOAD, sram=da, dram=0), dma_load(Region.A, sram=0, dram=0, words=1, rows=2)],
         ErrCode.DMA_SRAM_RANGE),
        (f"DMA_STORE of 2 words from ACC word {acc - 1}", [dma_store(sram=acc - 1, dram=0, words=2)],
         ErrCode.DMA_SRAM_RANGE),
        (f"DMA_LOAD of 2 words from DRAM byte {size - bus} (past the end)",
         [dma_load(Region.A, sram=0, dram=size - bus, words=2)], ErrCode.DMA_DRAM_RANGE),
        (f"2D DMA_LOAD whose second row (DRAM stride {size}) starts past the end of DRAM",
         [stride(DmaQueue.LOAD, sram=0, dram=size), dma_load(Region.A, sram=0, dram=0, words=1, rows=2)],
         ErrCode.DMA_DRAM_RANGE),
        (f"DMA_STORE of 1 word to DRAM byte {size - bus}", [dma_store(sram=0, dram=size - bus, words=1)],
         ErrCode.DMA_DRAM_RANGE),
    ]
    return out


async def _smoke_bad_descriptors(dev) -> tuple[list[str], int]:
    """Each bad descriptor sets ERR with its code, lands in ERR_CMD0..3 bit for bit, counts once
    in ERR_COUNT, moves nothing, and the NOP behind it retires."""
    problems = []
    cases = _bad_descriptors(dev)
    for what, cmds, code in cases:
        await dev.write_csr("CTRL", REG["CTRL"].pack(clear_err=1))
        count0, done0 = await dev.read_csr("ERR_COUNT"), await dev.read_csr("DONE_COUNT")
        with dev.submit_filter_suspended():
            await dev.run(cmds + [nop()] + [dma_stride(q, sram=0, dram=0) for q in DmaQueue],
                          _dma_budget(dev, 4096))
        err = await dev.read_csr("ERR")
        seen = 0
        for i in range(4):
            seen |= (await dev.read_csr(f"ERR_CMD{i}")) << (32 * i)
        count, done = await dev.read_csr("ERR_COUNT"), await dev.read_csr("DONE_COUNT")
        if err != code:
            name = ErrCode(err).name if err in ErrCode._value2member_map_ else "unknown"
            problems.append(f"{what}: ERR = {err} ({name}), expected {int(code)} ({code.name})")
        elif seen != cmds[-1]:
            bits = [i for i in range(128) if (seen ^ cmds[-1]) >> i & 1]
            problems.append(f"{what}: ERR_CMD0..3 do not hold the command ({len(bits)} bits differ: "
                            + ", ".join(f"bit {i} ({field_of_bit(i)})" for i in bits[:4]) + ")")
        if count - count0 != 1:
            problems.append(f"{what}: ERR_COUNT moved by {count - count0}, expected 1")
        if done - done0 != len(cmds) + 2:
            problems.append(f"{what}: DONE_COUNT moved by {done - done0}, expected {len(cmds) + 2} (every command "
                            "but the bad one, and the NOP behind it: the chip goes on)")
        if problems:
            break
    await dev.write_csr("CTRL", REG["CTRL"].pack(clear_err=1))
    return problems, len(cases)


async def _smoke_control(dev, port: _DmaPort) -> list[str]:
    """What software sees of the DMA while it works: STATUS busy bits, the byte and busy
    counters, the semaphores a DMA signals and the WAITS register while one waits."""
    problems = []
    status, waits = REG["STATUS"], REG["WAITS"]
    nbytes = port.block
    for what, cmd, busy, counter in (
            ("DMA_LOAD", dma_load(Region.ACC, sram=0, dram=0, words=port.words), "dma_in_busy", "DRAM_RD_BYTES"),
            ("DMA_STORE", dma_store(sram=0, dram=0, words=port.words), "dma_out_busy", "DRAM_WR_BYTES")):
        await dev.write_csr("CTRL", REG["CTRL"].pack(clear_perf=1))
        with dev.submit_filter_suspended():
            await dev.submit([cmd])
            await dev.tb.wait_cycles(16)
            st = status.unpack(await dev.read_csr("STATUS"))
            await dev.wait_idle(_dma_budget(dev, nbytes))
        after = status.unpack(await dev.read_csr("STATUS"))
        for f, v, when in ((busy, 1, f"while a {nbytes}-byte {what} runs"), ("busy", 1, f"while a {what} runs"),
                           ("idle", 0, f"while a {what} runs")):
            if st[f] != v:
                problems.append(f"STATUS.{f} = {st[f]} {when}, expected {v}")
        if after[busy] or not after["idle"]:
            problems.append(f"STATUS.{busy} = {after[busy]}, idle = {after['idle']} after the {what}, expected 0 and 1")
        perf = (await dev.read_perf()).counters
        other = "DRAM_WR_BYTES" if counter == "DRAM_RD_BYTES" else "DRAM_RD_BYTES"
        for name, want in ((counter, nbytes), (other, 0)):
            if perf[name] != want:
                diff = perf[name] ^ want
                problems.append(f"{name} = {perf[name]} after one {nbytes}-byte {what}, expected {want} (bits "
                                f"{[i for i in range(64) if diff >> i & 1][:4]} differ)")
        unit = "DMA_IN_BUSY" if what == "DMA_LOAD" else "DMA_OUT_BUSY"
        if not 0 < perf[unit] <= perf["CYCLES"] or not 0 < perf["DRAM_BUSY"] <= perf["CYCLES"]:
            problems.append(f"{unit} = {perf[unit]}, DRAM_BUSY = {perf['DRAM_BUSY']} after a {what} of "
                            f"{perf['CYCLES']} cycles: each must be above 0 and at most CYCLES")
    for s in range(SEMAPHORES):  # a DMA that signals, a NOP that takes the count
        reg, field = f"SEM{s & ~1}{s | 1}", f"sem{s}"
        with dev.submit_filter_suspended():
            await dev.run([dma_load(Region.A, sram=0, dram=0, words=1, signal=s)], _dma_budget(dev, 64))
            got = REG[reg].unpack(await dev.read_csr(reg))
            await dev.run([nop(wait=s)], _dma_budget(dev, 64))
            left = REG[reg].unpack(await dev.read_csr(reg))
        if got[field] != 1 or left[field] != 0:
            problems.append(f"{reg}.{field} = {got[field]} after a DMA_LOAD signalled semaphore {s}, then "
                            f"{left[field]} after a NOP took it (expected 1, then 0)")
    for unit, cmd, sem in (("dma_in", dma_load(Region.A, sram=0, dram=0, words=1, wait=5), 5),
                           ("dma_out", dma_store(sram=0, dram=0, words=1, wait=2), 2)):
        with dev.submit_filter_suspended():
            await dev.submit([cmd])
            await dev.tb.wait_cycles(16)
            w = waits.unpack(await dev.read_csr("WAITS"))
            await dev.run([nop(signal=sem)], _dma_budget(dev, 64))
            after = waits.unpack(await dev.read_csr("WAITS"))
        still = [u for u in UNITS_THAT_WAIT if after[f"{u}_wait"]]
        if w[f"{unit}_wait"] != 1 or w[f"{unit}_sem"] != sem or still:
            problems.append(f"WAITS.{unit}_wait = {w[f'{unit}_wait']}, {unit}_sem = {w[f'{unit}_sem']} while a DMA "
                            f"waits on semaphore {sem} (expected 1 and {sem}); once signalled, waiting: "
                            f"{', '.join(f'WAITS.{u}_wait' for u in still) or 'none'}")
    return problems


async def stage_dma_smoke(ctx: Ctx):
    dev, rng = ctx.dev, ctx.rng
    port = _DmaPort(dev)
    src_addr, dst = 0, 2048  # one page: a source block and a store area
    src = rng.integers(0, 256, port.block, dtype=np.uint8)
    problems = []
    try:
        beats = port.unpack(_le_words(src, port.wb))
        await port.store(src_addr, beats)
        got = await port.load(src_addr, len(beats))
        if got != beats:
            k = next(i for i, (g, w) in enumerate(zip(got, beats)) if g != w)
            problems.append(f"1D DMA_LOAD of {port.block} bytes ({port.words} ACC words, {len(beats) // MAX_BURST_BEATS} "
                            f"bursts) from DRAM byte {src_addr}: beat {k} reads 0x{got[k]:x}, expected 0x{beats[k]:x}")
        if not problems:
            problems += await _smoke_loads(dev, src_addr, src, rng)
        if not problems:
            problems += await _smoke_stores(dev, port, dst, rng)
    except _DramFault as e:
        problems.append(str(e))
    except _DmaHang as e:
        raise await _dma_hang_failure(ctx, port, e, {}) from None
    n_bad = 0
    if not problems:
        bad_problems, n_bad = await _smoke_bad_descriptors(dev)
        problems += bad_problems
    if not problems:  # and the chip goes on: the source block loads as before
        try:
            if await port.load(src_addr, port.block // port.bus) != port.unpack(_le_words(src, port.wb)):
                problems.append(f"after the bad descriptors, DRAM bytes {src_addr}..{src_addr + port.block - 1} no "
                                "longer read back what was stored (a refused DMA moved data?)")
        except (_DramFault, _DmaHang) as e:
            problems.append(f"after the bad descriptors: {e}")
    if not problems:
        problems += await _smoke_control(dev, port)
    figures = {"cells": port.block, "transfers": port.transfers, "bad_descriptors": n_bad,
               "regions": list(LOAD_REGIONS)}
    if problems:
        raise StageFailed("; ".join(problems), figures)
    return (f"1D and 2D DMA_LOAD into {', '.join(LOAD_REGIONS)} and DMA_STORE from ACC bit-exact (a {port.block}-byte "
            f"load of {port.block // (port.bus * MAX_BURST_BEATS)} bursts); {n_bad} bad descriptors set ERR and "
            "ERR_CMD, move nothing, and the chip goes on; STATUS, DRAM_RD_BYTES/DRAM_WR_BYTES, the semaphores and "
            "WAITS follow the DMA"), figures


# ---- 9. engine and reduction smoke ------------------------------------------------------------
def _mismatch(got, ref, what):
    bad = np.argwhere(np.asarray(got) != np.asarray(ref))
    if len(bad):
        i = tuple(int(x) for x in bad[0])
        return f"{what}: {len(bad)} wrong, first at {i}: got {np.asarray(got)[i]}, expected {np.asarray(ref)[i]}"
    return None


async def stage_engine_smoke(ctx: Ctx):
    dev, rng = ctx.dev, ctx.rng
    cfg = ctx.expected
    problems = []
    n = cfg.cols
    eye = np.eye(cfg.rows, dtype=np.int8)
    b = rng.integers(-128, 128, (cfg.rows, n), dtype=np.int8)
    mit = ctx.mit
    c, _ = await gemm(dev, eye, b, mitigations=mit)
    problems.append(_mismatch(c, b.astype(np.int32), "identity MATMUL (I @ B == B)"))
    a = rng.integers(-128, 128, (2 * cfg.rows + 1, 13), dtype=np.int8)
    b = rng.integers(-128, 128, (13, 2 * cfg.cols - 1), dtype=np.int8)
    c, _ = await gemm(dev, a, b, mitigations=mit)
    problems.append(_mismatch(c, golden.gemm_int8(a, b), f"random MATMUL {a.shape[0]}x{b.shape[1]}x13"))
    x = rng.integers(-(2**31), 2**31, (3, 3 * cfg.lanes + 1), dtype=np.int64).astype(np.int32)
    for op in ("sum", "max", "min"):
        got, _ = await reduce_rows(dev, x, op, mitigations=mit)
        problems.append(_mismatch(got, golden.reduce_rows(x, op), f"REDUCE {op}"))
    fp = [f for f in cfg.formats if f != "int8"]
    for fmt in fp:  # one FP MATMUL per format the chip has (CAPS), on normal codes: bit-exact vs golden.mx
        codes = {"e4m3": (0x30, 0x48), "e5m2": (0x30, 0x48), "e2m1": (0x02, 0x06)}[fmt]
        a = rng.integers(*codes, (cfg.rows, 64), dtype=np.uint8)
        b = rng.integers(*codes, (64, cfg.cols), dtype=np.uint8)
        sa = rng.integers(120, 135, (cfg.rows, 2), dtype=np.uint8)
        sb = rng.integers(120, 135, (2, cfg.cols), dtype=np.uint8)
        bits, st = await mx_gemm_codes(dev, a, b, sa, sb, fmt, mitigations=mit)
        ref = golden.mx.mx_matmul_bits(a, b, sa, sb, fmt, chunks=st.chunks)
        problems.append(_mismatch(bits, ref, f"{fmt} MATMUL"))
    vector = []
    if cfg.vector:  # every vector-unit op once (CAPS0.vector), and the fp32 reductions, vs golden.vector
        vector = await _vector_smoke(dev, rng, cfg, mit, problems)
    problems += await diagnose.walk_pes(dev)
    problems += await diagnose.walk_lanes(dev)
    problems = [p for p in problems if p]
    if problems:
        where = []
        if any("MATMUL" in p or "PE walk" in p for p in problems):
            where.append(await diagnose.locate_pe(dev, rng))
        if any("REDUCE" in p for p in problems):
            where.append(await diagnose.locate_lane(dev))
        where = [w for w in where if w]
        raise StageFailed("; ".join(where + problems), {"located": where})
    return ("PE and lane bit walks, identity and random MATMUL, SUM/MAX/MIN" + (f", {'/'.join(fp)} MATMUL" if fp else "")
            + (f", {len(vector)} vector-unit ops" if vector else "") + " bit-exact vs golden"), {
        "formats": list(cfg.formats), "vector_ops": vector}


async def _vector_smoke(dev, rng, cfg, mit, problems: list) -> list[str]:
    """Each elementwise VEC op on a few words with specials among them, against golden.vector."""
    from golden.vector import INT_INPUT_OPS, UNARY_OPS, VEC_OPS, vector_op

    x = (rng.standard_normal((2, 2 * cfg.lanes + 1)) * 4).astype(np.float32)
    x.flat[:6] = [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-40]
    y = (rng.standard_normal(x.shape) * 4).astype(np.float32)
    done = []
    for op in VEC_OPS:
        a = rng.integers(-(2**31), 2**31, x.shape, dtype=np.int64).astype(np.int32) if op in INT_INPUT_OPS else x
        b = None if op in UNARY_OPS else y
        if op in ("iadd", "requant"):  # int32 addends; parameter words of every multiplier, shift and ReLU
            b = rng.integers(-(2**31), 2**31, x.shape, dtype=np.int64).astype(np.int32)
            b = b.view(np.uint32) if op == "requant" else b
        got, _ = await elementwise(dev, op, a, b, mitigations=mit)
        want = vector_op(op, a.view(np.uint32), None if b is None else b.view(np.uint32))
        problems.append(_mismatch(got.view(np.uint32), want, f"VEC {op}"))
        done.append(op)
    return done


# ---- 10. errata ------------------------------------------------------------------------------
async def stage_errata(ctx: Ctx):
    dev = ctx.dev
    observed = {}
    for e in workarounds.ERRATA:
        observed[e.id] = await run_reproducer(dev, e.reproducer)
    rows = compare(dev.revision, observed)
    found = [r["id"] for r in rows if r["detected"]]
    figures = {"detected": found, "verdicts": {r["id"]: r["verdict"] for r in rows}}
    bad = [r for r in rows if r["verdict"] not in NO_FINDING]
    if bad:
        raise StageFailed("; ".join(f"{r['verdict']}: {r['id']} ({r['detail']})" for r in bad), figures)
    if dev.revision not in ASSESSED_REVISIONS:
        return (f"no reproducer fired on {dev.revision}; the errata registry has not assessed {dev.revision}, so "
                f"nothing was expected or ruled out"), figures
    return f"{len(found)} errata detected on {dev.revision}, exactly as the registry says: {', '.join(found) or 'none'}", figures


# ---- 11. kernel suite ------------------------------------------------------------------------
GEMM_SUITE = [(1, 1, 1), (37, 19, 100), (64, 64, 64), (9, 6, 1500)]
REDUCE_SUITE = [(8, 100, "sum"), (8, 100, "max"), (8, 100, "min"), (2, 5000, "sum")]
LOWP_SUITE = ["int8-channel", "fp8-e4m3-tensor", "fp8-e4m3-cast", "mxfp8-e5m2-rceil", "mxfp4-e2m1-floor"]


async def stage_kernels(ctx: Ctx):
    dev, rng = ctx.dev, ctx.rng
    problems, mitigations = [], set()
    mit = ctx.mit
    for m, n, k in GEMM_SUITE:
        a = rng.integers(-128, 128, (m, k), dtype=np.int8)
        b = rng.integers(-128, 128, (k, n), dtype=np.int8)
        c, st = await gemm(dev, a, b, mitigations=mit)
        mitigations |= set(st.mitigations)
        problems.append(_mismatch(c, golden.gemm_int8(a, b), f"GEMM {m}x{n}x{k}"))
    for r, cols, op in REDUCE_SUITE:
        x = rng.integers(-(2**31), 2**31, (r, cols), dtype=np.int64).astype(np.int32)
        got, st = await reduce_rows(dev, x, op, mitigations=mit)
        mitigations |= set(st.mitigations)
        problems.append(_mismatch(got, golden.reduce_rows(x, op), f"reduce {op} {r}x{cols}"))
    lowp = [rc for rc in LOWP_SUITE if quant.recipe(rc).fmt in ctx.expected.formats]
    for rc in lowp:
        a = rng.standard_normal((16, 96)).astype(np.float32)
        b = rng.standard_normal((96, 12)).astype(np.float32)
        res = await gemm_lowp(dev, a, b, rc, mitigations=mit)
        mitigations |= set(res.stats.mitigations)
        bad = lowp_mismatch(res)
        if bad:
            problems.append(f"{rc} 16x12x96 (chip {'bits' if res.fp else 'int32'} vs golden): {bad['count']} wrong, "
                            f"first at {tuple(bad['index'])}: got {bad['got']}, expected {bad['expected']}")
    vector = await _tile_kernels(dev, rng, mit, problems)
    problems = [p for p in problems if p]
    figures = {"gemm_shapes": len(GEMM_SUITE), "reduce_shapes": len(REDUCE_SUITE), "lowp_recipes": len(lowp),
               "tile_kernels": vector, "mitigations": sorted(mitigations)}
    if problems:
        raise StageFailed("; ".join(problems), figures)
    return (f"{len(GEMM_SUITE)} GEMMs, {len(REDUCE_SUITE)} reductions, {len(lowp)} low-precision recipes"
            + (f" and {', '.join(vector)}" if vector else "") + " bit-exact, mitigations "
            + (', '.join(sorted(mitigations)) or 'none')), figures


async def _tile_kernels(dev, rng, mit, problems: list) -> list[str]:
    """Every tile-language kernel at each of its declared bring-up shapes (KernelSpec.bringup), on
    its declaration's seeded inputs, against its golden; a kernel this chip cannot run (no
    vector unit, a format it lacks) is left out and said so."""
    from firstlight.jobs.tile import compare
    from kernels.tile.spec import registry, run_spec

    ran = []
    for spec in registry().values():
        if spec.refusal(dev.config):
            continue
        for shape in spec.bringup:
            p = spec.resolve(shape)
            if spec.refusal(dev.config, p):  # a recipe's format this chip was built without
                continue
            ins = spec.inputs(p, int(rng.integers(1 << 31)), False)
            outs, st = await run_spec(dev, spec, p, ins, mitigations=mit)
            bad, _ = compare(spec, p, ins, outs, dev.config.lanes, st.plan)
            where = f"{spec.name} " + "x".join(str(p[x.name]) for x in spec.params if x.shape)
            if bad:
                problems.append(f"{where}: {bad['count']} wrong, first at {tuple(bad['index'])}: got {bad['got']}, "
                                f"expected {bad['expected']}")
            ran.append(spec.name)
    return list(dict.fromkeys(ran))


# ---- 12. performance ------------------------------------------------------------------------
async def stage_performance(ctx: Ctx):
    dev, rng = ctx.dev, ctx.rng
    cfg = ctx.expected
    m = n = k = 128
    a = rng.integers(-128, 128, (m, k), dtype=np.int8)
    b = rng.integers(-128, 128, (k, n), dtype=np.int8)
    c, st = await gemm(dev, a, b, mitigations=ctx.mit)
    plan = st.plan
    problems = []
    if _mismatch(c, golden.gemm_int8(a, b), "GEMM 128^3"):
        problems.append("GEMM 128^3 is wrong")
    padded_macs = plan["tm"] * cfg.rows * plan["tn"] * cfg.cols * k
    # FL-ME-002's spacers (kernels/tile/errata.py) are MATMULs too: SPACER_K steps on zero B words
    spacer_macs = (st.host or {}).get("errata_insertions", 0) * cfg.rows * cfg.cols * SPACER_K
    if st.macs_issued != padded_macs + spacer_macs:
        problems.append(f"MACS counter moved by {st.macs_issued}, the MATMULs issued {padded_macs + spacer_macs}"
                        + (f" ({spacer_macs} of them FL-ME-002's spacers)" if spacer_macs else ""))
    if not st.cycles >= st.engine_busy_cycles >= padded_macs // cfg.peak_macs_per_cycle:
        problems.append(f"counters inconsistent: cycles {st.cycles}, engine busy {st.engine_busy_cycles}, "
                        f"MAC cycles {padded_macs // cfg.peak_macs_per_cycle}")
    # every operand byte crossed the memory port: A and B at least once, C exactly once
    if st.dram_write_bytes != plan["tm"] * plan["tn"] * cfg.rows * cfg.cols * 4:
        problems.append(f"DRAM_WR_BYTES moved by {st.dram_write_bytes:,}, the stores wrote "
                        f"{plan['tm'] * plan['tn'] * cfg.rows * cfg.cols * 4:,}")
    if st.dram_read_bytes < (plan["tm"] * cfg.rows + plan["tn"] * cfg.cols) * k:
        problems.append(f"DRAM_RD_BYTES moved by {st.dram_read_bytes:,}, less than the operands")
    # against the planner's schedule model for this plan, chip and board (firstlight/bringup/performance.py)
    verdict = compare_to_model(st.to_dict(), cfg, dev.board)
    if not verdict.passed:
        problems.append(f"GEMM 128^3 too slow: {verdict.sentence()}")
    figures = {"cycles": st.cycles, "compute_roof_cycles": st.compute_cycles,
               "vector_roof_cycles": st.vector_cycles, "memory_roof_cycles": st.memory_cycles,
               "attainable_cycles": st.attainable_cycles, "bound": st.bound,
               "roof_utilization": round(st.roof_utilization, 4), "overlap": round(st.overlap, 3),
               "dram_bytes": st.dram_bytes, "compulsory_bytes": st.compulsory_bytes,
               "predicted_cycles": st.predicted_cycles, "sim_cycles_per_s": round(st.sim_cycles_per_s),
               "plan": plan, **verdict.figures()}
    if problems:
        raise StageFailed("; ".join(problems), figures)
    return f"GEMM 128^3: {verdict.sentence()}; {explain(st.to_dict())}", figures


STAGE_FUNCS = {
    "reset": stage_reset, "identity": stage_identity, "csr_bus": stage_csr_bus, "memories": stage_memories,
    "command_path": stage_command_path, "dram": stage_dram, "dma_smoke": stage_dma_smoke,
    "engine_smoke": stage_engine_smoke, "errata": stage_errata,
    "kernels": stage_kernels, "performance": stage_performance,
}


# A chip that answers wrong, hangs or never finishes is a failure; any other exception is a
# fault of the harness itself (a bug in a stage, a broken simulator) and is reported as an error.
CHIP_FAILURES = (DeviceError, DeviceTimeout, BusTimeout)


async def bringup_job(dev, emit, selected: list[str], seed: int, faults: list[str],
                      built_revision: str | None = None, watchdog_cycles: int = 1_000_000,
                      fault_code: int = 0, stop_at_first_failure: bool = False,
                      dram_test_bytes: int | None = None) -> dict:
    """Run the simulator-side stages in order; ``selected`` names the stages to run.

    ``fault_code`` is a fault descriptor (rtl/faults.py) for a campaign build's ``fault_sel``
    port, set before a fresh reset; ``stop_at_first_failure`` skips the rest once a stage fails
    (a campaign only needs the first stage that sees the fault); ``dram_test_bytes`` is the dram
    stage's region (None: plan.DRAM_TEST_BYTES)."""
    dev.watchdog_cycles = watchdog_cycles
    if fault_code:
        dev.tb.dut.fault_sel.value = fault_code
        await dev.tb.reset()
    ctx = Ctx(dev, seed, dev.config, faults, built_revision, dram_test_bytes)
    status = {"build": "passed"}
    for stage in STAGES[1:]:
        rec = {"type": "stage", "name": stage.name, "depends_on": list(stage.depends_on), "blocked_by": None,
               "details": "", "figures": {}, "duration_s": 0.0}
        if stage.name not in selected:
            rec.update(status="skipped", details="not selected (--only)")
        elif stop_at_first_failure and any(v in ("failed", "error") for v in status.values()):
            rec.update(status="skipped", details="not run: a stage already failed (stop at first failure)")
        else:
            blockers = [d for d in stage.depends_on if status.get(d) in ("failed", "error", "blocked")]
            if blockers:
                rec.update(status="blocked", blocked_by=blockers[0], details=f"blocked by {blockers[0]}")
            else:
                emit({"type": "stage_start", "name": stage.name})
                t0 = time.perf_counter()
                try:
                    details, figures = await STAGE_FUNCS[stage.name](ctx)
                    rec.update(status="passed", details=details, figures=figures)
                except StageFailed as e:
                    rec.update(status="failed", details=e.details, figures=e.figures)
                except CHIP_FAILURES as e:  # a watchdog, a hung bus, a chip error: a verdict on the chip,
                    # with its dump and the stage's line that met it (no Python traceback: that is for harness errors)
                    rec.update(status="failed", details=f"{type(e).__name__}: {e}{_stage_line(e)}", figures={})
                    await _recover(dev)
                except Exception as e:  # noqa: BLE001 - the harness broke, not the chip
                    rec.update(status="error", details=f"harness error: {type(e).__name__}: {e}",
                               figures={"traceback": traceback.format_exc(limit=8)})
                    await _recover(dev)
                rec["duration_s"] = round(time.perf_counter() - t0, 3)
        status[stage.name] = rec["status"]
        emit(rec)
    return {"stages": status}


def _stage_line(e: BaseException) -> str:
    """Where in this module's stages the chip failure surfaced, as " (at stages.py:93, in
    stage_reset: <line>)", for the diagnosis without a traceback."""
    here = None
    for fr in traceback.extract_tb(e.__traceback__):
        if fr.filename == __file__ and fr.name != "bringup_job":
            here = fr
    return f" (at stages.py:{here.lineno}, in {here.name}: {here.line})" if here else ""


async def _recover(dev) -> None:
    """After a crashed stage: soft-reset so independent stages get a working chip."""
    try:
        await dev.soft_reset()
    except Exception:  # noqa: BLE001 - the stage's own failure is already recorded
        pass
