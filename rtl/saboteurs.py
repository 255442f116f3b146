"""Saboteurs: the RTL of injected faults (``rtl/faults.py``) at their sites.

Each helper takes the chip's fault descriptors (views of :data:`rtl.faults.FAULT_LAYOUT`, each
a constant for ``--inject`` or the ``fault_sel`` port of a campaign build) and returns the
signal as the faulty chip sees it. With no descriptors every helper returns its input
unchanged, so a good chip's RTL is exactly what it was before faults existed.
"""

from __future__ import annotations

from amaranth.hdl import Const, Module, Mux, Signal

from .faults import FaultKind

__all__ = ["active", "could_be", "force_bit", "stuck_value", "dma_address", "dram_read_data", "SramSaboteur"]


def active(desc, kind: FaultKind, target: int | None = None):
    """1 when the descriptor is a fault of this kind at this target."""
    cond = desc.kind == kind
    if target is not None:
        cond = cond & (desc.target == target)
    return cond


def could_be(descs, *kinds: FaultKind) -> list:
    """The descriptors that may be a fault of these kinds: every port descriptor (a campaign
    sets it at run time), and the constant ones (``--inject``) of these kinds. A site with
    none of them builds no saboteur logic."""
    wanted = {k.value for k in kinds}
    out = []
    for d in descs:
        v = d.as_value()
        field = d.shape()["kind"]
        if isinstance(v, Const) and (v.value >> field.offset) & ((1 << field.width) - 1) not in wanted:
            continue
        out.append(d)
    return out


def _onehot(m: Module, width: int, bit, name: str):
    s = Signal(width, name=name)
    m.d.comb += s.eq(Const(1, width) << bit)
    return s


def force_bit(m: Module, value, desc, cond, name: str, bit=None):
    """``value`` with bit ``desc.bit`` (or ``bit``) forced to ``desc.value`` while ``cond``."""
    w = len(value)
    one = _onehot(m, w, desc.bit if bit is None else bit, f"{name}_bit")
    forced = Mux(desc.value, value | one, value & ~one)
    out = Signal(w, name=name)
    m.d.comb += out.eq(Mux(cond, forced, value))
    return out


def stuck_value(m: Module, value, descs, kind: FaultKind, target: int | None, name: str, extra=None):
    """``value`` through every descriptor's stuck bit of this kind/target (``extra``: a further
    condition, such as the address being read)."""
    for n, d in enumerate(descs):
        cond = active(d, kind, target)
        if extra is not None:
            cond = cond & extra(d)
        value = force_bit(m, value, d, cond, f"{name}_f{n}")
    return value


def dma_address(m: Module, addr, descs, side: int, name: str):
    """A DMA unit's AXI address through every tied address bit of that unit (``side``: its
    index in ``rtl.faults.DMA_SIDES``; a fault on side 0 ties the bit of both units)."""
    for n, d in enumerate(could_be(descs, FaultKind.DMA_ADDR_ALIAS)):
        cond = active(d, FaultKind.DMA_ADDR_ALIAS) & ((d.target == 0) | (d.target == side))
        addr = force_bit(m, addr, d, cond, f"{name}_f{n}", bit=d.addr[:5])
    return addr


def dram_read_data(m: Module, data, addr_q, descs, bus_bytes: int, name: str):
    """The DRAM's AXI read data (one beat) through every stuck DRAM bit: ``addr_q`` is the byte
    address the beat was read from (a DRAM_STUCK descriptor holds a byte address and the bit of
    that byte)."""
    shift = (bus_bytes - 1).bit_length()
    for n, d in enumerate(could_be(descs, FaultKind.DRAM_STUCK)):
        byte = Signal(32, name=f"{name}_byte{n}")
        m.d.comb += byte.eq(d.addr | (d.addr2 << 16))
        bit = Signal(range(8 * bus_bytes), name=f"{name}_bit{n}")
        m.d.comb += bit.eq(((byte & (bus_bytes - 1)) << 3) | d.bit[:3])
        cond = active(d, FaultKind.DRAM_STUCK) & ((addr_q >> shift) == (byte >> shift)[:len(addr_q) - shift])
        data = force_bit(m, data, d, cond, f"{name}_f{n}", bit=bit)
    return data


class SramSaboteur:
    """The faults of one SRAM: address lines on every port, stuck cells on the read and write
    paths, and the shadow cells of transition and coupling faults.

    A transition or coupling fault keeps the faulty bit in a shadow flip-flop: writes through
    the write port update it as the defect dictates, and reads of that word return it in place
    of the array's bit (latched at the read, like the array's own non-transparent read).
    """

    def __init__(self, m: Module, descs, index: int, width: int, depth: int, name: str):
        self.m, self.descs, self.index, self.width, self.depth, self.name = m, descs, index, width, depth, name
        self.abits = max(1, (depth - 1).bit_length())
        self.shadows = []  # (desc, victim word, shadow) per descriptor

    def _on(self, d, kind):
        return active(d, kind, self.index)

    def address(self, addr, tag: str):
        """The physical address after tied or bridged lines."""
        m = self.m
        for n, d in enumerate(self.descs):
            w = len(addr)
            line = _onehot(m, w, d.addr[:8], f"{self.name}_{tag}_tie{n}")
            line2 = _onehot(m, w, d.addr2[:8], f"{self.name}_{tag}_br{n}")
            tied = Mux(d.value, addr | line, addr & ~line)
            both = ((addr & line) != 0) & ((addr & line2) != 0)
            bridged = Mux(both, addr | line | line2, addr & ~(line | line2))
            out = Signal(w, name=f"{self.name}_{tag}_a{n}")
            m.d.comb += out.eq(Mux(self._on(d, FaultKind.SRAM_ADDR_TIE), tied,
                                   Mux(self._on(d, FaultKind.SRAM_ADDR_BRIDGE), bridged, addr)))
            addr = out
        return addr

    def write(self, addr, data, en, granularity: int | None):
        """Write-path faults: returns the data the array stores; updates the shadow cells."""
        m = self.m
        data = stuck_value(m, data, self.descs, FaultKind.SRAM_WRITE_STUCK, self.index, f"{self.name}_wd",
                           extra=lambda d: addr == d.addr)
        for n, d in enumerate(self.descs):
            wbit = Signal(name=f"{self.name}_wbit{n}")
            m.d.comb += wbit.eq((data >> d.bit)[0])
            if granularity:
                en_bit = (en >> (d.bit >> 5))[0]
            else:
                en_bit = en[0] if len(en) else Const(1)
            writes = en_bit & (en != 0)
            shadow = Signal(name=f"{self.name}_shadow{n}")
            aggr = Signal(name=f"{self.name}_aggr{n}")
            tf = self._on(d, FaultKind.SRAM_TRANSITION)
            cf = self._on(d, FaultKind.SRAM_COUPLING)
            victim = Mux(cf, d.addr2, d.addr)
            with m.If(writes & (addr == victim)):
                # transition: up (aux 0) cannot rise, down (aux 1) cannot fall
                m.d.sync += shadow.eq(Mux(tf, Mux(d.aux, shadow | wbit, shadow & wbit), wbit))
            with m.Elif(writes & cf & (addr == d.addr)):
                rise, fall = ~aggr & wbit, aggr & ~wbit
                m.d.sync += aggr.eq(wbit)
                with m.If(Mux(d.aux, fall, rise)):
                    m.d.sync += shadow.eq(d.value)
            self.shadows.append((d, tf | cf, victim, shadow))
        return data

    def read(self, addr_phys, data, tag: str, domain: str = "sync"):
        """Read-path faults on one read port (clocked by ``domain``): ``addr_phys`` is the
        (faulty) address presented; ``data`` the array's read data one cycle later."""
        m = self.m
        if not self.descs:
            return data
        addr_q = Signal(len(addr_phys), name=f"{self.name}_{tag}_aq")
        m.d[domain] += addr_q.eq(addr_phys)
        data = stuck_value(m, data, self.descs, FaultKind.SRAM_STUCK, self.index, f"{self.name}_{tag}_rd",
                           extra=lambda d: addr_q == d.addr)
        for n, (d, on, victim, shadow) in enumerate(self.shadows):
            sh_q = Signal(name=f"{self.name}_{tag}_sh{n}")
            m.d[domain] += sh_q.eq(shadow)
            one = _onehot(m, len(data), d.bit, f"{self.name}_{tag}_shbit{n}")
            out = Signal(len(data), name=f"{self.name}_{tag}_sd{n}")
            m.d.comb += out.eq(Mux(on & (addr_q == victim), Mux(sh_q, data | one, data & ~one), data))
            data = out
        return data
