"""The registry without a simulator: lint, the generated page, policy, status strings, passes."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from kernels.gemm import plan_gemm
from rtl.config import ChipConfig
from rtl.isa import Opcode, pack_command
from rtl.revisions import Defect
from workarounds import ERRATA, ErratumWarning, parse_policy, resolve
from workarounds.cells import GemmCell, LowpCell, ReduceCell
from workarounds.check import compare
from workarounds.docs import render
from workarounds.lint import lint
from workarounds.passes import PASSES

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
        ({"id": "FL-XX-001"}, "id must look like FL-<ME|RU|SR|CP|NU>-NNN"),
        ({"cell": ReduceCell(rows=2, cols=3, op="avg")}, "op 'avg' is not one of sum, max, min"),
        ({"cell": LowpCell(recipe="fp7", dist="normal", m=1, n=1, k=1)}, "unknown recipe 'fp7'"),
        ({"cell": LowpCell(recipe="int8-tensor", dist="wide", m=1, n=1, k=1)}, "unknown distribution 'wide'"),
        ({"cell": GemmCell(m=0, n=4, k=4)}, "m must be a positive integer"),
        ({"cell": {"kernel": "gemm", "m": 4}}, "is not one of GemmCell"),
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
