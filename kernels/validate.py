"""Input checks shared by the kernels: say what was wrong and what is accepted."""

from __future__ import annotations

import numpy as np

__all__ = ["check_matrix"]


def require_vector(config, what: str) -> None:
    """Refuse a kernel that needs the vector unit on a chip built without it (VEC would be BAD_VEC_OP)."""
    if not config.vector:
        raise ValueError(f"{what} needs the vector unit, and this chip was built without it (vector=False)")


def check_matrix(name: str, x, dtypes: tuple[type, ...], what: str) -> np.ndarray:
    """Return ``x`` as a C-contiguous 2-D array, or raise a precise TypeError/ValueError."""
    if not isinstance(x, np.ndarray):
        raise TypeError(f"{name} must be a numpy array ({what}), not {type(x).__name__}")
    if x.dtype not in [np.dtype(d) for d in dtypes]:
        accepted = ", ".join(np.dtype(d).name for d in dtypes)
        raise TypeError(f"{name} must have dtype {accepted} ({what}), got {x.dtype}")
    if x.ndim != 2:
        raise ValueError(f"{name} must be 2-D ({what}), got shape {x.shape}")
    if 0 in x.shape:
        raise ValueError(f"{name} is empty (shape {x.shape}); every dimension must be >= 1")
    return np.ascontiguousarray(x)
