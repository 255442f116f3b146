"""The Verilator runtime compiled once and shared by models (RuntimePrebuild in cosim/build.py): a model built
after it links its objects instead of compiling them, runs, and gets none of them when its own
makefile would compile them with other commands; a damaged entry is compiled again. And how the
model's own C++ is made: beside the runtime on a first build, its start-up code as one file."""

import logging
import re

import pytest

from conftest import SMALL_CHIP, require_sim

RUNTIME_SOURCES = re.compile(r"-o (verilated\w*\.o) \S*/include/verilated\w*\.cpp")


def _compiled_runtime(build_dir) -> list[str]:
    """The runtime objects a model's make compiled (its build log shows every compile)."""
    return RUNTIME_SOURCES.findall((build_dir / "build.log").read_text())


@pytest.mark.sim
def test_models_link_the_runtime_built_once_and_only_when_compiled_alike(tmp_path, monkeypatch, caplog):
    require_sim("verilator")
    from cosim.build import Variant, build_simulator
    from cosim.jobs import run_job
    from cosim.build import runtime_objects
    from firstlight.jobs.kernels import gemm_job

    monkeypatch.setenv("FIRSTLIGHT_CACHE", str(tmp_path / "cache"))
    caplog.set_level(logging.INFO, logger="firstlight.build")

    # an empty cache: the runtime is compiled beside the elaboration and the model links it
    first = build_simulator(Variant(config=SMALL_CHIP, revision="B1"))
    entries = list((tmp_path / "cache" / "runtime").glob("*/.complete"))
    assert len(entries) == 1, entries
    runtime = entries[0].parent
    assert _compiled_runtime(first.build_dir) == [], "the model compiled the runtime it was given"
    held = sorted(p.name for p in runtime.glob("verilated*.o"))
    assert {"verilated.o", "verilated_vpi.o"} <= set(held), held
    res = run_job(gemm_job, {"m": 9, "n": 6, "k": 21, "seed": 2}, variant=first.variant)
    assert res.value["passed"], res.value

    # the entry's makefile now compiles with another define: the next model compiles its own
    classes = runtime / "Vtop_classes.mk"
    classes.write_text(classes.read_text().replace("VM_TRACE_FST = 0", "VM_TRACE_FST = 1"))
    caplog.clear()
    second = build_simulator(Variant(config=SMALL_CHIP, revision="B0"))
    assert sorted(_compiled_runtime(second.build_dir)) == sorted(runtime_objects(second.build_dir))
    assert "with other commands" in caplog.text, caplog.text


@pytest.mark.sim
def test_the_setup_compiles_the_runtime_and_a_damaged_entry_is_compiled_again(tmp_path, monkeypatch):
    require_sim("verilator")
    import os
    import shutil
    import subprocess
    import sys

    from cosim import build

    monkeypatch.setenv("FIRSTLIGHT_CACHE", str(tmp_path / "cache"))

    def runtime():  # the one a "cpp"-clock build without waves uses
        return build.verilator_runtime("cpp", waves=False)

    assert runtime().dir == build.verilator_runtime().dir, "the default build's runtime is not the cpp clock's"
    # what `make venv` runs: it compiles the default build's runtime (then finds it compiled) and
    # runs Amaranth's Yosys once, which compiles it into wasmtime's cache (here an empty one)
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "xdg")}
    if shutil.which("ccache"):  # ccache keeps its own folder (under XDG_CACHE_HOME by default)
        env["CCACHE_DIR"] = subprocess.run(["ccache", "--get-config", "cache_dir"], capture_output=True, text=True,
                                           check=True).stdout.strip()
    for said in ("compiled the Verilator runtime in", "is already compiled in"):
        setup = subprocess.run([sys.executable, "-m", "cosim.toolchain_setup"], env=env,
                               capture_output=True, text=True, timeout=900)
        assert setup.returncode == 0, setup.stdout + setup.stderr
        assert said in setup.stdout and str(runtime().dir) in setup.stdout, setup.stdout
        assert "Amaranth's Yosys ran once" in setup.stdout, setup.stdout
    assert runtime().ready()
    assert any(p.is_file() for p in (tmp_path / "xdg" / "wasmtime").rglob("*")), "Yosys left nothing in the cache"
    obj = runtime().dir / "verilated.o"
    size = obj.stat().st_size
    with open(obj, "r+b") as f:
        f.truncate(size // 2)
    again = runtime()
    assert again.ready() is False, "a truncated object was trusted"
    assert again.start().wait() is None and obj.stat().st_size == size
    assert runtime().ready(), "a good entry is used as it is"


@pytest.mark.sim
def test_a_first_build_compiles_the_model_while_the_runtime_still_compiles(tmp_path, monkeypatch):
    """On a machine's first build the runtime takes longer than the elaboration and verilation it
    runs beside: the model's own objects are compiled meanwhile, then the runtime is linked in.
    Here the runtime is held back until the model's own make starts, so that path is taken."""
    import threading

    require_sim("verilator")
    from cosim import build
    from cosim.jobs import run_job
    from firstlight.jobs.kernels import gemm_job

    monkeypatch.setenv("FIRSTLIGHT_CACHE", str(tmp_path / "cache"))
    gate, asked, never_started = threading.Event(), [], []
    runtime_build, model_targets = build.RuntimePrebuild._build, build.model_targets

    def held_runtime(self):
        # an assert here would die with the thread; the test body checks what it recorded
        if not gate.wait(600):
            never_started.append(True)
        runtime_build(self)

    def targets(mk_dir):
        asked.append(model_targets(mk_dir))
        gate.set()  # the runtime compiles now, beside the model's own make
        return asked[-1]

    monkeypatch.setattr(build.RuntimePrebuild, "_build", held_runtime)
    monkeypatch.setattr(build, "model_targets", targets)
    b = build.build_simulator(build.Variant(config=SMALL_CHIP, revision="B1"))
    assert not never_started, "the model's own make never started while the runtime was held back"
    assert asked == [["Vtop__ALL.a", "fl_tb_main.o"]], asked
    log = (b.build_dir / "build.log").read_text().splitlines()
    assert _compiled_runtime(b.build_dir) == [], "the model compiled the runtime it was given"
    # the model's objects were compiled once, by the make beside the runtime (the first of the
    # two makes in the log), and the runner's make only linked them
    makes = [i for i, ln in enumerate(log) if "Entering directory" in ln]
    assert len(makes) >= 2, ("expected the make beside the runtime, then the runner's", log[-60:])
    for source in ("Vtop___024root__0.cpp", "Vtop__fl_slow.cpp", "fl_tb_main.cpp"):
        compiles = [i for i, ln in enumerate(log) if " -c " in ln and ln.rstrip().endswith(source)]
        assert len(compiles) == 1, (source, log[-60:])
        assert makes[0] < compiles[0] < makes[1], (source, compiles, makes)
    res = run_job(gemm_job, {"m": 9, "n": 6, "k": 21, "seed": 4}, variant=b.variant)
    assert res.value["passed"], res.value


@pytest.mark.sim
def test_the_models_slow_files_compile_as_one_unit_without_a_header_of_their_own():
    """cosim/hdl/fl_model.mk: every file Verilator lists as slow is in Vtop__fl_slow.cpp, which
    is compiled once; no slow file is compiled alone and no precompiled header is built for them.
    The model this build made runs (every simulation test uses it too)."""
    require_sim("verilator")
    from cosim.build import Variant, build_simulator
    from cosim.jobs import run_job
    from firstlight.jobs.kernels import gemm_job

    b = build_simulator(Variant(config=SMALL_CHIP, revision="B1"))
    classes = (b.build_dir / "Vtop_classes.mk").read_text()
    slow = re.findall(r"^[ \t]+(\S+__Slow) \\$", classes, re.M)
    assert len(slow) >= 2, classes
    unity = (b.build_dir / "Vtop__fl_slow.cpp").read_text()
    assert sorted(re.findall(r'^#include "(\S+)\.cpp"$', unity, re.M)) == sorted(slow), unity
    compiled = [ln.split()[-1] for ln in (b.build_dir / "build.log").read_text().splitlines()
                if " -c " in ln or "-x c++-header" in ln]
    assert compiled.count("Vtop__fl_slow.cpp") == 1, compiled
    assert not [c for c in compiled if c.endswith("__Slow.cpp") or c.endswith(".slow.gch")], compiled
    res = run_job(gemm_job, {"m": 5, "n": 7, "k": 9, "seed": 3}, variant=b.variant)
    assert res.value["passed"], res.value


def test_a_verilator_makefile_without_the_slow_lists_is_a_clear_build_error(tmp_path):
    from cosim.build import BuildFailed, write_slow_unity

    (tmp_path / "Vtop_classes.mk").write_text("VM_CLASSES_FAST += \\\n  Vtop \\\n")
    with pytest.raises(BuildFailed, match="no VM_CLASSES_SLOW list"):
        write_slow_unity(tmp_path)
