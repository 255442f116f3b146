"""The host-visible register map, declared once as data.

The RTL register file decodes these addresses and packs the fields, the software reads them by
name and unpacks them, and the bring-up checklist tests their reset values and access types
from this same table. Addresses are in 32-bit words on the host CSR bus.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

__all__ = ["Access", "Field", "Register", "REGISTERS", "REG", "REG_INDEX", "ID_MAGIC", "PERF_COUNTERS", "CSR_ADDR_BITS", "SEMAPHORES", "UNITS_THAT_WAIT",
           "register"]

ID_MAGIC = 0x464C4954  # "FLIT"
CSR_ADDR_BITS = 8


class Access(enum.Enum):
    """What a host access does to a register."""

    RO = "ro"  # writes are ignored
    RW = "rw"  # reads back what was written (strobe fields read as 0)
    W1C = "w1c"  # writing a 1 clears that bit
    WO = "wo"  # write-only strobes; reads return 0


@dataclass(frozen=True)
class Field:
    name: str
    lsb: int
    width: int
    doc: str = ""
    strobe: bool = False  # a write pulses it for one cycle; it reads back as 0

    @property
    def mask(self) -> int:
        return ((1 << self.width) - 1) << self.lsb

    def get(self, value: int) -> int:
        return (value >> self.lsb) & ((1 << self.width) - 1)

    def put(self, value: int) -> int:
        """``value`` shifted into place; raises if it does not fit the field."""
        v = int(value)
        if not 0 <= v < (1 << self.width):
            raise ValueError(f"field {self.name}={v} does not fit in {self.width} bits")
        return v << self.lsb


@dataclass(frozen=True)
class Register:
    """One 32-bit register.

    ``reset`` is the documented reset value, or None when it depends on the build (ID, REV,
    CAPS) or the register is a free-running counter. ``volatile`` registers change without a
    host write (counters, live state), so a read-after-write test cannot expect them stable.
    """

    name: str
    addr: int
    access: Access
    reset: int | None
    doc: str
    fields: tuple[Field, ...] = ()
    volatile: bool = False

    def field(self, name: str) -> Field:
        for f in self.fields:
            if f.name == name:
                return f
        raise KeyError(f"register {self.name} has no field {name!r}; it has {[f.name for f in self.fields]}")

    def pack(self, **values: int) -> int:
        """The register value with the named fields set (others 0); unknown names raise."""
        word = 0
        for name, v in values.items():
            word |= self.field(name).put(v)
        return word

    def unpack(self, value: int) -> dict[str, int]:
        return {f.name: f.get(value) for f in self.fields}


PERF_COUNTERS = ("CYCLES", "ENGINE_BUSY", "MACS", "REDUCE_BUSY", "STALLS",
                 # the memory system (docs/chip.md): DMA busy per direction, DRAM bytes, cycles with an
                 # AXI transaction outstanding, cycles each unit waited on a semaphore, and cycles where
                 # a DMA and the matrix engine were busy together
                 "DMA_IN_BUSY", "DMA_OUT_BUSY", "DRAM_RD_BYTES", "DRAM_WR_BYTES", "DRAM_BUSY",
                 "WAIT_EXEC", "WAIT_DMA_IN", "WAIT_DMA_OUT", "DMA_ENGINE_OVERLAP",
                 # the vector unit: cycles busy, and lanes written
                 "VEC_BUSY", "VEC_ELEMS")
_PERF_BEFORE_TRACE = 14  # counters declared before the trace block (their REG_INDEX predates it)
SEMAPHORES = 8  # counting semaphores of the command stream (rtl/isa.py SYNC)
UNITS_THAT_WAIT = ("exec", "dma_in", "dma_out")  # where a command waits on its semaphore

RO, RW, W1C = Access.RO, Access.RW, Access.W1C
_regs = [
    Register("ID", 0x00, RO, ID_MAGIC, "Constant magic 0x464C4954 ('FLIT')."),
    Register("REV", 0x01, RO, None, "Silicon revision code (A0=0xA0, A1=0xA1, B0=0xB0)."),
    Register(
        "CAPS0", 0x02, RO, None, "Array geometry.",
        (Field("rows", 0, 8), Field("cols", 8, 8), Field("lanes", 16, 8),
         Field("formats", 24, 4, "bit per Format: 0 INT8, 1 E4M3, 2 E5M2, 3 E2M1"),
         Field("vector", 28, 1, "the vector unit is built (VEC commands)")),
    ),
    Register(
        "CAPS1", 0x03, RO, None, "Memory sizes (log2 of words) and FIFO depth.",
        (Field("log2_operand_depth", 0, 8), Field("log2_acc_depth", 8, 8),
         Field("cmd_fifo_depth", 16, 8), Field("log2_cmdq_depth", 24, 8)),
    ),
    Register(
        "STATUS", 0x04, RO, 0x10, "Live state.",
        (Field("busy", 0, 1), Field("engine_busy", 1, 1), Field("reduce_busy", 2, 1),
         Field("err", 3, 1), Field("idle", 4, 1), Field("dma_in_busy", 5, 1), Field("dma_out_busy", 6, 1),
         Field("vector_busy", 7, 1),
         Field("fifo_level", 8, 9)),
        volatile=True,
    ),
    Register(
        "CTRL", 0x05, RW, 0x00, "Control. Strobe bits read back as 0.",
        (Field("soft_reset", 0, 1, "reset the command path, engine and reduction unit", strobe=True),
         Field("irq_en", 1, 1), Field("clear_err", 2, 1, strobe=True), Field("clear_perf", 3, 1, strobe=True),
         Field("load_counters", 4, 1, "load every event counter (both words of each perf counter, DONE_COUNT, "
               "ERR_COUNT) from SCRATCH: design for test, it sets counter bits that would otherwise take 2**b "
               "events to reach", strobe=True)),
    ),
    Register("ERR", 0x06, RO, 0x00, "First error code (ErrCode) since the last clear.", (Field("code", 0, 8),)),
    Register("ERR_CMD0", 0x07, RO, 0x00, "Word 0 of the command that caused ERR."),
    Register("ERR_CMD1", 0x08, RO, 0x00, "Word 1 of the command that caused ERR."),
    Register("ERR_CMD2", 0x09, RO, 0x00, "Word 2 of the command that caused ERR."),
    Register("ERR_CMD3", 0x0A, RO, 0x00, "Word 3 (sync and tag) of the command that caused ERR."),
    Register("ERR_COUNT", 0x0B, RO, 0x00, "Commands dropped for an error since the last clear."),
    Register("SCRATCH", 0x0C, RW, 0x00, "Free read/write register for bus tests."),
    Register("DONE_COUNT", 0x0D, RO, 0x00, "Commands retired (issued to a unit or completed)."),
    Register("CMDQ_HEAD", 0x0E, RO, 0x00, "Next command ring entry the chip will fetch."),
    Register("CMDQ_TAIL", 0x0F, RW, 0x00, "Doorbell: one past the last valid ring entry.",
             (Field("tail", 0, 16),)),
    Register("MEM_ADDR", 0x10, RW, 0x00, "Window address: [31:28] region (rtl/memories.py), [27:0] 32-bit chunk.",
             (Field("chunk", 0, 28), Field("region", 28, 4))),
    Register("MEM_DATA", 0x11, RW, None, "Window data; each access moves MEM_ADDR on by one chunk."),
    Register("MEM_DATA_KEEP", 0x13, RW, None, "Window data without moving MEM_ADDR (read-modify-write tests)."),
    Register("MEM_DATA_DEC", 0x14, RW, None, "Window data; each access moves MEM_ADDR back by one chunk."),
    Register("DRAM0", 0x15, RO, None, "The board's DRAM (rtl/board.py): size, AXI data width, read latency.",
             (Field("log2_dram_bytes", 0, 8), Field("log2_bus_bytes", 8, 4), Field("latency", 16, 10))),
    Register("DRAM1", 0x16, RO, None, "DRAM bandwidth: `beats` bus beats per `period` cycles.",
             (Field("beats", 0, 9), Field("period", 16, 9))),
    Register("WAITS", 0x17, RO, 0x00, "Which unit waits on which semaphore right now (the watchdog's dump).",
             tuple(f for i, u in enumerate(UNITS_THAT_WAIT)
                   for f in (Field(f"{u}_wait", 4 * i, 1), Field(f"{u}_sem", 4 * i + 1, 3))),
             volatile=True),
    *[Register(f"SEM{2 * i}{2 * i + 1}", 0x18 + i, RO, 0x00, f"Counts of semaphores {2 * i} and {2 * i + 1}.",
               (Field(f"sem{2 * i}", 0, 16), Field(f"sem{2 * i + 1}", 16, 16)), volatile=True)
      for i in range(SEMAPHORES // 2)],
    Register("IRQ_STATUS", 0x12, W1C, 0x00, "Sticky interrupt causes.",
             (Field("done", 0, 1, "the chip went idle"), Field("err", 1, 1, "a command faulted"))),
]


def _perf_registers(first: int, last: int) -> list[Register]:
    out = []
    for i in range(first, last):
        name = PERF_COUNTERS[i]
        out.append(Register(f"{name}_LO", 0x20 + 2 * i, RO, None,
                            f"Perf counter {name}, low word; reading it latches the high word.", volatile=True))
        out.append(Register(f"{name}_HI", 0x21 + 2 * i, RO, None,
                            f"Perf counter {name}, high word as latched by the last read of {name}_LO.",
                            volatile=True))
    return out


_regs += _perf_registers(0, _PERF_BEFORE_TRACE)

# The trace buffer (rtl/trace.py, docs/chip.md "Trace buffer"): a block of its own at 0x80, clear of
# the perf counters' run upwards from 0x20. Appended last so that every older register keeps its
# REG_INDEX (a fault descriptor's target).
_regs += [
    Register("TRACE_CTRL", 0x80, RW, 0x00, "Trace buffer control. Off by default: with enable 0 the chip records nothing.",
             (Field("enable", 0, 1, "record one event per command per unit into the TRACE SRAM"),
              Field("clear", 1, 1, "empty the buffer: TRACE_COUNT, its flags and TRACE_DROPPED to 0, events "
                    "not yet written discarded", strobe=True))),
    Register("TRACE_COUNT", 0x81, RO, 0x00, "Trace entries written (TRACE SRAM words 0..count-1), and the buffer's flags.",
             (Field("count", 0, 16),
              Field("pending", 29, 1, "events recorded but not yet written (read again before reading the SRAM)"),
              Field("lost", 30, 1, "sticky: events dropped because units finished faster than the buffer's one "
                    "write per cycle drained them"),
              Field("overflow", 31, 1, "sticky: events were dropped (the buffer was full, or lost)")),
             volatile=True),
    Register("TRACE_DROPPED", 0x82, RO, 0x00, "Trace events dropped since the last TRACE_CTRL.clear (saturates); "
             "CTRL.load_counters loads it.", volatile=True),
]
# Counters added after the trace block: the same address run (0x20 + 2 * index), later REG_INDEX.
_regs += _perf_registers(_PERF_BEFORE_TRACE, len(PERF_COUNTERS))
# The trace buffer's size, beside its other registers on the bus (0x83) but last in the list, so
# that every older register keeps its REG_INDEX. CAPS0/CAPS1 have no room for it.
_regs += [
    Register("TRACE_DEPTH", 0x83, RO, None, "Entries of the trace buffer (TRACE SRAM words): the build's "
             "ChipConfig.trace_depth, a power of two. A run of more events than this drops the rest (TRACE_DROPPED).",
             (Field("entries", 0, 16, "TRACE_COUNT.count reaches at most this"),)),
]

REGISTERS: tuple[Register, ...] = tuple(_regs)
REG: dict[str, Register] = {r.name: r for r in REGISTERS}
REG_INDEX: dict[str, int] = {r.name: i for i, r in enumerate(REGISTERS)}  # a fault descriptor's target
assert len({r.addr for r in REGISTERS}) == len(REGISTERS), "duplicate CSR address"
assert all(r.addr < (1 << CSR_ADDR_BITS) for r in REGISTERS), "CSR address beyond the bus"
WINDOW_DATA = ("MEM_DATA", "MEM_DATA_KEEP", "MEM_DATA_DEC")  # the window's data ports, in REG


def register(name: str) -> Register:
    """Look a register up by name (case-insensitive), with the known names in the error."""
    try:
        return REG[name.upper()]
    except KeyError:
        raise KeyError(f"no CSR named {name!r}; known: {', '.join(REG)}") from None
