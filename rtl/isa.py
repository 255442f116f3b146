"""The command set: one declaration used by the command processor RTL and by the software.

A command is 128 bits (four 32-bit words, word 0 in the low bits). The layout below is an
Amaranth ``StructLayout``: the RTL views FIFO entries through it, and :func:`pack_command`
packs Python values with the same field offsets, so the two can never drift apart.
"""

from __future__ import annotations

import enum

from amaranth.lib import data

__all__ = [
    "COMMAND_LAYOUT",
    "COMMAND_BITS",
    "Opcode",
    "ReduceOp",
    "ErrCode",
    "MATMUL_FLAG_ACCUMULATE",
    "Format",
    "FORMAT_SHIFT",
    "BLOCK",
    "pack_command",
    "unpack_command",
]

COMMAND_LAYOUT = data.StructLayout(
    {
        "opcode": 8,  # Opcode
        "flags": 8,  # MATMUL: bit 0 accumulate, bits 3:1 Format; REDUCE: bits 1:0 ReduceOp
        "length": 16,  # MATMUL: K; REDUCE: count of accumulator words
        "arg0": 16,  # MATMUL: A word address; REDUCE: source accumulator word
        "arg1": 16,  # MATMUL: B word address
        "arg2": 16,  # MATMUL: C (accumulator) word address; REDUCE: destination word
        "arg3": 16,  # FP MATMUL: [7:0] SA word, [15:8] SB word of the first block; else must be zero
        "tag": 32,  # free for software: copied into ERR_CMD3 when the command faults
    }
)
COMMAND_BITS = COMMAND_LAYOUT.size
assert COMMAND_BITS == 128


class Opcode(enum.IntEnum):
    NOP = 0x00
    FENCE = 0x01  # retires once every unit is idle
    MATMUL = 0x10
    REDUCE = 0x20


class Format(enum.IntEnum):
    """MATMUL operand formats (docs/numerics.md)."""

    INT8 = 0
    E4M3 = 1
    E5M2 = 2
    E2M1 = 3


FORMAT_SHIFT = 1  # Format sits in MATMUL flags[3:1]
BLOCK = 32  # K steps per scaling block of the FP formats


class ReduceOp(enum.IntEnum):
    SUM = 0  # wraps modulo 2**32
    MAX = 1
    MIN = 2


MATMUL_FLAG_ACCUMULATE = 0x01


class ErrCode(enum.IntEnum):
    """First-error codes latched in ERR. The command that caused it lands in ERR_CMD0..3."""

    NONE = 0
    BAD_OPCODE = 1
    BAD_LENGTH = 2  # zero length
    A_RANGE = 3  # A address + K beyond the operand SRAM
    B_RANGE = 4
    C_RANGE = 5  # C address + ROWS beyond the accumulator SRAM
    BAD_REDUCE_OP = 6
    SRC_RANGE = 7  # REDUCE source + count beyond the accumulator SRAM
    DST_RANGE = 8
    RESERVED_NONZERO = 9  # a reserved field (arg3 outside FP MATMUL, unused flag bits) is not zero
    WINDOW_RANGE = 10  # MEM_ADDR names no SRAM word (front-door window)
    BAD_FORMAT = 11  # MATMUL format code this chip does not have
    SCALE_RANGE = 12  # FP MATMUL: SA/SB word + blocks beyond the scale SRAMs


def pack_command(
    opcode: int,
    *,
    flags: int = 0,
    length: int = 0,
    arg0: int = 0,
    arg1: int = 0,
    arg2: int = 0,
    arg3: int = 0,
    tag: int = 0,
) -> int:
    """Pack one command into its 128-bit integer form, checking every field's width."""
    values = dict(
        opcode=opcode, flags=flags, length=length, arg0=arg0, arg1=arg1, arg2=arg2, arg3=arg3, tag=tag
    )
    word = 0
    for name, field in COMMAND_LAYOUT:
        v = int(values[name])
        if not 0 <= v < (1 << field.width):
            raise ValueError(f"command field {name}={v} does not fit in {field.width} bits")
        word |= v << field.offset
    return word


def unpack_command(word: int) -> dict[str, int]:
    """Split a 128-bit command back into its fields (for diagnostics)."""
    return {
        name: (word >> field.offset) & ((1 << field.width) - 1) for name, field in COMMAND_LAYOUT
    }
