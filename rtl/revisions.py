"""Silicon revisions and the hardware defects each one has.

A defect is a structural difference in the generated RTL, selected when the chip is
elaborated for a revision. The names here are hardware facts ("what the RTL does"); the
software's beliefs about them (errata ids, mitigations) live in ``workarounds/`` and are held
against the real RTL by running reproducers on every revision.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Revision", "REVISIONS", "DEFECTS", "revision"]

DEFECTS: dict[str, str] = {
    "engine_k1_ignores_accumulate": "matrix engine: a MATMUL with K == 1 writes C instead of adding into it",
    "engine_b2b_stale_a_word": "matrix engine: a MATMUL starting with no gap after another reads its first A word "
    "from the previous command's next address",
    "reduce_max_folds_from_zero": "reduction unit: MAX starts its fold from 0 instead of the first word",
    "reduce_sum_drops_odd_last": "reduction unit: SUM with an odd count drops the last word",
    "operand_top_word_reads_zero": "operand SRAM B: the engine port reads the last word (depth-1) as 0",
    "reduce_issues_before_drain": "command processor: REDUCE issues once the engine feed is free, before the "
    "engine has written its last rows",
    "fp8_subnormals_read_as_zero": "matrix engine: FP8 (E4M3, E5M2) subnormal operands are read as zero",
}


@dataclass(frozen=True)
class Revision:
    name: str
    code: int
    defects: frozenset[str]


REVISIONS: dict[str, Revision] = {
    r.name: r
    for r in (
        Revision("A0", 0xA0, frozenset({
            "engine_k1_ignores_accumulate", "engine_b2b_stale_a_word", "reduce_max_folds_from_zero",
            "reduce_sum_drops_odd_last", "operand_top_word_reads_zero", "fp8_subnormals_read_as_zero",
        })),
        # A1: metal fix for the back-to-back feed and the odd SUM.
        Revision("A1", 0xA1, frozenset({
            "engine_k1_ignores_accumulate", "reduce_max_folds_from_zero", "operand_top_word_reads_zero",
            "fp8_subnormals_read_as_zero",
        })),
        # B0: full respin fixes the rest, and its new issue logic lets REDUCE overtake the drain.
        Revision("B0", 0xB0, frozenset({"reduce_issues_before_drain"})),
        # B1: metal fix of B0's issue logic; taped out, not yet assessed by the software team.
        Revision("B1", 0xB1, frozenset()),
    )
}
assert all(d in DEFECTS for r in REVISIONS.values() for d in r.defects)


def revision(name: str) -> Revision:
    try:
        return REVISIONS[name]
    except KeyError:
        raise ValueError(f"unknown revision {name!r}; known revisions: {', '.join(REVISIONS)}") from None
