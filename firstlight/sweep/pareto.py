"""Reading a sweep database back: Pareto fronts (cycles vs area) and a comparison of two databases.

A design is on a workload's front when no other design that passed it is at most as large and
at most as slow, and strictly better in one of the two. Only runs that passed count: a design
that computes the wrong answer fast is not a trade-off. The geometric mean of cycles across
workloads ranks the designs that passed every workload of the database.
"""

from __future__ import annotations

import json
import math
import sqlite3
from pathlib import Path

from . import db as sweepdb

__all__ = ["pareto_front", "fronts", "short_names", "compare", "load_rows", "write_plot"]


def pareto_front(points: list[dict], x: str = "area", y: str = "cycles") -> list[dict]:
    """The points no other point dominates (both coordinates minimised), sorted by ``x``."""
    pts = sorted((p for p in points if p.get(x) is not None and p.get(y) is not None), key=lambda p: (p[x], p[y]))
    front: list[dict] = []
    best = math.inf
    for p in pts:
        if p[y] < best or (front and p[x] == front[-1][x] and p[y] == front[-1][y]):
            front.append(p)
            best = min(best, p[y])
    return front


def load_rows(path: Path) -> list[dict]:
    """The newest run per (design, workload) of a database; raises FileNotFoundError or
    ``sqlite3.DatabaseError`` for a path that is no sweep database."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such database (sweep run --db writes one)")
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    con.row_factory = sqlite3.Row
    try:
        tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if "runs" not in tables:
            raise sqlite3.DatabaseError(f"{path} has no table runs: not a sweep database")
        rows = sweepdb.latest_runs(con)
    finally:
        con.close()
    newest: dict[tuple, dict] = {}
    for r in rows:  # one per (design, workload) even over several sims or seeds: the newest
        k = (r["design"], r["workload"])
        if k not in newest or r["created"] > newest[k]["created"]:
            newest[k] = r
    return sorted(newest.values(), key=lambda r: (r["workload"], r["design"]))


def short_names(designs) -> tuple[dict[str, str], str]:
    """Design names without the parts every design shares: ``({name: short}, shared parts)``."""
    names = sorted(set(designs))
    if not names:
        return {}, ""
    split = {n: n.split("-") for n in names}
    common = set.intersection(*(set(p) for p in split.values())) if len(names) > 1 else set()
    short = {n: "-".join(t for t in parts if t not in common) or n for n, parts in split.items()}
    shared = "-".join(t for t in split[names[0]] if t in common)
    return short, shared


def fronts(rows: list[dict]) -> dict:
    """Per workload: its front, how many designs passed, failed, erred; and the geometric-mean
    front over the designs that passed every workload."""
    workloads = sorted({r["workload"] for r in rows})
    out: dict = {"workloads": {}, "geomean": None}
    per_design: dict[str, dict[str, dict]] = {}
    for w in workloads:
        rs = [r for r in rows if r["workload"] == w]
        ok = [r for r in rs if r["status"] == "pass"]
        for r in ok:
            per_design.setdefault(r["design"], {})[w] = r
        front = pareto_front(ok)
        out["workloads"][w] = {
            "front": [_point(r) for r in front],
            "passed": len(ok),
            "failed": [_point(r) for r in rs if r["status"] == "fail"],
            "errors": [_point(r) for r in rs if r["status"] == "error"],
            "points": [_point(r) for r in ok],
        }
    complete = {d: ws for d, ws in per_design.items() if len(ws) == len(workloads)}
    if len(workloads) > 1 and complete:
        pts = []
        for d, ws in complete.items():
            area = next(iter(ws.values()))["area"]
            gm = math.exp(sum(math.log(max(1, r["cycles"])) for r in ws.values()) / len(ws))
            pts.append({"design": d, "area": area, "cycles": gm})
        out["geomean"] = {"workloads": workloads, "designs": len(pts),
                          "front": [{**p, "cycles": round(p["cycles"], 1)} for p in pareto_front(pts)],
                          "points": [{**p, "cycles": round(p["cycles"], 1)} for p in pts]}
    return out


def _point(r: dict) -> dict:
    keys = ("design", "area", "cycles", "utilization", "roof_utilization", "bound", "dram_bytes", "memory_bits",
            "status", "error", "commit")
    return {k: r.get(k) for k in keys if k in r}


def write_plot(result: dict, path: Path, title: str = "", sim: str | None = None) -> None:
    """One panel per workload (and one for the geometric mean): every design that passed as a
    grey dot, the front as a red line, its designs named."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = list(result["workloads"].items())
    if result.get("geomean"):
        panels.append(("geometric mean", result["geomean"]))
    n = len(panels)
    cols = min(3, n)
    rows = math.ceil(n / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(5.2 * cols, 4.2 * rows), squeeze=False)
    every = {p["design"] for _, d in panels for p in d["points"]}
    short, _ = short_names(every)
    for ax, (name, d) in zip(axes.flat, panels):
        pts = [p for p in d["points"] if p["area"] is not None]
        ax.scatter([p["area"] for p in pts], [p["cycles"] for p in pts], s=18, color="0.6", label="passed")
        fr = [p for p in d["front"] if p["area"] is not None]
        ax.plot([p["area"] for p in fr], [p["cycles"] for p in fr], "o-", color="tab:red", ms=5, label="Pareto front")
        for p in fr:
            ax.annotate(short.get(p["design"], p["design"]), (p["area"], p["cycles"]), fontsize=6,
                        xytext=(3, 3), textcoords="offset points")
        bad = len(d.get("failed", [])) + len(d.get("errors", []))
        ax.set_title(f"{name}" + (f"  ({bad} not passed)" if bad else ""), fontsize=9)
        ax.set_xlabel("area proxy (gate equivalents)")
        ax.set_ylabel("cycles" if name != "geometric mean" else "geometric mean of cycles")
        ax.set_yscale("log")
        ax.grid(True, alpha=0.3)
    for ax in list(axes.flat)[n:]:
        ax.set_visible(False)
    axes.flat[0].legend(fontsize=7)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    from firstlight.provenance import png_metadata

    fig.savefig(path, dpi=110, metadata=png_metadata(sim))
    plt.close(fig)


def compare(rows_a: list[dict], rows_b: list[dict]) -> dict:
    """What changed from A to B per (design, workload): cycles, area, verdict; and what is only
    in one of them."""
    a = {(r["design"], r["workload"]): r for r in rows_a}
    b = {(r["design"], r["workload"]): r for r in rows_b}
    changed, same = [], 0
    for k in sorted(a.keys() & b.keys()):
        ra, rb = a[k], b[k]
        dc = None
        if ra["cycles"] is not None and rb["cycles"] is not None and ra["cycles"]:
            dc = (rb["cycles"] - ra["cycles"]) / ra["cycles"]
        entry = {"design": k[0], "workload": k[1], "cycles_a": ra["cycles"], "cycles_b": rb["cycles"], "delta": dc,
                 "area_a": ra["area"], "area_b": rb["area"], "status_a": ra["status"], "status_b": rb["status"]}
        if ra["cycles"] != rb["cycles"] or ra["area"] != rb["area"] or ra["status"] != rb["status"]:
            changed.append(entry)
        else:
            same += 1
    return {
        "commits_a": sorted({r["commit"] for r in rows_a if r.get("commit")}),
        "commits_b": sorted({r["commit"] for r in rows_b if r.get("commit")}),
        "common": len(a.keys() & b.keys()), "unchanged": same, "changed": changed,
        "only_a": [list(k) for k in sorted(a.keys() - b.keys())], "only_b": [list(k) for k in sorted(b.keys() - a.keys())],
        "regressed": [e for e in changed if e["status_a"] == "pass" and e["status_b"] != "pass"],
    }


def to_json(obj) -> str:
    return json.dumps(obj, indent=2, default=str)
