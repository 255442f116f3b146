"""Sessions: one long-lived simulator process serving kernel calls from ordinary Python.

::

    import firstlight
    with firstlight.open(rev="B0", array="4x4") as chip:
        c, stats = chip.gemm(a, b)          # int8 numpy in, int32 numpy out, KernelStats
        y, stats = chip.softmax(x)
        y, stats = chip.rmsnorm(x, gamma, eps=1e-6)   # any tile-language kernel, by its name
        outs, stats = chip.run_kernel("layernorm", x=x, gamma=g, beta=b)
        print(chip.read_csr("STATUS"), chip.perf()["CYCLES"])

:func:`open` builds the chip (cached), starts one simulator process and returns a
:class:`Session`. The process runs :func:`firstlight.jobs.session.serve_session` through
:func:`cosim.jobs.run_job`, the path every job takes, and each call awaits the same kernel
function a ``firstlight run`` job awaits: there is one way to run a kernel. Arrays cross as raw
buffers over a Unix socket (:mod:`firstlight.session.wire`).

Every tile-language kernel (kernels/tile/spec.py, ``kernels.tile.spec.registry()``) is a method:
:meth:`Session.run_kernel` by name, and an attribute per kernel (``chip.silu(x)``,
``chip.layernorm(x, gamma, beta, eps=1e-5)``, a kernel added through FIRSTLIGHT_KERNEL_MODULES
too) generated from the list the simulator process sends when it starts (``chip.kernels``): the
registry of the process that runs them. ``softmax``, ``layer_norm``, ``rms_norm`` and
``activation`` are the same path under their older names and signatures.

Errors:

* :class:`SessionDied` (a :class:`cosim.build.HarnessError`): the simulator process ended under
  the session (a crash, a kill): the message names its log and its last relevant lines. The
  session is closed; open a new one.
* :class:`ChipTimeout`: the watchdog expired; ``.dump`` holds the register dump. The session is
  closed (a hung chip's state is unknown).
* :class:`ChipError`: the chip set ERR; ``.dump`` holds the dump. The chip was soft-reset and the
  session goes on.
* ``ValueError`` / ``TypeError``: the kernel refused its arguments; the session goes on.

Closing a session (or leaving the ``with`` block, or the interpreter exiting, or the caller's
process being killed: the socket closes and the request loop returns) ends its simulator
process. Two sessions are two processes and do not share anything.
"""

from __future__ import annotations

import atexit
import inspect
import os
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
import uuid
import weakref
from pathlib import Path

import numpy as np

from cosim.build import HarnessError

from .wire import PeerClosed, recv_message, send_message

__all__ = ["open", "Session", "SessionError", "SessionDied", "SessionClosed", "ChipTimeout", "ChipError"]



def _csr(reg):
    """The rtl.csr_map.Register a session call names, checked here (not in the simulator)."""
    from rtl.csr_map import REGISTERS, register

    if isinstance(reg, str):
        return register(reg)  # KeyError with the known names
    if isinstance(reg, bool) or not isinstance(reg, (int, np.integer)):
        raise TypeError(f"a CSR is a name or an address, not {type(reg).__name__}")
    for r in REGISTERS:
        if r.addr == int(reg):
            return r
    raise ValueError(f"no CSR at address {int(reg)}; the registers are at "
                     f"{', '.join(f'{r.name}={r.addr}' for r in REGISTERS[:6])}, ... (rtl/csr_map.py)")

class SessionError(HarnessError):
    """The session's harness failed (not a verdict on the chip)."""


class SessionDied(SessionError):
    """The simulator process ended under the session. ``log``: its log (kept), ``returncode``."""

    def __init__(self, message: str, log: Path | None = None, returncode: int | None = None):
        super().__init__(message, log)
        self.log, self.returncode = log, returncode


class SessionClosed(SessionError):
    """A call on a session that is closed (by the caller, a watchdog or its simulator's death)."""


class ChipTimeout(RuntimeError):
    """The chip's watchdog expired during a call; ``dump`` is the register dump."""

    def __init__(self, message: str, dump: dict):
        super().__init__(message)
        self.dump = dump


class ChipError(RuntimeError):
    """The chip set ERR during a call; ``dump`` is the register dump (the chip was soft-reset)."""

    def __init__(self, message: str, dump: dict):
        super().__init__(message)
        self.dump = dump


_LIVE: weakref.WeakSet = weakref.WeakSet()


@atexit.register
def _close_all() -> None:  # the interpreter is exiting: no simulator may outlive it
    for s in list(_LIVE):
        s.close(timeout_s=5.0)


FOLDER_PREFIX = "firstlight-session-"  # + the pid of the process that opened it
KEPT_MARKER = "KEPT"  # in a session folder kept for a diagnosis


def reap_orphan_folders(root: Path | None = None) -> list[Path]:
    """Remove the session folders (in ``root``, the system temp directory by default) of processes
    that no longer exist and that were not kept for a diagnosis (no :data:`KEPT_MARKER`): what a
    caller killed before it could close its session left. Returns what it removed."""
    gone = []
    for d in Path(root or tempfile.gettempdir()).glob(f"{FOLDER_PREFIX}*"):
        pid = d.name[len(FOLDER_PREFIX):].split("-", 1)[0]
        if not pid.isdigit() or _pid_alive(int(pid)) or (d / KEPT_MARKER).exists() or not d.is_dir():
            continue
        shutil.rmtree(d, ignore_errors=True)
        gone.append(d)
    return gone


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's: alive
        return True
    return True


def _variant(rev: str, array, config, formats, vector, sram_depth, board):
    from dataclasses import replace

    from cosim.build import Variant
    from rtl.board import BoardConfig
    from rtl.config import ChipConfig
    from rtl.revisions import REVISIONS

    name = str(rev).strip().upper()
    if name not in REVISIONS:
        raise ValueError(f"unknown revision {rev!r}; known revisions: {', '.join(REVISIONS)}")
    if config is None:
        config = ChipConfig.parse_array(array) if isinstance(array, str) else ChipConfig()
    elif not isinstance(config, ChipConfig):
        raise TypeError(f"config must be an rtl.config.ChipConfig, not {type(config).__name__}")
    if formats is not None:
        config = replace(config, formats=tuple(formats))
    if vector is not None:
        config = replace(config, vector=bool(vector))
    if sram_depth is not None:
        config = config.with_sram_depth(sram_depth)  # as --sram-depth: every SRAM, the trace buffer too
    if isinstance(board, dict):  # the board's fields by name, as a TOML table or JSON would give them
        from dataclasses import fields

        known = {f.name for f in fields(BoardConfig)}
        unknown = sorted(set(board) - known)
        if unknown:
            raise TypeError(f"board has no field {', '.join(map(repr, unknown))}; its fields: {', '.join(sorted(known))}")
        board = BoardConfig(**board)
    elif board is not None and not isinstance(board, BoardConfig):
        raise TypeError(f"board is an rtl.board.BoardConfig or a dict of its fields, not {type(board).__name__}")
    board = board or BoardConfig()
    board.resolve(config)  # refuses a board that does not fit the chip, before anything is built
    return Variant(config=config, revision=name, board=board)


def open(rev: str | None = None, sim: str = "verilator", array: str = "4x4", *, config=None, formats=None,
         vector: bool | None = None, sram_depth: int | None = None, board=None, errata: dict | list | None = None,
         watchdog_cycles: int | None = None, work_dir: Path | None = None, interpret: bool = False) -> "Session":
    """Build (cached) and start a chip; return the open :class:`Session` (a context manager).

    Parameters
    ----------
    rev : str
        Silicon revision ("A0", "A1", "B0", "B1"; default A0, B1 with ``interpret``); the software
        reads it back from REV and applies the errata mitigations for it (``errata``: a policy
        such as ``{"FL-ME-002": "off"}``).
    sim : {"verilator", "icarus"}
    interpret : bool
        Serve the calls from the interpreter (interp/, docs/interpret.md) in a thread of this
        process instead of a simulator: no build, the RTL's bits, no cycles (``KernelStats.cycles``
        is 0). Revisions without defects only (B1); ``sim`` is not used.
    array : str
        ``"ROWSxCOLS"``; or pass a whole ``config`` (:class:`rtl.config.ChipConfig`). ``formats``,
        ``vector`` and ``sram_depth`` then change it (an int8-only chip builds and runs faster).
    watchdog_cycles : int, optional
        The default cycle budget of every wait (``Device.watchdog_cycles``).
    work_dir : path, optional
        Where the simulator runs and logs (kept). By default a temporary folder, removed when
        the session closes cleanly and kept (named in the error) when the simulator died;
        one left by a process killed before it closed is removed by the next ``open``.
    """
    return Session(rev=rev, sim=sim, array=array, config=config, formats=formats, vector=vector,
                   sram_depth=sram_depth, board=board, errata=errata, watchdog_cycles=watchdog_cycles,
                   work_dir=work_dir, interpret=interpret)


class Session:
    """An open chip in its own simulator process; see :func:`open` and the module docstring.

    Attributes
    ----------
    revision : str
        From the chip's REV register.
    config : rtl.config.ChipConfig
        From the chip's CAPS registers.
    errata : dict
        ``active`` (the mitigations in force), ``status`` per erratum, ``warnings``.
    pid : int
        The simulator process.
    calls : int
        Calls served so far.
    last_handler_s : float or None
        Wall time the last call spent in the simulator process's handler (the kernel, its host
        side included); a round trip minus this is the session's own overhead.
    kernels : dict or None
        The tile-language kernels the simulator process can run, by name: ``inputs``,
        ``outputs``, ``params`` (what a call may pass, with ``default`` and ``help``) and
        ``from_shape`` (taken from the shapes of its inputs); None if its registry failed to load
        (``kernels_error`` says why; the other calls still work).
    """

    def __init__(self, *, rev=None, sim="verilator", array="4x4", config=None, formats=None, vector=None,
                 sram_depth=None, board=None, errata=None, watchdog_cycles=None, work_dir=None, interpret=False):
        from cosim.toolchain import SIMULATORS, find_simulator
        from workarounds import parse_policy

        self.interpreted = bool(interpret)
        if not self.interpreted:
            if sim not in SIMULATORS:
                raise ValueError(f"unknown simulator {sim!r}; accepted: {', '.join(SIMULATORS)}")
            find_simulator(sim)  # SimulatorMissing says how to install it, before the build
        self.variant = _variant(rev or ("B1" if self.interpreted else "A0"), array, config, formats, vector,
                                sram_depth, board)
        if self.interpreted:
            from interp import MODELLED_REVISIONS

            if self.variant.revision not in MODELLED_REVISIONS:
                raise ValueError(f"interpret=True models revisions without defects ({', '.join(MODELLED_REVISIONS)}), "
                                 f"not {self.variant.revision}: its defects change what the chip computes, and the "
                                 f"interpreter would compute the fixed chip instead; open it on a simulator "
                                 "(interpret=False)")
        self.sim = "interpreter" if self.interpreted else sim
        if errata is not None and not isinstance(errata, (dict, list, tuple)):
            raise TypeError(f"errata is a policy such as {{'FL-ME-002': 'off'}} or ['FL-ME-002=off'], "
                            f"not {type(errata).__name__}")
        # checked here, like the CLI's --errata-policy: an unknown erratum must not start a simulator
        self._policy = parse_policy(list(errata) if isinstance(errata, tuple) else errata)
        if watchdog_cycles is not None and (not isinstance(watchdog_cycles, int) or watchdog_cycles < 1):
            raise ValueError(f"watchdog_cycles must be a positive integer, not {watchdog_cycles!r}")
        self._lock = threading.RLock()
        self._sock: socket.socket | None = None
        self._thread: threading.Thread | None = None
        self._outcome: dict = {}
        self._closed = False
        self.calls = 0
        self.last_handler_s: float | None = None
        self.pid = self.pgid = None
        self._work_given = work_dir is not None
        self._work = Path(work_dir) if work_dir else None
        if self._work is None and not self.interpreted:
            # a folder named for this process: if it is killed before closing (no atexit runs), the
            # next open() in any process removes it (reap_orphan_folders)
            reap_orphan_folders()
            self._work = Path(tempfile.mkdtemp(prefix=f"{FOLDER_PREFIX}{os.getpid()}-"))
        self._start(watchdog_cycles)
        _LIVE.add(self)

    # ---- life cycle ------------------------------------------------------------------------------
    def _start(self, watchdog_cycles) -> None:
        from cosim.jobs import run_job
        from firstlight.jobs.session import serve_session

        token = uuid.uuid4().hex
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        if sys.platform.startswith("linux"):
            address = f"@firstlight-session-{token}"  # the abstract namespace: no file, no path length limit
            listener.bind("\0" + address[1:])
        else:  # a short path: socket paths are limited to about 100 bytes
            sockdir = tempfile.mkdtemp(prefix="fls-", dir="/tmp")
            address = os.path.join(sockdir, "s")
            listener.bind(address)
            weakref.finalize(self, shutil.rmtree, sockdir, True)
        listener.listen(1)
        listener.settimeout(0.2)
        kwargs = {"address": address, "token": token, "errata_policy": self._policy,
                  "watchdog_cycles": watchdog_cycles}

        def run():
            try:
                if self.interpreted:  # the same request loop, on the interpreter, in this thread
                    from interp.jobs import run_job as interpret_job

                    self._outcome["result"] = interpret_job(serve_session, kwargs, config=self.variant.config,
                                                            board=self.variant.resolved_board,
                                                            revision=self.variant.revision).value
                    return
                self._outcome["result"] = run_job(serve_session, kwargs, variant=self.variant, sim=self.sim,
                                                  work_dir=self._work)
                if not self._work_given:  # ended cleanly: nothing in it is needed
                    shutil.rmtree(self._work, ignore_errors=True)
            except BaseException as e:  # noqa: BLE001 - handed to the caller's thread
                self._outcome["error"] = e
                if self._work is not None and not self._work_given and self._work.exists():
                    # kept for its log, which the error names; never reaped
                    (self._work / KEPT_MARKER).write_text(f"{type(e).__name__}: {e}\n")

        self._thread = threading.Thread(target=run, name="firstlight-session", daemon=True)
        self._thread.start()
        try:
            while True:  # the build (cached or minutes), the simulator's start-up, Device.open
                try:
                    self._sock, _ = listener.accept()
                    break
                except socket.timeout:
                    if not self._thread.is_alive():
                        raise self._ended_error("before it connected") from None
        except BaseException:
            self._closed = True
            self._kill()
            raise
        finally:
            listener.close()
        self._sock.settimeout(None)
        try:
            hello, _ = recv_message(self._sock)
        except (PeerClosed, OSError):
            self._closed = True
            raise self._ended_error("while it opened the device") from None
        if hello.get("token") != token:
            self._closed = True
            self._kill()
            raise SessionError("a process other than this session's simulator connected to its socket")
        from rtl.config import ChipConfig

        self.pid, self.pgid = hello["pid"], hello["pgid"]
        self.revision = hello["revision"]
        self.config = ChipConfig(**{**hello["config"], "formats": tuple(hello["config"]["formats"])})
        self.board = hello["board"]
        self.errata = hello["errata"]
        self.kernels, self.kernels_error = hello.get("kernels"), hello.get("kernels_error")

    def _ended_error(self, when: str) -> SessionError:
        """The error for a simulator that ended (the run_job thread has finished or is finishing)."""
        self._thread.join(30)
        err = self._outcome.get("error")
        if err is None and "result" in self._outcome:
            return SessionDied(f"the {self.sim} simulator of this session ended {when} without an error "
                               "(its request loop returned)")
        if err is None:
            return SessionDied(f"the {self.sim} simulator of this session stopped answering {when}")
        if isinstance(err, HarnessError) and not hasattr(err, "records"):
            return err  # a build failure says what it is
        log = getattr(err, "log", None)
        return SessionDied(f"the {self.sim} simulator of this session died {when}: {err}", log,
                           getattr(err, "returncode", None))

    def _kill(self) -> None:
        """Stop the simulator process group now (SIGTERM, then SIGKILL). Interpreted, the loop
        is a thread of this process: closing its socket ends it (no signal: the pid is ours)."""
        if self._thread is None:
            return
        if self.interpreted:
            if self._sock is not None:
                self._sock.close()
            self._thread.join(5)
            return
        pg = self.pgid if self.pgid == self.pid else None
        for sig in (signal.SIGTERM, signal.SIGKILL):
            if not self._thread.is_alive():
                break
            if self.pid is not None:
                try:
                    os.killpg(pg, sig) if pg else os.kill(self.pid, sig)
                except (ProcessLookupError, PermissionError):
                    pass
            else:  # not connected yet: the only handle is the run_job thread's registered child
                self._stop_unconnected(sig)
            self._thread.join(5)

    def _stop_unconnected(self, sig) -> None:
        """Before the hello there is no pid: stop the simulator children this thread started."""
        from cosim.build import running_children

        for pid in running_children():
            if pid not in _other_session_pids(self):
                try:
                    os.killpg(pid, sig)
                except (ProcessLookupError, PermissionError):
                    pass

    def close(self, timeout_s: float = 30.0) -> None:
        """End the session: the request loop returns and the simulator exits (killed if it does
        not within ``timeout_s``). Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            _LIVE.discard(self)
            if self._sock is not None:
                try:
                    self._sock.settimeout(timeout_s)
                    send_message(self._sock, {"op": "close"})
                    recv_message(self._sock)
                except (OSError, ConnectionError):
                    pass
                self._sock.close()
            if self._thread is not None:
                self._thread.join(timeout_s)
                if self._thread.is_alive():
                    self._kill()

    @property
    def closed(self) -> bool:
        return self._closed

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else "in this process" if self.interpreted else f"pid {self.pid}"
        return f"<firstlight.Session {self.sim} {self.variant.config.rows}x{self.variant.config.cols} " \
               f"rev {getattr(self, 'revision', '?')}, {state}>"

    # ---- one call --------------------------------------------------------------------------------
    def call(self, request: str, arrays: dict[str, np.ndarray] | None = None, /, **args):
        """One request: ``(values dict, arrays dict, KernelStats or None)``. The typed methods
        below are what users call; this is their one path."""
        budget = args.get("budget_cycles")
        if budget is not None and (isinstance(budget, bool) or not isinstance(budget, (int, np.integer)) or budget < 1):
            raise ValueError(f"budget_cycles is a positive number of cycles (or None: the watchdog's default), "
                             f"not {budget!r}")
        if request == "crash" and self.interpreted:
            raise ValueError("an interpreted session runs in this process: crash would end the caller, not a "
                             "simulator; it is for sessions on a simulator")
        with self._lock:
            if self._closed:
                raise SessionClosed("this session is closed; open a new one with firstlight.open(...)")
            try:
                send_message(self._sock, {"op": request, "args": args}, arrays)
                reply, out = recv_message(self._sock)
            except KeyboardInterrupt:
                self._closed = True  # the stream is mid-message: nothing more can be said on it
                self._kill()
                raise
            except (PeerClosed, OSError, ConnectionError) as e:
                self._closed = True
                _LIVE.discard(self)
                err = self._ended_error(f"during {request}")
                raise err from e
            self.calls += 1
            self.last_handler_s = reply.get("handler_s")
        if reply["ok"]:
            stats = None
            if reply.get("stats") is not None:
                from kernels.stats import KernelStats

                stats = KernelStats(**reply["stats"])
            return reply.get("value") or {}, out, stats
        kind, msg = reply["kind"], reply.get("message", "")
        if kind == "argument":
            raise {"TypeError": TypeError, "IndexError": IndexError}.get(reply.get("error"), ValueError)(msg)
        if kind == "chip_error":
            raise ChipError(msg, reply.get("dump", {}))
        if kind == "timeout":
            self.close()
            raise ChipTimeout(msg + "\n(the session is closed: the chip hung; open a new session)", reply.get("dump", {}))
        raise SessionError(f"the session's request loop failed in {request}: {msg}\n{reply.get('traceback', '')}")

    # ---- kernels -------------------------------------------------------------------------------
    def gemm(self, a: np.ndarray, b: np.ndarray, *, bias: np.ndarray | None = None, scale=None, relu: bool = False,
             k_chunk: int | None = None, budget_cycles: int | None = None, double_buffer: bool = True):
        """``a @ b`` for int8 ``a`` (M, K) and ``b`` (K, N): ``(int32 (M, N), KernelStats)``
        (kernels.gemm.gemm: wrap-around, bit-exact against golden.gemm_int8). With ``scale`` (one
        value or one per column) the fused epilogue runs on the chip before each store: int32
        ``bias`` (N,) added (default none), each column requantized to int8 by its scale
        (``relu``: clamped at 0), bit-exact against golden.epilogue.gemm_epilogue: ``(int8 (M,
        N), KernelStats)``. ``bias`` or ``relu`` without ``scale`` is refused."""
        arrays = {"a": _arr(a), "b": _arr(b)}
        if scale is None:
            if bias is not None or relu:
                raise ValueError("bias and relu belong to the GEMM's requantizing epilogue: give scale= too (one "
                                 "value or one per output column), or leave them out for the int32 GEMM")
        else:
            from kernels.epilogue import Epilogue

            n = np.shape(b)[1] if np.ndim(b) == 2 else 0
            epi = Epilogue.checked(n, bias, scale, relu)  # the same refusals as kernels.gemm, before the simulator
            arrays.update(bias=epi.bias, scale=epi.scale)
        _, out, st = self.call("gemm", arrays, k_chunk=k_chunk, budget_cycles=budget_cycles,
                               double_buffer=double_buffer, relu=bool(relu))
        return out["c"], st

    def gemm_lowp(self, a: np.ndarray, b: np.ndarray, recipe: str = "int8-channel", *, k_chunk: int | None = None,
                  budget_cycles: int | None = None):
        """float32 ``a @ b`` quantized with ``recipe`` (golden.quant.RECIPES; kernels.lowp):
        ``(float32 (M, N), KernelStats)``."""
        from golden.quant import recipe as check_recipe

        check_recipe(recipe)
        _, out, st = self.call("gemm_lowp", {"a": _arr(a), "b": _arr(b)}, recipe=recipe, k_chunk=k_chunk,
                               budget_cycles=budget_cycles)
        return out["c"], st

    def softmax(self, x: np.ndarray, *, budget_cycles: int | None = None):
        """Row softmax of fp32 (R, C) on the vector unit: ``(fp32 (R, C), KernelStats)`` (the
        tile-language kernel ``softmax``, through :meth:`run_kernel`)."""
        return self.run_kernel("softmax", _arr(x, "x"), budget_cycles=budget_cycles)

    def layer_norm(self, x, gamma, beta, eps: float = 1e-5, *, budget_cycles: int | None = None):
        """LayerNorm of every row of fp32 (R, C), ``gamma``/``beta`` (C,): the kernel ``layernorm``."""
        return self.run_kernel("layernorm", _arr(x, "x"), _arr(gamma, "gamma"), _arr(beta, "beta"), eps=float(eps),
                               budget_cycles=budget_cycles)

    def rms_norm(self, x, gamma, eps: float = 1e-6, *, budget_cycles: int | None = None):
        """RMSNorm of every row of fp32 (R, C), ``gamma`` (C,): the kernel ``rmsnorm``."""
        return self.run_kernel("rmsnorm", _arr(x, "x"), _arr(gamma, "gamma"), eps=float(eps),
                               budget_cycles=budget_cycles)

    def attention(self, q, k, v, *, causal: bool = False, recipe: str = "int8", budget_cycles: int | None = None):
        """Flash attention of fp32 (S, D) q, k, v (kernels.attention): ``(fp32 (S, D), KernelStats)``."""
        _, out, st = self.call("attention", {"q": _arr(q), "k": _arr(k), "v": _arr(v)}, causal=bool(causal),
                               recipe=recipe, budget_cycles=budget_cycles)
        return out["o"], st

    def elementwise(self, op: str, a, b=None, *, broadcast: str = "none", budget_cycles: int | None = None):
        """``op(a, b)`` on the vector unit (kernels.vector.elementwise)."""
        arrays = {"a": _arr(a)} if b is None else {"a": _arr(a), "b": _arr(b)}
        _, out, st = self.call("elementwise", arrays, op=op, broadcast=broadcast, budget_cycles=budget_cycles)
        return out["y"], st

    def relu(self, x, *, budget_cycles: int | None = None):
        return self.elementwise("relu", x, budget_cycles=budget_cycles)

    def activation(self, x, kind: str, *, budget_cycles: int | None = None):
        """SiLU (``"silu"``) or tanh-GELU (``"gelu"``) on the vector unit: the kernel of that name."""
        from golden.activations import ACTIVATIONS

        if kind not in ACTIVATIONS:
            raise ValueError(f"kind must be one of {', '.join(ACTIVATIONS)}, got {kind!r}")
        return self.run_kernel(kind, _arr(x, "x"), budget_cycles=budget_cycles)

    def reduce(self, x, op: str, *, budget_cycles: int | None = None):
        """Row reductions of int32 (R, C): SUM (wrapping), MAX, MIN (kernels.reduce)."""
        _, out, st = self.call("reduce", {"x": _arr(x)}, op=op, budget_cycles=budget_cycles)
        return out["y"], st

    # ---- the tile-language kernels, generated from the registry -------------------------------
    def run_kernel(self, name: str, /, *arrays: np.ndarray, budget_cycles: int | None = None, **inputs_and_params):
        """Run the tile-language kernel ``name`` (``chip.kernels``): its input arrays by position
        (in the order of its declaration) or by tensor name, its parameters by name; its shape
        parameters come from its inputs' shapes (KernelSpec.shape_params: ``rows`` and ``cols`` of
        the first input for the row kernels). Returns ``(output, KernelStats)``, the output
        an array for a kernel with one, else a dict by tensor name. The simulator process checks
        the arrays (dtype, shape) and the parameters (range) and runs ``kernels.tile.spec.run_spec``,
        the function ``firstlight run <kernel>`` runs; a refusal is a ValueError or TypeError
        naming what is accepted."""
        k = self._kernel_info(name)
        inputs, params = k["inputs"], k["params"]
        if len(arrays) > len(inputs):
            raise TypeError(f"kernel {name} takes {len(inputs)} input array(s) ({', '.join(inputs)}), "
                            f"{len(arrays)} given")
        ins, ps = dict(zip(inputs, arrays)), {}
        for key, v in inputs_and_params.items():
            if key in params:
                ps[key] = v
            elif key in inputs:
                if key in ins:
                    raise TypeError(f"kernel {name} got its input {key} twice: by position and by name")
                ins[key] = v
            elif key in k["from_shape"]:
                raise TypeError(f"kernel {name} takes {key} from the shape of "
                                f"{k.get('shape_of', {}).get(key, inputs[0])}; do not pass it")
            else:
                raise TypeError(f"kernel {name} has no input or parameter {key!r}; " + _accepted(name, k))
        missing = [n for n in inputs if n not in ins]
        if missing:
            raise TypeError(f"kernel {name} needs the input(s) {', '.join(missing)}; " + _accepted(name, k))
        _, out, st = self.call("kernel", {n: _arr(ins[n], n) for n in inputs}, name=name, params=ps,
                               budget_cycles=budget_cycles)
        return (out[k["outputs"][0]] if len(k["outputs"]) == 1 else out), st

    def _kernel_info(self, name: str) -> dict:
        kernels = self.__dict__.get("kernels")
        if kernels is None:
            raise SessionError("this session's simulator process could not load the tile-language kernels: "
                               f"{self.__dict__.get('kernels_error') or 'the session is not open'}")
        if name not in kernels:
            raise ValueError(f"no tile-language kernel named {name!r}; this session's kernels: {', '.join(kernels)}")
        return kernels[name]

    def __getattr__(self, name: str):
        """A method per tile-language kernel the simulator can run (those not shadowed by a method
        of the class): ``chip.silu(x)`` is ``chip.run_kernel("silu", x)``."""
        kernels = self.__dict__.get("kernels") or {}
        if name.startswith("_") or name not in kernels:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}"
                                 + (f"; its tile-language kernels: {', '.join(kernels)}" if kernels else ""))
        return _kernel_method(self, name, kernels[name])

    def __dir__(self):
        return sorted(set(super().__dir__()) | set(self.__dict__.get("kernels") or ()))

    # ---- the device ----------------------------------------------------------------------------
    def read_csr(self, reg: str | int) -> int:
        """A register by name (rtl/csr_map.py, any case) or address: KeyError for a name that is
        none, ValueError for an address no register has."""
        return self.call("read_csr", reg=_csr(reg).name)[0]["value"]

    def write_csr(self, reg: str | int, value: int) -> None:
        """Write a 32-bit ``value``; a read-only register or a value that does not fit is a
        ValueError (the chip would ignore or truncate it)."""
        r = _csr(reg)
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise TypeError(f"a CSR value is an integer, not {type(value).__name__}")
        if not 0 <= int(value) < 1 << 32:
            raise ValueError(f"{r.name} is a 32-bit register: {int(value):#x} does not fit (0 to 0xFFFFFFFF)")
        from rtl.csr_map import Access

        if r.access is Access.RO:
            raise ValueError(f"{r.name} is read-only: the chip ignores a write to it")
        self.call("write_csr", reg=r.name, value=int(value))

    def perf(self) -> dict[str, int]:
        """Every 64-bit perf counter by name (rtl.csr_map.PERF_COUNTERS), plus ``now_cycles``:
        the testbench clock's cycles since reset."""
        v = self.call("perf")[0]
        return {**v["counters"], "now_cycles": v["now_cycles"]}

    def submit(self, commands, *, budget_cycles: int | None = None, wait: bool = True) -> None:
        """Queue raw command words (rtl.isa constructors) through the errata stream passes and,
        with ``wait``, wait for idle under the watchdog and raise :class:`ChipError` if the stream
        set ERR (without ``wait``, the next call that checks ERR reports it)."""
        from rtl.isa import COMMAND_BITS

        words = [int(c) for c in commands]
        bad = next((w for w in words if not 0 <= w < 1 << COMMAND_BITS), None)
        if bad is not None:  # (it said 64 bits and refused every command the rtl.isa constructors make)
            raise ValueError(f"a command is one {COMMAND_BITS}-bit word (rtl.isa constructors make them), not {bad:#x}")
        self.call("submit", commands=words, budget_cycles=budget_cycles, wait=wait)

    def ping(self) -> float:
        """One empty round trip; returns its wall time in seconds."""
        t0 = time.perf_counter()
        self.call("ping")
        return time.perf_counter() - t0

    def crash(self, how: str = "abort") -> None:
        """Make the simulator process end abruptly (SIGABRT, or SIGKILL with ``how="kill"``): for
        the tests of what a caller sees when a simulator dies."""
        self.call("crash", how=how)


def _arr(x, name: str | None = None) -> np.ndarray:
    if not isinstance(x, np.ndarray):
        raise TypeError(f"{name + ': ' if name else ''}expected a numpy array, got {type(x).__name__} "
                        "(convert with np.asarray)")
    return x


def _accepted(name: str, k: dict) -> str:
    """What kernel ``name`` accepts, for an error message."""
    by: dict[str, list[str]] = {}
    for param, tensor in k.get("shape_of", {}).items():
        by.setdefault(tensor, []).append(param)
    shape = "".join(f"; {', '.join(ps)} from the shape of {t}" for t, ps in by.items())
    return (f"its inputs: {', '.join(k['inputs'])} (numpy arrays{shape}); its parameters: "
            + (", ".join(k["params"]) or "none"))


def _kernel_method(session: Session, name: str, k: dict):
    """``session.run_kernel(name, ...)`` as a function with the kernel's own signature and help."""
    def method(*arrays, budget_cycles: int | None = None, **inputs_and_params):
        return session.run_kernel(name, *arrays, budget_cycles=budget_cycles, **inputs_and_params)

    P = inspect.Parameter
    method.__signature__ = inspect.Signature(
        [P(n, P.POSITIONAL_OR_KEYWORD) for n in k["inputs"]]
        + [P(n, P.KEYWORD_ONLY, default=v["default"]) for n, v in k["params"].items()]
        + [P("budget_cycles", P.KEYWORD_ONLY, default=None)])
    method.__name__ = name
    method.__qualname__ = f"Session.{name}"
    method.__doc__ = (f"{k['summary']} (tile-language kernel {name}, {k['module']}; see Session.run_kernel).\n\n"
                      + _accepted(name, k) + "\n" + "".join(f"\n{n}: {v['help']}" for n, v in k["params"].items())
                      + "\n\nReturns (" + (k["outputs"][0] if len(k["outputs"]) == 1 else
                                            "{" + ", ".join(k["outputs"]) + "}") + ", KernelStats).")
    return method


def _other_session_pids(me: Session) -> set[int]:
    return {s.pid for s in list(_LIVE) if s is not me and s.pid is not None}
