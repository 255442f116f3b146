"""Regression cells: the kernel runs an erratum record names as meeting its conditions.

A cell is data (which kernel, which shape); ``firstlight/jobs/errata.py`` runs it on the chip
and checks it against the golden. Typed, so a misspelt kernel or field fails at import and the
registry lint can validate every value.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["GemmCell", "GemmSumCell", "ReduceCell", "LowpCell", "DmaCell", "VecCell", "TileCell", "Cell",
           "CELL_TYPES",
           "describe"]


class _MNK:
    """Cells of an ``m x n x k`` GEMM name their shape the same way."""

    def shape(self) -> str:
        return f"{self.m}x{self.n}x{self.k}"


@dataclass(frozen=True)
class GemmCell(_MNK):
    """int8 GEMM (kernels.gemm) of ``m x n x k``; ``k_chunk`` caps the K steps per MATMUL."""

    m: int
    n: int
    k: int
    k_chunk: int | None = None
    kernel = "gemm"


@dataclass(frozen=True)
class GemmSumCell(_MNK):
    """Fused GEMM + global SUM (kernels.fused.gemm_sum)."""

    m: int
    n: int
    k: int
    kernel = "gemm_sum"


@dataclass(frozen=True)
class ReduceCell:
    """Row reduction (kernels.reduce.reduce_rows); ``negative`` draws only negative values."""

    rows: int
    cols: int
    op: str
    negative: bool = False
    kernel = "reduce"

    def shape(self) -> str:
        return f"{self.rows}x{self.cols}"


@dataclass(frozen=True)
class LowpCell(_MNK):
    """Low-precision GEMM (kernels.lowp.gemm_lowp) with a quantization recipe on a distribution."""

    recipe: str
    dist: str
    m: int
    n: int
    k: int
    kernel = "lowp"


@dataclass(frozen=True)
class DmaCell:
    """DRAM -> ACC -> DRAM by 2D DMA (workarounds.dma_streams; a raw stream until the kernels move
    their data by DMA): ``rows`` rows of ``words`` accumulator words, ``pitch`` words apart in
    DRAM, the first row ``offset`` words past a 4 KiB page. The load signals the store's wait."""

    rows: int
    words: int
    pitch: int
    offset: int = 0
    kernel = "dma"

    def shape(self) -> str:
        return f"{self.rows}x{self.words} pitch {self.pitch} +{self.offset}"


@dataclass(frozen=True)
class VecCell:
    """One vector-unit op over an fp32 matrix (kernels.vector.elementwise) of N(0, 4^2) values,
    ``rows x cols``, with ``b`` broadcast as ``broadcast`` says (golden.vector.vector_op)."""

    op: str
    broadcast: str
    rows: int
    cols: int
    kernel = "elementwise"

    def shape(self) -> str:
        return f"{self.op}/{self.broadcast} {self.rows}x{self.cols}"


@dataclass(frozen=True)
class TileCell:
    """A tile-language kernel (kernels/tiled/, by its KernelSpec name) at ``params`` (name, value
    pairs) on its declaration's seeded inputs, against its golden. Every mitigation written as a
    compiler pass or a stream pass reaches it, so its cell proves that pass on a compiled stream."""

    name: str
    params: tuple[tuple[str, object], ...]
    kernel = "tile"

    def shape(self) -> str:
        return f"{self.name} " + " ".join(f"{k}={v}" for k, v in self.params)


Cell = GemmCell | GemmSumCell | ReduceCell | LowpCell | DmaCell | VecCell | TileCell
CELL_TYPES = (GemmCell, GemmSumCell, ReduceCell, LowpCell, DmaCell, VecCell, TileCell)


def describe(cell: Cell) -> str:
    return f"{cell.kernel} {cell.shape()}"
