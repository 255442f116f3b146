"""The Device API that kernels drive: registers, memories, command streams, completion.

Runs inside the simulator process (under cocotb). Kernels write operands into the SRAMs
through simulator handles (the backdoor: no simulated time, a few microseconds of wall time per
word), push their whole command stream into the command ring, ring the doorbell once and then
await completion: the simulator runs free until the chip raises ``idle`` or the watchdog's
cycle budget runs out.
"""

from __future__ import annotations

import time
from collections import deque
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterable, Iterator, Protocol, Sequence

import numpy as np

from rtl.board import BoardConfig
from rtl.config import ChipConfig
from rtl.csr_map import ID_MAGIC, PERF_COUNTERS, REG, SEMAPHORES, UNITS_THAT_WAIT, register
from rtl.dram import DRAM_INSTANCE, ROW_BYTES
from rtl.dram_array import ARRAY_VAR
from rtl.isa import ErrCode, Opcode, feed_cycles, unpack_command
from rtl.memories import MEMORIES, Region, memory
from rtl.revisions import revision_name

from .buffers import Buffer, DramAllocator
from .testbench import Testbench
from .vpi_arrays import VpiArrayError, VpiArrays, open_vpi_arrays

__all__ = ["Device", "KernelDevice", "SubmitFilter", "DeviceTimeout", "DeviceError", "PerfSnapshot"]


class DeviceError(RuntimeError):
    """The chip reported an error (ERR != 0) where none was expected."""


class DeviceTimeout(RuntimeError):
    """The chip did not finish within its cycle budget. The message carries a register dump."""

    def __init__(self, message: str, dump: dict):
        super().__init__(message)
        self.dump = dump


@dataclass(frozen=True)
class PerfSnapshot:
    counters: dict[str, int]

    def __sub__(self, other: "PerfSnapshot") -> dict[str, int]:
        return {k: self.counters[k] - other.counters[k] for k in self.counters}


@dataclass
class HostTiming:
    """Wall time spent inside awaits that let the simulator run (the rest is Python)."""

    sim_s: float = 0.0


class SubmitFilter(Protocol):
    """What software installs on :meth:`Device.set_submit_filter` (e.g. errata stream passes)."""

    def __call__(self, commands: list[int]) -> list[int]: ...

    def chip_idle(self) -> None:
        """The chip was seen idle: nothing queued can still be in flight."""

    def chip_reset(self) -> None:
        """The chip was soft-reset: as ``chip_idle``, and the state a reset clears (the DMA
        queues' strides) is back at its reset value."""


class SubmitHook:
    """The seam every Device has for software that knows the chip's errata (workarounds.attach):
    one filter every submitted stream goes through, suspended for raw streams, told when the chip
    was seen idle or reset. The RTL's Device and the interpreter's (interp/device.py) share it."""

    _filter: SubmitFilter | None = None
    _filter_suspended = 0

    def set_submit_filter(self, flt: SubmitFilter | None) -> None:
        """Every stream :meth:`submit` queues goes through ``flt`` first (None: none)."""
        self._filter = flt

    @contextmanager
    def submit_filter_suspended(self) -> Iterator[None]:
        """Submit raw streams inside this block (reproducers show the bug, not its mitigation)."""
        self._filter_suspended += 1
        try:
            yield
        finally:
            self._filter_suspended -= 1

    def filtered(self, commands: list[int]) -> list[int]:
        """``commands`` as the installed filter makes them (unchanged with none, or suspended)."""
        if self._filter is not None and not self._filter_suspended:
            return self._filter(commands)
        return commands

    def chip_seen_idle(self) -> None:
        if self._filter is not None:
            self._filter.chip_idle()

    def chip_was_reset(self) -> None:
        if self._filter is not None:
            self._filter.chip_reset()


class KernelDevice(Protocol):
    """The device surface kernels use (``Device`` implements it; a kernel needs nothing else)."""

    config: ChipConfig
    timing: HostTiming

    @property
    def revision(self) -> str: ...

    async def read_csr(self, reg: str | int) -> int: ...
    async def read_perf(self) -> "PerfSnapshot": ...
    def load_words(self, region: int, start: int, words: Iterable[int]) -> int: ...
    def read_words(self, region: int, start: int, count: int) -> list[int]: ...
    async def submit(self, commands: Sequence[int], budget_cycles: int | None = None) -> None: ...
    def now_cycles(self) -> int: ...
    async def wait_idle(self, budget_cycles: int | None = None) -> None: ...
    def default_budget(self) -> int: ...
    async def check_no_error(self) -> None: ...


class _Backdoor:
    """Bulk access to one SRAM (or the DRAM model's array) from the testbench.

    On Verilator a range of words is one whole-array VPI call (:mod:`cosim.vpi_arrays`): the
    words travel as packed little-endian bytes. Elsewhere (Icarus) it goes word by word through
    the GPI handles underneath cocotb's (cocotb's ``handle.value`` costs ~1.8 us per word in type
    checks, LogicArray conversion and write scheduling; the GPI handle ~0.3 us). Backdoor access
    only happens while the chip is idle and the testbench sits at a falling clock edge, so an
    immediate deposit is safe on both simulators; tests check every word against the front-door
    window.
    """

    def __init__(self, array_handle, width: int, depth: int, tap=None, vpi: VpiArrays | None = None):
        from cocotb.handle import _GPISetAction

        self._array = array_handle
        self.width = width
        self.depth = depth
        self.word_bytes = (width + 7) // 8
        if vpi is not None and width % 8:  # the raw values are whole bytes: bits above the width
            raise VpiArrayError(f"{array_handle._path}: {width}-bit words are not whole bytes, which the "
                                "whole-array backdoor moves")
        self._raw: list | None = None
        self._deposit = _GPISetAction.DEPOSIT.value
        self._tap = tap  # tap(start, words): a recorded run notes every write (cosim/stimulus.py)
        # Every write on Verilator takes the array call: it stores at once, while cocotb's GPI
        # writes there are inertial (applied when the callback returns), so mixing the two on one
        # array could apply writes out of order. Reads may mix: a GPI read sees what was stored.
        self._vpi = vpi
        self._vpi_handle: int | None = None

    # ---- whole ranges through the array calls (Verilator) -----------------------------------
    def _array_handle(self) -> int:
        if self._vpi_handle is None:
            left, right = self._array.left, self._array.right
            if min(left, right) != 0 or abs(left - right) + 1 != self.depth:
                raise VpiArrayError(f"{self._array._path} is [{left}:{right}] in the simulator, not the {self.depth} "
                                    "words from 0 this chip's configuration gives it")
            # Verilator's whole-array calls walk a descending array (``reg [W:0] m [D-1:0]``, as
            # Yosys writes every Amaranth memory) from storage slot ``left - index`` downwards,
            # while its storage (and every per-word handle) keeps word ``i`` in slot ``i - low``:
            # such a range is passed from its top word, ``left - (start + count - 1)``, with the
            # words in reverse. An ascending array (the DRAM model's) is passed as it is.
            self._descending = left > right
            self._vpi_handle = self._vpi.handle(self._array._path)
            self._probe_order()
        return self._vpi_handle

    def _put_range(self, start: int, raw: bytes) -> None:
        """Store packed words from ``start``. It only stores: the model sees the words at its next
        evaluation, the next clock edge (the memories' read ports are clocked)."""
        handle, count = self._array_handle(), len(raw) // self.word_bytes
        if self._descending:
            self._vpi.put(handle, self.depth - 1 - (start + count - 1), self._reversed(raw), count, self._array._path)
        else:
            self._vpi.put(handle, start, raw, count, self._array._path)

    def _get_range(self, start: int, count: int) -> bytes:
        handle = self._array_handle()
        if self._descending:
            raw = self._vpi.get(handle, self.depth - 1 - (start + count - 1), count, self.word_bytes,
                                self._array._path)
            return self._reversed(raw)
        return self._vpi.get(handle, start, count, self.word_bytes, self._array._path)

    def _reversed(self, raw: bytes) -> bytes:
        """The words of ``raw`` in reverse order (each word's bytes kept)."""
        return np.frombuffer(raw, f"V{self.word_bytes}")[::-1].tobytes()

    def _probe_order(self) -> None:
        """Check once per array that whole-array calls land where per-word handles see them (the
        reversal above works around a quirk of Verilator's, which a later version could fix): two
        words stored as a range, read back word by word and as a range, then the old words put
        back the same way. Only runs on a backdoor access, so while the chip is idle."""
        if self.depth < 2:
            return
        old = self.read_gpi(0, 2)
        probe = [0x5A5A5A5A5A5A5A5A & ((1 << self.width) - 1) or 1, 0xA5A5A5A5A5A5A5A5 & ((1 << self.width) - 1) or 2]
        self._put_range(0, self._to_bytes(probe))
        seen, got = self.read_gpi(0, 2), self._to_ints(self._get_range(0, 2))
        self._put_range(0, self._to_bytes(old))
        if seen != probe or got != probe:
            import cocotb

            raise VpiArrayError(f"{cocotb.SIM_NAME} {cocotb.SIM_VERSION}'s whole-array VPI calls do not walk "
                                f"{self._array._path} [{self._array.left}:{self._array.right}] the way "
                                f"cosim/device.py expects: stored words 0 and 1 as {[hex(w) for w in probe]}, "
                                f"per-word handles read {[hex(w) for w in seen]}, the array call {[hex(w) for w in got]}")

    # ---- word by word through the GPI (Icarus; short reads) ----------------------------------
    def _handles(self, start: int, count: int) -> list:
        """Handles of words [start, start + count), looked up once each (a DRAM has 2**18 words:
        opening them all up front would cost seconds)."""
        if self._raw is None:
            self._raw = [None] * self.depth
        raw = self._raw
        # The GPI's own lookup, not cocotb's indexing: that builds (and keeps) a Python handle
        # object per word, about half the cost of opening the 12,288 DRAM rows a 256^3 GEMM uses.
        by_index = self._array._handle.get_handle_by_index
        for i in range(start, start + count):
            if raw[i] is None:
                h = by_index(i)
                if not h:
                    raise IndexError(f"{self._array._path} has no word {i}")
                raw[i] = h
        return raw

    def _write_gpi(self, start: int, words: Sequence[int]) -> None:
        raw = self._handles(start, len(words))
        dep = self._deposit
        if self.width <= 32:
            for i, w in enumerate(words):
                raw[start + i].set_signal_val_int(dep, int(w))
        else:
            fmt = f"0{self.width}b"
            mask = (1 << self.width) - 1
            for i, w in enumerate(words):
                raw[start + i].set_signal_val_binstr(dep, format(int(w) & mask, fmt))

    def read_gpi(self, start: int, count: int) -> list[int]:
        """Words [start, start + count) through per-word GPI handles."""
        raw = self._handles(start, count)
        out = []
        for i in range(start, start + count):
            bits = raw[i].get_signal_val_binstr()
            try:
                out.append(int(bits, 2))
            except ValueError:
                raise DeviceError(f"SRAM word {i} holds non-binary bits {bits!r} (X or Z)") from None
        return out

    # ---- the backdoor's interface -------------------------------------------------------------
    def _span(self, start: int, count: int) -> None:
        if start < 0 or count < 0 or start + count > self.depth:
            raise IndexError(f"words [{start}, {start + count}) are outside {self._array._path} (depth {self.depth})")

    def _to_bytes(self, words: Sequence[int]) -> bytes:
        nb, mask = self.word_bytes, (1 << self.width) - 1
        if self.width == 8 * nb:  # Python ints that fit: no masking needed (the ring's commands)
            try:
                return b"".join([w.to_bytes(nb, "little") for w in words])
            except (AttributeError, OverflowError):  # numpy integers, negatives, too wide: masked
                pass
        return b"".join((int(w) & mask).to_bytes(nb, "little") for w in words)

    def _to_ints(self, raw: bytes) -> list[int]:
        nb = self.word_bytes
        return [int.from_bytes(raw[i:i + nb], "little") for i in range(0, len(raw), nb)]

    def write(self, start: int, words: Sequence[int]) -> None:
        self._span(start, len(words))
        if self._vpi is not None:
            self._put_range(start, self._to_bytes(words))
        else:
            self._write_gpi(start, words)
        if self._tap is not None:  # after the write: a recorded run holds only writes that happened
            self._tap(start, words)

    def write_bytes(self, start: int, raw: bytes) -> None:
        """Words from ``start`` given as packed little-endian bytes, ``word_bytes`` per word."""
        count = len(raw) // self.word_bytes
        if count * self.word_bytes != len(raw):
            raise ValueError(f"{len(raw)} bytes are not whole {self.word_bytes}-byte words")
        self._span(start, count)
        if self._vpi is not None:
            self._put_range(start, raw)
        else:
            self._write_gpi(start, self._to_ints(raw))
        if self._tap is not None:
            self._tap(start, self._to_ints(raw))

    def read(self, start: int, count: int) -> list[int]:
        return self._to_ints(self.read_bytes(start, count)) if self._vpi is not None else self._read_checked(start, count)

    def _read_checked(self, start: int, count: int) -> list[int]:
        self._span(start, count)
        return self.read_gpi(start, count)

    def read_bytes(self, start: int, count: int) -> bytes:
        """Words [start, start + count) as packed little-endian bytes."""
        # Verilator sizes its raw-value buffer for a read in 4-byte units, rounded down: a range
        # under 4 bytes is read word by word
        if self._vpi is None or count * self.word_bytes < 4:
            return self._to_bytes(self._read_checked(start, count))
        self._span(start, count)
        return self._get_range(start, count)


class Device(SubmitHook):
    """An opened chip. Use ``dev = await Device.open(tb)``.

    Attributes
    ----------
    config : ChipConfig
        Discovered from the CAPS registers.
    revision : str
        From the REV register ("A0", ...), or ``"unknown(0x..)"``.

    Errata knowledge is not the device's business: software installs a submit filter
    (:meth:`set_submit_filter`) and hands kernels its constraints itself (``workarounds``).
    """

    HISTORY = 16  # commands kept for the watchdog's diagnosis

    def __init__(self, tb: Testbench):
        self.tb = tb
        self.timing = HostTiming()
        self._tail = 0
        self._ring_feed: list[int] = []  # per ring entry: feed_cycles of the command written there
        self.history: deque[int] = deque(maxlen=self.HISTORY)  # raw commands, decoded only for a dump
        self.config: ChipConfig | None = None
        self.board: BoardConfig | None = None  # the DRAM, from DRAM0/DRAM1
        self.dram: DramAllocator | None = None
        self._dram_mem: _Backdoor | None = None
        self._rev_code = 0
        self._mems: dict[int, _Backdoor] = {}
        # The submit filter (SubmitHook), installed by software that knows the chip's errata
        # (workarounds.attach); cosim itself knows none.
        self.watchdog_cycles = 1_000_000  # default budget of every wait for idle

    @classmethod
    async def open(cls, tb: Testbench, reset: bool = True, discover: bool = True,
                   config: ChipConfig | None = None, board: BoardConfig | None = None) -> "Device":
        """Reset (optionally) and open the chip.

        With ``discover`` the ID, REV, CAPS and TRACE_DEPTH registers are read and checked (the
        normal path).
        Without it (bring-up, where those registers are under test) the caller passes the
        ``config`` and ``board`` the chip was built with and runs its own identity checks.
        """
        dev = cls(tb)
        if reset:
            await dev._timed(tb.reset())
        if not discover:
            if config is None or board is None:
                raise ValueError("open(discover=False) needs the config and the board the chip was built with")
            dev.config, dev.board = config, board
            dev._attach_memories()
            return dev
        ident = await dev.read_csr("ID")
        if ident != ID_MAGIC:
            raise DeviceError(f"ID register reads 0x{ident:08x}, expected 0x{ID_MAGIC:08x}: not a firstlight chip or the bus is broken")
        await dev.read_revision()
        dev.config = ChipConfig.from_caps(await dev.read_csr("CAPS0"), await dev.read_csr("CAPS1"),
                                          await dev.read_csr("TRACE_DEPTH"))
        dev.board = BoardConfig.from_regs(await dev.read_csr("DRAM0"), await dev.read_csr("DRAM1"))
        dev._attach_memories()
        dev._tail = await dev.read_csr("CMDQ_TAIL")
        return dev

    def _attach_memories(self) -> None:
        chip, cfg, tb = self.tb.chip, self.config, self.tb
        rec = tb.recorder

        def tap(record, *args):  # every backdoor write, stamped with the testbench's time, for a replay
            return None if rec is None else (lambda start, words: record(tb.now_ns(), *args, start, words))

        import cocotb

        vpi = open_vpi_arrays(cocotb.SIM_NAME)  # None on Icarus: the GPI, word by word
        self._mems = {m.region: _Backdoor(getattr(chip, m.backdoor), m.width(cfg), m.depth(cfg),
                                          tap(rec and rec.sram, m.region), vpi)
                      for m in MEMORIES}
        b = self.board
        self.dram = DramAllocator(b.dram_bytes, b.bus_bytes)
        dram = getattr(self.tb.dut, "dram", None)  # absent when cocotb serves the AXI port itself
        self._dram_mem = (None if dram is None
                          else _Backdoor(getattr(getattr(dram, DRAM_INSTANCE), ARRAY_VAR), 8 * ROW_BYTES,
                                         b.dram_bytes // ROW_BYTES, tap(rec and rec.dram), vpi))

    # ---- DRAM: host memory, through the backdoor ------------------------------------------
    def _dram_range(self, addr: int, nbytes: int) -> None:
        if self._dram_mem is None:
            raise DeviceError("this build has no DRAM model on the board (its AXI port is served by the testbench)")
        bb = self.board.bus_bytes
        if addr < 0 or addr % bb or nbytes % bb or addr + nbytes > self.board.dram_bytes:
            raise IndexError(f"DRAM bytes [{addr:#x}, {addr + nbytes:#x}) are not whole {bb}-byte beats inside the "
                             f"{self.board.dram_bytes:,}-byte DRAM")

    def dram_write(self, addr: int | Buffer, data) -> int:
        """Write bytes (``bytes`` or any numpy array, as its raw little-endian bytes) into DRAM
        at byte ``addr`` (or a :class:`Buffer`'s start); returns the byte count. Only while the
        chip is idle, like every backdoor access."""
        addr = addr.addr if isinstance(addr, Buffer) else addr
        raw = np.frombuffer(data.tobytes() if isinstance(data, np.ndarray) else bytes(data), np.uint8)
        bb = self.board.bus_bytes
        n = len(raw)
        padded = -(-n // bb) * bb
        self._dram_range(addr, padded)
        first, end = addr // ROW_BYTES, -(-(addr + padded) // ROW_BYTES)
        rows = bytearray((end - first) * ROW_BYTES)
        off = addr - first * ROW_BYTES
        # the bytes around the range in its first and last rows are kept: only those rows are read
        if off:
            rows[:ROW_BYTES] = self._dram_mem.read_bytes(first, 1)
        if off + padded < len(rows) and (end - 1 > first or not off):
            rows[-ROW_BYTES:] = self._dram_mem.read_bytes(end - 1, 1)
        rows[off:off + n] = raw.tobytes()
        rows[off + n:off + padded] = bytes(padded - n)
        self._dram_mem.write_bytes(first, bytes(rows))
        return n

    def dram_read(self, addr: int | Buffer, nbytes: int | None = None) -> np.ndarray:
        """Read ``nbytes`` of DRAM (default: the whole buffer) as a uint8 array."""
        if isinstance(addr, Buffer):
            nbytes = addr.nbytes if nbytes is None else nbytes
            addr = addr.addr
        bb = self.board.bus_bytes
        self._dram_range(addr, -(-nbytes // bb) * bb)
        first, end = addr // ROW_BYTES, -(-(addr + nbytes) // ROW_BYTES)
        rows = np.frombuffer(self._dram_mem.read_bytes(first, end - first), np.uint8)
        off = addr - first * ROW_BYTES
        return rows[off:off + nbytes].copy()

    @property
    def revision(self) -> str:
        """From the REV register ("A0", ...), or ``"unknown(0x..)"``."""
        return revision_name(self._rev_code)

    @property
    def revision_code(self) -> int:
        return self._rev_code

    async def read_revision(self) -> int:
        """Read REV (again) and make it the device's revision; returns the raw code."""
        self._rev_code = await self.read_csr("REV")
        return self._rev_code

    async def _timed(self, awaitable):
        t0 = time.perf_counter()
        try:
            return await awaitable
        finally:
            self.timing.sim_s += time.perf_counter() - t0

    # ---- registers ---------------------------------------------------------------------------
    @staticmethod
    def _addr(reg: str | int) -> int:
        return reg if isinstance(reg, int) else register(reg).addr

    async def read_csr(self, reg: str | int) -> int:
        return await self._timed(self.tb.transfer(self._addr(reg)))

    async def write_csr(self, reg: str | int, value: int) -> None:
        await self._timed(self.tb.transfer(self._addr(reg), value, write=True))

    async def read_perf(self) -> PerfSnapshot:
        """Read every 64-bit perf counter (LO first: that latches HI)."""
        out = {}
        for name in PERF_COUNTERS:
            lo = await self.read_csr(f"{name}_LO")
            hi = await self.read_csr(f"{name}_HI")
            out[name] = (hi << 32) | lo
        return PerfSnapshot(out)

    # ---- memories: backdoor through simulator handles ------------------------------------
    def mem_depth(self, region: int) -> int:
        """Words in the SRAM of window ``region`` (rtl/memories.py)."""
        return memory(int(region)).depth(self.config)

    def mem_width(self, region: int) -> int:
        """Bits in one word of the SRAM of window ``region``."""
        return memory(int(region)).width(self.config)

    def _check_range(self, region: int, start: int, count: int) -> None:
        depth = self.mem_depth(region)
        if start < 0 or count < 0 or start + count > depth:
            name = memory(int(region)).name
            raise IndexError(f"words [{start}, {start + count}) are outside SRAM {name} (depth {depth})")

    def load_words(self, region: int, start: int, words: Iterable[int]) -> int:
        """Backdoor-write whole SRAM words starting at ``start``; returns the count written.

        Only call this while the chip is idle: the write bypasses the chip's ports.
        """
        words = list(words)
        self._check_range(region, start, len(words))
        self._mems[region].write(start, words)
        return len(words)

    def read_words(self, region: int, start: int, count: int) -> list[int]:
        """Backdoor-read whole SRAM words."""
        self._check_range(region, start, count)
        return self._mems[region].read(start, count)

    # ---- memories: front door through the MEM_ADDR/MEM_DATA window ------------------------
    async def window_seek(self, region: int, chunk: int) -> None:
        """Point the window at 32-bit ``chunk`` of the SRAM of ``region``."""
        await self.write_csr("MEM_ADDR", REG["MEM_ADDR"].pack(region=int(region), chunk=chunk))

    async def window_write(self, region: int, chunk: int, values: Sequence[int]) -> None:
        await self.window_seek(region, chunk)
        for v in values:
            await self.write_csr("MEM_DATA", v)

    async def window_read(self, region: int, chunk: int, count: int) -> list[int]:
        await self.window_seek(region, chunk)
        return [await self.read_csr("MEM_DATA") for _ in range(count)]

    # ---- command stream ---------------------------------------------------------------------
    async def submit(self, commands: Sequence[int], budget_cycles: int | None = None) -> None:
        """Write ``commands`` into the ring and ring the doorbell.

        A stream longer than the free part of the ring is streamed in while the chip runs: the
        host writes what fits behind the chip's CMDQ_HEAD, rings, and polls CMDQ_HEAD for room
        (the chip never drains between pieces, so DMA and compute keep overlapping). If the
        chip takes no new entry for ``budget_cycles``, the watchdog fires with a dump. Returns
        as soon as the last piece is queued: call :meth:`wait_idle` to wait for completion.
        """
        commands = self.filtered(list(commands))
        depth = self.config.cmdq_depth
        if len(self._ring_feed) != depth:
            self._ring_feed = [0] * depth
        min_feed = self.config.min_matmul_cycles
        budget = self.default_budget() if budget_cycles is None else budget_cycles
        head = None  # the chip's CMDQ_HEAD as last read
        i = 0
        since = self.now_cycles()
        rate = None  # ring entries the chip takes per cycle, as last measured
        while i < len(commands):
            want = min(len(commands) - i, max(1, depth // 2))
            free = depth - 1 - ((self._tail - head) % depth) if head is not None else 0
            if free < want:
                now = self.now_cycles()
                new_head = await self.read_csr("CMDQ_HEAD")
                if head is not None and new_head != head and now > since:
                    rate = ((new_head - head) % depth) / (now - since)
                if new_head != head:
                    head, since = new_head, now
                free = depth - 1 - ((self._tail - head) % depth)
                # Refill once a quarter of the ring is free even though the sleep aimed at half:
                # the rate it was estimated from is noisy, and each poll is a bus transfer and
                # three Python wake-ups.
                if free < min(want, max(1, depth // 4)):
                    if now - since > budget:
                        dump = await self.dump_state()
                        raise DeviceTimeout(f"watchdog: the chip took no command from the ring for {budget} cycles"
                                            "\n" + self.format_dump(dump), dump)
                    # sleep about as long as the chip needs to free `want` entries at its last rate
                    # (a poll or two per refill instead of a doubling series of reads), but never
                    # longer than half what the queued MATMULs guarantee the chip is busy: a
                    # stretch of quick commands after slow ones would drain the ring before the
                    # rate noticed (the ring once ran dry near the end of a 256^3 GEMM)
                    cycles = 64 if not rate else int((want - free) / rate)
                    guard = self._queued_feed_cycles(head) // 2
                    if guard:
                        cycles = min(cycles, guard)
                    await self._timed(self.tb.wait_cycles(min(max(cycles, 16), 1 << 16)))
                    continue
            chunk = commands[i:i + free]
            first = self._tail
            feeds = [feed_cycles(c, min_feed) for c in chunk]
            n1 = min(len(chunk), depth - first)
            self._ring_feed[first:first + n1] = feeds[:n1]
            self._ring_feed[:len(chunk) - n1] = feeds[n1:]
            self.load_words(Region.CMDQ, first, chunk[:n1])
            if n1 < len(chunk):
                self.load_words(Region.CMDQ, 0, chunk[n1:])
            self.history.extend(chunk[-self.HISTORY:])
            self._tail = (first + len(chunk)) % depth
            await self.write_csr("CMDQ_TAIL", self._tail)
            i += len(chunk)

    def _queued_feed_cycles(self, head: int) -> int:
        """Engine feed cycles of the MATMULs in the ring after the chip's head, but the first (it
        may be issuing now): the chip cannot drain the ring faster than that."""
        ring, tail = self._ring_feed, self._tail
        queued = ring[head:tail] if head <= tail else ring[head:] + ring[:tail]
        first = next((f for f in queued if f), 0)
        return sum(queued) - first

    async def run(self, commands: Sequence[int], budget_cycles: int | None = None) -> None:
        await self.submit(commands, budget_cycles)
        await self.wait_idle(budget_cycles)

    def read_pin(self, name: str) -> int:
        """An output pin of the chip (``idle``, ``irq``) as the board sees it now; X/Z read as -1."""
        text = str(getattr(self.tb.dut, name).value).lower()
        return int(text) if text in ("0", "1") else -1

    def now_cycles(self) -> int:
        """Clock cycles since the simulation started, from the testbench clock (independent of
        the chip's own CYCLES counter)."""
        return self.tb.now_cycles()

    async def wait_idle_polled(self, budget_cycles: int | None = None, poll_cycles: int = 64) -> None:
        """Wait for STATUS.idle by polling the register (not the idle pin), watchdog as usual."""
        budget = self.default_budget() if budget_cycles is None else budget_cycles
        idle = REG["STATUS"].field("idle")
        start = self.now_cycles()
        while not idle.get(await self.read_csr("STATUS")):
            if self.now_cycles() - start > budget:
                dump = await self.dump_state()
                raise DeviceTimeout(f"watchdog: STATUS.idle stayed 0 for {budget} cycles\n" + self.format_dump(dump),
                                    dump)
            await self.tb.wait_cycles(poll_cycles)
        self.chip_seen_idle()

    async def soft_reset(self) -> None:
        """CTRL.soft_reset (command path, engine, reduction unit) and clear ERR; memories keep
        their contents. The ring restarts at entry 0."""
        await self.write_csr("CTRL", REG["CTRL"].pack(soft_reset=1, clear_err=1))
        self._tail = 0
        self.chip_was_reset()

    def default_budget(self) -> int:
        return self.watchdog_cycles

    async def wait_idle(self, budget_cycles: int | None = None) -> None:
        """Wait for the chip to go idle; on watchdog expiry raise :class:`DeviceTimeout`."""
        budget = self.default_budget() if budget_cycles is None else budget_cycles
        ok = await self._timed(self.tb.wait_signal_high(self.tb.dut.idle, budget))
        if ok:
            self.chip_seen_idle()
        else:
            dump = await self.dump_state()
            waits = self.describe_waits(dump["registers"])
            raise DeviceTimeout(
                f"watchdog: the chip did not go idle within {budget} cycles"
                + (f"; when it expired {waits}" if waits else "") + "\n" + self.format_dump(dump), dump
            )

    async def dump_state(self) -> dict:
        names = ["STATUS", "ERR", "ERR_CMD0", "ERR_CMD1", "ERR_CMD2", "ERR_CMD3", "ERR_COUNT",
                 "DONE_COUNT", "CMDQ_HEAD", "CMDQ_TAIL", "WAITS",
                 *[f"SEM{2 * i}{2 * i + 1}" for i in range(SEMAPHORES // 2)]]
        regs = {}
        for n in names:
            try:
                regs[n] = await self.read_csr(n)
            except Exception as e:  # a dead bus must not hide the rest of the diagnosis
                regs[n] = f"unreadable: {e}"
        return {"registers": regs, "last_commands": [unpack_command(c) for c in self.history]}

    @staticmethod
    def format_dump(dump: dict) -> str:
        lines = []
        regs = dump["registers"]
        for n, v in regs.items():
            if isinstance(v, int):
                extra = ""
                if n == "STATUS":
                    extra = "  " + ", ".join(f"{f.name}={f.get(v)}" for f in REG["STATUS"].fields)
                elif n == "ERR":
                    try:
                        extra = f"  ({ErrCode(v).name})"
                    except ValueError:
                        extra = "  (unknown code)"
                elif n == "WAITS":
                    extra = "  " + (Device.describe_waits(regs) or "no unit waits on a semaphore")
                lines.append(f"  {n:<11} = 0x{v:08x}{extra}")
            else:
                lines.append(f"  {n:<11} = {v}")
        lines.append("  last commands queued (oldest first):")
        for f in dump["last_commands"]:
            try:
                op = Opcode(f["opcode"]).name
            except ValueError:
                op = f"0x{f['opcode']:02x}"
            lines.append(f"    {op:<7} " + " ".join(f"{k}={v}" for k, v in f.items() if k != "opcode"))
        return "\n".join(lines)

    @staticmethod
    def describe_waits(regs: dict) -> str:
        """'dma_in waits on semaphore 3 (count 0); ...' from a dump's WAITS and SEM registers."""
        waits = regs.get("WAITS")
        if not isinstance(waits, int):
            return ""
        parts = []
        for u in UNITS_THAT_WAIT:
            if REG["WAITS"].field(f"{u}_wait").get(waits):
                sem = REG["WAITS"].field(f"{u}_sem").get(waits)
                pair = regs.get(f"SEM{sem // 2 * 2}{sem // 2 * 2 + 1}")
                count = (pair >> (16 * (sem % 2))) & 0xFFFF if isinstance(pair, int) else "?"
                who = {"exec": "the command stream (its head command)", "dma_in": "the DMA load queue",
                       "dma_out": "the DMA store queue"}[u]
                parts.append(f"{who} waits on semaphore {sem} (count {count})")
        return "; ".join(parts)

    async def check_no_error(self) -> None:
        err = await self.read_csr("ERR")
        if err:
            dump = await self.dump_state()
            try:
                name = ErrCode(err).name
            except ValueError:
                name = "unknown"
            raise DeviceError(f"chip reports ERR={err} ({name})\n" + self.format_dump(dump))

