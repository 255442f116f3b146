"""cocotb tests of the chip's AXI master port against cocotbext-axi's AxiRam (driven by
tests/test_axi_ram.py, on a build with ``Variant(external_axi=True)``).

The board's DRAM model (rtl/dram.py) was written together with the DMA that talks to it, so the
two could share a misreading of AXI. Here an independent slave serves the port instead:
``cocotbext.axi.AxiRam`` holds the bytes and asserts on bursts that cross 4 KiB, on a wrong
``wlast`` and on beats wider than the bus. It does not check alignment or strobes, so
:class:`AxiMonitor` (this file) watches every AW/AR handshake and W beat for the rest of the
subset the chip promises (rtl/axi.py): bus-aligned addresses, full-width INCR beats, all strobes
set, ``wlast`` on beat ``awlen`` exactly, at most 16 beats, no 4 KiB crossing, and bursts that
cover each row's bytes once, in order. A Python coroutine per clock is fine in this small test;
the DRAM used everywhere else stays RTL.

Expected values are the bytes this file wrote (numpy), never what the chip or AxiRam report:
an SRAM word is its bytes in DRAM little endian (bus beat 0 holds the low bits).
Random data comes from FIRSTLIGHT_SEED.
"""

from __future__ import annotations

import logging
import os
import traceback
from collections import deque
from dataclasses import dataclass

import cocotb
import numpy as np
from cocotb.triggers import RisingEdge
from cocotbext.axi import AxiBus, AxiRam

from cosim.device import Device
from cosim.testbench import Testbench
from rtl import isa
from rtl.board import MAX_BURST_BEATS, PAGE_BYTES
from rtl.isa import DmaQueue
from rtl.memories import Region
from rtl.revisions import Defect, revision

SEED = int(os.environ.get("FIRSTLIGHT_SEED", "1"))
INCR = 1  # AXI AxBURST encoding (the AXI specification, not rtl/axi.py)
RAM_BYTES = 1 << 24  # the largest DRAM rtl/board.py allows; the chip's own DRAM0 says what it uses


def rerun(name: str) -> str:
    return (f"seed {SEED}; rerun: FIRSTLIGHT_SEED={SEED} .venv/bin/python -m pytest tests/test_axi_ram.py "
            f"-k '{name}'")


def rng_for(name: str) -> np.random.Generator:
    return np.random.default_rng([SEED, sum(name.encode())])


def _hi(sig) -> bool:
    return str(sig.value) == "1"  # X/Z are not a handshake


@dataclass
class Burst:
    kind: str  # "AR" or "AW"
    addr: int
    beats: int
    size: int
    burst: int
    cycle: int
    seen: int = 0  # W beats matched so far (AW only)


def burst_problems(b: Burst, bb: int, dram_bytes: int) -> list[str]:
    """What in one AR/AW handshake breaks the chip's AXI subset (rtl/axi.py, from the AXI spec)."""
    out = []
    what = f"{b.kind} burst at {b.addr:#x} ({b.beats} beats, cycle {b.cycle})"
    if b.addr % bb:
        out.append(f"{what}: address not aligned to the {bb}-byte bus")
    if b.size != bb.bit_length() - 1:
        out.append(f"{what}: size {b.size} is not log2({bb}) (full-width beats)")
    if b.burst != INCR:
        out.append(f"{what}: burst type {b.burst} is not INCR ({INCR})")
    if b.beats > MAX_BURST_BEATS:
        out.append(f"{what}: longer than {MAX_BURST_BEATS} beats")
    end = b.addr + b.beats * bb
    if b.addr // PAGE_BYTES != (end - 1) // PAGE_BYTES:
        out.append(f"{what}: crosses the 4 KiB page boundary at {(b.addr // PAGE_BYTES + 1) * PAGE_BYTES:#x}")
    if end > dram_bytes:
        out.append(f"{what}: ends at {end:#x}, past the {dram_bytes:#x}-byte DRAM")
    return out


class WChecker:
    """Pairs W beats with AW bursts in order (a beat may come before its address) and checks
    the strobes (all lanes) and ``wlast`` (on beat ``awlen`` exactly, nowhere else)."""

    def __init__(self, bb: int):
        self.bb = bb
        self.problems: list[str] = []
        self._open: deque[Burst] = deque()
        self._pending: deque[tuple[int, bool, int]] = deque()

    def address(self, b: Burst) -> None:
        self._open.append(b)
        self._match()

    def beat(self, strb: int, last: bool, cycle: int) -> None:
        self._pending.append((strb, last, cycle))
        self._match()

    def _match(self) -> None:
        full = (1 << self.bb) - 1
        while self._open and self._pending:
            b = self._open[0]
            strb, last, cycle = self._pending.popleft()
            i = b.seen
            b.seen += 1
            if strb != full:
                self.problems.append(f"W beat {i} of the AW burst at {b.addr:#x} (cycle {cycle}): wstrb "
                                     f"{strb:#x}, not all {self.bb} lanes")
            if last != (i == b.beats - 1):
                self.problems.append(f"W beat {i} of the {b.beats}-beat AW burst at {b.addr:#x} (cycle {cycle}): "
                                     f"wlast={int(last)}")
            if b.seen == b.beats:
                self._open.popleft()

    def loose_ends(self) -> list[str]:
        """AW bursts still short of W beats, W beats without an AW (ask once the chip is idle)."""
        out = [f"AW burst at {b.addr:#x} got {b.seen} of {b.beats} W beats" for b in self._open]
        if self._pending:
            out.append(f"{len(self._pending)} W beats without an AW burst")
        return out


class AxiMonitor:
    """Records every AR/AW handshake and W beat of the port, and what in them breaks the subset.

    Samples at each rising clock edge, like the slave (a handshake is valid & ready there).
    Problems are collected, not raised, so a test can look at them after AxiRam has spoken.
    """

    def __init__(self, dut, bus_bytes: int, dram_bytes: int):
        self.dut, self.bb, self.dram_bytes = dut, bus_bytes, dram_bytes
        self.ar: list[Burst] = []
        self.aw: list[Burst] = []
        self.w_beats = 0
        self._addr_problems: list[str] = []
        self._w = WChecker(bus_bytes)
        self._cycle = 0
        self._task = cocotb.start_soon(self._run())

    @property
    def violations(self) -> list[str]:
        return self._addr_problems + self._w.problems

    def loose_ends(self) -> list[str]:
        return self._w.loose_ends()

    async def _run(self) -> None:
        d = self.dut
        edge = RisingEdge(d.clk)
        while True:
            await edge
            self._cycle += 1
            if _hi(d.axi_arvalid) and _hi(d.axi_arready):
                self._address("AR", d.axi_araddr, d.axi_arlen, d.axi_arsize, d.axi_arburst)
            if _hi(d.axi_awvalid) and _hi(d.axi_awready):
                self._w.address(self._address("AW", d.axi_awaddr, d.axi_awlen, d.axi_awsize, d.axi_awburst))
            if _hi(d.axi_wvalid) and _hi(d.axi_wready):
                self.w_beats += 1
                self._w.beat(int(d.axi_wstrb.value), _hi(d.axi_wlast), self._cycle)

    def _address(self, kind, addr, length, size, burst) -> Burst:
        b = Burst(kind, int(addr.value), int(length.value) + 1, int(size.value), int(burst.value), self._cycle)
        (self.ar if kind == "AR" else self.aw).append(b)
        self._addr_problems += burst_problems(b, self.bb, self.dram_bytes)
        return b


def coverage_errors(bursts: list[Burst], rows: list[tuple[int, int]], bb: int) -> list[str]:
    """Bursts must cover the rows' bytes ``(addr, nbytes)`` exactly once, in order, none spanning
    two rows (the DMA's contract, rtl/dma.py)."""
    errs = []
    todo = deque(rows)
    pos = None
    for b in bursts:
        if pos is None:
            if not todo:
                errs.append(f"extra {b.kind} burst at {b.addr:#x} ({b.beats} beats) after the last row")
                continue
            pos, end = todo[0][0], todo[0][0] + todo[0][1]
        if b.addr != pos or b.addr + b.beats * bb > end:
            errs.append(f"{b.kind} burst [{b.addr:#x}, {b.addr + b.beats * bb:#x}) where the next bytes are "
                        f"[{pos:#x}, {end:#x})")
            return errs
        pos = b.addr + b.beats * bb
        if pos == end:
            todo.popleft()
            pos = None
    if pos is not None or todo:
        errs.append(f"rows not fetched to the end: next byte {pos if pos is not None else todo[0][0]:#x}, "
                    f"{len(todo)} rows open")
    return errs


async def open_with_ram(dut) -> tuple[Device, AxiRam, AxiMonitor]:
    """Reset held, AxiRam and the monitor attached, then the chip reset and opened.

    The RAM is created in the time step that asserts reset, before any clock edge: its sinks
    and sources drive the ready/valid inputs from then on (X there breaks Icarus), and it starts
    serving on the falling edge of reset."""
    logging.getLogger("cocotb.fl_tb.axi").setLevel(logging.WARNING)  # one INFO line per burst
    tb = Testbench(dut, clock=os.environ.get("FIRSTLIGHT_CLOCK", "hdl"))
    await tb.start()  # rst = 1 now
    ram = AxiRam(AxiBus.from_prefix(dut, "axi"), dut.clk, dut.rst, size=RAM_BYTES)
    dev = await Device.open(tb)
    bb, dram_bytes = dev.board.bus_bytes, dev.board.dram_bytes
    assert ram.read_if.byte_lanes == bb, (f"the testbench's AXI data bus is {ram.read_if.byte_lanes} bytes, "
                                          f"DRAM0 says {bb}")
    assert dram_bytes <= RAM_BYTES
    return dev, ram, AxiMonitor(dut, bb, dram_bytes)


def _rows_cross_pages(dram0: int, dstride: int, rows: int, nbytes: int) -> bool:
    return all((dram0 + r * dstride) // PAGE_BYTES != (dram0 + r * dstride + nbytes - 1) // PAGE_BYTES
               for r in range(rows))


def straddling_rows(rng, page: int, rows: int, nbytes: int, bb: int) -> tuple[int, int]:
    """(first row's DRAM byte, DRAM stride): every row straddles a 4 KiB page boundary; addresses
    and stride are bus-aligned only (not word-aligned)."""
    for _ in range(1000):
        off = bb * int(rng.integers(1, nbytes // bb))  # bytes of row 0 before the boundary
        dstride = PAGE_BYTES + bb * int(rng.integers(-3, 4))
        dram0 = page * PAGE_BYTES - off
        if _rows_cross_pages(dram0, dstride, rows, nbytes):
            return dram0, dstride
    raise AssertionError("no straddling layout found (test bug)")


def word_of(raw: np.ndarray, at: int, wb: int) -> int:
    return int.from_bytes(raw[at:at + wb].tobytes(), "little")


def random_words(rng, n: int, wb: int) -> list[int]:
    return [int.from_bytes(rng.bytes(wb), "little") for _ in range(n)]


def finish_checks(mon: AxiMonitor, name: str) -> None:
    problems = mon.violations + mon.loose_ends()
    assert not problems, f"{len(problems)} AXI protocol problems, first {problems[:6]} ({rerun(name)})"


@cocotb.test()
async def dma_loads_match_axi_ram(dut):
    """2D loads into A, B, ACC, SA and SB, every row across a page and (A, B, ACC) several
    16-beat bursts long; every SRAM word checked, the words between rows untouched."""
    name = "dma_loads_match_axi_ram"
    dev, ram, mon = await open_with_ram(dut)
    rng = rng_for(name)
    bb, dram_bytes = dev.board.bus_bytes, dev.board.dram_bytes
    src = rng.integers(0, 256, size=dram_bytes, dtype=np.uint8)
    ram.write(0, src.tobytes())

    shapes = {Region.A: (33, 64, 3), Region.B: (33, 64, 3), Region.ACC: (9, 24, 3),  # words lo, hi, rows
              Region.SA: (2, 4, 2), Region.SB: (2, 4, 2)}
    plan, stream, rows_bytes, before = [], [], [], {}
    for i, (region, (lo, hi, rows)) in enumerate(shapes.items()):
        wb, depth = dev.mem_width(region) // 8, dev.mem_depth(region)
        words = int(rng.integers(lo, hi + 1))
        slack = (depth - rows * words) // max(1, rows - 1)  # spare words between rows
        sstride = words + int(rng.integers(0, min(4, slack) + 1))
        span = (rows - 1) * sstride + words
        assert span <= depth, "test bug: rows do not fit"
        sram0 = int(rng.integers(0, depth - span + 1))
        page = 16 + 8 * i + int(rng.integers(0, 4))
        dram0, dstride = straddling_rows(rng, page, rows, words * wb, bb)
        plan.append((region, wb, words, rows, sram0, sstride, dram0, dstride))
        rows_bytes += [(dram0 + r * dstride, words * wb) for r in range(rows)]
        before[region] = random_words(rng, depth, wb)  # what the DMA must leave alone
        dev.load_words(region, 0, before[region])
        stream += [isa.dma_stride(DmaQueue.LOAD, sram=sstride, dram=dstride),
                   isa.dma_load(region, sram=sram0, dram=dram0, words=words, rows=rows, tag=i)]
    dev.watchdog_cycles = 200_000
    await dev.run(stream)
    await dev.check_no_error()

    bad = []
    for region, wb, words, rows, sram0, sstride, dram0, dstride in plan:
        want = list(before[region])
        for r in range(rows):
            for w in range(words):
                want[sram0 + r * sstride + w] = word_of(src, dram0 + r * dstride + w * wb, wb)
        got = dev.read_words(region, 0, len(want))
        bad += [f"{region.name}[{a}] = {g:#x}, expected {e:#x}" for a, (g, e) in enumerate(zip(got, want)) if g != e]
    assert not bad, (f"{len(bad)} SRAM words differ from the bytes in AxiRam, first {bad[:4]}; plan "
                     f"(region, word bytes, words, rows, sram, sram stride, dram, dram stride): {plan} ({rerun(name)})")
    finish_checks(mon, name)
    assert not mon.aw, f"loads wrote to DRAM: {mon.aw[:3]} ({rerun(name)})"
    errs = coverage_errors(mon.ar, rows_bytes, bb)
    assert not errs, f"AR bursts vs the rows: {errs} ({rerun(name)})"
    assert any(b.beats == MAX_BURST_BEATS for b in mon.ar), "no full 16-beat burst was issued (test too small?)"
    assert ram.read(0, dram_bytes) == src.tobytes(), "a load changed AxiRam"


@cocotb.test()
async def dma_stores_match_axi_ram(dut):
    """2D stores from ACC, every row across a page; the whole DRAM compared byte for byte (the
    rows hold the ACC words, everything else what was there before)."""
    name = "dma_stores_match_axi_ram"
    dev, ram, mon = await open_with_ram(dut)
    rng = rng_for(name)
    bb, dram_bytes = dev.board.bus_bytes, dev.board.dram_bytes
    wb, depth = dev.mem_width(Region.ACC) // 8, dev.mem_depth(Region.ACC)
    acc = random_words(rng, depth, wb)
    dev.load_words(Region.ACC, 0, acc)
    background = rng.integers(0, 256, size=dram_bytes, dtype=np.uint8)
    ram.write(0, background.tobytes())

    want = background.copy()
    stream, plan, rows_bytes = [], [], []
    for i, rows in enumerate((3, 2)):
        words = int(rng.integers(9, 25))
        sstride = words + int(rng.integers(0, 6))
        sram0 = int(rng.integers(0, depth - ((rows - 1) * sstride + words) + 1))
        dram0, dstride = straddling_rows(rng, 40 + 8 * i + int(rng.integers(0, 4)), rows, words * wb, bb)
        plan.append((words, rows, sram0, sstride, dram0, dstride))
        for r in range(rows):
            a = dram0 + r * dstride
            rows_bytes.append((a, words * wb))
            row = b"".join(acc[sram0 + r * sstride + w].to_bytes(wb, "little") for w in range(words))
            want[a:a + len(row)] = np.frombuffer(row, np.uint8)
        stream += [isa.dma_stride(DmaQueue.STORE, sram=sstride, dram=dstride),
                   isa.dma_store(sram=sram0, dram=dram0, words=words, rows=rows, tag=i)]
    dev.watchdog_cycles = 200_000
    await dev.run(stream)
    await dev.check_no_error()

    got = np.frombuffer(ram.read(0, dram_bytes), np.uint8)
    diff = np.flatnonzero(got != want)
    assert not len(diff), (f"{len(diff)} DRAM bytes differ, first at {diff[0]:#x}: got {got[diff[0]]:#04x}, expected "
                           f"{want[diff[0]]:#04x}; plan (words, rows, sram, sram stride, dram, dram stride): {plan} "
                           f"({rerun(name)})")
    finish_checks(mon, name)
    assert not mon.ar, f"stores read DRAM: {mon.ar[:3]} ({rerun(name)})"
    errs = coverage_errors(mon.aw, rows_bytes, bb)
    assert not errs, f"AW bursts vs the rows: {errs} ({rerun(name)})"
    assert mon.w_beats == sum(n for _, n in rows_bytes) // bb, f"{mon.w_beats} W beats for {rows_bytes}"
    assert any(b.beats == MAX_BURST_BEATS for b in mon.aw), "no full 16-beat burst was issued (test too small?)"


@cocotb.test()
async def single_row_load_across_a_page(dut):
    """One 16-word row of A starting 8 bytes before a page boundary.

    On a revision with Defect.DMA_BURST_CROSSES_PAGE the chip issues a burst across the page and
    AxiRam (code we did not write) must reject it -- its read process dies on its 4 KiB assertion
    -- as must the monitor; on any other revision the same load must complete, split at the page,
    with the right bytes (the control: the test tells the two apart)."""
    name = "single_row_load_across_a_page"
    dev, ram, mon = await open_with_ram(dut)
    rng = rng_for(name)
    bb, dram_bytes = dev.board.bus_bytes, dev.board.dram_bytes
    defective = Defect.DMA_BURST_CROSSES_PAGE in revision(dev.revision).defects
    reader = ram.read_if._process_read_cr  # cocotbext-axi 0.1.28 (pinned): the read process, started by reset
    assert reader is not None, "AxiRam's read process did not start at reset"

    async def watch():
        # Awaiting the process marks its failure as handled here, so AxiRam's assertion is a
        # result this test inspects instead of ending the test (cocotb's task rules).
        await reader.complete

    cocotb.start_soon(watch())
    words = 16
    wb = dev.mem_width(Region.A) // 8
    page = int(rng.integers(1, dram_bytes // PAGE_BYTES))
    dram0 = page * PAGE_BYTES - 8
    src = rng.integers(0, 256, size=words * wb, dtype=np.uint8)
    ram.write(dram0, src.tobytes())
    dev.load_words(Region.A, 0, [0] * words)
    await dev.submit([isa.dma_load(Region.A, sram=0, dram=dram0, words=words)])
    idle = await dev.tb.wait_signal_high(dut.idle, 2_000)  # ~100 cycles on a good chip
    boundary = f"crosses the 4 KiB page boundary at {page * PAGE_BYTES:#x}"
    if defective:
        assert reader.done(), (f"revision {dev.revision} has {Defect.DMA_BURST_CROSSES_PAGE.name} but AxiRam's read "
                               f"process accepted every burst: {mon.ar} ({rerun(name)})")
        exc = reader.exception()
        assert isinstance(exc, AssertionError), f"AxiRam's read process ended with {exc!r}, not its assertion"
        where = traceback.extract_tb(exc.__traceback__)[-1]
        assert where.filename.replace(os.sep, "/").endswith("cocotbext/axi/axi_slave.py") and "0x1000" in where.line, (
            f"AxiRam failed elsewhere: {where.filename}:{where.lineno} {where.line!r}")
        assert any(boundary in v for v in mon.violations), (f"the monitor missed the crossing: {mon.violations}, "
                                                            f"bursts {mon.ar}")
        dut._log.info("AxiRam rejected the burst at %s:%d (%s); monitor: %s", where.filename, where.lineno,
                      where.line, mon.violations)
        return
    assert idle, f"the load did not finish; AR bursts {mon.ar}; AxiRam read process done={reader.done()}"
    await dev.check_no_error()
    got = dev.read_words(Region.A, 0, words)
    want = [word_of(src, w * wb, wb) for w in range(words)]
    assert got == want, f"A[0:{words}] = {got}, expected {want} ({rerun(name)})"
    finish_checks(mon, name)
    errs = coverage_errors(mon.ar, [(dram0, words * wb)], bb)
    assert not errs, f"AR bursts vs the row: {errs} ({rerun(name)})"
    assert len(mon.ar) >= 2, f"one burst {mon.ar} cannot cover a row across a page"
    assert not reader.done(), "AxiRam's read process ended"
