"""The surfaces generated from the tile-language registry (kernels/tile/spec.py) beyond the CLI's
``run <kernel>``: the session's kernel methods (``chip.run_kernel`` and one attribute per
KernelSpec) and the row-kernel rows of ``firstlight bench``.

Each test declares toy kernels in a module of its own (FIRSTLIGHT_KERNEL_MODULES, the path every
new kernel takes) and checks that they reach the surface without anything naming them; the
simulator tests run them in the simulator process, which must import the module too (it gets
the caller's environment and ``sys.path`` as its PYTHONPATH, through cocotb's runner).
"""

from __future__ import annotations

import inspect
import json
import sys

import numpy as np
import pytest

from conftest import SEED, VECTOR_CHIP, require_sim, source_module

REPRO = f"reproduce: FIRSTLIGHT_SEED={SEED} .venv/bin/python -m pytest tests/test_tile_surfaces.py"

TOYS = '''
    from kernels import tile
    from kernels.tile.runtime import TensorSpec
    from kernels.tile.spec import AtenOp, KernelRefused, KernelSpec, Param
    import numpy as np
    from golden.vector import bits, floats, vector_op


    def double(x, out, *, rows):
        for r in tile.pipeline(range(0, x.rows, rows), stages=2):
            t = tile.load(x[r:r + rows])
            tile.store(out[r:r + rows], t + t)


    def pair(x, y, s, d, *, rows):
        b = tile.load(y)
        for r in tile.pipeline(range(0, x.rows, rows), stages=2):
            t = tile.load(x[r:r + rows])
            tile.store(s[r:r + rows], t + b)
            tile.store(d[r:r + rows], t - b)


    def neg(x, out, *, rows):
        m = tile.scalar(-1.0)
        for r in tile.pipeline(range(0, x.rows, rows), stages=2):
            tile.store(out[r:r + rows], tile.load(x[r:r + rows]) * m)


    def _aten_neg(x):
        """aten::neg of a tensor: its rows (a 0-d or 1-d one as one row)."""
        if x.ndim > 2:
            raise KernelRefused(f"toyneg takes at most 2-D tensors, not {x.ndim}-D")
        return {"x": x.reshape(1, -1) if x.ndim < 2 else x}, {}, lambda y: np.asarray(y).reshape(x.shape)


    def _op(op, a, b):
        return floats(vector_op(op, bits(a), bits(np.broadcast_to(b, a.shape))))


    SHAPE = (Param("rows", int, 4, "rows", 1, 64, shape=True), Param("cols", int, 8, "cols", 1, 64, shape=True),
             Param("tile_rows", int, 2, "rows per tile", 1, 64))


    def _normal(shape, seed):
        return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


    SPECS = [
        KernelSpec(
            name="toydouble", summary="x + x", source=double, params=SHAPE,
            tensors=lambda p: [TensorSpec("x", p["rows"], p["cols"]),
                               TensorSpec("out", p["rows"], p["cols"], role="out")],
            inputs=lambda p, seed, ext: {"x": _normal((p["rows"], p["cols"]), seed)},
            golden=lambda ins, p, lanes: {"out": _op("fadd", ins["x"], ins["x"])},
            kernel_args=lambda p, cfg: {"rows": p["tile_rows"]}, bench=({"rows": 8, "cols": 16},)),
        KernelSpec(
            name="toypair", summary="x + y and x - y, y one row", source=pair, params=SHAPE,
            tensors=lambda p: [TensorSpec("x", p["rows"], p["cols"]), TensorSpec("y", 1, p["cols"]),
                               TensorSpec("s", p["rows"], p["cols"], role="out"),
                               TensorSpec("d", p["rows"], p["cols"], role="out")],
            inputs=lambda p, seed, ext: {"x": _normal((p["rows"], p["cols"]), seed),
                                         "y": _normal((1, p["cols"]), seed + 1)},
            golden=lambda ins, p, lanes: {"s": _op("fadd", ins["x"], ins["y"]), "d": _op("fsub", ins["x"], ins["y"])},
            kernel_args=lambda p, cfg: {"rows": p["tile_rows"]}),  # no bench entry: only --rows runs it
        KernelSpec(
            name="toyneg", summary="-x", source=neg, params=SHAPE,
            tensors=lambda p: [TensorSpec("x", p["rows"], p["cols"]),
                               TensorSpec("out", p["rows"], p["cols"], role="out")],
            inputs=lambda p, seed, ext: {"x": _normal((p["rows"], p["cols"]), seed)},
            golden=lambda ins, p, lanes: {"out": _op("fmul", ins["x"], np.float32(-1.0))},
            kernel_args=lambda p, cfg: {"rows": p["tile_rows"]}, aten=AtenOp("aten::neg", _aten_neg)),
    ]
'''


@pytest.fixture
def toys(tmp_path, monkeypatch):
    """The toy kernels registered for this test, in this process and in the simulators it starts."""
    source_module(tmp_path, monkeypatch, "toy_surface_kernels", TOYS, register=True)
    from kernels.tile.spec import registry

    reg = registry()
    assert {"toydouble", "toypair", "softmax"} <= set(reg)
    return reg


def _bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a, np.float32).view(np.uint32)


def _row_kernels(reg) -> list[str]:
    """The kernels of the vector-unit table that --rows reshapes: on the vector unit, with rows and cols."""
    return [n for n, s in reg.items() if "vector" in s.needs and {"rows", "cols"} <= {p.name for p in s.params}]


# ---- the bench -----------------------------------------------------------------------------------

def test_the_bench_row_kernels_are_the_registrys_bench_entries_or_every_kernel_at_the_given_shapes(toys):
    from firstlight.cli.bench import row_kernel_cases
    from rtl.board import BoardConfig
    from rtl.config import ChipConfig

    board = BoardConfig().resolve(VECTOR_CHIP)
    chip = ChipConfig()  # the FP chip: every declared bench entry fits it
    cases, skipped = row_kernel_cases(None, chip, BoardConfig().resolve(chip))
    assert cases == [[s.name, dict(b)] for s in toys.values() if "vector" in s.needs for b in s.bench] and not skipped
    assert ["toydouble", {"rows": 8, "cols": 16}] in cases and ["softmax", {"rows": 64, "cols": 256}] in cases
    assert not any(n == "toypair" for n, _ in cases), "a kernel without a bench entry has no default row"
    assert {"silu", "gelu", "layernorm", "rmsnorm", "softmax"} <= {n for n, _ in cases}
    # --rows: every row kernel at each shape, toypair (no bench entry) included
    assert {"toydouble", "toypair", "softmax", "layernorm"} <= set(_row_kernels(toys))
    cases, skipped = row_kernel_cases([[4, 8], [2, 3]], VECTOR_CHIP, board)
    assert cases == [[n, {"rows": r, "cols": c}] for n in _row_kernels(toys) for r, c in ((4, 8), (2, 3))]
    assert not skipped, skipped
    # a shape outside a kernel's declared range, or too wide for this chip's SRAM, leaves that
    # kernel out, saying why; the rest run
    cases, skipped = row_kernel_cases([[4, 65]], chip, BoardConfig().resolve(chip))
    assert [n for n, _ in cases] == [n for n in _row_kernels(toys) if not n.startswith("toy")]
    assert len(skipped) == 3 and all("cols must be in [1, 64], not 65" in why for why in skipped), skipped
    cases, skipped = row_kernel_cases([[4, 100]], VECTOR_CHIP, board)
    assert any("layernorm" in why and "does not fit the accumulator SRAM (64 words)" in why for why in skipped)
    # no vector unit: nothing can run, and each kernel says so
    from dataclasses import replace

    cases, skipped = row_kernel_cases(None, replace(VECTOR_CHIP, vector=False), board)
    assert cases == [] and skipped and all("needs the vector unit" in why for why in skipped), skipped


@pytest.mark.sim
def test_a_kernel_in_a_new_module_is_a_bench_row_with_its_compile_time(toys, tmp_path, capsys):
    """The whole bench on a real simulator: the registry's kernels (the toys among them) at the
    --rows shape, each run in the simulator process by tile_job against its golden."""
    require_sim("verilator")
    from firstlight import cli

    out = tmp_path / "bench.json"
    argv = ["bench", "--sims", "verilator", "--shapes", "4x4x4", "--buffering", "double", "--formats", "int8",
            "--sram-depth", "64", "--rev", "B1", "--attention", "--rows", "8x16", "--session-calls", "0",
            "--json", str(out)]
    assert cli.main(argv) == cli.EXIT_OK, capsys.readouterr()
    text = capsys.readouterr().out
    rows = [r for r in json.loads(out.read_text())["rows"] if "kernel" in r]
    assert [(r["kernel"], r["shape"]) for r in rows] == [(n, "8x16") for n in _row_kernels(toys)], rows
    assert all(r["passed"] for r in rows), f"a kernel differs from its golden; {REPRO}"
    toy = next(r for r in rows if r["kernel"] == "toypair")
    assert toy["params"] == {"rows": 8, "cols": 16, "tile_rows": 2} and toy["cycles"] > 0
    assert all(r["compile_s"] is not None and 0 < r["compile_s"] < 60 for r in rows), rows
    assert "toydouble" in text and "compile" in text


# ---- the session ---------------------------------------------------------------------------------

@pytest.mark.sim
def test_every_registered_kernel_is_a_session_method_and_refusals_name_what_is_accepted(toys):
    require_sim("verilator")
    import firstlight
    from golden.activations import activation_rows
    from golden.norms import layer_norm_rows

    rng = np.random.default_rng(SEED + 11)
    x = rng.standard_normal((5, 12)).astype(np.float32)
    y = rng.standard_normal(12).astype(np.float32)
    with firstlight.open(rev="B1", config=VECTOR_CHIP) as chip:
        lanes = chip.config.lanes
        assert set(chip.kernels) == set(toys) and {"toydouble", "toypair", "silu"} <= set(dir(chip))
        assert chip.kernels["toypair"]["inputs"] == ["x", "y"] and chip.kernels["toypair"]["from_shape"] == ["rows", "cols"]
        sig = inspect.signature(chip.toypair)
        assert list(sig.parameters) == ["x", "y", "tile_rows", "budget_cycles"]
        assert sig.parameters["tile_rows"].default == 2 and "x + y and x - y" in chip.toypair.__doc__

        # the toys, from a module the simulator process imported: one output an array, two a dict
        d, st = chip.toydouble(x)
        assert np.array_equal(_bits(d), _bits(x + x)) and st.kernel == "toydouble" and st.cycles > 0, REPRO
        outs, st = chip.toypair(x, y, tile_rows=3)
        assert set(outs) == {"s", "d"} and st.kernel == "toypair"
        assert np.array_equal(_bits(outs["s"]), _bits(x + y)) and np.array_equal(_bits(outs["d"]), _bits(x - y)), REPRO
        outs2, _ = chip.run_kernel("toypair", y=y.reshape(1, 12), x=x)  # by name, y as (1, C) too
        assert all(np.array_equal(_bits(outs[k]), _bits(outs2[k])) for k in ("s", "d"))

        # the declared kernels, generated and under their older names: the same path, the same bits
        s, st = chip.silu(x)
        assert np.array_equal(_bits(s), _bits(activation_rows("silu", x, lanes))) and st.kernel == "silu", REPRO
        assert np.array_equal(_bits(chip.activation(x, "silu")[0]), _bits(s))
        g, b = (1 + 0.1 * y).astype(np.float32), (0.5 * y).astype(np.float32)
        ln, st = chip.layernorm(x, g, b, eps=1e-4)
        assert np.array_equal(_bits(ln), _bits(layer_norm_rows(x, g, b, 1e-4, lanes))) and st.kernel == "layernorm"
        assert np.array_equal(_bits(chip.layer_norm(x, g, b, 1e-4)[0]), _bits(ln))

        # refusals: raised in the caller, naming what is accepted; the session goes on
        with pytest.raises(ValueError, match=r"no tile-language kernel named 'nope'; this session's kernels: .*toypair"):
            chip.run_kernel("nope", x=x)
        with pytest.raises(AttributeError, match=r"no attribute 'nope'; its tile-language kernels: .*toydouble"):
            chip.nope(x)
        with pytest.raises(TypeError, match=r"kernel toypair has no input or parameter 'tile_row'; its inputs: x, y "
                                            r"\(numpy arrays; rows, cols from the shape of x\); its parameters: "
                                            r"tile_rows"):
            chip.toypair(x, y, tile_row=2)
        with pytest.raises(TypeError, match="kernel toydouble takes rows from the shape of x; do not pass it"):
            chip.toydouble(x, rows=5)
        with pytest.raises(TypeError, match="kernel toypair needs the input.s. y"):
            chip.toypair(x)
        with pytest.raises(TypeError, match="y: expected a numpy array, got list"):
            chip.toypair(x, list(y))
        with pytest.raises(ValueError, match=r"tile_rows must be in \[1, 64\], not 0"):
            chip.toydouble(x, tile_rows=0)
        with pytest.raises(TypeError, match=r"kernel toydouble: x must have dtype float32 \(fp32\), got float64"):
            chip.toydouble(x.astype(np.float64))
        with pytest.raises(ValueError, match=r"rows must be in \[1, 64\], not 65 \(from the shape of x, \(65, 12\)\)"):
            chip.toydouble(np.zeros((65, 12), np.float32))
        with pytest.raises(ValueError, match=r"kernel toypair: y must have shape \(1, 12\) or \(12,\) for x of shape "
                                             r"\(5, 12\), got \(11,\)"):
            chip.toypair(x, y[:11])
        with pytest.raises(ValueError, match="kind must be one of silu, gelu, got 'toydouble'"):
            chip.activation(x, "toydouble")
        # the request loop checks for itself what a caller may not have
        with pytest.raises(ValueError, match="no tile-language kernel named 'nope'; this session's kernels: "):
            chip.call("kernel", {"x": x}, name="nope")
        with pytest.raises(ValueError, match="kernel toydouble: rows come from the shape of its first input"):
            chip.call("kernel", {"x": x}, name="toydouble", params={"rows": 5})
        with pytest.raises(TypeError, match="kernel toypair: it has no input z; its inputs: x, y"):
            chip.call("kernel", {"x": x, "y": y, "z": y}, name="toypair")
        d2, _ = chip.toydouble(x)
        assert np.array_equal(_bits(d2), _bits(d)), "the session goes on after refusals"


# ---- PyTorch -------------------------------------------------------------------------------------

def test_every_registered_kernel_is_a_torch_operator_with_its_declared_schema(toys):
    """No simulator: the schemas and the fakes (shapes from the declaration) of the generated operators."""
    torch = pytest.importorskip("torch")
    import firstlight.torch as flt
    from firstlight.torch.generated import schema

    ops = flt.kernel_ops()
    assert set(ops) == set(toys), "one operator per registered kernel, the toys included"
    assert schema(toys["toypair"]) == "toypair(Tensor x, Tensor y, int chip, *, int tile_rows=2) -> Tensor"
    # an input only some parameter values need is a keyword tensor (gemm's requant bias and scales)
    assert schema(toys["gemm"]).startswith("gemm(Tensor a, Tensor b, int chip, *, Tensor? bias=None, "
                                           "Tensor? qparams=None, int ga=0")
    assert "str recipe=\"int8\"" in schema(toys["flash_attention"])
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        out = torch.ops.firstlight_kernels.toypair(torch.empty(5, 12), torch.empty(1, 12), 1)
        assert tuple(out.shape) == (5, 12) and out.dtype == torch.float32
        c = torch.ops.firstlight_kernels.gemm(torch.empty(7, 9, dtype=torch.int8), torch.empty(9, 3, dtype=torch.int8), 1)
        assert tuple(c.shape) == (7, 3) and c.dtype == torch.int32
        o = torch.ops.firstlight_kernels.decode_attention(torch.empty(64, 16, dtype=torch.int8),
                                                          torch.empty(16, 4, dtype=torch.int8),
                                                          torch.empty(16, 64, dtype=torch.int8), 1, seq=50)
        assert tuple(o.shape) == (16, 4) and o.dtype == torch.float32, "decode attention's O^T: dim x heads"


@pytest.mark.sim
def test_a_kernel_in_a_new_module_is_a_torch_operator_and_its_aten_binding_a_compile_planner(toys):
    """The toys on the chip through torch: each generated operator against the kernel's golden and
    opcheck; toyneg's AtenOp makes ``aten.neg`` a chip operator of the torch.compile backend,
    checked against the declaration when the graph is planned; gemm's makes ``torch._int_mm`` one."""
    require_sim("verilator")
    torch = pytest.importorskip("torch")
    import firstlight
    import firstlight.torch as flt

    rng = np.random.default_rng(SEED + 12)
    x = rng.standard_normal((5, 12)).astype(np.float32)
    y = rng.standard_normal((1, 12)).astype(np.float32)
    with firstlight.open(rev="B1", config=VECTOR_CHIP) as chip, torch.no_grad():
        h = flt.handle(chip)
        flt.kernel_ops()
        kops = torch.ops.firstlight_kernels
        s = kops.toypair(torch.from_numpy(x), torch.from_numpy(y), h, tile_rows=3)
        assert np.array_equal(_bits(s.numpy()), _bits(x + y)), f"the first output, s; {REPRO}"
        led = flt.ledger(chip)
        assert led[-1].op == "toypair" and led[-1].cycles > 0
        torch.library.opcheck(kops.toydouble, (torch.from_numpy(x), h), {"tile_rows": 2})
        with pytest.raises(TypeError, match=r"kernel toydouble: x must be a float tensor \(computed in fp32\), "
                                            r"not torch.int32"):
            kops.toydouble(torch.zeros(2, 3, dtype=torch.int32), h)

        be = flt.backend(chip, report=None)
        torch._dynamo.reset()
        xs = torch.from_numpy(x)
        got = torch.compile(lambda t: torch.neg(t) * 2.0, backend=be)(xs)
        torch._dynamo.reset()
        rows = {r["op"]: r for r in be.table()}
        assert rows["aten.neg.default"]["where"] == "chip" and rows["aten.neg.default"]["cycles"] > 0, rows
        assert np.array_equal(_bits(got.numpy()), _bits(-x * 2)), REPRO
        # checked before anything runs: 3-D (the binding refuses) and 80 columns (past the declaration's 64)
        be = flt.backend(chip, report=None)
        mark = len(led)
        torch._dynamo.reset()
        torch.compile(lambda t, u: torch.neg(t) + torch.neg(u).sum(), backend=be)(torch.ones(2, 2, 2), torch.ones(3, 80))
        torch._dynamo.reset()
        where = sorted(r["where"] for r in be.table() if r["op"] == "aten.neg.default")
        assert where == ["CPU: kernel toyneg: cols must be in [1, 64], not 80 (from the shape of x, (3, 80))",
                         "CPU: toyneg takes at most 2-D tensors, not 3-D"], where
        assert all(r.op != "toyneg" for r in led[mark:]), "a refused call never reached the chip"

        # the new kernels' operators: decode attention as the session method gives it, bit for bit
        spec = toys["decode_attention"]
        p = spec.resolve({"seq": 37, "dim": 8, "heads": 3, "block": 16, "chunk": 8})
        ins = spec.inputs(p, SEED, False)
        want, _ = chip.decode_attention(ins["k"], ins["qt"], ins["vt"], seq=37, block=16, chunk=8)
        got = kops.decode_attention(*(torch.from_numpy(ins[n]) for n in ("k", "qt", "vt")), h, seq=37, block=16, chunk=8)
        assert np.array_equal(_bits(got.numpy()), _bits(want)) and got.shape == (8, 3), REPRO

        # torch._int_mm is the int8 GEMM kernel, bit for bit
        a = torch.from_numpy(rng.integers(-128, 128, (32, 24), dtype=np.int8))
        b = torch.from_numpy(rng.integers(-128, 128, (24, 16), dtype=np.int8))
        be = flt.backend(chip, report=None)
        torch._dynamo.reset()
        c = torch.compile(lambda p, q: torch._int_mm(p, q), backend=be)(a, b)
        torch._dynamo.reset()
        row = next(r for r in be.table() if r["op"] == "aten._int_mm.default")
        assert row["where"] == "chip" and row["sqnr_db"] == float("inf"), row
        assert torch.equal(c, a.int() @ b.int()), REPRO
