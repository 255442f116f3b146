"""Host side of a simulator run: build (cached), launch the simulator, collect the records.

A *job* is an async function ``fn(dev, emit, **kwargs)`` defined at the top level of a module;
the host passes the function itself and :func:`job_target` derives its import path, so a rename
breaks at the call site, not inside the simulator. The job runs inside the simulator against the
opened :class:`cosim.device.Device`. Its records come back as a list of dicts in the order
emitted, including any written before a crash; ``on_record`` sees each one as it arrives.

A job that raises is a :class:`JobFailed` (the job's verdict). A simulator that dies, or ends
without a result, is a :class:`SimulatorDied` (a :class:`~cosim.build.HarnessError` as well):
the message names the log, its last lines and the signal that ended the process. If the caller
is interrupted (Ctrl-C, or an exception its signal handler raises) while a job runs, the
simulator is stopped, the records it wrote are delivered, and the exception goes on.
"""

from __future__ import annotations

import importlib
import json
import os
import shutil
import tempfile
import threading
import time
import xml.etree.ElementTree as ET
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from .build import (
    TB_TOPLEVEL,
    Build,
    CommandFailed,
    HarnessError,
    Variant,
    _runner,
    build_simulator,
    describe_returncode,
    log_excerpt,
    stop_children,
)
from .toolchain import find_simulator

__all__ = ["JobResult", "JobFailed", "HarnessFailed", "SimulatorDied", "run_job", "job_target", "run_cocotb_module"]


class JobFailed(RuntimeError):
    """The job did not finish: it raised (a verdict of the job), or see :class:`SimulatorDied`."""

    def __init__(self, message: str, records: list[dict]):
        super().__init__(message)
        self.records = records


class SimulatorDied(JobFailed, HarnessError):
    """The simulator process ended before the job's result: a harness error, not a chip failure."""

    def __init__(self, message: str, records: list[dict], log: Path, returncode: int | None):
        RuntimeError.__init__(self, message)
        self.records, self.log, self.returncode = records, log, returncode


class HarnessFailed(JobFailed, HarnessError):
    """The job raised a harness error inside the simulator (e.g. a backdoor VPI call failed, see
    cosim/vpi_arrays.py): not a verdict on the chip."""


@dataclass
class JobResult:
    records: list[dict]
    build: Build
    run_s: float  # simulator process wall time, start-up included
    log: Path | None  # None: the job ran in a temporary folder, removed after it succeeded
    waves: Path | None = None
    value: object = None
    device: dict = field(default_factory=dict)


@contextmanager
def _outside_pytest():
    """cocotb's runner sys.exit()s on failures when it sees PYTEST_CURRENT_TEST; we report ourselves."""
    saved = os.environ.pop("PYTEST_CURRENT_TEST", None)
    try:
        yield
    finally:
        if saved is not None:
            os.environ["PYTEST_CURRENT_TEST"] = saved


def _launch(build: Build, test_module: str, work_dir: Path, extra_env: dict[str, str], waves: bool,
            seed: int | None = None) -> tuple[Path, Path, float, Exception | None]:
    info = find_simulator(build.sim)
    info.apply_env()
    runner = _runner(info)
    log = work_dir / "sim.log"
    results = work_dir / "results.xml"
    # GPI_LOG_LEVEL set at all makes cocotb filter the GPI's messages in C: unset, every debug
    # message of every handle lookup is handed to Python's logging to be dropped there (five
    # per DRAM row a 256^3 GEMM opens, 66,607 calls).
    # cocotb 2.1 installs pytest's assertion rewriter for every module imported after it
    # ("*.py"): numpy, rich, all of firstlight were parsed and rewritten at every launch, and
    # where bytecode is not written (PYTHONDONTWRITEBYTECODE) nothing caches it. py-spy: 1.7 s
    # of a 3.6 s GEMM run. Only the test module's own asserts are worth rewriting.
    # PYTHONUNBUFFERED: the simulator's Python writes its log line by line, so a simulator stopped
    # by a signal or a crash leaves what it said (a Verilator sim.log was once empty after one)
    env = {"PYTHONUNBUFFERED": "1",
           "COCOTB_LOG_LEVEL": os.environ.get("COCOTB_LOG_LEVEL", "WARNING"),
           "GPI_LOG_LEVEL": os.environ.get("GPI_LOG_LEVEL", "WARNING"),
           "COCOTB_REWRITE_ASSERTION_FILES": os.environ.get("COCOTB_REWRITE_ASSERTION_FILES",
                                                            test_module.rpartition(".")[2] + ".py"),
           **extra_env}
    t0 = time.perf_counter()
    error = None
    with _outside_pytest():
        try:
            runner.test(
                test_module=test_module,
                hdl_toplevel=TB_TOPLEVEL,
                hdl_toplevel_lang="verilog",
                build_dir=build.build_dir,
                test_dir=work_dir,
                results_xml=str(results),
                extra_env=env,
                log_file=log,
                waves=waves,
                timescale=("1ns", "1ps"),
                seed=seed,
            )
        except (RuntimeError, SystemExit) as e:  # simulator exited non-zero (CommandFailed)
            error = e
    return log, results, time.perf_counter() - t0, error


def _tail(path: Path, n: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return "(no log)"


def _died(sim: str, target: str, error, log: Path, records: list[dict]) -> SimulatorDied:
    """What a simulator that ended without a result did, where its log is, and its last lines."""
    rc = error.returncode if isinstance(error, CommandFailed) else (0 if error is None else None)
    who = f"the {sim} simulator" + (f" ({Path(error.cmd[0]).name}, pid {error.pid})" if isinstance(error, CommandFailed)
                                    else "")
    how = describe_returncode(rc) if rc is not None else f"failed ({error})"
    return SimulatorDied(f"{who} {how} before job {target} finished; simulator log: {log}; its last relevant lines:\n"
                         + log_excerpt(log, 15, _RELEVANT), records, log, rc)


# what is worth reading in a simulator log: cocotb's warnings and errors, Python tracebacks, and
# what simulators print when they fail (otherwise the last lines, whatever they are)
_RELEVANT = (r"WARNING|ERROR|CRITICAL|Traceback|Error|Exception|%Fatal|Segmentation|Aborted|core dumped|"
             r"assert|SIG[A-Z]+")


def job_target(fn: Callable) -> str:
    """``"module:function"`` for a job function, checked to resolve back to the same function."""
    if not callable(fn):
        raise TypeError(f"a job must be an async function, not {fn!r}")
    module, qual = getattr(fn, "__module__", None), getattr(fn, "__qualname__", "")
    if not module or "." in qual or "<" in qual:
        raise TypeError(f"job {qual or fn!r} must be a function defined at the top level of a module "
                        "(the simulator process imports it by name)")
    if getattr(importlib.import_module(module), qual, None) is not fn:
        raise TypeError(f"job {module}:{qual} does not resolve back to the function given")
    return f"{module}:{qual}"


def _read_records(path: Path, seen: int) -> tuple[list[dict], int]:
    """Complete lines appended since ``seen`` bytes (a line still being written waits)."""
    try:
        with open(path, "rb") as f:
            f.seek(seen)
            data = f.read()
    except FileNotFoundError:
        return [], seen
    end = data.rfind(b"\n") + 1
    recs = [json.loads(line) for line in data[:end].decode().splitlines() if line.strip()]
    return recs, seen + end


def run_job(
    fn: Callable,
    kwargs: dict | None = None,
    *,
    variant: Variant | None = None,
    sim: str = "verilator",
    clock: str | None = None,
    waves: bool = False,
    work_dir: Path | None = None,
    discover: bool = True,
    build: Build | None = None,
    on_record: Callable[[dict], None] | None = None,
    poll_s: float = 0.25,
    stimulus: Path | None = None,
) -> JobResult:
    """Run one job on a fresh simulator process; raise :class:`JobFailed` if it did not finish.

    ``on_record(record)`` is called in this thread for every record as the job emits it (the
    simulator runs in a worker thread meanwhile), so a caller can show progress live.
    With ``stimulus`` the run's board stimulus is recorded into that file for a replay
    (:mod:`cosim.stimulus`, :mod:`cosim.limit`).
    """
    target = job_target(fn)
    variant = variant or Variant()
    build = build or build_simulator(variant, sim=sim, clock=clock, waves=waves)
    # A folder of our own is removed once the job has succeeded (issue 15: runs left one behind
    # each); a failed job keeps it, since its error names the simulator log inside.
    own_work = work_dir is None and not waves
    # named after its job (firstlight-serve_session-XXXX): a folder kept after a failure says whose it is
    name = getattr(fn, "__name__", "job").strip("_") or "job"
    work = (Path(work_dir) if work_dir else Path(tempfile.mkdtemp(prefix=f"firstlight-{name}-"))).resolve()
    work.mkdir(parents=True, exist_ok=True)
    records_path = work / "records.jsonl"
    records_path.unlink(missing_ok=True)
    job_file = work / "job.json"
    job_file.write_text(json.dumps({"target": target, "kwargs": kwargs or {}, "records": str(records_path),
                                    "clock": build.clock, "discover": discover, "config": variant.config.as_dict(),
                                    "board": variant.resolved_board.as_dict(),
                                    "stimulus": str(Path(stimulus).resolve()) if stimulus else None}))
    env = {"FIRSTLIGHT_JOB": str(job_file)}
    if on_record is None:
        log, _results, run_s, error = _launch(build, "cosim.job_entry", work, env, waves)
        records, _ = _read_records(records_path, 0)
    else:
        out: dict = {}

        def launch():
            try:
                out["launch"] = _launch(build, "cosim.job_entry", work, env, waves)
            except BaseException as e:  # noqa: BLE001 - re-raised in the caller's thread
                out["raised"] = e

        th = threading.Thread(target=launch, name="firstlight-sim", daemon=True)
        th.start()
        records, seen = [], 0
        try:
            while True:
                alive = th.is_alive()
                new, seen = _read_records(records_path, seen)
                for r in new:
                    on_record(r)
                records += new
                if not alive:
                    break
                time.sleep(poll_s)
        except BaseException:  # interrupted (or on_record raised): stop the simulator, keep what it wrote
            stop_children()
            th.join(10)
            try:
                for r in _read_records(records_path, seen)[0]:
                    on_record(r)
            except Exception:  # noqa: BLE001 - the interruption is what the caller must see
                pass
            raise
        th.join()
        if "raised" in out:
            raise out["raised"]
        log, _results, run_s, error = out["launch"]
    wave_file = None
    if waves:
        for cand in (work / "dump.vcd", work / f"{TB_TOPLEVEL}.fst"):
            if cand.exists():
                wave_file = cand
    exc = [r for r in records if r.get("type") == "exception"]
    final = [r for r in records if r.get("type") == "result"]
    if exc:
        cls = HarnessFailed if exc[-1].get("harness") else JobFailed
        raise cls(f"job {target} raised {exc[-1]['error']}\n(simulator log: {log})", records)
    if not final:
        raise _died(sim, target, error, log, records)
    device = next((r for r in records if r.get("type") == "device"), {})
    if own_work:
        shutil.rmtree(work, ignore_errors=True)
        log = None
    return JobResult(records, build, run_s, log, wave_file, final[-1]["value"], device)


def _results_from_log(log: Path, module: str, error) -> dict[str, dict]:
    """Per-test results from cocotb's log when the simulator died before writing results.xml."""
    import re

    out: dict[str, dict] = {}
    running = None
    try:
        lines = log.read_text(errors="replace").splitlines()
    except OSError:
        return out
    for line in lines:
        m = re.search(rf"running {re.escape(module)}\.(\w+) \(", line)
        if m:
            running = m.group(1)
            continue
        m = re.search(rf"{re.escape(module)}\.(\w+) (passed|failed)", line)
        if m:
            out[m.group(1)] = {"passed": m.group(2) == "passed", "message": "" if m.group(2) == "passed" else line.strip()}
            if running == m.group(1):
                running = None
    if running:
        out[running] = {"passed": False, "message": f"the simulator died during this test ({error}); last log lines:\n"
                        + _tail(log, 15)}
    return out


def run_cocotb_module(test_module: str, *, variant: Variant | None = None, sim: str = "verilator",
                      clock: str | None = None, work_dir: Path, seed: int | None = None,
                      extra_env: dict[str, str] | None = None) -> dict[str, dict]:
    """Run every cocotb test in ``test_module`` in one simulator process.

    Returns ``{test name: {"passed": bool, "message": str}}`` parsed from cocotb's results XML,
    plus the key ``"__log__"`` with the log path. Raises if the simulator produced no results.
    """
    variant = variant or Variant()
    build = build_simulator(variant, sim=sim, clock=clock)
    work_dir.mkdir(parents=True, exist_ok=True)
    env = {"FIRSTLIGHT_CLOCK": build.clock, **(extra_env or {})}
    # INFO keeps cocotb's per-test "passed/failed" lines in the log: if the simulator dies before
    # it writes results.xml, the tests that finished are still reported (see _results_from_log).
    env.setdefault("COCOTB_LOG_LEVEL", "INFO")
    log, results, _run_s, error = _launch(build, test_module, work_dir, env, False, seed)
    if not results.exists():
        out = _results_from_log(log, test_module, error)
        if not out:
            raise RuntimeError(f"{sim} produced no results ({error}); last log lines:\n{_tail(log)}")
        out["__log__"] = {"passed": True, "message": str(log)}
        return out
    out: dict[str, dict] = {}
    for case in ET.parse(results).getroot().iter("testcase"):
        fail = case.find("failure")
        err = case.find("error")
        bad = fail if fail is not None else err
        msg = ""
        if bad is not None:
            msg = (bad.get("message") or "") + "\n" + (bad.text or "")
        out[case.get("name")] = {"passed": bad is None and case.find("skipped") is None, "message": msg}
    out["__log__"] = {"passed": True, "message": str(log)}
    return out
