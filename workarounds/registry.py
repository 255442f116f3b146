"""The errata registry: what the software team believes about each silicon revision.

One :class:`Erratum` per known defect. The RTL's truth lives in ``rtl/revisions.py``; the two
are held against each other by running every reproducer on every revision
(``firstlight errata check`` and ``tests/test_errata_matrix.py``).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from rtl.revisions import Defect

from .cells import Cell, DmaCell, GemmCell, GemmSumCell, LowpCell, ReduceCell, TileCell, VecCell

__all__ = ["Erratum", "ERRATA", "BY_ID", "Unit", "UNITS", "CATEGORIES", "ID_PREFIXES", "ASSESSED_REVISIONS",
           "erratum"]


class Unit(enum.Enum):
    """The chip unit an erratum lives in; kernels name the units they use."""

    ENGINE = "matrix engine"
    REDUCE = "reduction unit"
    SRAM = "SRAMs"
    CMDPROC = "command processor"
    DMA = "DMA"
    VECTOR = "vector unit"


UNITS = {u: u.value for u in Unit}
CATEGORIES = {"A": "no workaround", "B": "workaround with a cost", "C": "minor"}
# Erratum ids look like FL-<prefix>-NNN; the prefix names the area (not always the unit).
ID_PREFIXES = {"ME": "matrix engine", "RU": "reduction unit", "SR": "SRAMs", "CP": "command processor",
               "NU": "numerics", "DM": "DMA", "VU": "vector unit"}
# Revisions the software team has assessed: any other REV reads as "Unknown".
ASSESSED_REVISIONS = ("A0", "A1", "B0")


@dataclass(frozen=True)
class Erratum:
    id: str
    title: str
    unit: Unit
    category: str
    affected: tuple[str, ...]
    fixed_in: str | None
    defect: Defect  # the RTL defect this record describes
    conditions: str
    description: str
    implication: str
    reproducer: str  # function name in workarounds.reproducers (the lint checks it exists)
    mitigation: str  # "Mitigated: <how>" text; empty for category A
    mitigation_kind: str  # "stream" (a pass over every command stream) or "kernel" (algorithm change)
    cell: Cell | tuple[Cell, ...] | None = field(default=None, compare=False)  # kernel run(s) meeting the conditions
    scale: Cell | None = field(default=None, compare=False)  # a realistic workload for the cost at scale
    # a tile-language kernel meeting the conditions: the matrix runs it on and off too, so each
    # mitigation is proven on the compiled streams of kernels/tiled/ as well (kernels/tile/errata.py)
    tile_cell: Cell | tuple[Cell, ...] | None = field(default=None, compare=False)
    # Kernel mitigations: the constraint knobs they set, {family: {field: value}} (constraints.py).
    knobs: dict = field(default_factory=dict, compare=False)
    # A chip feature the erratum's conditions need ("fp8": an E4M3 or E5M2 path, "vector": the
    # vector unit); on a chip built without it the erratum cannot arise (NEEDS).
    needs: str | None = None


# What each ``needs`` value asks of a rtl.config.ChipConfig, and how to say it is missing.
NEEDS = {
    "fp8": (lambda cfg: bool({"e4m3", "e5m2"} & set(cfg.formats)), "this chip has no FP8 path (formats {formats})"),
    "vector": (lambda cfg: bool(cfg.vector), "this chip has no vector unit"),
}


_TOP_WORD_CELLS = (TileCell("gemm", (("m", 4), ("n", 4), ("k", 1024), ("kc", 512))),
                   TileCell("gemm", (("m", 4), ("n", 28), ("k", 146), ("ga", 1), ("gb", 7), ("kc", 73))))

ERRATA: tuple[Erratum, ...] = (
    Erratum(
        id="FL-ME-001",
        title="MATMUL with K=1 ignores accumulate",
        unit=Unit.ENGINE,
        category="B",
        affected=("A0", "A1"),
        fixed_in="B0",
        defect=Defect.ENGINE_K1_IGNORES_ACCUMULATE,
        conditions="MATMUL with length (K) == 1 and the accumulate flag set.",
        description="The write-back stage takes the single K step as both first and last and overwrites C "
        "instead of adding into it.",
        implication="A GEMM whose K splits into chunks with a trailing chunk of one step loses everything "
        "accumulated before that chunk.",
        reproducer="repro_k1_accumulate",
        mitigation="K chunks are chosen so that no accumulating chunk has a single step",
        mitigation_kind="kernel",
        cell=GemmCell(m=4, n=4, k=33, k_chunk=4),  # eight 4-step chunks and a 1-step one (even chunks)
        scale=GemmCell(m=64, n=64, k=1025),
        tile_cell=TileCell("gemm", (("m", 4), ("n", 4), ("k", 33), ("kc", 4))),
        knobs={"gemm": {"avoid_unit_chunk": True}},
    ),
    Erratum(
        id="FL-ME-002",
        title="Back-to-back MATMUL reads a stale first A word",
        unit=Unit.ENGINE,
        category="B",
        affected=("A0",),
        fixed_in="A1",
        defect=Defect.ENGINE_B2B_STALE_A_WORD,
        conditions="A MATMUL issued in the cycle its predecessor's feed slot ends (no bubble between them).",
        description="The A address register is not reloaded on a zero-gap start: the first K step reads A at "
        "the previous command's base + K.",
        implication="Every tile but the first of a streamed GEMM uses a wrong A[:, 0].",
        reproducer="repro_b2b_stale_a",
        mitigation="each A panel carries a copy of its first word at base + K, so the stale read returns the "
        "right value; before each change of panel, an int8 GEMM queues a 2-step spacer MATMUL on zero B words "
        "that ends where the next panel starts (4 cycles on 4x4), an FP GEMM a FENCE (a 12-cycle drain); a product "
        "with more A panels than B panels (attention's O^T = V^T P^T) runs B panel by B panel over A panels "
        "packed without copies, where the stale read is the next panel's own first word, so it needs a spacer "
        "(FP: a FENCE) per B panel only",
        mitigation_kind="kernel",
        cell=GemmCell(m=8, n=8, k=16),
        scale=GemmCell(m=128, n=128, k=128),
        tile_cell=TileCell("gemm", (("m", 8), ("n", 8), ("k", 16))),
        knobs={"gemm": {"repeat_first_a_word": True}},
    ),
    Erratum(
        id="FL-RU-001",
        title="REDUCE MAX folds from zero",
        unit=Unit.REDUCE,
        category="B",
        affected=("A0", "A1"),
        fixed_in="B0",
        defect=Defect.REDUCE_MAX_FOLDS_FROM_ZERO,
        conditions="REDUCE with op MAX over words whose maximum is negative.",
        description="The fold register starts at 0 instead of the first word's lane-tree result.",
        implication="Row maxima of all-negative rows read 0 (softmax max-subtraction goes wrong).",
        reproducer="repro_max_from_zero",
        mitigation="MAX is computed as ~MIN(~x) (bitwise complement is an exact, order-reversing int32 map)",
        mitigation_kind="kernel",
        cell=ReduceCell(rows=3, cols=10, op="max", negative=True),
        scale=ReduceCell(rows=64, cols=1024, op="max", negative=True),
        knobs={"reduce": {"max_via_min": True}},
    ),
    Erratum(
        id="FL-RU-002",
        title="REDUCE SUM drops the last word when count is odd",
        unit=Unit.REDUCE,
        category="B",
        affected=("A0",),
        fixed_in="A1",
        defect=Defect.REDUCE_SUM_DROPS_ODD_LAST,
        conditions="REDUCE with op SUM and an odd count.",
        description="The fold stage skips the word flagged last when the count is odd; with count 1 the "
        "previous REDUCE's result is written again.",
        implication="Row sums silently miss up to LANES values.",
        reproducer="repro_sum_odd_count",
        mitigation="SUM segments are padded with a zero word to an even count",
        mitigation_kind="kernel",
        cell=ReduceCell(rows=3, cols=12, op="sum"),
        scale=ReduceCell(rows=64, cols=1028, op="sum"),
        knobs={"reduce": {"even_sum_count": True}},
    ),
    Erratum(
        id="FL-SR-001",
        title="Engine reads the top word of operand SRAM B as zero",
        unit=Unit.SRAM,
        category="B",
        affected=("A0", "A1"),
        fixed_in="B0",
        defect=Defect.OPERAND_TOP_WORD_READS_ZERO,
        conditions="A MATMUL whose B range includes word OPERAND_DEPTH-1.",
        description="The engine read port's address decoder drops the last row of the B bank; the front-door "
        "window still sees the right data.",
        implication="A GEMM that fills the B SRAM computes one K step of a tile column with zeros.",
        reproducer="repro_top_word",
        mitigation="kernels plan with OPERAND_DEPTH-1 words of B",
        mitigation_kind="kernel",
        # the second B buffer ends at the top word: one panel in chunks of 512 (A1, B0), or, above
        # FL-ME-002's two spacer words (A0), 7 panels of 73 steps (511 words a buffer); the GEMM's
        # own planner keeps clear of the top word with or without the mitigation, so the cell fixes
        # its tiling
        cell=_TOP_WORD_CELLS,
        scale=GemmCell(m=128, n=128, k=128),
        tile_cell=_TOP_WORD_CELLS,
        knobs={"gemm": {"b_reserved_top_words": 1}},
    ),
    Erratum(
        id="FL-CP-001",
        title="REDUCE can issue before the engine has drained",
        unit=Unit.CMDPROC,
        category="B",
        affected=("B0",),
        fixed_in=None,
        defect=Defect.REDUCE_ISSUES_BEFORE_DRAIN,
        conditions="A REDUCE queued directly behind a MATMUL, reading accumulator words that MATMUL writes.",
        description="B0's new issue logic checks only that the engine feed is free, not that its last rows are "
        "written, before it starts a REDUCE.",
        implication="Fused GEMM + reduction kernels reduce stale accumulator words.",
        reproducer="repro_reduce_overtakes_drain",
        mitigation="a FENCE is inserted before every REDUCE that follows a MATMUL in a command stream",
        mitigation_kind="stream",
        cell=GemmSumCell(m=4, n=4, k=20),
        scale=GemmSumCell(m=64, n=64, k=64),
    ),
)

ERRATA = ERRATA + (
    Erratum(
        id="FL-NU-001",
        title="FP8 subnormal operands read as zero",
        unit=Unit.ENGINE,
        category="B",
        affected=("A0", "A1"),
        fixed_in="B0",
        defect=Defect.FP8_SUBNORMALS_READ_AS_ZERO,
        needs="fp8",
        conditions="E4M3 or E5M2 MATMUL with subnormal operand codes (exponent field 0, mantissa != 0).",
        description="The PE operand decoder drops the significand of subnormal FP8 codes (denormals-are-zero).",
        implication="Unscaled (cast) FP8 on small-magnitude data loses everything below the normal range: on "
        "N(0,1)*2^-8 E4M3 falls from about 14 dB (as specified) to 0 dB; amax-scaled FP8 is rarely hit.",
        reproducer="repro_fp8_subnormal",
        mitigation="per-tensor and cast FP8 run with per-block power-of-two scales (rceil) that keep elements "
        "normal, and any code still subnormal is flushed to zero in software so the chip and the golden agree",
        mitigation_kind="kernel",
        cell=LowpCell(recipe="fp8-e4m3-cast", dist="small", m=8, n=8, k=64),
        scale=LowpCell(recipe="fp8-e4m3-cast", dist="small", m=32, n=32, k=1024),
        # the tile kernel's host recipe (KernelSpec.prepare): N(0, 1) cast to E4M3 has ~1% subnormal codes
        tile_cell=TileCell("gemm_fp", (("m", 8), ("n", 8), ("k", 64), ("recipe", "fp8-e4m3-cast"))),
        knobs={"lowp": {"fp8_subnormals_flushed": True}},
    ),
)

ERRATA = ERRATA + (
    Erratum(
        id="FL-DM-001",
        title="DMA burst across a 4 KiB page wraps to the start of the page",
        unit=Unit.DMA,
        category="B",
        affected=("A0", "A1"),
        fixed_in="B0",
        defect=Defect.DMA_BURST_CROSSES_PAGE,
        conditions="A DMA_LOAD or DMA_STORE one of whose rows crosses a 4 KiB DRAM page boundary, so that a "
        "burst (up to 16 beats, never past the row's end) starts before the boundary and ends after it.",
        description="The DMA's burst splitter stops a burst at the row's end and at 16 beats but not at the page; "
        "the board's DRAM increments a burst only within its 4 KiB page (as AXI allows), so the beats past the "
        "boundary come from (load) or go to (store) the start of the same page.",
        implication="A load fills the tail of the burst with bytes from the start of the page; a store writes its "
        "tail over the start of the page and leaves the right bytes unwritten. A buffer that is not page-aligned "
        "or a row pitch that does not divide 4 KiB meets it; nothing faults or waits.",
        reproducer="repro_dma_page_crossing",
        mitigation="every DMA row that crosses a page is split at the page into 1-row DMAs (rows that do not cross "
        "stay one 2D DMA; the wait goes on the first DMA, the signals on the last); a row that would cross inside "
        "an SRAM word (its DRAM address not a multiple of the word size) cannot be split, and the stream is refused",
        mitigation_kind="stream",
        cell=DmaCell(rows=4, words=8, pitch=129, offset=252),
        scale=DmaCell(rows=60, words=16, pitch=17),
        # 1,200-byte tiles: the fourth, from byte 3,600, has a burst from 4,048 across the page
        tile_cell=TileCell("softmax", (("rows", 12), ("cols", 100), ("tile_rows", 3))),
    ),
    Erratum(
        id="FL-DM-002",
        title="2D DMA load with an odd number of rows drops its last row",
        unit=Unit.DMA,
        category="B",
        affected=("B0",),
        fixed_in=None,
        defect=Defect.DMA_ODD_ROWS_DROPS_LAST,
        conditions="A DMA_LOAD (into any SRAM) with an odd number of rows greater than 1.",
        description="B0's new load row counter steps over pairs of rows, so an odd count stops one row early; the "
        "load still completes and signals its semaphores.",
        implication="The last row of the tile keeps what the SRAM held before: a tile with an odd number of rows "
        "(a matrix edge) is computed on stale data, silently.",
        reproducer="repro_dma_odd_rows",
        mitigation="a DMA_LOAD with an odd number of rows > 1 is split into rows - 1 rows and a 1-row DMA of the "
        "last row (the wait goes on the first, the signals on the last)",
        mitigation_kind="stream",
        cell=DmaCell(rows=5, words=8, pitch=16),
        scale=DmaCell(rows=63, words=16, pitch=16),
        tile_cell=TileCell("gemm", (("m", 12), ("n", 4), ("k", 16), ("ga", 3), ("kc", 8))),  # a 3-row 2D A load
    ),
    Erratum(
        id="FL-VU-001",
        title="EXPSUB exponentiates the difference truncated instead of rounded",
        unit=Unit.VECTOR,
        category="B",
        affected=("B0",),
        fixed_in=None,
        defect=Defect.VECTOR_EXPSUB_UNROUNDED,
        needs="vector",
        conditions="A VEC EXPSUB whose difference a - b is not exact in fp32 (nearly every flash-attention "
        "score; the softmax kernel issues FSUB and EXP and is not exposed).",
        description="B0's retimed fused path gives the exponential a subtractor of its own, tapped before the "
        "rounding increment: exp reads a - b truncated toward zero where it should read it rounded to nearest "
        "even. FSUB and EXP issued separately are correct.",
        implication="Flash-attention numerators are off by up to a few ulps (exp of a difference one "
        "ulp too close to zero), so results are no longer bit-exact against the documented algorithm; the error "
        "is biased (always toward exp(0)).",
        reproducer="repro_expsub_unrounded",
        mitigation="every EXPSUB is issued as FSUB into its destination then EXP in place (two passes over the "
        "words instead of one)",
        mitigation_kind="stream",
        cell=VecCell(op="expsub", broadcast="row", rows=5, cols=9),
        scale=TileCell("flash_attention", (("seq", 64), ("dim", 32))),
    ),
)

BY_ID: dict[str, Erratum] = {e.id: e for e in ERRATA}


def erratum(err_id: str) -> Erratum:
    """Look an erratum up by id, case-insensitive (fl-me-002 is FL-ME-002)."""
    try:
        return BY_ID[err_id.strip().upper()]
    except (KeyError, AttributeError):
        import difflib

        close = difflib.get_close_matches(str(err_id).upper(), list(BY_ID), n=1, cutoff=0.5)
        hint = f"; did you mean {close[0]}?" if close else ""
        raise KeyError(f"unknown erratum {err_id!r}{hint}; known: {', '.join(BY_ID)}") from None
