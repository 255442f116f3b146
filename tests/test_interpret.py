"""The interpreter (interp/) against the RTL and the goldens.

Every kernel of the registry runs at the small shapes the suite uses (each kernel's bring-up
shapes, with and without extreme inputs; tests/test_tile.py's compiled-stream cases; every VEC
op, REDUCE op, GEMM epilogue and FP recipe at a small shape) in one Verilator job on the
default chip at revision B1 (the build the tile tests share), and in the same order on one
interpreter device. Per case the output tensors' DRAM bytes and the hash of every DRAM byte the
kernel placed must be identical, and the outputs must match the kernel's golden. The same job
then drops one hand-made bad command per ErrCode on both, and the ERR registers must agree.

The fast tests need no simulator: each ErrCode (expected from rtl/isa.py's comments) from a bad
command, deadlocks reported with the command's index, a semaphore left counting, a revision
refused.
"""

from __future__ import annotations

import asyncio
import hashlib
import time

import numpy as np
import pytest

from conftest import SEED
from rtl import isa
from rtl.board import BoardConfig
from rtl.config import ChipConfig
from rtl.isa import DmaQueue, ErrCode, Format, Opcode, ReduceOp, VecB, VecDst, VecOp
from rtl.memories import Region

CHIP = ChipConfig()  # the default chip: the tile tests' Verilator build (tests/test_tile_gemm.py)
REV = "B1"
ROW_SHAPE = {"rows": 5, "cols": 9}


def _cases() -> list[list]:
    """[kernel, params, extremes] in the order both runs take them."""
    from kernels.tile.spec import registry
    from test_tile import CASES as COMPILED_CASES  # the compiled-stream cases of the suite

    out = []
    for name, spec in registry().items():
        for p in spec.bringup or ({},):
            out += [[name, dict(p), False], [name, dict(p), True]]
    out += [[name, dict(p), False] for name, p in COMPILED_CASES]
    out += [["elementwise", {**ROW_SHAPE, "op": op}, True] for op in
            ("fadd", "fsub", "fmul", "fmax", "fmin", "i2f", "relu", "exp", "recip", "rsqrt", "deq", "expsub", "iadd",
             "requant")]
    out += [["elementwise", {**ROW_SHAPE, "op": "fmax", "broadcast": "row"}, True],
            ["elementwise", {**ROW_SHAPE, "op": "deq", "broadcast": "col"}, True]]
    out += [["reduce", {**ROW_SHAPE, "op": op}, True] for op in ("sum", "max", "min")]
    out += [["gemm", {"m": 21, "n": 19, "k": 17, "epilogue": "sum"}, True],
            ["gemm", {"m": 9, "n": 6, "k": 10, "epilogue": "relu"}, True]]
    out += [["gemm_fp", {"m": 12, "n": 8, "k": 40, "recipe": r}, False] for r in
            ("int8-channel", "fp8-e4m3-cast", "mxfp8-e5m2-floor", "mxfp4-e2m1-rceil")]
    out += [["flash_attention", {"seq": 9, "dim": 8, "recipe": "fp8-e5m2"}, False],
            ["decode_attention", {"seq": 90, "dim": 8, "heads": 2, "block": 32, "chunk": 16, "cap": 112,
                                  "partials": "dram"}, False]]
    out += [["mlp", {"tokens": 5, "d_in": 7, "d_hidden": 9, "d_out": 6, "order": o}, False]
            for o in ("stream", "resident", "spill")]
    return out


def _raw_outputs(c, read) -> tuple[dict[str, str], str]:
    """(hex of each output tensor's DRAM bytes, sha256 of every DRAM byte the kernel placed)."""
    outs = {t.name: bytes(read(t.dram, t.nbytes)).hex() for t in c.tensors if t.role == "out"}
    end = max(t.dram + t.nbytes for t in c.tensors)
    return outs, hashlib.sha256(bytes(read(0, end))).hexdigest()


async def _run_case(dev, name: str, params: dict, extremes: bool, seed: int) -> dict:
    """One kernel through run_spec, as the tile jobs run it, then its DRAM bytes read back raw."""
    import workarounds
    from firstlight.jobs.tile import compare
    from kernels.tile.ir import TileError
    from kernels.tile.spec import KernelRefused, get, run_spec

    spec = get(name)
    p = spec.resolve(params)
    mit = workarounds.attach(dev, warn=False)
    try:
        c = spec.compile(p, dev.config, dev.board, {"gemm": mit.gemm, "reduce": mit.reduce, "lowp": mit.lowp})
    except (TileError, KernelRefused) as e:
        return {"kernel": name, "params": p, "refused": str(e)}
    ins = spec.inputs(p, seed, extremes)
    t0 = time.perf_counter()
    outs, stats = await run_spec(dev, spec, p, ins, mitigations=mit)
    wall = time.perf_counter() - t0
    mismatch, _ = compare(spec, p, ins, outs, dev.config.lanes, stats.plan)
    raw, digest = _raw_outputs(c, dev.dram_read)
    stream = hashlib.sha256(b"".join(int(w).to_bytes(16, "little") for w in c.commands)).hexdigest()
    return {"kernel": name, "params": p, "raw": raw, "dram_sha256": digest, "stream_sha256": stream,
            "commands": len(c.commands), "wall_s": wall, "run_s": stats.sim_wait_s, "golden_mismatch": mismatch}


def _bad_commands(cfg: ChipConfig, board: BoardConfig) -> list[tuple[str, list[int], ErrCode]]:
    """(what, stream, the ErrCode rtl/isa.py's comments give it): the last command of each stream
    is the bad one; the ones before it set a DMA queue's strides."""
    A, B, ACC = Region.A, Region.B, Region.ACC
    od, ad, sd = cfg.operand_depth, cfg.acc_depth, cfg.scale_depth
    long_rows = [isa.dma_stride(DmaQueue.LOAD, sram=1, dram=2 * board.bus_bytes + 1)]  # a DRAM stride off the bus
    out = [
        ("unknown opcode", [isa.pack_command(0x7F)], ErrCode.BAD_OPCODE),
        ("zero-length MATMUL", [isa.matmul(a=0, b=0, c=0, k=0)], ErrCode.BAD_LENGTH),
        ("zero-length REDUCE", [isa.reduce(ReduceOp.SUM, src=0, count=0, dst=0)], ErrCode.BAD_LENGTH),
        ("zero-row DMA", [isa.dma_load(A, sram=0, dram=0, words=1, rows=0)], ErrCode.BAD_LENGTH),
        ("A address + K beyond the operand SRAM", [isa.matmul(a=od - 3, b=0, c=0, k=4)], ErrCode.A_RANGE),
        ("B address + K beyond the operand SRAM", [isa.matmul(a=0, b=od - 3, c=0, k=4)], ErrCode.B_RANGE),
        ("C address + ROWS beyond the accumulator", [isa.matmul(a=0, b=0, c=ad - cfg.rows + 1, k=4)], ErrCode.C_RANGE),
        ("REDUCE op 5", [isa.pack_command(Opcode.REDUCE, flags={"reduce": {"op": 5}}, length=1)],
         ErrCode.BAD_REDUCE_OP),
        ("REDUCE source + count beyond the accumulator", [isa.reduce(ReduceOp.MAX, src=ad - 1, count=2, dst=0)],
         ErrCode.SRC_RANGE),
        ("REDUCE destination beyond the accumulator",
         [isa.pack_command(Opcode.REDUCE, length=1, arg0=0, arg2=ad)], ErrCode.DST_RANGE),
        ("VEC b VECTOR beyond the accumulator", [isa.vec(VecOp.FADD, a=0, b=ad - 1, count=2, dst=4)],
         ErrCode.SRC_RANGE),
        ("VEC destination beyond the accumulator", [isa.vec(VecOp.EXP, a=0, count=2, dst=ad - 1)],
         ErrCode.DST_RANGE),
        ("CVT_I8 destination beyond B", [isa.vec(VecOp.CVT_I8, a=0, b=0, count=4, dst=od - 2, dst_sram=VecDst.B,
                                                 b_form=VecB.SCALAR)], ErrCode.DST_RANGE),
        ("MATMUL reserved flag bit", [isa.pack_command(Opcode.MATMUL, flags={"matmul": {"reserved": 1}}, length=1)],
         ErrCode.RESERVED_NONZERO),
        ("int8 MATMUL with arg3", [isa.pack_command(Opcode.MATMUL, length=1, arg3={"scales": {"sa": 1}})],
         ErrCode.RESERVED_NONZERO),
        ("REDUCE with arg3", [isa.pack_command(Opcode.REDUCE, length=1, arg3=1)], ErrCode.RESERVED_NONZERO),
        ("NOP with flags", [isa.pack_command(Opcode.NOP, flags=1)], ErrCode.RESERVED_NONZERO),
        ("DMA_STRIDE with a length", [isa.pack_command(Opcode.DMA_STRIDE, length=1)], ErrCode.RESERVED_NONZERO),
        ("VEC FADD with arg3", [isa.pack_command(Opcode.VEC, length=1, arg3=1)], ErrCode.RESERVED_NONZERO),
        ("MATMUL format code 4", [isa.pack_command(Opcode.MATMUL, flags={"matmul": {"fmt": 4}}, length=1)],
         ErrCode.BAD_FORMAT),
        ("FP MATMUL scales beyond SA", [isa.matmul(a=0, b=0, c=0, k=64, fmt=Format.E4M3, sa=sd - 1)],
         ErrCode.SCALE_RANGE),
        ("DMA_LOAD into the command ring", [isa.dma_load(Region.CMDQ, sram=0, dram=0, words=1)], ErrCode.DMA_REGION),
        ("DMA_STORE from A", [isa.pack_command(Opcode.DMA_STORE, flags={"dma": {"region": int(A)}}, length=1, arg1=1)],
         ErrCode.DMA_REGION),
        ("DMA past the SRAM", [isa.dma_load(B, sram=od - 1, dram=0, words=2)], ErrCode.DMA_SRAM_RANGE),
        ("DMA rows past the SRAM", [isa.dma_stride(DmaQueue.LOAD, sram=od, dram=0),
                                    isa.dma_load(A, sram=0, dram=0, words=1, rows=2),
                                    isa.dma_stride(DmaQueue.LOAD, sram=0, dram=0)],
         ErrCode.DMA_SRAM_RANGE),
        ("DMA past the DRAM", [isa.dma_load(ACC, sram=0, dram=board.dram_bytes - 4 * cfg.lanes, words=2)],
         ErrCode.DMA_DRAM_RANGE),
        ("DMA DRAM address off the bus", [isa.dma_load(A, sram=0, dram=1, words=1)], ErrCode.DMA_ALIGN),
        ("DMA DRAM stride off the bus", long_rows + [isa.dma_load(A, sram=0, dram=0, words=1, rows=2),
                                                     isa.dma_stride(DmaQueue.LOAD, sram=0, dram=0)],
         ErrCode.DMA_ALIGN),
        ("VEC dst 3", [isa.pack_command(Opcode.VEC, flags={"vec": {"dst": 3}}, length=1)], ErrCode.BAD_VEC_OP),
        ("CVT_I8 into ACC", [isa.vec(VecOp.CVT_I8, a=0, b=0, count=1, dst=0)], ErrCode.BAD_VEC_OP),
        ("FOLD of a unary op", [isa.vec(VecOp.EXP, a=0, count=2, dst=4, b_form=VecB.FOLD)], ErrCode.BAD_VEC_OP),
        ("CVT_F8 with format E2M1", [isa.pack_command(Opcode.VEC, flags={"vec": {"op": int(VecOp.CVT_F8), "dst": 2}},
                                                      length=1, arg3=int(Format.E2M1))], ErrCode.BAD_VEC_OP),
    ]
    return out


def _bad_index(stream: list[int]) -> int:
    """Which command of a probe's stream is the bad one (a trailing DMA_STRIDE puts strides back)."""
    last = len(stream) - 1
    if last and isa.opcode_of(stream[last]) == Opcode.DMA_STRIDE:
        last -= 1
    return last


async def _probe_errors(dev) -> list[dict]:
    """Each bad stream on a clean ERR: what ERR, ERR_CMD0..3 and ERR_COUNT read, and how many
    commands retired."""
    from rtl.csr_map import REG

    out = []
    for what, stream, _ in _bad_commands(dev.config, dev.board):
        await dev.write_csr("CTRL", REG["CTRL"].pack(clear_err=1))
        done0 = await dev.read_csr("DONE_COUNT")
        with dev.submit_filter_suspended():
            await dev.submit(stream + [isa.nop()])
            await dev.wait_idle()
        out.append({"what": what, "err": await dev.read_csr("ERR"),
                    "err_cmd": [await dev.read_csr(f"ERR_CMD{i}") for i in range(4)],
                    "err_count": await dev.read_csr("ERR_COUNT"),
                    "retired": await dev.read_csr("DONE_COUNT") - done0})
    await dev.write_csr("CTRL", REG["CTRL"].pack(clear_err=1))
    return out


async def interp_vs_rtl_job(dev, emit, cases: list, seed: int) -> dict:
    """Inside the simulator, and on the interpreter: every case in order, then the error probes."""
    kernels = [await _run_case(dev, name, params, extremes, seed) for name, params, extremes in cases]
    return {"kernels": kernels, "errors": await _probe_errors(dev)}


# ---- the interpreter against the RTL -------------------------------------------------------------

def _repro(name: str, p: dict, extremes: bool) -> str:
    flags = " ".join(f"--{k} {v}" for k, v in p.items())
    return (f"reproduce: FIRSTLIGHT_SEED={SEED} pytest tests/test_interpret.py -k rtl (RTL alone: firstlight run "
            f"{name} {flags} --rev {REV} --seed {SEED}{' --extremes' if extremes else ''})")


@pytest.fixture(scope="module")
def both():
    """(RTL results, interpreter results, interpreter seconds), one simulator job for all cases."""
    from cosim.build import Variant
    from cosim.jobs import run_job
    from interp import InterpDevice

    cases = _cases()
    rtl = run_job(interp_vs_rtl_job, {"cases": cases, "seed": SEED}, variant=Variant(config=CHIP, revision=REV),
                  sim="verilator")
    t0 = time.perf_counter()
    mine = asyncio.run(interp_vs_rtl_job(InterpDevice(CHIP, revision=REV), None, cases, SEED))
    return cases, rtl.value, mine, time.perf_counter() - t0, rtl.run_s


@pytest.mark.sim
def test_every_kernel_is_bit_exact_against_the_rtl_and_its_golden(both):
    from firstlight.jobs.checks import describe_mismatch

    cases, rtl, mine, _, _ = both
    assert len(rtl["kernels"]) == len(mine["kernels"]) == len(cases)
    bad, ran = [], set()
    for (name, _, extremes), r, m in zip(cases, rtl["kernels"], mine["kernels"]):
        where = f"{name} {m['params']}" + (" extremes" if extremes else "")
        if "refused" in r or "refused" in m:
            if r.get("refused") != m.get("refused"):
                bad.append(f"{where}: refused on one side only: RTL {r.get('refused')!r}, interpreter {m.get('refused')!r}")
            continue
        ran.add(name)
        why = []
        if r["stream_sha256"] != m["stream_sha256"]:
            why.append("the two compiled different streams")
        for t in r["raw"]:
            if r["raw"][t] != m["raw"][t]:
                a, b = (np.frombuffer(bytes.fromhex(x[t]), np.uint8) for x in (m["raw"], r["raw"]))
                diff = np.flatnonzero(a != b)
                why.append(f"output {t}: {len(diff)} of {len(a)} DRAM bytes differ, first at byte {diff[0]} "
                           f"(interpreter {a[diff[0]]:#04x}, RTL {b[diff[0]]:#04x})")
        if r["dram_sha256"] != m["dram_sha256"] and not why:
            why.append("the DRAM bytes the kernel placed differ outside its outputs")
        if m["golden_mismatch"] is not None:
            why.append(f"interpreter against the golden: {describe_mismatch(m['golden_mismatch'])}")
        if r["golden_mismatch"] is not None:
            why.append(f"RTL against the golden: {describe_mismatch(r['golden_mismatch'])}")
        if why:
            bad.append(f"{where}: " + "; ".join(why) + "; " + _repro(name, m["params"], extremes))
    assert not bad, "\n".join(bad)
    from kernels.tile.spec import registry

    assert ran == set(registry()), f"kernels that never ran: {sorted(set(registry()) - ran)}"


@pytest.mark.sim
def test_the_error_registers_agree_with_the_rtl_and_isa(both):
    _, rtl, mine, _, _ = both
    want = _bad_commands(CHIP, BoardConfig().resolve(CHIP))
    bad = []
    for (what, stream, code), r, m in zip(want, rtl["errors"], mine["errors"]):
        cmd = stream[_bad_index(stream)]
        words = [(cmd >> 32 * i) & 0xFFFFFFFF for i in range(4)]
        expect = {"what": what, "err": int(code), "err_cmd": words, "err_count": 1, "retired": len(stream)}
        if r != expect:
            bad.append(f"{what}: the RTL reads {r}, rtl/isa.py says {expect}")
        if m != r:
            bad.append(f"{what}: the interpreter reads {m}, the RTL {r}")
    assert len(rtl["errors"]) == len(want)
    assert not bad, "\n".join(bad)


# ---- the interpreter alone ------------------------------------------------------------------------

def _dev(**kw):
    from interp import InterpDevice

    return InterpDevice(CHIP, revision="B1", **kw)


def _run(dev, stream):
    async def go():
        await dev.submit(stream)
        await dev.wait_idle()
    asyncio.run(go())


@pytest.mark.parametrize("what,stream,code", _bad_commands(CHIP, BoardConfig().resolve(CHIP)),
                         ids=[w for w, _, _ in _bad_commands(CHIP, BoardConfig().resolve(CHIP))])
def test_a_bad_command_sets_its_err_code_and_is_dropped(what, stream, code):
    dev = _dev()
    before = dev.machine.sram["ACC"].copy()
    _run(dev, stream + [isa.nop()])
    m = dev.machine
    bad = stream[_bad_index(stream)]
    assert (ErrCode(m.err_code), m.err_cmd, m.err_count) == (code, bad, 1), what
    assert asyncio.run(dev.read_csr("ERR_CMD3")) == bad >> 96
    assert m.done_count == len(stream)  # every other command retired, the NOP after it too
    assert (m.sram["ACC"] == before).all()
    with pytest.raises(Exception, match=code.name):
        asyncio.run(dev.check_no_error())


def test_the_first_error_is_latched_and_every_error_counted():
    dev = _dev()
    first = isa.matmul(a=0, b=0, c=0, k=0)
    _run(dev, [first, isa.pack_command(0x7F), isa.nop()])
    assert (dev.machine.err_code, dev.machine.err_cmd, dev.machine.err_count) == (ErrCode.BAD_LENGTH, first, 2)


def test_a_wait_nothing_signals_is_a_deadlock_naming_the_command():
    from interp import Deadlock

    dev = _dev()
    stream = [isa.nop(), isa.dma_load(Region.A, sram=0, dram=0, words=1, signal=1), isa.nop(wait=1),
              isa.matmul(a=0, b=0, c=0, k=4, wait=3)]
    with pytest.raises(Deadlock, match=r"command 3 \(MATMUL.*command stream.*semaphore 3 \(count 0\)") as e:
        asyncio.run(dev.submit(stream))
    assert e.value.stuck[0]["index"] == 3


def test_a_dma_queue_waiting_for_ever_is_a_deadlock_at_wait_idle():
    from interp import Deadlock

    dev = _dev()
    asyncio.run(dev.submit([isa.nop(), isa.dma_store(sram=0, dram=0, words=1, wait=6)]))  # later code could signal
    with pytest.raises(Deadlock, match=r"command 1 \(DMA_STORE.*DMA store queue waits on semaphore 6"):
        asyncio.run(dev.wait_idle())


def test_a_dma_waits_in_its_queue_so_the_stream_goes_on_to_its_signal():
    dev = _dev()
    dev.dram_write(0, np.arange(4 * CHIP.lanes, dtype=np.uint8))
    _run(dev, [isa.dma_load(Region.ACC, sram=5, dram=0, words=1, wait=2, signal=4), isa.nop(signal=2),
               isa.nop(wait=4)])
    assert dev.read_words(Region.ACC, 5, 1) == [int.from_bytes(bytes(range(4 * CHIP.lanes)), "little")]
    assert dev.semaphores() == [0] * 8


def test_a_semaphore_left_counting_is_reported():
    from interp import SemaphoresLeft

    dev = _dev()
    with pytest.raises(SemaphoresLeft, match="semaphore 4 at 1") as e:
        _run(dev, [isa.nop(), isa.nop(signal=4)])
    assert e.value.counts == {4: 1}
    lax = _dev(strict_semaphores=False)
    _run(lax, [isa.nop(signal=4)])
    assert lax.semaphores()[4] == 1


def test_dma_strides_and_the_int8_matmul_against_numpy(seed=SEED):
    """A 2-D load with strides into A and B, a MATMUL, a store: checked against numpy's own
    product (not a golden) so the layouts are tested independently. Seeded."""
    rng = np.random.default_rng(seed)
    R, C, K = CHIP.rows, CHIP.cols, 7
    a = rng.integers(-128, 128, (R, K), dtype=np.int8)
    b = rng.integers(-128, 128, (K, C), dtype=np.int8)
    dev = _dev()
    row = 16  # DRAM bytes between rows of the staged operands: a 2-D descriptor walks them
    staged = np.zeros((K, row), np.uint8)
    staged[:, :R] = a.T.view(np.uint8)
    dev.dram_write(0, staged)
    staged_b = np.zeros((K, row), np.uint8)
    staged_b[:, :C] = b.view(np.uint8)
    dev.dram_write(4096, staged_b)
    _run(dev, [isa.dma_stride(DmaQueue.LOAD, sram=2, dram=row),
               isa.dma_load(Region.A, sram=10, dram=0, words=1, rows=K, signal=0),
               isa.dma_load(Region.B, sram=30, dram=4096, words=1, rows=K, signal=1),
               isa.dma_stride(DmaQueue.LOAD, sram=0, dram=0),
               isa.nop(wait=0), isa.nop(wait=1)])
    # the stride put every second SRAM word: gather them into consecutive words for the MATMUL
    for k in range(K):
        dev.load_words(Region.A, 100 + k, dev.read_words(Region.A, 10 + 2 * k, 1))
        dev.load_words(Region.B, 100 + k, dev.read_words(Region.B, 30 + 2 * k, 1))
    _run(dev, [isa.matmul(a=100, b=100, c=8, k=K, signal=2),
               isa.dma_store(sram=8, dram=8192, words=R, wait=2, signal=3), isa.nop(wait=3)])
    got = dev.dram_read(8192, R * C * 4).view("<i4").reshape(R, C)
    want = (a.astype(np.int64) @ b.astype(np.int64)).astype(np.int32)
    assert (got == want).all(), f"seed {seed}; reproduce: FIRSTLIGHT_SEED={seed} pytest tests/test_interpret.py -k numpy"


@pytest.mark.parametrize("rev", ["A0", "A1", "B0"])
def test_a_revision_with_defects_is_refused_by_name(rev):
    from interp import InterpDevice, UnmodelledRevision
    from rtl.revisions import REVISIONS

    some = sorted(d.name for d in REVISIONS[rev].defects)[0]
    with pytest.raises(UnmodelledRevision, match=rf"revision {rev}: .*{some}"):
        InterpDevice(CHIP, revision=rev)


def test_an_unchanged_kernel_runs_on_the_interpreter_through_the_kernels_entry_point(seed=SEED):
    """kernels/gemm.py's gemm(dev, a, b, mitigations=) as the jobs call it, against numpy."""
    import workarounds
    from kernels.gemm import gemm

    rng = np.random.default_rng(seed)
    a = rng.integers(-128, 128, (9, 13), dtype=np.int8)
    b = rng.integers(-128, 128, (13, 6), dtype=np.int8)
    dev = _dev()
    c, stats = asyncio.run(gemm(dev, a, b, mitigations=workarounds.attach(dev, warn=False)))
    want = (a.astype(np.int64) @ b.astype(np.int64)).astype(np.int32)
    assert (np.asarray(c) == want).all(), f"reproduce: FIRSTLIGHT_SEED={seed} pytest tests/test_interpret.py -k entry"
    assert stats.dram_read_bytes > 0 and stats.cycles == 0  # no timing model yet: docs/interpret.md


# ---- the CLI: run <kernel> --interpret -----------------------------------------------------------

@pytest.fixture
def no_simulator(monkeypatch):
    """Every binding of cosim's find_simulator raises: what runs under it never builds or starts a
    simulator. The modules that bind it are imported first, so each binding is restored after."""
    import cosim.build
    import cosim.jobs
    import cosim.toolchain
    import firstlight.cli.common

    def refuse(*a, **k):
        raise AssertionError("the interpreter's path looked for a simulator")

    for mod in (cosim.toolchain, cosim.build, cosim.jobs, firstlight.cli.common):
        monkeypatch.setattr(mod, "find_simulator", refuse)


def test_run_interpret_checks_the_kernel_against_its_golden_with_no_simulator(tmp_path, capsys, no_simulator):
    """No build: the simulators are made unfindable, and the run still passes bit for bit."""
    import json

    from firstlight import cli

    path = tmp_path / "r.json"
    assert cli.main(["run", "gemm", "--m", "20", "--n", "12", "--k", "33", "--interpret", "--seed", str(SEED),
                     "--json", str(path)]) == cli.EXIT_OK
    out = capsys.readouterr().out
    assert "interpreted, revision B1" in out and "PASS (bit-exact vs golden)" in out and "not modelled" in out
    doc = json.loads(path.read_text())
    assert doc["passed"] and doc["sim"] == "interpreter" and doc["revision"] == "B1" and doc["cycles"] is None
    assert doc["macs_issued"] >= 20 * 12 * 33 and doc["commands"] > 0 and doc["provenance"]["git_commit"]


def test_run_interpret_reports_a_wrong_result_as_a_failure(capsys, monkeypatch):
    """A chip model that computes wrong (one MAC off) fails the golden check, exit 1: the run does
    check, it does not only print PASS."""
    from firstlight import cli
    from interp import machine

    real = machine.matmul_int8

    def off_by_one(a, b, old):
        out = real(a, b, old)
        out[0, 0] += 1
        return out

    monkeypatch.setattr(machine, "matmul_int8", off_by_one)
    assert cli.main(["run", "gemm", "--m", "8", "--n", "8", "--k", "8", "--interpret"]) == cli.EXIT_FAIL
    assert "FAIL" in capsys.readouterr().out


@pytest.mark.parametrize("argv, needle", [
    (["--rev", "A0"], "--interpret models revisions without defects (B1), not A0: its errata (FL-"),
    (["--trace", "t.json"], "--interpret runs on no simulator, so it takes no --trace"),
    (["--sim", "icarus", "--waves"], "so it takes no --sim, --waves"),
])
def test_run_interpret_refuses_what_it_cannot_do_by_name(argv, needle, capsys):
    from firstlight import cli

    assert cli.main(["run", "softmax", "--interpret", *argv]) == cli.EXIT_CANNOT_START
    assert needle in capsys.readouterr().err.replace("\n", " ")


# ---- sessions: firstlight.open(interpret=True) -----------------------------------------------------

def test_an_interpreted_session_serves_the_kernels_with_no_simulator(no_simulator, seed=SEED):
    """The same request loop (firstlight/jobs/session.py) on the interpreter, in a thread: a GEMM
    bit for bit against int64 numpy, a tile kernel by name against its golden, the registers."""
    import firstlight
    from kernels.tile.spec import get

    rng = np.random.default_rng(seed)
    a = rng.integers(-128, 128, (20, 33), dtype=np.int8)
    b = rng.integers(-128, 128, (33, 12), dtype=np.int8)
    with firstlight.open(interpret=True) as chip:
        assert chip.interpreted and chip.revision == "B1" and "in this process" in repr(chip)
        c, stats = chip.gemm(a, b)
        assert (c == a.astype(np.int64) @ b.astype(np.int64)).all(), f"reproduce: FIRSTLIGHT_SEED={seed}"
        assert stats.cycles == 0 and stats.dram_read_bytes > 0
        spec = get("rmsnorm")
        p = spec.resolve({"rows": 6, "cols": 20})
        ins = spec.inputs(p, seed, False)
        y, _ = chip.run_kernel("rmsnorm", **{k: v for k, v in ins.items() if k in ("x", "gamma")})  # its one output
        want = next(iter(spec.golden(ins, p, chip.config.lanes).values()))
        assert (np.asarray(y, np.float32).view(np.uint32) == np.asarray(want, np.float32).view(np.uint32)).all(), \
            f"reproduce: FIRSTLIGHT_SEED={seed}"
        assert chip.read_csr("REV") == 0xB1 and chip.read_csr("ERR") == 0
        with pytest.raises(ValueError, match="crash would end the caller"):
            chip.crash()
    assert chip.closed


def test_an_interpreted_session_reports_a_deadlock_as_the_watchdog_would():
    """A wait nothing signals: ChipTimeout with the stuck command in its dump, at once, and the
    session closed (a hung chip's state is not trusted)."""
    import firstlight
    from firstlight.session import ChipTimeout

    chip = firstlight.open(interpret=True)
    with pytest.raises(ChipTimeout, match=r"command 1 \(MATMUL.*semaphore 3") as e:
        chip.submit([isa.nop(), isa.matmul(a=0, b=0, c=0, k=4, wait=3)])
    assert e.value.dump["stuck"][0]["index"] == 1 and chip.closed


def test_an_interpreted_session_refuses_a_revision_with_defects():
    import firstlight

    with pytest.raises(ValueError, match=r"interpret=True models revisions without defects \(B1\), not A0"):
        firstlight.open(rev="A0", interpret=True)


# ---- the fixture that runs a test on both (tests/conftest.py on_chip) ------------------------------

def test_a_job_on_both_chips_gives_the_golden(on_chip, seed=SEED):
    """The tile job of `firstlight run` on the interpreter and on the RTL: bit-exact both times,
    with the timing figures the interpreter does not have at 0 there and real on the RTL."""
    from cosim.build import Variant
    from firstlight.jobs.tile import tile_job

    v = on_chip(tile_job, Variant(config=CHIP, revision=REV), kernel="softmax", params={"rows": 7, "cols": 30},
                seed=seed)
    assert v["passed"], f"{on_chip.kind}: {v['mismatch']}; reproduce: FIRSTLIGHT_SEED={seed} pytest " \
        f"tests/test_interpret.py -k on_both_chips"
    assert (v["stats"]["cycles"] == 0) == (on_chip.kind == "interpreter")
