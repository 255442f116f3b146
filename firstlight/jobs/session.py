"""The session's request loop: a job that serves kernel calls until its caller says stop.

:class:`firstlight.session.Session` runs :func:`serve_session` through
:func:`cosim.jobs.run_job` like any other job: one simulator process, the device opened by
``cosim/job_entry.py``, the errata attached once (``workarounds.attach``, the revision read from
REV). The job connects to the caller's socket and then, per request, reads one message
(:mod:`firstlight.session.wire`), awaits the same kernel function a ``firstlight run`` job awaits
(``kernels.gemm.gemm``, ``kernels.lowp.gemm_lowp``, ...) and answers. Every tile-language kernel
(kernels/tile/spec.py) is one request, ``"kernel"``, carrying the kernel's name, its inputs by
tensor name and its parameters, run by ``kernels.tile.spec.run_spec`` like ``firstlight run
<kernel>``; the hello lists them (:func:`kernel_catalogue`), so the caller's methods are this
process's registry, the one that runs them.

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

__all__ = ["serve_session", "OPS", "kernel_catalogue", "kernel_arguments"]


def _stats(st) -> dict:
    return st.to_dict()


async def _ping(dev, mit, arrays):
    return {}, {}, None


async def _gemm(dev, mit, arrays, k_chunk=None, budget_cycles=None, double_buffer=True, relu=False):
    from kernels.epilogue import Epilogue
    from kernels.gemm import gemm

    epi = None
    if "scale" in arrays:  # the fused epilogue (bias, requantization, ReLU)
        epi = Epilogue.checked(arrays["b"].shape[1], arrays["bias"], arrays["scale"], relu)
    c, st = await gemm(dev, arrays["a"], arrays["b"], mitigations=mit, k_chunk=k_chunk, budget_cycles=budget_cycles,
                       double_buffer=double_buffer, epilogue=epi)
    return {}, {"c": c}, st


async def _gemm_lowp(dev, mit, arrays, recipe, k_chunk=None, budget_cycles=None):
    from kernels.lowp import gemm_lowp

    r = await gemm_lowp(dev, arrays["a"], arrays["b"], recipe, mitigations=mit, k_chunk=k_chunk,
                        budget_cycles=budget_cycles)
    return {"sqnr_db": r.sqnr_db, "max_abs": r.max_abs}, {"c": r.c}, r.stats


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


async def _reduce(dev, mit, arrays, op, budget_cycles=None):
    from kernels.reduce import reduce_rows

    y, st = await reduce_rows(dev, arrays["x"], op, mitigations=mit, budget_cycles=budget_cycles)
    return {}, {"y": np.asarray(y)}, st


def _taken_from_shape(spec) -> tuple[str, ...]:
    """The parameters a session call takes from its inputs' shapes (KernelSpec.shape_params), not
    from the caller: a shape given twice could disagree."""
    return tuple(spec.shape_params())


def kernel_catalogue() -> tuple[dict, str | None]:
    """(every registered tile-language kernel by name: its inputs, outputs, the parameters a
    caller may pass with their defaults and help, the ones taken from the first input's shape;
    None and why, if the registry does not load). Sent in the hello: the caller's generated
    methods are the kernels this process can run. A registry that fails to load (a module of
    FIRSTLIGHT_KERNEL_MODULES that does not import here) leaves the rest of the session working."""
    from kernels.tile.spec import registry

    try:
        reg = registry()
        out = {}
        for spec in reg.values():
            ts = spec.tensors(spec.resolve())
            taken = _taken_from_shape(spec)
            out[spec.name] = {"summary": spec.summary, "module": spec.module,
                              "inputs": [t.name for t in ts if t.role == "in"],
                              "outputs": [t.name for t in ts if t.role == "out"], "from_shape": list(taken),
                              "shape_of": {n: t for n, (t, _axis) in spec.shape_params().items()},
                              "params": {p.name: {"default": p.default, "help": p.describe()}
                                         for p in spec.params if p.name not in taken}}
        return out, None
    except Exception as e:  # noqa: BLE001 - reported to the caller, who may not need any kernel
        return None, f"{type(e).__name__}: {e}"


def kernel_arguments(spec, arrays: dict[str, np.ndarray], given: dict) -> tuple[dict, dict[str, np.ndarray]]:
    """(resolved parameters, inputs by tensor name as the kernel takes them) of one call, or a
    ValueError/TypeError saying what was wrong and what is accepted. ``rows``/``cols`` come from
    the first input's shape; a (1, C) tensor may be given as (C,). The dtypes are checked here:
    the runtime would convert a float64 array silently."""
    from kernels.tile.runtime import DTYPES

    taken = _taken_from_shape(spec)
    twice = [n for n in given if n in taken]
    if twice:
        raise ValueError(f"kernel {spec.name}: {', '.join(twice)} come from the shape of its first input; "
                         "do not pass them")
    try:
        p = spec.resolve(given)  # unknown or out-of-range parameters refused, naming the accepted ones
    except ValueError as e:
        raise ValueError(str(e) if str(e).startswith(f"kernel {spec.name}") else f"kernel {spec.name}: {e}") from None
    names = [t.name for t in spec.tensors(p) if t.role == "in"]
    missing, extra = [n for n in names if n not in arrays], [n for n in arrays if n not in names]
    if missing or extra:
        what = "; ".join(([f"it needs {', '.join(missing)}"] if missing else [])
                         + ([f"it has no input {', '.join(extra)}"] if extra else []))
        raise TypeError(f"kernel {spec.name}: {what}; its inputs: {', '.join(names)}")
    first = arrays[names[0]]
    if taken:
        dims = {}
        for param, (tensor, axis) in spec.shape_params().items():
            a = arrays[tensor]
            if a.ndim != 2:
                raise ValueError(f"kernel {spec.name}: {tensor} must be 2-D (its shape gives {param}), "
                                 f"got shape {a.shape}")
            dims[param] = a.shape[axis]
        try:
            p = spec.resolve({**given, **dims})
        except ValueError as e:
            shapes = ", ".join(f"{n}, {arrays[n].shape}" for n in dict.fromkeys(t for t, _ in spec.shape_params().values()))
            raise ValueError(f"kernel {spec.name}: {e} (from the shape of {shapes})") from None
    ins = {}
    for t in spec.tensors(p):
        if t.role != "in":
            continue
        a, want = arrays[t.name], np.dtype(DTYPES[t.dtype])
        if a.dtype != want:
            raise TypeError(f"kernel {spec.name}: {t.name} must have dtype {want.name} ({t.dtype}), got {a.dtype}")
        if t.rows == 1 and a.shape == (t.cols,):
            a = a.reshape(1, t.cols)
        if a.shape != (t.rows, t.cols):
            alt = f" or ({t.cols},)" if t.rows == 1 else ""
            raise ValueError(f"kernel {spec.name}: {t.name} must have shape ({t.rows}, {t.cols}){alt} for "
                             f"{names[0]} of shape {first.shape}, got {a.shape}")
        ins[t.name] = a
    return p, ins


async def _kernel(dev, mit, arrays, name, params=None, budget_cycles=None):
    """A tile-language kernel by name: the inputs checked (:func:`kernel_arguments`), then
    ``run_spec``, the function ``firstlight run <kernel>`` awaits. Answers its outputs by name."""
    from kernels.tile.spec import registry, run_spec

    reg = registry()
    if name not in reg:
        raise ValueError(f"no tile-language kernel named {name!r}; this session's kernels: {', '.join(reg)}")
    spec = reg[name]
    if not isinstance(params or {}, dict):
        raise TypeError(f"kernel {name}: params must be a dict of parameter values, not {type(params).__name__}")
    p, ins = kernel_arguments(spec, arrays, params or {})
    outs, st = await run_spec(dev, spec, p, ins, mitigations=mit, budget_cycles=budget_cycles)
    return {}, outs, st


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
    if wait:  # an error the stream caused is this call's, not the next innocent one's
        await dev.wait_idle(budget_cycles)
        await dev.check_no_error()
    return {}, {}, None


async def _crash(dev, mit, arrays, how="abort"):
    """End the simulator process the hard way (tests of the caller's error path)."""
    import signal

    os.kill(os.getpid(), signal.SIGKILL if how == "kill" else signal.SIGABRT)
    return {}, {}, None  # not reached


OPS = {"ping": _ping, "gemm": _gemm, "gemm_lowp": _gemm_lowp, "kernel": _kernel, "attention": _attention,
       "elementwise": _elementwise, "reduce": _reduce, "read_csr": _read_csr, "write_csr": _write_csr,
       "perf": _perf, "submit": _submit, "crash": _crash}
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
    kernels, kernels_error = kernel_catalogue()
    send_message(sock, {"token": token, "pid": os.getpid(), "pgid": os.getpgid(0), "revision": dev.revision,
                        "config": dev.config.as_dict(), "board": dev.board.as_dict(),
                        "errata": {"active": sorted(res.active), "status": res.status, "warnings": res.warnings,
                                   "inapplicable": mit.inapplicable or {}},
                        "kernels": kernels, "kernels_error": kernels_error})
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
