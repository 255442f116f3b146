"""Silicon revisions and the hardware defects each one has.

A defect is a structural difference in the generated RTL, selected when the chip is
elaborated for a revision: the unit that has it tests ``Defect.X in self.defects``. The names
here are hardware facts ("what the RTL does"); the software's beliefs about them (errata ids,
mitigations) live in ``workarounds/`` and are held against the real RTL by running reproducers
on every revision.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

__all__ = ["Defect", "Revision", "REVISIONS", "BY_CODE", "revision", "revision_name"]


class Defect(enum.Enum):
    """Every RTL defect any revision has; the value says what the hardware does."""

    ENGINE_K1_IGNORES_ACCUMULATE = "matrix engine: a MATMUL with K == 1 writes C instead of adding into it"
    ENGINE_B2B_STALE_A_WORD = ("matrix engine: a MATMUL starting with no gap after another reads its first A word "
                               "from the previous command's next address")
    REDUCE_MAX_FOLDS_FROM_ZERO = "reduction unit: MAX starts its fold from 0 instead of the first word"
    REDUCE_SUM_DROPS_ODD_LAST = "reduction unit: SUM with an odd count drops the last word"
    OPERAND_TOP_WORD_READS_ZERO = "operand SRAM B: the engine port reads the last word (depth-1) as 0"
    REDUCE_ISSUES_BEFORE_DRAIN = ("command processor: REDUCE issues once the engine feed is free, before the "
                                  "engine has written its last rows")
    FP8_SUBNORMALS_READ_AS_ZERO = "matrix engine: FP8 (E4M3, E5M2) subnormal operands are read as zero"
    DMA_BURST_CROSSES_PAGE = ("DMA: a burst is not split at a 4 KiB boundary, so the DRAM wraps its tail to the "
                              "start of the page")
    DMA_ODD_ROWS_DROPS_LAST = "DMA load: a 2D descriptor with an odd number of rows (> 1) drops its last row"
    VECTOR_EXPSUB_UNROUNDED = ("vector unit: EXPSUB feeds exp the difference a - b without its rounding increment "
                               "(truncated toward zero) instead of rounded to nearest even")


@dataclass(frozen=True)
class Revision:
    name: str
    code: int
    defects: frozenset[Defect]


D = Defect
REVISIONS: dict[str, Revision] = {
    r.name: r
    for r in (
        Revision("A0", 0xA0, frozenset({
            D.ENGINE_K1_IGNORES_ACCUMULATE, D.ENGINE_B2B_STALE_A_WORD, D.REDUCE_MAX_FOLDS_FROM_ZERO,
            D.REDUCE_SUM_DROPS_ODD_LAST, D.OPERAND_TOP_WORD_READS_ZERO, D.FP8_SUBNORMALS_READ_AS_ZERO,
            D.DMA_BURST_CROSSES_PAGE,
        })),
        # A1: metal fix for the back-to-back feed and the odd SUM.
        Revision("A1", 0xA1, frozenset({
            D.ENGINE_K1_IGNORES_ACCUMULATE, D.REDUCE_MAX_FOLDS_FROM_ZERO, D.OPERAND_TOP_WORD_READS_ZERO,
            D.FP8_SUBNORMALS_READ_AS_ZERO, D.DMA_BURST_CROSSES_PAGE,
        })),
        # B0: full respin fixes the rest (the DMA splits its bursts at 4 KiB pages), its new issue
        # logic lets REDUCE overtake the drain, its new DMA row counter drops an odd last row, and
        # the vector unit's retimed fused EXPSUB path taps the subtractor before its rounding.
        Revision("B0", 0xB0, frozenset({D.REDUCE_ISSUES_BEFORE_DRAIN, D.DMA_ODD_ROWS_DROPS_LAST,
                                        D.VECTOR_EXPSUB_UNROUNDED})),
        # B1: metal fix of B0's issue logic and of its DMA row counter; taped out, not yet assessed
        # by the software team.
        Revision("B1", 0xB1, frozenset()),
    )
}
del D
BY_CODE: dict[int, Revision] = {r.code: r for r in REVISIONS.values()}
assert len(BY_CODE) == len(REVISIONS), "two revisions share a REV code"


def revision_name(code: int) -> str:
    """The name of a REV code ("A0", ...), or ``"unknown(0x..)"`` for a code no revision has."""
    r = BY_CODE.get(code)
    return r.name if r else f"unknown(0x{code:02x})"


def revision(name: str) -> Revision:
    """Look a revision up by name (case-insensitive); the error lists the known ones."""
    try:
        return REVISIONS[name.upper()]
    except (KeyError, AttributeError):
        raise ValueError(f"unknown revision {name!r}; known revisions: {', '.join(REVISIONS)}") from None
