"""Input distributions for the numerics report and the low-precision errata cells."""

from __future__ import annotations

import numpy as np

__all__ = ["DISTRIBUTIONS", "sample"]

DISTRIBUTIONS = {
    "normal": "N(0, 1)",
    "outliers": "N(0, 1) with 4 of every 64 K-channels of A scaled by 50 (outlier channels)",
    "small": "N(0, 1) * 2^-8: small magnitudes (unscaled FP8 lands on subnormals)",
}


def sample(dist: str, rng: np.random.Generator, shape: tuple[int, int], *, role: str = "a") -> np.ndarray:
    """float32 samples of ``dist``; ``role`` "a" (M,K) gets the outlier channels along K."""
    if dist == "normal":
        x = rng.standard_normal(shape)
    elif dist == "outliers":
        x = rng.standard_normal(shape)
        if role == "a":
            k = shape[1]
            cols = np.arange(k)[(np.arange(k) % 64) < 4]
            x[:, cols] *= 50.0
    elif dist == "small":
        x = rng.standard_normal(shape) * 2.0**-8
    else:
        raise ValueError(f"unknown distribution {dist!r}; known: {', '.join(DISTRIBUTIONS)}")
    return x.astype(np.float32)
