"""What every ``firstlight`` command shares: argument types, option groups, consoles, helpers.

The command modules import this module, never :mod:`firstlight.cli` itself (the package that
registers them), so there is no import circle. Exit codes and :class:`CannotStart` live in
:mod:`firstlight.errors`.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.console import Console

from cosim.toolchain import SIMULATORS, SimulatorMissing, find_simulator
from firstlight.errors import CannotStart
from rtl.config import FORMAT_NAMES

__all__ = [
    "DEFAULT_SIM",
    "add_array_option",
    "add_formats_option",
    "add_json_option",
    "add_rev_option",
    "add_seed_option",
    "add_sim_option",
    "array",
    "console",
    "err_console",
    "fmt_pct",
    "int_at_least",
    "positive",
    "require_sim",
    "revision",
    "seed",
    "variant_from_args",
]

console = Console()
err_console = Console(stderr=True, soft_wrap=True)  # never break a message mid-command

DEFAULT_SIM = "verilator"
assert DEFAULT_SIM in SIMULATORS


# ---- argument types -----------------------------------------------------------------------------

def int_at_least(lowest: int, what: str):
    """An argparse type: an integer >= ``lowest``, with a message naming what was expected."""

    def parse(text: str) -> int:
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
        if v < lowest:
            raise argparse.ArgumentTypeError(f"expected {what}, got {v}")
        return v

    return parse


positive = int_at_least(1, "a positive integer")
seed = int_at_least(0, "a non-negative integer seed (numpy's rule)")


def array(text: str):
    """``ROWSxCOLS`` -> a :class:`rtl.config.ChipConfig` of that array size."""
    from rtl.config import ChipConfig

    try:
        return ChipConfig.parse_array(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def revision(text: str) -> str:
    """A silicon revision name known to :data:`rtl.revisions.REVISIONS`."""
    from rtl.revisions import REVISIONS

    if text not in REVISIONS:
        raise argparse.ArgumentTypeError(f"unknown revision {text!r}; known revisions: {', '.join(REVISIONS)}")
    return text


# ---- option groups ------------------------------------------------------------------------------

def add_sim_option(p: argparse.ArgumentParser, help: str | None = None) -> None:
    p.add_argument("--sim", default=DEFAULT_SIM, choices=SIMULATORS, help=help)


def add_array_option(p: argparse.ArgumentParser, help: str | None = None) -> None:
    p.add_argument("--array", type=array, default=None, metavar="ROWSxCOLS", help=help)


def add_seed_option(p: argparse.ArgumentParser, help: str | None = None) -> None:
    p.add_argument("--seed", type=seed, default=1, help=help)


def add_rev_option(p: argparse.ArgumentParser, *, default: str | None = "A0", required: bool = False,
                   help: str | None = None) -> None:
    p.add_argument("--rev", type=revision, default=None if required else default, required=required, help=help)


def add_json_option(p: argparse.ArgumentParser, help: str | None = None) -> None:
    p.add_argument("--json", type=Path, default=None, metavar="PATH", help=help)


def add_formats_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--formats", nargs="+", default=None, metavar="FMT",
                   help=f"MATMUL formats to build the chip with ({' '.join(FORMAT_NAMES)}, default all); an "
                   "int8-only chip builds ~3x faster and simulates ~3.5x faster")


# ---- helpers ------------------------------------------------------------------------------------

def variant_from_args(args: argparse.Namespace):
    """The :class:`cosim.build.Variant` named by ``--array``, ``--rev`` and ``--formats``."""
    from dataclasses import replace

    from cosim.build import Variant
    from rtl.config import ChipConfig

    cfg = args.array or ChipConfig()
    if args.formats:
        try:
            cfg = replace(cfg, formats=tuple(args.formats))
        except ValueError as e:
            raise CannotStart(f"--formats: {e}") from None
    return Variant(config=cfg, revision=args.rev)


def require_sim(name: str):
    """The simulator's :class:`cosim.toolchain.SimInfo`, or :class:`CannotStart` saying how to install it."""
    try:
        return find_simulator(name)
    except SimulatorMissing as e:
        raise CannotStart(str(e)) from None


def fmt_pct(x: float) -> str:
    return f"{100 * x:.1f}%"
