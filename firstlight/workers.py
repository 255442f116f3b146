"""A process pool whose workers are born ignoring Ctrl-C, and a parent that loses none.

A Ctrl-C reaches the whole process group. A worker still starting up (unpickling its bootstrap,
before any pool initializer runs) once died of it with a KeyboardInterrupt traceback on the
command's stderr: Python installs its KeyboardInterrupt handler at start only when SIGINT's
disposition is the default. An ignored signal stays ignored across exec, so the workers are
started through a two-line shell wrapper (``trap '' INT; exec python "$@"``) and are born
ignoring it. The parent never ignores SIGINT (ignoring it while the pool spawned lost a Ctrl-C
sent meanwhile: 2 of 12 tries ran on to exit 0). The parent decides what a Ctrl-C means and ends
the workers with SIGTERM (``pool.terminate()``)."""

from __future__ import annotations

import multiprocessing
import multiprocessing.spawn
import os
import signal
import sys
import threading
import time
from collections.abc import Callable


def _start_worker(initializer: Callable[[], None] | None, started) -> None:
    """Every worker's first call: SIGINT ignored (again: a wrapper that could not be written
    leaves it at the default until here), the caller's initializer, then a count on ``started``."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if initializer is not None:
        initializer()
    started.release()


def _ignoring_sigint_executable() -> str:
    """This Python behind ``trap '' INT`` (one file per user and interpreter, in the system temp
    folder, written once, atomically)."""
    import hashlib
    import shlex
    import tempfile

    tag = hashlib.sha256(sys.executable.encode()).hexdigest()[:12]
    path = os.path.join(tempfile.gettempdir(), f"firstlight-{os.getuid()}-python-{tag}")
    body = f"#!/bin/sh\ntrap '' INT\nexec {shlex.quote(sys.executable)} \"$@\"\n"
    try:
        with open(path) as f:
            if f.read() == body and os.access(path, os.X_OK):
                return path
    except OSError:
        pass
    tmp = f"{path}.{os.getpid()}"
    with open(tmp, "w") as f:
        f.write(body)
    os.chmod(tmp, 0o755)
    os.replace(tmp, path)
    return path


def spawn_pool(workers: int, initializer: Callable[[], None] | None = None, *, start_timeout_s: float = 60.0):
    """A ``spawn`` multiprocessing pool of ``workers`` processes that ignore SIGINT from birth
    (``initializer``, a module-level function, then runs in each). Returns once every worker has
    started. A Ctrl-C meanwhile is held (a handler notes it) and acted on once they have: the pool
    is ended and the handler the caller had runs. Acted on at once, it closed the pipe a worker
    was still reading its bootstrap from, or removed a semaphore it was opening, and the worker
    printed a traceback; ignored (the first fix), it was lost, and the command ran on to exit 0
    (10 of 40 tries, ``firstlight numerics --special exp`` signalled as its workers appear)."""
    ctx = multiprocessing.get_context("spawn")
    started = ctx.Semaphore(0)
    before = multiprocessing.spawn.get_executable()
    try:
        ctx.set_executable(_ignoring_sigint_executable())
    except OSError:  # no writable temp folder: the workers ignore SIGINT from their initializer on
        pass
    held: list[int] = []
    main = threading.current_thread() is threading.main_thread()
    old = signal.signal(signal.SIGINT, lambda signum, frame: held.append(signum)) if main else None
    try:
        try:  # (the executable is process-wide: set only while this pool starts its workers)
            pool = ctx.Pool(workers, initializer=_start_worker, initargs=(initializer, started))
        finally:
            ctx.set_executable(before)
        deadline = time.monotonic() + start_timeout_s
        waiting = workers
        while waiting and time.monotonic() < deadline:
            if started.acquire(timeout=0.25):
                waiting -= 1
    finally:
        if main:
            signal.signal(signal.SIGINT, old)
    if held:
        pool.terminate()
        pool.join()
        _deliver(old, signal.SIGINT)
    return pool


def _deliver(handler, signum: int) -> None:
    """Act on a held signal as ``handler`` (what ``signal.signal`` returned) would have."""
    if callable(handler):
        handler(signum, None)
    elif handler == signal.SIG_DFL:
        raise KeyboardInterrupt
