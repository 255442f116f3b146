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
    offset: int = 0  # first word within the storage (a view of part of a tile)
    stride: int | None = None  # words from one row to the next in SRAM (None: wpr)

    @property
    def storage(self) -> Storage:
        own = self.own
        return own if own.alias is None else own.root()

    @property
    def words(self) -> int:
        return self.rows * self.wpr

    @property
    def row_stride(self) -> int:
        return self.wpr if self.stride is None else self.stride

    @property
    def span(self) -> int:
        """Words from the first to past the last word it covers in SRAM."""
        return (self.rows - 1) * self.row_stride + self.wpr


@dataclass(eq=False)
class TensorDecl:
    """A tensor in DRAM: ``rows`` x ``cols`` values of ``dtype`` (its shape as the host sees it),
    stored as ``drows`` rows of ``wpr`` words of ``word_bytes`` each, in one of the layouts:

    * "rows": a row of C values in ceil(C / LANES) accumulator words, the padding lanes holding
      ``pad`` (``drows`` = rows);
    * "a_panels": int8 A operand, panel-major: ``drows`` = ceil(rows / ROWS) panels of ``wpr`` =
      K words of ROWS bytes (word k of panel p is A[p*ROWS:(p+1)*ROWS, k]);
    * "b_panels": int8 B operand (K x N), by column panels: ``drows`` = ceil(N / COLS) panels of
      K words of COLS bytes;
    * "c_tiles": int32 result, tile-major: ``drows`` = tile rows, each ``wpr`` = (tiles per row) x
      ROWS accumulator words, so the tiles of one tile row are contiguous.

    An FP operand (dtype "e4m3", "e5m2", "e2m1": a code a byte, as the engine reads them) names
    its ``scales``: a tensor of dtype "e8m0" in the same panel layout, one code per 32 K steps.

    ``role``: "in" (the host writes it), "out" (the host reads it), "const" (the compiler's
    constants, written by the host before the run)."""

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
    layout: str = "rows"
    drows: int | None = None  # stored rows (None: rows)
    complement: bool = False  # every word stored as its bitwise complement (FL-RU-001's MAX as ~MIN(~x))
    scales: "TensorDecl | None" = None  # an FP operand's E8M0 block scales (their own tensor, same panels)

    @property
    def stored_rows(self) -> int:
        return self.rows if self.drows is None else self.drows

    @property
    def nbytes(self) -> int:
        return self.stored_rows * self.wpr * self.word_bytes


@dataclass(eq=False)
class Loop:
    """A ``tile.pipeline`` loop: its iterations' loads are issued ``stages - 1`` iterations ahead."""

    stages: int
    line: str
    iterations: int = 0


@dataclass(eq=False)
class Op:
    """One tile operation.

    ``kind`` is "load", "store", "vec", "reduce", "matmul" or "fence"; ``queue`` one of
    :class:`Queue`. ``reads``/``writes``: the buffers it reads and writes; ``dram_reads``/
    ``dram_writes``: (tensor, first row, rows, first word, words) in DRAM. ``args``: what lowering needs (the VEC
    op and its operand form, the reduce op). ``loop``/``iteration``: the pipeline iteration
    it belongs to, if any."""

    kind: str
    queue: str
    line: str
    args: dict = field(default_factory=dict)
    reads: list[Buffer] = field(default_factory=list)
    writes: list[Buffer] = field(default_factory=list)
    dram_reads: list[tuple] = field(default_factory=list)
    dram_writes: list[tuple] = field(default_factory=list)
    loop: Loop | None = None
    iteration: int = 0
    index: int = -1  # position in the scheduled order

    def describe(self) -> str:
        a = self.args
        if self.kind == "load":
            t, r0, n, w0, nw = self.dram_reads[0]
            return f"load {t.name}[{r0}:{r0 + n}, {w0}:{w0 + nw}] -> {self.writes[0].storage.name}"
        if self.kind == "store":
            t, r0, n, w0, nw = self.dram_writes[0]
            return f"store {self.reads[0].storage.name} -> {t.name}[{r0}:{r0 + n}, {w0}:{w0 + nw}]"
        srcs = ", ".join(b.storage.name for b in self.reads)
        return f"{a.get('op', self.kind)}({srcs}) -> {self.writes[0].storage.name}"
