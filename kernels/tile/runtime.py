"""Compile a tile-language kernel for a chip and run it: DRAM in, the stream, DRAM out.

:func:`build` traces the kernel with its tensors' shapes and compiles it (no device needed:
``--dump`` and the tests use it alone). :func:`run` stages the inputs and the compiler's
constants in DRAM at the addresses the compiler chose, submits the stream through the device's
submit filter (so every stream pass of the active errata applies), waits, and reads the outputs.
"""

from __future__ import annotations

import gc
import time
from dataclasses import dataclass

import numpy as np

from golden.vector import row_words

from kernels.roofline import serial_cycles_bound, units_busy_cycles
from kernels.layout import a_panel_bytes, b_panel_bytes, tiles_to_matrix

from .compiler import Compiled, compile_trace
from .ir import TileError
from .lang import TensorRef, tracing

__all__ = ["TensorSpec", "DTYPES", "build", "run", "pack", "unpack", "units_busy_cycles"]

DTYPES = {"fp32": np.float32, "int32": np.int32, "int8": np.int8}
# FP operand codes (a byte each, as the operand SRAMs hold them) and their E8M0 block scales
FP_DTYPES = {"e4m3": np.uint8, "e5m2": np.uint8, "e2m1": np.uint8}
DTYPES.update(FP_DTYPES, e8m0=np.uint8)


@dataclass(frozen=True)
class TensorSpec:
    """A kernel tensor argument: name, shape (as the host holds it), dtype, the raw 32-bit value of
    its padding lanes, role ("in" or "out") and its DRAM layout (kernels/tile/ir.py TensorDecl:
    "rows", or "a_panels" / "b_panels" for int8 GEMM operands, "c_tiles" for an int32 result)."""

    name: str
    rows: int
    cols: int
    dtype: str = "fp32"
    pad: int = 0
    role: str = "in"
    layout: str = "rows"
    scales: str | None = None


def check_dram(config, tensors: list[TensorSpec], dram_bytes: int, bus_bytes: int) -> None:
    """Raise the TileError placement would if the tensors cannot all fit the board's DRAM: before
    a planner or the tracer spends any time on a problem that cannot run."""
    from .compiler import _place_dram

    with tracing(config.lanes, 4 * config.lanes, config.vector, config) as tr:
        for t in tensors:
            if t.dtype not in DTYPES:
                raise TileError(f"tensor {t.name}: dtype must be one of {', '.join(DTYPES)}, not {t.dtype!r}")
            tr.tensor(t.name, t.rows, t.cols, t.dtype, t.pad, t.role, layout=t.layout)
    _place_dram(tr.tensors, dram_bytes, bus_bytes)


def fits(fn, config, tensors: list[TensorSpec], params: dict, constraints=None) -> None:
    """Raise the TileError ``build`` would for ``fn(*tensors, **params)`` up to and including
    SRAM placement (a working set that does not fit, a shape the kernel refuses), else return:
    how a planner tries a tiling without lowering it."""
    build("fit", fn, config, tensors, params, dram_bytes=1 << 32, bus_bytes=4, constraints=constraints,
          fit_only=True)


def build(name: str, fn, config, tensors: list[TensorSpec], params: dict, *, dram_bytes: int,
          bus_bytes: int, constraints=None, bytes_per_cycle: float = 1.0, fit_only: bool = False) -> Compiled:
    """Trace ``fn(*tensors, **params)`` for ``config`` and compile it (with the errata passes
    ``constraints``, a workarounds.GemmConstraints, ask for); raises TileError with the kernel's
    source line for what it refuses."""
    t0 = time.perf_counter()
    gc_was = gc.isenabled()
    gc.disable()  # a trace is ~10^5 small acyclic objects: collecting them mid-compile only costs time
    try:
        return _build(name, fn, config, tensors, params, t0, dram_bytes=dram_bytes, bus_bytes=bus_bytes,
                      constraints=constraints, bytes_per_cycle=bytes_per_cycle, fit_only=fit_only)
    finally:
        if gc_was:
            gc.enable()


def _build(name, fn, config, tensors, params, t0, *, dram_bytes, bus_bytes, constraints, bytes_per_cycle,
           fit_only):
    word_bytes = 4 * config.lanes
    from .errata import check_complements, families

    with tracing(config.lanes, word_bytes, config.vector, config) as tr:
        tr.reduce_constraints = families(constraints).get("reduce")
        tr.lowp_constraints = families(constraints).get("lowp")
        refs: list[TensorRef] = []
        for t in tensors:
            if t.dtype not in DTYPES:
                raise TileError(f"tensor {t.name}: dtype must be one of {', '.join(DTYPES)}, not {t.dtype!r}")
            refs.append(tr.tensor(t.name, t.rows, t.cols, t.dtype, t.pad, t.role, layout=t.layout))
        _link_scales(tensors, tr.tensors)
        fn(*refs, **params)
    check_complements(tr)
    if not any(op.kind == "store" for op in tr.ops):
        raise TileError(f"kernel {name} stores nothing: its outputs would never be written")
    c = compile_trace(name, tr.ops, tr.tensors, config, dram_bytes, bus_bytes, constraints, bytes_per_cycle,
                      fit_only)
    if c is None:
        return None
    c.compile_s = time.perf_counter() - t0
    for check in STREAM_CHECKS:
        check(c, config, dram_bytes, bus_bytes, constraints)
    return c


# Called with (compiled, config, dram_bytes, bus_bytes, constraints) on every stream ``build``
# lowers: the test suite puts the interpreter's happens-before checker here (tests/conftest.py),
# so every kernel any test compiles is checked for races (kernels cannot import interp/).
STREAM_CHECKS: list = []


def _link_scales(specs: list[TensorSpec], decls: list) -> None:
    """Each FP operand's declaration gets its scales' (checked: e8m0, the same layout and panels,
    one code per 32 K steps)."""
    by = {d.name: d for d in decls}
    for t in specs:
        d = by[t.name]
        if t.dtype in FP_DTYPES and t.layout not in ("a_panels", "b_panels"):
            raise TileError(f"tensor {t.name}: {t.dtype} codes are a MATMUL operand: layout a_panels or b_panels, "
                            f"not {t.layout}")
        if t.scales is None:
            continue
        s = by.get(t.scales)
        if t.dtype not in FP_DTYPES:
            raise TileError(f"tensor {t.name}: only FP operands (e4m3, e5m2, e2m1) have block scales, not {t.dtype}")
        a = t.layout == "a_panels"
        want = (t.rows, -(-t.cols // 32)) if a else (-(-t.rows // 32), t.cols)
        if s is None or s.dtype != "e8m0" or s.layout != t.layout or (s.rows, s.cols) != want:
            got = "no such tensor" if s is None else f"{s.rows}x{s.cols} {s.dtype} {s.layout}"
            raise TileError(f"tensor {t.name}: its scales {t.scales!r} must be a {want[0]}x{want[1]} e8m0 tensor "
                            f"laid out {t.layout} (one code per 32 K steps), not {got}")
        d.scales = s


async def run(dev, c: Compiled, inputs: dict[str, np.ndarray], budget_cycles: int | None = None
              ) -> dict[str, np.ndarray]:
    """Run a compiled kernel: ``inputs`` by tensor name; returns the outputs by name (their dtype,
    the padding lanes dropped)."""
    await dev.wait_idle(budget_cycles)
    dev.dram.reset()
    for t in c.tensors:
        buf = dev.dram.alloc(t.nbytes, t.name)
        if buf.addr != t.dram:
            raise AssertionError(f"DRAM for {t.name} at {buf.addr:#x}, the compiler placed it at {t.dram:#x}")
        if t.role == "in":
            x = inputs[t.name]
            if x.shape != (t.rows, t.cols):
                raise ValueError(f"{t.name} has shape {x.shape}; the kernel was compiled for {(t.rows, t.cols)}")
            dev.dram_write(buf, pack(t, np.ascontiguousarray(x, DTYPES[t.dtype]), dev.config))
        elif t.role == "const":
            data = np.asarray(t.data)  # uint32 words, or (E8M0 block scales) bytes as stored
            dev.dram_write(buf, data.tobytes() if data.dtype == np.uint8 else np.ascontiguousarray(data, "<u4"))
        elif t.role == "scratch":  # words the kernel never stores (padding an erratum added) read as pad
            fill = np.full(t.nbytes // 4, t.pad, np.uint32)
            dev.dram_write(buf, (~fill if t.complement else fill).astype("<u4"))
    if budget_cycles is None:  # the device's watchdog, or twice the stream's serial bound if that is longer
        budget_cycles = max(dev.default_budget(), 2 * serial_cycles_bound(dev.config, dev.board, c.commands))
    await dev.submit(c.commands, budget_cycles)
    await dev.wait_idle(budget_cycles)
    return {t.name: unpack(t, dev.dram_read(t.dram, t.nbytes), dev.config) for t in c.tensors if t.role == "out"}


def pack(t, x: np.ndarray, config) -> bytes:
    """The host array ``x`` as the bytes of tensor ``t``'s DRAM layout."""
    if t.layout == "rows":
        w = row_words(x, config.lanes, t.pad)
        if w.shape[1] < t.wpr:  # rows the compiler lengthened (FL-RU-002: an even word count)
            w = np.concatenate([w, np.full((t.rows, t.wpr - w.shape[1], config.lanes), t.pad, np.uint32)], axis=1)
        return (~w if t.complement else w).astype("<u4").tobytes()
    R, C = config.rows, config.cols
    if x.dtype == np.uint8:  # FP codes and E8M0 scales: the same bytes
        x = x.view(np.int8)
    if t.layout == "a_panels":  # (M, K) -> panel p, word k = A[pR:(p+1)R, k]
        pad = np.zeros((t.stored_rows * R, t.cols), np.int8)
        pad[:t.rows] = x
        return a_panel_bytes(pad, R).tobytes()
    if t.layout == "b_panels":  # (K, N) -> panel q, word k = B[k, qC:(q+1)C]
        pad = np.zeros((t.rows, t.stored_rows * C), np.int8)
        pad[:, :t.cols] = x
        return b_panel_bytes(pad, C).tobytes()
    raise TileError(f"tensor {t.name}: layout {t.layout} is an output layout")


def unpack(t, raw: np.ndarray, config) -> np.ndarray:
    """Tensor ``t``'s DRAM bytes as the host array (its dtype, padding dropped)."""
    if t.layout == "rows":
        w = raw.view("<u4").reshape(t.rows, t.wpr * config.lanes)[:, :t.cols]
        return (~w if t.complement else w.copy()).view(DTYPES[t.dtype])
    if t.layout == "c_tiles":  # tile rows of tiles of ROWS words of COLS int32
        R, C = config.rows, config.cols
        tn = t.wpr // R
        whole = tiles_to_matrix(raw.view("<i4").reshape(t.stored_rows, tn, R, C))
        return np.ascontiguousarray(whole[:t.rows, :t.cols]).view(DTYPES[t.dtype])
    raise TileError(f"tensor {t.name}: layout {t.layout} is an input layout")
