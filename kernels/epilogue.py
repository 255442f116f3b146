"""A GEMM's fused epilogue: bias, per-channel requantization to int8, optional ReLU, on chip
before the store (docs/kernels.md, "The GEMM epilogue").

:class:`Epilogue` is what a caller gives ``kernels.gemm.gemm``: the tile-language GEMM
(kernels/tiled/gemm.py) adds each C tile row's bias word (lane j = column j's int32 bias, VEC
IADD) and requantizes the sum in place with its parameter word (lane j = column j's fixed-point
multiplier, shift and ReLU flag, golden.vector.requant_params; VEC REQUANT) before the row's
store. The bias and parameter words of every tile column (2 * TN accumulator words) stay in the
accumulator SRAM for the whole run, which bounds N (:func:`max_columns`).

The results travel as int32 lanes holding the int8 values (sign-extended): the DMA store moves
whole accumulator words, so the C traffic is that of an int32 GEMM.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from golden.vector import requant_params

__all__ = ["Epilogue", "max_columns"]


def max_columns(config) -> int:
    """The widest N an epilogue GEMM takes: 2 words per tile column, one C tile left below them."""
    return (config.acc_depth - config.rows) // 2 * config.cols


@dataclass(frozen=True)
class Epilogue:
    """``out[:, n] = clamp(round_half_away((acc[:, n] + bias[n]) * scale[n]), lo, 127)`` with
    ``lo = 0`` when ``relu`` and -128 otherwise; ``scale[n]`` in [2**-40, 2**24), carried to
    24 significant bits (golden.vector.requant_params)."""

    bias: np.ndarray  # int32, (N,)
    scale: np.ndarray  # float64, (N,)
    relu: bool = False

    @classmethod
    def checked(cls, n: int, bias, scale, relu: bool = False) -> Epilogue:
        bias = np.zeros(n, np.int32) if bias is None else np.asarray(bias)
        if bias.dtype != np.int32 or bias.shape != (n,):
            raise ValueError(f"the epilogue's bias must be int32 of shape ({n},) (one per output column); "
                             f"got {bias.dtype} {bias.shape}")
        scale = np.broadcast_to(np.asarray(scale, np.float64), (n,)) if np.ndim(scale) == 0 else np.asarray(scale, np.float64)
        if scale.shape != (n,):
            raise ValueError(f"the epilogue's scale must be one value or one per output column ({n},); got {scale.shape}")
        requant_params(scale)  # refuses scales it cannot encode, before anything runs
        return cls(bias, np.ascontiguousarray(scale), bool(relu))

    def tensors(self) -> dict[str, np.ndarray]:
        """The GEMM kernel's epilogue inputs (kernels/tiled/gemm.py): ``bias`` (1, N) int32 and
        ``qparams`` (1, N), each column's REQUANT parameter word (golden.vector.requant_params)
        as int32; the kernel's layout puts column j in lane j of its tile column's word."""
        return {"bias": self.bias[None, :].copy(),
                "qparams": requant_params(self.scale, self.relu).astype(np.uint32).view(np.int32)[None, :]}
