"""A GEMM's fused epilogue: bias, per-channel requantization to int8, optional ReLU, on chip
before the store (docs/kernels.md, "The GEMM epilogue").

Once a tile row's accumulators are final, the vector unit runs two VECs per C tile, in place:
``IADD`` adds the tile's bias word (LANE: lane j = column j's int32 bias) and ``REQUANT`` turns
the sum into int8 with the tile's parameter word (lane j = column j's fixed-point multiplier,
shift and ReLU flag, golden.vector.requant_params). The last of them signals C_READY, so the
store reads requantized words. The bias and parameter words of every tile column (2 * TN
accumulator words) are loaded once, by DMA, into the top of the accumulator SRAM, below which
the planner keeps the C tiles.

The results travel as int32 lanes holding the int8 values (sign-extended): the DMA store moves
whole accumulator words, so the C traffic is that of an int32 GEMM.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from golden.vector import requant_params
from rtl.isa import VecB, VecOp, vec

__all__ = ["Epilogue", "epilogue_vecs", "max_columns"]


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

    def words(self, lanes: int, tiles: int) -> np.ndarray:
        """(2 * tiles, lanes) uint32: the bias word of every tile column, then the parameter words
        (padding columns: bias 0, parameter 0, so their output is 0)."""
        out = np.zeros((2, tiles * lanes), np.uint32)
        n = len(self.bias)
        out[0, :n] = self.bias.view(np.uint32)
        out[1, :n] = requant_params(self.scale, self.relu)
        return out.reshape(2 * tiles, lanes)


def epilogue_vecs(slots: range, rows: int, bias_word: int, param_word: int, signal: int | None,
                  wait: int | None = None) -> list[int]:
    """The VECs of one tile row: per slot (a C tile of ``rows`` accumulator words at ``slot *
    rows``), IADD with its bias word and REQUANT with its parameter word; ``bias_word`` /
    ``param_word`` belong to the first slot, the next slots take the words after. The last VEC
    signals ``signal``; the first waits on ``wait``."""
    out = []
    for i, slot in enumerate(slots):
        at = slot * rows
        out.append(vec(VecOp.IADD, a=at, b=bias_word + i, count=rows, dst=at, b_form=VecB.LANE,
                       wait=wait if i == 0 else None))
        last = i == len(slots) - 1
        out.append(vec(VecOp.REQUANT, a=at, b=param_word + i, count=rows, dst=at, b_form=VecB.LANE,
                       signal=signal if last else None))
    return out
