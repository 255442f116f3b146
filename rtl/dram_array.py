"""The DRAM's storage array: an Amaranth memory for Amaranth's simulator, a Verilog module for
the simulator builds.

Amaranth's Verilog backend writes an initial value for every word of a memory, even an all-zero
one: a 4 MiB DRAM is 131,072 rows of 256 bits, about two minutes of elaboration per build (and
ten under load), paid again for every board variant. The build instead instantiates
``fl_dram_array`` (``rtl/dram_array.v``, the same ports and timing: a registered read port that
reads before a write to the same row, and a write port with a byte enable per byte) and zeroes
the array with one loop. Both are selected at elaboration by ``verilog``; the cocotb runs
exercise the Verilog one, the Amaranth unit tests the other.
"""

from __future__ import annotations

from pathlib import Path

from amaranth.hdl import ClockSignal, Instance, Module
from amaranth.lib import memory, wiring
from amaranth.lib.wiring import In, Out

from .config import log2

__all__ = ["DramArray", "ARRAY_MODULE", "ARRAY_VAR", "array_verilog"]

ARRAY_MODULE = "fl_dram_array"
ARRAY_VAR = "mem"  # the array inside ARRAY_MODULE (the host backdoor's handle)
_SOURCE = Path(__file__).with_name("dram_array.v")


def array_verilog() -> str:
    """The Verilog of :data:`ARRAY_MODULE`, appended to a build's generated Verilog."""
    return _SOURCE.read_text()


class DramArray(wiring.Component):
    def __init__(self, rows: int, row_bits: int, *, verilog: bool):
        if rows < 2 or rows & (rows - 1) or row_bits % 8:
            raise ValueError(f"a DRAM array needs a power-of-two row count >= 2 and whole bytes per row, "
                             f"not {rows} rows of {row_bits} bits")
        self.rows, self.row_bits, self.verilog = rows, row_bits, verilog
        abits = log2(rows)
        super().__init__({"r_addr": In(abits), "r_en": In(1), "r_data": Out(row_bits),
                          "w_addr": In(abits), "w_en": In(row_bits // 8), "w_data": In(row_bits)})

    def elaborate(self, platform):
        if self.verilog:  # the instance itself, so its name in the parent is the array's scope
            return Instance(
                ARRAY_MODULE, p_ROWS=self.rows, p_ROW_BITS=self.row_bits, p_ADDR_BITS=log2(self.rows),
                i_clk=ClockSignal(), i_r_addr=self.r_addr, i_r_en=self.r_en, o_r_data=self.r_data,
                i_w_addr=self.w_addr, i_w_en=self.w_en, i_w_data=self.w_data)
        m = Module()
        m.submodules.array = mem = memory.Memory(shape=self.row_bits, depth=self.rows, init=[])
        rp, wp = mem.read_port(), mem.write_port(granularity=8)
        m.d.comb += [rp.addr.eq(self.r_addr), rp.en.eq(self.r_en), self.r_data.eq(rp.data),
                     wp.addr.eq(self.w_addr), wp.en.eq(self.w_en), wp.data.eq(self.w_data)]
        return m
