"""Bring-up reports: report.json, junit.xml (one testcase per stage) and report.md.

Each carries what a lead needs to file it: when it ran, on which host, from which commit, with
which tools, and the exact command line (:func:`provenance`).
"""

from __future__ import annotations

import json
import platform
import socket
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

from junitparser import JUnitXml

__all__ = ["with_provenance", "write_reports", "markdown", "junit", "provenance", "summary_line", "long_details", "stage_text"]

REPO_ROOT = Path(__file__).resolve().parents[2]
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


# ---- where, when, what with ---------------------------------------------------------------------

def _git(*args: str) -> str | None:
    try:
        r = subprocess.run(["git", "-C", str(REPO_ROOT), *args], capture_output=True, text=True, timeout=10,
                           check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return r.stdout.strip() if r.returncode == 0 else None


def git_commit() -> tuple[str, bool | None]:
    """(commit, dirty?) of the checkout firstlight runs from; ("unknown", None) outside one."""
    top = _git("rev-parse", "--show-toplevel")
    if not top or Path(top).resolve() != REPO_ROOT:
        return "unknown", None
    commit = _git("rev-parse", "HEAD") or "unknown"
    status = _git("status", "--porcelain", "--untracked-files=no")
    return commit, (bool(status) if status is not None else None)


def tool_versions(sim: str | None) -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    def dist(name: str) -> str:
        try:
            return version(name)
        except PackageNotFoundError:
            return "unknown"

    out = {"python": platform.python_version(), "firstlight": dist("firstlight"), "amaranth": dist("amaranth"),
           "cocotb": dist("cocotb")}
    if sim:
        from cosim.toolchain import SimulatorMissing, find_simulator

        try:
            out[sim] = find_simulator(sim).version
        except (SimulatorMissing, ValueError):
            out[sim] = "not installed"
    return out


def with_provenance(doc, sim: str | None = None, command: str | None = None) -> dict:
    """A JSON document the tool writes, with the provenance block first (what bringup's report
    carries: time, host, commit, tool versions, command): a dict gains ``provenance``; a list of
    rows becomes ``{"provenance": ..., "rows": [...]}``."""
    prov = provenance(sim, command)
    if isinstance(doc, dict):
        return {"provenance": prov, **{k: v for k, v in doc.items() if k != "provenance"}}
    return {"provenance": prov, "rows": list(doc)}


def provenance(sim: str | None, command: str | None = None) -> dict:
    """Timestamp (UTC, ISO 8601), host, git commit, tool versions and the exact command line."""
    import shlex

    commit, dirty = git_commit()
    return {
        "timestamp": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "host": socket.gethostname(),
        "platform": platform.platform(),
        "git_commit": commit,
        "git_dirty": dirty,
        "tools": tool_versions(sim),
        "command": command if command is not None else shlex.join([Path(sys.argv[0]).name, *sys.argv[1:]]),
        "cwd": str(Path.cwd()),
    }


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
