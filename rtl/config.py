"""The chip's build-time parameters.

One frozen :class:`ChipConfig` describes a chip variant. The RTL is elaborated from it, the
``CAPS`` registers publish it, and software discovers it from those registers instead of
hard-coding it.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ChipConfig", "FORMAT_NAMES", "DEFAULT_TRACE_DEPTH", "MAX_TRACE_DEPTH", "log2"]

# Operand formats in Format (rtl/isa.py) order; CAPS0.formats has one bit per entry.
FORMAT_NAMES = ("int8", "e4m3", "e5m2", "e2m1")

_POW2_DIMS = (2, 4, 8, 16)

# The trace buffer's entries (docs/chip.md, "Trace buffer"). The default keeps every event of a
# 64^3 GEMM on 4x4 (1,688) and of the bench's row kernels (layernorm 64x256: 1,288), in 64 KiB,
# the accumulator SRAM's size; the bring-up checklist tests every cell of it through the window,
# which costs 7.5 s more than the old 512 entries did (16384 would keep a 128^3 GEMM's 11,168 but
# cost 31 s more, for an SRAM four times the accumulator's). The numbers and the commands that
# measure them are in docs/chip.md. The most is what TRACE_COUNT.count (16 bits) can count.
DEFAULT_TRACE_DEPTH = 4096
MAX_TRACE_DEPTH = 32768


def _is_pow2(n: int) -> bool:
    return n > 0 and (n & (n - 1)) == 0


def log2(n: int) -> int:
    """Address bits for ``n`` words (exact for the powers of two the config allows)."""
    return (n - 1).bit_length()


@dataclass(frozen=True)
class ChipConfig:
    """Parameters of one chip variant.

    Parameters
    ----------
    rows, cols : int
        PEs in the systolic array (peak ``rows * cols`` int8 MACs per cycle). One of 2, 4, 8, 16.
    lanes : int or None
        int32 lanes in one accumulator word. An accumulator word holds one row of a C tile, so
        it must equal ``cols``; ``None`` means ``cols``.
    operand_depth : int
        Words in each of the A and B operand SRAMs (power of two, 16..65536).
    acc_depth : int
        Words in the accumulator SRAM (power of two, 16..65536).
    cmd_fifo_depth : int
        Commands the command processor prefetches ahead of execution (2..256).
    cmdq_depth : int
        Entries in the command ring in memory (power of two, 4..65536).
    formats : tuple of str
        MATMUL operand formats the engine is built with (``int8`` always; ``e4m3``, ``e5m2``,
        ``e2m1``). The FP path costs simulation speed: an int8-only chip simulates ~3.5x faster.
    vector : bool
        Build the vector unit (rtl/vector.py: VEC commands, LANES fp32 lanes). A chip without it
        rejects VEC with ERR BAD_VEC_OP; it simulates faster (a test that needs only some chip).
    trace_depth : int
        Entries in the trace buffer (the TRACE SRAM, 128 bits each; power of two, 4..32768, the
        most that TRACE_COUNT.count's 16 bits count). Published in TRACE_DEPTH. Events past it are
        dropped and counted (TRACE_DROPPED), so a trace that must cover a run needs a depth of at
        least the run's events.
    """

    rows: int = 4
    cols: int = 4
    lanes: int | None = None
    operand_depth: int = 1024
    acc_depth: int = 1024
    cmd_fifo_depth: int = 16
    cmdq_depth: int = 1024
    formats: tuple[str, ...] = FORMAT_NAMES
    vector: bool = True
    trace_depth: int = DEFAULT_TRACE_DEPTH

    def __post_init__(self) -> None:
        for name in ("rows", "cols"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v not in _POW2_DIMS:
                raise ValueError(f"{name} must be one of {_POW2_DIMS}, not {v!r}")
        if self.lanes is None:
            object.__setattr__(self, "lanes", self.cols)
        if self.lanes != self.cols:
            raise ValueError(
                f"lanes must equal cols ({self.cols}): an accumulator word holds one row of a "
                f"C tile; got lanes={self.lanes!r}"
            )
        for name, lo, hi in (
            ("operand_depth", 16, 65536),
            ("acc_depth", 16, 65536),
            ("cmdq_depth", 4, 65536),
            ("trace_depth", 4, MAX_TRACE_DEPTH),
        ):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or not _is_pow2(v) or not lo <= v <= hi:
                why = " (TRACE_COUNT.count is 16 bits)" if name == "trace_depth" else ""
                raise ValueError(f"{name} must be a power of two in [{lo}, {hi}]{why}, not {v!r}")
        v = self.cmd_fifo_depth
        if not isinstance(v, int) or isinstance(v, bool) or not 2 <= v <= 256:
            raise ValueError(f"cmd_fifo_depth must be an integer in [2, 256], not {v!r}")
        fm = self.formats
        if isinstance(fm, list):
            object.__setattr__(self, "formats", tuple(fm))
            fm = self.formats
        if not isinstance(fm, tuple) or "int8" not in fm or any(f not in FORMAT_NAMES for f in fm) or len(set(fm)) != len(fm):
            raise ValueError(f"formats must be distinct names from {FORMAT_NAMES} including 'int8', not {fm!r}")
        object.__setattr__(self, "formats", tuple(f for f in FORMAT_NAMES if f in fm))
        if self.has_fp and self.operand_depth > 8192:
            raise ValueError(f"operand_depth must be <= 8192 on a chip with FP formats (MATMUL addresses scale "
                             f"words in 8 bits), not {self.operand_depth}; or build int8-only")
        if self.has_fp and self.operand_depth < 64:
            raise ValueError(f"operand_depth must be >= 64 on a chip with FP formats (one 32-step block plus the "
                             f"words errata mitigations reserve), not {self.operand_depth}; or build int8-only")
        if not isinstance(self.vector, bool):
            raise ValueError(f"vector must be True or False, not {self.vector!r}")
        if self.acc_depth < self.rows:
            raise ValueError(f"acc_depth ({self.acc_depth}) must hold one C tile ({self.rows} words)")

    # Derived widths, used by the RTL and the software alike.
    @property
    def operand_word_bits(self) -> int:
        """Bits in one A word (``rows`` int8) -- B words are padded to the same width."""
        return 8 * max(self.rows, self.cols)

    @property
    def a_word_bits(self) -> int:
        return 8 * self.rows

    @property
    def b_word_bits(self) -> int:
        return 8 * self.cols

    @property
    def acc_word_bits(self) -> int:
        return 32 * self.lanes

    @property
    def scale_depth(self) -> int:
        """Words in each block-scale SRAM (one per 32 operand words)."""
        return max(2, self.operand_depth // 32)

    @property
    def peak_macs_per_cycle(self) -> int:
        return self.rows * self.cols

    @property
    def min_matmul_cycles(self) -> int:
        """A MATMUL occupies the operand feed for at least this many cycles (see docs/chip.md)."""
        return max(self.rows, self.cols)

    @property
    def engine_drain_cycles(self) -> int:
        """Cycles the matrix engine stays busy after its last feed step: the skew through the
        array (ROWS + COLS) plus the PE, result and write-back registers (4). rtl/engine.py builds
        its drain counter from this, and the schedule model charges it once per wait for idle."""
        return self.rows + self.cols + 4

    def matmul_busy_cycles(self, k: int) -> int:
        """ENGINE_BUSY cycles of one MATMUL of ``k`` steps on an idle engine: its feed slot
        (``max(k, min_matmul_cycles)``) and the drain after the last step."""
        return max(k, self.min_matmul_cycles) + self.engine_drain_cycles

    def reduce_busy_cycles(self, count: int) -> int:
        """REDUCE_BUSY cycles of one REDUCE over ``count`` words (rtl/reduce.py): ``count`` read
        cycles, the read register, one register per tree level, the fold and the write."""
        return count + 2 + log2(self.lanes)

    @classmethod
    def parse_array(cls, text: str, **kwargs: int) -> "ChipConfig":
        """Build a config from an ``ROWSxCOLS`` string such as ``"8x8"``."""
        parts = text.lower().split("x")
        if len(parts) != 2 or not all(p.isdigit() for p in parts):
            raise ValueError(f"array must look like ROWSxCOLS (e.g. 4x4, 8x8), not {text!r}")
        return cls(rows=int(parts[0]), cols=int(parts[1]), **kwargs)

    def as_dict(self) -> dict[str, int]:
        return {
            "rows": self.rows,
            "cols": self.cols,
            "lanes": int(self.lanes),
            "operand_depth": self.operand_depth,
            "acc_depth": self.acc_depth,
            "cmd_fifo_depth": self.cmd_fifo_depth,
            "cmdq_depth": self.cmdq_depth,
            "formats": list(self.formats),
            "vector": self.vector,
            "trace_depth": self.trace_depth,
        }

    def with_sram_depth(self, depth: int) -> "ChipConfig":
        """This config with every SRAM ``depth`` words: the operand SRAMs, the accumulator, the
        command ring and the trace buffer (at most :data:`MAX_TRACE_DEPTH`), which is what
        ``--sram-depth`` builds (a small chip is quick to test, its trace included)."""
        from dataclasses import replace

        return replace(self, operand_depth=depth, acc_depth=depth, cmdq_depth=depth,
                       trace_depth=min(depth, MAX_TRACE_DEPTH))

    def caps(self) -> dict[str, int]:
        """The values of the registers that publish this config (CAPS0, CAPS1 and the trace
        buffer's TRACE_DEPTH; packed from the register map). :meth:`from_caps` reads them back."""
        from .csr_map import REG

        return {
            "CAPS0": REG["CAPS0"].pack(rows=self.rows, cols=self.cols, lanes=self.lanes, formats=self.formats_mask,
                                       vector=int(self.vector)),
            "CAPS1": REG["CAPS1"].pack(log2_operand_depth=log2(self.operand_depth), log2_acc_depth=log2(self.acc_depth),
                                       cmd_fifo_depth=self.cmd_fifo_depth, log2_cmdq_depth=log2(self.cmdq_depth)),
            "TRACE_DEPTH": REG["TRACE_DEPTH"].pack(entries=self.trace_depth),
        }

    @classmethod
    def from_caps(cls, caps0: int, caps1: int, trace_depth: int) -> "ChipConfig":
        """The config a chip publishes in CAPS0, CAPS1 and TRACE_DEPTH, the three register values
        (raises ValueError if they describe no chip)."""
        from .csr_map import REG

        f0, f1 = REG["CAPS0"].unpack(caps0), REG["CAPS1"].unpack(caps1)
        return cls(
            formats=tuple(n for b, n in enumerate(FORMAT_NAMES) if f0["formats"] >> b & 1), vector=bool(f0["vector"]),
            rows=f0["rows"], cols=f0["cols"], lanes=f0["lanes"],
            operand_depth=1 << f1["log2_operand_depth"], acc_depth=1 << f1["log2_acc_depth"],
            cmd_fifo_depth=f1["cmd_fifo_depth"], cmdq_depth=1 << f1["log2_cmdq_depth"],
            trace_depth=REG["TRACE_DEPTH"].unpack(trace_depth)["entries"],
        )

    @property
    def has_fp(self) -> bool:
        return any(f != "int8" for f in self.formats)

    @property
    def formats_mask(self) -> int:
        return sum(1 << FORMAT_NAMES.index(f) for f in self.formats)
