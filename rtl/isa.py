"""The command set: one declaration used by the command processor RTL and by the software.

A command is 128 bits (four 32-bit words, word 0 in the low bits). :data:`COMMAND_LAYOUT` is an
Amaranth ``StructLayout`` whose ``flags`` and ``arg3`` are nested layouts (unions over the
opcodes that give them a meaning). The RTL views FIFO entries through it; :func:`pack_command`
packs Python values with the same field offsets and :func:`decode` unpacks them, so the two
sides cannot drift apart. Software builds commands with the constructors :func:`matmul`,
:func:`reduce`, :func:`vec`, :func:`fence`, :func:`nop`, :func:`dma_load`, :func:`dma_store` and
:func:`dma_stride` (each takes ``wait=``/``signal=`` semaphores); :func:`pack_command` is for raw (and
deliberately bad) commands.
"""

from __future__ import annotations

import enum
import functools
import numbers

from amaranth.lib import data

from .csr_map import SEMAPHORES

np_integer = numbers.Integral  # kernels pass numpy integers too

__all__ = [
    "COMMAND_LAYOUT", "COMMAND_BITS", "MAX_COUNT", "MATMUL_FLAGS", "REDUCE_FLAGS", "SCALE_WORDS", "BLOCK",
    "Opcode", "ReduceOp", "ErrCode", "Format", "VecOp", "VecB", "VecDst", "VEC_FLAGS", "VEC_UNARY", "VEC_TO_OPERAND", "VEC_ANY_DST", "VEC_FP8_FORMATS", "REQUANT_PARAM",
    "pack_command", "unpack_command", "decode", "opcode_of", "with_opcode", "field_of_bit",
    "matmul", "reduce", "vec", "fence", "nop", "dma_load", "dma_store", "dma_stride", "sync_of", "with_sync",
    "DMA_FLAGS", "STRIDE_FLAGS", "SYNC", "DmaQueue", "SEMAPHORES",
]

BLOCK = 32  # K steps per scaling block of the FP formats


class Opcode(enum.IntEnum):
    NOP = 0x00
    FENCE = 0x01  # retires once every unit is idle
    MATMUL = 0x10
    REDUCE = 0x20
    VEC = 0x40  # the vector unit: one elementwise op over accumulator words (rtl/vector.py)
    DMA_LOAD = 0x30  # DRAM -> an SRAM (A, B, ACC, SA, SB), 2D
    DMA_STORE = 0x31  # ACC -> DRAM, 2D
    DMA_STRIDE = 0x32  # set the strides later DMAs of one queue use (taken in stream order)


class Format(enum.IntEnum):
    """MATMUL operand formats (docs/numerics.md)."""

    INT8 = 0
    E4M3 = 1
    E5M2 = 2
    E2M1 = 3


class ReduceOp(enum.IntEnum):
    SUM = 0  # wraps modulo 2**32
    MAX = 1
    MIN = 2
    FSUM = 3  # fp32 lanes: the tree, then word by word (docs/numerics.md); chips with the vector unit
    FMAX = 4  # fp32 lanes, IEEE 754-2019 maximum; chips with the vector unit


class VecOp(enum.IntEnum):
    """Vector-unit operations on fp32 (``I2F``: int32) accumulator lanes (docs/numerics.md)."""

    FADD = 0
    FSUB = 1  # a - b
    FMUL = 2
    FMAX = 3  # IEEE 754-2019 maximum: NaN if either is NaN, +0 above -0
    FMIN = 4
    I2F = 5  # int32 -> fp32, ties to even (b unused)
    RELU = 6  # max(x, +0) with -0 -> +0, NaN stays NaN (b unused)
    EXP = 7  # e**x, documented algorithm and error bound (rtl/special.py; b unused)
    RECIP = 8  # 1/x (b unused)
    RSQRT = 9  # 1/sqrt(x) (b unused)
    CVT_I8 = 10  # int8 of a * b, nearest even, saturating, NaN -> 0; into an operand SRAM word (dst A or B)
    DEQ = 11  # fp32(int32 a) * b: I2F then FMUL, each rounded (a dequantization in one pass)
    EXPSUB = 12  # exp(a - b): FSUB then EXP, each rounded (softmax's numerator in one pass)
    IADD = 13  # int32 a + b, wrapping (a bias onto int32 accumulators)
    REQUANT = 14  # int8 of int32 a by b's fixed-point multiplier and shift (REQUANT_PARAM), into ACC (sign-extended) or A / B
    CVT_F8 = 15  # FP8 (arg3: Format.E4M3 or E5M2) of a * b, RNE, saturating, NaN -> NaN; into an operand SRAM word


VEC_UNARY = (VecOp.I2F, VecOp.RELU, VecOp.EXP, VecOp.RECIP, VecOp.RSQRT)  # b is neither read nor range-checked
VEC_TO_OPERAND = (VecOp.CVT_I8, VecOp.CVT_F8)  # write operand-SRAM words (VecDst.A or B) only
VEC_FP8_FORMATS = (Format.E4M3, Format.E5M2)  # CVT_F8's arg3; every other VEC's arg3 must be 0
VEC_ANY_DST = (VecOp.REQUANT,)  # int8 results: into ACC (sign-extended lanes) or an operand SRAM; the rest write ACC
# REQUANT's second operand, one 32-bit word per lane: out = clamp(round_half_away(a * mult / 2**shift),
# 0 if relu else -128, 127) (docs/numerics.md, "Requantization"); bit 30 is ignored.
REQUANT_PARAM = data.StructLayout({"mult": 24, "shift": 6, "unused": 1, "relu": 1})


class VecB(enum.IntEnum):
    """Where a VEC command's second operand comes from."""

    VECTOR = 0  # word b + i for word a + i
    LANE = 1  # word b for every word: one value per lane (per column: a bias)
    SCALAR = 2  # lane 0 of word b for every lane of every word (per row: a row's max)
    FOLD = 3  # no b: the count words of a folded lane by lane, left to right, into one word at dst


class VecDst(enum.IntEnum):
    """The SRAM a VEC writes: ACC for every op but the conversions, which write A or B words."""

    ACC = 0
    A = 1  # only where LANES == ROWS (an A word holds ROWS int8)
    B = 2


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
    DMA_REGION = 13  # DMA_LOAD into an SRAM DMA cannot write (CMDQ, an unknown region); DMA_STORE not from ACC
    DMA_SRAM_RANGE = 14  # the descriptor's last SRAM word is beyond its SRAM
    DMA_DRAM_RANGE = 15  # the descriptor's last DRAM byte is beyond the DRAM
    DMA_ALIGN = 16  # DRAM address or DRAM stride not a multiple of the bus width
    BAD_VEC_OP = 17  # VEC op or operand-b form this chip does not have, or a VEC on a chip without the unit


class DmaQueue(enum.IntEnum):
    """The two DMA units, each with its own queue (DMA_STRIDE names one)."""

    LOAD = 0
    STORE = 1


MATMUL_FLAGS = data.StructLayout({"accumulate": 1, "fmt": 3, "reserved": 4})  # fmt: Format
REDUCE_FLAGS = data.StructLayout({"op": 3, "reserved": 5})  # op: ReduceOp
DMA_FLAGS = data.StructLayout({"region": 3, "reserved": 5})  # region: rtl.memories.Region of the SRAM side
STRIDE_FLAGS = data.StructLayout({"queue": 1, "reserved": 7})  # queue: DmaQueue
VEC_FLAGS = data.StructLayout({"op": 4, "b": 2, "dst": 2})  # op: VecOp; b: VecB; dst: VecDst
FLAGS = data.UnionLayout({"matmul": MATMUL_FLAGS, "reduce": REDUCE_FLAGS, "dma": DMA_FLAGS, "stride": STRIDE_FLAGS,
                          "vec": VEC_FLAGS, "bits": 8})
# Every command may wait on one counting semaphore before it starts (taking one count) and signal
# up to two when it has completed (docs/chip.md, "Synchronisation"). Two, because a MATMUL that
# ends both an operand buffer's use and a C tile tells two different consumers.
SYNC = data.StructLayout({"wait": 1, "wait_sem": 3, "signal": 1, "signal_sem": 3, "signal2": 1, "signal2_sem": 3})
SCALE_WORDS = data.StructLayout({"sa": 8, "sb": 8})  # FP MATMUL: first SA / SB word of the blocks
ARG3 = data.UnionLayout({"scales": SCALE_WORDS, "bits": 16})

COMMAND_LAYOUT = data.StructLayout(
    {
        "opcode": 8,  # Opcode
        "flags": FLAGS,
        "length": 16,  # MATMUL: K; REDUCE, VEC: count of accumulator words
        "arg0": 16,  # MATMUL: A word address; REDUCE: source accumulator word; VEC: a; DMA: SRAM word; STRIDE: SRAM stride
        "arg1": 16,  # MATMUL: B word address; VEC: b; DMA: rows
        "arg2": 16,  # MATMUL: C (accumulator) word address; REDUCE, VEC: destination word; DMA: DRAM byte address [15:0]
        "arg3": ARG3,  # FP MATMUL: scale words; DMA: DRAM byte address [31:16]; must be zero otherwise
        "sync": SYNC,  # semaphore wait / signal
        "tag": 20,  # free for software: lands in ERR_CMD3 when the command faults, and in the trace
    }
)
COMMAND_BITS = COMMAND_LAYOUT.size
assert COMMAND_BITS == 128
MAX_COUNT = (1 << COMMAND_LAYOUT["length"].width) - 1  # the most words one REDUCE / VEC / DMA row covers


def _flatten(layout, offset: int = 0, path: str = "") -> dict[str, tuple[int, int]]:
    """Every leaf field of a nested layout: dotted path -> (bit offset, width)."""
    out = {}
    for name, field in layout:
        p = f"{path}{name}"
        if isinstance(field.shape, data.Layout):
            out[p] = (offset + field.offset, field.width)  # the group as raw bits
            out.update(_flatten(field.shape, offset + field.offset, p + "."))
        else:
            out[p] = (offset + field.offset, field.width)
    return out


_FIELDS = _flatten(COMMAND_LAYOUT)  # computed once: packing is on the kernels' hot path


def _put(word: int, path: str, value) -> int:
    if isinstance(value, dict):
        if path not in _FIELDS or not any(k.startswith(path + ".") for k in _FIELDS):
            raise ValueError(f"command field {path} is a plain field, not a group")
        for name, v in value.items():
            sub = f"{path}.{name}"
            if sub not in _FIELDS:
                members = sorted({k[len(path) + 1:].split(".")[0] for k in _FIELDS if k.startswith(path + ".")})
                raise ValueError(f"command field {path} has no member {name!r}; members: {members}")
            word = _put(word, sub, v)
        return word
    try:
        off, width = _FIELDS[path]
    except KeyError:
        raise ValueError(f"command has no field {path!r}; fields: {[n for n, _ in COMMAND_LAYOUT]}") from None
    v = int(value)
    if not 0 <= v < (1 << width):
        raise ValueError(f"command field {path}={v} does not fit in {width} bits")
    return word | (v << off)


def pack_command(opcode: int, **fields) -> int:
    """Pack one command into its 128-bit integer form, checking every field's width.

    Each field takes an int (its raw bits) or, for ``flags`` and ``arg3``, a dict naming the
    member layout: ``flags={"matmul": {"accumulate": 1}}``, ``arg3={"scales": {"sa": 2}}``.
    """
    word = _put(0, "opcode", opcode)
    for name, value in fields.items():
        word = _put(word, name, value)
    return word


def opcode_of(cmd: int) -> int:
    """The opcode of a packed command."""
    f = COMMAND_LAYOUT["opcode"]
    return (cmd >> f.offset) & ((1 << f.width) - 1)


_OP_OFF, _OP_W = _FIELDS["opcode"]
_LEN_OFF, _LEN_W = _FIELDS["length"]
# plain ints: feed_cycles runs once per command a stream queues (32,768 MATMULs in a 256^3 GEMM),
# and comparing with an enum member is several times slower than with an int
_OP_MASK, _LEN_MASK, _MATMUL_OP = (1 << _OP_W) - 1, (1 << _LEN_W) - 1, int(Opcode.MATMUL)


def feed_cycles(cmd: int, min_matmul_cycles: int) -> int:
    """Cycles a command holds the matrix engine's feed: ``max(K, min_matmul_cycles)`` for a
    MATMUL (docs/chip.md), 0 for any other command. The command stream issues in order and a
    MATMUL issues only when the feed is free, so the MATMULs queued in the ring are a lower
    bound on how long the chip takes to drain it (the host's refill uses it)."""
    if (cmd >> _OP_OFF) & _OP_MASK != _MATMUL_OP:
        return 0
    k = (cmd >> _LEN_OFF) & _LEN_MASK
    return k if k > min_matmul_cycles else min_matmul_cycles


_PLANS: dict[int, tuple] = {}  # id(layout) -> (layout, its fields as (name, offset, mask, sub-layout or None))


def _plan(layout) -> tuple:
    """A layout's fields as plain ints, read once: walking an Amaranth layout computes each field's
    width again (11.6 us per decode of a command, most of it there)."""
    got = _PLANS.get(id(layout))
    if got is None or got[0] is not layout:
        fields = tuple((name, f.offset, (1 << f.width) - 1, f.shape if isinstance(f.shape, data.Layout) else None)
                       for name, f in layout)
        got = _PLANS[id(layout)] = (layout, fields)
    return got[1]


def _unpack(layout, word: int) -> dict:
    out = {}
    for name, off, mask, sub in _plan(layout):
        bits = (word >> off) & mask
        out[name] = _unpack(sub, bits) if sub is not None else bits
    return out


def with_opcode(pattern: int, opcode: int) -> int:
    """A raw 128-bit command: ``pattern`` with its opcode field replaced (for deliberately bad
    commands that exercise every other bit)."""
    off, width = _FIELDS["opcode"]
    mask = ((1 << width) - 1) << off
    return (pattern & ~mask & ((1 << COMMAND_BITS) - 1)) | (int(opcode) << off)


def field_of_bit(bit: int) -> str:
    """The top-level command field that holds ``bit`` (``"arg2"``, ``"tag"``, ...)."""
    for name, f in COMMAND_LAYOUT:
        if f.offset <= bit < f.offset + f.width:
            return name
    raise ValueError(f"bit {bit} is outside the {COMMAND_BITS}-bit command")


_TOP_FIELDS = tuple((name, f.offset, (1 << f.width) - 1) for name, f in COMMAND_LAYOUT)  # read once: layouts are slow to walk


def unpack_command(cmd: int) -> dict[str, int]:
    """The top-level fields of a packed command as raw integers (for diagnostics)."""
    return {name: (cmd >> off) & mask for name, off, mask in _TOP_FIELDS}


def decode(cmd: int) -> dict:
    """The fields of a packed command, with ``flags`` and ``arg3`` read as their opcode's layout."""
    top = unpack_command(cmd)
    op = top["opcode"]
    if op == Opcode.MATMUL:
        top["flags"] = _unpack(MATMUL_FLAGS, top["flags"])
        top["arg3"] = _unpack(SCALE_WORDS, top["arg3"])
    elif op == Opcode.REDUCE:
        top["flags"] = _unpack(REDUCE_FLAGS, top["flags"])
    elif op == Opcode.VEC:
        top["flags"] = _unpack(VEC_FLAGS, top["flags"])
    elif op in (Opcode.DMA_LOAD, Opcode.DMA_STORE):
        top["flags"] = _unpack(DMA_FLAGS, top["flags"])
        top["dram"] = top["arg2"] | top["arg3"] << 16
    elif op == Opcode.DMA_STRIDE:
        top["flags"] = _unpack(STRIDE_FLAGS, top["flags"])
        top["dram_stride"] = top["arg2"] | top["arg3"] << 16
    top["sync"] = _unpack(SYNC, top["sync"])
    return top


def sync_of(cmd: int) -> dict:
    """The semaphore fields of a packed command (``wait``, ``wait_sem``, ``signal``, ...)."""
    off, width = _FIELDS["sync"]
    return _unpack(SYNC, (cmd >> off) & ((1 << width) - 1))


def with_sync(cmd: int, *, wait: int | None = None, signal: int | None = None, signal2: int | None = None) -> int:
    """``cmd`` with its semaphore fields replaced: wait on ``wait``, signal ``signal`` and
    ``signal2`` (None: not)."""
    off, width = _FIELDS["sync"]
    return (cmd & ~(((1 << width) - 1) << off)) | (_sync_bits(wait, signal, signal2) << off)


def _sync_bits(wait: int | None, signal: int | None, signal2: int | None = None) -> int:
    bits = 0
    for name, sem in (("wait", wait), ("signal", signal), ("signal2", signal2)):
        if sem is None:
            continue
        if not isinstance(sem, (int, np_integer)) or isinstance(sem, bool) or not 0 <= sem < SEMAPHORES:
            raise ValueError(f"{name} semaphore must be an integer in [0, {SEMAPHORES}), not {sem!r}")
        bits |= (1 | int(sem) << 1) << _SYNC_OFFSET[name]
    return bits


_SYNC_OFFSET = {name: SYNC[name].offset for name in ("wait", "signal", "signal2")}  # once: Amaranth's lookup is slow


# ---- constructors ---------------------------------------------------------------------------

# Memoized: a command is a pure function of its fields, and a GEMM stream repeats few field sets
# (a 256^3 GEMM on 4x4 packs 32,768 MATMULs from 2,130 distinct ones): half of the stream's
# building (docs/simulation.md, "Python in the kernel's window"). Typed, so that a value that only
# compares equal to a good one (wait=True for wait=1) is checked, and refused, on its own.
@functools.lru_cache(maxsize=1 << 14, typed=True)
def matmul(*, a: int, b: int, c: int, k: int, accumulate: bool = False, fmt: Format = Format.INT8,
           sa: int = 0, sb: int = 0, tag: int = 0, wait: int | None = None, signal: int | None = None,
           signal2: int | None = None) -> int:
    """MATMUL: ``k`` steps of A from word ``a`` and B from word ``b`` into ROWS accumulator words
    at ``c`` (added into them with ``accumulate``). FP formats read their block scales from SA
    word ``sa`` and SB word ``sb`` onwards; the int8 path has none (``sa``/``sb`` must be 0)."""
    fmt = int(fmt)
    if fmt == _INT8 and (sa or sb):
        raise ValueError("an int8 MATMUL has no block scales: sa and sb must be 0")
    if fmt not in _FORMAT_CODES:
        Format(fmt)  # raises the enum's own error for a code that names no format
    # The hot path of every GEMM stream (a 256^3 GEMM packs 32,768): the same bits as
    # pack_command, with each field's offset and limit read once (tests/test_spec.py holds the
    # two to the same bits). One comparison per field, then one expression.
    if not (0 <= k < _LEN_LIM and 0 <= a < _A_LIM and 0 <= b < _B_LIM and 0 <= c < _C_LIM
            and 0 <= sa < _SA_LIM and 0 <= sb < _SB_LIM and 0 <= tag < _TAG_LIM):
        for name, v in (("length", k), ("arg0", a), ("arg1", b), ("arg2", c), ("arg3.scales.sa", sa),
                        ("arg3.scales.sb", sb), ("tag", tag)):
            if not 0 <= v < (1 << _FIELDS[name][1]):
                raise ValueError(f"command field {name}={v} does not fit in {_FIELDS[name][1]} bits")
    sync = 0 if wait is None and signal is None and signal2 is None else _sync_bits(wait, signal, signal2)
    return (_MATMUL_BASE | (bool(accumulate) << _ACC_OFF) | (fmt << _FMT_OFF) | (int(k) << _LEN_OFF)
            | (int(a) << _A_OFF) | (int(b) << _B_OFF) | (int(c) << _C_OFF) | (int(sa) << _SA_OFF)
            | (int(sb) << _SB_OFF) | (int(tag) << _TAG_OFF) | (sync << _SYNC_OFF))


_MATMUL_BASE = Opcode.MATMUL << _FIELDS["opcode"][0]
_ACC_OFF = _FIELDS["flags.matmul.accumulate"][0]
_FMT_OFF = _FIELDS["flags.matmul.fmt"][0]
_FORMAT_CODES = frozenset(int(f) for f in Format)
_INT8 = int(Format.INT8)  # a plain int: comparing with the enum member is several times slower


def _off_lim(name: str) -> tuple[int, int]:
    """A field's bit offset and the first value that does not fit in it."""
    off, width = _FIELDS[name]
    return off, 1 << width


_A_OFF, _A_LIM = _off_lim("arg0")
_B_OFF, _B_LIM = _off_lim("arg1")
_C_OFF, _C_LIM = _off_lim("arg2")
_SA_OFF, _SA_LIM = _off_lim("arg3.scales.sa")
_SB_OFF, _SB_LIM = _off_lim("arg3.scales.sb")
_TAG_OFF, _TAG_LIM = _off_lim("tag")
_SYNC_OFF = _FIELDS["sync"][0]
_LEN_LIM = 1 << _LEN_W


def reduce(op: ReduceOp, *, src: int, count: int, dst: int, tag: int = 0, wait: int | None = None,
           signal: int | None = None, signal2: int | None = None) -> int:
    """REDUCE: ``count`` accumulator words from ``src`` to one int32 in lane 0 of word ``dst``."""
    return pack_command(Opcode.REDUCE, flags={"reduce": {"op": int(ReduceOp(op))}}, length=count, arg0=src,
                        arg2=dst, tag=tag, sync=_sync_bits(wait, signal, signal2))


def vec(op: VecOp, *, a: int, count: int, dst: int, b: int = 0, b_form: VecB = VecB.VECTOR,
        dst_sram: VecDst = VecDst.ACC, tag: int = 0, wait: int | None = None, signal: int | None = None,
        signal2: int | None = None, fp8: Format | None = None) -> int:
    """VEC: ``count`` accumulator words from ``a`` through ``op`` (with ``b`` read as ``b_form``
    says) into ``count`` words from ``dst``. ``dst`` may equal ``a`` (in place), and a broadcast
    ``b`` (LANE, SCALAR: read once, first) may lie in the destination; otherwise the destination
    must not overlap the sources. ``b_form=FOLD`` folds the words into one at ``dst``; a
    conversion (CVT_I8, CVT_F8) writes ``count`` words of ``dst_sram`` (A or B) from ``dst``;
    CVT_F8 needs ``fp8`` (Format.E4M3 or E5M2), which goes into arg3."""
    flags = {"op": int(VecOp(op)), "b": int(VecB(b_form)), "dst": int(VecDst(dst_sram))}
    if (VecOp(op) == VecOp.CVT_F8) != (fp8 is not None):
        raise ValueError("CVT_F8 takes fp8=Format.E4M3 or E5M2, and no other VEC takes fp8")
    if fp8 is not None and Format(fp8) not in VEC_FP8_FORMATS:
        raise ValueError(f"fp8 must be one of {[f.name for f in VEC_FP8_FORMATS]}, not {Format(fp8).name}")
    return pack_command(Opcode.VEC, flags={"vec": flags}, length=count, arg0=a, arg1=b, arg2=dst,
                        arg3=0 if fp8 is None else int(fp8), tag=tag, sync=_sync_bits(wait, signal, signal2))


def fence(tag: int = 0, *, wait: int | None = None, signal: int | None = None) -> int:
    """FENCE: retires once the matrix engine and the reduction unit are idle (DMA is ordered by
    semaphores instead)."""
    return pack_command(Opcode.FENCE, tag=tag, sync=_sync_bits(wait, signal))


def nop(tag: int = 0, *, wait: int | None = None, signal: int | None = None) -> int:
    """NOP: retires at once (after its wait, if any): ``nop(wait=a, signal=b)`` moves a count."""
    return pack_command(Opcode.NOP, tag=tag, sync=_sync_bits(wait, signal))


def dma_load(region: int, *, sram: int, dram: int, words: int, rows: int = 1, tag: int = 0,
             wait: int | None = None, signal: int | None = None, signal2: int | None = None) -> int:
    """DMA_LOAD: ``rows`` rows of ``words`` SRAM words each, from DRAM byte ``dram`` into SRAM
    ``region`` at word ``sram``. Row ``r`` comes from ``dram + r * dram_stride`` and goes to
    ``sram + r * sram_stride`` (the load queue's strides, set by :func:`dma_stride`)."""
    return pack_command(Opcode.DMA_LOAD, flags={"dma": {"region": int(region)}}, length=words, arg0=sram, arg1=rows,
                        arg2=dram & 0xFFFF, arg3=_dram_hi(dram), tag=tag, sync=_sync_bits(wait, signal, signal2))


def dma_store(*, sram: int, dram: int, words: int, rows: int = 1, tag: int = 0, wait: int | None = None,
              signal: int | None = None, signal2: int | None = None) -> int:
    """DMA_STORE: ``rows`` rows of ``words`` ACC words from word ``sram`` to DRAM byte ``dram``
    (strides of the store queue). It completes (and signals) when the DRAM has acknowledged
    every write."""
    from .memories import Region

    return pack_command(Opcode.DMA_STORE, flags={"dma": {"region": int(Region.ACC)}}, length=words, arg0=sram,
                        arg1=rows, arg2=dram & 0xFFFF, arg3=_dram_hi(dram), tag=tag,
                        sync=_sync_bits(wait, signal, signal2))


def dma_stride(queue: DmaQueue, *, sram: int, dram: int, tag: int = 0) -> int:
    """DMA_STRIDE: the SRAM stride (words) and DRAM stride (bytes) between rows of the later DMAs
    of ``queue``, in stream order."""
    return pack_command(Opcode.DMA_STRIDE, flags={"stride": {"queue": int(DmaQueue(queue))}}, arg0=sram,
                        arg2=dram & 0xFFFF, arg3=_dram_hi(dram), tag=tag)


def _dram_hi(dram: int) -> int:
    if not isinstance(dram, (int, np_integer)) or not 0 <= dram < 1 << 32:
        raise ValueError(f"DRAM byte address must be an integer in [0, 2**32), not {dram!r}")
    return dram >> 16
