"""Design-space sweeps (issue 14): the spec's checks, the Pareto front, the database, and real
sweeps on a real Dask cluster -- one of them losing a worker in the middle of a run."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import threading
import time
import tomllib
from pathlib import Path

import pytest

from firstlight import cli
from firstlight.sweep import db as sweepdb
from firstlight.sweep.pareto import compare, fronts, pareto_front
from firstlight.sweep.spec import SpecError, parse_spec

ROOT = Path(__file__).resolve().parent.parent
SMALL = ROOT / "examples" / "sweep-small.toml"

GOOD = {"grid": {"array": "4x4", "sram_depth": 64, "formats": "int8", "vector": False},
        "workload": [{"kind": "gemm", "m": 8, "n": 8, "k": 16}]}


def _spec(**changes) -> dict:
    d = json.loads(json.dumps(GOOD))
    for k, v in changes.items():
        if k == "grid":
            d["grid"].update(v)
        else:
            d[k] = v
    return d


# ---- the spec: every bad one is refused with a message that says what and where --------------

@pytest.mark.parametrize("data, needle", [
    (_spec(grid={"sram_dept": 64}), "unknown parameter 'sram_dept' (did you mean 'sram_depth'?)"),
    (_spec(grid={"array": "3x3"}), "rows must be one of (2, 4, 8, 16), not 3"),
    (_spec(grid={"sram_depth": [64, 100]}), "sram_depth=100, formats='int8', vector=False): the chip rejects it: operand_depth must be a power of two in [16, 65536], not 100"),
    (_spec(grid={"dram_bandwidth": 64}), "the board rejects it: DRAM bandwidth must be above 0 and at most 4"),
    (_spec(grid={"revision": "Z9"}), "unknown revision 'Z9'"),
    (_spec(grid={"formats": "int8+fp16"}), "unknown format 'fp16'"),
    (_spec(grid={"array": []}), "array = [] is an empty axis, so the grid has no design point"),
    (_spec(workload=[]), "the spec has no [[workload]]"),
    ({"workload": GOOD["workload"]}, "the spec has no [grid] table"),
    (_spec(grid_size=3), "unknown top-level key 'grid_size'"),
    (_spec(workload=[{"kind": "gem", "m": 1, "n": 1, "k": 1}]), "kind 'gem' is not a workload kind (did you mean 'gemm'?)"),
    (_spec(workload=[{"kind": "gemm", "m": 8, "n": 8}]), "workload 1 (gemm): missing k"),
    (_spec(workload=[{"kind": "gemm", "m": 8, "n": 8, "k": 8, "kk": 1}]), "unknown parameter 'kk'"),
    (_spec(workload=[{"kind": "gemm", "m": 0, "n": 8, "k": 8}]), "m must be a positive integer, not 0"),
    (_spec(workload=[{"kind": "softmax", "rows": 4, "cols": 8}]), "runs on no design point of the grid (e.g. "
                                                                  "4x4-op64-acc64-q1024-int8-novec-bw1-lat32-A0: needs "
                                                                  "the vector unit)"),
    (_spec(workload=[{"kind": "gemm", "m": 8, "n": 8, "k": 8}, {"kind": "gemm", "m": 8, "n": 8, "k": 8}]),
     "two workloads are named 'gemm-8x8x8'"),
])
def test_a_bad_spec_is_refused_with_what_and_where(data, needle):
    with pytest.raises(SpecError) as e:
        parse_spec(data)
    assert needle in str(e.value)


def test_a_bad_spec_exits_2_before_anything_is_built(tmp_path, monkeypatch, capsys):
    cache = tmp_path / "cache"
    monkeypatch.setenv("FIRSTLIGHT_CACHE", str(cache))
    spec = tmp_path / "bad.toml"
    spec.write_text('[grid]\narray = ["4x4", "8x8"]\nsram_depth = [64, 100]\n[[workload]]\nkind = "gemm"\n'
                    'm = 8\nn = 8\nk = 8\n')
    assert cli.main(["sweep", "run", str(spec), "--db", str(tmp_path / "s.db")]) == cli.EXIT_CANNOT_START
    err = " ".join(capsys.readouterr().err.split())
    assert f"cannot start: {spec}: [grid] (array='4x4', sram_depth=100): the chip rejects it" in err
    assert not any(cache.rglob("*")), "nothing may be built or generated for a bad spec"
    assert not (tmp_path / "s.db").exists()
    spec.write_text("[grid\n")
    assert cli.main(["sweep", "run", str(spec)]) == cli.EXIT_CANNOT_START
    assert "is not valid TOML" in capsys.readouterr().err


def test_a_pair_the_design_cannot_run_is_not_applicable_not_an_error():
    s = parse_spec(_spec(grid={"vector": [False, True]}, workload=[
        {"kind": "gemm", "m": 8, "n": 8, "k": 8}, {"kind": "layernorm", "rows": 4, "cols": 8}]))
    assert len(s.designs) == 2 and len(s.pairs()) == 3
    assert s.skipped == (("4x4-op64-acc64-q1024-int8-novec-bw1-lat32-A0", "layernorm-4x8", "needs the vector unit"),)


def test_a_workload_too_big_for_the_boards_dram_is_not_applicable_with_the_compilers_reason():
    """The DRAM need is the compiler's placement of the kernel's tensors (kernels/tile/runtime.py
    check_dram), not a formula of the sweep's own: gemm and gemm_lowp's int8 and FP kernels."""
    s = parse_spec(_spec(grid={"dram_bytes": [16384, 1 << 20], "formats": "int8+e4m3"}, workload=[
        {"kind": "gemm", "m": 64, "n": 64, "k": 64}, {"kind": "gemm", "m": 8, "n": 8, "k": 16},
        {"kind": "gemm_lowp", "m": 64, "n": 64, "k": 64, "recipe": "int8-channel"},
        {"kind": "gemm_lowp", "m": 64, "n": 64, "k": 64, "recipe": "mxfp8-e4m3-rceil"}]))
    assert {d for d, _, _ in s.skipped} == {"4x4-op64-acc64-q1024-int8+e4m3-novec-bw1-lat32-dram16k-A0"}
    why = {w: r for _, w, r in s.skipped}
    assert set(why) == {"gemm-64x64x64", "gemm-64x64x64-int8-channel", "gemm-64x64x64-mxfp8-e4m3-rceil"}, why
    assert why["gemm-64x64x64"].startswith("the kernel's tensors need ") and \
        why["gemm-64x64x64"].endswith("but the board has 16,384: build a larger board (--dram-size) or a smaller problem")
    assert why["gemm-64x64x64-int8-channel"] == why["gemm-64x64x64"], "an int8 recipe runs the int8 GEMM"
    assert why["gemm-64x64x64-mxfp8-e4m3-rceil"].startswith("the kernel's tensors need "), why
    assert why["gemm-64x64x64-mxfp8-e4m3-rceil"] != why["gemm-64x64x64"], "an FP recipe: gemm_fp's tensors, scales too"


def test_the_bundled_spec_is_ci_sized():
    """12 design points x 4 workloads or more (the issue), all of them int8-only chips without
    the vector unit (the quick builds), every pair applicable."""
    s = parse_spec(tomllib.loads(SMALL.read_text()), str(SMALL))
    assert len(s.designs) >= 12 and len(s.workloads) >= 4 and not s.skipped
    assert all(d.variant.config.formats == ("int8",) and not d.variant.config.vector for d in s.designs)
    full = parse_spec(tomllib.loads((ROOT / "examples" / "sweep-full.toml").read_text()))
    assert len(full.designs) > len(s.designs)


# ---- the front, the database, the comparison ---------------------------------------------------

def test_pareto_front_keeps_exactly_the_undominated_points():
    pts = [{"design": n, "area": a, "cycles": c} for n, a, c in
           [("a", 10, 100), ("b", 20, 50), ("c", 20, 60), ("d", 30, 50), ("e", 40, 10), ("f", 5, 200),
            ("g", 10, 100), ("h", 50, None)]]
    assert [p["design"] for p in pareto_front(pts)] == ["f", "a", "g", "b", "e"]


def _row(design, workload, status="pass", cycles=100, area=None, key=None, commit="c1", created=None):
    return {"key": key or f"{design}/{workload}/{commit}", "design": design, "workload": workload, "status": status,
            "passed": None if status == "error" else int(status == "pass"), "cycles": cycles, "commit": commit,
            "sim": "verilator", "seed": 1, "area_key": f"area-{design}", "error": "boom" if status == "error" else None}


def test_database_keeps_one_row_per_key_and_fills_the_area_in_later(tmp_path):
    con = sweepdb.open_db(tmp_path / "s.db")
    sweepdb.insert_run(con, _row("d1", "w1", cycles=100))
    sweepdb.insert_run(con, _row("d1", "w1", cycles=90))  # the same inputs again (--force): replaced
    sweepdb.insert_run(con, _row("d1", "w2", status="error", cycles=None))
    assert tuple(con.execute("SELECT COUNT(*), MIN(cycles) FROM runs").fetchone()) == (2, 90)
    assert sweepdb.stored_keys(con) == {"d1/w1/c1"}  # a harness error is run again next time
    assert [tuple(r) for r in con.execute("SELECT area FROM runs")] == [(None,), (None,)]
    sweepdb.insert_area(con, "area-d1", {"proxy": 1234, "gates": 1000, "ff_bits": 50, "memory_bits": 4096}, 1.5)
    assert {r[0] for r in con.execute("SELECT area FROM runs")} == {1234}
    cols = {r[1] for r in con.execute("PRAGMA table_info(runs)")}
    assert {"design", "workload", "passed", "cycles", "area", "commit", "sim_version", "tool_versions", "dram_bytes",
            "utilization"} <= cols


def test_fronts_count_only_runs_that_passed_and_the_geomean_only_complete_designs():
    rows = [dict(_row("small", "w1", cycles=400), area=10), dict(_row("small", "w2", cycles=100), area=10),
            dict(_row("big", "w1", cycles=100), area=40), dict(_row("big", "w2", cycles=100), area=40),
            dict(_row("wrong", "w1", status="fail", cycles=1), area=5), dict(_row("half", "w1", cycles=50), area=50)]
    r = fronts(rows)
    assert [p["design"] for p in r["workloads"]["w1"]["front"]] == ["small", "big", "half"]
    assert [p["design"] for p in r["workloads"]["w1"]["failed"]] == ["wrong"]
    assert r["geomean"]["designs"] == 2 and [p["cycles"] for p in r["geomean"]["front"]] == [200.0, 100.0]


def test_compare_shows_what_changed_and_exits_1_on_a_regression(tmp_path, capsys):
    a, b = sweepdb.open_db(tmp_path / "a.db"), sweepdb.open_db(tmp_path / "b.db")
    for con, commit, cyc, st in ((a, "c1", 100, "pass"), (b, "c2", 80, "pass")):
        sweepdb.insert_run(con, _row("d1", "w1", cycles=cyc, commit=commit))
        sweepdb.insert_run(con, _row("d1", "w2", cycles=50, commit=commit, status=st))
    sweepdb.insert_run(a, _row("d2", "w1", commit="c1"))
    c = compare(sweepdb.latest_runs(a), sweepdb.latest_runs(b))
    assert [(e["workload"], e["delta"]) for e in c["changed"]] == [("w1", -0.2)] and c["only_a"] == [["d2", "w1"]]
    assert cli.main(["sweep", "compare", str(tmp_path / "a.db"), str(tmp_path / "b.db")]) == cli.EXIT_OK
    sweepdb.insert_run(b, _row("d1", "w2", commit="c2", status="fail"))
    assert cli.main(["sweep", "compare", str(tmp_path / "a.db"), str(tmp_path / "b.db"),
                     "--json", str(tmp_path / "c.json")]) == cli.EXIT_FAIL
    assert "REGRESSED: w2 on d1: pass in A, fail in B" in capsys.readouterr().err
    assert json.loads((tmp_path / "c.json").read_text())["regressed"][0]["status_b"] == "fail"
    (tmp_path / "junk.db").write_text("not a database")
    assert cli.main(["sweep", "report", str(tmp_path / "junk.db")]) == cli.EXIT_CANNOT_START


# ---- real sweeps on a real Dask cluster ---------------------------------------------------------

def _rows(db: Path) -> list[dict]:
    con = sqlite3.connect(db)
    con.row_factory = sqlite3.Row
    try:
        return [dict(r) for r in con.execute("SELECT * FROM runs")]
    finally:
        con.close()


class _Killer(threading.Thread):
    """Waits until a worker is in the middle of a run (a run task assigned to it, nothing else,
    and its simulator process alive), then SIGKILLs that worker process."""

    def __init__(self, address: str):
        super().__init__(daemon=True)
        self.address, self.killed, self.stop = address, None, threading.Event()

    def run(self):
        import psutil
        from distributed import Client

        with Client(self.address, timeout=20) as c:
            pids = c.run(os.getpid)
            while not self.stop.is_set():
                for worker, keys in c.processing().items():
                    keys = [str(k) for k in keys]
                    pid = pids.get(worker)
                    if pid and keys and all(k.startswith("run-") for k in keys):
                        try:
                            kids = psutil.Process(pid).children(recursive=True)
                        except psutil.NoSuchProcess:
                            continue
                        if kids:
                            os.kill(pid, signal.SIGKILL)
                            self.killed = {"worker": worker, "pid": pid, "keys": keys, "children": len(kids)}
                            return
                time.sleep(0.2)


@pytest.mark.sim
def test_the_bundled_sweep_survives_a_dead_worker_stores_every_result_once_and_reruns_nothing(tmp_path, capsys):
    """The issue's CI sweep, through the CLI, on a 2-worker local cluster of the test's own; a
    worker is killed mid-run. Then the same sweep again: nothing to run, and no cluster."""
    from distributed import LocalCluster

    from conftest import require_sim

    require_sim("verilator")
    db, plot = tmp_path / "small.db", tmp_path / "small.png"
    t0 = time.perf_counter()
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0",
                      silence_logs=50) as cluster:
        killer = _Killer(cluster.scheduler_address)
        killer.start()
        try:
            code = cli.main(["sweep", "run", str(SMALL), "--cluster", cluster.scheduler_address, "--db", str(db)])
        finally:
            killer.stop.set()
            killer.join(10)
    elapsed = time.perf_counter() - t0
    out = capsys.readouterr().out
    assert killer.killed, "no worker was caught in the middle of a run"
    assert code == cli.EXIT_OK, out
    rows = _rows(db)
    pairs = [(r["design"], r["workload"]) for r in rows]
    assert len(rows) == 48 and len(set(pairs)) == 48 and len({r["key"] for r in rows}) == 48
    assert all(r["status"] == "pass" and r["passed"] == 1 and r["cycles"] > 0 for r in rows)
    assert all(r["area"] and r["commit"] and r["sim_version"] for r in rows)
    # the runs the killed worker had in flight were stored from another worker (runs it finished
    # before it died may be stored from it: their results had reached the scheduler)
    killed_pid = str(killer.killed["pid"])
    in_flight = {k.rsplit("-", 1)[0][len("run-"):] for k in killer.killed["keys"]}
    redone = [r for r in rows if f"{r['design']}-{r['workload']}" in in_flight]
    assert redone and not any(r["worker"].endswith(":" + killed_pid) for r in redone), (
        f"a run killed in flight cannot be stored from its dead worker: {in_flight}, {[r['worker'] for r in redone]}")
    assert plot.stat().st_size > 10_000 and "Pareto front: gemm-32x32x32" in out
    print(f"bundled sweep: {elapsed:.0f} s with a worker killed mid-run ({killer.killed})")

    again = cli.main(["sweep", "run", str(SMALL), "--db", str(db), "--workers", "1", "--junit", str(tmp_path / "j.xml")])
    out = capsys.readouterr().out
    assert again == cli.EXIT_OK and "0 to run" in out and "nothing to run" in out
    from junitparser import JUnitXml

    cases = [c for suite in JUnitXml.fromfile(str(tmp_path / "j.xml")) for c in suite]
    assert len(cases) == 48 and not any(c.result for c in cases), [c.name for c in cases if c.result][:5]
    assert sorted((r["key"], r["created"]) for r in _rows(db)) == sorted((r["key"], r["created"]) for r in rows)
    assert cli.main(["sweep", "report", str(db), "--json", str(tmp_path / "front.json")]) == cli.EXIT_OK
    front = json.loads((tmp_path / "front.json").read_text())
    assert set(front["workloads"]) == {"gemm-32x32x32", "gemm-8x8x256", "gemm-64x8x16", "reduce-sum-16x64"}
    assert all(w["front"] for w in front["workloads"].values()) and front["geomean"]["designs"] == 12


@pytest.mark.sim
def test_force_runs_stored_points_again_on_the_default_local_cluster(tmp_path, capsys):
    """Two pairs of the bundled grid (their builds are the bundled sweep's): a run, then --force
    runs both again and replaces their rows."""
    from conftest import require_sim

    require_sim("verilator")
    spec = tmp_path / "two.toml"
    spec.write_text('name = "two"\n[grid]\narray = "2x2"\nsram_depth = 64\ncmdq_depth = 64\nformats = "int8"\n'
                    'vector = false\ndram_bandwidth = 1\n[[workload]]\nkind = "gemm"\nm = 8\nn = 8\nk = 16\n'
                    '[[workload]]\nkind = "reduce"\nrows = 4\ncols = 16\nop = "max"\n')
    db = tmp_path / "two.db"
    assert cli.main(["sweep", "run", str(spec), "--db", str(db), "--workers", "1"]) == cli.EXIT_OK
    first = {r["key"]: r for r in _rows(db)}
    assert len(first) == 2
    assert cli.main(["sweep", "run", str(spec), "--db", str(db), "--workers", "1", "--force"]) == cli.EXIT_OK
    out = capsys.readouterr().out
    assert "0 already stored, 2 to run" in out
    second = {r["key"]: r for r in _rows(db)}
    assert second.keys() == first.keys() and all(second[k]["created"] > first[k]["created"] for k in first)


def test_a_design_that_cannot_build_is_stored_as_a_harness_error_and_run_again_next_time(tmp_path, capsys):
    """Workers whose build cache cannot be written: every build fails, on the workers. The sweep
    still completes; each pair is stored as an error (passed NULL, the build's message), the
    command exits 3 (the harness, not the chip), and the next sweep runs those pairs again."""
    from distributed import LocalCluster

    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    spec = tmp_path / "one.toml"
    spec.write_text('[grid]\narray = "2x2"\nsram_depth = 64\nformats = "int8"\nvector = false\n'
                    '[[workload]]\nkind = "reduce"\nrows = 4\ncols = 16\nop = "sum"\n')
    db = tmp_path / "one.db"
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=":0", silence_logs=50,
                      env={"FIRSTLIGHT_CACHE": str(blocker / "cache")}) as cluster:
        code = cli.main(["sweep", "run", str(spec), "--cluster", cluster.scheduler_address, "--db", str(db)])
    captured = capsys.readouterr()
    assert code == cli.EXIT_HARNESS_ERROR, captured.out
    (row,) = _rows(db)
    assert row["status"] == "error" and row["passed"] is None and row["cycles"] is None
    assert "the design point did not build" in row["error"] and "not-a-folder" in row["error"]
    assert "harness error: build of 2x2-" in " ".join(captured.err.split())
    con = sweepdb.open_db(db)
    assert sweepdb.stored_keys(con) == set()  # so the next sweep runs it again


def test_the_chip_area_does_not_depend_on_the_dram_latency_or_bandwidth():
    """Why one area serves every DRAM latency and bandwidth of a chip (firstlight.sweep.tasks.area_key):
    the chip only publishes them as constants. Its bus width does change the chip (the DMA)."""
    from dataclasses import replace

    from cosim.area import area_of
    from cosim.build import Variant, elaborate
    from firstlight.sweep.tasks import area_key
    from rtl.board import BoardConfig
    from rtl.config import ChipConfig

    chip = ChipConfig(rows=2, cols=2, formats=("int8",), operand_depth=16, acc_depth=16, cmdq_depth=16, vector=False)
    slow = Variant(config=chip, board=BoardConfig(bandwidth=0.25, latency=200))
    fast = replace(slow, board=BoardConfig(bandwidth=2, latency=4))
    assert area_key(slow) == area_key(fast)
    assert area_of(elaborate(slow)).as_dict() | {"seconds": 0} == area_of(elaborate(fast)).as_dict() | {"seconds": 0}
    wide = Variant(config=replace(chip, rows=4, cols=4, lanes=4), board=BoardConfig(bus_bytes=4))
    assert area_key(wide) != area_key(replace(wide, board=BoardConfig(bus_bytes=2)))


@pytest.mark.sim
def test_the_errata_matrix_runs_on_a_cluster_and_lands_in_the_database(tmp_path):
    """One erratum of the matrix (FL-RU-002, A0 only) on an affected and a fixed revision, as
    Dask tasks: the same cells as the sequential matrix's rule wants, each stored once."""
    from distributed import Client, LocalCluster

    from conftest import require_sim
    from firstlight.jobs.errata import expected_cell_pass
    from firstlight.sweep.errata import measure_on_cluster

    require_sim("verilator")
    con = sweepdb.open_db(tmp_path / "errata.db")
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0",
                      silence_logs=50) as cluster, Client(cluster) as client:
        cells, problems, scale, scale_problems = measure_on_cluster(client, "verilator", 1, con, ids=["FL-RU-002"],
                                                                    revisions=["A0", "B0"])
    assert problems == [] and scale_problems == []
    assert sorted((c["revision"], c["policy"], c["passed"]) for c in cells) == [
        ("A0", "off", False), ("A0", "on", True), ("B0", "off", True), ("B0", "on", True)]
    assert all(c["passed"] == expected_cell_pass(c) for c in cells)
    assert sorted((r["revision"], r["policy"]) for r in scale) == [("A0", "off"), ("A0", "on")]
    rows = [dict(r) for r in con.execute("SELECT workload, status, design FROM runs")]
    assert len(rows) == 6 and all(r["status"] == "pass" for r in rows)
    assert {r["workload"] for r in rows} == {"errata:FL-RU-002:on", "errata:FL-RU-002:off",
                                             "errata-scale:FL-RU-002:on", "errata-scale:FL-RU-002:off"}


def test_a_local_cluster_leaves_no_scratch_space(tmp_path, monkeypatch):
    """A local cluster's workers once left dask-scratch-space in the temp directory."""
    import tempfile

    from firstlight.sweep.engine import local_cluster

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    cluster = local_cluster(1)
    try:
        assert len(cluster.workers) == 1
    finally:
        cluster.close()
    assert not list(tmp_path.iterdir()), list(tmp_path.iterdir())
