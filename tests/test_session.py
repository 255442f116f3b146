"""The session API on real simulators: one simulator process serving calls from this process.

One session on the int8 chip with the vector unit serves most tests of this module (a session is
what they test, and a start costs seconds); the tests of endings (watchdog, crash, kill, exit)
open their own. Random data is seeded: FIRSTLIGHT_SEED=<n> reproduces a run.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import golden
from cosim.build import HarnessError, running_children
from firstlight.session import ChipError, ChipTimeout, SessionClosed, SessionDied
from firstlight.session.wire import PeerClosed, recv_message, send_message
from rtl import isa

from conftest import SEED, SMALL_CHIP, VECTOR_CHIP, require_sim

ROOT = Path(__file__).resolve().parent.parent
REPRO = f"reproduce: FIRSTLIGHT_SEED={SEED} .venv/bin/python -m pytest tests/test_session.py"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is a process that has ended, waiting for its parent to read its status
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def _gone_within(pid: int, seconds: float) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if not _alive(pid):
            return True
        time.sleep(0.1)
    return not _alive(pid)


@pytest.fixture(scope="module")
def chip():
    require_sim("verilator")
    import firstlight

    with firstlight.open(rev="B1", config=VECTOR_CHIP) as s:
        yield s
    assert _gone_within(s.pid, 10), f"simulator {s.pid} outlived its session"


# ---- the wire ---------------------------------------------------------------------------------------

def test_wire_carries_every_dtype_and_shape_exactly():
    rng = np.random.default_rng(SEED)
    arrays = {"i8": rng.integers(-128, 128, (5, 7), dtype=np.int8),
              "f32": rng.standard_normal((3, 4, 2)).astype(np.float32),
              "nan": np.array([np.nan, -0.0, np.inf], np.float32),
              "f8": rng.standard_normal(9).astype(ml_dtypes.float8_e4m3fn),
              "b": np.array([[True, False]]), "empty": np.zeros((0, 3), np.int32),
              "strided": np.arange(20, dtype=np.int64).reshape(4, 5)[:, ::2],  # not contiguous
              "scalar": np.array(3.5)}
    a, b = socket.socketpair()
    with a, b:
        send_message(a, {"op": "x", "n": np.int64(3)}, arrays)
        header, got = recv_message(b)
    assert header == {"op": "x", "n": 3}
    assert list(got) == list(arrays)
    for k, v in arrays.items():
        assert got[k].dtype == v.dtype and got[k].shape == v.shape, k
        assert got[k].tobytes() == np.ascontiguousarray(v).tobytes(), k


def test_wire_says_when_the_peer_ended_mid_message():
    a, b = socket.socketpair()
    with b:
        a.sendall((100).to_bytes(8, "little") + b'{"op"')  # a header cut short: the writer died
        a.close()
        with pytest.raises(PeerClosed, match="closed the connection after 5 of 100 bytes"):
            recv_message(b)


# ---- calls --------------------------------------------------------------------------------------------

def test_gemm_round_trip_is_bit_exact(chip):
    rng = np.random.default_rng(SEED)
    for m, n, k in ((4, 4, 4), (5, 7, 9), (1, 13, 3)):
        a = rng.integers(-128, 128, (m, k), dtype=np.int8)
        b = rng.integers(-128, 128, (k, n), dtype=np.int8)
        c, stats = chip.gemm(a, b)
        assert c.dtype == np.int32 and c.shape == (m, n)
        assert np.array_equal(c, golden.gemm_int8(a, b)), f"{m}x{n}x{k} differs from the golden; {REPRO}"
        assert stats.kernel == "gemm" and stats.cycles > 0 and stats.revision == "B1"


def test_gemm_takes_the_fused_epilogue(chip):
    """bias + per-column requantization (+ ReLU) on the chip before the store, once only through
    kernels.gemm: bit-exact against golden.epilogue; bad epilogue arguments are refused in this
    process with the kernel's own message, and the session goes on."""
    from golden.epilogue import calibrate_scales, gemm_epilogue

    rng = np.random.default_rng(SEED + 5)
    a = rng.integers(-128, 128, (6, 20), dtype=np.int8)
    b = rng.integers(-128, 128, (20, 7), dtype=np.int8)
    bias = rng.integers(-(2**12), 2**12, 7).astype(np.int32)
    scale = calibrate_scales(a, b, bias)
    for relu in (False, True):
        c, st = chip.gemm(a, b, bias=bias, scale=scale, relu=relu)
        assert c.dtype == np.int8 and np.array_equal(c, gemm_epilogue(a, b, bias, scale, relu)), f"relu={relu}; {REPRO}"
        assert st.epilogue == ("requant+relu" if relu else "requant")
    c, _ = chip.gemm(a, b, scale=0.01)  # one scale for every column, no bias
    assert np.array_equal(c, gemm_epilogue(a, b, np.zeros(7, np.int32), np.full(7, 0.01), False)), REPRO
    with pytest.raises(ValueError, match=r"the epilogue's scale must be one value or one per output column \(7,\)"):
        chip.gemm(a, b, scale=np.ones(3))
    with pytest.raises(ValueError, match="give scale= too"):
        chip.gemm(a, b, relu=True)
    assert np.array_equal(chip.gemm(a, b)[0], golden.gemm_int8(a, b))


def test_vector_kernels_match_their_goldens_bit_for_bit(chip):
    from golden.norms import layer_norm_rows, rms_norm_rows
    from golden.softmax import softmax_rows

    rng = np.random.default_rng(SEED + 1)
    lanes = chip.config.lanes
    x = (rng.standard_normal((3, 10)) * 3).astype(np.float32)
    g = (1 + 0.1 * rng.standard_normal(10)).astype(np.float32)
    bt = (0.5 * rng.standard_normal(10)).astype(np.float32)
    y, st = chip.softmax(x)
    assert np.array_equal(y.view(np.uint32), softmax_rows(x, lanes).view(np.uint32)), REPRO
    assert st.kernel == "softmax" and st.vector_busy_cycles > 0
    y, _ = chip.layer_norm(x, g, bt, 1e-5)
    assert np.array_equal(y.view(np.uint32), layer_norm_rows(x, g, bt, 1e-5, lanes).view(np.uint32)), REPRO
    y, _ = chip.rms_norm(x, g, 1e-6)
    assert np.array_equal(y.view(np.uint32), rms_norm_rows(x, g, 1e-6, lanes).view(np.uint32)), REPRO
    y, _ = chip.relu(x)
    assert np.array_equal(y, np.maximum(x, 0)), REPRO


def test_attention_and_lowp_gemm_come_back_as_float(chip):
    from golden.attention import AttentionPlan, attention_golden, quantize_attention

    rng = np.random.default_rng(SEED + 2)
    q, k, v = (rng.standard_normal((8, 4)).astype(np.float32) for _ in range(3))
    o, st = chip.attention(q, k, v, causal=True)
    cfg = chip.config
    plan = AttentionPlan(8, 4, cfg.lanes, cfg.rows, st.plan["bq"], st.plan["tk"], True)
    want = attention_golden(quantize_attention(q, k, v, "int8"), plan)
    assert np.array_equal(o.view(np.uint32), want.view(np.uint32)), REPRO
    a = rng.standard_normal((6, 20)).astype(np.float32)
    b = rng.standard_normal((20, 5)).astype(np.float32)
    c, st = chip.gemm_lowp(a, b, "int8-channel")
    assert c.dtype == np.float32 and st.recipe == "int8-channel"
    assert golden.sqnr_db(a.astype(np.float64) @ b, c.astype(np.float64)) > 30, REPRO


def test_registers_and_the_clock_stand_still_between_calls(chip):
    """No simulated cycle passes while the session waits for the next call: two perf reads a
    second apart are as many cycles apart as two back to back."""
    from rtl.csr_map import ID_MAGIC

    assert chip.read_csr("ID") == ID_MAGIC
    chip.write_csr("SCRATCH", 0x1234_5678)
    assert chip.read_csr("SCRATCH") == 0x1234_5678
    p0 = chip.perf()
    p1 = chip.perf()
    time.sleep(1.0)
    p2 = chip.perf()
    assert p2["now_cycles"] - p1["now_cycles"] == p1["now_cycles"] - p0["now_cycles"] > 0
    a = np.ones((4, 4), np.int8)
    chip.gemm(a, a)
    assert chip.perf()["MACS"] - p2["MACS"] == 64


def test_refused_arguments_raise_in_the_caller_and_the_session_goes_on(chip):
    a = np.ones((4, 4), np.int8)
    with pytest.raises(TypeError, match="must have dtype int8"):
        chip.gemm(a.astype(np.int16), a)
    with pytest.raises(ValueError, match="unknown quantization recipe 'int9'"):
        chip.gemm_lowp(a.astype(np.float32), a.astype(np.float32), "int9")
    with pytest.raises(ValueError, match="this chip has no e4m3 path"):
        chip.gemm_lowp(a.astype(np.float32), a.astype(np.float32), "mxfp8-e4m3-rceil")
    with pytest.raises(TypeError, match="expected a numpy array"):
        chip.softmax([[1.0, 2.0]])
    assert np.array_equal(chip.gemm(a, a)[0], np.full((4, 4), 4, np.int32))


# ---- endings ----------------------------------------------------------------------------------------

def test_watchdog_expiry_raises_with_the_dump_and_closes_the_session():
    require_sim("verilator")
    import firstlight

    with firstlight.open(rev="B1", config=SMALL_CHIP) as s:
        a = np.ones((16, 16), np.int8)
        with pytest.raises(ChipTimeout, match="watchdog") as e:
            s.gemm(a, a, budget_cycles=20)
        assert "STATUS" in e.value.dump["registers"] and e.value.dump["last_commands"]
        assert s.closed and _gone_within(s.pid, 10)
        with pytest.raises(SessionClosed, match="open a new one"):
            s.ping()


def test_two_sessions_at_once_and_a_killed_simulator_is_a_clear_error():
    """Two sessions are two processes; killing one's simulator is a SessionDied naming its log
    (a harness error), not a hang, and the other goes on. No simulator survives its session."""
    require_sim("verilator")
    import firstlight

    a = np.arange(16, dtype=np.int8).reshape(4, 4)
    with firstlight.open(rev="B1", config=SMALL_CHIP) as s1, firstlight.open(rev="A0", config=SMALL_CHIP) as s2:
        assert s1.pid != s2.pid and s1.pid in running_children() and s2.pid in running_children()
        assert (s1.revision, s2.revision) == ("B1", "A0")
        assert "FL-ME-001" in s2.errata["active"] and not s1.errata["active"]
        assert np.array_equal(s1.gemm(a, a)[0], s2.gemm(a, a)[0])
        os.kill(s1.pid, signal.SIGKILL)
        t0 = time.monotonic()
        with pytest.raises(SessionDied, match=r"died during gemm.*SIGKILL.*simulator log") as e:
            s1.gemm(a, a)
        assert time.monotonic() - t0 < 30 and isinstance(e.value, HarnessError)
        assert e.value.log is not None and e.value.log.exists()
        assert s1.closed
        assert np.array_equal(s2.gemm(a, a)[0], golden.gemm_int8(a, a)), "the other session goes on"
        with pytest.raises(SessionDied, match="SIGABRT"):
            s2.crash()
    for s in (s1, s2):
        assert _gone_within(s.pid, 10), f"simulator {s.pid} outlived its session"


def test_the_simulator_ends_with_its_callers_process(tmp_path):
    """A caller killed without closing (no atexit, no finally): its socket closes and the
    request loop ends the simulator; its folder is left, and the next open() removes it (issue
    38: "unnamed leftovers after interrupts go"), but not a folder kept for a diagnosis nor one
    of a live process."""
    from firstlight.session import FOLDER_PREFIX, KEPT_MARKER, reap_orphan_folders

    require_sim("verilator")
    script = textwrap.dedent(f"""
        import os, signal, sys
        sys.path.insert(0, {str(ROOT)!r})
        import firstlight
        from rtl.config import ChipConfig
        s = firstlight.open(rev="B1", config=ChipConfig(**{SMALL_CHIP.as_dict()!r}))
        print(s.pid, os.getpid(), flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    temp = tmp_path / "temp"
    temp.mkdir()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TMPDIR": str(temp)}
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600, env=env,
                         cwd=tmp_path)
    assert out.returncode == -signal.SIGKILL, out.stderr
    pid, caller = map(int, out.stdout.split()[:2])
    assert _gone_within(pid, 20), f"simulator {pid} outlived its killed caller"
    left = list(temp.glob(f"{FOLDER_PREFIX}{caller}-*"))
    assert len(left) == 1, sorted(p.name for p in temp.iterdir())
    kept = temp / f"{FOLDER_PREFIX}{caller}-kept"
    kept.mkdir()
    (kept / KEPT_MARKER).write_text("SessionDied: ...")
    mine = temp / f"{FOLDER_PREFIX}{os.getpid()}-live"
    mine.mkdir()
    assert reap_orphan_folders(temp) == left
    assert not left[0].exists() and kept.exists() and mine.exists()


def test_icarus_serves_a_session_too():
    require_sim("icarus")
    import firstlight

    rng = np.random.default_rng(SEED + 3)
    a = rng.integers(-128, 128, (4, 5), dtype=np.int8)
    b = rng.integers(-128, 128, (5, 3), dtype=np.int8)
    with firstlight.open(rev="B1", sim="icarus", config=SMALL_CHIP) as s:
        assert np.array_equal(s.gemm(a, b)[0], golden.gemm_int8(a, b)), REPRO
    assert _gone_within(s.pid, 10)


def test_submit_raises_the_error_its_own_stream_caused(chip):
    """issue 38: chip.submit([0xFFFF_FFFF_FFFF_FFFF]) returned as if fine and the next innocent
    call raised BAD_OPCODE; now the submit that caused it raises, and the chip goes on."""
    with pytest.raises(ChipError, match="BAD_OPCODE"):
        chip.submit([0xFFFF_FFFF_FFFF_FFFF])
    a = np.arange(16, dtype=np.int8).reshape(4, 4)
    c, _ = chip.gemm(a, a)
    assert np.array_equal(c, a.astype(np.int32) @ a.astype(np.int32))
    with pytest.raises(ValueError, match="one 128-bit word"):
        chip.submit([1 << 128])
    chip.submit([isa.nop(), isa.nop(tag=7)])  # a real command is accepted (it was refused as over 64 bits)


def test_csr_misuse_is_the_python_exception_a_user_expects(chip):
    """issue 38: a write truncated or ignored in silence, a cocotb ValueError, a SessionError
    wrapping a KeyError: each is refused in this process, before the simulator is asked."""
    with pytest.raises(ValueError, match="32-bit register"):
        chip.write_csr("SCRATCH", 2**40)
    with pytest.raises(ValueError, match="ID is read-only"):
        chip.write_csr("ID", 1)
    with pytest.raises(ValueError, match="no CSR at address 9999"):
        chip.read_csr(9999)
    with pytest.raises(KeyError, match="no CSR named 'NOPE'"):
        chip.read_csr("NOPE")
    with pytest.raises(TypeError):
        chip.write_csr("SCRATCH", 1.5)
    a = np.arange(16, dtype=np.int8).reshape(4, 4)
    with pytest.raises(ValueError, match="budget_cycles is a positive number"):  # it closed the session
        chip.gemm(a, a, budget_cycles=0)
    chip.write_csr("scratch", 0x1234_5678)  # and a good one still works, by name in any case
    assert chip.read_csr("SCRATCH") == 0x1234_5678 == chip.read_csr(12)


@pytest.mark.parametrize("kw, exc, needle", [
    ({"errata": {"FL-XX-1": "off"}}, ValueError, "unknown erratum 'FL-XX-1'"),
    ({"errata": {"FL-ME-002": "maybe"}}, ValueError, "must be one of"),
    ({"board": {"bandwdith": 2}}, TypeError, "board has no field 'bandwdith'"),
    ({"board": 3}, TypeError, "board is an rtl.board.BoardConfig"),
])
def test_open_refuses_bad_arguments_before_a_simulator_starts(kw, exc, needle, tmp_path):
    """issue 38: an unknown erratum started the simulator and died 1.8 s later as SessionDied,
    leaving a folder; board={...} was an AttributeError."""
    import firstlight

    before = running_children()
    with pytest.raises(exc, match=needle):
        firstlight.open(rev="B1", work_dir=tmp_path / "w", **kw)
    assert running_children() == before and not (tmp_path / "w").exists()


def test_a_closed_session_leaves_no_folder_and_a_dead_simulators_is_kept_marked():
    """Its folder (named for this process) goes with a clean close; a simulator that died keeps
    its folder for the log the error names, marked so that no later open() reaps it."""
    import tempfile

    import firstlight
    from firstlight.session import FOLDER_PREFIX, KEPT_MARKER

    require_sim("verilator")
    temp = Path(tempfile.gettempdir())
    mine = lambda: set(temp.glob(f"{FOLDER_PREFIX}{os.getpid()}-*"))  # noqa: E731
    before = mine()
    with firstlight.open(rev="B1", config=SMALL_CHIP) as s:
        assert len(mine() - before) == 1
        s.ping()
    assert mine() == before, "a cleanly closed session left its folder"
    s = firstlight.open(rev="B1", config=SMALL_CHIP)
    with pytest.raises(SessionDied):
        s.crash()
    (kept,) = mine() - before
    assert "SIGABRT" in (kept / KEPT_MARKER).read_text() and (kept / "sim.log").exists()
