"""The ``firstlight`` command line: the parser and :func:`main` (the console-script entry point).

One module per command (:mod:`.run`, :mod:`.bench`, :mod:`.bringup`, :mod:`.numerics`,
:mod:`.errata`), each with ``add_parser(subparsers)`` and ``cmd(args) -> int``; what they share
is in :mod:`.common`. None of them imports this package, so there is no import circle.
"""

from __future__ import annotations

import argparse
import shlex
import sys

from rich.text import Text

from firstlight.errors import (
    EXIT_CANNOT_START,
    EXIT_FAIL,
    EXIT_HARNESS_ERROR,
    EXIT_OK,
    CannotStart,
    Interrupted,
    exit_codes_help,
    interrupt_signals,
)

from . import bench, bringup, cache, doctor, errata, faults, model, mutants, numerics, regress, roofline, run, sweep
from .common import CREATED_FOLDERS, check_outputs, console, err_console, remove_created_folders

__all__ = [
    "COMMANDS",
    "EXIT_CANNOT_START",
    "EXIT_FAIL",
    "EXIT_HARNESS_ERROR",
    "EXIT_OK",
    "CannotStart",
    "build_parser",
    "console",
    "err_console",
    "main",
]

# In the order ``firstlight --help`` lists them.
COMMANDS = (run, bench, roofline, bringup, faults, numerics, errata, mutants, model, sweep, regress, cache, doctor)

EPILOG = """\
examples:
  firstlight run gemm --m 37 --n 19 --k 100            int8 GEMM on Verilator, 4x4 array
  firstlight run gemm --m 128 --n 128 --k 128 --array 8x8 --sim icarus
  firstlight run reduce --rows 8 --cols 100 --op max
  firstlight bench                                       cycles/utilisation/throughput table
  firstlight bringup --inject sram:ACC:stuck1:addr=5:bit=70   the checklist on a chip with a bad cell
  firstlight numerics --report out                       SQNR of every FP8/MX/int8 recipe, PNG plot
  firstlight errata list --rev A0                        what each erratum means for a revision
  firstlight run softmax --interpret                     the same kernel on the interpreter: no build
  firstlight mutants --kernel softmax --sample 40        the race checker scored against the RTL
  firstlight model mlp --recipe int8-channel             a PyTorch model through torch.compile on the chip
  firstlight sweep run examples/sweep-small.toml         a design-space sweep on a local Dask cluster
  firstlight regress --sim verilator --seeds 1 2         checklist + kernels over revisions x sims x seeds

Simulator builds are cached under $FIRSTLIGHT_CACHE (default ~/.cache/firstlight): `firstlight cache`
shows what it holds, `firstlight cache prune` trims it.

""" + exit_codes_help()


def version() -> str:
    """The installed package's version (its metadata, the one place it is declared)."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as dist_version

    try:
        return dist_version("firstlight")
    except PackageNotFoundError:
        return "unknown (not installed)"


def version_text() -> str:
    """``--version``: the package, the commit it runs from, and the tools a run depends on (the
    simulators as found on this machine), the facts a bug report needs."""
    from cosim.toolchain import SIMULATORS
    from firstlight.provenance import git_commit, tool_versions

    commit, dirty = git_commit()
    tools = {}
    for sim in SIMULATORS:
        tools.update(tool_versions(sim))
    where = "not a git checkout" if commit == "unknown" else commit[:12] + (" (uncommitted changes)" if dirty else "")
    return f"firstlight {version()}, commit {where}\n" + "\n".join(f"  {k} {v}" for k, v in tools.items()
                                                                      if k != "firstlight")


class _Version(argparse.Action):
    """--version, computed only when asked (it runs the simulators to learn their versions)."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, help=None):
        super().__init__(option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        print(version_text())
        parser.exit()


LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


class _Parser(argparse.ArgumentParser):
    """Every parser of the command line (subcommands inherit the class): the logging options are
    accepted before the command and after it (``firstlight -q run ...``, ``firstlight run ... -v``),
    as pytest and cocotb users expect. Their default is to set nothing, so a subcommand's parser
    does not overwrite what was given before it."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        g = self.add_argument_group("logging")
        g.add_argument("-v", "--verbose", action="store_const", const="DEBUG", dest="log_level",
                       default=argparse.SUPPRESS, help="log every step, the simulators' cocotb logs too (DEBUG)")
        g.add_argument("-q", "--quiet", action="store_const", const="WARNING", dest="log_level",
                       default=argparse.SUPPRESS, help="only warnings and errors: no build or progress steps")
        g.add_argument("--log-level", type=str.upper, choices=LOG_LEVELS, dest="log_level", default=argparse.SUPPRESS,
                       help="the log level (default INFO: the long steps, such as a first build, announce themselves)")


def _apply_log_level(level: str) -> None:
    import logging
    import os

    logging.getLogger("firstlight").setLevel(level)
    if level == "DEBUG":  # the simulator processes' cocotb logs, into their sim.log
        os.environ["COCOTB_LOG_LEVEL"] = "DEBUG"


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="firstlight",
        description="Bring-up harness for a small AI accelerator: real Amaranth RTL on Verilator or "
        "Icarus under cocotb, kernels checked against numpy goldens.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action=_Version,
                        help="the version, the commit it runs from and the versions of Python, Amaranth, cocotb and "
                             "the simulators found")
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
    """Run one command; return its exit code (``firstlight --help`` lists them).

    SIGINT and SIGTERM raise :class:`Interrupted` while a command runs: a command that has
    something to report (bringup) reports it; any simulator or compiler still running is stopped.
    """
    from cosim.build import HarnessError, stop_children

    _log_to_stderr()
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # argparse: 2 on bad arguments, 0 on --help and --version
        return int(e.code or 0)
    args.command_line = shlex.join(["firstlight", *argv])
    _apply_log_level(getattr(args, "log_level", "INFO"))
    CREATED_FOLDERS.clear()
    try:
        with interrupt_signals():
            check_outputs(args)
            return args.handler(args)
    except CannotStart as e:
        remove_created_folders()  # a refused command leaves no empty output folder behind
        err_console.print(Text.assemble(("cannot start: ", "red"), str(e)))
        return EXIT_CANNOT_START
    except HarnessError as e:
        err_console.print(Text.assemble(("harness error (not a verdict on the chip): ", "bold magenta"), str(e)))
        return EXIT_HARNESS_ERROR
    except (Interrupted, KeyboardInterrupt) as e:
        stopped = stop_children()
        sig = Interrupted.of(e)
        err_console.print(Text(f"interrupted by {sig.name}" + (f"; stopped {len(stopped)} simulator/compiler "
                                                                 "process(es)" if stopped else ""), style="yellow"))
        return sig.exit_code
