"""Where, when and with what a result was made: the provenance block every JSON, JUnit and PNG
the tool writes carries (time, host, commit, tool versions, the exact command line)."""

from __future__ import annotations

import platform
import socket
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

__all__ = ["git_commit", "tool_versions", "package_versions", "with_provenance", "provenance", "png_metadata"]

REPO_ROOT = Path(__file__).resolve().parents[1]


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


def package_versions(names, missing: str | None = "unknown") -> dict[str, str | None]:
    """Each installed distribution's version by name (``missing`` for one not installed)."""
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for name in names:
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = missing
    return out


def tool_versions(sim: str | None) -> dict[str, str]:
    out = {"python": platform.python_version(), **package_versions(("firstlight", "amaranth", "cocotb"))}
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


def png_metadata(sim: str | None = None, command: str | None = None) -> dict[str, str]:
    """The provenance as PNG text chunks (matplotlib's ``savefig(metadata=...)``): ``Software``,
    ``Creation Time``, ``Source`` (the command), ``Comment`` (commit, host, tools) -- what an
    image viewer's properties or ``exiftool`` shows."""
    p = provenance(sim, command)
    commit = p["git_commit"] + (" (with local changes)" if p["git_dirty"] else "")
    tools = ", ".join(f"{k} {v}" for k, v in p["tools"].items())
    return {"Software": f"firstlight {p['tools'].get('firstlight', 'unknown')}", "Creation Time": p["timestamp"],
            "Source": p["command"], "Comment": f"commit {commit}; host {p['host']} ({p['platform']}); {tools}"}
