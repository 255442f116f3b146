"""Injected manufacturing defects: structural RTL changes that no revision has.

The spec syntax is fixed (scripts depend on it):

* ``sram:<MEMORY>:<stuck0|stuck1>:addr=<n>:bit=<n>`` -- one cell stuck at 0/1: every read
  port of that SRAM returns the bit forced for that word.
* ``sram:<MEMORY>:alias:addr_bit=<n>`` -- address line ``n`` of that SRAM tied low on every
  port, so word ``a`` and ``a | 1<<n`` are the same cell.

``<MEMORY>`` is any name of the memory table (``rtl/memories.py``), case-insensitive.
* ``csr:<REGISTER>:<stuck0|stuck1>:bit=<n>`` -- bit ``n`` of a register's read data stuck.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .config import ChipConfig
from .csr_map import REG
from .memories import MEM, MEMORIES

__all__ = ["SramStuck", "SramAlias", "CsrStuck", "parse_fault", "parse_faults", "FAULT_SYNTAX"]

_SRAMS = "|".join(m.name for m in MEMORIES)
FAULT_SYNTAX = (
    f"sram:<{_SRAMS}>:<stuck0|stuck1>:addr=<n>:bit=<n>, sram:<{_SRAMS}>:alias:addr_bit=<n>, "
    "csr:<REGISTER>:<stuck0|stuck1>:bit=<n>"
)


@dataclass(frozen=True)
class SramStuck:
    sram: str
    value: int
    addr: int
    bit: int


@dataclass(frozen=True)
class SramAlias:
    sram: str
    addr_bit: int


@dataclass(frozen=True)
class CsrStuck:
    register: str
    value: int
    bit: int


def _int(spec: str, text: str, key: str) -> int:
    m = re.fullmatch(rf"{key}=(\d+)", text)
    if not m:
        raise ValueError(f"fault {spec!r}: expected {key}=<n>, got {text!r}")
    return int(m.group(1))


def parse_fault(spec: str, config: ChipConfig) -> SramStuck | SramAlias | CsrStuck:
    """Parse one ``--inject`` spec against a chip config; errors say what is accepted."""
    parts = spec.split(":")
    kind = parts[0]
    if kind == "sram":
        if len(parts) < 3 or parts[1].upper() not in MEM:
            raise ValueError(f"fault {spec!r}: the SRAM must be one of {', '.join(MEM)}; syntax: {FAULT_SYNTAX}")
        mem = MEM[parts[1].upper()]
        parts[1] = mem.name
        depth, width = mem.depth(config), mem.width(config)
        if parts[2] in ("stuck0", "stuck1"):
            if len(parts) != 5:
                raise ValueError(f"fault {spec!r}: expected sram:{parts[1]}:{parts[2]}:addr=<n>:bit=<n>")
            addr, bit = _int(spec, parts[3], "addr"), _int(spec, parts[4], "bit")
            if addr >= depth:
                raise ValueError(f"fault {spec!r}: addr={addr} is out of range; SRAM {parts[1]} has words 0..{depth - 1}")
            if bit >= width:
                raise ValueError(f"fault {spec!r}: bit={bit} is out of range; SRAM {parts[1]} words have bits 0..{width - 1}")
            return SramStuck(parts[1], int(parts[2][-1]), addr, bit)
        if parts[2] == "alias":
            if len(parts) != 4:
                raise ValueError(f"fault {spec!r}: expected sram:{parts[1]}:alias:addr_bit=<n>")
            line = _int(spec, parts[3], "addr_bit")
            lines = (depth - 1).bit_length()
            if line >= lines:
                raise ValueError(f"fault {spec!r}: addr_bit={line} is out of range; SRAM {parts[1]} has address "
                                 f"lines 0..{lines - 1}")
            return SramAlias(parts[1], line)
        raise ValueError(f"fault {spec!r}: SRAM faults are stuck0, stuck1 or alias; syntax: {FAULT_SYNTAX}")
    if kind == "csr":
        if len(parts) != 4 or parts[2] not in ("stuck0", "stuck1"):
            raise ValueError(f"fault {spec!r}: expected csr:<REGISTER>:<stuck0|stuck1>:bit=<n>")
        if parts[1].upper() not in REG:
            raise ValueError(f"fault {spec!r}: unknown register {parts[1]!r}; registers: {', '.join(REG)}")
        parts[1] = parts[1].upper()
        bit = _int(spec, parts[3], "bit")
        if bit >= 32:
            raise ValueError(f"fault {spec!r}: bit={bit} is out of range; registers have bits 0..31")
        return CsrStuck(parts[1], int(parts[2][-1]), bit)
    raise ValueError(f"fault {spec!r}: unknown kind {kind!r}; syntax: {FAULT_SYNTAX}")


def parse_faults(specs, config: ChipConfig) -> tuple:
    return tuple(parse_fault(s, config) for s in specs)
