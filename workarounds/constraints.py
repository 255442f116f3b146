"""Typed constraints: what the active mitigations ask of each kernel family.

Kernels read these knobs and never test erratum ids. Each registry record says which knobs its
mitigation sets (``Erratum.knobs``); :func:`constraints_for` folds the active records' knobs
into one value per family. The default value of every field is "the chip as specified".
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

__all__ = ["GemmConstraints", "ReduceConstraints", "LowpConstraints", "FAMILIES", "constraints_for", "knob_problems"]


@dataclass(frozen=True)
class GemmConstraints:
    """The GEMM planners and the tile-group driver (kernels.gemm, .fused, .lowp)."""

    b_reserved_top_words: int = 0  # words at the top of operand SRAM B the plan must not use
    avoid_unit_chunk: bool = False  # no accumulating K chunk may have a single step
    repeat_first_a_word: bool = False  # each A panel carries a copy of its first word at base + K,
    # and a FENCE goes between MATMULs on different panels


@dataclass(frozen=True)
class ReduceConstraints:
    """The row-reduction kernel (kernels.reduce)."""

    max_via_min: bool = False  # run MAX as ~MIN(~x)
    even_sum_count: bool = False  # pad SUM segments to an even number of words


@dataclass(frozen=True)
class LowpConstraints:
    """The low-precision GEMM (kernels.lowp)."""

    fp8_subnormals_flushed: bool = False  # per-block rceil scales for FP8, remaining subnormals flushed


FAMILIES = {"gemm": GemmConstraints, "reduce": ReduceConstraints, "lowp": LowpConstraints}


def knob_problems(knobs: dict) -> list[str]:
    """Why a record's knobs are not valid (unknown family or field, wrong type); empty if fine."""
    out = []
    for family, values in knobs.items():
        cls = FAMILIES.get(family)
        if cls is None:
            out.append(f"unknown knob family {family!r} (known: {', '.join(FAMILIES)})")
            continue
        known = {f.name: f for f in fields(cls)}
        for name, v in values.items():
            if name not in known:
                out.append(f"{cls.__name__} has no knob {name!r} (knobs: {', '.join(known)})")
            elif type(v) is not type(getattr(cls(), name)):
                out.append(f"{cls.__name__}.{name} takes {type(getattr(cls(), name)).__name__}, not {v!r}")
    return out


def constraints_for(records) -> dict[str, object]:
    """One constraints value per family, with every knob of the given (active) records applied."""
    out = {name: cls() for name, cls in FAMILIES.items()}
    for e in records:
        for family, values in e.knobs.items():
            out[family] = replace(out[family], **values)
    return out
