"""The registry without a simulator: lint, the generated page, policy, status strings, passes."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from conftest import SEED
from kernels.gemm_plan import plan_gemm
from rtl.board import PAGE_BYTES, BoardConfig
from rtl.config import ChipConfig
from rtl.isa import DmaQueue, Opcode, decode, dma_load, dma_store, dma_stride, matmul, pack_command
from rtl.memories import MEM, Region
from rtl.revisions import Defect
from workarounds import ERRATA, ErratumWarning, parse_policy, resolve
from workarounds.cells import DmaCell, GemmCell, LowpCell, ReduceCell
from workarounds.check import compare
from workarounds.docs import render
from workarounds.lint import lint
from workarounds.passes import CHIP_STATE, PASSES, DmaGeometry, PassError, StreamFilter, stream_filter

ROOT = Path(__file__).resolve().parent.parent


def test_registry_is_clean():
    assert lint() == []


@pytest.mark.parametrize(
    "change, needle",
    [
        ({"defect": "engine_made_up"}, "defect must be an rtl.revisions.Defect, not 'engine_made_up'"),
        ({"defect": Defect.REDUCE_ISSUES_BEFORE_DRAIN}, "rtl/revisions.py gives A0 no REDUCE_ISSUES_BEFORE_DRAIN"),
        ({"affected": ("A0", "Z9")}, "unknown revision 'Z9'"),
        ({"unit": "dma"}, "unit must be a workarounds.Unit, not 'dma'"),
        ({"id": "FL-XX-001"}, "id must look like FL-<ME|RU|SR|CP|NU|DM|VU>-NNN"),
        ({"cell": ReduceCell(rows=2, cols=3, op="avg")}, "op 'avg' is not one of sum, max, min"),
        ({"cell": LowpCell(recipe="fp7", dist="normal", m=1, n=1, k=1)}, "unknown recipe 'fp7'"),
        ({"cell": LowpCell(recipe="int8-tensor", dist="wide", m=1, n=1, k=1)}, "unknown distribution 'wide'"),
        ({"cell": GemmCell(m=0, n=4, k=4)}, "m must be a positive integer"),
        ({"cell": {"kernel": "gemm", "m": 4}}, "is not one of GemmCell"),
        ({"cell": DmaCell(rows=2, words=8, pitch=4)}, "pitch 4 < words 8: its rows would overlap"),
        ({"cell": DmaCell(rows=2, words=8, pitch=8, offset=-1)}, "offset must be a non-negative integer"),
        ({"scale": DmaCell(rows=0, words=8, pitch=8)}, "scale: dma cell: rows must be a positive integer"),
        ({"knobs": {"gemm": {"avoid_unit_chunks": True}}}, "GemmConstraints has no knob 'avoid_unit_chunks'"),
        ({"knobs": {"gemm": {"avoid_unit_chunk": 1}}}, "GemmConstraints.avoid_unit_chunk takes bool"),
        ({"knobs": {"dma": {}}}, "unknown knob family 'dma'"),
        ({"knobs": {}}, "a kernel mitigation must set constraint knobs"),
        ({"mitigation_kind": "stream"}, "a stream mitigation needs a pass"),
        ({"reproducer": "repro_nothing"}, "reproducer 'repro_nothing' does not exist"),
        ({"mitigation": ""}, "needs a mitigation"),
        ({"fixed_in": "A0"}, "also listed as affected"),
    ],
)
def test_lint_catches_a_broken_record(change, needle):
    broken = dataclasses.replace(ERRATA[0], **change)
    problems = lint((broken, *ERRATA[1:]))
    assert any(needle in p for p in problems), problems


def test_resolution_refuses_an_unknown_erratum_id():
    r = resolve("A0")
    assert r.on("FL-ME-002") is True
    with pytest.raises(KeyError, match="unknown erratum 'FL-ME-02'"):
        r.on("FL-ME-02")  # a misspelt id must not read as "not active"


def test_constraints_follow_the_active_records():
    from workarounds.constraints import constraints_for

    by_id = {e.id: e for e in ERRATA}
    k = constraints_for([by_id["FL-ME-001"], by_id["FL-SR-001"], by_id["FL-RU-001"]])
    assert k["gemm"].avoid_unit_chunk and k["gemm"].b_reserved_top_words == 1
    assert not k["gemm"].repeat_first_a_word and k["reduce"].max_via_min and not k["reduce"].even_sum_count
    assert constraints_for([]) == {n: type(v)() for n, v in k.items()}, "no records: the chip as specified"


def test_lint_catches_duplicate_ids():
    assert any("duplicate id" in p for p in lint((*ERRATA, ERRATA[0])))


def test_generated_page_is_current():
    page = (ROOT / "docs" / "errata.md").read_text()
    assert page == render(), "docs/errata.md is stale: run `firstlight errata docs` (or `errata measure`)"


def test_policy_parsing_errors():
    assert parse_policy(["FL-ME-001=off"]) == {"FL-ME-001": "off"}
    with pytest.raises(ValueError, match="must look like ID=auto|on|off"):
        parse_policy(["FL-ME-001"])
    with pytest.raises(ValueError, match="unknown erratum 'FL-XX-999'"):
        parse_policy(["FL-XX-999=on"])
    with pytest.raises(ValueError, match="must be one of auto, on, off, not 'maybe'"):
        parse_policy(["FL-ME-001=maybe"])


def test_status_strings_and_warnings():
    r = resolve("A0")
    assert r.status["FL-ME-001"].startswith("Mitigated: ")
    assert r.status["FL-CP-001"] == "Not affected"
    assert resolve("B0").status["FL-CP-001"].startswith("Mitigated: ")
    with pytest.warns(ErratumWarning, match="FL-ME-002 .* affects A0 and its mitigation is OFF"):
        off = resolve("A0", {"FL-ME-002": "off"})
    assert off.status["FL-ME-002"] == "Vulnerable" and "FL-ME-002" not in off.active
    unknown = resolve("unknown(0xc3)")
    assert set(unknown.status.values()) == {"Unknown"} and not unknown.active
    assert any("not in the errata registry" in w for w in unknown.warnings)


def test_fence_pass_before_reduce_while_a_matmul_may_drain():
    mm, red, nop = pack_command(Opcode.MATMUL, length=4), pack_command(Opcode.REDUCE, length=1), pack_command(Opcode.NOP)
    fence = pack_command(Opcode.FENCE)
    cp = PASSES["FL-CP-001"]
    out, n = cp([mm, red, nop, red], {})
    assert out == [mm, fence, red, nop, red] and n == 1
    out, n = cp([mm, nop, red], {})  # a NOP does not make the REDUCE safe
    assert out == [mm, nop, fence, red] and n == 1
    out, n = cp([mm, fence, red], {})  # an explicit FENCE already does
    assert out == [mm, fence, red] and n == 0
    state = {}
    cp([mm], state)  # the MATMUL came in an earlier submit
    out, n = cp([nop, red], state)
    assert out == [nop, fence, red] and n == 1


def test_planner_applies_errata_constraints():
    cfg = ChipConfig()
    p = plan_gemm(cfg, 4, 4, 33, k_chunk=16, avoid_unit_chunk=True)
    assert p.k % p.kc != 1
    cell = next(e.cell for e in ERRATA if e.id == "FL-ME-001")  # it must meet the conditions unmitigated
    p = plan_gemm(cfg, cell.m, cell.n, cell.k, k_chunk=cell.k_chunk)
    assert p.k % p.kc == 1, f"FL-ME-001's cell {cell} plans no 1-step chunk ({p}): the matrix would prove nothing"
    p = plan_gemm(cfg, cell.m, cell.n, cell.k, k_chunk=cell.k_chunk, avoid_unit_chunk=True)
    assert p.k % p.kc != 1
    p = plan_gemm(cfg, 4, 4, 2000, b_words=cfg.operand_depth - 1)
    assert p.gb * p.kc <= cfg.operand_depth - 1
    p = plan_gemm(cfg, 8, 4, 2000, a_panel_extra=1)
    assert p.ga * (p.kc + 1) <= cfg.operand_depth
    for k in (64, 2048, 4096):  # FP path: chunks are whole 32-step blocks, scale words fit
        p = plan_gemm(cfg, 64, 64, k, block=32, a_panel_extra=1, b_words=cfg.operand_depth - 1)
        assert p.kc % 32 == 0 or p.kc == k, p
        assert p.ga * -(-p.kc // 32) <= cfg.scale_depth and p.gb * -(-p.kc // 32) <= cfg.scale_depth


def test_compare_reports_new_findings_and_missing_reproductions():
    observed = {e.id: {"fired": "A0" in e.affected, "detail": ""} for e in ERRATA}
    assert {r["verdict"] for r in compare("A0", observed)} == {"ok"}
    wrong = (dataclasses.replace(ERRATA[0], affected=("A1",)), *ERRATA[1:])
    rows = {r["id"]: r["verdict"] for r in compare("A0", observed, wrong)}
    assert rows[ERRATA[0].id] == "new finding"


def test_compare_on_an_unassessed_revision_expects_nothing():
    """Issue 15 item 4: B1 is not in the registry; nothing is expected of it or ruled out (it
    used to read "not affected" for every erratum)."""
    quiet = {e.id: {"fired": False, "detail": ""} for e in ERRATA}
    rows = compare("B1", quiet)
    assert {r["expected"] for r in rows} == {None} and {r["verdict"] for r in rows} == {"not seen"}
    loud = dict(quiet, **{ERRATA[0].id: {"fired": True, "detail": "it fired"}})
    verdicts = {r["id"]: r["verdict"] for r in compare("B1", loud)}
    assert verdicts[ERRATA[0].id] == "new finding" and set(verdicts.values()) == {"new finding", "not seen"}


# ---- the DMA passes, on command lists ---------------------------------------------------------
# A model of what a DMA moves, written from the spec (rtl/dma.py's docstring: row r between DRAM
# dram + r * dram_stride and SRAM word sram + r * sram_stride, bursts of at most 16 beats that end
# at the row's end) and from the two defects as rtl/revisions.py states them: ``wrap`` -- a burst
# is not split at a 4 KiB page and the DRAM increments it within its page; ``drop_odd`` -- a load
# with an odd rows > 1 moves rows - 1. The passes must make the defective model move exactly what
# the specified model moves for the original stream.

_CFG = ChipConfig()
_BOARD = BoardConfig().resolve(_CFG)
_GEO = DmaGeometry.of(_CFG, _BOARD)
_DRAM_MODEL_BYTES = 64 * 1024  # the model's DRAM (the streams stay below it)
_LOADS = ("A", "B", "ACC", "SA", "SB")


def _beat_addresses(start: int, nbytes: int, bus: int, wrap: bool) -> list[int]:
    out, off = [], 0
    while off < nbytes:
        a = start + off
        beats = min((nbytes - off) // bus, 16)
        if not wrap:
            beats = min(beats, (PAGE_BYTES - a % PAGE_BYTES) // bus)
        page = a - a % PAGE_BYTES
        out += [page + (a % PAGE_BYTES + i * bus) % PAGE_BYTES if wrap else a + i * bus for i in range(beats)]
        off += beats * bus
    return out


def _model(cmds, dram: np.ndarray, *, wrap: bool = False, drop_odd: bool = False) -> tuple[dict, np.ndarray]:
    """Run a stream of DMA_STRIDE / DMA_LOAD / DMA_STORE on the model: (SRAM bytes by region, DRAM)."""
    bus = _BOARD.bus_bytes
    dram = dram.copy()
    sram = {Region[n]: np.zeros(MEM[n].depth(_CFG) * MEM[n].width(_CFG) // 8, np.uint8) for n in _LOADS}
    sram[Region.ACC][:] = np.arange(len(sram[Region.ACC])) % 251  # what stores read
    strides = {DmaQueue.LOAD: (0, 0), DmaQueue.STORE: (0, 0)}  # the chip's reset values
    for c in cmds:
        d = decode(c)
        if d["opcode"] == Opcode.DMA_STRIDE:
            strides[DmaQueue(d["flags"]["queue"])] = (d["arg0"], d["dram_stride"])
            continue
        if d["opcode"] not in (Opcode.DMA_LOAD, Opcode.DMA_STORE):
            continue
        load = d["opcode"] == Opcode.DMA_LOAD
        ss, ds = strides[DmaQueue.LOAD if load else DmaQueue.STORE]
        region = Region(d["flags"]["region"])
        wb = MEM[region.name].width(_CFG) // 8
        rows = d["arg1"] - 1 if load and drop_odd and d["arg1"] > 1 and d["arg1"] % 2 else d["arg1"]
        for r in range(rows):
            s = (d["arg0"] + r * ss) * wb
            for i, a in enumerate(_beat_addresses(d["dram"] + r * ds, d["length"] * wb, bus, wrap)):
                if load:
                    sram[region][s + i * bus:s + (i + 1) * bus] = dram[a:a + bus]
                else:
                    dram[a:a + bus] = sram[region][s + i * bus:s + (i + 1) * bus]
    return sram, dram


def _same_effect(original, passed, rng_dram, **defects) -> None:
    want_sram, want_dram = _model(original, rng_dram)
    got_sram, got_dram = _model(passed, rng_dram, **defects)
    for region in want_sram:
        assert np.array_equal(got_sram[region], want_sram[region]), f"SRAM {region.name} differs"
    assert np.array_equal(got_dram, want_dram), "DRAM differs"


def _random_dma(rng, *, store: bool):
    """A valid 2D DMA (and the DMA_STRIDE before it) whose DRAM rows are whole SRAM words apart
    from a word-aligned start, so the page split can always cut at a word; about half cross."""
    name = "ACC" if store else _LOADS[rng.integers(len(_LOADS))]
    wb, depth = MEM[name].width(_CFG) // 8, MEM[name].depth(_CFG)
    words = int(rng.integers(1, min(depth, 96)))
    rows = int(rng.integers(1, 7))
    sstride = int(rng.integers(words, 2 * words + 1)) if rows > 1 else 0
    while rows > 1 and (rows - 1) * sstride + words > depth:
        rows -= 1
    dstride = wb * int(rng.integers(words, words + 300))
    dram = wb * int(rng.integers(0, (_DRAM_MODEL_BYTES - (rows - 1) * dstride - words * wb) // wb))
    queue = DmaQueue.STORE if store else DmaQueue.LOAD
    sem = [int(s) if s >= 0 else None for s in rng.integers(-1, 8, size=3)]
    kw = dict(sram=int(rng.integers(0, depth - (rows - 1) * sstride - words + 1)), dram=dram, words=words, rows=rows,
              tag=int(rng.integers(0, 1 << 20)), wait=sem[0], signal=sem[1], signal2=sem[2])
    cmd = dma_store(**kw) if store else dma_load(Region[name], **kw)
    return [dma_stride(queue, sram=sstride, dram=dstride), cmd]


def _dma_rows(cmds):
    """(sram word, dram byte, words, region) of every row each DMA moves, in order, per command."""
    strides = {DmaQueue.LOAD: (0, 0), DmaQueue.STORE: (0, 0)}
    out = []
    for c in cmds:
        d = decode(c)
        if d["opcode"] == Opcode.DMA_STRIDE:
            strides[DmaQueue(d["flags"]["queue"])] = (d["arg0"], d["dram_stride"])
        elif d["opcode"] in (Opcode.DMA_LOAD, Opcode.DMA_STORE):
            ss, ds = strides[DmaQueue.STORE if d["opcode"] == Opcode.DMA_STORE else DmaQueue.LOAD]
            out.append([(d["arg0"] + r * ss, d["dram"] + r * ds, d["length"], d["flags"]["region"])
                        for r in range(d["arg1"])])
    return out


def test_page_split_pass_keeps_every_row_inside_its_page():
    """Random streams (seed printed): the pass's output on the wrapping chip moves what the
    original moves on a chip to spec, and no row of its output crosses a page."""
    rng = np.random.default_rng(SEED)
    dram = rng.integers(0, 256, size=_DRAM_MODEL_BYTES, dtype=np.uint8)
    split = PASSES["FL-DM-001"]
    crossed = wrapped = 0
    for case in range(150):
        original = _random_dma(rng, store=bool(case % 3 == 0)) + _random_dma(rng, store=bool(case % 2))
        passed, inserted = split(original, {}, _GEO)
        try:
            assert inserted == len(passed) - len(original)
            _same_effect(original, passed, dram, wrap=True)
            for rows in _dma_rows(passed):
                for sram, a, words, region in rows:
                    wb = _GEO.word_bytes[region]
                    assert a // PAGE_BYTES == (a + words * wb - 1) // PAGE_BYTES, f"row at 0x{a:x} crosses a page"
        except AssertionError as e:
            raise AssertionError(f"case {case}: {e}\nreproduce: FIRSTLIGHT_SEED={SEED} .venv/bin/python -m pytest "
                                 f"tests/test_errata_registry.py -k page_split_pass") from None
        crossed += inserted > 0
        try:  # is the defect real on this stream (a burst, not only a row, crosses)?
            _same_effect(original, original, dram, wrap=True)
        except AssertionError:
            wrapped += 1
    assert 30 < crossed < 140, f"{crossed} of 150 streams crossed a page: the generator no longer tests the pass"
    assert wrapped > 20, f"the defect moved wrong bytes in only {wrapped} of 150 streams: the test lost its teeth"


def test_page_split_sync_goes_on_the_first_and_last_piece():
    """Row 0 crosses at 0x2000, row 1 stays in its page, row 2 crosses at 0x3000: five DMAs."""
    cmds = [dma_stride(DmaQueue.LOAD, sram=8, dram=2064),
            dma_load(Region.ACC, sram=0, dram=0x1FC0, words=8, rows=3, tag=77, wait=3, signal=0, signal2=1)]
    out, inserted = PASSES["FL-DM-001"](cmds, {}, _GEO)
    assert out[0] == cmds[0] and inserted == 4
    d = [decode(c) for c in out[1:]]
    assert [(x["arg0"], x["dram"], x["length"], x["arg1"]) for x in d] == [
        (0, 0x1FC0, 4, 1), (4, 0x2000, 4, 1),  # row 0: before and after the page
        (8, 0x1FC0 + 2064, 8, 1),  # row 1 whole
        (16, 0x1FC0 + 2 * 2064, 2, 1), (18, 0x3000, 6, 1)]  # row 2
    assert [x["sync"]["wait"] for x in d] == [1, 0, 0, 0, 0] and d[0]["sync"]["wait_sem"] == 3
    assert [(x["sync"]["signal"], x["sync"]["signal2"]) for x in d] == [(0, 0)] * 4 + [(1, 1)]
    assert (d[-1]["sync"]["signal_sem"], d[-1]["sync"]["signal2_sem"]) == (0, 1)
    assert {x["tag"] for x in d} == {77} and {x["opcode"] for x in d} == {Opcode.DMA_LOAD}


def test_page_split_keeps_runs_of_rows_that_do_not_cross():
    """Rows 0-2 inside page 0, row 3 crosses at 0x1000, rows 4-5 inside page 1: a 2D DMA with
    the queue's strides, the split row, a 2D DMA."""
    cmds = [dma_stride(DmaQueue.STORE, sram=4, dram=1024), dma_store(sram=0, dram=0x3E0, words=4, rows=6)]
    out, inserted = PASSES["FL-DM-001"](cmds, {}, _GEO)
    d = [decode(c) for c in out[1:]]
    assert [(x["arg0"], x["dram"], x["length"], x["arg1"]) for x in d] == [
        (0, 0x3E0, 4, 3), (12, 0xFE0, 2, 1), (14, 0x1000, 2, 1), (16, 0x13E0, 4, 2)]
    assert inserted == 3 and {x["opcode"] for x in d} == {Opcode.DMA_STORE}
    inside = [dma_stride(DmaQueue.STORE, sram=4, dram=1024), dma_store(sram=0, dram=0x300, words=4, rows=4)]
    assert PASSES["FL-DM-001"](inside, {}, _GEO) == (inside, 0), "no row crosses: the stream is left as it is"


def test_dma_passes_leave_a_descriptor_the_chip_refuses_as_written():
    """The chip drops these with an error (rtl/cmdproc.py): split, a piece might run instead."""
    split = PASSES["FL-DM-001"]
    bad = [
        dma_load(Region.A, sram=0, dram=0xFFE, words=4),  # DRAM address not a multiple of the 4-byte bus
        pack_command(Opcode.DMA_LOAD, flags={"dma": {"region": int(Region.A)}}, length=4, arg1=0, arg2=0xFF0),  # 0 rows
        pack_command(Opcode.DMA_LOAD, flags={"dma": {"region": int(Region.CMDQ)}}, length=4, arg1=1, arg2=0xFF0),
        pack_command(Opcode.DMA_STORE, flags={"dma": {"region": int(Region.A)}}, length=4, arg1=1, arg2=0xFF0),
        dma_load(Region.SA, sram=30, dram=0xFFC, words=4),  # past the end of SA (32 words)
        dma_store(sram=0, dram=_BOARD.dram_bytes - 32, words=4),  # past the end of the DRAM
        dma_load(Region.A, sram=0, dram=0xFF0, words=8) | (1 << 11),  # a reserved flag bit
    ]
    for cmd in bad:
        assert split([cmd], {}, _GEO) == ([cmd], 0), decode(cmd)
    stride = dma_stride(DmaQueue.LOAD, sram=4, dram=1026)  # a DRAM stride off the bus: refused
    assert split([stride, dma_load(Region.A, sram=0, dram=0xF00, words=4, rows=3)], {}, _GEO)[1] == 0


def test_dma_passes_need_the_queue_stride_of_a_multi_row_dma():
    with pytest.raises(PassError, match="no DMA_STRIDE for the LOAD queue .* put a DMA_STRIDE"):
        PASSES["FL-DM-001"]([dma_load(Region.A, sram=0, dram=0, words=4, rows=2)], {}, _GEO)
    with pytest.raises(PassError, match="no DMA_STRIDE for the LOAD queue"):
        PASSES["FL-DM-002"]([dma_load(Region.A, sram=0, dram=0, words=4, rows=3)], {}, _GEO)
    two = [dma_load(Region.A, sram=0, dram=0, words=4, rows=2), dma_store(sram=0, dram=0, words=1, rows=3)]
    assert PASSES["FL-DM-002"](two, {}, _GEO) == (two, 0), "not its conditions: no stride needed"
    one = [dma_load(Region.A, sram=0, dram=0xFF0, words=8)]
    assert PASSES["FL-DM-001"](one, {}, _GEO)[1] == 1, "a 1-row DMA needs no stride"
    # the load queue's stride says nothing about the store queue's
    with pytest.raises(PassError, match="STORE queue"):
        PASSES["FL-DM-001"]([dma_stride(DmaQueue.LOAD, sram=1, dram=16),
                             dma_store(sram=0, dram=0, words=1, rows=2)], {}, _GEO)
    with pytest.raises(PassError, match="DMA geometry"):
        PASSES["FL-DM-001"](one, {}, None)
    assert PASSES["FL-DM-001"]([matmul(a=0, b=0, c=0, k=4)], {}, None)[1] == 0, "no DMA: no geometry needed"


def test_page_split_refuses_a_row_that_crosses_inside_a_word():
    """An ACC row at 0xFF8 has the page boundary inside its first 16-byte word: no DMA can cut there."""
    with pytest.raises(PassError, match=r"crosses the page at DRAM 0x1000 inside its 16-byte SRAM word at 0xff8"):
        PASSES["FL-DM-001"]([dma_store(sram=0, dram=0xFF8, words=2)], {}, _GEO)


def test_stride_state_survives_idle_and_the_rest_does_not():
    flt = stream_filter(frozenset({"FL-CP-001", "FL-DM-001"}), _CFG, _BOARD)
    assert [name for name, _ in flt.passes] == ["FL-CP-001", "FL-DM-001"] and flt.chip == _GEO
    assert CHIP_STATE == {"strides"}
    flt([dma_stride(DmaQueue.LOAD, sram=8, dram=2064), matmul(a=0, b=0, c=0, k=4)])
    flt.chip_idle()  # the chip keeps its strides while idle; a MATMUL has drained
    out = flt([dma_load(Region.ACC, sram=0, dram=0x1FC0, words=8, rows=2), pack_command(Opcode.REDUCE, length=1)])
    assert [decode(c)["arg1"] for c in out[:3]] == [1, 1, 1] and opcode_of_all(out[3:]) == [Opcode.REDUCE]
    assert decode(out[2])["dram"] == 0x1FC0 + 2064, "row 1 placed with the stride set before the idle"
    assert flt.insertions == {"FL-CP-001": 0, "FL-DM-001": 2}
    with pytest.raises(PassError, match="STORE queue"):  # refused, so never submitted: its stride is not taken
        flt([dma_stride(DmaQueue.LOAD, sram=1, dram=4), dma_store(sram=0, dram=0, words=1, rows=2)])
    again = flt([dma_load(Region.ACC, sram=0, dram=0x1FC0, words=8, rows=2)])
    assert decode(again[-1])["dram"] == 0x1FC0 + 2064 and flt.insertions["FL-DM-001"] == 4
    fresh = StreamFilter(flt.passes, _GEO)  # a new attach knows no stride
    with pytest.raises(PassError):
        fresh([dma_load(Region.ACC, sram=0, dram=0x1FC0, words=8, rows=2)])
    flt.chip_reset()  # a soft reset puts both queues' strides to 0: the pass knows them again
    after = flt([dma_load(Region.ACC, sram=0, dram=0x1FC0, words=8, rows=2)])
    assert [decode(c)["dram"] for c in after] == [0x1FC0, 0x2000] * 2, "rows 0 and 1 both at the base: stride 0"


def opcode_of_all(cmds):
    return [decode(c)["opcode"] for c in cmds]


def test_odd_rows_pass_gives_the_last_row_a_dma_of_its_own():
    cmds = [dma_stride(DmaQueue.LOAD, sram=3, dram=64),
            dma_load(Region.B, sram=5, dram=0x100, words=2, rows=5, tag=9, wait=2, signal=4, signal2=6)]
    out, inserted = PASSES["FL-DM-002"](cmds, {}, _GEO)
    d = [decode(c) for c in out[1:]]
    assert inserted == 1 and [(x["arg0"], x["dram"], x["length"], x["arg1"]) for x in d] == [
        (5, 0x100, 2, 4), (5 + 4 * 3, 0x100 + 4 * 64, 2, 1)]
    assert [x["sync"]["wait"] for x in d] == [1, 0] and d[0]["sync"]["wait_sem"] == 2
    assert [(x["sync"]["signal"], x["sync"]["signal2"]) for x in d] == [(0, 0), (1, 1)]
    assert (d[1]["sync"]["signal_sem"], d[1]["sync"]["signal2_sem"]) == (4, 6) and {x["tag"] for x in d} == {9}
    assert {x["flags"]["region"] for x in d} == {int(Region.B)}
    for rows in (1, 2, 4):
        same = [cmds[0], dma_load(Region.B, sram=0, dram=0, words=2, rows=rows)]
        assert PASSES["FL-DM-002"](same, {}, _GEO) == (same, 0)
    store = [dma_stride(DmaQueue.STORE, sram=1, dram=16), dma_store(sram=0, dram=0, words=1, rows=3)]
    assert PASSES["FL-DM-002"](store, {}, _GEO) == (store, 0), "the store's row counter is not affected"


def test_odd_rows_pass_and_both_passes_together_on_random_streams():
    """The B0 model with the odd-rows pass, and a chip with both defects behind both passes
    (the order stream_filter runs them), move what the original moves on a chip to spec."""
    rng = np.random.default_rng(SEED + 1)
    dram = rng.integers(0, 256, size=_DRAM_MODEL_BYTES, dtype=np.uint8)
    both = stream_filter(frozenset({"FL-DM-001", "FL-DM-002"}), _CFG, _BOARD)
    odd = 0
    for case in range(120):
        original = _random_dma(rng, store=False) + _random_dma(rng, store=bool(case % 2))
        try:
            _same_effect(original, PASSES["FL-DM-002"](original, {}, _GEO)[0], dram, drop_odd=True)
            _same_effect(original, both(original), dram, wrap=True, drop_odd=True)
        except AssertionError as e:
            raise AssertionError(f"case {case}: {e}\nreproduce: FIRSTLIGHT_SEED={SEED} .venv/bin/python -m pytest "
                                 f"tests/test_errata_registry.py -k odd_rows_pass_and_both") from None
        try:
            _same_effect(original, original, dram, drop_odd=True)
        except AssertionError:
            odd += 1
    assert odd > 20, f"the defect moved wrong bytes in only {odd} of 120 streams: the test lost its teeth"


def test_dma_errata_status():
    assert resolve("B0").status["FL-DM-002"].startswith("Mitigated: ") and "FL-DM-001" not in resolve("B0").active
    assert {"FL-DM-001"} <= resolve("A1").active and resolve("A1").status["FL-DM-002"] == "Not affected"
    assert resolve("B1").status["FL-DM-002"] == "Unknown", "B1 is not assessed: its fix is not assumed"


def test_reports_say_what_cannot_arise_and_what_was_forced_on():
    """Issue 15 item 5: an FP8 erratum on an int8-only chip is "Not applicable", not mitigated;
    a mitigation forced on where the revision is not affected says so in its status."""
    from types import SimpleNamespace

    import workarounds
    from rtl.config import ChipConfig

    def dev(rev, cfg):
        return SimpleNamespace(revision=rev, config=cfg, board=None, set_submit_filter=lambda f: None)

    int8 = ChipConfig(formats=("int8",), vector=False)
    rep = workarounds.attach(dev("A0", int8), warn=False).report(tuple(workarounds.Unit))
    assert "FL-NU-001" not in rep["mitigations"] and "FL-ME-001" in rep["mitigations"]
    assert rep["errata_status"]["FL-NU-001"] == "Not applicable: this chip has no FP8 path (formats int8)"
    assert rep["errata_status"]["FL-VU-001"] == "Not applicable: this chip has no vector unit"
    full = workarounds.attach(dev("A0", ChipConfig()), warn=False).report(tuple(workarounds.Unit))
    assert "FL-NU-001" in full["mitigations"]
    forced = workarounds.attach(dev("B0", ChipConfig()), {"FL-ME-002": "on"}, warn=False).report(tuple(workarounds.Unit))
    assert "FL-ME-002" in forced["mitigations"]
    assert forced["errata_status"]["FL-ME-002"].startswith("Not affected (mitigation forced on: ")


def test_every_tile_cell_names_a_declared_kernel_with_parameters_it_takes():
    """workarounds/lint.py checks a TileCell's shape only (workarounds sits below kernels); here the
    kernel's declaration resolves each one, so a renamed kernel or parameter fails before a matrix run."""
    from kernels.tile.spec import registry
    from workarounds.cells import TileCell

    reg = registry()
    cells = [c for e in ERRATA for field in (e.cell, e.tile_cell) if field is not None
             for c in (field if isinstance(field, tuple) else (field,)) if isinstance(c, TileCell)]
    assert cells
    for c in cells:
        assert c.name in reg, c
        reg[c.name].resolve(dict(c.params))
