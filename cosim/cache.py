"""The build cache (``$FIRSTLIGHT_CACHE``, default ``~/.cache/firstlight``): what it holds and
pruning it.

Each entry is one folder: a simulator build (``sim/<sim>-<key>``), a chip's Verilog
(``verilog/<key>``), the shared Verilator runtime (``runtime/<key>``), a bench-limit replay model
(``limit/``) or an area estimate (``area/``). An entry's last use is the modification time of its
marker (``.complete`` for a build, ``manifest.json`` for Verilog), which a cache hit refreshes
(cosim/build.py); an entry without one counts from its newest file. Pruning takes whole entries,
least recently used first, each under its own lock: an entry a build or a run holds is skipped.
"""

from __future__ import annotations

import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from filelock import FileLock, Timeout

from .build import cache_root

__all__ = ["Entry", "entries", "prune", "KINDS", "parse_size"]

KINDS = ("sim", "verilog", "runtime", "limit", "area")
MARKERS = (".complete", "manifest.json")


@dataclass(frozen=True)
class Entry:
    kind: str
    path: Path
    bytes: int
    last_used: float  # seconds since the epoch


def _size_and_newest(path: Path) -> tuple[int, float]:
    total, newest = 0, 0.0
    for root, _dirs, files in os.walk(path):
        for f in files:
            try:
                st = os.stat(os.path.join(root, f))
            except OSError:
                continue
            total += st.st_size
            newest = max(newest, st.st_mtime)
    return total, newest


def entries(root: Path | None = None) -> list[Entry]:
    """Every entry of the cache, least recently used first."""
    root = root or cache_root()
    out = []
    for kind in KINDS:
        base = root / kind
        if not base.is_dir():
            continue
        for p in base.iterdir():
            if not p.is_dir():
                continue
            size, newest = _size_and_newest(p)
            marker = next((p / m for m in MARKERS if (p / m).exists()), None)
            used = marker.stat().st_mtime if marker is not None else newest
            out.append(Entry(kind, p, size, used))
    return sorted(out, key=lambda e: e.last_used)


def prune(*, older_than_days: float | None = None, max_bytes: int | None = None, dry_run: bool = False,
          root: Path | None = None) -> tuple[list[Entry], list[Entry]]:
    """Remove the entries last used more than ``older_than_days`` ago, then the least recently
    used ones until the cache holds at most ``max_bytes``. Returns (removed, skipped because in
    use); ``dry_run``: what would be removed, nothing is."""
    if older_than_days is None and max_bytes is None:
        raise ValueError("prune needs --older-than DAYS, --max-size SIZE or both")
    all_entries = entries(root)
    total = sum(e.bytes for e in all_entries)
    cutoff = None if older_than_days is None else time.time() - older_than_days * 86400
    removed, busy = [], []
    for e in all_entries:
        old = cutoff is not None and e.last_used < cutoff
        over = max_bytes is not None and total > max_bytes
        if not (old or over):
            continue
        if dry_run:
            removed.append(e)
            total -= e.bytes
            continue
        lock = FileLock(str(e.path) + ".lock")
        try:
            lock.acquire(timeout=0)
        except Timeout:
            busy.append(e)
            continue
        try:
            shutil.rmtree(e.path, ignore_errors=True)
        finally:
            lock.release()
        Path(str(e.path) + ".lock").unlink(missing_ok=True)
        removed.append(e)
        total -= e.bytes
    return removed, busy


def parse_size(text: str) -> int:
    """``500M``, ``2G``, ``1.5G``, ``800K`` or bytes -> bytes (ValueError saying what is accepted)."""
    t = text.strip().upper().removesuffix("B")
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
    try:
        if t and t[-1] in mult:
            return int(float(t[:-1]) * mult[t[-1]])
        return int(t)
    except ValueError:
        raise ValueError(f"a size is bytes or a number with K, M, G or T (500M, 2G), not {text!r}") from None
