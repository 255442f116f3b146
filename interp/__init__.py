"""The interpreter: a kernel's lowered command stream executed on a numpy model of the chip.

:class:`InterpDevice` is a Device (cosim/device.py's ``KernelDevice`` and the rest of ``Device``
that kernels call) whose chip is :class:`~interp.machine.Machine`: the SRAMs of rtl/memories.py,
the board's DRAM, the DMA queues with their strides, the semaphores and the command checks of
rtl/cmdproc.py, with every unit's arithmetic from golden/ (docs/interpret.md).
"""

from __future__ import annotations

from .device import MODELLED_REVISIONS, InterpDevice
from .errors import Deadlock, InterpError, SemaphoresLeft, UnmodelledRevision
from .machine import Machine, check_command

__all__ = ["InterpDevice", "Machine", "check_command", "MODELLED_REVISIONS", "InterpError", "Deadlock",
           "SemaphoresLeft", "UnmodelledRevision"]
