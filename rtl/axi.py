"""The AXI4 subset of the chip's memory port, declared once (docs/chip.md, "Memory port").

One ID (no ID signals), INCR bursts only (``*burst`` = 1), full-width beats (``*size`` =
log2 of the bus bytes), bursts of at most 256 beats that never cross a 4 KiB boundary (the
master's duty: the AXI specification forbids it, and a slave may assume it). ``bresp``/``rresp``
are driven OKAY (0) by the board's DRAM.
"""

from __future__ import annotations

from amaranth.lib.wiring import In, Out

__all__ = ["AXI_ADDR_BITS", "INCR", "axi_members", "AXI_MASTER_OUTPUTS"]

AXI_ADDR_BITS = 32
INCR = 1

# Signals the master drives (the slave drives the rest), without the ``axi_`` prefix.
AXI_MASTER_OUTPUTS = ("awaddr", "awlen", "awsize", "awburst", "awvalid", "wdata", "wstrb", "wlast", "wvalid",
                      "bready", "araddr", "arlen", "arsize", "arburst", "arvalid", "rready")


def axi_members(data_bits: int, *, master: bool, read: bool = True, write: bool = True) -> dict:
    """Component members ``axi_<signal>`` for one side of the port (``master`` or slave), with
    the read and/or the write half."""
    widths = {}
    if write:
        widths.update(awaddr=AXI_ADDR_BITS, awlen=8, awsize=3, awburst=2, awvalid=1, awready=1,
                      wdata=data_bits, wstrb=data_bits // 8, wlast=1, wvalid=1, wready=1,
                      bresp=2, bvalid=1, bready=1)
    if read:
        widths.update(araddr=AXI_ADDR_BITS, arlen=8, arsize=3, arburst=2, arvalid=1, arready=1,
                      rdata=data_bits, rresp=2, rlast=1, rvalid=1, rready=1)
    out = {}
    for name, w in widths.items():
        driven_by_master = name in AXI_MASTER_OUTPUTS
        out[f"axi_{name}"] = (Out(w) if driven_by_master == master else In(w))
    return out
