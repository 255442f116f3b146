"""The attention recipes by name: data only (no numpy), so that the command line can list them
without importing the numerics (golden/attention.py has what each step does)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["AttentionRecipe", "ATTENTION_RECIPES", "attention_recipe"]


@dataclass(frozen=True)
class AttentionRecipe:
    """How attention's operands are quantized (golden/attention.py's docstring has the steps).

    Attributes
    ----------
    name : str
    fmt : {"int8", "e4m3", "e5m2"}
        The format of P and V, the operands of O^T = V^T P^T (one MATMUL format for both).
    v_rule : {"floor", "rceil"} or None
        The MX scale rule of V (FP8 recipes); None: V is int8 per tensor.
    p_exp : int
        FP8: P is converted as P * 2**p_exp, and its block scale is 2**-p_exp (E8M0 code
        127 - p_exp). 0 for int8.
    summary : str
        One line for ``--help`` and the reports.
    """

    name: str
    fmt: str
    v_rule: str | None
    p_exp: int
    summary: str

    @property
    def fp8(self) -> bool:
        return self.fmt != "int8"


ATTENTION_RECIPES: dict[str, AttentionRecipe] = {r.name: r for r in (
    AttentionRecipe("int8", "int8", None, 0, "Q, K, V int8 per tensor; P int8 (P * 127); O^T = V^T P^T in int32"),
    AttentionRecipe("fp8-e4m3", "e4m3", "rceil", 8, "Q, K int8 per tensor; P FP8 E4M3 (P * 2^8, block scale 2^-8); "
                    "V MXFP8 E4M3 (rceil, a scale per 32 keys); O^T = V^T P^T an FP8 MATMUL"),
    AttentionRecipe("fp8-e5m2", "e5m2", "rceil", 15, "Q, K int8 per tensor; P FP8 E5M2 (P * 2^15, block scale "
                    "2^-15); V MXFP8 E5M2 (rceil, a scale per 32 keys); O^T = V^T P^T an FP8 MATMUL"),
)}
"""The attention recipes by name (``firstlight run attention --recipe NAME``)."""


def attention_recipe(name: str | AttentionRecipe) -> AttentionRecipe:
    """The recipe called ``name``; ``ValueError`` listing the accepted names otherwise."""
    if isinstance(name, AttentionRecipe):
        return name
    try:
        return ATTENTION_RECIPES[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown attention recipe {name!r}; accepted: {', '.join(ATTENTION_RECIPES)}") from None
