"""What the interpreter raises: a deadlock, semaphores left counting, a revision it cannot model."""

from __future__ import annotations

from cosim.device import DeviceTimeout

__all__ = ["InterpError", "Deadlock", "SemaphoresLeft", "UnmodelledRevision"]


class InterpError(RuntimeError):
    """Base of the interpreter's own errors (a kernel's fault, or a model it does not have)."""


class Deadlock(InterpError, DeviceTimeout):
    """A wait that nothing queued can satisfy. ``stuck`` lists each blocked queue head: where it
    waits, the command's index in what was submitted, its opcode, tag and semaphore. It is the
    case where the chip's watchdog would fire (a :class:`cosim.device.DeviceTimeout`, with
    ``dump``), found at once instead of after the budget: whatever handles a hung chip (a
    session, a job) handles it."""

    def __init__(self, message: str, stuck: list[dict]):
        DeviceTimeout.__init__(self, message, {"stuck": stuck})
        self.stuck = stuck


class SemaphoresLeft(InterpError):
    """The chip went idle with semaphore counts above zero (``counts``: semaphore -> count): a
    signal that no wait took, which the next stream would see."""

    def __init__(self, message: str, counts: dict[int, int]):
        super().__init__(message)
        self.counts = counts


class UnmodelledRevision(InterpError, ValueError):
    """A revision whose defects change what the chip computes, which the interpreter does not
    model: it refuses rather than compute the fixed behaviour."""
