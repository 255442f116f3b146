"""firstlight: a bring-up and pre-silicon harness for a small AI accelerator.

The library surface for scripts, notebooks and tests::

    import firstlight
    with firstlight.open(rev="B0") as chip:      # one simulator process (firstlight.session)
        c, stats = chip.gemm(a, b)               # int8 numpy in, int32 numpy out

``firstlight.torch`` (with the ``firstlight[torch]`` extra) holds the PyTorch custom operators,
the ``torch.compile`` backend and the example models. Nothing heavy is imported until used.
"""

from __future__ import annotations

__all__ = ["open"]


def open(*args, **kwargs):
    """Start a chip in its own simulator process: see :func:`firstlight.session.open`."""
    from .session import open as open_session

    return open_session(*args, **kwargs)


def __getattr__(name: str):
    if name == "torch":  # ``firstlight.torch`` after a bare ``import firstlight``
        import importlib

        return importlib.import_module("firstlight.torch")
    raise AttributeError(f"module 'firstlight' has no attribute {name!r}")
