"""Injected manufacturing defects: the fault model, its one syntax, and the fault universe.

A fault is structural RTL: a saboteur at its site (an SRAM port, a register's read data, a PE's
product or accumulator, a reduction-tree lane, the command FIFO, the bus, a pin) that
``rtl/saboteurs.py`` elaborates into the chip. Every fault is one :class:`Fault`, which packs
into a 64-bit descriptor (:data:`FAULT_LAYOUT`). ``--inject`` builds the descriptor in as a
constant (the saboteur folds to a wire and a gate); a fault-campaign build takes it on a
``fault_sel`` port that the testbench sets once before reset, so one build serves every fault
of a campaign and the saboteur logic is the same in both (docs/faults.md).

The spec syntax (scripts depend on it; names are case-insensitive):

=============================================================  ==============================
``sram:<M>:<stuck0|stuck1>:addr=<a>:bit=<b>``                  cell stuck, seen on every read
``sram:<M>:<stuck0|stuck1>:addr=<a>:bit=<b>:path=write``       bit stuck on the write path
``sram:<M>:alias:addr_bit=<n>``                                address line tied low
``sram:<M>:tie1:addr_bit=<n>``                                 address line tied high
``sram:<M>:bridge:addr_bit=<n>:with=<m>``                      two address lines shorted (AND)
``sram:<M>:transition:addr=<a>:bit=<b>:dir=<up|down>``         the cell cannot rise / fall
``sram:<M>:coupling:aggr=<a>:victim=<v>:bit=<b>:on=<up|down>:to=<0|1>``
                                                               a transition of the aggressor
                                                               cell forces the victim cell
``csr:<REGISTER>:<stuck0|stuck1>:bit=<b>``                     register read data bit stuck
``pe:<i>,<j>:<product|acc>:<stuck0|stuck1>:bit=<b>``           PE(i, j) int8 product (16 bits)
                                                               or accumulator (32) bit stuck
``reduce:lane=<l>:<stuck0|stuck1>:bit=<b>``                    reduction tree input lane bit
``cmdfifo:<stuck0|stuck1>:bit=<b>``                            command FIFO read data bit
``bus:hang``                                                   csr_ready never rises
``pin:<idle|irq>:<stuck0|stuck1>``                             an output pin stuck
``dram:<stuck0|stuck1>:addr=<byte>:bit=<0..7>``                a DRAM bit stuck on the read
                                                               data (the board's DRAM model)
``dma:<alias|tie1>:addr_bit=<n>[:side=<load|store>]``          an AXI address bit of the DMA
                                                               tied low / high (both
                                                               directions, or one)
``dma:drop_beat:burst=<n>:beat=<m>``                           the load DMA loses beat m of
                                                               the n-th burst of every entry
=============================================================  ==============================

``<M>`` is any memory of the table (``rtl/memories.py``). Coupling and transition faults act on
front-door writes (the window, the engine and the reduction unit), which is where a March test
meets them; a backdoor load does not move the faulty cell.

The DRAM and DMA faults need the board (:class:`~rtl.board.BoardConfig`, the default one unless
given): a DRAM byte address is checked against its size. A DRAM stuck bit is seen by every AXI
read of that byte (the DMA), not by the host's backdoor, which reads the array itself. A DMA
address bit is tied at the unit's AXI output, i.e. on the first address of each burst (the DRAM
counts the beats of a burst from there, within its 4 KiB page). A dropped beat is handshaken on
the bus but never reaches the load's word assembly, so every later word of that entry is
shifted by one beat and the entry waits for a beat that never comes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from amaranth.lib import data, enum

from .board import MAX_BURST_BEATS, BoardConfig
from .config import ChipConfig, log2
from .csr_map import REG, REG_INDEX, REGISTERS
from .memories import MEM, MEMORIES

__all__ = ["FaultKind", "Fault", "FAULT_LAYOUT", "FAULT_BITS", "FAULT_FORMS", "FAULT_SYNTAX", "parse_fault", "redundant", "constant_bits",
           "parse_faults", "KINDS", "universe", "PINS", "DMA_SIDES", "DROP_BURSTS", "BOARD_KINDS", "dram_lines"]

FAULT_BITS = 64
PINS = ("idle", "irq")
DMA_SIDES = ("both", "load", "store")  # DMA_ADDR_ALIAS target: the DMA units whose AXI address has the tied bit
# DMA_DROP_BEAT: the burst ordinals of one entry the universe covers: every beat of the first 8
# bursts of a load (512 bytes on a 4-byte bus). The checklist's long loads are longer than that
# and locate the lost beat with a word to spare (docs/faults.md).
DROP_BURSTS = 8


class FaultKind(enum.Enum, shape=5):
    NONE = 0
    SRAM_STUCK = 1
    SRAM_WRITE_STUCK = 2
    SRAM_ADDR_TIE = 3
    SRAM_ADDR_BRIDGE = 4
    SRAM_TRANSITION = 5
    SRAM_COUPLING = 6
    CSR_STUCK = 7
    PE_PRODUCT = 8
    PE_ACC = 9
    REDUCE_LANE = 10
    CMD_FIFO = 11
    BUS_HANG = 12
    PIN_STUCK = 13
    DRAM_STUCK = 14
    DMA_ADDR_ALIAS = 15
    DMA_DROP_BEAT = 16


# Faults of the board's DRAM model (fl_dram, rtl/dram.py), outside the chip's own RTL.
BOARD_KINDS = frozenset({FaultKind.DRAM_STUCK})


# target: memory index (MEMORIES), register index (REGISTERS), PE index i*cols+j, lane, pin, DMA
# side (DMA_SIDES). addr/addr2: words (aggressor/victim), address lines (tie, bridge, DMA alias),
# the low / high half of a DRAM byte address, or a burst ordinal (drop_beat). bit: the bit (of a
# DRAM byte: 0..7), or the beat of a dropped burst. value: stuck/tie/forced value. aux:
# transition direction or coupling trigger (0 up, 1 down).
FAULT_LAYOUT = data.StructLayout({
    "kind": FaultKind, "target": 8, "addr": 16, "addr2": 16, "bit": 8, "value": 1, "aux": 1,
})
assert FAULT_LAYOUT.size <= FAULT_BITS

_M = "|".join(m.name for m in MEMORIES)
FAULT_FORMS: tuple[tuple[str, str], ...] = (
    (f"sram:<{_M}>:<stuck0|stuck1>:addr=<n>:bit=<n>", "a cell stuck (every read of that word)"),
    (f"sram:<{_M}>:<stuck0|stuck1>:addr=<n>:bit=<n>:path=write", "a bit stuck on the write path"),
    (f"sram:<{_M}>:alias:addr_bit=<n>", "an address line tied low"),
    (f"sram:<{_M}>:tie1:addr_bit=<n>", "an address line tied high"),
    (f"sram:<{_M}>:bridge:addr_bit=<n>:with=<m>", "two address lines shorted (wired AND)"),
    (f"sram:<{_M}>:transition:addr=<n>:bit=<n>:dir=<up|down>", "a cell that cannot rise / fall"),
    (f"sram:<{_M}>:coupling:aggr=<n>:victim=<n>:bit=<n>:on=<up|down>:to=<0|1>",
     "an aggressor cell's transition forces a victim"),
    ("csr:<REGISTER>:<stuck0|stuck1>:bit=<n>", "a register read-data bit stuck"),
    ("pe:<i>,<j>:<product|acc>:<stuck0|stuck1>:bit=<n>", "a PE's int8 product / accumulator bit stuck"),
    ("reduce:lane=<n>:<stuck0|stuck1>:bit=<n>", "a reduction-tree input lane bit stuck"),
    ("cmdfifo:<stuck0|stuck1>:bit=<n>", "a command FIFO data bit stuck"),
    ("bus:hang", "the CSR bus never answers"),
    ("pin:<idle|irq>:<stuck0|stuck1>", "an output pin stuck"),
    ("dram:<stuck0|stuck1>:addr=<byte>:bit=<0..7>", "a DRAM bit stuck on every AXI read of that byte (the board)"),
    ("dma:<alias|tie1>:addr_bit=<n>", "a DMA AXI address bit tied low / high, loads and stores"),
    ("dma:<alias|tie1>:addr_bit=<n>:side=<load|store>", "the same on one DMA unit's AXI address only"),
    ("dma:drop_beat:burst=<n>:beat=<m>", "the load DMA loses beat m of burst n of every entry"),
)
FAULT_SYNTAX = ", ".join(f for f, _ in FAULT_FORMS)
_MEM_INDEX = {m.name: i for i, m in enumerate(MEMORIES)}


@dataclass(frozen=True)
class Fault:
    """One fault: its canonical spec and its descriptor fields."""

    spec: str
    kind: FaultKind
    target: int = 0
    addr: int = 0
    addr2: int = 0
    bit: int = 0
    value: int = 0
    aux: int = 0

    def encode(self) -> int:
        """The descriptor as an int in :data:`FAULT_LAYOUT` (what ``fault_sel`` carries)."""
        word = 0
        for name, v in (("kind", self.kind.value), ("target", self.target), ("addr", self.addr),
                        ("addr2", self.addr2), ("bit", self.bit), ("value", self.value), ("aux", self.aux)):
            f = FAULT_LAYOUT[name]
            assert 0 <= v < (1 << f.width), (self.spec, name, v)
            word |= v << f.offset
        return word

    @property
    def family(self) -> str:
        """The kind as a report groups it (``sram_stuck``, ``csr_stuck``, ...)."""
        return self.kind.name.lower()

    @property
    def memory(self) -> str | None:
        return MEMORIES[self.target].name if self.kind.name.startswith("SRAM") else None

    @property
    def register(self) -> str | None:
        return REGISTERS[self.target].name if self.kind is FaultKind.CSR_STUCK else None

    @property
    def dram_byte(self) -> int | None:
        """The DRAM byte address of a DRAM_STUCK fault."""
        return self.addr | self.addr2 << 16 if self.kind is FaultKind.DRAM_STUCK else None

    @property
    def side(self) -> str | None:
        """``both``, ``load`` or ``store``: the DMA units a DMA_ADDR_ALIAS fault is in."""
        return DMA_SIDES[self.target] if self.kind is FaultKind.DMA_ADDR_ALIAS else None


def _kv(spec: str, parts: list[str], keys: tuple[str, ...], optional: dict[str, str] | None = None) -> dict:
    """Parse ``key=value`` parts in this order (optional ones may be left off at the end)."""
    optional = optional or {}
    want = list(keys) + list(optional)
    if not len(keys) <= len(parts) <= len(want):
        raise ValueError(f"fault {spec!r}: expected {':'.join(f'{k}=<..>' for k in want)} after the kind")
    out = dict(optional)
    for k, text in zip(want, parts):
        m = re.fullmatch(rf"{k}=([0-9a-z_,]+)", text, re.IGNORECASE)
        if not m:
            raise ValueError(f"fault {spec!r}: expected {k}=<..>, got {text!r}")
        out[k] = m.group(1).lower()
    return out


def _num(spec: str, key: str, text: str, limit: int, what: str) -> int:
    if not text.isdigit():
        raise ValueError(f"fault {spec!r}: {key}={text!r} is not a number")
    v = int(text)
    if v >= limit:
        raise ValueError(f"fault {spec!r}: {key}={v} is out of range; {what} 0..{limit - 1}")
    return v


def _choice(spec: str, key: str, text: str, options: dict[str, int]) -> int:
    if text not in options:
        raise ValueError(f"fault {spec!r}: {key} must be one of {', '.join(options)}, not {text!r}")
    return options[text]


_STUCK = {"stuck0": 0, "stuck1": 1}
_DIR = {"up": 0, "down": 1}
_TIE = {"alias": 0, "tie1": 1}


def _board(config: ChipConfig, board: BoardConfig | None) -> BoardConfig:
    b = BoardConfig() if board is None else board
    return b if b.beats else b.resolve(config)


def dram_lines(config: ChipConfig, board: BoardConfig | None = None) -> range:
    """The AXI address bits the DRAM decodes: from the beat's (the bits below are 0 in every
    address the DMA sends, and the DRAM ignores them) to the top of the DRAM (it ignores those)."""
    b = _board(config, board)
    return range(log2(b.bus_bytes), log2(b.dram_bytes))


def parse_fault(spec: str, config: ChipConfig, board: BoardConfig | None = None) -> Fault:
    """Parse one ``--inject`` spec against a chip config (and the board: the default one if
    None); errors say what is accepted."""
    text = spec.strip()
    parts = text.split(":")
    kind = parts[0].lower()
    if kind == "sram":
        if len(parts) < 3 or parts[1].upper() not in MEM:
            raise ValueError(f"fault {spec!r}: the SRAM must be one of {', '.join(MEM)}; syntax: {FAULT_SYNTAX}")
        mem = MEM[parts[1].upper()]
        idx, depth, width = _MEM_INDEX[mem.name], mem.depth(config), mem.width(config)
        lines = (depth - 1).bit_length()
        how = parts[2].lower()
        words = f"SRAM {mem.name} has words"
        bits = f"SRAM {mem.name} words have bits"
        if how in _STUCK:
            kv = _kv(spec, parts[3:], ("addr", "bit"), {"path": "read"})
            a = _num(spec, "addr", kv["addr"], depth, words)
            b = _num(spec, "bit", kv["bit"], width, bits)
            path = _choice(spec, "path", kv["path"], {"read": 0, "write": 1})
            k = FaultKind.SRAM_WRITE_STUCK if path else FaultKind.SRAM_STUCK
            canon = f"sram:{mem.name}:{how}:addr={a}:bit={b}" + (":path=write" if path else "")
            return Fault(canon, k, idx, addr=a, bit=b, value=_STUCK[how])
        if how in ("alias", "tie1"):
            kv = _kv(spec, parts[3:], ("addr_bit",))
            n = _num(spec, "addr_bit", kv["addr_bit"], lines, f"SRAM {mem.name} has address lines")
            return Fault(f"sram:{mem.name}:{how}:addr_bit={n}", FaultKind.SRAM_ADDR_TIE, idx, addr=n,
                         value=int(how == "tie1"))
        if how == "bridge":
            kv = _kv(spec, parts[3:], ("addr_bit", "with"))
            n = _num(spec, "addr_bit", kv["addr_bit"], lines, f"SRAM {mem.name} has address lines")
            w = _num(spec, "with", kv["with"], lines, f"SRAM {mem.name} has address lines")
            if n == w:
                raise ValueError(f"fault {spec!r}: a bridge joins two different address lines")
            n, w = sorted((n, w))
            return Fault(f"sram:{mem.name}:bridge:addr_bit={n}:with={w}", FaultKind.SRAM_ADDR_BRIDGE, idx,
                         addr=n, addr2=w)
        if how == "transition":
            kv = _kv(spec, parts[3:], ("addr", "bit", "dir"))
            a = _num(spec, "addr", kv["addr"], depth, words)
            b = _num(spec, "bit", kv["bit"], width, bits)
            d = _choice(spec, "dir", kv["dir"], _DIR)
            return Fault(f"sram:{mem.name}:transition:addr={a}:bit={b}:dir={kv['dir']}", FaultKind.SRAM_TRANSITION,
                         idx, addr=a, bit=b, aux=d)
        if how == "coupling":
            kv = _kv(spec, parts[3:], ("aggr", "victim", "bit", "on", "to"))
            a = _num(spec, "aggr", kv["aggr"], depth, words)
            v = _num(spec, "victim", kv["victim"], depth, words)
            if a == v:
                raise ValueError(f"fault {spec!r}: aggressor and victim must be different words")
            b = _num(spec, "bit", kv["bit"], width, bits)
            on = _choice(spec, "on", kv["on"], _DIR)
            to = _choice(spec, "to", kv["to"], {"0": 0, "1": 1})
            return Fault(f"sram:{mem.name}:coupling:aggr={a}:victim={v}:bit={b}:on={kv['on']}:to={to}",
                         FaultKind.SRAM_COUPLING, idx, addr=a, addr2=v, bit=b, value=to, aux=on)
        raise ValueError(f"fault {spec!r}: SRAM faults are stuck0, stuck1, alias, tie1, bridge, transition or "
                         f"coupling; syntax: {FAULT_SYNTAX}")
    if kind == "csr":
        if len(parts) != 4 or parts[2].lower() not in _STUCK:
            raise ValueError(f"fault {spec!r}: expected csr:<REGISTER>:<stuck0|stuck1>:bit=<n>")
        name = parts[1].upper()
        if name not in REG:
            raise ValueError(f"fault {spec!r}: unknown register {parts[1]!r}; registers: {', '.join(REG)}")
        b = _num(spec, "bit", _kv(spec, parts[3:], ("bit",))["bit"], 32, "registers have bits")
        how = parts[2].lower()
        return Fault(f"csr:{name}:{how}:bit={b}", FaultKind.CSR_STUCK, REG_INDEX[name], bit=b, value=_STUCK[how])
    if kind == "pe":
        m = re.fullmatch(r"(\d+),(\d+)", parts[1]) if len(parts) == 5 else None
        if not m or parts[2].lower() not in ("product", "acc") or parts[3].lower() not in _STUCK:
            raise ValueError(f"fault {spec!r}: expected pe:<i>,<j>:<product|acc>:<stuck0|stuck1>:bit=<n>")
        i = _num(spec, "i", m.group(1), config.rows, "rows are")
        j = _num(spec, "j", m.group(2), config.cols, "columns are")
        where = parts[2].lower()
        width = 16 if where == "product" else 32
        b = _num(spec, "bit", _kv(spec, parts[4:], ("bit",))["bit"], width, f"the {where} has bits")
        how = parts[3].lower()
        return Fault(f"pe:{i},{j}:{where}:{how}:bit={b}",
                     FaultKind.PE_PRODUCT if where == "product" else FaultKind.PE_ACC,
                     i * config.cols + j, bit=b, value=_STUCK[how])
    if kind == "reduce":
        if len(parts) != 4 or parts[2].lower() not in _STUCK:
            raise ValueError(f"fault {spec!r}: expected reduce:lane=<n>:<stuck0|stuck1>:bit=<n>")
        lane = _num(spec, "lane", _kv(spec, parts[1:2], ("lane",))["lane"], config.lanes, "lanes are")
        b = _num(spec, "bit", _kv(spec, parts[3:], ("bit",))["bit"], 32, "lanes have bits")
        how = parts[2].lower()
        return Fault(f"reduce:lane={lane}:{how}:bit={b}", FaultKind.REDUCE_LANE, lane, bit=b, value=_STUCK[how])
    if kind == "cmdfifo":
        if len(parts) != 3 or parts[1].lower() not in _STUCK:
            raise ValueError(f"fault {spec!r}: expected cmdfifo:<stuck0|stuck1>:bit=<n>")
        from .isa import COMMAND_BITS

        b = _num(spec, "bit", _kv(spec, parts[2:], ("bit",))["bit"], COMMAND_BITS, "commands have bits")
        how = parts[1].lower()
        return Fault(f"cmdfifo:{how}:bit={b}", FaultKind.CMD_FIFO, bit=b, value=_STUCK[how])
    if kind == "bus":
        if len(parts) != 2 or parts[1].lower() != "hang":
            raise ValueError(f"fault {spec!r}: expected bus:hang")
        return Fault("bus:hang", FaultKind.BUS_HANG)
    if kind == "pin":
        if len(parts) != 3 or parts[1].lower() not in PINS or parts[2].lower() not in _STUCK:
            raise ValueError(f"fault {spec!r}: expected pin:<{'|'.join(PINS)}>:<stuck0|stuck1>")
        pin, how = parts[1].lower(), parts[2].lower()
        return Fault(f"pin:{pin}:{how}", FaultKind.PIN_STUCK, PINS.index(pin), value=_STUCK[how])
    if kind == "dram":
        if len(parts) != 4 or parts[1].lower() not in _STUCK:
            raise ValueError(f"fault {spec!r}: expected dram:<stuck0|stuck1>:addr=<byte>:bit=<0..7>")
        size = _board(config, board).dram_bytes
        kv = _kv(spec, parts[2:], ("addr", "bit"))
        a = _num(spec, "addr", kv["addr"], size, f"the {size:,}-byte DRAM has bytes")
        b = _num(spec, "bit", kv["bit"], 8, "a DRAM byte has bits")
        how = parts[1].lower()
        return Fault(f"dram:{how}:addr={a}:bit={b}", FaultKind.DRAM_STUCK, addr=a & 0xFFFF, addr2=a >> 16, bit=b,
                     value=_STUCK[how])
    if kind == "dma":
        how = parts[1].lower() if len(parts) > 1 else ""
        if how in _TIE:
            from .axi import AXI_ADDR_BITS

            kv = _kv(spec, parts[2:], ("addr_bit",), {"side": "both"})
            n = _num(spec, "addr_bit", kv["addr_bit"], AXI_ADDR_BITS, "the AXI address has bits")
            side = _choice(spec, "side", kv["side"], {s: i for i, s in enumerate(DMA_SIDES)})
            canon = f"dma:{how}:addr_bit={n}" + (f":side={DMA_SIDES[side]}" if side else "")
            return Fault(canon, FaultKind.DMA_ADDR_ALIAS, side, addr=n, value=_TIE[how])
        if how == "drop_beat":
            kv = _kv(spec, parts[2:], ("burst", "beat"))
            n = _num(spec, "burst", kv["burst"], 1 << 16, "burst ordinals are")
            m = _num(spec, "beat", kv["beat"], MAX_BURST_BEATS, "a burst has beats")
            return Fault(f"dma:drop_beat:burst={n}:beat={m}", FaultKind.DMA_DROP_BEAT, addr=n, bit=m)
        raise ValueError(f"fault {spec!r}: DMA faults are alias, tie1 or drop_beat; expected "
                         "dma:<alias|tie1>:addr_bit=<n>[:side=<load|store>] or dma:drop_beat:burst=<n>:beat=<m>")
    raise ValueError(f"fault {spec!r}: unknown kind {kind!r}; syntax: {FAULT_SYNTAX}")


def parse_faults(specs, config: ChipConfig, board: BoardConfig | None = None) -> tuple[Fault, ...]:
    """Every spec parsed; two faults on the same site and bit that disagree on its value (stuck
    at 0 and at 1) are refused: the chip cannot be built with both."""
    faults = tuple(parse_fault(s, config, board) for s in specs)
    seen: dict[tuple, Fault] = {}
    for f in faults:
        site = (f.kind, f.target, f.addr, f.addr2, f.bit, f.aux)
        other = seen.get(site)
        if other is not None and other.value != f.value:
            raise ValueError(f"faults {other.spec} and {f.spec} hold the same bit at different values; give one")
        seen[site] = f
    return faults


# ---- the fault universe -----------------------------------------------------------------------
@dataclass(frozen=True)
class KindSpace:
    """Every fault of one kind on a chip, indexable without listing them all."""

    name: str
    size: int
    nth: object  # int -> spec

    def __iter__(self):
        return (self.nth(i) for i in range(self.size))


def universe(cfg: ChipConfig, board: BoardConfig | None = None, dram_region: int | None = None) -> tuple[KindSpace, ...]:
    """The fault universe of a chip on a board (the default one if None), kind by kind (every
    site, every polarity). ``dram_region``: the DRAM bytes from byte 0 whose bits make the DRAM
    stuck-bit space (the region a checklist tests, docs/faults.md); None: the whole DRAM."""
    from .isa import COMMAND_BITS

    bd = _board(cfg, board)
    region = bd.dram_bytes if dram_region is None else min(dram_region, bd.dram_bytes)
    spaces = []
    mems = [(m.name, m.depth(cfg), m.width(cfg)) for m in MEMORIES]
    cells = [(n, d * w) for n, d, w in mems]
    total_cells = sum(c for _, c in cells)

    def cell(i):  # i over every bit of every SRAM -> (name, addr, bit)
        for n, d, w in mems:
            if i < d * w:
                return n, i // w, i % w
            i -= d * w
        raise IndexError(i)

    def stuck(i, path=""):
        n, a, b = cell(i // 2)
        return f"sram:{n}:stuck{i % 2}:addr={a}:bit={b}{path}"

    spaces.append(KindSpace("sram_stuck", 2 * total_cells, stuck))
    spaces.append(KindSpace("sram_write_stuck", 2 * total_cells, lambda i: stuck(i, ":path=write")))
    lines = [(n, (d - 1).bit_length()) for n, d, _ in mems]
    ties = [(n, ln, how) for n, nl in lines for ln in range(nl) for how in ("alias", "tie1")]
    spaces.append(KindSpace("sram_addr_tie", len(ties), lambda i: f"sram:{ties[i][0]}:{ties[i][2]}:addr_bit={ties[i][1]}"))
    bridges = [(n, a, b) for n, nl in lines for a in range(nl) for b in range(a + 1, nl)]
    spaces.append(KindSpace("sram_addr_bridge", len(bridges),
                            lambda i: f"sram:{bridges[i][0]}:bridge:addr_bit={bridges[i][1]}:with={bridges[i][2]}"))

    def transition(i):
        n, a, b = cell(i // 2)
        return f"sram:{n}:transition:addr={a}:bit={b}:dir={('up', 'down')[i % 2]}"

    spaces.append(KindSpace("sram_transition", 2 * total_cells, transition))
    # Coupling: every (aggressor word, victim word, bit, trigger, forced value) of one SRAM;
    # far too many to list, so indexed arithmetically.
    pairs = [(n, d, w, d * (d - 1) * w * 4) for n, d, w in mems]

    def coupling(i):
        for n, d, w, size in pairs:
            if i < size:
                i, mode = divmod(i, 4)
                i, b = divmod(i, w)
                a, v = divmod(i, d - 1)
                v = v if v < a else v + 1
                return f"sram:{n}:coupling:aggr={a}:victim={v}:bit={b}:on={('up', 'down')[mode // 2]}:to={mode % 2}"
            i -= size
        raise IndexError(i)

    spaces.append(KindSpace("sram_coupling", sum(p[3] for p in pairs), coupling))
    regs = [r.name for r in REGISTERS]
    spaces.append(KindSpace("csr_stuck", len(regs) * 64,
                            lambda i: f"csr:{regs[i // 64]}:stuck{i % 2}:bit={i % 64 // 2}"))
    pes = cfg.rows * cfg.cols
    spaces.append(KindSpace("pe_product", pes * 32,
                            lambda i: f"pe:{i // 32 // cfg.cols},{i // 32 % cfg.cols}:product:stuck{i % 2}:bit={i % 32 // 2}"))
    spaces.append(KindSpace("pe_acc", pes * 64,
                            lambda i: f"pe:{i // 64 // cfg.cols},{i // 64 % cfg.cols}:acc:stuck{i % 2}:bit={i % 64 // 2}"))
    spaces.append(KindSpace("reduce_lane", cfg.lanes * 64,
                            lambda i: f"reduce:lane={i // 64}:stuck{i % 2}:bit={i % 64 // 2}"))
    spaces.append(KindSpace("cmd_fifo", COMMAND_BITS * 2, lambda i: f"cmdfifo:stuck{i % 2}:bit={i // 2}"))
    spaces.append(KindSpace("bus_hang", 1, lambda i: "bus:hang"))
    spaces.append(KindSpace("pin_stuck", 2 * len(PINS), lambda i: f"pin:{PINS[i // 2]}:stuck{i % 2}"))
    spaces.append(KindSpace("dram_stuck", region * 16, lambda i: f"dram:stuck{i % 2}:addr={i // 16}:bit={i % 16 // 2}"))
    dma_ties = [(ln, how, side) for ln in dram_lines(cfg, bd) for how in _TIE for side in DMA_SIDES]
    spaces.append(KindSpace("dma_addr_alias", len(dma_ties), lambda i: f"dma:{dma_ties[i][1]}:addr_bit={dma_ties[i][0]}"
                            + (f":side={dma_ties[i][2]}" if dma_ties[i][2] != "both" else "")))
    spaces.append(KindSpace("dma_drop_beat", DROP_BURSTS * MAX_BURST_BEATS,
                            lambda i: f"dma:drop_beat:burst={i // MAX_BURST_BEATS}:beat={i % MAX_BURST_BEATS}"))
    return tuple(spaces)


KINDS = tuple(s.name for s in universe(ChipConfig()))


# ---- redundant faults -------------------------------------------------------------------------
def constant_bits(register: str, cfg: ChipConfig, board: BoardConfig | None = None) -> dict[int, int]:
    """Bits of a register's read data that hold one value in every state of a good chip
    (bit -> value): reserved bits and strobes read 0, constants read themselves (ID, CAPS0,
    CAPS1, TRACE_DEPTH and the board's DRAM0/DRAM1), and some fields are wider than any value
    they can hold. A fault that sticks such a bit at that value changes nothing: it is
    redundant, and no test can see it."""
    from .csr_map import ID_MAGIC, WINDOW_DATA
    from .isa import ErrCode

    reg = REG[register]
    out: dict[int, int] = {}
    if reg.fields:
        used = 0
        for f in reg.fields:
            if not f.strobe:
                used |= f.mask
        out.update({b: 0 for b in range(32) if not used >> b & 1})
    caps = cfg.caps()
    values = {"ID": ID_MAGIC, **caps, **_board(cfg, board).regs()}  # caps: CAPS0, CAPS1, TRACE_DEPTH
    if register in values:
        out = {b: values[register] >> b & 1 for b in range(32)}
    if register == "ERR":
        top = max(ErrCode).bit_length()
        out.update({b: 0 for b in range(top, 32)})
    if register == "STATUS":
        f = reg.field("fifo_level")
        out.update({b: 0 for b in range(f.lsb + cfg.cmd_fifo_depth.bit_length(), 32)})
    if register == "CMDQ_HEAD":
        out.update({b: 0 for b in range((cfg.cmdq_depth - 1).bit_length(), 32)})
    if register == "TRACE_COUNT":  # count never exceeds the buffer's entries
        f = reg.field("count")
        top = MEM["TRACE"].depth(cfg).bit_length()
        out.update({b: 0 for b in range(f.lsb + top, f.lsb + f.width)})
    if register in WINDOW_DATA:
        widest = max(m.chunk_bits(cfg) for m in MEMORIES)
        out.update({b: 0 for b in range(widest, 32)})
    return out


def redundant(fault: Fault, cfg: ChipConfig, revision_code: int | None = None,
              board: BoardConfig | None = None) -> str | None:
    """Why ``fault`` cannot change what the chip does, or None if it can."""
    if fault.kind is FaultKind.DMA_ADDR_ALIAS:
        lines = dram_lines(cfg, board)
        if fault.addr < lines.start:
            return (f"AXI address bit {fault.addr} is below the {1 << lines.start}-byte beat: every address the DMA "
                    "sends has it at 0 and the DRAM ignores it")
        if fault.addr >= lines.stop:
            return f"AXI address bit {fault.addr} is above the DRAM's {lines.stop} address bits: the DRAM ignores it"
    if fault.kind is FaultKind.CSR_STUCK:
        const = constant_bits(fault.register, cfg, board)
        if fault.register == "REV" and revision_code is not None:
            const = {b: revision_code >> b & 1 for b in range(32)}
        if const.get(fault.bit) == fault.value:
            return f"{fault.register} bit {fault.bit} reads {fault.value} in every state of a good chip"
    return None
