"""The ``firstlight`` command line: the parser and :func:`main` (the console-script entry point).

One module per command (:mod:`.run`, :mod:`.bench`, :mod:`.bringup`, :mod:`.numerics`,
:mod:`.errata`), each with ``add_parser(subparsers)`` and ``cmd(args) -> int``; what they share
is in :mod:`.common`. None of them imports this package, so there is no import circle.
"""

from __future__ import annotations

import argparse

from firstlight.errors import EXIT_CANNOT_START, EXIT_FAIL, EXIT_OK, CannotStart

from . import bench, bringup, errata, numerics, run
from .common import console, err_console

__all__ = [
    "COMMANDS",
    "EXIT_CANNOT_START",
    "EXIT_FAIL",
    "EXIT_OK",
    "CannotStart",
    "build_parser",
    "console",
    "err_console",
    "main",
]

# In the order ``firstlight --help`` lists them.
COMMANDS = (run, bench, bringup, numerics, errata)

EPILOG = """\
examples:
  firstlight run gemm --m 37 --n 19 --k 100            int8 GEMM on Verilator, 4x4 array
  firstlight run gemm --m 128 --n 128 --k 128 --array 8x8 --sim icarus
  firstlight run reduce --rows 8 --cols 100 --op max
  firstlight bench                                       cycles/utilisation/throughput table
  firstlight bringup --inject sram:ACC:stuck1:addr=5:bit=70   the checklist on a chip with a bad cell
  firstlight numerics --report out                       SQNR of every FP8/MX/int8 recipe, PNG plot
  firstlight errata list --rev A0                        what each erratum means for a revision

exit codes: 0 passed, 1 a check failed, 2 could not start (bad arguments, missing simulator).
Simulator builds are cached under $FIRSTLIGHT_CACHE (default ~/.cache/firstlight).
"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="firstlight",
        description="Bring-up harness for a small AI accelerator: real Amaranth RTL on Verilator or "
        "Icarus under cocotb, kernels checked against numpy goldens.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in COMMANDS:
        command.add_parser(sub)  # each sets its ``handler``
    return parser


def _log_to_stderr() -> None:
    """Long steps (a first Verilator build takes up to minutes) announce themselves on stderr."""
    import logging

    from rich.logging import RichHandler

    log = logging.getLogger("firstlight")
    if not log.handlers:
        log.addHandler(RichHandler(console=err_console, show_time=False, show_path=False))
        log.setLevel(logging.INFO)
        log.propagate = False


def main(argv: list[str] | None = None) -> int:
    _log_to_stderr()
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # argparse: 2 on bad arguments, 0 on --help
        return int(e.code or 0)
    try:
        return args.handler(args)
    except CannotStart as e:
        err_console.print(f"[red]cannot start:[/] {e}")
        return EXIT_CANNOT_START
