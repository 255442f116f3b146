"""PyTorch on the simulated chip (the ``firstlight[torch]`` extra: ``torch==2.13.0``).

* :mod:`.operators`: ``torch.ops.firstlight.*`` custom operators (eager, PyTorch's semantics:
  a recipe for the GEMMs, a dimension for softmax), bound to a session;
* :mod:`.generated`: ``torch.ops.firstlight_kernels.<kernel>``, one operator per tile-language
  kernel, generated from its declaration (:func:`kernel_ops`; defined at import);
* :mod:`.compile`: :func:`backend`, a ``torch.compile`` backend that maps the graph's operators
  to the chip, runs the rest on the CPU and keeps an operator coverage table;
* :mod:`.models`: the digits MLP and the transformer encoder block, evaluated per recipe.
"""

from __future__ import annotations

try:
    import torch  # noqa: F401
except ImportError as e:  # pragma: no cover - depends on the installation
    raise ImportError("firstlight.torch needs PyTorch: pip install 'firstlight[torch]' (torch==2.13.0 exactly: "
                      "the CPU build of that version installs offline here; others pull a CUDA build)") from e

from .operators import OPS, ChipOps, attention_recipe_for, handle, ledger, ops

__all__ = ["OPS", "ChipOps", "attention_recipe_for", "handle", "ledger", "ops", "backend", "kernel_ops"]


def kernel_ops() -> dict:
    """The generated operator of every registered tile-language kernel, by kernel name (a kernel
    declared since the last call is defined now): ``torch.ops.firstlight_kernels.<kernel>``."""
    from .generated import register

    return register()


kernel_ops()


def backend(chip, recipe: str = "int8-channel", **kwargs):
    """A ``torch.compile`` backend running on ``chip``: see :func:`firstlight.torch.compile.backend`."""
    from .compile import backend as make

    return make(chip, recipe, **kwargs)
