"""The DMA-fed GEMM stream without a simulator: an interpreter of the command set written from
docs/chip.md (DMA rows and strides, MATMUL, semaphore counts), run in stream order, must produce
numpy's C for every plan shape, and every semaphore must balance. The simulator tests then only
have to show the RTL does what this spec says (tests/test_memsys.py, the kernel tests)."""

from __future__ import annotations

import numpy as np
import pytest

from kernels.dma_stream import Ledger
from kernels.gemm import SPACER_K, GemmBuffers, gemm_stream, plan_for, prepare_operands
from rtl import isa
from rtl.board import BoardConfig
from rtl.config import ChipConfig
from rtl.isa import DmaQueue, Opcode
from rtl.memories import MEM, Region
from workarounds.constraints import GemmConstraints
from cosim.buffers import DramAllocator


class StreamModel:
    """Sequential semantics of one stream: each command runs to completion in order.

    ``stale_a`` models FL-ME-002 at its worst: every MATMUL that follows another with no FENCE
    between them reads its first A word at the previous MATMUL's ``a + k`` (on the chip that
    happens only when it is issued back to back, which a stream cannot rule out). Words no load
    wrote read as junk (``junk`` seeds them), so a product that must vanish has to."""

    def __init__(self, cfg: ChipConfig, dram: np.ndarray, stale_a: bool = False, junk: int = 0):
        self.cfg, self.dram = cfg, dram
        self.srams = {n: {} for n in ("A", "B", "ACC", "SA", "SB")}
        self.strides = {q: (0, 0) for q in DmaQueue}
        self.sems = [0] * isa.SEMAPHORES
        self.stale_a, self.after = stale_a, None  # word after the last MATMUL's A range
        self.rng = np.random.default_rng(junk)

    def read(self, name, word):
        if word not in self.srams[name]:
            self.srams[name][word] = self.rng.integers(0, 256, self.word_bytes(name), dtype=np.uint8)
        return self.srams[name][word]

    def word_bytes(self, name):
        return MEM[name].width(self.cfg) // 8

    def run(self, cmds):
        R, C = self.cfg.rows, self.cfg.cols
        for cmd in cmds:
            d = isa.decode(cmd)
            op, sync = d["opcode"], d["sync"]
            if sync["wait"]:
                self.sems[sync["wait_sem"]] -= 1
                assert self.sems[sync["wait_sem"]] >= 0 or op in (Opcode.DMA_LOAD, Opcode.DMA_STORE), \
                    f"the stream waits on semaphore {sync['wait_sem']} before anything signals it"
            if op == Opcode.DMA_STRIDE:
                self.strides[DmaQueue(d["flags"]["queue"])] = (d["arg0"], d["dram_stride"])
            elif op in (Opcode.DMA_LOAD, Opcode.DMA_STORE):
                name = Region(d["flags"]["region"]).name
                wb = self.word_bytes(name)
                ss, ds = self.strides[DmaQueue.LOAD if op == Opcode.DMA_LOAD else DmaQueue.STORE]
                for r in range(d["arg1"]):
                    for w in range(d["length"]):
                        at = d["dram"] + r * ds + w * wb
                        word = d["arg0"] + r * ss + w
                        if op == Opcode.DMA_LOAD:
                            self.srams[name][word] = self.dram[at:at + wb].copy()
                        else:
                            self.dram[at:at + wb] = self.srams[name][word]
            elif op == Opcode.FENCE:
                self.after = None
            elif op == Opcode.MATMUL:
                k, a0, b0, c0 = d["length"], d["arg0"], d["arg1"], d["arg2"]
                first = self.after if self.stale_a and self.after is not None else a0
                self.after = a0 + k
                a = np.stack([self.read("A", first if i == 0 else a0 + i).view(np.int8) for i in range(k)], axis=1)
                b = np.stack([self.read("B", b0 + i).view(np.int8) for i in range(k)], axis=0)  # (k, C)
                c = a.astype(np.int64) @ b.astype(np.int64)
                for i in range(R):
                    old = self.srams["ACC"].get(c0 + i, np.zeros(4 * C, np.uint8)).view("<i4").astype(np.int64)
                    new = (c[i] + (old if d["flags"]["accumulate"] else 0)).astype(np.int64)
                    self.srams["ACC"][c0 + i] = ((new + 2**31) % 2**32 - 2**31).astype("<i4").view(np.uint8)
            for key in ("signal", "signal2"):
                if sync[key]:
                    self.sems[sync[f"{key}_sem"]] += 1
        return self


SHAPES = [(1, 1, 1), (5, 7, 3), (37, 19, 100), (16, 16, 64), (9, 40, 200), (64, 8, 16)]


@pytest.mark.parametrize("double_buffer", [True, False])
@pytest.mark.parametrize("stale,gap", [(False, ""), (True, "spacer"), (True, "fence")],
                         ids=["plain", "FL-ME-002-spacer", "FL-ME-002-fence"])
@pytest.mark.parametrize("m,n,k", SHAPES)
def test_gemm_stream_computes_c_and_balances_its_semaphores(m, n, k, double_buffer, stale, gap):
    seed = m * 10007 + n * 101 + k
    cfg = ChipConfig(formats=("int8",), operand_depth=128, acc_depth=64)  # small: many groups and chunks
    board = BoardConfig().resolve(cfg)
    cons = GemmConstraints(repeat_first_a_word=stale)
    rng = np.random.default_rng(seed)
    a = rng.integers(-128, 128, (m, k), dtype=np.int8)
    b = rng.integers(-128, 128, (k, n), dtype=np.int8)
    plan = plan_for(cfg, cons, m, n, k, double_buffer=double_buffer, board=board, row_gap=gap)
    aw, bw = prepare_operands(a, b, cfg, plan)
    dram = np.zeros(board.dram_bytes, np.uint8)
    alloc = DramAllocator(board.dram_bytes, board.bus_bytes)
    R, C = cfg.rows, cfg.cols
    bufs = GemmBuffers(alloc.alloc(plan.tm * k * R), alloc.alloc(plan.tn * k * C), alloc.alloc(plan.tm * plan.tn * R * C * 4),
                       zeros=alloc.alloc(SPACER_K * C))  # DRAM starts zeroed here
    assert plan.row_gap == gap
    dram[bufs.a.addr:bufs.a.addr + plan.tm * k * R] = np.asarray(aw).astype(f"<u{R}").view(np.uint8).ravel()
    dram[bufs.b.addr:bufs.b.addr + plan.tn * k * C] = np.asarray(bw).astype(f"<u{C}").view(np.uint8).ravel()
    stream = gemm_stream(cfg, plan, bufs, cons)
    want = (a.astype(np.int64) @ b.astype(np.int64) + 2**31) % 2**32 - 2**31
    # the mitigated stream must be right on a chip with the erratum and on one without it
    for stale_chip in ([False, True] if stale else [False]):
        out = dram.copy()
        model = StreamModel(cfg, out, stale_a=stale_chip, junk=seed).run(stream)
        assert model.sems == [0] * isa.SEMAPHORES, f"semaphores left at {model.sems} (seed {seed})"
        raw = out[bufs.c.addr:bufs.c.addr + plan.tm * plan.tn * R * C * 4].view("<i4")
        got = raw.reshape(plan.tm, plan.tn, R, C).transpose(0, 2, 1, 3).reshape(plan.tm * R, plan.tn * C)[:m, :n]
        assert np.array_equal(got, want), (f"plan {plan}, stale-A chip {stale_chip}: C differs "
                                           f"(reproduce: pytest {__file__} -k '{m} and {n} and {k}')")
    for cmd in stream:  # every DMA stays inside its buffers
        d = isa.decode(cmd)
        if d["opcode"] == Opcode.DMA_LOAD:
            assert bufs.a.addr <= d["dram"] < bufs.c.addr or d["dram"] == bufs.zeros.addr


def test_ledger_refuses_a_stream_wait_nothing_signals_and_drains_the_rest():
    led = Ledger()
    with pytest.raises(AssertionError, match="deadlock"):
        led.stream_wait(3)
    led.signal(2, None, 2)
    led.stream_wait(2)
    led.queue_wait(5)  # a queue may wait on what the stream signals later ...
    led.signal(5)
    drained = led.drain()  # ... and one count of 2 is left
    assert [isa.sync_of(c)["wait_sem"] for c in drained] == [2]
    assert led.counts == [0] * isa.SEMAPHORES


def test_planner_double_buffers_where_it_pays_and_obeys_the_flag():
    cfg = ChipConfig(formats=("int8",))
    board = BoardConfig().resolve(cfg)
    big = plan_for(cfg, GemmConstraints(), 256, 256, 256, board=board)
    assert big.nbuf == 2 and big.ga * big.kc <= cfg.operand_depth // 2
    forced = plan_for(cfg, GemmConstraints(), 256, 256, 256, board=board, double_buffer=False)
    assert forced.nbuf == 1
