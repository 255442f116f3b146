"""Port groups shared by several units (declared once)."""

from __future__ import annotations

from amaranth.lib.wiring import In, Out

from .config import ChipConfig

__all__ = ["acc_port_members"]


def acc_port_members(config: ChipConfig) -> dict:
    """A unit's read and write ports into the accumulator SRAM (sync read: data next cycle)."""
    cw = (config.acc_depth - 1).bit_length()
    return {
        "acc_rd_addr": Out(cw),
        "acc_rd_data": In(config.acc_word_bits),
        "acc_wr_addr": Out(cw),
        "acc_wr_data": Out(config.acc_word_bits),
        "acc_wr_en": Out(1),
    }
