"""What every ``firstlight`` command shares: argument types, option groups, consoles, output
checks, tables, helpers.

The command modules import this module, never :mod:`firstlight.cli` itself (the package that
registers them), so there is no import circle. Exit codes and :class:`CannotStart` live in
:mod:`firstlight.errors`.

Terminal output: text that is not a literal of ours (fault specs such as ``sram:SA:...``, stage
details, error messages, paths) reaches rich only inside :class:`rich.text.Text` objects
(:func:`plain`, :func:`cells`), which rich never parses as markup or emoji codes; the consoles
also never render emoji codes, whatever is printed.
"""

from __future__ import annotations

import argparse
import io
import math
import os
import re
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path

from rich.cells import cell_len
from rich.console import Console
from rich.table import Table
from rich.text import Text

from cosim.toolchain import SIMULATORS, SimulatorMissing, find_simulator
from firstlight.errors import CannotStart
from rtl.config import FORMAT_NAMES

__all__ = [
    "DEFAULT_SIM",
    "FittedTable",
    "JobFolder",
    "Reporter",
    "add_array_option",
    "add_formats_option",
    "add_json_option",
    "add_keep_option",
    "add_rev_option",
    "add_seed_option",
    "add_sim_option",
    "array",
    "cells",
    "check_output_dir",
    "check_output_file",
    "check_outputs",
    "console",
    "err_console",
    "fault_registers_help",
    "fmt_pct",
    "int_at_least",
    "plain",
    "positive",
    "add_sram_depth_option",
    "add_trace_depth_option",
    "elapsed_status",
    "require_sim",
    "revision",
    "seed",
    "uses_build_cache",
    "variant_from_args",
]

class _Piped(io.TextIOBase):
    """sys.stdout or sys.stderr as it is at each write (a test's capture too), with the spaces
    that pad a table's lines to the console width dropped when the stream is not a terminal: piped
    or saved output has no trailing blanks."""

    def __init__(self, name: str):
        super().__init__()
        self._name = name

    @property
    def _to(self):
        return getattr(sys, self._name)

    def write(self, s: str) -> int:
        to = self._to
        if not to.isatty():
            s = _TRAILING.sub("\n", s)
        return to.write(s)

    def flush(self) -> None:
        self._to.flush()

    def isatty(self) -> bool:
        return self._to.isatty()

    @property
    def encoding(self):
        return getattr(self._to, "encoding", "utf-8")


_TRAILING = re.compile(r"[ \t]+\n")
console = Console(file=_Piped("stdout"), emoji=False)
err_console = Console(file=_Piped("stderr"), soft_wrap=True, emoji=False)  # never break a message mid-command


def plain(*parts) -> Text:
    """Text taken literally: each part a string, or a ``(string, style)`` pair."""
    return Text.assemble(*parts)


def cells(*values) -> list[Text]:
    """Table cells taken literally (a :class:`Text` stays as it is)."""
    return [v if isinstance(v, Text) else Text("" if v is None else str(v)) for v in values]

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

    name = text.strip().upper()  # a0 is A0
    if name not in REVISIONS:
        raise argparse.ArgumentTypeError(f"unknown revision {text!r}{did_you_mean(name, REVISIONS)}; known "
                                         f"revisions: {', '.join(REVISIONS)}")
    return name


def did_you_mean(word: str, known) -> str:
    """``; did you mean X?`` for the closest known name, or nothing."""
    import difflib

    close = difflib.get_close_matches(word, list(known), n=1, cutoff=0.5)
    return f"; did you mean {close[0]}?" if close else ""


# ---- option groups ------------------------------------------------------------------------------

class Tracked(argparse._StoreAction):
    """A plain store that remembers it was given, so that a contradiction with an option that turns
    its part off (``--no-sweep --sweep-bw 1 2``) can be refused: see :func:`refuse_unused`."""

    def __call__(self, parser, namespace, values, option_string=None):
        namespace.__dict__.setdefault("_given", {})[self.dest] = option_string
        super().__call__(parser, namespace, values, option_string)


def refuse_unused(args, switch: str, dests: tuple[str, ...]) -> None:
    """CannotStart if ``switch`` (an option such as ``--no-sweep``) is set and any of ``dests`` (the
    Tracked options it makes meaningless) was given."""
    given = getattr(args, "_given", {})
    used = [given[d] for d in dests if d in given]
    if used:
        raise CannotStart(f"{switch} turns off what {', '.join(used)} would set: give one or the other")


class Once(argparse.Action):
    """An option that takes one value: given twice with different values it is refused (argparse
    would keep the last one silently: ``--sim verilator --sim icarus``, ``--json a --json b``)."""

    def __call__(self, parser, namespace, values, option_string=None):
        seen = namespace.__dict__.setdefault("_given_once", {})
        if self.dest in seen and seen[self.dest] != values:
            parser.error(f"{option_string} given twice ({seen[self.dest]} and {values}): give it once")
        seen[self.dest] = values
        setattr(namespace, self.dest, values)


def add_sim_option(p: argparse.ArgumentParser, help: str | None = None) -> None:
    p.add_argument("--sim", default=DEFAULT_SIM, choices=SIMULATORS, action=Once,
                   help=help or f"simulator to run on: {', '.join(SIMULATORS)} (default: {DEFAULT_SIM})")


def add_array_option(p: argparse.ArgumentParser, help: str | None = None) -> None:
    p.add_argument("--array", type=array, default=None, metavar="ROWSxCOLS", action=Once,
                   help=help or "systolic array size, e.g. 4x4 (the default) or 8x8")


def add_seed_option(p: argparse.ArgumentParser, help: str | None = None) -> None:
    p.add_argument("--seed", type=seed, default=1, action=Once, help=help or "seed of the random data (default: 1)")


def add_rev_option(p: argparse.ArgumentParser, *, default: str | None = "A0", required: bool = False,
                   help: str | None = None) -> None:
    from rtl.revisions import REVISIONS

    known = f"revisions: {', '.join(REVISIONS)}; any case"
    p.add_argument("--rev", type=revision, default=None if required else default, required=required,
                   help=f"{help} ({known})" if help else f"silicon revision ({known})")


def add_junit_option(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument("--junit", type=Path, default=None, metavar="PATH", action=Once,
                   help=f"also write JUnit XML to PATH, a testcase per {what} (a CI's test report reads it)")


def add_json_option(p: argparse.ArgumentParser, help: str | None = None) -> None:
    p.add_argument("--json", type=Path, default=None, metavar="PATH", action=Once,
                   help=help or "also write the results as JSON to PATH")


# Output options by their argparse ``dest``: checked for writability before anything is built.
OUTPUT_FILES = ("json", "trace", "out", "junit")  # checked by main() before anything is built
OUTPUT_DIRS = ("report",)


def uses_build_cache(p: argparse.ArgumentParser) -> None:
    """This command builds simulators: the cache folder is checked for writability first."""
    p.set_defaults(uses_build_cache=True)


def add_formats_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--formats", nargs="+", default=None, metavar="FMT",
                   help=f"MATMUL formats to build the chip with ({' '.join(FORMAT_NAMES)}, default all); an "
                   "int8-only chip builds ~3x faster and simulates ~3.5x faster")
    p.add_argument("--no-vector", dest="vector", action="store_false",
                   help="build the chip without the vector unit (no softmax, norms or attention): it builds "
                        "faster; it simulates GEMMs and reductions at the same speed, since the unit's gated "
                        "clock stops it while idle (docs/simulation.md)")


# ---- helpers ------------------------------------------------------------------------------------

def variant_from_args(args: argparse.Namespace):
    """The :class:`cosim.build.Variant` named by ``--array``, ``--rev``, ``--formats`` and, where the
    command has them, ``--sram-depth`` and ``--trace-depth``."""
    from dataclasses import replace

    from cosim.build import Variant
    from rtl.config import ChipConfig

    cfg = args.array or ChipConfig()
    if args.formats:
        try:
            cfg = replace(cfg, formats=tuple(args.formats))
        except ValueError as e:
            raise CannotStart(f"--formats: {e}") from None
    if not getattr(args, "vector", True):
        cfg = replace(cfg, vector=False)
    if getattr(args, "sram_depth", None):
        try:
            cfg = cfg.with_sram_depth(args.sram_depth)
        except ValueError as e:
            raise CannotStart(f"--sram-depth: {e}") from None
    if getattr(args, "trace_depth", None):  # after --sram-depth: the one asked for by name wins
        try:
            cfg = replace(cfg, trace_depth=args.trace_depth)
        except ValueError as e:
            raise CannotStart(f"--trace-depth: {e}") from None
    return Variant(config=cfg, revision=args.rev, board=board_from_args(args, cfg))


def board_from_args(args: argparse.Namespace, cfg):
    """The board (rtl/board.py) named by ``--dram-bw``, ``--dram-latency`` and ``--dram-size``,
    checked against the chip before anything is built."""
    from rtl.board import BoardConfig

    kw = {}
    if getattr(args, "dram_bw", None) is not None:
        kw["bandwidth"] = args.dram_bw
    if getattr(args, "dram_latency", None) is not None:
        kw["latency"] = args.dram_latency
    if getattr(args, "dram_size", None) is not None:
        kw["dram_bytes"] = args.dram_size
    board = BoardConfig(**kw)
    try:
        board.resolve(cfg)
    except ValueError as e:
        raise CannotStart(f"--dram-*: {e}") from None
    return board


def _bytes_per_cycle(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected bytes per cycle (a number such as 1 or 0.5), not {text!r}") from None
    if not v > 0 or not math.isfinite(v):
        raise argparse.ArgumentTypeError(f"bandwidth must be a finite number of bytes per cycle above 0, not {text}")
    return v


def _size(text: str) -> int:
    units = {"k": 1 << 10, "m": 1 << 20}
    t = text.strip().lower().rstrip("ib")
    mult = units.get(t[-1:], 1)
    try:
        return int(t[:-1] if mult > 1 else t) * mult
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a size in bytes such as 1048576, 1M or 256K, not {text!r}") from None


def add_dram_options(p: argparse.ArgumentParser, *, bandwidth_only: bool = False) -> None:
    """``--dram-bw``, ``--dram-latency``, ``--dram-size``: the board's DRAM (board_from_args);
    ``bandwidth_only``: ``--dram-bw`` alone."""
    from rtl.board import RIDGE_MACS_PER_BYTE

    p.add_argument("--dram-bw", type=_bytes_per_cycle, default=None, metavar="BYTES_PER_CYCLE",
                   help="sustained DRAM bandwidth, reads and writes together (default: peak MACs per cycle / "
                        f"{RIDGE_MACS_PER_BYTE}, a ridge point of {RIDGE_MACS_PER_BYTE} MACs per byte: 1 B/cycle "
                        "on 4x4); at most one bus beat per cycle")
    if bandwidth_only:
        return
    p.add_argument("--dram-latency", type=positive, default=None, metavar="CYCLES",
                   help="cycles from a read address to its first data beat (default: 32)")
    p.add_argument("--dram-size", type=_size, default=None, metavar="BYTES",
                   help="DRAM size, a power of two from 4K to 16M (default: 4M)")


def add_sram_depth_option(p: argparse.ArgumentParser) -> None:
    """``--sram-depth N``: every SRAM N words, and ``--trace-depth`` beside it (``variant_from_args``
    applies both)."""
    from rtl.config import DEFAULT_TRACE_DEPTH

    p.add_argument("--sram-depth", type=positive, default=None, metavar="N",
                   help="words in every SRAM, the trace buffer's too (power of two; smaller is quicker to test; "
                        f"default 1024, the trace buffer {DEFAULT_TRACE_DEPTH})")
    add_trace_depth_option(p)


def add_trace_depth_option(p: argparse.ArgumentParser) -> None:
    """``--trace-depth N``: the trace buffer's entries (``ChipConfig.trace_depth``), a build parameter."""
    from rtl.config import DEFAULT_TRACE_DEPTH, MAX_TRACE_DEPTH

    p.add_argument("--trace-depth", type=positive, default=None, metavar="N", action=Once,
                   help=f"entries of the chip's trace buffer, one event each (power of two, 4 to {MAX_TRACE_DEPTH}; "
                        f"default {DEFAULT_TRACE_DEPTH}). --trace keeps the first N events of a run and counts the "
                        "rest as dropped; a run makes about two events per command (a 64^3 GEMM on 4x4: 1,688, a "
                        "128^3 one: 11,168), and a warning names the depth that keeps them all. A deeper buffer is "
                        "another build (cached), more simulated SRAM, and a longer bring-up memory test")


def require_sim(name: str):
    """The simulator's :class:`cosim.toolchain.SimInfo`, or :class:`CannotStart` saying how to install it."""
    try:
        return find_simulator(name)
    except SimulatorMissing as e:
        raise CannotStart(str(e)) from None


def fault_registers_help(indent: str = "  ", width: int = 96) -> str:
    """The registers a ``csr:<REGISTER>`` fault may name, from the register map (rtl/csr_map.py),
    wrapped for a help text."""
    import textwrap

    from rtl.csr_map import REGISTERS

    return textwrap.fill(f"<REGISTER> (any case): {', '.join(r.name for r in REGISTERS)}", width,
                         initial_indent=indent, subsequent_indent=indent + "  ", break_on_hyphens=False,
                         break_long_words=False)


def fmt_pct(x: float) -> str:
    return f"{100 * x:.1f}%"


# ---- output paths: checked before anything is built ----------------------------------------------

def _why(e: OSError) -> str:
    return e.strerror or str(e)


# Folders check_output_dir created, outermost first: a command refused before it starts removes
# the ones still empty (remove_created_folders), so a refusal leaves nothing behind.
CREATED_FOLDERS: list[Path] = []


def remove_created_folders() -> None:
    """Remove the folders the output checks created that are still empty, innermost first."""
    for path in reversed(CREATED_FOLDERS):
        try:
            path.rmdir()  # only an empty folder goes
        except OSError:
            pass
    CREATED_FOLDERS.clear()


def check_output_dir(path: Path, what: str) -> None:
    """Make sure ``path`` is (or can be made) a folder this process can write, or raise
    :class:`CannotStart` naming it and the problem. Creates the folder (and records what it
    created in :data:`CREATED_FOLDERS`)."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise CannotStart(f"{what} {path}: it exists and is not a folder")
    missing = [p for p in [path, *path.parents] if not p.exists()][::-1]
    try:
        path.mkdir(parents=True, exist_ok=True)
        CREATED_FOLDERS.extend(p for p in missing if p.is_dir())
    except OSError as e:
        raise CannotStart(f"{what} {path}: cannot create the folder ({_why(e)})") from None
    try:
        with tempfile.TemporaryFile(dir=path):
            pass
    except OSError as e:
        import errno

        denied = e.errno in (errno.EACCES, errno.EPERM, errno.EROFS)  # else a folder of no real files (/proc)
        raise CannotStart(f"{what} {path}: " + ("the folder is not writable" if denied else
                                                 "no file can be created in the folder") + f" ({_why(e)})") from None


def check_output_file(path: Path, what: str) -> None:
    """Make sure ``path`` can be written (its folder is created; an existing file is left as it
    is), or raise :class:`CannotStart` naming it and the problem."""
    path = Path(path)
    if path.is_dir():
        raise CannotStart(f"{what} {path}: it is a folder, not a file")
    check_output_dir(path.parent if str(path.parent) else Path("."), f"{what} {path}: its folder")
    existed = path.exists()
    try:
        with open(path, "a"):
            pass
    except OSError as e:
        raise CannotStart(f"{what} {path}: cannot write the file ({_why(e)})") from None
    if not existed:
        path.unlink(missing_ok=True)


def check_outputs(args: argparse.Namespace) -> None:
    """Every output path of a command, and the build cache if it builds, before it starts."""
    for dest in OUTPUT_FILES:
        if getattr(args, dest, None) is not None:
            check_output_file(getattr(args, dest), f"--{dest.replace('_', '-')}")
    for dest in OUTPUT_DIRS:
        if getattr(args, dest, None) is not None:
            check_output_dir(getattr(args, dest), f"--{dest.replace('_', '-')}")
    if getattr(args, "uses_build_cache", False):
        from cosim.build import cache_root

        source = "$FIRSTLIGHT_CACHE" if os.environ.get("FIRSTLIGHT_CACHE") else "default; set $FIRSTLIGHT_CACHE to move it"
        try:
            root = cache_root()
        except ValueError as e:
            raise CannotStart(str(e)) from None
        check_output_dir(root, f"the build cache ({source})")


# ---- the job folder in the system temp directory --------------------------------------------------

def add_keep_option(p: argparse.ArgumentParser, help: str | None = None) -> None:
    p.add_argument("--keep", action="store_true",
                   help=help or "keep the simulator job's folder in the system temp directory (job.json, "
                        "records.jsonl, sim.log) and print its path, even when the run passes (default: removed "
                        "when the run passes; a failed run always keeps it and prints its path)")


class JobFolder:
    """The folder of one simulator job (``job.json``, ``records.jsonl``, ``sim.log``), made in
    the system temp directory (``firstlight-<what>-XXXXXXXX``) for a command to pass to
    ``run_job(work_dir=...)``.

    Leaving the ``with`` block removes it when the caller set ``passed`` (a passing verdict) and
    nothing was raised, unless ``keep``; otherwise the folder stays and its path is printed: a
    failed run keeps the simulator's log for whoever reads the failure.
    """

    def __init__(self, keep: bool, what: str = "run"):
        try:
            self.path = Path(tempfile.mkdtemp(prefix=f"firstlight-{what}-")).resolve()
        except OSError as e:
            raise CannotStart(f"the system temp directory {tempfile.gettempdir()}: cannot make a job folder in it "
                              f"({_why(e)}); set $TMPDIR to a writable folder") from None
        self.keep = keep
        self.passed = False

    def __enter__(self) -> JobFolder:
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        import shutil

        from firstlight.errors import Interrupted

        ok = self.passed and exc_type is None
        if ok and not self.keep:
            shutil.rmtree(self.path, ignore_errors=True)
        elif ok:
            console.print(plain(f"job folder kept (--keep): {self.path}"), soft_wrap=True)
        elif exc_type is not None and issubclass(exc_type, (Interrupted, KeyboardInterrupt)):
            # stopped by a signal: no verdict; what the simulator wrote until then stays, said so
            why = exc.name if isinstance(exc, Interrupted) else "SIGINT"
            err_console.print(plain(f"job folder kept (the run was interrupted by {why}): {self.path}"), soft_wrap=True)
        else:
            err_console.print(plain(f"job folder kept (the run did not pass): {self.path}"), soft_wrap=True)
        return False


# ---- tables that never cut a number ---------------------------------------------------------------

class FittedTable:
    """A table whose cells are never cut, at any console width.

    As one table if it fits; else the first ``keys`` columns are repeated in several narrower
    tables that share out the other columns; else (very narrow) one block per row with a line
    per column. Headers may hold line breaks; cells are taken literally (see :func:`cells`).
    """

    def __init__(self, title: str, headers: list[str], rows: list[list], *, keys: int = 1,
                 justify: list[str] | None = None):
        self.title, self.headers, self.keys = title, headers, keys
        self.rows = [cells(*r) for r in rows]
        self.justify = justify or (["left"] * keys + ["right"] * (len(headers) - keys))
        self.widths = [max([cell_len(line) for line in h.split("\n")] + [r[i].cell_len for r in self.rows])
                       for i, h in enumerate(headers)]

    def _width(self, cols: list[int]) -> int:
        return sum(self.widths[c] + 2 for c in cols) + len(cols) + 1  # padding 1+1, one border each, plus one

    def _table(self, cols: list[int], title: str) -> Table:
        t = Table(title=Text(title))
        for c in cols:
            t.add_column(Text(self.headers[c]), justify=self.justify[c], no_wrap=True, min_width=self.widths[c])
        for r in self.rows:
            t.add_row(*[r[c] for c in cols])
        return t

    def layout(self, width: int) -> list[list[int]] | None:
        """The column groups of the tables at this width; None for one block per row."""
        every = list(range(len(self.headers)))
        if self._width(every) <= width:
            return [every]
        keys, groups, cur = every[: self.keys], [], []
        for c in every[self.keys:]:
            if cur and self._width(keys + cur + [c]) > width:
                groups.append(cur)
                cur = []
            cur.append(c)
        groups.append(cur)
        if all(self._width(keys + g) <= width for g in groups):
            return [keys + g for g in groups]
        return None

    def _blocks(self):
        yield Text(self.title, style="bold")
        for r in self.rows:
            grid = Table(show_header=False, box=None, padding=(0, 1), title=Text.assemble(*[
                (r[c].plain + " ", "bold") for c in range(self.keys)]), title_justify="left")
            grid.add_column(no_wrap=True)
            grid.add_column(overflow="fold")
            for c in range(self.keys, len(self.headers)):
                grid.add_row(Text(self.headers[c].replace("\n", " ")), r[c])
            yield grid

    def __rich_console__(self, console, options):
        groups = self.layout(options.max_width)
        if groups is None:
            yield from self._blocks()
            return
        for i, cols in enumerate(groups):
            title = self.title if len(groups) == 1 else f"{self.title} ({i + 1}/{len(groups)})"
            yield self._table(cols, title)


@contextmanager
def elapsed_status(what: str):
    """Long work with no count to show (one simulator run): on a terminal, a transient line on
    stderr with a spinner and the seconds so far; elsewhere (a pipe, a CI log) one line saying
    what is running, so that a silent minute is never a mystery."""
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    if not err_console.is_terminal:
        err_console.print(plain(f"{what} ..."))
        yield
        return
    with Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(), console=err_console,
                  transient=True) as progress:
        progress.add_task(what, total=None)
        yield


class Reporter:
    """What a long job shows as it goes (:func:`firstlight.numerics.run_numerics` takes one):
    tables and notes, on a console, taken literally."""

    def __init__(self, console: Console):
        self.console = console

    def table(self, title: str, headers: list[str], rows: list[list], keys: int = 1) -> None:
        self.console.print(FittedTable(title, headers, rows, keys=keys))

    def note(self, text: str, style: str = "") -> None:
        self.console.print(Text(text, style=style))
