"""The Verilator runtime, compiled once per machine and set of flags, and shared by every model.

Every Verilator model links the same runtime objects (``verilated.o``, ``verilated_vpi.o``,
``verilated_dpi.o``, ``verilated_threads.o``, and ``verilated_timing.o`` under ``--timing``):
about 18 s of one core at -O3, the same bytes for every variant. Verilator's makefile compiles
them into each model's build folder, so every first build paid for them again (ccache, where it
is installed, makes that cheap from the second build on; it cannot help a machine's first build
or a machine without it).

:class:`RuntimePrebuild` compiles them once into ``$FIRSTLIGHT_CACHE/runtime/<key>/``, from a
stub design verilated with the model's own flags, on one core and *while the chip is
elaborated* (Amaranth is single-threaded: the second core was idle). Before a model's make,
:meth:`RuntimePrebuild.install` copies them into its build folder, where ``make`` finds them
newer than their sources and does not compile them again.

Nothing is copied on trust: the runtime entry records each object's size and sha256, checked
before use, and a model build gets the objects only if its own makefile would compile them with
the very commands the runtime's makefile did (``make -n -B`` in both folders). Any difference (another compiler,
flag, Verilator version or define) means the model compiles its runtime itself, and the log
says why.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import re
import shutil
import subprocess
import threading
import time
from pathlib import Path

from filelock import FileLock

from .build import _fingerprint, _mismatch, _read_json, _sha, _write_json, cache_root, log_excerpt, run_tracked
from .toolchain import SimInfo

__all__ = ["RuntimePrebuild", "runtime_objects"]

_log = logging.getLogger("firstlight.build")
RUNTIME_FORMAT = "1"
_STUB_TOP = "fl_runtime_stub"
_STUB = f"module {_STUB_TOP}(input wire clk);\nendmodule\n"
ALSO_LINKED = ("verilated_dpi.o",)


@functools.lru_cache(maxsize=None)
def _compiler_id() -> str:
    """What ``make`` will compile with: $CXX (Verilator's default, ``c++``) and its version line."""
    cxx = os.environ.get("CXX", "c++")
    try:
        out = subprocess.run([cxx, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError) as e:
        return f"{cxx}: {e}"
    return f"{cxx}: {out.splitlines()[0] if out else ''}"


def runtime_objects(mk_dir: Path) -> list[str]:
    """The runtime objects a verilated design links (``VM_GLOBAL_FAST`` and ``_SLOW`` in its
    ``Vtop_classes.mk``), as file names."""
    text = (mk_dir / "Vtop_classes.mk").read_text()
    names: list[str] = []
    for block in re.finditer(r"^VM_GLOBAL_(?:FAST|SLOW) \+= \\\n((?:[ \t]+\S+ \\\n)*)", text, re.M):
        names += [ln.strip().rstrip("\\").strip() + ".o" for ln in block.group(1).splitlines() if ln.strip()]
    return names


def _dry_run(mk_dir: Path, objects: list[str], make_args: list[str]) -> dict[str, str]:
    """The command ``make`` would compile each of ``objects`` with in ``mk_dir`` (forced, not run)."""
    proc = subprocess.run(["make", "-n", "-B", "-C", str(mk_dir), "-f", "Vtop.mk", *make_args, *objects],
                          capture_output=True, text=True, timeout=60)
    if proc.returncode != 0:
        raise RuntimeError(f"make -n in {mk_dir} failed ({proc.returncode}): {proc.stderr.strip()[-400:]}")
    out: dict[str, str] = {}
    for ln in proc.stdout.splitlines():
        m = re.search(r"\s-o\s+(\S+\.o)(\s|$)", ln)
        if m:
            out[m.group(1)] = " ".join(ln.split())
    return out


class RuntimePrebuild:
    """The runtime for one set of Verilator flags: :meth:`start` it before elaborating, then
    :meth:`install` it into the model's build folder after verilation, before its make."""

    def __init__(self, info: SimInfo, verilator_args: list[str], make_args: list[str], objcache: list[str]):
        self.verilator_args = list(verilator_args)
        self.make_args = list(make_args)  # what decides the objects: in the key and the dry runs
        self.objcache = list(objcache)  # ccache or not: the same objects, so in neither
        key = _sha(info.version, _compiler_id(), json.dumps(self.verilator_args), json.dumps(self.make_args),
                   json.dumps(info.env, sort_keys=True), RUNTIME_FORMAT)
        self.dir = cache_root() / "runtime" / key
        self._marker = self.dir / ".complete"
        self._thread: threading.Thread | None = None
        self._error: str | None = None

    def _ready(self) -> bool:
        info = _read_json(self._marker)
        return info is not None and all(
            _mismatch(self.dir / name, rec) is None for name, rec in (info.get("objects") or {}).items())

    def start(self) -> RuntimePrebuild:
        """Compile the runtime in a background thread unless it is cached; returns at once."""
        if self._thread is None and not self._ready():
            self._thread = threading.Thread(target=self._build_guarded, name="firstlight-runtime", daemon=True)
            self._thread.start()
        return self

    def _build_guarded(self) -> None:
        try:
            self._build()
        except Exception as e:  # noqa: BLE001 - reported by install(), and the model compiles its own
            self._error = f"{type(e).__name__}: {e}"

    def _build(self) -> None:
        self.dir.parent.mkdir(parents=True, exist_ok=True)
        with FileLock(str(self.dir) + ".lock"):
            if self._ready():
                return
            t0 = time.monotonic()
            _log.info("compiling the Verilator runtime once for these flags, beside the elaboration, into %s",
                      self.dir)
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir.mkdir(parents=True)
            (self.dir / f"{_STUB_TOP}.v").write_text(_STUB)
            log = self.dir / "build.log"
            with open(log, "w") as f:
                proc = run_tracked(["verilator", "-cc", "--vpi", "--prefix", "Vtop", "--top-module", _STUB_TOP,
                                    "-Mdir", str(self.dir), *self.verilator_args, f"{_STUB_TOP}.v"],
                                   cwd=self.dir, stdout=f)
                if proc.returncode != 0:
                    raise RuntimeError(f"verilator exited with {proc.returncode} on the stub; log {log}:\n"
                                       + log_excerpt(log))
                # the stub has no DPI; a model with DPI exports links verilated_dpi.o as well
                objects = sorted(set(runtime_objects(self.dir)) | set(ALSO_LINKED))
                # one core: the other one elaborates the chip meanwhile
                proc = run_tracked(["make", "-j", "1", "-C", str(self.dir), "-f", "Vtop.mk", *self.make_args,
                                    *self.objcache, *objects], cwd=self.dir, stdout=f)
            if proc.returncode != 0 or not all((self.dir / o).exists() for o in objects):
                raise RuntimeError(f"make exited with {proc.returncode}; log {log}:\n" + log_excerpt(log))
            _write_json(self._marker, {
                "objects": {o: {"file": o, **_fingerprint(self.dir / o)} for o in objects},
                "build_s": time.monotonic() - t0,
            })
            _log.info("compiled the Verilator runtime in %.1f s", time.monotonic() - t0)

    def install(self, build_dir: Path) -> list[str]:
        """Wait for the runtime, then copy into ``build_dir`` (verilated, not yet made) the objects
        its makefile would compile with the same commands; returns their names. When none can
        be used, says why on the log and returns []: the model's make compiles them."""
        if self._thread is not None:
            t0 = time.monotonic()
            self._thread.join()
            if time.monotonic() - t0 > 1:
                _log.info("waited %.1f s for the Verilator runtime", time.monotonic() - t0)
        why = self._error or (None if self._ready() else "its entry is incomplete or its files do not match")
        if why is not None:
            _log.info("the prebuilt Verilator runtime in %s is not used (%s): the model compiles its own",
                      self.dir, why)
            return []
        try:
            held = set((_read_json(self._marker) or {}).get("objects") or {})
            wanted = [o for o in runtime_objects(build_dir) if o in held]
            theirs, ours = _dry_run(build_dir, wanted, self.make_args), _dry_run(self.dir, wanted, self.make_args)
            same = [o for o in wanted if o in theirs and theirs[o] == ours.get(o)]
            if len(same) < len(wanted):
                _log.info("the prebuilt Verilator runtime in %s: the model's makefile compiles %s with other "
                          "commands; it compiles those itself", self.dir, sorted(set(wanted) - set(same)))
            for name in same:
                # a plain copy: the object's time is now, newer than its source and the makefile;
                # renamed into place, so a copy cut short is never an object make would trust
                tmp = build_dir / f".{name}.copy"
                shutil.copyfile(self.dir / name, tmp)
                tmp.replace(build_dir / name)
            return same
        except (OSError, RuntimeError, subprocess.SubprocessError) as e:
            _log.info("the prebuilt Verilator runtime in %s is not used (%s): the model compiles its own", self.dir, e)
            return []
