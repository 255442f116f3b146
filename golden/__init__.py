"""Independent numpy reference models ("goldens") written from the hardware spec.

Depends on numpy only. Public API:

* :func:`gemm_int8`, :func:`gemm_int8_accumulate` -- int8 GEMM, wrapping int32 accumulator.
* :func:`reduce_rows`, :func:`wrap_int32`, :data:`REDUCE_OPS` -- int32 row reductions.
* :func:`sqnr_db`, :func:`ulp_distance`, :func:`max_abs_error` -- accuracy metrics.
* :mod:`golden.mx` -- FP8/FP4 (MX) matrix engine, bit-exact fp32 (``mx.mx_matmul_bits`` and its
  building blocks). Reached as ``golden.mx``; its names are not re-exported here.
* :mod:`golden.quant` -- the quantization recipes (int8, FP8, MX with floor/RCEIL scales): pure
  numpy numerics shared by the low-precision kernel (to prepare operands) and the reports.
* :mod:`golden.distributions` -- seeded input distributions for the numerics report and cells.

Everything here is pure numpy (+ ml_dtypes); nothing imports the rest of the project.
"""

from __future__ import annotations

from . import mx  # submodule: golden.mx.* is the MX golden API (not re-exported)
from .int_gemm import gemm_int8, gemm_int8_accumulate
from .metrics import max_abs_error, sqnr_db, ulp_distance
from .reduce import REDUCE_OPS, reduce_rows, wrap_int32

__all__ = [
    "REDUCE_OPS",
    "gemm_int8",
    "gemm_int8_accumulate",
    "max_abs_error",
    "reduce_rows",
    "sqnr_db",
    "ulp_distance",
    "wrap_int32",
]
