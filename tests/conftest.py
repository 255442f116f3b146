"""Shared pytest fixtures: which simulators exist, and one simulator run per cocotb module."""

from __future__ import annotations

import importlib
import os
import sys
import textwrap
from pathlib import Path

import pytest

from cosim.toolchain import SIMULATORS, SimulatorMissing, find_simulator
from rtl.config import ChipConfig

# Fixed by default so CI is reproducible; override to explore: FIRSTLIGHT_SEED=7 pytest ...
SEED = int(os.environ.get("FIRSTLIGHT_SEED", "20261130"))

# The small chip: int8 only, 64-word SRAMs, ring and trace buffer (the CLI's `--formats int8
# --sram-depth 64 --no-vector`, so the CLI tests share its build). It builds in a third of the time
# of the default FP chip, so a test that needs some chip, not a particular one, uses it.
SMALL_CHIP = ChipConfig(formats=("int8",), vector=False).with_sram_depth(64)
# The same with the vector unit, for the tests of the vector unit and its kernels.
VECTOR_CHIP = ChipConfig(formats=("int8",)).with_sram_depth(64)


def _race_check(compiled, config, dram_bytes, bus_bytes, constraints) -> None:
    """Every stream a test compiles goes through the happens-before checker (interp/races.py, issue
    32). Streams with errata passes are left out: the checker models revision B1's chip, and an
    erratum's workaround (FL-ME-002's stale A word) reads what that model does not know about."""
    from dataclasses import astuple
    from types import SimpleNamespace

    from interp.races import check_compiled, format_findings
    from kernels.tile.errata import families

    if any(any(astuple(v)) for v in families(constraints).values()) or len(compiled.commands) > 20_000:
        return
    board = SimpleNamespace(dram_bytes=dram_bytes, bus_bytes=bus_bytes, beats=1)  # what the checks read
    found = check_compiled(compiled, config, board)
    if found:
        raise AssertionError(f"the race checker flags the stream of {compiled.name}:\n{format_findings(found)}")


def _install_race_check() -> None:
    from kernels.tile import runtime

    if _race_check not in runtime.STREAM_CHECKS:
        runtime.STREAM_CHECKS.append(_race_check)


_install_race_check()


def source_module(tmp_path: Path, monkeypatch, name: str, source: str, *, register: bool = False):
    """``source`` (dedented) written as the module ``name`` in ``tmp_path`` and imported for this
    test. ``register``: also named in FIRSTLIGHT_KERNEL_MODULES, so the tile-kernel registry (and
    the simulators the test starts, which inherit the environment) declare its kernels."""
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(source))
    monkeypatch.syspath_prepend(str(tmp_path))
    if register:
        monkeypatch.setenv("FIRSTLIGHT_KERNEL_MODULES", name)
    sys.modules.pop(name, None)
    return importlib.import_module(name)


def require_sim(name: str) -> None:
    try:
        find_simulator(name)
    except SimulatorMissing as e:
        pytest.skip(f"{name} not installed: {e}")


@pytest.fixture(autouse=True)
def _system_temp_under_pytest(tmp_path_factory, monkeypatch):
    """The system temp directory, for the code under test, is a folder under pytest's own: the
    runs that fail on purpose keep their job folders (issue 15), and they must not pile up in
    /tmp. A test that looks at that folder sets ``tempfile.tempdir`` itself."""
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path_factory.mktemp("systemp")))


@pytest.fixture(params=SIMULATORS)
def sim(request) -> str:
    require_sim(request.param)
    return request.param


_RUNS: dict = {}


@pytest.fixture(params=["interpreter", pytest.param("verilator", marks=pytest.mark.sim)])
def on_chip(request):
    """A test run on both chips: ``on_chip(job, variant, **kwargs)`` runs the job function on the
    interpreter (interp/, in this process) or in a Verilator job on the RTL, and returns its value;
    ``on_chip.kind`` says which. A test that passes on the interpreter and fails on the RTL (or the
    other way round) is a difference between the model and the chip, and names its parameter."""
    kind = request.param

    def run(job, variant, **kwargs):
        if kind == "interpreter":
            from interp.jobs import run_job

            return run_job(job, kwargs, config=variant.config, board=variant.resolved_board,
                           revision=variant.revision).value
        from cosim.jobs import run_job

        require_sim(kind)
        return run_job(job, kwargs, variant=variant, sim=kind).value

    run.kind = kind
    return run


def cocotb_results(module: str, sim: str, tmp_root: Path, **kwargs) -> dict[str, dict]:
    """Run every test of a cocotb module once per (module, sim, variant) in this worker."""
    from cosim.jobs import run_cocotb_module

    key = (module, sim, repr(sorted(kwargs.items())))
    if key not in _RUNS:
        work = tmp_root / f"{module}-{sim}-{abs(hash(key)) % 10**8}"
        env = {"FIRSTLIGHT_SEED": str(SEED)}
        _RUNS[key] = run_cocotb_module(module, sim=sim, work_dir=work, extra_env=env, **kwargs)
    return _RUNS[key]


def check_cocotb(results: dict[str, dict], name: str, sim: str) -> None:
    if name not in results:
        pytest.fail(f"cocotb test {name} did not run on {sim}; log: {results['__log__']['message']}")
    r = results[name]
    if not r["passed"]:
        pytest.fail(
            f"{name} failed on {sim} (seed {SEED}):\n{r['message']}\n"
            f"log: {results['__log__']['message']}\n"
            f"reproduce: FIRSTLIGHT_SEED={SEED} .venv/bin/python -m pytest tests -k '{name} and {sim}'"
        )


@pytest.fixture
def icarus_missing(monkeypatch):
    """Make simulator discovery report Icarus as not installed (the real discovery code runs)."""
    from cosim import toolchain

    def missing():
        raise toolchain.SimulatorMissing("Icarus Verilog is not installed: install it with apt-get install -y iverilog")

    toolchain.find_simulator.cache_clear()
    monkeypatch.setattr(toolchain, "_icarus", missing)
    yield
    toolchain.find_simulator.cache_clear()
