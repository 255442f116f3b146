"""Fault location after a datapath check failed: which PE, which reduction lane, which bit;
which DRAM byte, which AXI address bit, which DMA beat.

Each locator runs small raw probes (operands loaded through the backdoor, one command, the
result read back through the backdoor), chosen so that no erratum of any revision touches them
(K = 2, B away from the top word, no back-to-back MATMULs, SUM over an even count; DMA
transfers inside one 4 KiB page, one row), and compares the results with models of the
candidate faults. It returns a sentence, or None when the probes show nothing (the fault is
elsewhere).

The DRAM checks (the ``dram`` stage) keep the history of their transfers; when a load reads
back wrong, :func:`explain_dram` replays that history through :class:`DramImage` once per
candidate fault -- every AXI address bit the DRAM decodes, tied low or high, on the load
side, the store side or both -- and names the candidates that reproduce what was read, or the
DRAM bits that read wrong when no address fault does.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from cosim.device import DeviceTimeout
from kernels.layout import int32_to_words, pack_a_panels, pack_b_panels, words_to_int32
from rtl.board import MAX_BURST_BEATS, PAGE_BYTES
from rtl.dram import OUTSTANDING
from rtl.isa import ReduceOp, dma_load, dma_store, matmul, reduce
from rtl.memories import Region

__all__ = ["locate_pe", "locate_lane", "walk_pes", "walk_lanes", "DramImage", "Tie", "describe_ties", "explain_dram",
           "dram_cells", "locate_dropped_beat", "drain_dram"]


def _force(v: int, bit: int, val: int, width: int) -> int:
    v &= (1 << width) - 1
    return v | (1 << bit) if val else v & ~(1 << bit)


def _signed(v: int, width: int) -> int:
    v &= (1 << width) - 1
    return v - (1 << width) if v >> (width - 1) else v


def _pe_model(a_col: np.ndarray, b_row: np.ndarray, where: str | None, bit: int, val: int) -> int:
    """One PE's int32 result over K steps with a stuck product or accumulator-input bit."""
    acc = 0
    for k, (x, y) in enumerate(zip(a_col.tolist(), b_row.tolist())):
        prod = int(x) * int(y)
        if where == "product":
            prod = _signed(_force(prod, bit, val, 16), 16)
        total = prod if k == 0 else acc + prod
        if where == "acc":
            total = _force(total, bit, val, 32)
        acc = _signed(total, 32)
    return acc


async def _probe_matmul(dev, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    cfg = dev.config
    k = a.shape[1]
    dev.load_words(Region.A, 0, [int(w) for w in pack_a_panels(a.astype(np.int8), cfg.rows)[0]])
    dev.load_words(Region.B, 0, [int(w) for w in pack_b_panels(b.astype(np.int8), cfg.cols)[0]])
    with dev.submit_filter_suspended():
        await dev.run([matmul(a=0, b=0, c=0, k=k)])
    words = dev.read_words(Region.ACC, 0, cfg.rows)
    return words_to_int32(words, cfg.lanes)[:, : cfg.cols]


async def locate_pe(dev, rng: np.random.Generator, probes: int = 8) -> str | None:
    """Name the PE (and bit) behind a wrong MATMUL, from K = 2 probes on one tile."""
    cfg = dev.config
    data = []
    for _ in range(probes):
        a = rng.integers(-128, 128, (cfg.rows, 2), dtype=np.int64)
        b = rng.integers(-128, 128, (2, cfg.cols), dtype=np.int64)
        got = await _probe_matmul(dev, a, b)
        data.append((a, b, got))
    wrong = set()
    for a, b, got in data:
        ref = (a @ b).astype(np.int64)
        wrong |= {(int(i), int(j)) for i, j in np.argwhere(got != ref)}
    if not wrong:
        return None
    if len(wrong) > 1:
        return f"the probe MATMUL is wrong in {len(wrong)} PEs ({', '.join(f'PE{w}' for w in sorted(wrong)[:6])}): not one PE"
    i, j = wrong.pop()
    fits = []
    for where, width in (("product", 16), ("acc", 32)):
        for bit in range(width):
            for val in (0, 1):
                if all(_pe_model(a[i, :], b[:, j], where, bit, val) == int(got[i, j]) for a, b, got in data):
                    fits.append(f"{'product' if where == 'product' else 'accumulator'} bit {bit} stuck at {val}")
    if len(fits) == 1:
        return f"PE({i}, {j}) {fits[0]}"
    if fits:
        return f"PE({i}, {j}): one of {', '.join(fits[:4])}"
    return f"PE({i}, {j}) computes wrong results (no single stuck product or accumulator bit explains them)"


async def _probe_reduce(dev, words: np.ndarray) -> int:
    lanes = dev.config.lanes
    dst = len(words)
    dev.load_words(Region.ACC, 0, int32_to_words(words.astype(np.int32)))
    with dev.submit_filter_suspended():
        await dev.run([reduce(ReduceOp.SUM, src=0, count=len(words), dst=dst)])
    return int(words_to_int32(dev.read_words(Region.ACC, dst, 1), lanes)[0, 0])


async def locate_lane(dev) -> str | None:
    """Name the reduction-tree lane (and bit) behind a wrong REDUCE.

    Probe L sums two words: lane L of the first holds -1, everything else 0 (count 2 is even,
    so no erratum applies). A lane stuck at 1 on bit b adds 2**b per word it reads: 2 * 2**b
    in every probe but its own, where -1 has the bit already (one extra). A lane stuck at 0 on
    bit b changes only its own probe (-1 - 2**b).
    """
    lanes = dev.config.lanes
    results = []
    for lane in range(lanes):
        w = np.zeros((2, lanes), np.int64)
        w[0, lane] = -1
        results.append(_signed(await _probe_reduce(dev, w) + 1, 32))  # error against -1
    if not any(results):
        return None
    vals = sorted(set(results), key=results.count)
    odd = [lane for lane, r in enumerate(results) if r == vals[0]]
    if len(odd) == 1 and len(vals) <= 2:
        lane, err = odd[0], results[odd[0]]
        if err < 0 and (-err) & (-err - 1) == 0:
            return f"reduction tree lane {lane} bit {(-err).bit_length() - 1} stuck at 0"
        if err > 0 and err & (err - 1) == 0:
            return f"reduction tree lane {lane} bit {err.bit_length() - 1} stuck at 1"
        return f"reduction tree lane {lane} reads wrong (error {err} on a -1 input)"
    return f"REDUCE probes wrong on lanes {[i for i, r in enumerate(results) if r]} (errors {results}): not one lane"


async def walk_pes(dev) -> list[str]:
    """Every bit of every PE's int8 product and accumulator seen at 1 and at 0: one K = 2 probe
    whose products are -1 then 0 (every result -1: all 32 bits set, every product bit set in the
    first step), one whose operands are all 0 (every bit clear). Random data alone leaves a high
    bit of one PE untested whenever that PE's few results happen to be positive."""
    cfg = dev.config
    problems = []
    ones = np.ones((cfg.rows, 2), np.int64)
    ones[:, 1] = 0
    minus = np.zeros((2, cfg.cols), np.int64)
    minus[0, :] = -1
    for a, b, what in ((ones, minus, "products -1 then 0"), (ones * 0, minus * 0, "all-zero operands")):
        got = await _probe_matmul(dev, a, b)
        ref = a @ b
        bad = np.argwhere(got != ref)
        if len(bad):
            i, j = (int(x) for x in bad[0])
            problems.append(f"PE walk ({what}): {len(bad)} PE(s) wrong, first PE({i}, {j}): "
                            f"got 0x{int(got[i, j]) & 0xFFFFFFFF:08x}, expected 0x{int(ref[i, j]) & 0xFFFFFFFF:08x}")
    return problems


async def walk_lanes(dev) -> list[str]:
    """Every bit of every reduction-tree input lane at 1 and at 0: two-word SUMs (even count: no
    erratum applies) of all -1 then 0, and of all 0."""
    lanes = dev.config.lanes
    problems = []
    for fill, want in ((-1, -lanes), (0, 0)):
        w = np.zeros((2, lanes), np.int64)
        w[0, :] = fill
        got = await _probe_reduce(dev, w)
        if got != want:
            problems.append(f"REDUCE lane walk (word of {fill}s, word of 0s): got {got}, expected {want}")
    return problems


# ---- DRAM and DMA ----------------------------------------------------------------------------
TIE_WHERE = {"both": "on loads and stores", "load": "on the load DMA only", "store": "on the store DMA only"}
_TIE_NOTE = {"both": "the DMA's AXI address, the board or the DRAM's decoder",
             "load": "stores land where they should", "store": "loads read where they should"}


@dataclass(frozen=True)
class Tie:
    """A candidate address fault: AXI address bit ``line`` tied to ``level`` on ``side``
    (``both``, ``load`` or ``store``: rtl.faults.DMA_SIDES)."""

    line: int
    level: int
    side: str

    def applies(self, side: str) -> bool:
        return self.side in ("both", side)


def describe_ties(ties: list[Tie]) -> str:
    """One sentence for the candidates that fit equally well. A bit tied on both sides at 0
    and at 1 looks the same through the DMA (reads go where the writes went), so such a pair
    is one finding: "stuck at 0 or 1"."""
    groups: dict[tuple[int, str], set[int]] = {}
    for t in ties:
        groups.setdefault((t.line, t.side), set()).add(t.level)
    parts = [f"AXI address bit {line} stuck at {' or '.join(map(str, sorted(levels)))} {TIE_WHERE[side]} "
             f"({_TIE_NOTE[side]})" for (line, side), levels in groups.items()]
    return "; or ".join(parts[:3]) + (f"; or {len(parts) - 3} more candidates" if len(parts) > 3 else "")


class DramImage:
    """What the DRAM holds after DMA transfers, beat by beat, as rtl/dma.py and rtl/dram.py move
    them: one row is cut into bursts of at most MAX_BURST_BEATS beats that end at the row's end
    and at 4 KiB pages (of the address the DMA means); each burst starts at its AXI address
    (through ``tie``, when the model has one) and counts its beats up from there within that
    address's page. Beats nothing has written read as None."""

    def __init__(self, bus_bytes: int, dram_bytes: int, tie: Tie | None = None):
        self.bus, self.size, self.tie = bus_bytes, dram_bytes, tie
        self.beats: dict[int, int] = {}

    def bursts(self, addr: int, nbeats: int):
        """(first byte, beats) of each burst of a one-row transfer, as the DMA cuts it."""
        while nbeats:
            n = min(nbeats, MAX_BURST_BEATS, (PAGE_BYTES - addr % PAGE_BYTES) // self.bus)
            yield addr, n
            addr += n * self.bus
            nbeats -= n

    def addresses(self, addr: int, nbeats: int, side: str) -> list[int]:
        """The byte address of every beat of a transfer, as the DRAM sees them."""
        out = []
        for start, n in self.bursts(addr, nbeats):
            t = self.tie
            if t is not None and t.applies(side):
                start = start | (1 << t.line) if t.level else start & ~(1 << t.line)
            page = start & ~(PAGE_BYTES - 1)
            out += [(page | ((start + k * self.bus) & (PAGE_BYTES - 1))) % self.size for k in range(n)]
        return out

    def store(self, addr: int, values) -> None:
        for a, v in zip(self.addresses(addr, len(values), "store"), values):
            self.beats[a] = v

    def load(self, addr: int, nbeats: int) -> list[int | None]:
        return [self.beats.get(a) for a in self.addresses(addr, nbeats, "load")]


def dram_cells(addr: int, got: list[int], want: list[int], bus_bytes: int) -> list[tuple[int, int, int]]:
    """(byte address, bit of the byte, value read) of every bit of a load that read wrong."""
    out = []
    for k, (g, w) in enumerate(zip(got, want)):
        diff = g ^ w
        for j in range(8 * bus_bytes):
            if diff >> j & 1:
                out.append((addr + k * bus_bytes + j // 8, j % 8, g >> j & 1))
    return out


def explain_dram(history: list[tuple], bus_bytes: int, dram_bytes: int, lines) -> list[Tie]:
    """The address faults that reproduce every load of ``history`` -- ("store", addr, values)
    and ("load", addr, values read) in the order they ran -- where a good DRAM does not: no
    beat the candidate knows reads otherwise, and at least one beat the good model gets wrong
    it gets right. Of those, the ones that know the most beats read (the others leave more of
    what was read to chance: data nothing wrote)."""
    good = DramImage(bus_bytes, dram_bytes)
    expected = []  # per load: what a good DRAM returns
    for op, addr, values in history:
        if op == "store":
            good.store(addr, values)
        else:
            expected.append(good.load(addr, len(values)))
    scored = []
    for line in lines:
        for level in (0, 1):
            for side in ("both", "load", "store"):
                tie = Tie(line, level, side)
                img, score, explained, n = DramImage(bus_bytes, dram_bytes, tie), 0, 0, 0
                for op, addr, values in history:
                    if op == "store":
                        img.store(addr, values)
                        continue
                    pred = img.load(addr, len(values))
                    if any(p is not None and p != v for p, v in zip(pred, values)):
                        break
                    explained += sum(p == v != e for p, v, e in zip(pred, values, expected[n]))
                    score += sum(p is not None for p in pred)
                    n += 1
                else:
                    if explained:
                        scored.append((score, tie))
    best = max((sc for sc, _ in scored), default=0)
    return [t for sc, t in scored if sc == best]


async def drain_dram(dev) -> None:
    """Soft reset (a load waiting for a beat that never comes is stopped) and wait until every
    read burst the DRAM still owes has drained (the load unit takes strays while idle)."""
    b = dev.board
    await dev.soft_reset()
    await dev.tb.wait_cycles(2 * (b.latency + OUTSTANDING * MAX_BURST_BEATS * b.period // b.beats + 16))


async def locate_dropped_beat(dev, dram: int, words: int, budget: int) -> str | None:
    """Name the beat a load DMA loses: one 1D load of ``words`` ACC words from ``dram``
    (page-aligned, inside one page: full 16-beat bursts) of distinct beats, stored there first.
    A lost beat shows as every later beat landing one beat early, and the load never finishing
    (it waits for one beat more); the last word then stays unwritten."""
    b = dev.board
    bits = b.bus_bits
    wbeats = dev.mem_width(Region.ACC) // bits
    n = words * wbeats
    mask = (1 << bits) - 1
    beats = [((k + 1) * 0x9E3779B97F4A7C15) & mask for k in range(n + 1)]  # odd multiplier: all distinct
    await drain_dram(dev)
    dev.load_words(Region.ACC, 0, [sum(beats[w * wbeats + i] << (bits * i) for i in range(wbeats)) for w in range(words)])
    hung = False
    with dev.submit_filter_suspended():
        await dev.run([dma_store(sram=0, dram=dram, words=words)], budget)
        dev.load_words(Region.ACC, 0, [0] * words)
        try:
            await dev.run([dma_load(Region.ACC, sram=0, dram=dram, words=words)], budget)
        except DeviceTimeout:
            hung = True
    got = [w >> (bits * i) & mask for w in dev.read_words(Region.ACC, 0, words) for i in range(wbeats)]
    await drain_dram(dev)
    landed = (n - 1) // wbeats * wbeats if hung else n  # a lost beat leaves the last word unwritten
    k = next((i for i in range(landed) if got[i] != beats[i]), None)
    if k is None:
        return (f"a {n}-beat load from DRAM byte {dram} never finished: it lost one of its last {n - landed} beats"
                if hung else None)
    if hung and all(got[i] == beats[i + 1] for i in range(k, landed)):
        burst, beat = divmod(k, MAX_BURST_BEATS)
        return (f"the load DMA drops beat {beat} of burst {burst} of an entry (beat {k} of a {n}-beat load from DRAM "
                f"byte {dram}, full {MAX_BURST_BEATS}-beat bursts): every later beat lands one beat early (ACC word "
                f"{k // wbeats} on) and the load waits for a beat that never comes")
    return (f"a {n}-beat load from DRAM byte {dram} into ACC reads beat {k} wrong (0x{got[k]:x}, expected "
            f"0x{beats[k]:x}), not as a lost beat" + ("; the load never finished" if hung else ""))
