"""``firstlight cache``: what the build cache holds, and pruning it (cosim/cache.py)."""

from __future__ import annotations

import argparse
import time

from firstlight.errors import EXIT_OK, CannotStart, exit_codes_help

from .common import FittedTable, console, plain

__all__ = ["add_parser", "cmd"]

EPILOG = """\
examples:
  firstlight cache                          the cache's folder, its entries by kind, their sizes
  firstlight cache prune --older-than 14    remove what no build or run used in two weeks
  firstlight cache prune --max-size 2G      remove the least recently used until 2 GiB are left
  firstlight cache prune --max-size 0 --dry-run   list everything a full prune would remove

An entry's last use is its marker's time, which every cache hit refreshes. An entry a build or a
run holds (its lock taken) is skipped and said so. A pruned entry is rebuilt when next needed.

""" + exit_codes_help()


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("cache", help="the build cache: its size by kind, and pruning it",
                              description="The simulator builds, Verilog and runtimes cached under $FIRSTLIGHT_CACHE "
                                          "(default ~/.cache/firstlight).",
                              epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.set_defaults(handler=cmd, action="info")
    sub = p.add_subparsers(dest="action", metavar="ACTION")
    sub.add_parser("info", help="the cache's entries by kind and their sizes (the default)", epilog=exit_codes_help(),
                   formatter_class=argparse.RawDescriptionHelpFormatter)
    pr = sub.add_parser("prune", help="remove entries last used long ago, or the least recently used down to a size",
                        epilog=exit_codes_help(), formatter_class=argparse.RawDescriptionHelpFormatter)
    pr.add_argument("--older-than", type=float, default=None, metavar="DAYS",
                    help="remove entries last used more than DAYS days ago")
    pr.add_argument("--max-size", default=None, metavar="SIZE",
                    help="then remove the least recently used until the cache holds at most SIZE (500M, 2G, bytes)")
    pr.add_argument("--dry-run", action="store_true", help="list what would be removed; remove nothing")


def _mb(n: int) -> str:
    return f"{n / (1 << 20):,.1f} MB"


def _age(t: float) -> str:
    d = (time.time() - t) / 86400
    return "today" if d < 1 else f"{d:.0f} days ago"


def cmd(args) -> int:
    from cosim.build import cache_root
    from cosim.cache import KINDS, entries, parse_size, prune

    try:
        root = cache_root()
    except ValueError as e:
        raise CannotStart(str(e)) from None
    if args.action == "prune":
        if args.older_than is None and args.max_size is None:
            raise CannotStart("cache prune needs --older-than DAYS, --max-size SIZE or both (see --help)")
        if args.older_than is not None and not args.older_than >= 0:
            raise CannotStart(f"--older-than is a number of days >= 0, not {args.older_than}")
        try:
            max_bytes = None if args.max_size is None else parse_size(args.max_size)
        except ValueError as e:
            raise CannotStart(f"--max-size: {e}") from None
        removed, busy = prune(older_than_days=args.older_than, max_bytes=max_bytes, dry_run=args.dry_run, root=root)
        verb = "would remove" if args.dry_run else "removed"
        for e in removed:
            console.print(plain(f"{verb} {e.kind} {e.path.name} ({_mb(e.bytes)}, last used {_age(e.last_used)})"),
                          highlight=False)
        for e in busy:
            console.print(plain(f"skipped {e.kind} {e.path.name}: in use (its lock is held)"), highlight=False)
        left = sum(e.bytes for e in entries(root))
        console.print(plain(f"{verb} {len(removed)} entries, {_mb(sum(e.bytes for e in removed))}; the cache holds "
                            f"{_mb(left)} in {root}"), highlight=False)
        return EXIT_OK
    found = entries(root)
    rows = []
    for kind in KINDS:
        es = [e for e in found if e.kind == kind]
        if es:
            rows.append([kind, str(len(es)), _mb(sum(e.bytes for e in es)), _age(min(e.last_used for e in es)),
                         _age(max(e.last_used for e in es))])
    rows.append(["total", str(len(found)), _mb(sum(e.bytes for e in found)), "", ""])
    console.print(FittedTable(f"build cache {root}", ["kind", "entries", "size", "least recently used",
                                                       "most recently used"], rows))
    return EXIT_OK
