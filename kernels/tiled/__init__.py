"""Kernels written in the tile language (docs/tile.md), one module each, each with its
:class:`~kernels.tile.spec.KernelSpec`: the one declaration every surface (CLI, session, bench,
bring-up, sweep) is generated from."""
