"""The session's request loop: a job that serves kernel calls until its caller says stop.

:class:`firstlight.session.Session` runs :func:`serve_session` through
:func:`cosim.jobs.run_job` like any other job: one simulator process, the device opened by
``cosim/job_entry.py``, the errata attached once (``workarounds.attach``, the revision read from
REV). The job connects to the caller's socket and then, per request, reads one message
(:mod:`firstlight.session.wire`), awaits the same kernel function a ``firstlight run`` job awaits
(``kernels.gemm.gemm``, ``kernels.lowp.gemm_lowp``, ``kernels.softmax.softmax``, ...) and answers.

The read blocks the simulator process, which is what a session wants: cocotb pauses simulated
time while a task runs, and time only moves on when the task awaits a trigger, so the chip
stands still (no cycle passes) between two calls. When the caller's process ends, its socket
closes, the read returns no data and the job returns: the simulator never outlives its caller.

Answers: ``{"ok": true, "value": ..., "stats": KernelStats.to_dict()}`` with the result arrays,
or ``{"ok": false, "kind": ...}`` where kind is

* ``"argument"``: the kernel refused its arguments (ValueError/TypeError) before running; the
  session goes on;
* ``"chip_error"``: the chip set ERR; the dump is in the answer, the chip is soft-reset (ERR
  cleared) and the session goes on;
* ``"timeout"``: the watchdog expired; the dump is in the answer and the job ends (a hung chip's
  state is unknown: open a new session);
* ``"exception"``: anything else (a harness bug); the traceback is in the answer.
"""

from __future__ import annotations

import os
import socket
import time
import traceback

import numpy as np

import workarounds
from cosim.device import DeviceError, DeviceTimeout
from firstlight.session.wire import PeerClosed, recv_message, send_message

__all__ = ["serve_session", "OPS"]


def _stats(st) -> dict:
    return st.to_dict()


async def _ping(dev, mit, arrays):
    return {}, {}, None


async def _gemm(dev, mit, arrays, k_chunk=None, budget_cycles=None, double_buffer=True):
    from kernels.gemm import gemm

    c, st = await gemm(dev, arrays["a"], arrays["b"], mitigations=mit, k_chunk=k_chunk, budget_cycles=budget_cycles,
                       double_buffer=double_buffer)
    return {}, {"c": c}, st


async def _gemm_lowp(dev, mit, arrays, recipe, k_chunk=None, budget_cycles=None):
    from kernels.lowp import gemm_lowp

    r = await gemm_lowp(dev, arrays["a"], arrays["b"], recipe, mitigations=mit, k_chunk=k_chunk,
                        budget_cycles=budget_cycles)
    return {"sqnr_db": r.sqnr_db, "max_abs": r.max_abs}, {"c": r.c}, r.stats


async def _softmax(dev, mit, arrays, budget_cycles=None):
    from kernels.softmax import softmax

    y, st = await softmax(dev, arrays["x"], mitigations=mit, budget_cycles=budget_cycles)
    return {}, {"y": y}, st


async def _layer_norm(dev, mit, arrays, eps, budget_cycles=None):
    from kernels.norms import layer_norm

    y, st = await layer_norm(dev, arrays["x"], arrays["gamma"], arrays["beta"], eps, mitigations=mit,
                             budget_cycles=budget_cycles)
    return {}, {"y": y}, st


async def _rms_norm(dev, mit, arrays, eps, budget_cycles=None):
    from kernels.norms import rms_norm

    y, st = await rms_norm(dev, arrays["x"], arrays["gamma"], eps, mitigations=mit, budget_cycles=budget_cycles)
    return {}, {"y": y}, st


async def _attention(dev, mit, arrays, causal=False, recipe="int8", budget_cycles=None):
    from kernels.attention import attention

    o, st = await attention(dev, arrays["q"], arrays["k"], arrays["v"], causal=causal, mitigations=mit, recipe=recipe,
                            budget_cycles=budget_cycles)
    return {}, {"o": o}, st


async def _elementwise(dev, mit, arrays, op, broadcast="none", budget_cycles=None):
    from kernels.vector import elementwise

    y, st = await elementwise(dev, op, arrays["a"], arrays.get("b"), broadcast=broadcast, mitigations=mit,
                              budget_cycles=budget_cycles)
    return {}, {"y": y}, st


async def _activation(dev, mit, arrays, kind, budget_cycles=None):
    from kernels.activations import activation

    y, st = await activation(dev, arrays["x"], kind, mitigations=mit, budget_cycles=budget_cycles)
    return {}, {"y": y}, st


async def _reduce(dev, mit, arrays, op, budget_cycles=None):
    from kernels.reduce import reduce_rows

    y, st = await reduce_rows(dev, arrays["x"], op, mitigations=mit, budget_cycles=budget_cycles)
    return {}, {"y": np.asarray(y)}, st


async def _read_csr(dev, mit, arrays, reg):
    return {"value": await dev.read_csr(reg)}, {}, None


async def _write_csr(dev, mit, arrays, reg, value):
    await dev.write_csr(reg, value)
    return {}, {}, None


async def _perf(dev, mit, arrays):
    return {"counters": (await dev.read_perf()).counters, "now_cycles": dev.now_cycles()}, {}, None


async def _submit(dev, mit, arrays, commands, budget_cycles=None, wait=True):
    """Raw commands through the device's submit hook (the errata passes apply): for bring-up
    experiments from a shell, and for the tests of the watchdog path."""
    await dev.submit([int(c) for c in commands], budget_cycles)
    if wait:
        await dev.wait_idle(budget_cycles)
    return {}, {}, None


async def _crash(dev, mit, arrays, how="abort"):
    """End the simulator process the hard way (tests of the caller's error path)."""
    import signal

    os.kill(os.getpid(), signal.SIGKILL if how == "kill" else signal.SIGABRT)
    return {}, {}, None  # not reached


OPS = {"ping": _ping, "gemm": _gemm, "gemm_lowp": _gemm_lowp, "softmax": _softmax, "layer_norm": _layer_norm,
       "rms_norm": _rms_norm, "attention": _attention, "elementwise": _elementwise, "activation": _activation,
       "reduce": _reduce, "read_csr": _read_csr, "write_csr": _write_csr, "perf": _perf, "submit": _submit,
       "crash": _crash}
"""Request name -> handler ``(dev, mitigations, arrays, **args) -> (values, arrays, KernelStats or None)``."""


def _connect(address: str) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(address)
    return sock


async def serve_session(dev, emit, address: str, token: str, errata_policy: dict | None = None,
                        watchdog_cycles: int | None = None) -> dict:
    """Serve the caller at ``address`` (a Unix socket; a leading NUL: Linux's abstract namespace)
    until it closes the session or its process ends. Returns how many calls were served."""
    mit = workarounds.attach(dev, errata_policy)
    if watchdog_cycles:
        dev.watchdog_cycles = int(watchdog_cycles)
    sock = _connect(address.replace("@", "\0", 1) if address.startswith("@") else address)
    res = mit.resolution
    send_message(sock, {"token": token, "pid": os.getpid(), "pgid": os.getpgid(0), "revision": dev.revision,
                        "config": dev.config.as_dict(), "board": dev.board.as_dict(),
                        "errata": {"active": sorted(res.active), "status": res.status, "warnings": res.warnings,
                                   "inapplicable": mit.inapplicable or {}}})
    served = 0
    try:
        while True:
            try:
                req, arrays = recv_message(sock)  # blocks: no simulated time passes meanwhile
            except PeerClosed:
                return {"served": served, "ended": "the caller closed the connection"}
            op = req.get("op")
            if op == "close":
                send_message(sock, {"ok": True, "value": {"served": served}})
                return {"served": served, "ended": "closed by the caller"}
            handler = OPS.get(op)
            if handler is None:
                send_message(sock, {"ok": False, "kind": "argument",
                                    "message": f"unknown session request {op!r}; known: {', '.join(OPS)}"})
                continue
            served += 1
            t0 = time.perf_counter()
            try:
                values, out, st = await handler(dev, mit, arrays, **req.get("args", {}))
            except DeviceTimeout as e:
                send_message(sock, {"ok": False, "kind": "timeout", "message": str(e), "dump": e.dump})
                return {"served": served, "ended": "watchdog"}
            except DeviceError as e:
                await dev.soft_reset()
                send_message(sock, {"ok": False, "kind": "chip_error", "message": str(e),
                                    "dump": await dev.dump_state()})
                continue
            except (ValueError, TypeError, IndexError) as e:
                send_message(sock, {"ok": False, "kind": "argument", "error": type(e).__name__, "message": str(e)})
                continue
            except Exception as e:  # noqa: BLE001 - a harness bug: reported to the caller with its traceback
                send_message(sock, {"ok": False, "kind": "exception", "message": f"{type(e).__name__}: {e}",
                                    "traceback": traceback.format_exc()})
                continue
            send_message(sock, {"ok": True, "value": values, "stats": None if st is None else _stats(st),
                                "handler_s": time.perf_counter() - t0}, out)
    finally:
        sock.close()
