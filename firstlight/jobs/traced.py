"""Recording the chip's trace buffer around a kernel run, for every job that offers ``--trace``."""

from __future__ import annotations

__all__ = ["traced"]


async def traced(dev, trace: bool, run):
    """``await run()``, recording the chip's trace buffer around it when ``trace``; returns
    (run's value, the trace summary or None)."""
    if not trace:
        return await run(), None
    from firstlight.trace import disable_trace, enable_trace, read_trace

    await enable_trace(dev)
    value = await run()
    events = await read_trace(dev)
    await disable_trace(dev)
    return value, events.summary()
