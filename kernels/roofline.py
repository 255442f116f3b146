"""The roofline model: what a kernel would take on this chip if the engine never idled.

The v1 chip has no DMA model: operands reach the SRAMs through the backdoor at no simulated
cost, so the only roof is compute, ``ROWS * COLS`` int8 MACs per cycle. The *schedule* model
adds what the hardware structurally costs: a MATMUL occupies the feed ``max(K, ROWS, COLS)``
cycles, and each wait for idle drains the array (``ChipConfig.engine_drain_cycles``, the same
constant the engine's drain counter is built from).
"""

from __future__ import annotations

import math

from rtl.config import ChipConfig

__all__ = ["ideal_cycles", "utilization", "drain_cycles"]


def ideal_cycles(config: ChipConfig, macs: int) -> int:
    """Cycles at peak: useful MACs / (ROWS * COLS), rounded up."""
    return math.ceil(macs / config.peak_macs_per_cycle)


def drain_cycles(config: ChipConfig) -> int:
    return config.engine_drain_cycles


def utilization(ideal: int, measured: int) -> float:
    return ideal / measured if measured else 0.0
