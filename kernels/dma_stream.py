"""Semaphore bookkeeping for command streams that synchronise the DMA with the compute units.

A kernel names its semaphores once (:data:`SEM`) and records every wait and signal it emits
in a :class:`Ledger`, in stream order. The ledger refuses a wait *of the command stream* whose
count no earlier command signals (the stream would stop for good: the chip's watchdog would
catch it, the ledger catches it before anything runs), and at the end of a kernel it emits the
NOP waits that take every count still outstanding, so the next kernel starts from zero.
"""

from __future__ import annotations

from rtl.csr_map import SEMAPHORES
from rtl.isa import nop

__all__ = ["SEM", "ATTN_SEM", "Ledger"]

# The GEMM family's semaphores. The DMA queues and the engine each complete in order, so one
# counting semaphore per purpose pairs the k-th wait with the k-th signal: LOADED (a chunk's loads
# have landed), FREE (a chunk's MATMULs are done with its buffers), C_READY (a tile row's last
# MATMUL is done), C_FREE (its store has read it), AUX/AUX_FREE (a fused kernel's own).
SEM = {"LOADED": 0, "FREE": 1, "ZEROS": 2, "C_READY": 4, "C_FREE": 5, "AUX": 6, "AUX_FREE": 7}
assert len(set(SEM.values())) == len(SEM) <= SEMAPHORES
# Flash attention's (kernels/attention.py): a K tile (and its mask) landed / its MATMULs and the
# VEC that reads the mask are done; the same for the V tile; a query block's Q landed / done; the
# block's output is final / its store has read it.
ATTN_SEM = {"K_RDY": 0, "K_FREE": 1, "V_RDY": 2, "V_FREE": 3, "Q_RDY": 4, "Q_FREE": 5, "O_FREE": 6, "O_RDY": 7}
assert len(set(ATTN_SEM.values())) == len(ATTN_SEM) <= SEMAPHORES


class Ledger:
    """Counts per semaphore as the stream will leave them."""

    def __init__(self):
        self.counts = [0] * SEMAPHORES

    def signal(self, *sems: int | None) -> None:
        for s in sems:
            if s is not None:
                self.counts[s] += 1

    def stream_wait(self, sem: int) -> int:
        """A wait taken by the command stream itself (MATMUL, REDUCE, NOP, FENCE)."""
        if self.counts[sem] <= 0:
            raise AssertionError(f"the stream would wait on semaphore {sem} with no earlier signal: a deadlock")
        self.counts[sem] -= 1
        return sem

    def queue_wait(self, sem: int) -> int:
        """A wait taken by a DMA queue (it may be signalled later in the stream)."""
        self.counts[sem] -= 1
        return sem

    def drain(self) -> list[int]:
        """NOP waits that take every outstanding count (after the last command that signals)."""
        out = []
        for s, c in enumerate(self.counts):
            if c < 0:
                raise AssertionError(f"semaphore {s} is waited on {-c} more times than it is signalled")
            out += [nop(wait=s)] * c
            self.counts[s] = 0
        return out
