"""The errata registry: what the software team believes about each silicon revision.

One :class:`Erratum` per known defect. The RTL's truth lives in ``rtl/revisions.py``; the two
are held against each other by running every reproducer on every revision
(``firstlight errata check`` and ``tests/test_errata_matrix.py``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["Erratum", "ERRATA", "BY_ID", "UNITS", "CATEGORIES", "ASSESSED_REVISIONS", "erratum"]

UNITS = {"engine": "matrix engine", "reduce": "reduction unit", "sram": "SRAMs", "cmdproc": "command processor"}
CATEGORIES = {"A": "no workaround", "B": "workaround with a cost", "C": "minor"}
# Revisions the software team has assessed: any other REV reads as "Unknown".
ASSESSED_REVISIONS = ("A0", "A1", "B0")


@dataclass(frozen=True)
class Erratum:
    id: str
    title: str
    unit: str
    category: str
    affected: tuple[str, ...]
    fixed_in: str | None
    defect: str  # the rtl.revisions.DEFECTS entry this record describes
    conditions: str
    description: str
    implication: str
    reproducer: str  # function name in workarounds.reproducers
    mitigation: str  # "Mitigated: <how>" text; empty for category A
    mitigation_kind: str  # "stream" (a pass over every command stream) or "kernel" (algorithm change)
    cell: dict | list = field(default_factory=dict, compare=False)  # kernel run(s) meeting the conditions
    scale: dict = field(default_factory=dict, compare=False)  # a realistic workload for the cost at scale


ERRATA: tuple[Erratum, ...] = (
    Erratum(
        id="FL-ME-001",
        title="MATMUL with K=1 ignores accumulate",
        unit="engine",
        category="B",
        affected=("A0", "A1"),
        fixed_in="B0",
        defect="engine_k1_ignores_accumulate",
        conditions="MATMUL with length (K) == 1 and the accumulate flag set.",
        description="The write-back stage takes the single K step as both first and last and overwrites C "
        "instead of adding into it.",
        implication="A GEMM whose K splits into chunks with a trailing chunk of one step loses everything "
        "accumulated before that chunk.",
        reproducer="repro_k1_accumulate",
        mitigation="K chunks are chosen so that no accumulating chunk has a single step",
        mitigation_kind="kernel",
        cell={"kernel": "gemm", "m": 4, "n": 4, "k": 33, "k_chunk": 16},
        scale={"kernel": "gemm", "m": 64, "n": 64, "k": 1025},
    ),
    Erratum(
        id="FL-ME-002",
        title="Back-to-back MATMUL reads a stale first A word",
        unit="engine",
        category="B",
        affected=("A0",),
        fixed_in="A1",
        defect="engine_b2b_stale_a_word",
        conditions="A MATMUL issued in the cycle its predecessor's feed slot ends (no bubble between them).",
        description="The A address register is not reloaded on a zero-gap start: the first K step reads A at "
        "the previous command's base + K.",
        implication="Every tile but the first of a streamed GEMM uses a wrong A[:, 0].",
        reproducer="repro_b2b_stale_a",
        mitigation="each A panel carries a copy of its first word at base + K, so the stale read returns the "
        "right value; a FENCE separates MATMULs on different panels",
        mitigation_kind="kernel",
        cell={"kernel": "gemm", "m": 8, "n": 8, "k": 16},
        scale={"kernel": "gemm", "m": 128, "n": 128, "k": 128},
    ),
    Erratum(
        id="FL-RU-001",
        title="REDUCE MAX folds from zero",
        unit="reduce",
        category="B",
        affected=("A0", "A1"),
        fixed_in="B0",
        defect="reduce_max_folds_from_zero",
        conditions="REDUCE with op MAX over words whose maximum is negative.",
        description="The fold register starts at 0 instead of the first word's lane-tree result.",
        implication="Row maxima of all-negative rows read 0 (softmax max-subtraction goes wrong).",
        reproducer="repro_max_from_zero",
        mitigation="MAX is computed as ~MIN(~x) (bitwise complement is an exact, order-reversing int32 map)",
        mitigation_kind="kernel",
        cell={"kernel": "reduce", "rows": 3, "cols": 10, "op": "max", "negative": True},
        scale={"kernel": "reduce", "rows": 64, "cols": 1024, "op": "max", "negative": True},
    ),
    Erratum(
        id="FL-RU-002",
        title="REDUCE SUM drops the last word when count is odd",
        unit="reduce",
        category="B",
        affected=("A0",),
        fixed_in="A1",
        defect="reduce_sum_drops_odd_last",
        conditions="REDUCE with op SUM and an odd count.",
        description="The fold stage skips the word flagged last when the count is odd; with count 1 the "
        "previous REDUCE's result is written again.",
        implication="Row sums silently miss up to LANES values.",
        reproducer="repro_sum_odd_count",
        mitigation="SUM segments are padded with a zero word to an even count",
        mitigation_kind="kernel",
        cell={"kernel": "reduce", "rows": 3, "cols": 12, "op": "sum"},
        scale={"kernel": "reduce", "rows": 64, "cols": 1028, "op": "sum"},
    ),
    Erratum(
        id="FL-SR-001",
        title="Engine reads the top word of operand SRAM B as zero",
        unit="sram",
        category="B",
        affected=("A0", "A1"),
        fixed_in="B0",
        defect="operand_top_word_reads_zero",
        conditions="A MATMUL whose B range includes word OPERAND_DEPTH-1.",
        description="The engine read port's address decoder drops the last row of the B bank; the front-door "
        "window still sees the right data.",
        implication="A GEMM that fills the B SRAM computes one K step of a tile column with zeros.",
        reproducer="repro_top_word",
        mitigation="kernels plan with OPERAND_DEPTH-1 words of B",
        mitigation_kind="kernel",
        cell={"kernel": "gemm", "m": 4, "n": 8, "k": 1024},
        scale={"kernel": "gemm", "m": 128, "n": 128, "k": 128},
    ),
    Erratum(
        id="FL-CP-001",
        title="REDUCE can issue before the engine has drained",
        unit="cmdproc",
        category="B",
        affected=("B0",),
        fixed_in=None,
        defect="reduce_issues_before_drain",
        conditions="A REDUCE queued directly behind a MATMUL, reading accumulator words that MATMUL writes.",
        description="B0's new issue logic checks only that the engine feed is free, not that its last rows are "
        "written, before it starts a REDUCE.",
        implication="Fused GEMM + reduction kernels reduce stale accumulator words.",
        reproducer="repro_reduce_overtakes_drain",
        mitigation="a FENCE is inserted before every REDUCE that follows a MATMUL in a command stream",
        mitigation_kind="stream",
        cell={"kernel": "gemm_sum", "m": 4, "n": 4, "k": 20},
        scale={"kernel": "gemm_sum", "m": 64, "n": 64, "k": 64},
    ),
)

ERRATA = ERRATA + (
    Erratum(
        id="FL-NU-001",
        title="FP8 subnormal operands read as zero",
        unit="engine",
        category="B",
        affected=("A0", "A1"),
        fixed_in="B0",
        defect="fp8_subnormals_read_as_zero",
        conditions="E4M3 or E5M2 MATMUL with subnormal operand codes (exponent field 0, mantissa != 0).",
        description="The PE operand decoder drops the significand of subnormal FP8 codes (denormals-are-zero).",
        implication="Unscaled (cast) FP8 on small-magnitude data loses everything below the normal range: on "
        "N(0,1)*2^-8 E4M3 falls from about 14 dB (as specified) to 0 dB; amax-scaled FP8 is rarely hit.",
        reproducer="repro_fp8_subnormal",
        mitigation="per-tensor and cast FP8 run with per-block power-of-two scales (rceil) that keep elements "
        "normal, and any code still subnormal is flushed to zero in software so the chip and the golden agree",
        mitigation_kind="kernel",
        cell={"kernel": "lowp", "recipe": "fp8-e4m3-cast", "dist": "small", "m": 8, "n": 8, "k": 64},
        scale={"kernel": "lowp", "recipe": "fp8-e4m3-cast", "dist": "small", "m": 32, "n": 32, "k": 1024},
    ),
)

BY_ID: dict[str, Erratum] = {e.id: e for e in ERRATA}


def erratum(err_id: str) -> Erratum:
    try:
        return BY_ID[err_id]
    except KeyError:
        raise KeyError(f"unknown erratum {err_id!r}; known: {', '.join(BY_ID)}") from None
