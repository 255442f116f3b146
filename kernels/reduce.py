"""Row reductions on the reduction unit: ``reduce_rows(dev, x, op)`` -> int32 per row, the device
entry point of the tile-language kernel kernels/tiled/reduce.py (SUM wrapping modulo 2**32, MAX,
MIN; the rows in tiles, double-buffered; a row longer than the SRAM holds in chunks whose partial
results are reduced again). On a revision with FL-RU-001 / FL-RU-002 the compiler's lowering rules
(kernels/tile/errata.py) mitigate them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from workarounds import Mitigations

from .stats import KernelStats
from .tile.spec import call
from .validate import check_matrix

if TYPE_CHECKING:  # the protocol of the device surface a kernel uses
    from cosim.device import KernelDevice

__all__ = ["reduce_rows", "OPS"]

OPS = ("sum", "max", "min")


async def reduce_rows(dev: KernelDevice, x: np.ndarray, op: str, *, mitigations: Mitigations,
                      budget_cycles: int | None = None) -> tuple[np.ndarray, KernelStats]:
    """Reduce every row of an int32 matrix with ``op`` in {"sum", "max", "min"} on the chip.

    SUM wraps modulo 2**32 like the hardware. Returns ``(values (R,), stats)``.
    """
    if op not in OPS:
        raise ValueError(f"op must be one of {', '.join(OPS)}, got {op!r}")
    x = check_matrix("x", x, (np.int32, np.int16, np.int8), "integer rows to reduce, shape (R, C)")
    y, stats = await call(dev, "reduce", {"x": x.astype(np.int32)}, op=op, mitigations=mitigations,
                          budget_cycles=budget_cycles)
    return y[:, 0].copy(), stats
