"""The tile language and its compiler (docs/tile.md).

Kernel code imports this package as ``tile`` and calls what :mod:`kernels.tile.lang` exports;
the compiler (:mod:`kernels.tile.compiler`) places the tiles, orders the units with semaphores and
lowers to rtl/isa.py; :mod:`kernels.tile.runtime` runs the result on a device.
"""

from __future__ import annotations

from .compiler import Compiled, format_command
from .ir import TileError
from .lang import (Tile, col_max, col_sum, constant_row, dequant, exp, i2f, load, mask_tail, matmul, to_b, maximum, minimum, pipeline, recip, relu, requant, row_max, row_min, row_sum, rsqrt,
                   scalar, scratch, store)
from .runtime import TensorSpec, build, run

__all__ = ["Compiled", "TileError", "Tile", "TensorSpec", "build", "run", "format_command", "pipeline", "load",
           "store", "exp", "recip", "rsqrt", "relu", "maximum", "minimum", "row_sum", "row_max", "row_min", "scalar", "scratch",
           "constant_row", "mask_tail", "matmul", "dequant", "requant", "i2f", "col_max", "col_sum", "to_b"]
