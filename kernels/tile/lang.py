"""The tile language: what a kernel author writes (docs/tile.md).

A kernel is a Python function over DRAM tensors. The compiler runs it once, with every shape
known, and records what it does (a trace, as Triton and Pallas trace their kernels): each
``load``, ``store`` and arithmetic call becomes an :class:`~kernels.tile.ir.Op` on tiles whose
SRAM words, semaphores and command words are left to the compiler. Python ``for`` loops unroll;
``pipeline(...)`` marks a loop whose loads the compiler issues ahead of the work.

    def softmax(x, out, *, rows):
        for r in tile.pipeline(range(0, x.rows, rows), stages=2):
            t = tile.load(x[r:r + rows])
            t = tile.exp(t - tile.row_max(t))
            tile.store(out[r:r + rows], t * tile.recip(tile.row_sum(t)))
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
from dataclasses import dataclass

import numpy as np

from rtl.isa import BLOCK  # K steps per E8M0 block scale of the FP formats

from . import errata as _errata
from .ir import Buffer, Loop, Op, Queue, Storage, TensorDecl, TileError

FP_FORMATS = ("e4m3", "e5m2", "e2m1")
VEC_FP8 = ("e4m3", "e5m2")  # what VEC CVT_F8 converts to

__all__ = ["Tile", "TensorRef", "TensorView", "Trace", "pipeline", "load", "store", "exp", "recip", "rsqrt",
           "relu", "maximum", "minimum", "row_sum", "row_max", "row_min", "scalar", "scratch", "constant_row", "mask_tail", "matmul",
           "dequant", "requant", "i2f", "col_max", "col_sum", "to_b", "current"]

_HERE = os.path.dirname(os.path.abspath(__file__))
_ROOT = os.path.dirname(os.path.dirname(_HERE))  # the project: kernel lines are named from here
_STACK: list["Trace"] = []


def current() -> "Trace":
    if not _STACK:
        raise RuntimeError("tile-language calls work only while the compiler traces a kernel "
                           "(kernels.tile.compile or a KernelSpec), not on their own")
    return _STACK[-1]


def _caller_line() -> str:
    """``file:line`` of the innermost frame outside kernels/tile: the kernel's source line."""
    f = sys._getframe(1)
    while f is not None and _display_path(f.f_code.co_filename) is None:
        f = f.f_back
    if f is None:
        return "?"
    return f"{_display_path(f.f_code.co_filename)}:{f.f_lineno}"


@functools.lru_cache(maxsize=None)
def _display_path(filename: str) -> str | None:
    """None for a file of kernels/tile itself, else the path shown (relative to the repository);
    cached, as every traced op asks (path arithmetic was a tenth of a large kernel's compile)."""
    path = os.path.abspath(filename)
    if os.path.dirname(path) == _HERE:
        return None
    return os.path.relpath(path, _ROOT) if path.startswith(_ROOT + os.sep) else path


class Trace:
    """The ops a kernel emits while it runs under the compiler."""

    def __init__(self, lanes: int, word_bytes: int, vector: bool = True, config=None):
        self.lanes = lanes
        self.word_bytes = word_bytes
        self.vector = vector
        self.config = config
        self.ops: list[Op] = []
        self.tensors: list[TensorDecl] = []
        self.loop: Loop | None = None
        self.iteration = 0
        self.loops: list[Loop] = []
        self._names: dict[str, int] = {}
        self.consts: dict = {}  # each distinct constant is loaded once
        self.reduce_constraints = None  # workarounds.ReduceConstraints of the errata in force, if any
        self.lowp_constraints = None  # workarounds.LowpConstraints, likewise
        self.complemented: dict[int, Storage] = {}  # tiles holding ~values (FL-RU-001), by id(storage)
        self.zero_pair: Tile | None = None  # FL-RU-002's two scratch words, the second zero

    def __enter__(self):
        _STACK.append(self)
        return self

    def __exit__(self, *exc):
        _STACK.pop()
        return False

    def name(self, base: str) -> str:
        n = self._names.get(base, 0)
        self._names[base] = n + 1
        return f"{base}{n}"

    def tensor(self, name: str, rows: int, cols: int, dtype: str, pad: int, role: str, data=None,
               layout: str = "rows") -> "TensorRef":
        cfg = self.config
        if layout == "rows":
            decl = TensorDecl(name, rows, cols, dtype, -(-cols // self.lanes), pad, role, self.word_bytes, data)
            rc = self.reduce_constraints
            if rc is not None and rc.even_sum_count and dtype == "int32" and role == "scratch" and decl.wpr % 2:
                decl.wpr += 1  # FL-RU-002: int32 rows of an even word count (the extra word is padding)
        elif layout == "a_panels":  # (M, K) int8: ceil(M / ROWS) panels of K words of ROWS bytes
            decl = TensorDecl(name, rows, cols, dtype, cols, 0, role, cfg.rows, layout=layout,
                              drows=-(-rows // cfg.rows))
        elif layout == "b_panels":  # (K, N) int8: ceil(N / COLS) panels of K words of COLS bytes
            decl = TensorDecl(name, rows, cols, dtype, rows, 0, role, cfg.cols, layout=layout,
                              drows=-(-cols // cfg.cols))
        elif layout == "c_tiles":  # (M, N) int32: tile rows of (N / COLS) tiles of ROWS words
            decl = TensorDecl(name, rows, cols, dtype, -(-cols // cfg.cols) * cfg.rows, 0, role, self.word_bytes,
                              layout=layout, drows=-(-rows // cfg.rows))
        else:
            raise TileError(f"tensor {name}: layout must be rows, a_panels, b_panels or c_tiles, not {layout!r}")
        self.tensors.append(decl)
        return TensorRef(decl)

    def emit(self, op: Op) -> Op:
        op.loop, op.iteration = self.loop, self.iteration
        self.ops.append(op)
        return op

    def new_buffer(self, base: str, rows: int, wpr: int, dtype: str, scalar: bool, line: str,
                   region: str = "ACC") -> Buffer:
        st = Storage(region, rows * wpr, self.name(base), line)
        return Buffer(st, rows, wpr, dtype, scalar)


@dataclass(frozen=True)
class TensorView:
    """Stored rows ``r0:r0+n`` (panels, tile rows), words ``w0:w0+nw`` of each, of a DRAM tensor
    (what ``tensor[r0:r1]`` or ``tensor[r0:r1, w0:w1]`` gives)."""

    tensor: TensorDecl
    r0: int
    n: int
    w0: int = 0
    nw: int | None = None

    @property
    def words(self) -> int:
        return self.tensor.wpr if self.nw is None else self.nw


class TensorRef:
    """A DRAM tensor as a kernel sees it: ``.rows``, ``.cols``, ``.dtype`` and row slices."""

    def __init__(self, decl: TensorDecl):
        self.decl = decl

    rows = property(lambda self: self.decl.rows)
    cols = property(lambda self: self.decl.cols)
    dtype = property(lambda self: self.decl.dtype)
    name = property(lambda self: self.decl.name)
    panels = property(lambda self: self.decl.stored_rows)  # panels (A, B), tile rows (C) or rows
    words = property(lambda self: self.decl.wpr)  # words per stored row: K steps (A, B), ROWS per tile (C)

    @property
    def steps(self) -> int:
        """K of a GEMM operand: the words of each panel."""
        return self.decl.wpr

    def __getitem__(self, key) -> TensorView:
        """``t[r0:r1]``: stored rows (rows, A/B panels, C tile rows); ``t[r0:r1, w0:w1]`` also
        cuts each to words ``w0:w1`` (K steps of a panel; for C, ROWS words per tile). A range
        past the end is cut to the tensor: the ragged last tile."""
        line = _caller_line()
        d = self.decl
        if not isinstance(key, tuple):
            key = (key,)
        if len(key) > 2:
            raise TileError(f"{line}: {self.name}[...] takes rows, or rows and words; got {len(key)} indices")
        r0, r1 = self._range(key[0], d.stored_rows, "rows", line)
        if d.layout == "c_tiles" and len(key) == 2:  # C: the second index counts tiles of ROWS words
            per = current().config.rows
            t0, t1 = self._range(key[1], d.wpr // per, "tiles", line)
            return TensorView(d, r0, r1 - r0, t0 * per, (t1 - t0) * per)
        w0, w1 = self._range(key[1], d.wpr, "words", line) if len(key) == 2 else (0, d.wpr)
        return TensorView(d, r0, r1 - r0, w0, w1 - w0)

    def _range(self, k, n: int, what: str, line: str) -> tuple[int, int]:
        if isinstance(k, (int, np.integer)):
            k = slice(int(k), int(k) + 1)
        if not isinstance(k, slice) or k.step not in (None, 1):
            raise TileError(f"{line}: {self.name}[...] takes an index or a range a:b (step 1), not {k!r}")
        a = 0 if k.start is None else k.start
        b = n if k.stop is None else min(k.stop, n)
        if not 0 <= a < b <= n:
            raise TileError(f"{line}: {what} {a}:{b} are outside {self.name}, which has {n} {what}")
        return a, b

    def __repr__(self) -> str:
        return f"TensorRef({self.name}: {self.rows}x{self.cols} {self.dtype})"


class Tile:
    """A tile in SRAM. Arithmetic operators make VEC operations; see the module functions.
    ``scales``: an FP operand tile's E8M0 block scales (a tile in SA or SB), loaded with it."""

    def __init__(self, buf: Buffer, scales: "Tile | None" = None):
        self.buf = buf
        self.scales = scales

    rows = property(lambda self: self.buf.rows)
    words_per_row = property(lambda self: self.buf.wpr)

    def reshape(self, rows: int, words_per_row: int) -> "Tile":
        """The same words as ``rows`` rows of ``words_per_row`` (a tile is contiguous): a GEMM
        result of D words stored as D rows of one word, say."""
        b = self.buf
        if rows * words_per_row != b.words or b.row_stride != b.wpr:
            raise TileError(f"{_caller_line()}: {b.storage.name} is {b.rows} x {b.wpr} words; it cannot be "
                            f"{rows} x {words_per_row}")
        return Tile(Buffer(b.own, rows, words_per_row, b.dtype, b.scalar, b.offset))

    def __getitem__(self, row) -> "Tile":
        """Row ``row`` of the tile, or rows ``a:b`` (a view of the same words: a tile row of a GEMM's
        result, or some of a B tile's panels for a MATMUL of part of it); ``t[r, w0:w1]``: words
        ``w0:w1`` of row ``r`` (the bias words of some tile columns, say)."""
        b = self.buf
        if isinstance(row, tuple):
            if len(row) != 2 or not isinstance(row[1], slice):
                raise TileError(f"{_caller_line()}: a tile takes t[row], t[r0:r1] or t[row, w0:w1], not t[{row!r}]")
            r = self[row[0]].buf
            if r.rows != 1:
                raise TileError(f"{_caller_line()}: t[row, w0:w1] takes one row, not {row[0]!r}")
            w0, w1, step = row[1].indices(b.wpr)
            if step != 1 or w1 <= w0:
                raise TileError(f"{_caller_line()}: {b.storage.name} has words 0..{b.wpr - 1} per row; a slice of "
                                f"them is a:b with a < b and no step, not {row[1].start}:{row[1].stop}")
            return Tile(Buffer(r.own, 1, w1 - w0, r.dtype, r.scalar, r.offset + w0))  # no whole blocks: no scales
        # an FP operand's panels keep their block scales (a row of its scale tile each)
        scales = None if self.scales is None else self.scales[row]
        if isinstance(row, slice):
            r0, r1, step = row.indices(b.rows)
            if step != 1 or r1 <= r0:
                raise TileError(f"{_caller_line()}: {b.storage.name} has rows 0..{b.rows - 1}; a slice of them is "
                                f"a:b with a < b and no step, not {row.start}:{row.stop}:{row.step}")
            return Tile(Buffer(b.own, r1 - r0, b.wpr, b.dtype, b.scalar, b.offset + r0 * b.row_stride, b.stride),
                        scales)
        if not isinstance(row, (int, np.integer)) or not 0 <= row < b.rows:
            raise TileError(f"{_caller_line()}: {b.storage.name} has rows 0..{b.rows - 1}, not {row!r}")
        return Tile(Buffer(b.own, 1, b.wpr, b.dtype, b.scalar, b.offset + int(row) * b.row_stride), scales)

    def __add__(self, other):
        return _binary("iadd" if self.buf.dtype == "int32" else "fadd", self, other)

    def __radd__(self, other):
        return _binary("iadd" if self.buf.dtype == "int32" else "fadd", self, other)

    def __sub__(self, other):
        return _binary("fsub", self, other)

    def __mul__(self, other):
        return _binary("fmul", self, other)

    def __rmul__(self, other):
        return _binary("fmul", self, other)

    def __repr__(self) -> str:
        kind = "scalars" if self.buf.scalar else "words"
        return f"Tile({self.buf.storage.name}: {self.rows}x{self.buf.wpr} {kind})"


# ---- loops -----------------------------------------------------------------------------------

def pipeline(iterable, stages: int = 2):
    """Iterate, letting the compiler issue each iteration's loads ``stages - 1`` iterations early
    (``stages=2`` is double buffering; ``stages=1`` runs iterations one after another)."""
    tr = current()
    line = _caller_line()
    if not isinstance(stages, int) or isinstance(stages, bool) or not 1 <= stages <= 4:
        raise TileError(f"{line}: pipeline(stages=...) takes an integer from 1 to 4, not {stages!r}")
    if tr.loop is not None:
        raise TileError(f"{line}: pipeline loops do not nest (the outer loop at {tr.loop.line} is one); "
                        f"make the inner loop a plain Python loop")
    loop = Loop(stages, line)
    tr.loops.append(loop)
    tr.loop = loop
    try:
        for i, v in enumerate(iterable):
            tr.iteration = i
            loop.iterations = i + 1
            yield v
    finally:
        tr.loop, tr.iteration = None, 0


# ---- memory ----------------------------------------------------------------------------------

def load(view: TensorView, *, scalar: bool = False) -> Tile:
    """DMA rows of a DRAM tensor into a new tile (the compiler places it in the accumulator SRAM;
    A and B operands in their SRAMs). ``scalar``: the tile's words carry one value each, in lane 0
    (a value the host computed, such as a quantization scale), and broadcast as scalars."""
    tr = current()
    line = _caller_line()
    if isinstance(view, TensorRef):
        view = view[:]
    if not isinstance(view, TensorView):
        raise TileError(f"{line}: load takes rows of a DRAM tensor (x[r0:r1]), not {type(view).__name__}")
    t = view.tensor
    region = {"a_panels": "A", "b_panels": "B"}.get(t.layout, "ACC")
    if t.dtype == "e8m0":  # block scales: the scale SRAM beside their operand's
        region = "S" + region
    buf = tr.new_buffer(t.name, view.n, view.words, t.dtype, scalar, line, region)
    tr.emit(Op("load", Queue.LOAD, line, writes=[buf], dram_reads=[(t, view.r0, view.n, view.w0, view.words)]))
    if t.scales is None:
        return Tile(buf)
    # an FP operand: its blocks' scales come with it (a block is 32 K steps of one MATMUL)
    # a MATMUL reads a scale word per BLOCK K steps from its first: a tile starts at a block, or
    # lies within one (a key tile of 8 of a block's 32 keys reads that block's scale)
    if view.w0 % BLOCK and view.w0 // BLOCK != (view.w0 + view.words - 1) // BLOCK:
        raise TileError(f"{line}: {t.name} holds {t.dtype} codes in blocks of {BLOCK} K steps, each with its scale; "
                        f"a tile starts at a block or lies within one, not steps {view.w0}:{view.w0 + view.words}")
    s = t.scales
    b0, nb = view.w0 // BLOCK, -(-view.words // BLOCK)
    sbuf = tr.new_buffer(s.name, view.n, nb, s.dtype, False, line, "S" + region)
    tr.emit(Op("load", Queue.LOAD, line, writes=[sbuf], dram_reads=[(s, view.r0, view.n, b0, nb)]))
    return Tile(buf, Tile(sbuf))


def store(view: TensorView, tile: Tile) -> None:
    """DMA a tile into rows of a DRAM tensor."""
    tr = current()
    line = _caller_line()
    if not isinstance(view, TensorView) or not isinstance(tile, Tile):
        raise TileError(f"{line}: store takes (rows of a DRAM tensor, a tile), not "
                        f"({type(view).__name__}, {type(tile).__name__})")
    t = view.tensor
    if t.role in ("in", "const"):
        raise TileError(f"{line}: {t.name} is an input of the kernel; store into an output tensor")
    b = tile.buf
    if b.scalar and view.words != 1:
        raise TileError(f"{line}: the tile {b.storage.name} holds one scalar per row (a reduction); it is "
                        f"stored into one word per row (out[r0:r1] of a 1-column tensor, or p[r0:r1, j:j + 1])")
    if b.storage.region != "ACC":
        raise TileError(f"{line}: {b.storage.name} is in the {b.storage.region} SRAM; stores read the accumulator SRAM")
    if (b.rows, b.wpr) != (view.n, view.words):
        raise TileError(f"{line}: the tile {b.storage.name} is {b.rows} rows of {b.wpr} words, but "
                        f"{t.name}[{view.r0}:{view.r0 + view.n}] is {view.n} rows of {view.words} words")
    tr.emit(Op("store", Queue.STORE, line, reads=[b], dram_writes=[(t, view.r0, view.n, view.w0, view.words)]))


def scratch(name: str, rows: int, words: int, dtype: str = "int32", pad: int = 0) -> TensorRef:
    """A DRAM tensor of the kernel's own, ``rows`` rows of ``words`` words (layout "rows"): stored
    into and loaded back by the kernel (partial results, spilled tiles). The host fills it with
    ``pad`` (raw 32 bits) before the run and never reads it: words the kernel does not store (a
    padding word an erratum's layout rule added) read as ``pad``."""
    tr = current()
    if dtype not in ("fp32", "int32"):
        raise TileError(f"{_caller_line()}: a scratch tensor holds fp32 or int32, not {dtype!r}")
    return tr.tensor(tr.name(name), rows, words * tr.lanes, dtype, pad & 0xFFFFFFFF, "scratch")


def scalar(value: float | None = None, *, bits: int | None = None) -> Tile:
    """An fp32 constant in lane 0 of one word (``value``, or its raw ``bits``): it broadcasts over
    every lane of every word. The compiler loads each distinct constant once."""
    tr = current()
    if (value is None) == (bits is None):
        raise TileError(f"{_caller_line()}: scalar takes a value or bits=, one of the two")
    words = np.zeros((1, 1, tr.lanes), np.uint32)
    words[0, 0, 0] = np.float32(value).view(np.uint32) if bits is None else np.uint32(bits)
    return _const(tr, "c", words, scalar=True)


def constant_row(values: np.ndarray) -> Tile:
    """One row of fp32 words made by the host (``values``: (words, LANES) uint32 bit patterns),
    loaded once."""
    tr = current()
    v = np.asarray(values, np.uint32)
    if v.ndim != 2 or v.shape[1] != tr.lanes:
        raise TileError(f"{_caller_line()}: constant_row takes (words, {tr.lanes}) uint32 bit patterns, "
                        f"not shape {v.shape}")
    return _const(tr, "row", v[None], scalar=False)


def _const(tr: Trace, base: str, words: np.ndarray, scalar: bool) -> Tile:
    key = (words.tobytes(), words.shape, scalar)
    if key in tr.consts:
        return tr.consts[key]
    line = _caller_line()
    ref = tr.tensor(tr.name(base), words.shape[0], words.shape[1] * tr.lanes, "fp32", 0, "const", words)
    t = load(ref[:])
    t.buf.scalar = scalar
    t.buf.storage.line = line
    tr.consts[key] = t
    return t


# ---- the vector unit ---------------------------------------------------------------------------

_UNARY = ("exp", "recip", "rsqrt", "relu")


def _unary(op: str, t: Tile) -> Tile:
    tr = current()
    line = _caller_line()
    if not isinstance(t, Tile):
        raise TileError(f"{line}: {op} takes a tile, not {type(t).__name__}")
    _need_vector(tr, line, op)
    a = t.buf
    if (a.dtype == "int32") != (op == "i2f"):
        raise TileError(f"{line}: {op} takes an {'int32' if op == 'i2f' else 'fp32'} tile; {a.storage.name} is "
                        f"{a.dtype}" + ("" if op == "i2f" else " (tile.i2f converts int32)"))
    out = tr.new_buffer(op, a.rows, a.wpr, "fp32", a.scalar, line)
    tr.emit(Op("vec", Queue.EXEC, line, {"op": op, "cmds": [(op, 0, None, "vector", a.words, 0)]},
               reads=[a], writes=[out]))
    return Tile(out)


def exp(t: Tile) -> Tile:
    """e**x of every lane (rtl/special.py's algorithm)."""
    return _unary("exp", t)


def i2f(t: Tile) -> Tile:
    """fp32 of every int32 lane, ties to even (VEC I2F)."""
    return _unary("i2f", t)


def recip(t: Tile) -> Tile:
    """1/x of every lane."""
    return _unary("recip", t)


def rsqrt(t: Tile) -> Tile:
    """1/sqrt(x) of every lane."""
    return _unary("rsqrt", t)


def relu(t: Tile) -> Tile:
    """max(x, +0) of every lane."""
    return _unary("relu", t)


def maximum(a: Tile, b) -> Tile:
    """IEEE 754-2019 maximum, lane by lane (broadcasting like ``+``)."""
    return _binary("fmax", a, b)


def minimum(a: Tile, b) -> Tile:
    """IEEE 754-2019 minimum, lane by lane (broadcasting like ``+``)."""
    return _binary("fmin", a, b)


def _binary(op: str, x, y) -> Tile:
    """``op(x, y)`` lane by lane. ``y`` broadcasts over ``x`` when it is one scalar, one scalar per
    row of ``x`` (a reduction's result) or one row of words; a Python number becomes a scalar."""
    tr = current()
    line = _caller_line()
    _need_vector(tr, line, op)
    if isinstance(y, (int, float, np.floating)) and not isinstance(y, bool):
        y = scalar(float(y))
    if isinstance(x, (int, float, np.floating)) and isinstance(y, Tile) and op in ("fadd", "fmul"):
        x, y = y, scalar(float(x))
    if not isinstance(x, Tile) or not isinstance(y, Tile):
        raise TileError(f"{line}: {op} takes tiles (or a number for the second operand), not "
                        f"{type(x).__name__} and {type(y).__name__}")
    a, b = x.buf, y.buf
    tiles = tr.config.rows if tr.config is not None else None  # words of one C tile
    if b.scalar and b.rows == 1:
        cmds = [(op, 0, 0, "scalar", a.words, 0)]  # one value for every lane of every word
    elif (a.rows, a.wpr, a.scalar) == (b.rows, b.wpr, b.scalar):
        cmds = [(op, 0, 0, "vector", a.words, 0)]
    elif not b.scalar and b.rows == 1 and b.wpr == 1:
        cmds = [(op, 0, 0, "lane", a.words, 0)]  # one word: its lanes for every word (a column's value)
    elif not a.scalar and not b.scalar and b.wpr == 1 and b.rows == a.rows:
        cmds = [(op, r * a.wpr, r, "lane", a.wpr, r * a.wpr) for r in range(a.rows)]  # a row's word (col_max per row)
    elif not a.scalar and not b.scalar and a.words == b.words and b.rows == 1:
        cmds = [(op, 0, 0, "vector", a.words, 0)]  # one row of as many words: word for word
    elif b.scalar and b.rows == a.rows and b.wpr == 1:
        cmds = [(op, r * a.wpr, r, "scalar", a.wpr, r * a.wpr) for r in range(a.rows)]  # a row's scalar
    elif not b.scalar and b.rows == 1 and b.wpr == a.wpr and not a.scalar:
        cmds = [(op, r * a.wpr, 0, "vector", a.wpr, r * a.wpr) for r in range(a.rows)]  # one row for every row
    elif (not a.scalar and not b.scalar and b.rows == 1 and tiles and a.wpr == b.wpr * tiles
          and a.dtype == "int32"):
        # a GEMM result's rows, one word of b per C tile (lane j: column j's bias or parameters)
        cmds = [(op, r * a.row_stride + q * tiles, q, "lane", tiles, r * a.wpr + q * tiles)
                for r in range(a.rows) for q in range(b.wpr)]
    elif a.scalar and not b.scalar and a.rows == 1 and op in ("fadd", "fmul", "fmax", "fmin"):
        return _binary(op, y, x)
    else:
        raise TileError(f"{line}: cannot broadcast {op} of {_shape(a)} with {_shape(b)}: the second operand "
                        f"must have the first's shape, be one scalar, one scalar per row or one row of words")
    if op == "deq" and a.dtype != "int32":
        raise TileError(f"{line}: dequant takes an int32 tile (a MATMUL's result), not {a.dtype}")
    if op in _INT_OPS and (a.dtype, b.dtype) != ("int32", "int32"):
        raise TileError(f"{line}: {_INT_OPS[op]} takes int32 tiles, not {a.storage.name} ({a.dtype}) and "
                        f"{b.storage.name} ({b.dtype})")
    if op != "deq" and op not in _INT_OPS and a.dtype != "fp32":
        raise TileError(f"{line}: {op} works on fp32 tiles; {a.storage.name} is {a.dtype} (tile.dequant converts "
                        f"int32 results; int32 + int32 adds with wrap-around)")
    out = tr.new_buffer(op, a.rows, a.wpr, "int32" if op in _INT_OPS else "fp32", a.scalar, line)
    tr.emit(Op("vec", Queue.EXEC, line, {"op": op, "cmds": cmds}, reads=[a, b], writes=[out]))
    return Tile(out)


# int32 operations: the sum of two int32 tiles (wrapping), requantization (int32 -> int8)
_INT_OPS = {"iadd": "int32 + (IADD)", "requant": "requant"}


def requant(t: Tile, params: Tile) -> Tile:
    """int8 of an int32 tile, ``clamp(round_half_away(t * mult / 2**shift), lo, 127)`` with each
    lane's fixed-point multiplier, shift and ReLU flag from ``params`` (int32 words of
    golden.vector.requant_params: one word per C tile, lane j for column j; one word for every
    word; or the tile's shape): VEC REQUANT. The result holds the int8 values sign-extended in
    int32 lanes, as the store moves them."""
    return _binary("requant", t, params)


def dequant(t: Tile, scale) -> Tile:
    """fp32 of an int32 tile (a MATMUL's result) times ``scale`` (a number, one scalar, one scalar
    per row or one word of per-lane scales): VEC DEQ, the two steps rounded as I2F then FMUL."""
    return _binary("deq", t, scale)


def col_max(t: Tile, *, per_row: bool = False) -> Tile:
    """The maximum over all the tile's words, lane by lane: one word (VEC FOLD). For a GEMM result
    laid out as S^T (a word a key, a lane a query), the max over the keys of each query.
    ``per_row``: over each row's words, one word per row (a FOLD per row)."""
    return _fold("fmax", t, per_row)


def col_sum(t: Tile, *, per_row: bool = False) -> Tile:
    """The sum over all the tile's words, lane by lane, left to right: one word (VEC FOLD);
    ``per_row``: over each row's words, one word per row."""
    return _fold("fadd", t, per_row)


def _fold(op: str, t: Tile, per_row: bool) -> Tile:
    tr = current()
    line = _caller_line()
    _need_vector(tr, line, op)
    a = t.buf
    if a.scalar or a.dtype != "fp32":
        raise TileError(f"{line}: column reductions take a tile of fp32 words, not {_shape(a)} {a.dtype}")
    if per_row:
        out = tr.new_buffer(f"col_{op[1:]}", a.rows, 1, "fp32", False, line)
        cmds = [(op, r * a.row_stride, None, "fold", a.wpr, r) for r in range(a.rows)]
    else:
        if a.rows > 1 and a.row_stride != a.wpr:
            raise TileError(f"{line}: a column reduction of all of {_shape(a)} needs its rows contiguous in SRAM "
                            f"(per_row=True reduces each row)")
        out = tr.new_buffer(f"col_{op[1:]}", 1, 1, "fp32", False, line)
        cmds = [(op, 0, None, "fold", a.words, 0)]
    tr.emit(Op("vec", Queue.EXEC, line, {"op": f"col_{op[1:]}", "cmds": cmds}, reads=[a], writes=[out]))
    return Tile(out)


def to_b(t: Tile, scale, *, by: str = "a", fmt: str = "int8") -> Tile:
    """The B operand of a next MATMUL from an fp32 tile laid out as a GEMM result, so that a word
    of ``t`` (one row of the result, a value per column) becomes one K step of B. ``by="a"`` (a
    ``matmul(by="a")`` result, ``pa`` tile rows of ``pb`` x ROWS words): ``pb`` panels of
    ``pa`` x ROWS K steps; ``by="b"`` (a ``matmul(by="b")`` result): each row of ``t`` is one
    panel, its words the K steps in order (one command for the whole tile). A result computed
    transposed (S^T = K Q^T, H^T = W^T X^T) is then the right-hand operand of the next product
    (O^T = V^T P^T, Y^T = W2^T H^T).

    ``fmt="int8"``: ``int8(t * scale)`` (nearest even, saturating; VEC CVT_I8), whose product the
    kernel rescales itself. ``fmt="e4m3"`` or ``"e5m2"``: the FP8 codes of ``t * scale`` (VEC
    CVT_F8), ``scale`` a power of two (a number, not a tile), with the block scale ``1 / scale``
    for every block of every panel (E8M0 words the compiler loads once into SB): the tile then
    stands for ``t`` itself, and an FP8 MATMUL with it gives its product in ``t``'s units."""
    tr = current()
    line = _caller_line()
    _need_vector(tr, line, "to_b")
    a = t.buf
    rows = tr.config.rows
    if by not in ("a", "b"):
        raise TileError(f"{line}: to_b's by is \"a\" or \"b\" (as the matmul that made the tile), not {by!r}")
    if fmt not in ("int8",) + VEC_FP8:
        raise TileError(f"{line}: to_b converts to int8 or FP8 ({', '.join(VEC_FP8)}), not {fmt!r}")
    if a.dtype != "fp32" or a.scalar or a.wpr % rows:
        raise TileError(f"{line}: to_b takes an fp32 tile laid out as a GEMM result (words per row a multiple "
                        f"of {rows}), not {_shape(a)} {a.dtype}")
    code = None
    if fmt != "int8":
        if fmt not in tr.config.formats:
            raise TileError(f"{line}: this chip was built without the {fmt} format (its formats: "
                            f"{', '.join(tr.config.formats)}; --formats chooses them)")
        e = np.log2(float(scale)) if isinstance(scale, (int, float, np.floating)) and scale > 0 else None
        if e is None or isinstance(scale, bool) or e != int(e) or not -127 <= -e <= 127:
            raise TileError(f"{line}: to_b(fmt={fmt!r}) takes a power of two for its scale (P * 2^e, block "
                            f"scale 2^-e, an E8M0 code), not {scale!r}")
        code = 127 - int(e)
        lc = tr.lowp_constraints
        if lc is not None and lc.fp8_subnormals_flushed:  # FL-NU-001 (kernels/tile/errata.py)
            t = _flush_fp8_subnormals(t, float(scale), fmt, line)
            a = t.buf
    if isinstance(scale, (int, float, np.floating)) and not isinstance(scale, bool):
        scale = scalar(float(scale))
    sb = scale.buf
    if not (sb.scalar and sb.rows == 1):
        raise TileError(f"{line}: to_b's scale is one number (tile.scalar), not {_shape(sb)}")
    cvt = "cvt_i8" if fmt == "int8" else "cvt_f8"
    if by == "b":
        out = tr.new_buffer("b_of_" + a.storage.name, a.rows, a.wpr, fmt, False, line, region="B")
        if a.row_stride == a.wpr:
            cmds = [(cvt, 0, 0, "scalar", a.words, 0)]
        else:
            cmds = [(cvt, r * a.row_stride, 0, "scalar", a.wpr, r * a.wpr) for r in range(a.rows)]
    else:
        pa, pb = a.rows, a.wpr // rows
        out = tr.new_buffer("b_of_" + a.storage.name, pb, pa * rows, fmt, False, line, region="B")
        cmds = [(cvt, p * a.row_stride + q * rows, 0, "scalar", rows, q * pa * rows + p * rows)
                for p in range(pa) for q in range(pb)]
    args = {"op": "to_b", "cmds": cmds, "dst_sram": "B"}
    if code is not None:
        args["fp8"] = fmt
    tr.emit(Op("vec", Queue.EXEC, line, args, reads=[a, sb], writes=[out]))
    return Tile(out, None if code is None else _block_scales(tr, out.rows, out.wpr, code, line))


def _flush_fp8_subnormals(t: Tile, scale: float, fmt: str, line: str) -> Tile:
    """FL-NU-001's lowering rule of ``to_b`` (kernels/tile/errata.py): ``t`` with every value whose
    FP8 code (of ``t * scale``) would be subnormal set to +0, the rest unchanged bit for bit, in
    vector-unit operations (no compare: ``x * min(relu(x - T^-) * 2^k, 1)``). The rule needs
    ``x >= 0``: a tile made by ``exp`` or ``relu`` (P of attention); any other is refused."""
    from golden.quant import FORMATS

    tr = current()
    thr = 2.0 ** FORMATS[fmt].emin / scale  # x >= thr keeps a normal code (scale is a power of two)
    src = next((op for op in reversed(tr.ops) if any(w.own is t.buf.own for w in op.writes)), None)
    if src is None or src.args.get("op") not in ("exp", "relu"):
        raise TileError(f"{line}: on this revision FP8 subnormals read as zero (FL-NU-001); its mitigation flushes "
                        f"them before the conversion, and needs a tile known to be non-negative (made by tile.exp "
                        f"or tile.relu), which {t.buf.storage.name} is not")
    x = t
    if not 2.0 ** -100 <= thr <= 2.0 ** 100:
        raise TileError(f"{line}: FL-NU-001's flush of FP8 subnormals needs a threshold in the normal fp32 range; "
                        f"to_b's scale {scale} puts it at {thr}")
    below = float(np.nextafter(np.float32(thr), np.float32(0)))  # the largest float below thr
    big = 2.0 ** 24 / thr  # (x - below) is at least thr * 2^-24 once x >= thr
    keep = minimum(relu(x - below) * big, 1.0)  # 1 where the code is normal, else +0
    return t * keep


def _block_scales(tr: Trace, panels: int, steps: int, code: int, line: str) -> Tile:
    """SB words holding the E8M0 ``code`` for every block of ``panels`` B panels of ``steps`` K
    steps, loaded once per distinct shape and code."""
    key = ("block_scales", panels, steps, code)
    if key in tr.consts:
        return tr.consts[key]
    nblk = -(-steps // BLOCK)
    cols = tr.config.cols
    ref = tr.tensor(tr.name("bscale"), nblk, panels * cols, "e8m0", 0, "const", layout="b_panels")
    ref.decl.data = np.full(ref.decl.nbytes, code, np.uint8)  # panel-major bytes, all one code
    t = load(ref[:])
    t.buf.storage.line = line
    tr.consts[key] = t
    return t


def mask_tail(t: Tile, cols: int) -> Tile:
    """Zero the padding lanes of each row's last word (a row holds ``cols`` values), in place: the
    result replaces ``t``, which must not be used again. Nothing to do when ``cols`` fills the words."""
    tr = current()
    line = _caller_line()
    a = t.buf
    lanes = tr.lanes
    if cols % lanes == 0:
        return t
    if -(-cols // lanes) != a.wpr:
        raise TileError(f"{line}: mask_tail({cols}) needs rows of {-(-cols // lanes)} words; "
                        f"{a.storage.name} has {a.wpr}")
    mask = np.zeros((1, 1, lanes), np.uint32)
    mask[0, 0, :cols % lanes] = np.float32(1.0).view(np.uint32)
    m = _const(tr, "mask", mask, scalar=False)
    out = Buffer(a.own, a.rows, a.wpr, a.dtype, a.scalar)  # the same words: a partial update
    last = a.wpr - 1
    cmds = [("fmul", r * a.wpr + last, 0, "lane", 1, r * a.wpr + last) for r in range(a.rows)]
    tr.emit(Op("vec", Queue.EXEC, line, {"op": "mask_tail", "cmds": cmds, "in_place": True},
               reads=[a, m.buf], writes=[out]))
    return Tile(out)


# ---- the matrix engine ---------------------------------------------------------------------------

def matmul(a: Tile, b: Tile, acc: Tile | None = None, *, by: str = "a") -> Tile:
    """int8 A panels (``pa`` x K words, from an "a_panels" tensor) times B panels (``pb`` x K) into
    an int32 result, added into ``acc`` when given (the result replaces it), else a new tile.
    ``by="a"``: a result row per A panel, ``pa`` rows of ``pb`` x ROWS words (C tile by C tile
    along each row); ``by="b"``: a result row per B panel, ``pb`` rows of ``pa`` x ROWS words (a
    column panel of C, all its rows in order: for S^T = K Q^T, a row per query tile holding every
    key's word, which ``col_max(per_row=True)``, a broadcast per row and ``to_b(by="b")`` take in
    one command each). One MATMUL per output tile; the compiler keeps an A panel's MATMULs
    together, so a store of one tile row waits for that row alone. FP operands (e4m3, e5m2, e2m1
    tiles of the same format, each loaded with its E8M0 scales) make an FP MATMUL with an fp32
    result (``acc`` fp32): its format and scale words come from the tiles."""
    tr = current()
    line = _caller_line()
    if not isinstance(a, Tile) or not isinstance(b, Tile):
        raise TileError(f"{line}: matmul takes tiles loaded from an A and a B operand tensor")
    if by not in ("a", "b"):
        raise TileError(f"{line}: matmul's by is \"a\" (a result row per A panel) or \"b\" (per B panel), "
                        f"not {by!r}")
    A, B = a.buf, b.buf
    if A.storage.region != "A" or B.storage.region != "B":
        raise TileError(f"{line}: matmul takes an A tile (from an a_panels tensor) and a B tile (from b_panels), "
                        f"not {A.storage.region} and {B.storage.region}")
    if A.wpr != B.wpr:
        raise TileError(f"{line}: the A tile has {A.wpr} K steps and the B tile {B.wpr}: they must agree")
    fmt, scales = _matmul_format(tr, line, a, b)
    out = "int32" if fmt == "int8" else "fp32"
    rows = tr.config.rows
    pa, pb, k = A.rows, B.rows, A.wpr
    shape = (pa, pb * rows) if by == "a" else (pb, pa * rows)
    if acc is None:
        C = tr.new_buffer("acc", *shape, out, False, line)
        accumulate = False
    else:
        C = acc.buf
        if (C.rows, C.wpr) != shape:
            raise TileError(f"{line}: acc is {C.rows} x {C.wpr} words; A x B by {by!r} makes {shape[0]} rows of "
                            f"{shape[1]}")
        if C.dtype != out:
            raise TileError(f"{line}: a {fmt} MATMUL accumulates {out}; acc {C.storage.name} is {C.dtype}")
        accumulate = True
    for p in range(pa):
        ap = Buffer(A.own, 1, k, A.dtype, False, A.offset + p * A.row_stride)
        if by == "a":  # the row's pb tiles, side by side
            cp, step = Buffer(C.own, 1, pb * rows, out, False, C.offset + p * C.row_stride), rows
        else:  # tile p of each of the pb rows
            cp = Buffer(C.own, pb, rows, out, False, C.offset + p * rows, C.row_stride)
            step = C.row_stride
        reads = [ap, B] + ([cp] if accumulate else [])
        args = {"op": "matmul", "accumulate": accumulate, "k": k, "pb": pb, "a_view": ap, "b_view": B,
                "c_view": cp, "c_step": step, "a_tile": A, "p": p, "by": by, "pa": pa, "c_tile": C}
        if scales is not None:  # panel p's scale words, and every B panel's
            sa, sb = scales
            args.update(fmt=fmt, sa_view=Buffer(sa.own, 1, sa.wpr, sa.dtype, False, sa.offset + p * sa.row_stride),
                        sb_view=sb)
            reads += [args["sa_view"], sb]
        tr.emit(Op("matmul", Queue.EXEC, line, args, reads=reads, writes=[cp]))
    return Tile(Buffer(C.own, *shape, out, False, C.offset, C.stride))


def _matmul_format(tr: Trace, line: str, a: Tile, b: Tile) -> tuple[str, tuple | None]:
    """The MATMUL's format from its operand tiles, and (SA, SB) scale buffers for an FP one."""
    fa, fb = a.buf.dtype, b.buf.dtype
    if fa == fb == "int8":
        return "int8", None
    if fa != fb:
        raise TileError(f"{line}: matmul of {a.buf.storage.name} ({fa}) and {b.buf.storage.name} ({fb}): one MATMUL "
                        f"has one format for both operands; quantize both to the same one")
    if fa not in FP_FORMATS:
        raise TileError(f"{line}: matmul takes int8 or FP ({', '.join(FP_FORMATS)}) operands, not {fa}")
    formats = tr.config.formats
    if fa not in formats:
        raise TileError(f"{line}: this chip was built without the {fa} format (its formats: {', '.join(formats)}; "
                        f"--formats chooses them)")
    for t, which in ((a, "A"), (b, "B")):
        if t.scales is None:
            raise TileError(f"{line}: the {fa} {which} tile {t.buf.storage.name} has no block scales: declare its "
                            f"tensor with TensorSpec(..., scales=<an e8m0 tensor>) and pass matmul the tile "
                            f"tile.load made (FP operands read E8M0 scales per {BLOCK} K steps)")
    nblk = -(-a.buf.wpr // BLOCK)
    sa, sb = a.scales.buf, b.scales.buf
    if sa.wpr != nblk or sb.wpr != nblk or sa.rows != a.buf.rows or sb.rows != b.buf.rows:
        raise TileError(f"{line}: the scales of {a.buf.storage.name} / {b.buf.storage.name} do not cover their "
                        f"{a.buf.wpr} K steps ({nblk} blocks per panel)")
    return fa, (sa, sb)


# ---- the reduction unit ------------------------------------------------------------------------

def _row_reduce(op: str, t: Tile) -> Tile:
    tr = current()
    line = _caller_line()
    a = t.buf
    if a.scalar:
        raise TileError(f"{line}: {op} of {a.storage.name}, which already holds one scalar per row")
    if a.dtype == "fp32" and not tr.vector:
        raise TileError(f"{line}: fp32 reductions need the vector unit, and this chip was built without it")
    rop = {"fp32": {"sum": "FSUM", "max": "FMAX"}, "int32": {"sum": "SUM", "max": "MAX", "min": "MIN"}}
    code = rop.get(a.dtype, {}).get(op)
    if code is None:
        raise TileError(f"{line}: row_{op} of {a.dtype} is not a reduction the chip has "
                        f"(fp32: sum, max; int32: sum, max, min)")
    rc = tr.reduce_constraints
    out = tr.new_buffer(f"row_{op}", a.rows, 1, a.dtype, True, line)
    if code == "MAX" and rc is not None and rc.max_via_min:
        code = _errata.max_via_min(tr, a, out, line)
    if code == "SUM" and rc is not None and rc.even_sum_count and a.wpr % 2 and not _errata.pad_to_even(tr, a):
        _errata.sum_of_odd_rows(tr, a, out, line)
        return Tile(out)
    cmds = [(code, r * a.row_stride, a.wpr, r) for r in range(a.rows)]
    tr.emit(Op("reduce", Queue.EXEC, line, {"op": f"row_{op}", "cmds": cmds}, reads=[a], writes=[out]))
    return Tile(out)


def row_sum(t: Tile) -> Tile:
    """The sum of each row (fp32: the reduction unit's tree-then-fold order), one scalar per row."""
    return _row_reduce("sum", t)


def row_max(t: Tile) -> Tile:
    """The maximum of each row, one scalar per row."""
    return _row_reduce("max", t)


def row_min(t: Tile) -> Tile:
    """The minimum of each row (int32), one scalar per row."""
    return _row_reduce("min", t)


def _need_vector(tr: Trace, line: str, op: str) -> None:
    if not tr.vector:
        raise TileError(f"{line}: {op} runs on the vector unit, and this chip was built without it (vector=False)")


def _shape(b: Buffer) -> str:
    return f"{b.storage.name} ({b.rows} x {b.wpr} {'scalars' if b.scalar else 'words'})"


@contextlib.contextmanager
def tracing(lanes: int, word_bytes: int, vector: bool = True, config=None):
    with Trace(lanes, word_bytes, vector, config) as tr:
        yield tr
