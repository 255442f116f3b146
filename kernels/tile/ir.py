"""The tile language's intermediate form: buffers, DRAM tensors and the operations on them.

A traced kernel (kernels/tile/lang.py) is a list of :class:`Op` in program order. Every op names
the buffers it reads and writes; a buffer is a tile of SRAM words that the compiler places
(kernels/tile/compiler.py). Nothing here knows an SRAM address or a semaphore: those are the
compiler's. Every op keeps the kernel source line that made it, for errors and the dump.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["Queue", "Storage", "Buffer", "TensorDecl", "Op", "Loop", "TileError"]


class TileError(ValueError):
    """A kernel the compiler refuses; the message names the kernel's source line and what to change."""


class Queue:
    """Where an op runs: the chip's in-order command stream (matrix engine, reduction and vector
    units, one at a time) or one of the two DMA queues (docs/chip.md)."""

    EXEC = "exec"
    LOAD = "load"
    STORE = "store"
    ALL = (EXEC, LOAD, STORE)


@dataclass(eq=False)
class Storage:
    """SRAM words that one or more buffers share (an in-place result shares its operand's)."""

    region: str  # "ACC", "A", "B", "SA", "SB"
    words: int
    name: str
    line: str  # the source line of the op that first wrote it
    addr: int | None = None  # set by placement
    alias: "Storage | None" = None  # merged into another storage (an in-place result)

    def root(self) -> "Storage":
        s = self
        while s.alias is not None:
            s = s.alias
        return s

    def __repr__(self) -> str:
        return f"<{self.name} {self.region}[{self.addr}:+{self.words}]>"


@dataclass(eq=False)
class Buffer:
    """A tile in SRAM: ``rows`` x ``wpr`` words (row-major, contiguous). ``scalar``: each word
    carries one value in lane 0 (a reduction's result), so it broadcasts as a per-row scalar."""

    own: Storage  # the storage it was made with; ``storage`` follows merges
    rows: int
    wpr: int
    dtype: str  # "fp32", "int32", "int8"
    scalar: bool = False

    @property
    def storage(self) -> Storage:
        return self.own.root()

    @property
    def words(self) -> int:
        return self.rows * self.wpr


@dataclass(eq=False)
class TensorDecl:
    """A tensor in DRAM: ``rows`` x ``cols`` values of ``dtype``, laid out as rows of ``wpr``
    accumulator words (a row of C values in ceil(C / LANES) words, the padding lanes holding
    ``pad``). ``role``: "in" (the host writes it), "out" (the host reads it), "const" (the
    compiler's constants, written by the host before the run)."""

    name: str
    rows: int
    cols: int
    dtype: str
    wpr: int
    pad: int  # raw 32-bit pattern of a padding lane
    role: str
    word_bytes: int
    data: object = None  # "const": the (rows, wpr, LANES) uint32 words
    dram: int | None = None  # byte address, set when the run stages it

    @property
    def nbytes(self) -> int:
        return self.rows * self.wpr * self.word_bytes


@dataclass(eq=False)
class Loop:
    """A ``tile.pipeline`` loop: its iterations' loads are issued ``stages - 1`` iterations ahead."""

    stages: int
    line: str
    iterations: int = 0


@dataclass(eq=False)
class Op:
    """One tile operation.

    ``kind`` is "load", "store", "vec", "reduce" (and later "matmul"); ``queue`` one of
    :class:`Queue`. ``reads``/``writes``: the buffers it reads and writes; ``dram_reads``/
    ``dram_writes``: (tensor, first row, rows) in DRAM. ``args``: what lowering needs (the VEC
    op and its operand form, the reduce op). ``loop``/``iteration``: the pipeline iteration
    it belongs to, if any."""

    kind: str
    queue: str
    line: str
    args: dict = field(default_factory=dict)
    reads: list[Buffer] = field(default_factory=list)
    writes: list[Buffer] = field(default_factory=list)
    dram_reads: list[tuple[TensorDecl, int, int]] = field(default_factory=list)
    dram_writes: list[tuple[TensorDecl, int, int]] = field(default_factory=list)
    loop: Loop | None = None
    iteration: int = 0
    index: int = -1  # position in the scheduled order

    def describe(self) -> str:
        a = self.args
        if self.kind == "load":
            t, r0, n = self.dram_reads[0]
            return f"load {t.name}[{r0}:{r0 + n}] -> {self.writes[0].storage.name}"
        if self.kind == "store":
            t, r0, n = self.dram_writes[0]
            return f"store {self.reads[0].storage.name} -> {t.name}[{r0}:{r0 + n}]"
        srcs = ", ".join(b.storage.name for b in self.reads)
        return f"{a.get('op', self.kind)}({srcs}) -> {self.writes[0].storage.name}"
