"""Bring-up reports: report.json, junit.xml (one testcase per stage) and report.md."""

from __future__ import annotations

import json
from pathlib import Path

from junitparser import Error, Failure, JUnitXml, Skipped, TestCase, TestSuite

__all__ = ["write_reports", "markdown"]


def _key_figure(stage: dict) -> str:
    f = stage.get("figures") or {}
    for k in ("utilization", "cells", "registers_checked", "patterns", "mitigations", "detected", "cache_hit"):
        if k in f:
            v = f[k]
            if k == "utilization":
                return f"{100 * v:.1f}% of roofline"
            if isinstance(v, list):
                return f"{k}: {', '.join(v) or 'none'}"
            return f"{k}: {v}"
    return ""


def junit(report: dict) -> JUnitXml:
    suite = TestSuite(f"firstlight bringup {report['revision']} ({report['sim']})")
    for st in report["stages"]:
        case = TestCase(st["name"], classname="firstlight.bringup", time=st["duration_s"])
        if st["status"] == "failed":
            kind = Error if st["details"].startswith(("Device", "Bus", "Job", "Runtime")) else Failure
            case.result = [kind(st["details"][:4000])]
        elif st["status"] in ("blocked", "skipped"):
            case.result = [Skipped(st["details"] or st["status"])]
        case.system_out = json.dumps(st.get("figures") or {}, default=str)
        suite.add_testcase(case)
    xml = JUnitXml()
    xml.add_testsuite(suite)
    return xml


def markdown(report: dict) -> str:
    lines = [
        f"# First-light report: revision {report['revision']} on {report['sim']}",
        "",
        f"- result: **{'PASSED' if report['passed'] else 'FAILED'}**",
        f"- seed: {report['seed']}",
        f"- injected faults: {', '.join(report['injected']) or 'none'}",
        "",
        "| stage | result | time (s) | key figure | details |",
        "|---|---|---|---|---|",
    ]
    for st in report["stages"]:
        details = st["details"].replace("|", "\\|").replace("\n", " ")
        lines.append(f"| {st['name']} | {st['status']} | {st['duration_s']:.2f} | {_key_figure(st)} | {details} |")
    return "\n".join(lines) + "\n"


def write_reports(report: dict, out_dir: Path) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [out_dir / "report.json", out_dir / "junit.xml", out_dir / "report.md"]
    paths[0].write_text(json.dumps(report, indent=2, default=str))
    junit(report).write(str(paths[1]))
    paths[2].write_text(markdown(report))
    return paths
