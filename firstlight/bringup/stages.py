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
from kernels.gemm import gemm, plan_for
from kernels.lowp import gemm_lowp, mx_gemm_codes
from kernels.reduce import reduce_rows
from rtl.config import ChipConfig
from rtl.csr_map import ID_MAGIC, REG, REGISTERS, WINDOW_DATA
from cosim.device import DeviceError, DeviceTimeout
from cosim.testbench import BusTimeout
from rtl.isa import ErrCode, ReduceOp, fence, field_of_bit, matmul, nop, pack_command, reduce, with_opcode
from rtl.memories import MEMORIES
from rtl.revisions import BY_CODE, REVISIONS
from workarounds.check import compare
from workarounds.reproducers import run_reproducer

from ..jobs.checks import lowp_mismatch
from . import diagnose, registers
from .plan import STAGES

__all__ = ["bringup_job", "StageFailed"]


class StageFailed(Exception):
    def __init__(self, details: str, figures: dict | None = None):
        super().__init__(details)
        self.details = details
        self.figures = figures or {}


class Ctx:
    def __init__(self, dev, seed: int, expected: ChipConfig, faults: list[str], built_revision: str | None = None):
        self.dev = dev
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
    caps0, caps1 = await dev.read_csr("CAPS0"), await dev.read_csr("CAPS1")
    problems = []
    if ident != ID_MAGIC:
        problems.append(f"ID = 0x{ident:08x}, expected 0x{ID_MAGIC:08x} (bits {_bits(ident ^ ID_MAGIC)} differ)")
    try:
        found = ChipConfig.from_caps(caps0, caps1)
    except ValueError as e:
        found = None
        problems.append(f"CAPS0=0x{caps0:08x} CAPS1=0x{caps1:08x} describe no valid chip: {e}")
    if found is not None and found != ctx.expected:
        diffs = {k: (v, ctx.expected.as_dict()[k]) for k, v in found.as_dict().items() if v != ctx.expected.as_dict()[k]}
        problems.append(f"CAPS say {diffs} (read, built)")
    # Word for word too: a bit no field decodes (a format the chip cannot have) must read 0.
    for name, got in (("CAPS0", caps0), ("CAPS1", caps1)):
        want = ctx.expected.caps()[name]
        if got != want and not (found is not None and found != ctx.expected):
            problems.append(f"{name} = 0x{got:08x}, this chip's is 0x{want:08x} (bits {_bits(got ^ want)} differ)")
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
        word, sub = divmod(cell, self.chunks)
        bits = [sub * 32 + b for b in range(self.width) if (got ^ want) >> b & 1]
        return (f"SRAM {self.name}: {test} failed at word {word} (0x{word:x}), bit{'s' if len(bits) > 1 else ''} "
                f"{', '.join(map(str, bits[:8]))}: read 0x{got:0{(self.width + 3) // 4}x}, "
                f"expected 0x{want:0{(self.width + 3) // 4}x}")

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


# ---- 7. engine and reduction smoke ------------------------------------------------------------
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
            + " bit-exact vs golden"), {"formats": list(cfg.formats)}


# ---- 8. errata ------------------------------------------------------------------------------
async def stage_errata(ctx: Ctx):
    dev = ctx.dev
    observed = {}
    for e in workarounds.ERRATA:
        observed[e.id] = await run_reproducer(dev, e.reproducer)
    rows = compare(dev.revision, observed)
    found = [r["id"] for r in rows if r["detected"]]
    figures = {"detected": found, "verdicts": {r["id"]: r["verdict"] for r in rows}}
    bad = [r for r in rows if r["verdict"] not in ("ok", "not applicable")]
    if bad:
        raise StageFailed("; ".join(f"{r['verdict']}: {r['id']} ({r['detail']})" for r in bad), figures)
    return f"{len(found)} errata detected on {dev.revision}, exactly as the registry says: {', '.join(found) or 'none'}", figures


# ---- 9. kernel suite ------------------------------------------------------------------------
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
    problems = [p for p in problems if p]
    figures = {"gemm_shapes": len(GEMM_SUITE), "reduce_shapes": len(REDUCE_SUITE), "lowp_recipes": len(lowp),
               "mitigations": sorted(mitigations)}
    if problems:
        raise StageFailed("; ".join(problems), figures)
    return (f"{len(GEMM_SUITE)} GEMMs, {len(REDUCE_SUITE)} reductions and {len(lowp)} low-precision recipes "
            f"bit-exact, mitigations "
            f"{', '.join(sorted(mitigations)) or 'none'}"), figures


# ---- 10. performance ------------------------------------------------------------------------
async def stage_performance(ctx: Ctx):
    dev, rng = ctx.dev, ctx.rng
    cfg = ctx.expected
    m = n = k = 128
    a = rng.integers(-128, 128, (m, k), dtype=np.int8)
    b = rng.integers(-128, 128, (k, n), dtype=np.int8)
    plan = plan_for(cfg, ctx.mit.gemm, m, n, k)
    c, st = await gemm(dev, a, b, mitigations=ctx.mit)
    problems = []
    if _mismatch(c, golden.gemm_int8(a, b), "GEMM 128^3"):
        problems.append("GEMM 128^3 is wrong")
    padded_macs = plan.tm * cfg.rows * plan.tn * cfg.cols * k
    if st.macs_issued != padded_macs:
        problems.append(f"MACS counter moved by {st.macs_issued}, the MATMULs issued {padded_macs}")
    if not st.cycles >= st.engine_busy_cycles >= padded_macs // cfg.peak_macs_per_cycle:
        problems.append(f"counters inconsistent: cycles {st.cycles}, engine busy {st.engine_busy_cycles}, "
                        f"MAC cycles {padded_macs // cfg.peak_macs_per_cycle}")
    ideal, measured, predicted = st.ideal_cycles, st.cycles, st.predicted_cycles
    gap = measured - ideal
    figures = {"cycles": measured, "ideal_cycles": ideal, "predicted_cycles": predicted,
               "utilization": round(st.utilization, 4), "sim_cycles_per_s": round(st.sim_cycles_per_s)}
    if problems:
        raise StageFailed("; ".join(problems), figures)
    sched = predicted - ideal
    rest = measured - predicted
    return (f"GEMM 128^3 at {100 * st.utilization:.1f}% of the roofline ({measured:,} cycles vs {ideal:,}); "
            f"gap {gap:,} cycles = {sched:,} schedule model (drains, padding, short K) + {rest:,} not in the model "
            f"(bus transfers, errata mitigations: {', '.join(st.mitigations) or 'none'})"), figures


STAGE_FUNCS = {
    "reset": stage_reset, "identity": stage_identity, "csr_bus": stage_csr_bus, "memories": stage_memories,
    "command_path": stage_command_path, "engine_smoke": stage_engine_smoke, "errata": stage_errata,
    "kernels": stage_kernels, "performance": stage_performance,
}


# A chip that answers wrong, hangs or never finishes is a failure; any other exception is a
# fault of the harness itself (a bug in a stage, a broken simulator) and is reported as an error.
CHIP_FAILURES = (DeviceError, DeviceTimeout, BusTimeout)


async def bringup_job(dev, emit, selected: list[str], seed: int, faults: list[str],
                      built_revision: str | None = None, watchdog_cycles: int = 1_000_000,
                      fault_code: int = 0, stop_at_first_failure: bool = False) -> dict:
    """Run the simulator-side stages in order; ``selected`` names the stages to run.

    ``fault_code`` is a fault descriptor (rtl/faults.py) for a campaign build's ``fault_sel``
    port, set before a fresh reset; ``stop_at_first_failure`` skips the rest once a stage fails
    (a campaign only needs the first stage that sees the fault)."""
    dev.watchdog_cycles = watchdog_cycles
    if fault_code:
        dev.tb.dut.fault_sel.value = fault_code
        await dev.tb.reset()
    ctx = Ctx(dev, seed, dev.config, faults, built_revision)
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
                except CHIP_FAILURES as e:  # a watchdog, a hung bus, a chip error: with the dump
                    rec.update(status="failed", details=f"{type(e).__name__}: {e}",
                               figures={"traceback": traceback.format_exc(limit=6)})
                    await _recover(dev)
                except Exception as e:  # noqa: BLE001 - the harness broke, not the chip
                    rec.update(status="error", details=f"harness error: {type(e).__name__}: {e}",
                               figures={"traceback": traceback.format_exc(limit=8)})
                    await _recover(dev)
                rec["duration_s"] = round(time.perf_counter() - t0, 3)
        status[stage.name] = rec["status"]
        emit(rec)
    return {"stages": status}


async def _recover(dev) -> None:
    """After a crashed stage: soft-reset so independent stages get a working chip."""
    try:
        await dev.soft_reset()
    except Exception:  # noqa: BLE001 - the stage's own failure is already recorded
        pass
