"""``firstlight roofline``: bad arguments exit 2 before anything is built; the sweep builds one board
per bandwidth and shares the chart's; one small real run gives a PNG and points that obey the
roofline.

Expected values come from the roofline's definition (docs/kernels.md, "The roofline chart"):
peak = ROWS * COLS MACs per cycle; a GEMM's compulsory bytes are M*K + K*N int8 operands in and
M*N int32 results out; the problem is memory-bound when its compulsory intensity is below the
ridge point peak / bandwidth; no kernel beats min(peak, bandwidth x intensity).
"""

from __future__ import annotations

import json
import math
import time

import pytest

from conftest import SEED, require_sim
from firstlight import cli

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture
def no_build(monkeypatch):
    """Any build or simulator run fails the test: argument errors must come first."""
    from cosim import build, jobs

    def refuse(*a, **kw):
        raise AssertionError("a simulator was built or run for a bad argument")

    monkeypatch.setattr(build, "build_simulator", refuse)
    monkeypatch.setattr(jobs, "run_job", refuse)


@pytest.mark.parametrize(
    "extra, needle",
    [
        (["--shapes", "8x8"], "MxNxK"),
        (["--shapes", "8x0x8"], "MxNxK"),
        (["--sweep-shape", "1x2"], "--sweep-shape must look like MxNxK"),
        (["--sweep-bw", "0"], "above 0"),
        (["--sweep-bw", "1", "8"], "--sweep-bw 8"),  # the 4x4 array's bus is 4 bytes: at most 4 B/cycle
        (["--sweep-bw", "fast"], "invalid float value"),
        (["--reduce", "128"], "ROWSxCOLS"),
        (["--out", "chart.svg"], "ending in .png"),
        (["--array", "3x3"], "rows must be one of"),
        (["--formats", "int8", "fp9"], "--formats"),
        (["--dram-bw", "9"], "--dram-*"),
        (["--dram-size", "4K", "--shapes", "64x64x64"], "bytes of DRAM"),
        (["--sim", "modelsim"], "invalid choice"),
    ],
)
def test_bad_arguments_exit_2_before_any_build(extra, needle, no_build, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    t0 = time.perf_counter()
    code = cli.main(["roofline", "--sim", "icarus", *extra])
    took = time.perf_counter() - t0
    err = capsys.readouterr().err
    assert code == cli.EXIT_CANNOT_START, err
    assert needle in err, err
    assert took < 10, f"an argument error took {took:.1f} s to report"
    assert not (tmp_path / "firstlight-out" / "roofline.png").exists()


def test_out_in_a_file_is_cannot_start(no_build, tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    assert cli.main(["roofline", "--sim", "icarus", "--out", str(blocker / "r.png")]) == cli.EXIT_CANNOT_START
    assert "--out" in capsys.readouterr().err


# ---- the wiring, with the simulator faked: stats made from the roofline's own definition ----------

def _fake_stats(variant, shape, kernel):
    """What a kernel at the roof plus fixed costs would report (the fake's own model, for wiring)."""
    cfg, board = variant.config, variant.resolved_board
    peak, bw = cfg.rows * cfg.cols, board.bytes_per_cycle
    if kernel == "gemm":
        m, n, k = shape
        useful, compulsory = m * n * k, m * k + k * n + 4 * m * n
        compute = math.ceil(useful / peak)
    else:
        rows, cols = shape
        useful, compulsory = rows * cols, 4 * rows * cols + 4 * rows
        compute = rows * math.ceil(cols / cfg.cols)
    memory = math.ceil(compulsory / bw)
    attainable = max(compute, memory)
    cycles = attainable + 200
    moved = compulsory + 64
    return {"cycles": cycles, "useful_macs": useful, "dram_bytes": moved, "compulsory_bytes": compulsory,
            "intensity": useful / moved, "compute_cycles": compute, "memory_cycles": memory,
            "attainable_cycles": attainable, "bound": "compute" if compute >= memory else "memory",
            "roof_utilization": attainable / cycles, "overlap": 1.1, "ridge_point": peak / bw,
            "dram_bytes_per_cycle": bw, "dram": board.as_dict(), "plan": {"nbuf": 2}}


@pytest.fixture
def fake_sim(monkeypatch):
    from types import SimpleNamespace

    from cosim import build, jobs
    from firstlight.cli import roofline
    from firstlight.jobs import kernels as kernel_jobs

    seen = {"builds": [], "jobs": [], "fail_build_at": None, "fail_shape": None}

    def build_simulator(variant, sim):
        bw = variant.resolved_board.bytes_per_cycle
        seen["builds"].append((bw, variant))
        if seen["fail_build_at"] == bw:
            raise build.BuildFailed(f"the {sim} build failed (faked)")
        return SimpleNamespace(cache_hit=len(seen["builds"]) > 1, build_s=1.0)

    def run_job(fn, kwargs=None, *, variant, sim, build=None, **kw):
        seen["jobs"].append((fn, kwargs, variant.resolved_board.bytes_per_cycle))
        if fn is kernel_jobs.bench_job:
            recs = [{"type": "bench", "shape": s, "double_buffer": True, "passed": s != seen["fail_shape"],
                     "stats": _fake_stats(variant, s, "gemm")} for s in kwargs["shapes"]]
            return SimpleNamespace(records=recs, value={"runs": len(recs)})
        st = _fake_stats(variant, [kwargs["rows"], kwargs["cols"]], "reduce")
        del st["useful_macs"]  # a reduction's stats count its elements only in the intensity
        return SimpleNamespace(records=[], value={"passed": True, "mismatch": None, "stats": st})

    monkeypatch.setattr(build, "build_simulator", build_simulator)
    monkeypatch.setattr(jobs, "run_job", run_job)
    monkeypatch.setattr(roofline, "require_sim", lambda name: None)
    return seen


def _read_png(path):
    import matplotlib.image

    assert path.read_bytes()[:8] == PNG_MAGIC, f"{path} is not a PNG"
    img = matplotlib.image.imread(str(path))
    assert img.shape[0] > 300 and img.shape[1] > 600, img.shape
    return img


def test_one_build_per_bandwidth_and_the_chart_board_is_shared(fake_sim, tmp_path, capsys):
    from firstlight.jobs import kernels as kernel_jobs

    out, js = tmp_path / "plots" / "r.png", tmp_path / "r.json"
    argv = ["roofline", "--shapes", "16x16x16", "64x64x64", "--sweep-shape", "64x256x256",
            "--sweep-bw", "2", "0.25", "1", "4", "0.5", "--out", str(out), "--json", str(js)]
    assert cli.main(argv) == cli.EXIT_OK
    err = capsys.readouterr().err
    # default board on 4x4: 16 MACs/cycle / 16 = 1 B/cycle, the sweep's 1 B/cycle point shares it
    assert [bw for bw, _ in fake_sim["builds"]] == [1.0, 0.25, 0.5, 2.0, 4.0]
    for bw in (0.25, 0.5, 2, 4):
        assert f"building the board with {bw:g} B/cycle" in err
    benches = [(k["shapes"], bw) for fn, k, bw in fake_sim["jobs"] if fn is kernel_jobs.bench_job]
    assert benches[0] == ([[16, 16, 16], [64, 64, 64], [64, 256, 256]], 1.0)
    assert all(shapes == [[64, 256, 256]] for shapes, _ in benches[1:])
    reduces = [(k, bw) for fn, k, bw in fake_sim["jobs"] if fn is kernel_jobs.reduce_job]
    assert reduces == [({"rows": 16, "cols": 128, "op": "sum", "seed": 1, "errata_policy": {}}, 1.0)]
    _read_png(out)
    d = json.loads(js.read_text())
    chart = [p for p in d["points"] if p["panel"] == "roofline"]
    sweep = [p for p in d["points"] if p["panel"] == "sweep"]
    assert [p["label"] for p in chart] == ["16x16x16", "64x64x64", "reduce 16x128"]
    assert [p["dram_bytes_per_cycle"] for p in sweep] == [0.25, 0.5, 1.0, 2.0, 4.0]
    # 64x256x256: 4,194,304 MACs over 16,384 + 65,536 + 65,536 bytes = 28.4 MACs/byte;
    # the ridge is 16 / bw: 64, 32 (memory-bound), 16, 8, 4 (compute-bound)
    assert [p["bound"] for p in sweep] == ["memory", "memory", "compute", "compute", "compute"]
    assert d["sweep"]["knee_bandwidth"] == pytest.approx(16 / (64 * 256 * 256 / (64 * 256 + 256 * 256 + 4 * 64 * 256)))
    red = chart[-1]
    assert red["useful_macs"] == 16 * 128 and red["compute_roof"] == 4  # one 4-lane accumulator word per cycle
    assert d["provenance"]["command"].startswith("firstlight roofline")


def test_a_failed_build_and_a_wrong_result_still_give_a_chart(fake_sim, tmp_path, capsys):
    out, js = tmp_path / "r.png", tmp_path / "r.json"
    fake_sim["fail_build_at"] = 2.0
    code = cli.main(["roofline", "--shapes", "16x16x16", "--no-reduce", "--sweep-bw", "0.5", "2", "4",
                     "--out", str(out), "--json", str(js)])
    assert code == cli.EXIT_HARNESS_ERROR  # a build failed: the harness, not the chip
    d = json.loads(js.read_text())
    assert [p["dram_bytes_per_cycle"] for p in d["points"] if p["panel"] == "sweep"] == [0.5, 4.0]
    assert d["errors"] and "2 B/cycle" in d["errors"][0] and not d["passed"]
    _read_png(out)
    fake_sim["fail_build_at"], fake_sim["fail_shape"] = None, [16, 16, 16]
    assert cli.main(["roofline", "--shapes", "16x16x16", "--no-sweep", "--no-reduce", "--out", str(out),
                     "--json", str(js)]) == cli.EXIT_FAIL
    d = json.loads(js.read_text())
    assert d["sweep"] is None and [p["passed"] for p in d["points"]] == [False]
    _read_png(out)
    assert "FAIL" in capsys.readouterr().out


# ---- one small real run ------------------------------------------------------------------------------

@pytest.mark.sim
def test_small_real_run_obeys_the_roofline(tmp_path):
    """2x2 int8 array (peak 4 MACs/cycle), 64-word SRAMs, 64 KiB DRAM: two Icarus builds (0.5 and 2
    B/cycle; the chart shares the 0.5 one), about 10 s each the first time."""
    require_sim("icarus")
    out, js = tmp_path / "roof" / "r.png", tmp_path / "r.json"
    argv = ["roofline", "--sim", "icarus", "--array", "2x2", "--formats", "int8", "--sram-depth", "64",
            "--dram-size", "64K", "--dram-bw", "0.5", "--shapes", "8x8x8", "--reduce", "2x128",
            "--sweep-shape", "8x32x32", "--sweep-bw", "0.5", "2", "--seed", str(SEED),
            "--out", str(out), "--json", str(js)]
    repro = "reproduce: .venv/bin/python -m firstlight.cli " + " ".join(argv[:-4])
    assert cli.main(argv) == cli.EXIT_OK, repro
    _read_png(out)
    d = json.loads(js.read_text())
    peak = 2 * 2
    pts = {(p["panel"], p["label"], p["dram_bytes_per_cycle"]): p for p in d["points"]}
    assert set(pts) == {("roofline", "8x8x8", 0.5), ("roofline", "reduce 2x128", 0.5), ("sweep", "8x32x32", 0.5),
                        ("sweep", "8x32x32", 2.0)}, repro
    for (panel, label, bw), p in pts.items():
        assert p["passed"], (label, repro)
        if label.startswith("reduce"):
            useful, compulsory, roof = 2 * 128, 4 * 2 * 128 + 4 * 2, 128 / math.ceil(128 / 2)  # 2 lanes a word
        else:
            m, n, k = map(int, label.split("x"))
            useful, compulsory, roof = m * n * k, m * k + k * n + 4 * m * n, peak
        assert p["useful_macs"] == useful and p["compulsory_bytes"] == compulsory, (label, repro)
        assert p["dram_bytes"] >= compulsory, (label, "moved fewer bytes than the problem must", repro)
        assert p["intensity"] == pytest.approx(useful / p["dram_bytes"]), repro
        assert p["macs_per_cycle"] == pytest.approx(useful / p["cycles"]), repro
        # under both roofs (the DRAM window may let one period's beats through early: 2%)
        assert p["macs_per_cycle"] <= roof, (label, repro)
        assert p["macs_per_cycle"] <= 1.02 * bw * useful / p["dram_bytes"], (label, repro)
        assert 0 < p["roof_utilization"] <= 1, (label, repro)
        ridge = roof / bw
        assert p["bound"] == ("memory" if useful / compulsory < ridge else "compute"), (label, repro)
    # 8x32x32: 8192 MACs / 2304 bytes = 3.6 MACs/byte: below the ridge 4 / 0.5 = 8, above 4 / 2 = 2
    low, high = pts[("sweep", "8x32x32", 0.5)], pts[("sweep", "8x32x32", 2.0)]
    assert low["bound"] == "memory" and high["bound"] == "compute", repro
    assert high["macs_per_cycle"] > low["macs_per_cycle"], repro
    assert high["compute_utilization"] > low["compute_utilization"], repro
    assert d["sweep"]["knee_bandwidth"] == pytest.approx(peak / (8192 / 2304)), repro
    assert d["board"]["bytes_per_cycle"] == 0.5 and d["ridge_point"] == 8, repro


def test_the_sweep_shape_on_the_chart_board_runs_once(fake_sim, tmp_path):
    from firstlight.jobs import kernels as kernel_jobs

    js = tmp_path / "r.json"
    assert cli.main(["roofline", "--shapes", "32x32x32", "--sweep-shape", "32x32x32", "--sweep-bw", "1", "4",
                     "--no-reduce", "--out", str(tmp_path / "r.png"), "--json", str(js)]) == cli.EXIT_OK
    benches = [(k["shapes"], bw) for fn, k, bw in fake_sim["jobs"] if fn is kernel_jobs.bench_job]
    assert benches == [([[32, 32, 32]], 1.0), ([[32, 32, 32]], 4.0)]
    d = json.loads(js.read_text())
    assert [(p["panel"], p["dram_bytes_per_cycle"]) for p in d["points"]] == [("roofline", 1.0), ("sweep", 1.0),
                                                                               ("sweep", 4.0)]


def test_an_interrupt_keeps_what_finished(fake_sim, monkeypatch, tmp_path):
    from cosim import jobs

    real = jobs.run_job
    calls = []

    def interrupted_second_time(fn, kwargs=None, **kw):
        calls.append(fn)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(fn, kwargs, **kw)

    monkeypatch.setattr(jobs, "run_job", interrupted_second_time)
    out, js = tmp_path / "r.png", tmp_path / "r.json"
    code = cli.main(["roofline", "--shapes", "16x16x16", "--no-reduce", "--sweep-bw", "0.5", "2", "4",
                     "--out", str(out), "--json", str(js)])
    from firstlight.errors import EXIT_SIGINT

    assert code == EXIT_SIGINT
    d = json.loads(js.read_text())
    assert d["interrupted"] == "SIGINT" and not d["passed"]
    assert [(p["panel"], p["dram_bytes_per_cycle"]) for p in d["points"]] == [("roofline", 1.0)]
    _read_png(out)


def test_the_chart_names_its_markers_in_the_legend(fake_sim, tmp_path, monkeypatch):
    """Its title once named the markers by bare letters ("GEMM o, reduction s, failed in red")."""
    import matplotlib.figure

    saved, orig = [], matplotlib.figure.Figure.savefig

    def keep(self, *a, **k):
        saved.append(self)
        return orig(self, *a, **k)

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", keep)
    assert cli.main(["roofline", "--shapes", "16x16x16", "--no-sweep", "--out", str(tmp_path / "r.png")]) == cli.EXIT_OK
    ax = saved[0].axes[0]
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert {"GEMM", "reduction", "failed its golden"} <= set(labels), labels
    assert " o," not in ax.get_title() and "s," not in ax.get_title(), ax.get_title()


def test_the_png_carries_the_provenance(fake_sim, tmp_path):
    """bringup's JSON had a provenance block and the PNGs none: now their text chunks say the
    command, the commit, the host and the tools (what an image viewer's properties show)."""
    from PIL import Image

    out = tmp_path / "r.png"
    assert cli.main(["roofline", "--shapes", "16x16x16", "--no-sweep", "--out", str(out)]) == cli.EXIT_OK
    text = Image.open(out).text
    assert text["Source"] == f"firstlight roofline --shapes 16x16x16 --no-sweep --out {out}", text
    assert "commit " in text["Comment"] and "cocotb " in text["Comment"] and "verilator " in text["Comment"], text
    assert text["Software"].startswith("firstlight ") and text["Creation Time"][:2] == "20", text
