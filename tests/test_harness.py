"""The harness keeps what it learned whatever happens (issue 9, harness half).

Signals during a bring-up, a simulator killed under it, output paths that cannot be written,
a corrupt build cache, reports a lead can file, and terminal output that shows user text as it
is. Real simulators throughout: the bring-up runs are real `firstlight bringup` processes, the
simulator is killed for real, the cache is really truncated.
"""

from __future__ import annotations

import io
import json
import logging
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import pytest
from junitparser import JUnitXml

from conftest import SMALL_CHIP, require_sim
from firstlight import cli

ROOT = Path(__file__).resolve().parent.parent
FIRSTLIGHT = [sys.executable, "-m", "firstlight.cli"]
# A small chip: int8 only, 64-word SRAMs (builds in about a second on Icarus)
SMALL = ["--formats", "int8", "--sram-depth", "64", "--no-vector"]  # the SMALL_CHIP build


def _small_variant():
    from cosim.build import Variant

    return Variant(config=SMALL_CHIP, revision="A0")


# ---- processes ------------------------------------------------------------------------------------

def _children(pid: int) -> list[int]:
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            out.append(int(stat.parent.name))
    return out


def _descendants(pid: int) -> list[int]:
    todo, out = [pid], []
    while todo:
        for c in _children(todo.pop()):
            out.append(c)
            todo.append(c)
    return out


def _alive(pid: int) -> bool:
    """Running (a zombie is dead: it only waits to be reaped)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _stage_records(path: Path) -> list[dict]:
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return []
    out = []
    for line in lines:
        try:
            out.append(json.loads(line))
        except ValueError:
            pass  # a line being written
    return out


def _start_bringup(report: Path, cache: Path, *extra: str) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_CURRENT_TEST"}
    env["FIRSTLIGHT_CACHE"] = str(cache)
    return subprocess.Popen([*FIRSTLIGHT, "bringup", "--sim", "icarus", *SMALL, "--report", str(report), *extra],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait_for_stages(proc: subprocess.Popen, records: Path, n: int) -> list[dict]:
    """Block until the simulator has reported ``n`` stages (the trigger: no fixed sleep)."""
    deadline = time.monotonic() + 300  # a hang guard, not a measurement
    while time.monotonic() < deadline:
        recs = [r for r in _stage_records(records) if r.get("type") == "stage"]
        if len(recs) >= n:
            return recs
        if proc.poll() is not None:
            out, err = proc.communicate()
            pytest.fail(f"bringup ended (exit {proc.returncode}) before {n} stages reported:\n{out}\n{err}")
        time.sleep(0.05)
    proc.kill()
    pytest.fail(f"{n} stages were not reported in time")


def _simulator_of(harness: int) -> list[int]:
    sims = [p for p in _descendants(harness) if "vvp" in _cmdline(p) or "fl_tb" in _cmdline(p)]
    assert sims, f"no simulator process under {harness}: {[_cmdline(p) for p in _descendants(harness)]}"
    return sims


@pytest.fixture(scope="module")
def icarus_cache(tmp_path_factory):
    """One cache for this module's Icarus runs (the small chip builds once per worker)."""
    return tmp_path_factory.mktemp("icarus-cache")


def _read_reports(report: Path) -> tuple[dict, dict, str]:
    for name in ("report.json", "junit.xml", "report.md"):
        assert (report / name).is_file(), f"{name} was not written: {sorted(p.name for p in report.iterdir())}"
    rep = json.loads((report / "report.json").read_text())
    xml = JUnitXml.fromfile(str(report / "junit.xml"))
    cases = {c.name: c for suite in xml for c in suite}
    return rep, cases, (report / "report.md").read_text()


# ---- 1. signals: nothing learned is lost ----------------------------------------------------------

@pytest.mark.sim
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_signal_during_bringup_writes_every_report_and_stops_the_simulator(tmp_path, icarus_cache, sig):
    require_sim("icarus")
    report = tmp_path / "report"
    proc = _start_bringup(report, icarus_cache)
    done = _wait_for_stages(proc, report / "sim" / "records.jsonl", 3)  # reset, identity, csr_bus
    sims = _simulator_of(proc.pid)
    family = _descendants(proc.pid)
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=120)

    assert proc.returncode == 128 + sig, (proc.returncode, out[-3000:], err[-3000:])
    assert "Traceback" not in err, err
    for pid in family:
        assert not _alive(pid), f"process {pid} ({_cmdline(pid)}) survived the {sig.name}"
    rep, cases, md = _read_reports(report)
    st = {s["name"]: s for s in rep["stages"]}
    assert rep["outcome"] == "interrupted" and rep["interrupted"] == sig.name and rep["exit_code"] == 128 + sig
    for r in done:
        assert st[r["name"]]["status"] == "passed", st[r["name"]]
    statuses = [s["status"] for s in rep["stages"]]
    assert statuses.count("interrupted") == 1, statuses
    cut = statuses.index("interrupted")
    assert all(s == "passed" for s in statuses[:cut]), statuses
    assert all(s == "skipped" and sig.name in st_["details"] for s, st_ in zip(statuses[cut + 1:],
                                                                               rep["stages"][cut + 1:])), statuses
    interrupted = rep["stages"][cut]
    assert sig.name in interrupted["details"]
    log = report / "sim" / "sim.log"
    assert log.is_file() and log.stat().st_size > 0, "the simulator's log is kept"
    assert rep["sim_log"] == str(log.resolve())
    # junit: the interrupted stage is an error of type "interrupted", the finished ones passed
    assert cases[interrupted["name"]].result[0].type == "interrupted"
    assert all(cases[r["name"]].is_passed for r in done)
    assert f"INTERRUPTED ({sig.name})" in md and f"| {interrupted['name']} | interrupted |" in md
    assert sims  # there was a simulator to stop


@pytest.mark.sim
def test_killed_simulator_is_a_harness_error_naming_log_and_signal(tmp_path, icarus_cache):
    require_sim("icarus")
    report = tmp_path / "report"
    proc = _start_bringup(report, icarus_cache)
    done = _wait_for_stages(proc, report / "sim" / "records.jsonl", 3)
    (sim,) = _simulator_of(proc.pid)
    os.kill(sim, signal.SIGKILL)
    out, err = proc.communicate(timeout=120)

    assert proc.returncode == cli.EXIT_HARNESS_ERROR == 3, (proc.returncode, out[-3000:], err[-3000:])
    rep, cases, md = _read_reports(report)
    assert rep["outcome"] == "error" and rep["exit_code"] == 3
    errored = [s for s in rep["stages"] if s["status"] == "error"]
    assert len(errored) == 1, [(s["name"], s["status"]) for s in rep["stages"]]
    e = errored[0]
    log = str((report / "sim" / "sim.log").resolve())
    assert "killed by SIGKILL" in e["details"] and log in e["details"] and f"pid {sim}" in e["details"], e
    assert "failed" not in [s["status"] for s in rep["stages"]], "a dead simulator is not a chip failure"
    for r in done:
        assert {s["name"]: s for s in rep["stages"]}[r["name"]]["status"] == "passed"
    res = cases[e["name"]].result[0]
    assert res._tag == "error" and res.type == "harness error" and "SIGKILL" in res.message
    assert "ERROR (harness error" in md and "killed by SIGKILL" in md


@pytest.mark.sim
def test_a_job_leaves_no_temporary_folder_unless_it_failed(tmp_path, monkeypatch):
    """Issue 15: every run left a firstlight-XXXXXXXX folder behind. A job that succeeds removes
    its own; one that fails keeps it, and its error names the simulator log inside."""
    import tempfile

    from cosim.jobs import JobFailed, run_job
    from harness_jobs import ok_job, raise_job

    require_sim("icarus")
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    res = run_job(ok_job, {}, variant=_small_variant(), sim="icarus")
    assert res.value == 42 and res.log is None
    assert list(tmp.iterdir()) == []
    with pytest.raises(JobFailed, match="this job fails on purpose") as failed:
        run_job(raise_job, {}, variant=_small_variant(), sim="icarus")
    kept = list(tmp.iterdir())
    # named after its job (once an unnamed firstlight-XXXXXXXX)
    assert len(kept) == 1 and kept[0].name.startswith("firstlight-raise_job-") and (kept[0] / "sim.log").is_file()
    assert str(kept[0] / "sim.log") in str(failed.value)


@pytest.mark.sim
def test_a_harness_error_inside_the_simulator_is_not_a_chip_verdict(tmp_path):
    """A backdoor VPI call that fails inside the simulator (cosim/vpi_arrays.py) reaches the
    caller as a harness error (HarnessFailed), while a job's own exception stays a JobFailed
    verdict: the CLI and the sweeps report the first as an error, the second as a failure."""
    from cosim.build import HarnessError
    from cosim.jobs import HarnessFailed, JobFailed, run_job
    from harness_jobs import raise_job, vpi_lookup_job

    require_sim("verilator")
    with pytest.raises(HarnessFailed, match="no array named 'fl_tb.no_such_array'"):
        run_job(vpi_lookup_job, {"path": "fl_tb.no_such_array"}, variant=_small_variant(), work_dir=tmp_path / "a")
    with pytest.raises(JobFailed) as verdict:
        run_job(raise_job, {}, variant=_small_variant(), work_dir=tmp_path / "b")
    assert not isinstance(verdict.value, HarnessError)


@pytest.mark.sim
def test_simulator_exit_status_is_translated(tmp_path):
    """A job that ends its own simulator: a segfault is named, an exit code is given."""
    from cosim.jobs import SimulatorDied, run_job
    from harness_jobs import die_by_signal_job, exit_job

    require_sim("icarus")
    with pytest.raises(SimulatorDied) as died:
        run_job(die_by_signal_job, {"signum": int(signal.SIGSEGV)}, variant=_small_variant(), sim="icarus",
                work_dir=tmp_path / "segv")
    msg = str(died.value)
    assert died.value.returncode == -signal.SIGSEGV and "was killed by SIGSEGV" in msg, msg
    assert str(tmp_path / "segv" / "sim.log") in msg
    assert [r["type"] for r in died.value.records][-1] == "note", "what the job emitted before it died is kept"
    with pytest.raises(SimulatorDied, match="exited with code 7"):
        run_job(exit_job, {"code": 7}, variant=_small_variant(), sim="icarus", work_dir=tmp_path / "exit")


def test_return_codes_in_words():
    from cosim.build import describe_returncode

    assert describe_returncode(-9) == "was killed by SIGKILL"
    assert describe_returncode(-11) == "was killed by SIGSEGV"
    assert describe_returncode(3) == "exited with code 3"
    assert "SIGKILL" in describe_returncode(137)


# ---- 2. output paths checked before anything is built ---------------------------------------------

def _blocker(tmp_path) -> Path:
    """A regular file: nothing can be created below it, whoever we are (root included)."""
    f = tmp_path / "a-file"
    f.write_text("x")
    return f


@pytest.mark.parametrize("argv, option", [
    (["run", "gemm", "--m", "2", "--n", "2", "--k", "2", "--json", "{bad}/r.json"], "--json"),
    (["run", "reduce", "--rows", "2", "--cols", "2", "--op", "sum", "--json", "{bad}/r.json"], "--json"),
    (["run", "gemm", "--m", "2", "--n", "2", "--k", "2", "--waves-dir", "{bad}/w"], "--waves-dir"),
    (["bench", "--shapes", "2x2x2", "--json", "{bad}/b.json"], "--json"),
    (["numerics", "--report", "{bad}/nu"], "--report"),
    (["bringup", "--report", "{bad}/rep"], "--report"),
    (["errata", "list", "--json", "{bad}/e.json"], "--json"),
    (["errata", "check", "--rev", "A0", "--json", "{bad}/c.json"], "--json"),
])
def test_unwritable_output_is_cannot_start_before_any_build(argv, option, tmp_path, monkeypatch, capsys):
    cache = tmp_path / "cache"
    monkeypatch.setenv("FIRSTLIGHT_CACHE", str(cache))
    bad = _blocker(tmp_path)
    argv = [a.replace("{bad}", str(bad)) for a in argv]
    assert cli.main(argv) == cli.EXIT_CANNOT_START
    err = capsys.readouterr().err
    path = next(a for a in argv if str(bad) in a)
    assert option in err and path in err.replace("\n", ""), err
    assert "Traceback" not in err
    assert not (cache / "verilog").exists() and not (cache / "sim").exists(), "nothing may be built first"


def test_output_file_that_is_a_folder(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("FIRSTLIGHT_CACHE", str(tmp_path / "cache"))
    folder = tmp_path / "out"
    folder.mkdir()
    assert cli.main(["run", "gemm", "--m", "2", "--n", "2", "--k", "2", "--json", str(folder)]) == 2
    assert f"--json {folder}: it is a folder, not a file" in capsys.readouterr().err.replace("\n", "")


def test_report_folder_that_is_a_file(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("FIRSTLIGHT_CACHE", str(tmp_path / "cache"))
    f = _blocker(tmp_path)
    assert cli.main(["bringup", "--report", str(f)]) == 2
    assert f"--report {f}: it exists and is not a folder" in capsys.readouterr().err.replace("\n", "")


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_read_only_report_folder(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("FIRSTLIGHT_CACHE", str(tmp_path / "cache"))
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        assert cli.main(["bringup", "--report", str(ro)]) == 2
        assert "not writable" in capsys.readouterr().err
    finally:
        ro.chmod(0o700)


@pytest.mark.parametrize("argv", [
    ["run", "gemm", "--m", "2", "--n", "2", "--k", "2"],
    ["bench", "--shapes", "2x2x2"],
    ["bringup"],
    ["numerics"],
    ["errata", "check", "--rev", "A0"],
])
def test_unwritable_cache_is_cannot_start(argv, tmp_path, monkeypatch, capsys):
    bad = _blocker(tmp_path) / "cache"
    monkeypatch.setenv("FIRSTLIGHT_CACHE", str(bad))
    assert cli.main(argv) == cli.EXIT_CANNOT_START
    err = capsys.readouterr().err.replace("\n", "")
    assert "$FIRSTLIGHT_CACHE" in err and str(bad) in err and "cannot create the folder" in err, err


def test_commands_that_do_not_build_ignore_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("FIRSTLIGHT_CACHE", str(_blocker(tmp_path) / "cache"))
    assert cli.main(["errata", "list", "--rev", "A0"]) == cli.EXIT_OK


# ---- 3 + 4. the build cache is verified; a build that fails is a harness error --------------------

class _Records(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record):
        self.records.append(record)


@pytest.fixture
def firstlight_log():
    """What the 'firstlight' logger (and its children) says, whatever handlers the CLI adds."""
    h = _Records()
    log = logging.getLogger("firstlight")
    old = log.level
    log.addHandler(h)
    log.setLevel(logging.INFO)
    yield h
    log.removeHandler(h)
    log.setLevel(old)


@pytest.fixture(scope="module")
def verilator_small(tmp_path_factory):
    """A private cache holding the small chip's Verilator build, copied from the shared cache
    (built there once, as other tests use the same chip): this module may damage its copy."""
    from cosim import build

    require_sim("verilator")
    b = build.build_simulator(_small_variant(), sim="verilator")
    cache = tmp_path_factory.mktemp("verilator-cache")
    shutil.copytree(b.verilog.parent, cache / "verilog" / b.verilog.parent.name)
    shutil.copytree(b.build_dir, cache / "sim" / b.build_dir.name, symlinks=True)
    return cache, b


def _private_copy(verilator_small, tmp_path) -> Path:
    cache, _ = verilator_small
    mine = tmp_path / "cache"
    shutil.copytree(cache, mine, symlinks=True)
    return mine


def _bringup_reset(tmp_path, *extra) -> tuple[int, dict]:
    out = tmp_path / "report"
    code = cli.main(["bringup", *SMALL, "--only", "reset", "--report", str(out), *extra])
    return code, json.loads((out / "report.json").read_text())


@pytest.mark.sim
def test_truncated_simulator_binary_is_rebuilt_with_a_warning(verilator_small, tmp_path, monkeypatch,
                                                               firstlight_log):
    from cosim.build import BUILD_LEFTOVERS, model_artifact

    _, good = verilator_small
    cache = _private_copy(verilator_small, tmp_path)
    monkeypatch.setenv("FIRSTLIGHT_CACHE", str(cache))
    binary = model_artifact(cache / "sim" / good.build_dir.name, "verilator")
    size = binary.stat().st_size
    with open(binary, "r+b") as f:
        f.truncate(size // 2)

    code, rep = _bringup_reset(tmp_path)
    build = rep["stages"][0]
    assert code == cli.EXIT_OK, [(s["name"], s["status"], s["details"]) for s in rep["stages"]]
    assert build["figures"]["cache_hit"] is False and "rebuilding it" in build["details"]
    warnings = [r for r in firstlight_log.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and warnings[0].name.startswith("firstlight"), warnings
    text = warnings[0].getMessage()
    assert str(binary) in text and f"{size // 2:,} bytes" in text and f"{size:,} were recorded" in text, text
    assert binary.stat().st_size == size, "rebuilt (the same sources make the same binary size)"
    assert rep["stages"][1]["status"] == "passed"
    # the rebuilt entry holds no compile-only files (precompiled headers were ~95% of an entry)
    left = [str(p) for pat in BUILD_LEFTOVERS for p in binary.parent.rglob(pat)]
    assert not left and (binary.parent / "build.log").exists(), left


@pytest.mark.sim
def test_truncated_verilog_is_elaborated_again_with_a_warning(verilator_small, tmp_path, monkeypatch,
                                                              firstlight_log):
    _, good = verilator_small
    cache = _private_copy(verilator_small, tmp_path)
    monkeypatch.setenv("FIRSTLIGHT_CACHE", str(cache))
    verilog = cache / "verilog" / good.verilog.parent.name / good.verilog.name
    text = verilog.read_text()
    verilog.write_text(text[: len(text) // 3])

    code, rep = _bringup_reset(tmp_path)
    build = rep["stages"][0]
    assert code == cli.EXIT_OK, [(s["name"], s["status"], s["details"]) for s in rep["stages"]]
    warnings = [r.getMessage() for r in firstlight_log.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and str(verilog) in warnings[0] and "elaborating it again" in warnings[0], warnings
    assert verilog.read_text() == text, "elaborated again, to the same text"
    # the same Verilog, so the same simulator build: found in the cache, not recompiled
    assert build["figures"]["cache_hit"] is True and "elaborating it again" in build["details"]


@pytest.mark.sim
def test_a_build_that_fails_is_a_harness_error_with_the_compiler_error(tmp_path, monkeypatch):
    """The Verilog generator writes something the compiler rejects (consistently recorded, so it
    is not a corrupt entry): the build stage is an error naming the build log and the error."""
    import hashlib

    from cosim.build import cache_root, verilog_key

    require_sim("icarus")
    cache = tmp_path / "cache"
    monkeypatch.setenv("FIRSTLIGHT_CACHE", str(cache))
    variant = _small_variant()
    vdir = cache_root() / "verilog" / verilog_key(variant)
    vdir.mkdir(parents=True)
    bad = b"module fl_chip(input clk);\n  this is not verilog;\nendmodule\n"
    (vdir / "fl_chip.v").write_bytes(bad)
    (vdir / "manifest.json").write_text(json.dumps({"file": "fl_chip.v", "size": len(bad),
                                                    "sha256": hashlib.sha256(bad).hexdigest()}))
    code, rep = _bringup_reset(tmp_path, "--sim", "icarus")
    st = {s["name"]: s for s in rep["stages"]}
    assert code == cli.EXIT_HARNESS_ERROR and rep["outcome"] == "error"
    assert st["build"]["status"] == "error" and st["reset"]["status"] == "blocked"
    details = st["build"]["details"]
    assert "BuildFailed" in details and "build.log" in details and "syntax error" in details, details
    xml = JUnitXml.fromfile(str(tmp_path / "report" / "junit.xml"))
    res = {c.name: c for suite in xml for c in suite}["build"].result[0]
    assert res._tag == "error" and res.type == "harness error"


# ---- 5. reports a lead can file -------------------------------------------------------------------

@pytest.mark.sim
def test_reports_carry_when_where_what_and_how(tmp_path, icarus_cache, monkeypatch):
    require_sim("icarus")
    monkeypatch.setenv("FIRSTLIGHT_CACHE", str(icarus_cache))
    out = tmp_path / "report"
    argv = ["bringup", "--sim", "icarus", *SMALL, "--only", "reset", "--seed", "5", "--report", str(out)]
    assert cli.main(argv) == cli.EXIT_OK
    rep, cases, md = _read_reports(out)
    when = datetime.fromisoformat(rep["timestamp"])
    assert when.tzinfo is not None
    assert rep["host"] == socket.gethostname()
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True)
    assert rep["git_commit"] == (head.stdout.strip() if head.returncode == 0 else "unknown")
    from importlib.metadata import version

    import amaranth
    import cocotb

    assert rep["tools"]["firstlight"] == version("firstlight") and rep["tools"]["cocotb"] == cocotb.__version__
    assert rep["tools"]["amaranth"] == version("amaranth") and amaranth
    assert rep["tools"]["python"] == ".".join(map(str, sys.version_info[:3])) and rep["tools"]["icarus"]
    assert rep["command"] == "firstlight " + " ".join(argv)
    xml = JUnitXml.fromfile(str(out / "junit.xml"))
    suite = next(iter(xml))
    assert suite.timestamp == rep["timestamp"] and suite.hostname == rep["host"]
    props = {p.name: p.value for p in suite.properties()}
    assert props["git_commit"] == rep["git_commit"] and props["command"] == rep["command"]
    assert props["version.icarus"] == rep["tools"]["icarus"] and props["seed"] == "5"
    for needle in (rep["timestamp"], rep["host"], rep["git_commit"], rep["command"], f"cocotb {cocotb.__version__}"):
        assert needle in md, needle


def test_git_commit_outside_a_checkout(tmp_path, monkeypatch):
    from firstlight import provenance

    monkeypatch.setattr(provenance, "REPO_ROOT", tmp_path)
    assert provenance.git_commit() == ("unknown", None)
    assert provenance.provenance(None, "x")["git_commit"] == "unknown"


def test_multi_line_diagnosis_stays_readable_in_report_md():
    from cosim.build import Variant
    from firstlight.bringup.plan import STAGE_NAMES
    from firstlight.bringup.report import markdown

    dump = ("DeviceTimeout: watchdog expired after 12 cycles waiting for idle\n"
            "  STATUS      = 0x00000002  (busy)\n  ERR         = 0x00000000\n"
            "  last commands queued (oldest first):\n    MATMUL  a=0 b=0 | k=16")
    rows = {"build": {"status": "passed", "details": "ok"}, "reset": {"status": "failed", "details": dump,
                                                                       "figures": {"traceback": "Traceback (most"}}}
    from firstlight.bringup.run import assemble

    md = markdown(assemble(rows, set(STAGE_NAMES), None, Variant(), "verilator", 1))
    table_row = next(line for line in md.splitlines() if line.startswith("| reset |"))
    assert "waiting for idle (details below)" in table_row and "STATUS" not in table_row
    block = md.split("### reset (failed)", 1)[1]
    assert "```text\n" + dump in block and "Traceback (most" in block
    assert "  STATUS      = 0x00000002  (busy)\n" in block, "the dump keeps its lines and alignment"
    assert "\\|" in table_row or "|" not in dump.splitlines()[0]


# ---- 6. terminal output ---------------------------------------------------------------------------

EMOJI = re.compile("[\U0001F000-\U0001FAFF\u2600-\u27BF]")


@pytest.mark.sim
def test_fault_spec_is_shown_as_typed(tmp_path, icarus_cache, monkeypatch, capsys):
    require_sim("icarus")
    monkeypatch.setenv("FIRSTLIGHT_CACHE", str(icarus_cache))
    spec = "sram:SA:stuck1:addr=1:bit=2"
    # memories is the stage that can see it (an --only that cannot is refused: issue 15 item 6)
    code = cli.main(["bringup", "--sim", "icarus", *SMALL, "--inject", spec, "--only", "memories"])
    out = capsys.readouterr().out
    assert code == cli.EXIT_FAIL and spec in out.replace("\n", ""), out
    assert not EMOJI.search(out), EMOJI.findall(out)


@pytest.mark.parametrize("spec", ["sram:SA:nonsense", "csr:[bold]SA[/]:stuck0:bit=1", "sram:A:B:stuck1"])
def test_bad_fault_spec_message_is_shown_as_typed(spec, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("FIRSTLIGHT_CACHE", str(tmp_path / "cache"))
    assert cli.main(["bringup", "--inject", spec]) == cli.EXIT_CANNOT_START
    err = capsys.readouterr().err
    assert spec in err.replace("\n", ""), err
    assert not EMOJI.search(err), err


def test_consoles_never_render_emoji_or_user_markup():
    from firstlight.cli.common import cells, console, err_console, plain

    for c in (console, err_console):
        with c.capture() as cap:
            c.print(plain(("x ", "red"), "sram:SA:stuck1 [bold]B[/] :A:"))
            c.print("raw :SA: :B:")  # even a raw string: no emoji
        assert "sram:SA:stuck1 [bold]B[/] :A:" in cap.get() and ":SA: :B:" in cap.get(), cap.get()
    assert [c.plain for c in cells("[red]x[/]", None, 3)] == ["[red]x[/]", "", "3"]


def _cli_sources() -> list[Path]:
    mine = ["__init__.py", "common.py", "run.py", "bench.py", "bringup.py", "numerics.py", "errata.py"]
    return [ROOT / "firstlight" / "cli" / n for n in mine] + [ROOT / "firstlight" / "bringup" / "run.py",
                                                             ROOT / "firstlight" / "numerics.py"]


def test_no_output_goes_through_the_markup_parser():
    """What these modules print is a Text (or a renderable of Texts), never a string rich parses."""
    import ast

    hits = []
    for path in _cli_sources():
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call):
                continue
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if name in ("print", "add_row", "Table", "add_column"):
                for a in list(node.args) + [k.value for k in node.keywords if k.arg == "title"]:
                    if isinstance(a, ast.JoinedStr) or (isinstance(a, ast.Call) and getattr(a.func, "attr", "")
                                                        == "format"):
                        hits.append(f"{path.relative_to(ROOT)}:{node.lineno}: {name}(f-string)")
        for i, line in enumerate(path.read_text().splitlines(), 1):
            if re.search(r"\[/\]|\[(bold|red|green|yellow|dim|cyan|magenta)[\] ]", line):
                hits.append(f"{path.relative_to(ROOT)}:{i}: {line.strip()}")
    assert not hits, hits


class _Screen:
    """Just enough of a terminal for what rich's Live writes: text, CR, LF, cursor up, erase line."""

    def __init__(self):
        self.lines, self.row, self.col = [""], 0, 0

    def feed(self, data: str) -> _Screen:
        for m in re.finditer(r"\x1b\[(\??[0-9;]*)([A-Za-z])|\r|\n|[^\x1b\r\n]+", data):
            tok = m.group(0)
            if tok == "\r":
                self.col = 0
            elif tok == "\n":
                self.row += 1
                self.col = 0
                while len(self.lines) <= self.row:
                    self.lines.append("")
            elif tok.startswith("\x1b"):
                arg, cmd = m.group(1), m.group(2)
                if cmd == "A":
                    self.row = max(0, self.row - int(arg or 1))
                elif cmd == "K":
                    self.lines[self.row] = ""
                    self.col = 0
            else:
                line = self.lines[self.row].ljust(self.col)
                self.lines[self.row] = line[: self.col] + tok + line[self.col + len(tok):]
                self.col += len(tok)
        return self

    def text(self) -> str:
        return "\n".join(self.lines)


@pytest.mark.sim
def test_live_table_is_shown_once_on_a_terminal(icarus_cache, monkeypatch, tmp_path):
    from rich.console import Console

    from firstlight.bringup.run import run_bringup

    require_sim("icarus")
    monkeypatch.setenv("FIRSTLIGHT_CACHE", str(icarus_cache))
    buf = io.StringIO()
    term = Console(file=buf, force_terminal=True, width=120, color_system=None)
    assert term.is_terminal
    rep = run_bringup(variant=_small_variant(), sim="icarus", seed=1, only=["identity"], report_dir=None,
                      console=term, work_dir=tmp_path / "sim")
    assert rep["exit_code"] == 0
    raw = buf.getvalue()
    assert "\x1b[1A" in raw, "the live table was drawn (and redrawn) while the stages ran"
    screen = _Screen().feed(raw).text()
    assert screen.count("firstlight bringup: revision A0, icarus") == 1, screen
    assert screen.count("│ identity ") == 1 and screen.count("│ reset ") == 1, screen


# ---- tables that never cut a number ---------------------------------------------------------------

def _bench_rows() -> list[dict]:
    rows = []
    for sim in ("verilator", "icarus"):
        for side in (16, 32, 64, 128, 256):
            rows.append({"sim": sim, "shape": f"{side}x{side}x{side}", "passed": side != 64,
                         "cycles": 1234567 * side, "ideal_cycles": 1048576 * side, "utilization": 0.8765,
                         "sim_cycles_per_s": 904321.7 + side, "python_share": 0.1234, "wall_s": 123.456,
                         "build_first_s": 50.04 if sim == "verilator" else None, "build_cached_s": 0.0123,
                         "buffering": "2 (planner)", "compulsory_bytes": 393216 * side, "dram_bytes": 786432 * side,
                         "intensity": 21.33, "bound": "compute", "attainable_cycles": 1048576 * side,
                         "roof_utilization": 0.9021, "overlap": 1.107,
                         "compile_s": 0.37 if side != 16 else None})
    return rows


def _render(renderable, width: int) -> str:
    from rich.console import Console

    c = Console(file=io.StringIO(), width=width, color_system=None, emoji=False)
    c.print(renderable)
    return c.file.getvalue()


@pytest.mark.parametrize("width", [80, 100, 120])
def test_bench_table_never_cuts_a_number(width):
    from firstlight.cli.bench import COLUMNS, bench_table

    rows = _bench_rows()
    text = _render(bench_table(rows, "GEMM on a 4x4 array, revision A0 (int8, bit-exact vs golden)"), width)
    assert max(len(line) for line in text.splitlines()) <= width
    assert "…" not in text
    for r in rows:
        for _, key, fmt in COLUMNS:
            shown = fmt(r[key])
            shown = shown.plain if hasattr(shown, "plain") else shown
            assert re.search(rf"(?<![\w.,]){re.escape(shown)}(?![\w.,])", text), (key, shown, text)


@pytest.mark.parametrize("width", [80, 100, 120])
def test_numerics_tables_never_cut_a_number_or_a_recipe(width):
    from firstlight.cli.common import Reporter
    from golden.quant import RECIPES

    dists, ks = ["normal", "outliers", "small"], [64, 256, 1024]
    headers = ["recipe", *[f"{d}\nK={k}" for d in dists for k in ks], "RTL ==\ngolden"]
    rows = [[rc, *[f"{10 + i + j / 10:.1f}" for j in range(len(dists) * len(ks))], "yes"]
            for i, rc in enumerate(RECIPES)]
    from rich.console import Console

    c = Console(file=io.StringIO(), width=width, color_system=None)
    Reporter(c).table("SQNR (dB) of a 32x32xK GEMM vs float64, revision B0, verilator", headers, rows)
    text = c.file.getvalue()
    assert "…" not in text and max(len(line) for line in text.splitlines()) <= width
    for r in rows:
        assert re.search(rf"(?<![\w-]){re.escape(r[0])}(?![\w-])", text), r[0]
        for v in r[1:-1]:
            assert re.search(rf"(?<![\d.]){re.escape(v)}(?![\d.])", text), v


def test_very_narrow_console_stacks_the_rows():
    from firstlight.cli.common import FittedTable

    t = FittedTable("t", ["name", "a", "b"], [["mxfp8-e4m3-rceil", "1,234,567,890", "9,876,543,210"]])
    assert t.layout(200) == [[0, 1, 2]] and t.layout(40) == [[0, 1], [0, 2]] and t.layout(30) is None
    text = _render(t, 30)
    assert "1,234,567,890" in text and "9,876,543,210" in text and "mxfp8-e4m3-rceil" in text


# ---- --version and the exit codes in every --help -------------------------------------------------

def test_version_comes_from_the_package_metadata_with_the_commit_and_the_tools(capsys):
    """issue 38: --version adds the commit and the simulator versions (what a bug report needs)."""
    from importlib.metadata import version

    from firstlight.provenance import git_commit

    assert cli.main(["--version"]) == cli.EXIT_OK
    lines = capsys.readouterr().out.strip().splitlines()
    commit, _ = git_commit()
    assert lines[0].startswith(f"firstlight {version('firstlight')}, commit ")
    assert commit == "unknown" or commit[:12] in lines[0]
    tools = {ln.split()[0] for ln in lines[1:]}
    assert {"python", "amaranth", "cocotb", "verilator", "icarus"} <= tools, lines


def _leaf_parsers(parser, path=()):
    import argparse

    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        yield path, parser
    for a in subs:
        for name, sub in a.choices.items():
            yield from _leaf_parsers(sub, (*path, name))


def test_every_command_documents_every_exit_code():
    from firstlight.errors import EXIT_CODES

    leaves = [(p, parser) for p, parser in _leaf_parsers(cli.build_parser()) if p[0] != "faults"]
    assert len(leaves) >= 9
    for path, parser in leaves:
        text = parser.format_help()
        assert "exit codes:" in text, path
        for code in EXIT_CODES:
            assert re.search(rf"^  {code}\s", text, re.M), (path, code)
    top = cli.build_parser().format_help()
    doc = (ROOT / "docs" / "bringup.md").read_text().split("## Exit codes", 1)[1].split("\n## ", 1)[0]
    for code in EXIT_CODES:
        assert re.search(rf"^  {code}\s", top, re.M) and f"| {code} |" in doc, code


def test_a_build_step_says_what_runs_and_for_how_long(caplog, monkeypatch):
    """A long build step announces itself, beats while it runs, and ends with its duration."""
    from cosim import build

    monkeypatch.setattr(build, "HEARTBEAT_S", 0.05)
    with caplog.at_level(logging.INFO, logger="firstlight.build"):
        with build.build_step("verilating the Verilog into C++ (step 1 of 2)"):
            time.sleep(0.3)
    text = caplog.text
    assert "verilating the Verilog into C++ (step 1 of 2) ..." in text
    assert "... still verilating the Verilog into C++ (step 1 of 2) (0 s)" in text
    assert re.search(r"verilating the Verilog into C\+\+ \(step 1 of 2\): done in 0\.[0-9] s", text)


def test_a_harness_killed_with_sigkill_takes_its_simulator_with_it():
    """A harness that dies without a chance to clean up (SIGKILL: a Dask worker killed mid-run)
    must not leave its compiler or simulator running on: the child dies with its parent."""
    script = (
        "import threading, time\n"
        "from cosim.build import run_tracked\n"
        "threading.Thread(target=lambda: run_tracked(['sleep', '307'], cwd='/tmp'), daemon=True).start()\n"
        "time.sleep(60)\n")
    parent = subprocess.Popen([sys.executable, "-c", script], cwd=ROOT)
    try:
        deadline = time.monotonic() + 20
        child = []
        while not child and time.monotonic() < deadline:
            child = [c for c in _descendants(parent.pid) if "sleep 307" in _cmdline(c)]
            time.sleep(0.1)
        assert child, "the harness never started its child"
        parent.kill()
        parent.wait()
        deadline = time.monotonic() + 5
        while _alive(child[0]) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(child[0]), "the child outlived its SIGKILLed harness"
    finally:
        parent.kill()
        subprocess.run(["pkill", "-f", "^sleep 307"])
