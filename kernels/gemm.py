"""Tiled int8 GEMM on the systolic engine: C (int32) = A (int8, MxK) @ B (int8, KxN).

Schedule (output-stationary, see docs/kernels.md): M and N are padded to the array; the
output tiles are taken in groups of ``ga x gb`` tiles whose accumulators all fit in the
accumulator SRAM; K is cut into chunks of ``kc`` steps so that ``ga`` A panels and ``gb`` B panels
fit the operand SRAMs. For each group and chunk the kernel loads the panels (backdoor), queues
one MATMUL per tile (accumulating after the first chunk) and moves on without waiting; it waits
only before it must overwrite operands, and reads a group's C back once all chunks are done.
The plan is chosen to minimise an estimate of host work plus simulated cycles.

:func:`run_tile_groups` is that loop, written once: the int8 GEMM, the fused GEMM + reduction
and the FP/MX GEMM all drive it (the latter two through its hooks and its ``fp`` argument).
Errata reach the planner and the driver only as :class:`workarounds.GemmConstraints`.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Awaitable, Callable

import numpy as np

from rtl.config import ChipConfig
from rtl.isa import BLOCK, DmaQueue, Format, dma_load, dma_store, dma_stride, fence, matmul, nop
from rtl.memories import Region
from workarounds import GemmConstraints, Mitigations, Unit

from .dma_stream import SEM, Ledger
from .epilogue import Epilogue, epilogue_vecs, max_columns
from .layout import pack_a_panels, pack_b_panels, tiles_to_matrix
from .roofline import drain_cycles, ideal_cycles, memory_cycles
from .stats import KernelStats, Measure
from .validate import check_matrix, require_vector

if TYPE_CHECKING:  # the protocol of the device surface a kernel uses
    from cosim.buffers import Buffer
    from cosim.device import KernelDevice

__all__ = ["GemmPlan", "GemmBuffers", "tail_lead", "plan_gemm", "plan_for", "gemm", "prepare_operands", "run_tile_groups",
           "gemm_stream", "stage_operands", "read_tiles", "plan_traffic", "gemm_compulsory_bytes",
           "check_gemm_operands", "new_host_counts", "GEMM_UNITS"]

MAX_K_FIELD = 0xFFFF
GEMM_UNITS = (Unit.ENGINE, Unit.SRAM, Unit.CMDPROC, Unit.DMA)  # the units a GEMM's errata can live in (operands arrive by DMA)
_FENCE = fence()
# FL-ME-002's spacer: a MATMUL of this many steps (not 1: FL-ME-001) on zero B words, placed so
# that the word after its A range is the next tile row's first A word (docs/kernels.md).
SPACER_K = 2
# Host cost weights for the planner (seconds); measured orders of magnitude on Verilator.
_HOST_S_PER_WORD = 3e-6
_HOST_S_PER_CMD = 3e-6
_HOST_S_PER_WAIT = 3e-4
_SIM_S_PER_CYCLE = 1e-6
# The share of the DRAM roof a streaming DMA reaches (measured: M=4, N=K=512 runs at 0.94 of it):
# the planner prefers a plan with less traffic over one that would only just fit under the roof.
_DMA_EFFICIENCY = 0.9


def tail_lead(na: int, nb: int, load_bytes: float, step: int, bytes_per_cycle: float) -> int:
    """Rows of a group's second-to-last chunk that run before its last chunk's rows join in
    (gemm_stream interleaves the two): the last chunk's first row runs after ``lead + 1`` rows of
    MATMULs, which cover its ``load_bytes`` at the DRAM's rate. Measured on 256^3: one row more
    or fewer, or counting the DRAM latency too, is slower."""
    return max(0, min(na, math.ceil(load_bytes / bytes_per_cycle / (nb * step)) - 1))


@dataclass(frozen=True)
class GemmPlan:
    m: int
    n: int
    k: int
    tm: int  # tiles along M
    tn: int
    ga: int  # A panels (tile rows) per group
    gb: int
    kc: int  # K steps per chunk
    nbuf: int = 2  # operand buffers: 2 = DMA of the next chunk overlaps the MATMULs of this one
    # FL-ME-002: what parts the tile rows of a chunk (an A-panel change): "fence" (a FENCE, an
    # engine drain) or "spacer" (a 2-step MATMUL on zero B words; int8 only), "" for none
    row_gap: str = ""

    @property
    def chunks(self) -> int:
        return math.ceil(self.k / self.kc)

    @property
    def groups(self) -> int:
        return math.ceil(self.tm / self.ga) * math.ceil(self.tn / self.gb)

    @property
    def row_gaps(self) -> int:
        """FENCEs or spacers the stream puts between MATMULs: one per tile row of every chunk (a
        spacer not before the first: no MATMUL precedes it)."""
        rows = self.chunks * self.tm * math.ceil(self.tn / self.gb)
        return {"": 0, "fence": rows, "spacer": rows - 1}[self.row_gap]

    def gap_cycles(self, config: ChipConfig) -> int:
        """Cycles one row gap costs the engine: a FENCE drains it, a spacer holds the feed for
        its slot (``max(SPACER_K, min_matmul_cycles)``: 4 on 4x4 against a 12-cycle drain)."""
        return {"": 0, "fence": drain_cycles(config),
                "spacer": max(SPACER_K, config.min_matmul_cycles)}[self.row_gap]

    def predicted_cycles(self, config: ChipConfig) -> int:
        """Schedule model: feed occupancy of every MATMUL plus one drain per wait, plus the row gaps."""
        full, last = divmod(self.k, self.kc)
        per_tile = full * max(self.kc, config.min_matmul_cycles)
        if last:
            per_tile += max(last, config.min_matmul_cycles)
        return (self.tm * self.tn * per_tile + self.groups * self.chunks * drain_cycles(config)
                + self.row_gaps * self.gap_cycles(config))

    def dma_cycles(self, config: ChipConfig, bytes_per_cycle: float, latency: int = 32) -> float:
        """Schedule model of the DMA-fed stream (gemm_stream), per group:

        * double-buffered: the slower of the group's MATMULs and its DRAM traffic, plus the part
          of its C stores that their window cannot hide. The window opens when the first tile row
          is complete (``tail_lead`` + 2 rows into the second-to-last chunk, with two or more
          chunks; a row into the last one with one) and ends with the next group's first chunk;
          the stores share it with two chunks of loads. For the last group it ends with its own
          last chunk;
        * single-buffered: every chunk's load, then its MATMULs, plus the same exposed stores.
        """
        R, C = config.rows, config.cols
        bw = bytes_per_cycle * _DMA_EFFICIENCY
        rows = [min(self.ga, self.tm - gi) for gi in range(0, self.tm, self.ga)]
        cols = [min(self.gb, self.tn - gj) for gj in range(0, self.tn, self.gb)]
        kinds: dict = {}  # group shape -> how many (at most four shapes: full and edge groups)
        for na in rows:
            for nb in cols:
                kinds[(na, nb)] = kinds.get((na, nb), 0) + 1
        last_shape = (rows[-1], cols[-1])
        step = max(min(self.kc, self.k), config.min_matmul_cycles)
        total = 0.0
        for (na, nb), count in kinds.items():
            tiles = na * nb
            chunk = tiles * step + (na * self.gap_cycles(config) if self.row_gap else 0)  # MATMUL cycles of one chunk
            compute = chunk * self.chunks
            chunk_load = (na * R + nb * C) * min(self.kc, self.k)
            stores = tiles * R * C * 4
            for last, n in ((False, count - ((na, nb) == last_shape)), (True, int((na, nb) == last_shape))):
                if not n:
                    continue
                if self.nbuf == 2:
                    busy = max(compute, (chunk_load * self.chunks + stores) / bw)
                    row = nb * step
                    if self.chunks >= 2:
                        tail = 2 * chunk - (tail_lead(na, nb, chunk_load, step, bytes_per_cycle) + 1) * row
                    else:
                        tail = chunk - row
                    window, demand = (tail, stores) if last else (tail + chunk, stores + 2 * chunk_load)
                else:
                    busy = self.chunks * (chunk_load / bw + latency + chunk)
                    window, demand = chunk, stores
                total += n * (busy + max(0.0, demand / bw - window))
        return total

    def host_words(self) -> int:
        words = 0
        for gi in range(0, self.tm, self.ga):
            for gj in range(0, self.tn, self.gb):
                words += (min(self.ga, self.tm - gi) + min(self.gb, self.tn - gj)) * self.k
        return words

    def as_dict(self) -> dict:
        return asdict(self)


def _chunk(k: int, cap: int, k_chunk: int | None, avoid_unit_chunk: bool, block: int = 1) -> int:
    """K steps per chunk: at most ``cap`` (and ``k_chunk``), a multiple of ``block`` unless it is
    all of K; with ``avoid_unit_chunk`` no chunk after the first has a single step (FL-ME-001)."""
    kc = min(k, cap, MAX_K_FIELD, k_chunk or k)
    if kc < k and block > 1:
        kc -= kc % block
        if kc == 0:
            raise ValueError(f"no room for one {block}-step block (capacity {cap}, k_chunk {k_chunk})")
    if kc < k and not k_chunk:  # the same number of chunks, as even as the block allows: no short last
        # chunk (a k_chunk the caller gives is kept as it is: the errata cells rely on its exact cut)
        n = math.ceil(k / kc)
        even = math.ceil(k / n)
        if block > 1:
            even = min(kc, math.ceil(even / block) * block)
        kc = even
    if avoid_unit_chunk and k > 1:
        while kc > 1 and k % kc == 1:
            kc -= 1
        if kc == 1:
            raise ValueError(f"K={k} cannot be cut into chunks of at most {min(cap, k_chunk or k)} steps "
                             "without a single-step chunk (erratum FL-ME-001); raise k_chunk")
    return kc


def plan_gemm(config: ChipConfig, m: int, n: int, k: int, *, operand_words: int | None = None,
              b_words: int | None = None,
              acc_words: int | None = None, k_chunk: int | None = None,
              avoid_unit_chunk: bool = False, a_panel_extra: int = 0, block: int = 1,
              bytes_per_cycle: float | None = None, nbuf: int = 2, a_words: int | None = None,
              row_gap: str | None = None) -> GemmPlan:
    """Choose group sizes and the K chunk for an ``m x n x k`` GEMM on ``config``.

    ``operand_words`` (A and B), ``a_words`` (A only), ``b_words`` (B only) and ``acc_words`` limit
    the SRAM words the plan may use (errata, fused kernels); ``k_chunk`` caps the K steps per MATMUL
    (a tuning knob); ``a_panel_extra`` words are reserved after every A panel and ``row_gap`` parts
    the tile rows (FL-ME-002; default: "fence" with a panel extra, else none).
    """
    if row_gap is None:
        row_gap = "fence" if a_panel_extra else ""
    if row_gap not in ("", "fence", "spacer"):
        raise ValueError(f"row_gap must be '', 'fence' or 'spacer', got {row_gap!r}")
    for name, v in (("m", m), ("n", n), ("k", k)):
        if not isinstance(v, (int, np.integer)) or v < 1:
            raise ValueError(f"{name} must be a positive integer, got {v!r}")
    if k_chunk is not None and (not isinstance(k_chunk, (int, np.integer)) or k_chunk < 1):
        raise ValueError(f"k_chunk must be a positive integer, got {k_chunk!r}")
    op_words = config.operand_depth if operand_words is None else operand_words
    bw = op_words if b_words is None else min(op_words, b_words)
    aw = op_words if a_words is None else min(op_words, a_words)
    tm, tn = math.ceil(m / config.rows), math.ceil(n / config.cols)
    max_tiles = (config.acc_depth if acc_words is None else acc_words) // config.rows
    if max_tiles < 1:
        raise ValueError(f"acc_words={acc_words} cannot hold one {config.rows}-row C tile")
    best, best_cost, last_error = None, (math.inf,), None
    for ga in range(1, tm + 1):
        gb_max = min(tn, max_tiles // ga)
        if gb_max < 1:
            break
        for gb in {1, gb_max, min(tn, ga), min(gb_max, max(1, ga))}:
            if gb < 1 or ga * gb > max_tiles:
                continue
            cap = min(aw // ga - a_panel_extra, bw // gb)
            if cap < 1:
                continue
            try:
                kc = _chunk(k, cap, k_chunk, avoid_unit_chunk, block)
            except ValueError as e:
                last_error = e
                continue
            plan = GemmPlan(m, n, k, tm, tn, ga, gb, kc, nbuf, row_gap=row_gap)
            cmds = tm * tn * plan.chunks
            waits = plan.groups * plan.chunks
            if bytes_per_cycle:  # operands arrive by DMA: the slower of compute and DRAM traffic
                cycles = max(plan.predicted_cycles(config), plan.dma_cycles(config, bytes_per_cycle))
                # The chip's cycles decide (a kernel is judged by them, as on silicon); the host's
                # cost per command only breaks ties. Weighing it against cycles had A0 pick 13x13
                # tile groups over 16x16 at 256^3, 0.5% slower on the chip for 8,192 fewer commands.
                cost = (round(cycles), cmds)
            else:
                cost = (plan.host_words() * _HOST_S_PER_WORD + cmds * _HOST_S_PER_CMD + waits * _HOST_S_PER_WAIT
                        + plan.predicted_cycles(config) * _SIM_S_PER_CYCLE,)
            if cost < best_cost:
                best, best_cost = plan, cost
    if best is None:
        raise last_error or ValueError(f"no GEMM plan fits operand_words={op_words}, acc_words={acc_words}")
    return best


def plan_for(config: ChipConfig, constraints: GemmConstraints, m: int, n: int, k: int, *,
             acc_words: int | None = None, k_chunk: int | None = None, block: int = 1,
             double_buffer: bool = True, board=None, fp: bool = False, row_gap: str | None = None) -> GemmPlan:
    """Plan under the constraints the active mitigations set (workarounds.GemmConstraints), in
    one operand buffer (half of each operand SRAM when double-buffered), for the board's DRAM.

    FL-ME-002 (``repeat_first_a_word``) parts the tile rows with a spacer MATMUL or a FENCE,
    whichever the model says is faster: a spacer costs a third of a FENCE's drain on 4x4, but its
    zero B words and the A words below the first buffer come off the operand SRAMs, which can
    cost a K chunk (a GEMM that fills B takes FENCEs; so FL-SR-001's top B word stays in use). The
    FP path (``fp``) always takes FENCEs: an FP spacer could compute NaN x 0 or turn -0 into +0.
    ``row_gap`` forces one of the choices (tests, measurements)."""
    stale = constraints.repeat_first_a_word
    gaps = (("spacer", "fence") if not fp else ("fence",)) if stale else ("",)
    if row_gap is not None:
        if row_gap not in gaps:
            raise ValueError(f"row_gap {row_gap!r} does not fit these constraints and format; possible: {gaps}")
        gaps = (row_gap,)
    best, best_cycles, error = None, math.inf, None
    for gap in gaps:
        below = SPACER_K if gap == "spacer" else 0  # A words under the first buffer, zero B words on top
        pick, pick_cycles = None, math.inf
        for nbuf in ((2, 1) if double_buffer else (1,)):  # double buffering when the model says it pays
            try:
                plan = plan_gemm(
                    config, m, n, k,
                    operand_words=config.operand_depth // nbuf,
                    a_words=(config.operand_depth - below) // nbuf,
                    b_words=(config.operand_depth - constraints.b_reserved_top_words - below) // nbuf,
                    acc_words=acc_words, k_chunk=k_chunk, avoid_unit_chunk=constraints.avoid_unit_chunk,
                    a_panel_extra=1 if stale else 0, block=block, row_gap=gap,
                    bytes_per_cycle=None if board is None else board.bytes_per_cycle, nbuf=nbuf,
                )
            except ValueError as e:
                error = error or e
                continue
            cycles = (plan.dma_cycles(config, board.bytes_per_cycle, board.latency) if board is not None
                      else plan.predicted_cycles(config))
            if cycles < pick_cycles * 0.98:  # single buffering only when clearly better
                pick, pick_cycles = plan, cycles
        if pick is not None and pick_cycles < best_cycles:
            best, best_cycles = pick, pick_cycles
    if best is None:
        raise error
    return best


def prepare_operands(a, b, cfg: ChipConfig, plan: GemmPlan):
    """Pad to the array and transform into operand-SRAM words: (A words (TM, K), B words (TN, K))."""
    m, k = a.shape
    n = b.shape[1]
    a_pad = np.zeros((plan.tm * cfg.rows, k), np.int8)
    a_pad[:m] = a
    b_pad = np.zeros((k, plan.tn * cfg.cols), np.int8)
    b_pad[:, :n] = b
    return pack_a_panels(a_pad, cfg.rows), pack_b_panels(b_pad, cfg.cols)


@dataclass(frozen=True)
class GemmBuffers:
    """Where a GEMM's operands and result live in DRAM (docs/kernels.md, "DRAM layouts").

    * A: panel-major, prepared once on the host: panel ``p`` (rows ``p*ROWS..``) holds its K
      words of ROWS bytes, word ``k`` at ``a + (p*K + k) * ROWS``.
    * B: the same by column panels: word ``k`` of panel ``q`` at ``b + (q*K + k) * COLS``.
    * C: tile-major int32: tile ``(ti, tj)`` is ROWS accumulator words (4*COLS bytes each) at
      ``c + (ti*TN + tj) * ROWS * 4*COLS``, so the tiles of one tile row of a group are one
      contiguous store. The host reshapes it back (``read_tiles``).
    * SA / SB (FP): one E8M0 word per panel and block of 32 K steps, panel-major like A / B.
    """

    a: Buffer
    b: Buffer
    c: Buffer
    sa: Buffer | None = None
    sb: Buffer | None = None
    blocks: int = 0
    scratch: Buffer | None = None  # for a fused kernel's own results (``scratch_bytes``)
    epilogue: Buffer | None = None  # the epilogue's bias and parameter words (kernels/epilogue.py)
    zeros: Buffer | None = None  # SPACER_K zero B words for FL-ME-002's spacers


def _words_bytes(words: np.ndarray, nbytes: int) -> bytes:
    """SRAM words (numpy uint or Python ints) as their little-endian bytes, row-major."""
    words = np.asarray(words)
    if words.dtype == object:
        return b"".join(int(w).to_bytes(nbytes, "little") for w in words.ravel())
    return np.ascontiguousarray(words).astype(f"<u{nbytes}").tobytes()


def stage_operands(dev, plan: GemmPlan, a_words, b_words, fp: tuple | None = None,
                   scratch_bytes: int = 0, epilogue_words: np.ndarray | None = None) -> GemmBuffers:
    """Allocate the GEMM's DRAM buffers and fill the operands from the host (DRAM is host memory)."""
    cfg = dev.config
    R, C = cfg.rows, cfg.cols
    dev.dram.reset()
    a = dev.dram.alloc(plan.tm * plan.k * R, "A")
    b = dev.dram.alloc(plan.tn * plan.k * C, "B")
    c = dev.dram.alloc(plan.tm * plan.tn * R * 4 * C, "C")
    dev.dram_write(a, _words_bytes(a_words, R))
    dev.dram_write(b, _words_bytes(b_words, C))
    sa = sb = None
    blocks = 0
    if fp is not None:
        _fmt, sa_words, sb_words = fp
        blocks = sa_words.shape[1]
        sa = dev.dram.alloc(plan.tm * blocks * R, "SA")
        sb = dev.dram.alloc(plan.tn * blocks * C, "SB")
        dev.dram_write(sa, _words_bytes(sa_words, R))
        dev.dram_write(sb, _words_bytes(sb_words, C))
    scratch = dev.dram.alloc(scratch_bytes, "scratch") if scratch_bytes else None
    epi = None
    if epilogue_words is not None:
        epi = dev.dram.alloc(epilogue_words.size * 4, "epilogue")
        dev.dram_write(epi, np.ascontiguousarray(epilogue_words, "<u4").tobytes())
    zeros = None
    if plan.row_gap == "spacer":
        zeros = dev.dram.alloc(SPACER_K * cfg.cols, "zeros")
        dev.dram_write(zeros, bytes(zeros.nbytes))
    return GemmBuffers(a, b, c, sa, sb, blocks, scratch, epi, zeros)


def read_tiles(dev, bufs: GemmBuffers, plan: GemmPlan, out: np.ndarray) -> None:
    """C from DRAM (tile-major) into ``out`` (int32, or uint32 fp32 bits), padded shape."""
    R, C = dev.config.rows, dev.config.cols
    raw = dev.dram_read(bufs.c)
    out[:, :] = tiles_to_matrix(raw.view("<i4").view(out.dtype).reshape(plan.tm, plan.tn, R, C))


GroupTail = Callable[[int, int, int, int, int, Ledger, GemmBuffers], list]


def gemm_stream(cfg: ChipConfig, plan: GemmPlan, bufs: GemmBuffers, constraints: GemmConstraints, *,
                fmt: Format = Format.INT8, group_tail: GroupTail | None = None,
                bytes_per_cycle: float = 1.0) -> list[int]:
    """The whole GEMM as one command stream (docs/kernels.md, "The DMA-fed GEMM").

    Per K chunk: 2D loads of the group's A and B panels (and scales) into one of two operand
    buffers, issued one chunk ahead so they overlap the MATMULs of the chunk before; the chunk's
    MATMULs wait for LOADED and the last one signals FREE once a later load will overwrite its
    buffers (the units complete in order, so one counting semaphore serves each purpose). In a
    group's last chunk the last MATMUL of each tile row signals C_READY and that tile row is
    stored at once; the next group's first MATMUL on an accumulator slot waits for the store that
    empties it (C_FREE). With one buffer (``plan.nbuf == 1``) loads and MATMULs take turns.

    Double-buffered, a group's last two chunks are interleaved by tile row once the last one's
    operands have had time to arrive (at ``bytes_per_cycle``, the board's DRAM bandwidth): its
    tile rows then complete from early in the second-to-last chunk and their stores use the DRAM
    while the MATMULs go on, instead of all queueing up at the group's end.

    Groups go in snake order (along N, then back) and, for int8, every other group walks K
    backwards, so two groups in a row share their boundary chunk's A or B panels: that operand is
    not loaded again. (The FP path keeps K ascending: its golden rounds per chunk in K order.)

    With an epilogue (``bufs.epilogue``: kernels/epilogue.py) its words are loaded first into the
    top 2 * TN accumulator words, and a tile row's last MATMUL hands over to the epilogue VECs,
    the last of which signals C_READY instead.
    """
    R, C = cfg.rows, cfg.cols
    acc_wb = 4 * C
    nbuf = plan.nbuf
    depth = cfg.operand_depth
    stale = constraints.repeat_first_a_word
    fp = fmt != Format.INT8
    gap = plan.row_gap
    assert (gap != "") == stale and (gap != "spacer" or not fp), \
        "plan the GEMM under the constraints and format it streams with (plan_for)"
    below = SPACER_K if gap == "spacer" else 0
    a_off = below  # the first A buffer starts above the words a row-0 spacer reads
    cap_a = (depth - below) // nbuf
    zero_b = depth - constraints.b_reserved_top_words - below  # the spacers' zero B words
    cap_b = zero_b // nbuf
    cap_s = cfg.scale_depth // nbuf
    a_stride = plan.kc + 1 if stale else plan.kc
    spp = -(-plan.kc // BLOCK)
    K = plan.k
    groups = []
    for row, gi in enumerate(range(0, plan.tm, plan.ga)):
        cols = list(range(0, plan.tn, plan.gb))
        for gj in (cols[::-1] if row % 2 else cols):
            groups.append((gi, gj, min(plan.ga, plan.tm - gi), min(plan.gb, plan.tn - gj)))
    k0s = list(range(0, K, plan.kc))
    chunks = []  # (group, position in the group's K walk, k0, steps, last of the group)
    for g in range(len(groups)):
        order = k0s[::-1] if g % 2 and not fp else k0s
        chunks += [(g, ci, k0, min(plan.kc, K - k0), ci == len(order) - 1) for ci, k0 in enumerate(order)]
    # which operand buffer each chunk reads, and whether it must load it (or reuses the last chunk's)
    a_buf, b_buf, load_a, load_b = [], [], [], []
    for idx, (g, _ci, k0, _kc, _last) in enumerate(chunks):
        gi, gj = groups[g][0], groups[g][1]
        if idx:
            pg, _, pk0, _, _ = chunks[idx - 1]
            same_a = (groups[pg][0], pk0) == (gi, k0) and not fp
            same_b = (groups[pg][1], pk0) == (gj, k0) and not fp
        else:
            same_a = same_b = False
        load_a.append(not same_a)
        load_b.append(not same_b)
        a_buf.append(a_buf[-1] if same_a else (a_buf[-1] + 1) % nbuf if idx else 0)
        b_buf.append(b_buf[-1] if same_b else (b_buf[-1] + 1) % nbuf if idx else 0)

    def lead_of(idx: int) -> int | None:
        """:func:`tail_lead` when chunk ``idx`` is its group's second-to-last chunk of a
        double-buffered plan, else None."""
        if nbuf != 2 or idx + 1 >= len(chunks) or not chunks[idx + 1][4] or chunks[idx][4]:
            return None
        g, _ci, _k0, kc, _last = chunks[idx + 1]
        _gi, _gj, na, nb = groups[g]
        load_bytes = (na * R if load_a[idx + 1] else 0) * kc + (nb * C if load_b[idx + 1] else 0) * kc
        return tail_lead(na, nb, load_bytes, max(chunks[idx][3], cfg.min_matmul_cycles), bytes_per_cycle)

    led = Ledger()
    out: list[int] = []
    strides: dict = {}
    epi_base = epi_wait = None
    if bufs.epilogue is not None:
        assert group_tail is None, "a fused kernel's tail and an epilogue share the AUX semaphore"
        epi_base = cfg.acc_depth - 2 * plan.tn
        out.append(dma_load(Region.ACC, sram=epi_base, dram=bufs.epilogue.addr, words=2 * plan.tn,
                            signal=SEM["AUX"]))
        led.signal(SEM["AUX"])
        epi_wait = SEM["AUX"]

    def stride(q: DmaQueue, s: int, d: int) -> None:
        if strides.get(q) != (s, d):
            out.append(dma_stride(q, sram=s, dram=d))
            strides[q] = (s, d)

    def loads(idx: int) -> None:
        """The loads of chunk ``idx``: the first waits until the chunk that last read those buffers
        is done (the chunk ``nbuf`` back: the units finish in order), the last signals LOADED."""
        g, _ci, k0, kc, _last = chunks[idx]
        gi, gj, na, nb = groups[g]
        ab, bb = a_buf[idx], b_buf[idx]
        cmds = []
        if load_a[idx]:
            at = bufs.a.addr + (gi * K + k0) * R
            cmds.append(((a_stride, K * R), dict(region=Region.A, sram=a_off + ab * cap_a, dram=at, words=kc, rows=na)))
            if stale:  # FL-ME-002: each panel's first word again right after it
                cmds.append(((a_stride, K * R), dict(region=Region.A, sram=a_off + ab * cap_a + kc, dram=at, words=1,
                                                     rows=na)))
            if fp:
                b0, nblk = k0 // BLOCK, -(-kc // BLOCK)
                cmds.append(((spp, bufs.blocks * R), dict(region=Region.SA, sram=ab * cap_s, words=nblk, rows=na,
                                                          dram=bufs.sa.addr + (gi * bufs.blocks + b0) * R)))
        if load_b[idx]:
            cmds.append(((plan.kc, K * C), dict(region=Region.B, sram=bb * cap_b, dram=bufs.b.addr + (gj * K + k0) * C,
                                                words=kc, rows=nb)))
            if fp:
                b0, nblk = k0 // BLOCK, -(-kc // BLOCK)
                cmds.append(((spp, bufs.blocks * C), dict(region=Region.SB, sram=bb * cap_s, words=nblk, rows=nb,
                                                          dram=bufs.sb.addr + (gj * bufs.blocks + b0) * C)))
        wait = led.queue_wait(SEM["FREE"]) if idx >= nbuf and frees_needed[idx - nbuf] else None
        for i, ((ss, ds), kw) in enumerate(cmds):
            stride(DmaQueue.LOAD, ss, ds)
            region = kw.pop("region")
            last = i == len(cmds) - 1
            out.append(dma_load(region, **kw, wait=wait if i == 0 else None, signal=SEM["LOADED"] if last else None))
        led.signal(SEM["LOADED"])
        if idx == 0 and gap == "spacer":
            # the spacers' zero B words, behind the first chunk's operands so that they do not
            # delay its MATMULs; the first spacer (the stream's second tile row) waits for them
            assert bufs.zeros is not None, "stage the GEMM's operands for its plan (stage_operands)"
            out.append(dma_load(Region.B, sram=zero_b, dram=bufs.zeros.addr, words=SPACER_K, signal=SEM["ZEROS"]))
            led.signal(SEM["ZEROS"])

    # chunk i's last MATMUL signals FREE when the chunk nbuf later loads into a buffer it read
    frees_needed = [i + nbuf < len(chunks) for i in range(len(chunks))]
    prev_stores: tuple[int, int] | None = None  # (tile rows, tiles per row) of the group before
    waited = 0
    rows_done = 0  # tile rows streamed so far: the first has no MATMUL before it, so no spacer

    def row(idx: int, p: int) -> None:
        """The MATMULs of tile row ``p`` of chunk ``idx`` (and, in the group's last chunk, the
        row's store)."""
        nonlocal waited, epi_wait, rows_done
        g, ci, k0, kc, last = chunks[idx]
        gi, gj, na, nb = groups[g]
        ab, bb = a_buf[idx], b_buf[idx]
        a_row = a_off + ab * cap_a + p * a_stride
        if gap == "fence":  # FL-ME-002: a gap before every panel change, the chunk's first included
            out.append(_FENCE)
        # what is the same for every MATMUL of the row, worked out once (the loop below runs
        # 32,768 times in a 256^3 GEMM, inside the kernel's timed window)
        b_row, kc_b, acc_row = bb * cap_b, plan.kc, ci > 0
        sa_row, sb_row = ab * cap_s + p * spp, bb * cap_s
        free_sig = SEM["FREE"] if p == na - 1 and frees_needed[idx] else None
        ready_sig = SEM["C_READY"] if last and epi_base is None else None
        for q in range(nb):
            slot = p * nb + q
            wait = None
            if ci == 0 and prev_stores is not None:
                pna, pnb = prev_stores
                need = min(pna - 1, (slot * R + R - 1) // (pnb * R))
                while waited <= need:
                    sem = led.queue_wait(SEM["C_FREE"])  # signalled by a store queued earlier
                    if wait is None:
                        wait = sem
                    else:
                        out.append(nop(wait=sem))
                    waited += 1
            sig, sig2 = (free_sig, ready_sig) if q == nb - 1 else (None, None)
            if q == 0 and gap == "spacer" and rows_done:
                # FL-ME-002 without a drain: this MATMUL adds A x 0 into the row's first tile (its
                # own first A word may be the stale one) and ends at word a_row, so the row's first
                # MATMUL, issued back to back, reads its first A word where the erratum looks. It
                # takes the row's wait: it writes the slot that wait frees.
                if rows_done == 1:  # the first spacer: its zero B words must have arrived
                    zw = led.queue_wait(SEM["ZEROS"])
                    if wait is None:
                        wait = zw
                    else:
                        out.append(nop(wait=zw))
                out.append(matmul(a=a_row - SPACER_K, b=zero_b, c=slot * R, k=SPACER_K, accumulate=True, wait=wait))
                wait = None
            if fp:
                out.append(matmul(a=a_row, b=b_row + q * kc_b, c=slot * R, k=kc, accumulate=acc_row, fmt=fmt,
                                  wait=wait, signal=sig, signal2=sig2, sa=sa_row, sb=sb_row + q * spp))
            else:
                out.append(matmul(a=a_row, b=b_row + q * kc_b, c=slot * R, k=kc, accumulate=acc_row, fmt=fmt,
                                  wait=wait, signal=sig, signal2=sig2))
            if sig is not None or sig2 is not None:
                led.signal(sig, sig2)
            if last and q == nb - 1 and epi_base is not None:  # the epilogue, then C_READY
                w = led.stream_wait(epi_wait) if epi_wait is not None else None
                epi_wait = None
                out.extend(epilogue_vecs(range(p * nb, p * nb + nb), R, epi_base + gj, epi_base + plan.tn + gj,
                                         signal=SEM["C_READY"], wait=w))
                led.signal(SEM["C_READY"])
            if last and q == nb - 1:  # this tile row is complete: store it while the rest computes
                more = g + 1 < len(groups)
                out.append(dma_store(sram=p * nb * R, dram=bufs.c.addr + ((gi + p) * plan.tn + gj) * R * acc_wb,
                                     words=nb * R, wait=led.queue_wait(SEM["C_READY"]),
                                     signal=SEM["C_FREE"] if more else None))
                if more:
                    led.signal(SEM["C_FREE"])
        rows_done += 1

    def start(idx: int) -> None:
        """Queue the loads one chunk ahead and wait for this chunk's operands."""
        if nbuf == 2 and idx + 1 < len(chunks):
            loads(idx + 1)
        elif nbuf == 1:
            loads(idx)
        out.append(nop(wait=led.stream_wait(SEM["LOADED"])))

    def finish(idx: int) -> None:
        nonlocal prev_stores, waited
        g, ci, _k0, _kc, last = chunks[idx]
        gi, gj, na, nb = groups[g]
        if ci == 0 and prev_stores is not None:
            while waited < prev_stores[0]:  # stores of the group before this one not waited for yet
                out.append(nop(wait=led.queue_wait(SEM["C_FREE"])))
                waited += 1
            prev_stores = None
        if last:
            if group_tail is not None:
                out.extend(group_tail(g, gi, gj, na, nb, led, bufs))
            prev_stores, waited = (na, nb), 0

    if nbuf == 2:
        loads(0)
    idx = 0
    while idx < len(chunks):
        g, ci, _k0, _kc, last = chunks[idx]
        na = groups[g][2]
        lead = lead_of(idx)
        if lead is None:
            start(idx)
            for p in range(na):
                row(idx, p)
            finish(idx)
            idx += 1
            continue
        # The group's last two chunks, interleaved: `lead` rows of the second-to-last chunk (while
        # the last chunk's operands arrive), then a row of each, so that a tile row is complete
        # every two rows of MATMULs from early on and its store overlaps the rest: stores that
        # started only in the last chunk, at one row per row of MATMULs, held the next group up
        # (each tile row's store takes twice as long as its MATMULs at the default ridge point).
        # Every tile still accumulates its chunks in K order.
        start(idx)
        for p in range(lead):
            row(idx, p)
        start(idx + 1)
        for j in range(na):
            if lead + j < na:
                row(idx, lead + j)
            row(idx + 1, j)
        finish(idx)
        finish(idx + 1)
        idx += 2
    out.extend(led.drain())
    return out


def _budget(cfg: ChipConfig, board, plan: GemmPlan, budget: int | None) -> int:
    """A watchdog budget for the whole stream: four times its roofline bound, at least 1M cycles."""
    if budget is not None:
        return budget
    traffic = plan_traffic(cfg, plan)
    return 4 * max(plan.predicted_cycles(cfg), memory_cycles(board, traffic)) + 1_000_000


def plan_traffic(cfg: ChipConfig, plan: GemmPlan) -> int:
    """DRAM bytes a plan moves: A once per group column, B once per group row, C once."""
    R, C = cfg.rows, cfg.cols
    col_groups, row_groups = math.ceil(plan.tn / plan.gb), math.ceil(plan.tm / plan.ga)
    return (plan.tm * R * plan.k * col_groups + plan.tn * C * plan.k * row_groups + plan.tm * plan.tn * R * C * 4)


async def run_tile_groups(dev, plan: GemmPlan, a_words, b_words, out: np.ndarray, *, constraints: GemmConstraints,
                          host: dict, budget: int | None = None, fp: tuple | None = None,
                          group_tail: GroupTail | None = None, scratch_bytes: int = 0,
                          epilogue_words: np.ndarray | None = None) -> GemmBuffers:
    """The loop every GEMM-shaped kernel runs: operands into DRAM, one stream that DMAs every
    chunk in and every tile row out (:func:`gemm_stream`), one wait, C back from DRAM into ``out``.

    ``group_tail(g, gi, gj, na, nb, ledger, buffers)`` returns commands to queue right after a
    group's last MATMULs (a fused kernel's REDUCE and its store into ``buffers.scratch``, of
    ``scratch_bytes``). ``epilogue_words`` (kernels/epilogue.py) adds the fused epilogue.
    """
    bufs = stage_operands(dev, plan, a_words, b_words, fp, scratch_bytes, epilogue_words)
    fmt = Format.INT8 if fp is None else fp[0]
    stream = gemm_stream(dev.config, plan, bufs, constraints, fmt=fmt, group_tail=group_tail,
                         bytes_per_cycle=dev.board.bytes_per_cycle)
    host["commands"] += len(stream)
    host["bytes_staged"] = host.get("bytes_staged", 0) + bufs.a.nbytes + bufs.b.nbytes
    limit = _budget(dev.config, dev.board, plan, budget)
    await dev.submit(stream, limit)
    await dev.wait_idle(limit)
    host["waits"] += 1
    read_tiles(dev, bufs, plan, out)
    return bufs


def check_gemm_operands(a, b):
    a = check_matrix("a", a, (np.int8,), "int8 activations, shape (M, K)")
    b = check_matrix("b", b, (np.int8,), "int8 weights, shape (K, N)")
    if a.shape[1] != b.shape[0]:
        raise ValueError(f"inner dimensions differ: a is {a.shape}, b is {b.shape}; need a (M, K) and b (K, N)")
    return a, b


def new_host_counts() -> dict:
    return {"words_loaded": 0, "commands": 0, "waits": 0}


def gemm_compulsory_bytes(m: int, n: int, k: int, operand_bytes: int = 1, result_bytes: int = 4) -> int:
    """Each operand read once, each result written once."""
    return (m * k + k * n) * operand_bytes + m * n * result_bytes


async def gemm(dev: KernelDevice, a: np.ndarray, b: np.ndarray, *, mitigations: Mitigations, k_chunk: int | None = None,
               budget_cycles: int | None = None, double_buffer: bool = True,
               epilogue: Epilogue | None = None) -> tuple[np.ndarray, KernelStats]:
    """Run ``a @ b`` on the chip. Returns ``(c, stats)``; c is int32 with wrap-around, or with an
    ``epilogue`` (kernels/epilogue.py: bias, per-channel requantization, optional ReLU on the
    vector unit before the store) int8.

    The operands go into DRAM (host memory) and reach the chip only by DMA; C comes back by DMA.
    ``mitigations`` comes from ``workarounds.attach(dev, policy)``; ``k_chunk`` caps the K steps
    per MATMUL (default: as many as one operand buffer holds). The planner double-buffers the
    operand SRAMs where its schedule model says that pays; ``double_buffer=False`` forbids it, so
    loads and MATMULs take turns (to measure what the overlap is worth).
    """
    a, b = check_gemm_operands(a, b)
    cfg: ChipConfig = dev.config
    m, k = a.shape
    n = b.shape[1]
    acc_words = epi_words = None
    if epilogue is not None:
        require_vector(cfg, "the GEMM epilogue")
        if not isinstance(epilogue, Epilogue):
            raise TypeError(f"epilogue must be a kernels.epilogue.Epilogue, got {type(epilogue).__name__}")
        if len(epilogue.bias) != n:
            raise ValueError(f"the epilogue has {len(epilogue.bias)} columns and b has {n}")
        tn = -(-n // cfg.cols)
        if n > max_columns(cfg):
            raise ValueError(f"N={n} needs {2 * tn} accumulator words of epilogue parameters; the accumulator "
                             f"SRAM has {cfg.acc_depth}, so N can be at most {max_columns(cfg)}")
        acc_words = cfg.acc_depth - 2 * tn  # the bias and parameter words sit above the C tiles
        epi_words = epilogue.words(cfg.lanes, tn)
    plan = plan_for(cfg, mitigations.gemm, m, n, k, k_chunk=k_chunk, double_buffer=double_buffer, board=dev.board,
                    acc_words=acc_words)
    a_words, b_words = prepare_operands(a, b, cfg, plan)
    out = np.zeros((plan.tm * cfg.rows, plan.tn * cfg.cols), np.int32)
    host = new_host_counts()
    extra = {"shape": [m, n, k], "useful_macs": m * n * k, "plan": plan.as_dict(),
             "predicted_cycles": plan.predicted_cycles(cfg), "host": host, "double_buffer": plan.nbuf == 2,
             "epilogue": None if epilogue is None else ("requant+relu" if epilogue.relu else "requant")}
    async with Measure(dev, "gemm", ideal_cycles(cfg, m * n * k), extra,
                       compulsory_bytes=gemm_compulsory_bytes(m, n, k)) as meas:
        await run_tile_groups(dev, plan, a_words, b_words, out, constraints=mitigations.gemm, host=host,
                              budget=budget_cycles, epilogue_words=epi_words)
        await dev.check_no_error()
    meas.stats.add_errata(mitigations.report(GEMM_UNITS))
    c = out[:m, :n]
    if epilogue is not None:
        outside = int(((c < -128) | (c > 127)).sum())
        if outside:  # REQUANT writes sign-extended int8: anything else is a chip fault, kept visible
            meas.stats.notes.append(f"{outside} results outside int8 (words the store read before the epilogue "
                                    "requantized them?): returned as int32 so that no check can miss them")
            return c.copy(), meas.stats
        return c.astype(np.int8), meas.stats
    return c.copy(), meas.stats
