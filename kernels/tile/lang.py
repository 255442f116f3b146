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
import os
import sys
from dataclasses import dataclass

import numpy as np

from .ir import Buffer, Loop, Op, Queue, Storage, TensorDecl, TileError

__all__ = ["Tile", "TensorRef", "TensorView", "Trace", "pipeline", "load", "store", "exp", "recip", "rsqrt",
           "relu", "maximum", "minimum", "row_sum", "row_max", "scalar", "constant_row", "mask_tail", "current"]

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
    while f is not None and os.path.dirname(os.path.abspath(f.f_code.co_filename)) == _HERE:
        f = f.f_back
    if f is None:
        return "?"
    path = os.path.abspath(f.f_code.co_filename)
    if path.startswith(_ROOT + os.sep):
        path = os.path.relpath(path, _ROOT)
    return f"{path}:{f.f_lineno}"


class Trace:
    """The ops a kernel emits while it runs under the compiler."""

    def __init__(self, lanes: int, word_bytes: int, vector: bool = True):
        self.lanes = lanes
        self.word_bytes = word_bytes
        self.vector = vector
        self.ops: list[Op] = []
        self.tensors: list[TensorDecl] = []
        self.loop: Loop | None = None
        self.iteration = 0
        self.loops: list[Loop] = []
        self._names: dict[str, int] = {}
        self.consts: dict = {}  # each distinct constant is loaded once

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

    def tensor(self, name: str, rows: int, cols: int, dtype: str, pad: int, role: str, data=None) -> "TensorRef":
        wpr = -(-cols // self.lanes)
        decl = TensorDecl(name, rows, cols, dtype, wpr, pad, role, self.word_bytes, data)
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
    """Rows ``r0:r0+n`` of a DRAM tensor (what ``tensor[r0:r1]`` gives)."""

    tensor: TensorDecl
    r0: int
    n: int


class TensorRef:
    """A DRAM tensor as a kernel sees it: ``.rows``, ``.cols``, ``.dtype`` and row slices."""

    def __init__(self, decl: TensorDecl):
        self.decl = decl

    rows = property(lambda self: self.decl.rows)
    cols = property(lambda self: self.decl.cols)
    dtype = property(lambda self: self.decl.dtype)
    name = property(lambda self: self.decl.name)

    def __getitem__(self, key) -> TensorView:
        rows = self.decl.rows
        if isinstance(key, int):
            key = slice(key, key + 1)
        if not isinstance(key, slice) or key.step not in (None, 1):
            raise TileError(f"{_caller_line()}: {self.name}[...] takes a row index or a row range r0:r1 "
                            f"(step 1), not {key!r}")
        r0 = 0 if key.start is None else key.start
        r1 = rows if key.stop is None else min(key.stop, rows)  # a ragged last tile is cut to the tensor
        if not 0 <= r0 < r1 <= rows:
            raise TileError(f"{_caller_line()}: rows {r0}:{r1} are outside {self.name}, which has {rows} rows")
        return TensorView(self.decl, r0, r1 - r0)

    def __repr__(self) -> str:
        return f"TensorRef({self.name}: {self.rows}x{self.cols} {self.dtype})"


class Tile:
    """A tile in SRAM. Arithmetic operators make VEC operations; see the module functions."""

    def __init__(self, buf: Buffer):
        self.buf = buf

    rows = property(lambda self: self.buf.rows)
    words_per_row = property(lambda self: self.buf.wpr)

    def __add__(self, other):
        return _binary("fadd", self, other)

    def __radd__(self, other):
        return _binary("fadd", self, other)

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

def load(view: TensorView) -> Tile:
    """DMA rows of a DRAM tensor into a new tile (the compiler places it in the accumulator SRAM)."""
    tr = current()
    line = _caller_line()
    if isinstance(view, TensorRef):
        view = view[:]
    if not isinstance(view, TensorView):
        raise TileError(f"{line}: load takes rows of a DRAM tensor (x[r0:r1]), not {type(view).__name__}")
    t = view.tensor
    if t.role == "out":
        pass  # reading back what the kernel stored is allowed: the dependency analysis orders it
    buf = tr.new_buffer(t.name, view.n, t.wpr, t.dtype, False, line)
    tr.emit(Op("load", Queue.LOAD, line, writes=[buf], dram_reads=[(t, view.r0, view.n)]))
    return Tile(buf)


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
    if b.scalar:
        raise TileError(f"{line}: the tile {b.storage.name} holds one scalar per row (a reduction); "
                        f"stores take tiles of whole rows")
    if (b.rows, b.wpr) != (view.n, t.wpr):
        raise TileError(f"{line}: the tile {b.storage.name} is {b.rows} rows of {b.wpr} words, but "
                        f"{t.name}[{view.r0}:{view.r0 + view.n}] is {view.n} rows of {t.wpr} words")
    tr.emit(Op("store", Queue.STORE, line, reads=[b], dram_writes=[(t, view.r0, view.n)]))


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
    out = tr.new_buffer(op, a.rows, a.wpr, "fp32", a.scalar, line)
    tr.emit(Op("vec", Queue.EXEC, line, {"op": op, "cmds": [(op, 0, None, "vector", a.words, 0)]},
               reads=[a], writes=[out]))
    return Tile(out)


def exp(t: Tile) -> Tile:
    """e**x of every lane (rtl/special.py's algorithm)."""
    return _unary("exp", t)


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
    if b.scalar and b.rows == 1:
        cmds = [(op, 0, 0, "scalar", a.words, 0)]  # one value for every lane of every word
    elif (a.rows, a.wpr, a.scalar) == (b.rows, b.wpr, b.scalar):
        cmds = [(op, 0, 0, "vector", a.words, 0)]
    elif b.scalar and b.rows == a.rows and b.wpr == 1:
        cmds = [(op, r * a.wpr, r, "scalar", a.wpr, r * a.wpr) for r in range(a.rows)]  # a row's scalar
    elif not b.scalar and b.rows == 1 and b.wpr == a.wpr and not a.scalar:
        cmds = [(op, r * a.wpr, 0, "vector", a.wpr, r * a.wpr) for r in range(a.rows)]  # one row for every row
    elif a.scalar and not b.scalar and a.rows == 1 and op in ("fadd", "fmul", "fmax", "fmin"):
        return _binary(op, y, x)
    else:
        raise TileError(f"{line}: cannot broadcast {op} of {_shape(a)} with {_shape(b)}: the second operand "
                        f"must have the first's shape, be one scalar, one scalar per row or one row of words")
    out = tr.new_buffer(op, a.rows, a.wpr, "fp32", a.scalar, line)
    tr.emit(Op("vec", Queue.EXEC, line, {"op": op, "cmds": cmds}, reads=[a, b], writes=[out]))
    return Tile(out)


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
    out = tr.new_buffer(f"row_{op}", a.rows, 1, a.dtype, True, line)
    cmds = [(code, r * a.wpr, a.wpr, r) for r in range(a.rows)]
    tr.emit(Op("reduce", Queue.EXEC, line, {"op": f"row_{op}", "cmds": cmds}, reads=[a], writes=[out]))
    return Tile(out)


def row_sum(t: Tile) -> Tile:
    """The sum of each row (fp32: the reduction unit's tree-then-fold order), one scalar per row."""
    return _row_reduce("sum", t)


def row_max(t: Tile) -> Tile:
    """The maximum of each row, one scalar per row."""
    return _row_reduce("max", t)


def _need_vector(tr: Trace, line: str, op: str) -> None:
    if not tr.vector:
        raise TileError(f"{line}: {op} runs on the vector unit, and this chip was built without it (vector=False)")


def _shape(b: Buffer) -> str:
    return f"{b.storage.name} ({b.rows} x {b.wpr} {'scalars' if b.scalar else 'words'})"


@contextlib.contextmanager
def tracing(lanes: int, word_bytes: int, vector: bool = True):
    with Trace(lanes, word_bytes, vector) as tr:
        yield tr
