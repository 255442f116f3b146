"""Exit codes, the could-not-start error and the interruption, shared by every CLI module (one
class each, whatever way the CLI was started: the console script or ``python -m firstlight.cli``).

Harness errors (a build that failed, a simulator that died) are :class:`cosim.build.HarnessError`;
they exit with :data:`EXIT_HARNESS_ERROR`, never with :data:`EXIT_FAIL`, which is kept for a
verdict on the chip.
"""

from __future__ import annotations

import signal
import threading
from contextlib import contextmanager

__all__ = [
    "EXIT_OK", "EXIT_FAIL", "EXIT_CANNOT_START", "EXIT_HARNESS_ERROR", "EXIT_SIGINT", "EXIT_SIGTERM",
    "EXIT_CODES", "exit_codes_help", "CannotStart", "Interrupted", "interrupt_signals", "shielded",
]

EXIT_OK, EXIT_FAIL, EXIT_CANNOT_START, EXIT_HARNESS_ERROR = 0, 1, 2, 3
EXIT_SIGINT, EXIT_SIGTERM = 128 + signal.SIGINT, 128 + signal.SIGTERM  # 130, 143: the shell's convention

# code -> meaning; the meaning of 1 is the command's own (see exit_codes_help)
EXIT_CODES = {
    EXIT_OK: "success",
    EXIT_FAIL: "a check of the chip failed",
    EXIT_CANNOT_START: "could not start: bad arguments, a missing simulator, an output path or the build "
                       "cache ($FIRSTLIGHT_CACHE) not writable; nothing was built",
    EXIT_HARNESS_ERROR: "harness error: a build failed or the simulator died (the message names the log); "
                        "not a verdict on the chip",
    EXIT_SIGINT: "interrupted by SIGINT (Ctrl-C); what had finished is reported",
    EXIT_SIGTERM: "interrupted by SIGTERM; what had finished is reported",
}


def exit_codes_help(fail: str | None = None, ok: str | None = None) -> str:
    """The ``exit codes:`` block of a command's ``--help`` epilog, with its own meaning of 0 and 1."""
    import textwrap

    meanings = {**EXIT_CODES, **({EXIT_FAIL: fail} if fail else {}), **({EXIT_OK: ok} if ok else {})}
    return "exit codes:\n" + "".join(
        textwrap.fill(text, 96, initial_indent=f"  {code:<5}", subsequent_indent=" " * 7) + "\n"
        for code, text in meanings.items())


class CannotStart(Exception):
    """Bad arguments, a missing tool or an unwritable output: exit with EXIT_CANNOT_START."""


class Interrupted(BaseException):
    """SIGINT or SIGTERM arrived (raised by the handler :func:`interrupt_signals` installs).

    A BaseException, like KeyboardInterrupt, so that ``except Exception`` does not swallow it.
    """

    def __init__(self, signum: int):
        self.signum = int(signum)
        self.name = signal.Signals(self.signum).name
        super().__init__(f"interrupted by {self.name}")

    @property
    def exit_code(self) -> int:
        return 128 + self.signum

    @classmethod
    def of(cls, exc: BaseException) -> Interrupted:
        """An :class:`Interrupted` for an Interrupted or a KeyboardInterrupt (SIGINT)."""
        return exc if isinstance(exc, Interrupted) else cls(signal.SIGINT)


class _State:
    depth = 0  # > 0 while shielded: a signal is remembered and raised when the shield ends
    pending: int | None = None
    raised = False  # one Interrupted per run: later signals do not cut the clean-up short


def _handler(signum, frame) -> None:
    if _State.raised:
        return
    if _State.depth:
        _State.pending = _State.pending or signum
        return
    _State.raised = True
    raise Interrupted(signum)


@contextmanager
def interrupt_signals():
    """SIGINT and SIGTERM raise :class:`Interrupted` in the main thread while this is active
    (once; the clean-up that follows is not interrupted again). Elsewhere than the main thread
    it does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    _State.raised, _State.pending, _State.depth = False, None, 0
    for s in saved:
        signal.signal(s, _handler)
    try:
        yield
    finally:
        for s, h in saved.items():
            signal.signal(s, h)


@contextmanager
def shielded():
    """Writing what was learned: a signal arriving meanwhile waits until the block has ended."""
    _State.depth += 1
    try:
        yield
    finally:
        _State.depth -= 1
        if not _State.depth and _State.pending is not None and not _State.raised:
            signum, _State.pending = _State.pending, None
            _State.raised = True
            raise Interrupted(signum)
