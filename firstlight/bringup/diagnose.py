"""Fault location after a datapath check failed: which PE, which reduction lane, which bit.

Each locator runs small raw probes (operands loaded through the backdoor, one command, the
result read back through the backdoor), chosen so that no erratum of any revision touches them
(K = 2, B away from the top word, no back-to-back MATMULs, SUM over an even count), and
compares the results with models of the candidate faults. It returns a sentence, or None when
the probes show nothing (the fault is elsewhere).
"""

from __future__ import annotations

import numpy as np

from kernels.layout import int32_to_words, pack_a_panels, pack_b_panels, words_to_int32
from rtl.isa import ReduceOp, matmul, reduce
from rtl.memories import Region

__all__ = ["locate_pe", "locate_lane", "walk_pes", "walk_lanes"]


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
