"""Bring-up reports: report.json, junit.xml (one testcase per stage) and report.md.

Each carries what a lead needs to file it: when it ran, on which host, from which commit, with
which tools, and the exact command line (firstlight/provenance.py).
"""

from __future__ import annotations

import json
from pathlib import Path

from junitparser import JUnitXml

__all__ = ["write_reports", "markdown", "junit", "summary_line", "long_details", "stage_text"]

SUMMARY_CHARS = 300


def _key_figure(stage: dict) -> str:
    f = stage.get("figures") or {}
    for k in ("model_ratio", "utilization", "cells", "registers_checked", "patterns", "mitigations", "detected", "cache_hit"):
        if k in f:
            v = f[k]
            if k == "model_ratio":
                return f"{v:.2f}x the schedule model (fails past {f['model_tolerance']:.2f}x)"
            if k == "utilization":
                return f"{100 * v:.1f}% of roofline"
            if isinstance(v, list):
                details = stage.get("details") or ""
                if v and all(str(x) in details for x in v):  # the details name them: said once per row
                    return f"{k}: {len(v)} (named in the details)"
                return f"{k}: {', '.join(map(str, v)) or 'none'}"
            return f"{k}: {v}"
    return ""


# ---- details: one line in a table, the whole text below it --------------------------------------

def long_details(stage: dict) -> str:
    """The whole diagnosis of a stage: its details and, if there is one, the traceback."""
    text = stage.get("details") or ""
    tb = (stage.get("figures") or {}).get("traceback")
    return f"{text}\n\n{tb.rstrip()}" if tb else text


def summary_line(stage: dict) -> str:
    """One line for a table cell; '(details below)' when there is more to read."""
    full = long_details(stage)
    first = full.split("\n", 1)[0].strip()
    more = "\n" in full.strip() or len(first) > SUMMARY_CHARS
    if len(first) > SUMMARY_CHARS:
        first = first[: SUMMARY_CHARS - 1].rstrip() + "…"
    return f"{first} (details below)" if more else first


def has_more(stage: dict) -> bool:
    return summary_line(stage).endswith("(details below)")


def stage_text(report: dict) -> str:
    """The result in words: PASSED, FAILED, ERROR (harness), INTERRUPTED (SIGINT)."""
    return {"passed": "PASSED", "failed": "FAILED", "error": "ERROR (harness error, not a verdict on the chip)",
            "interrupted": f"INTERRUPTED ({report.get('interrupted')})"}[report["outcome"]]


# ---- the three files ---------------------------------------------------------------------------

_PROPERTIES = ("revision", "sim", "seed", "outcome", "exit_code", "git_commit", "git_dirty", "command", "cwd",
               "platform", "sim_log")


def junit(report: dict) -> JUnitXml:
    from firstlight.junit import Case, junit_xml

    props = {k: report[k] for k in _PROPERTIES if report.get(k) is not None}
    props["injected"] = ", ".join(report["injected"]) or "none"
    props.update({f"version.{tool}": v for tool, v in report["tools"].items()})
    cases = []
    for st in report["stages"]:
        status, kind, details = st["status"], "", ""
        if status in ("failed", "error", "interrupted"):
            kind = {"failed": "chip failure", "error": "harness error", "interrupted": "interrupted"}[status]
            status = "error" if status == "interrupted" else status
            details = long_details(st)
            message = summary_line(st)
        elif status in ("blocked", "skipped", "pending", "running"):  # the last two: a report of a stopped run
            status, message = "skipped", st["details"] or (status if status in ("blocked", "skipped") else
                                                         f"not run ({status})")
        else:
            message = ""
        cases.append(Case(st["name"], "firstlight.bringup", status, message, details, st["duration_s"],
                          output=json.dumps({k: v for k, v in (st.get("figures") or {}).items() if k != "traceback"},
                                            default=str), kind=kind))
    return junit_xml(f"firstlight bringup {report['revision']} ({report['sim']})", cases, props,
                     timestamp=report["timestamp"], host=report["host"])


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _fence(text: str) -> str:
    run, longest = 0, 0
    for ch in text:
        run = run + 1 if ch == "`" else 0
        longest = max(longest, run)
    return "`" * max(3, longest + 1)


def markdown(report: dict) -> str:
    tools = ", ".join(f"{k} {v}" for k, v in report["tools"].items())
    commit = report["git_commit"] + (" (with local changes)" if report.get("git_dirty") else "")
    lines = [
        f"# First-light report: revision {report['revision']} on {report['sim']}",
        "",
        f"- result: **{stage_text(report)}** (exit code {report['exit_code']})",
        f"- seed: {report['seed']}",
        f"- injected faults: {', '.join(f'`{f}`' for f in report['injected']) or 'none'}",
        f"- when: {report['timestamp']} on host `{report['host']}` ({report['platform']})",
        f"- git commit: `{commit}`",
        f"- tools: {tools}",
        f"- command: `{report['command']}` (in `{report['cwd']}`)",
    ]
    if report.get("sim_log"):
        lines.append(f"- simulator log: `{report['sim_log']}`")
    lines += [
        "",
        "| stage | result | time (s) | key figure | details |",
        "|---|---|---|---|---|",
    ]
    for st in report["stages"]:
        lines.append(f"| {st['name']} | {st['status']} | {st['duration_s']:.2f} | {_cell(_key_figure(st))} | "
                     f"{_cell(summary_line(st))} |")
    more = [st for st in report["stages"] if has_more(st)]
    if more:
        lines += ["", "## Details"]
        for st in more:
            text = long_details(st).rstrip()
            fence = _fence(text)
            lines += ["", f"### {st['name']} ({st['status']})", "", f"{fence}text", text, fence]
    return "\n".join(lines) + "\n"


def write_reports(report: dict, out_dir: Path) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [out_dir / "report.json", out_dir / "junit.xml", out_dir / "report.md"]
    paths[0].write_text(json.dumps(report, indent=2, default=str))
    junit(report).write(str(paths[1]))
    paths[2].write_text(markdown(report))
    return paths
