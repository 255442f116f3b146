"""A process pool whose workers are born ignoring Ctrl-C.

A Ctrl-C reaches the whole process group. A worker still starting up (unpickling its bootstrap,
before any pool initializer runs) once died of it with a KeyboardInterrupt traceback on the
command's stderr. Python installs its KeyboardInterrupt handler at start only when SIGINT's
disposition is the default, and an ignored signal stays ignored across exec; so the pool is made
with SIGINT ignored in the parent, and every worker ignores it from its first instruction. The
parent decides what a Ctrl-C means and ends the workers with SIGTERM (``pool.terminate()``)."""

from __future__ import annotations

import multiprocessing
import signal
import threading
from collections.abc import Callable


def spawn_pool(workers: int, initializer: Callable[[], None] | None = None):
    """A ``spawn`` multiprocessing pool of ``workers`` processes that ignore SIGINT from birth."""
    ctx = multiprocessing.get_context("spawn")
    if threading.current_thread() is not threading.main_thread():
        return ctx.Pool(workers, initializer=initializer)  # signals belong to the main thread only
    old = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        return ctx.Pool(workers, initializer=initializer)
    finally:
        signal.signal(signal.SIGINT, old)
