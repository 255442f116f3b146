"""The host-visible register map, declared once as data.

The RTL register file decodes these addresses, the software reads them by name, and the
bring-up checklist tests their reset values and access types from this same table.
Addresses are in 32-bit words on the host CSR bus.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Field", "Register", "REGISTERS", "REG", "ID_MAGIC", "PERF_COUNTERS", "MemRegion"]

ID_MAGIC = 0x464C4954  # "FLIT"


@dataclass(frozen=True)
class Field:
    name: str
    lsb: int
    width: int
    doc: str = ""

    @property
    def mask(self) -> int:
        return ((1 << self.width) - 1) << self.lsb

    def get(self, value: int) -> int:
        return (value >> self.lsb) & ((1 << self.width) - 1)


@dataclass(frozen=True)
class Register:
    """One 32-bit register.

    ``access`` is ``ro`` (writes ignored), ``rw``, ``w1c`` (write ones to clear) or ``wo``
    (write-only strobes, reads return 0). ``reset`` is the documented reset value, or None when
    it depends on the build (ID/REV/CAPS) or is a free-running counter.
    """

    name: str
    addr: int
    access: str
    reset: int | None
    doc: str
    fields: tuple[Field, ...] = ()

    def field(self, name: str) -> Field:
        for f in self.fields:
            if f.name == name:
                return f
        raise KeyError(f"register {self.name} has no field {name!r}; it has {[f.name for f in self.fields]}")


class MemRegion:
    """Front-door window regions: MEM_ADDR[31:28] selects the SRAM, MEM_ADDR[27:0] the chunk."""

    A = 0
    B = 1
    ACC = 2
    CMDQ = 3
    SA = 4  # A block scales (E8M0)
    SB = 5  # B block scales
    NAMES = {"A": 0, "B": 1, "ACC": 2, "CMDQ": 3, "SA": 4, "SB": 5}


PERF_COUNTERS = ("CYCLES", "ENGINE_BUSY", "MACS", "REDUCE_BUSY", "STALLS")

_regs = [
    Register("ID", 0x00, "ro", ID_MAGIC, "Constant magic 0x464C4954 ('FLIT')."),
    Register("REV", 0x01, "ro", None, "Silicon revision code (A0=0xA0, A1=0xA1, B0=0xB0)."),
    Register(
        "CAPS0", 0x02, "ro", None, "Array geometry.",
        (Field("rows", 0, 8), Field("cols", 8, 8), Field("lanes", 16, 8),
         Field("formats", 24, 8, "bit per Format: 0 INT8, 1 E4M3, 2 E5M2, 3 E2M1")),
    ),
    Register(
        "CAPS1", 0x03, "ro", None, "Memory sizes (log2 of words) and FIFO depth.",
        (Field("log2_operand_depth", 0, 8), Field("log2_acc_depth", 8, 8),
         Field("cmd_fifo_depth", 16, 8), Field("log2_cmdq_depth", 24, 8)),
    ),
    Register(
        "STATUS", 0x04, "ro", 0x10, "Live state.",
        (Field("busy", 0, 1), Field("engine_busy", 1, 1), Field("reduce_busy", 2, 1),
         Field("err", 3, 1), Field("idle", 4, 1), Field("fifo_level", 8, 9)),
    ),
    Register(
        "CTRL", 0x05, "rw", 0x00, "Control. Strobe bits read back as 0.",
        (Field("soft_reset", 0, 1, "strobe: reset the command path, engine and reduction unit"),
         Field("irq_en", 1, 1), Field("clear_err", 2, 1, "strobe"), Field("clear_perf", 3, 1, "strobe")),
    ),
    Register("ERR", 0x06, "ro", 0x00, "First error code (ErrCode) since the last clear.", (Field("code", 0, 8),)),
    Register("ERR_CMD0", 0x07, "ro", 0x00, "Word 0 of the command that caused ERR."),
    Register("ERR_CMD1", 0x08, "ro", 0x00, "Word 1 of the command that caused ERR."),
    Register("ERR_CMD2", 0x09, "ro", 0x00, "Word 2 of the command that caused ERR."),
    Register("ERR_CMD3", 0x0A, "ro", 0x00, "Word 3 (the tag) of the command that caused ERR."),
    Register("ERR_COUNT", 0x0B, "ro", 0x00, "Commands dropped for an error since the last clear."),
    Register("SCRATCH", 0x0C, "rw", 0x00, "Free read/write register for bus tests."),
    Register("DONE_COUNT", 0x0D, "ro", 0x00, "Commands retired (issued to a unit or completed)."),
    Register("CMDQ_HEAD", 0x0E, "ro", 0x00, "Next command ring entry the chip will fetch."),
    Register("CMDQ_TAIL", 0x0F, "rw", 0x00, "Doorbell: one past the last valid ring entry."),
    Register("MEM_ADDR", 0x10, "rw", 0x00, "Window address: [31:28] region, [27:0] 32-bit chunk index.",
             (Field("chunk", 0, 28), Field("region", 28, 4))),
    Register("MEM_DATA", 0x11, "rw", None, "Window data; each access moves MEM_ADDR on by one chunk."),
    Register("MEM_DATA_KEEP", 0x13, "rw", None, "Window data without moving MEM_ADDR (read-modify-write tests)."),
    Register("MEM_DATA_DEC", 0x14, "rw", None, "Window data; each access moves MEM_ADDR back by one chunk."),
    Register("IRQ_STATUS", 0x12, "w1c", 0x00, "Sticky interrupt causes.",
             (Field("done", 0, 1, "the chip went idle"), Field("err", 1, 1, "a command faulted"))),
]
for _i, _name in enumerate(PERF_COUNTERS):
    _regs.append(Register(f"{_name}_LO", 0x20 + 2 * _i, "ro", None,
                          f"Perf counter {_name}, low word; reading it latches the high word."))
    _regs.append(Register(f"{_name}_HI", 0x21 + 2 * _i, "ro", None,
                          f"Perf counter {_name}, high word as latched by the last read of {_name}_LO."))

REGISTERS: tuple[Register, ...] = tuple(_regs)
REG: dict[str, Register] = {r.name: r for r in REGISTERS}
assert len({r.addr for r in REGISTERS}) == len(REGISTERS), "duplicate CSR address"
CSR_ADDR_BITS = 8
