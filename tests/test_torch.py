"""PyTorch on the simulated chip: the custom operators (opcheck), the torch.compile backend and its
coverage table, the two models and ``firstlight model``. Real PyTorch (the firstlight[torch]
extra), real Verilator; one session on the int8 chip with the vector unit serves the module.
Random data is seeded: FIRSTLIGHT_SEED=<n> reproduces a run.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the firstlight[torch] extra is not installed: pip install -e '.[torch]'")
pytest.importorskip("sklearn", reason="the firstlight[torch] extra is not installed: pip install -e '.[torch]'")

import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from conftest import SEED, VECTOR_CHIP, require_sim  # noqa: E402

REPRO = f"reproduce: FIRSTLIGHT_SEED={SEED} .venv/bin/python -m pytest tests/test_torch.py"


@pytest.fixture(scope="module")
def chip():
    require_sim("verilator")
    import firstlight

    with firstlight.open(rev="B1", config=VECTOR_CHIP) as s:
        yield s


def _sqnr(ref, got) -> float:
    r, g = ref.double(), got.double()
    return float(10 * torch.log10((r ** 2).sum() / ((r - g) ** 2).sum()))


# ---- eager custom operators ----------------------------------------------------------------------

def _cases(h):
    g = torch.Generator().manual_seed(SEED)
    r = lambda *s: torch.randn(*s, generator=g)  # noqa: E731
    x3 = r(2, 3, 8)
    return {
        "mm": (r(5, 7), r(7, 3), h, "int8-channel"),
        "addmm": (r(3), r(5, 7), r(7, 3), h, "int8-tensor"),
        "linear": (x3, r(4, 8), r(4), h, "int8-channel"),
        "bmm": (r(2, 3, 5), r(2, 5, 4), h, "int8-channel"),
        "softmax": (x3, 1, h),
        "layer_norm": (x3, [8], r(8), r(8), 1e-5, h),
        "rms_norm": (x3, [8], r(8), None, h),
        "scaled_dot_product_attention": (r(1, 2, 8, 4), r(1, 2, 8, 4), r(1, 2, 8, 4), True, h, "int8-channel"),
        "relu": (x3, h),
        "gelu": (x3, h),
        "silu": (x3, h),
        "add": (x3, r(3, 8), h),
        "sub": (x3, r(8), h),
        "mul": (x3, r(2, 1, 8), h),
    }


def _reference(name, args):
    a = args
    return {
        "mm": lambda: a[0] @ a[1], "addmm": lambda: a[0] + a[1] @ a[2], "linear": lambda: F.linear(a[0], a[1], a[2]),
        "bmm": lambda: torch.bmm(a[0], a[1]), "softmax": lambda: torch.softmax(a[0], a[1]),
        "layer_norm": lambda: F.layer_norm(a[0], a[1], a[2], a[3], a[4]),
        "rms_norm": lambda: F.rms_norm(a[0], a[1], a[2], a[3]),
        "scaled_dot_product_attention": lambda: F.scaled_dot_product_attention(a[0], a[1], a[2], is_causal=a[3]),
        "relu": lambda: torch.relu(a[0]), "gelu": lambda: F.gelu(a[0], approximate="tanh"),
        "silu": lambda: F.silu(a[0]), "add": lambda: a[0] + a[1], "sub": lambda: a[0] - a[1], "mul": lambda: a[0] * a[1],
    }[name]()


# the operators' own error on these inputs: int8 GEMMs and attention are quantized, the rest fp32
MIN_SQNR = {"mm": 30, "addmm": 30, "linear": 30, "bmm": 30, "scaled_dot_product_attention": 30}


@pytest.mark.parametrize("name", ["mm", "addmm", "linear", "bmm", "softmax", "layer_norm", "rms_norm",
                                  "scaled_dot_product_attention", "relu", "gelu", "silu", "add", "sub", "mul"])
def test_every_custom_op_passes_opcheck_and_matches_fp32(chip, name):
    import firstlight.torch as flt

    op = getattr(torch.ops.firstlight, name)
    args = _cases(flt.handle(chip))[name]
    torch.library.opcheck(op, args)  # schema, fake tensor, autograd registration, AOT dispatch (dynamic)
    led = flt.ledger(chip)
    led.clear()
    got = op(*args)
    want = _reference(name, args)
    assert got.shape == want.shape and got.dtype == want.dtype
    assert _sqnr(want, got) > MIN_SQNR.get(name, 100), f"{name}: SQNR {_sqnr(want, got):.1f} dB; {REPRO}"
    assert len(led) == 1 and led[0].op == name and led[0].cycles > 0


def _qlinear_case(seed=SEED):
    from golden.epilogue import calibrate_scales

    rng = np.random.default_rng(seed)
    x = rng.integers(-128, 128, (2, 3, 24), dtype=np.int8)
    w = rng.integers(-128, 128, (5, 24), dtype=np.int8)
    bias = rng.integers(-(2**12), 2**12, 5).astype(np.int32)
    scale = calibrate_scales(x.reshape(-1, 24), np.ascontiguousarray(w.T), bias).astype(np.float32)
    return x, w, bias, scale


@pytest.mark.parametrize("relu", [False, True])
@pytest.mark.parametrize("where", ["rtl", "interpreter"])
def test_qlinear_runs_the_fused_epilogue_bit_exact(chip, relu, where):
    """issue 38: the GEMM's fused bias + per-channel requantization (+ ReLU) reached torch only as
    host-side fp32 after a dequantized product. firstlight::qlinear is int8 in, int8 out, the
    epilogue on the chip: bit-exact against golden.epilogue, on the RTL and on an interpreted
    session (firstlight.open(interpret=True) serves the torch operators too)."""
    import firstlight
    import firstlight.torch as flt
    from golden.epilogue import gemm_epilogue

    x, w, bias, scale = _qlinear_case()
    want = gemm_epilogue(x.reshape(-1, 24), np.ascontiguousarray(w.T), bias, scale.astype(np.float64), relu)
    session = chip if where == "rtl" else firstlight.open(interpret=True, config=VECTOR_CHIP)
    try:
        h = flt.handle(session)
        args = (torch.from_numpy(x), torch.from_numpy(w), torch.from_numpy(bias), torch.from_numpy(scale), relu, h)
        if where == "rtl":
            torch.library.opcheck(torch.ops.firstlight.qlinear, args)
        got = torch.ops.firstlight.qlinear(*args)
        assert got.dtype == torch.int8 and got.shape == (2, 3, 5)
        assert np.array_equal(got.numpy().reshape(-1, 5), want), REPRO
        assert flt.ledger(session)[-1].op == "qlinear"
        with pytest.raises(TypeError, match="x must be torch.int8, not torch.float32"):
            torch.ops.firstlight.qlinear(args[0].float(), *args[1:])
    finally:
        if where == "interpreter":
            session.close()


def test_a_recipe_the_chip_cannot_run_is_refused_with_the_ones_it_can(chip):
    import firstlight.torch as flt

    with pytest.raises(ValueError, match=r"needs the e4m3 MATMUL path.*recipes it runs: int8-tensor, int8-channel"):
        flt.ops(chip, "mxfp8-e4m3-rceil")
    with pytest.raises(ValueError, match="unknown quantization recipe 'int4'"):
        flt.backend(chip, recipe="int4")


def test_eager_ops_bound_to_a_chip(chip):
    import firstlight.torch as flt

    fl = flt.ops(chip, "int8-channel")
    g = torch.Generator().manual_seed(SEED + 1)
    x, w = torch.randn(6, 16, generator=g), torch.randn(8, 16, generator=g)
    y = fl.softmax(fl.relu(fl.linear(x, w, None)), -1)
    assert _sqnr(torch.softmax(torch.relu(x @ w.T), -1), y) > 30, REPRO


# ---- the torch.compile backend ------------------------------------------------------------------

class _Mixed(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.norm = nn.RMSNorm(8)

    def forward(self, x):
        h = F.gelu(self.fc(x))  # exact GELU: the chip has the tanh form only -> CPU, with the reason
        h = self.norm(h) * 2.0  # RMSNorm kept whole by the pre-pass; a mul by a Python scalar
        a = F.scaled_dot_product_attention(h[None, None], h[None, None], h[None, None], scale=0.3)  # -> CPU
        return torch.softmax(torch.cumsum(a[0, 0], -1), -1)  # cumsum: no chip kernel


def test_backend_maps_what_it_can_and_says_why_not_for_the_rest(chip):
    import firstlight.torch as flt

    g = torch.Generator().manual_seed(SEED + 2)
    torch.manual_seed(SEED)
    m = _Mixed().eval()
    x = torch.randn(8, 8, generator=g)
    printed = []
    be = flt.backend(chip, recipe="int8-channel", report=printed.append)
    torch._dynamo.reset()
    with torch.no_grad():
        got = torch.compile(m, backend=be)(x)
        want = m(x)
    torch._dynamo.reset()
    rows = {(r["op"], r["where"].split(":")[0]): r for r in be.table()}
    where = {r["op"]: r["where"] for r in be.table() if r["where"] != "layout"}
    assert where["aten.addmm.default"] == "chip" and where["firstlight.rms_norm.default"] == "chip"
    assert where["aten._softmax.default"] == "chip" and where["aten.mul.Tensor"] == "chip"
    assert where["aten.gelu.default"].startswith("CPU: exact (erf) GELU")
    assert where["aten._scaled_dot_product_flash_attention_for_cpu.default"].startswith("CPU: a scale of 0.3")
    assert where["aten.cumsum.default"] == "CPU: no chip kernel for this operator"
    chip_rows = [r for r in be.table() if r["where"] == "chip"]
    assert all(r["cycles"] > 0 and r["calls"] == r["count"] for r in chip_rows)
    assert rows[("aten.addmm.default", "chip")]["recipe"] == "int8-channel"
    assert rows[("aten._softmax.default", "chip")]["recipe"] == "fp32"
    s = be.summary()
    assert (s["ops_on_chip"], s["ops_total"]) == (4, 7), be.table()
    assert s["cycles"] == sum(r["cycles"] for r in chip_rows)
    assert len(printed) == 1 and "4 of 7 operators on the chip" in printed[0]
    assert _sqnr(want, got) > 25, REPRO


def test_backend_refuses_a_graph_that_needs_gradients(chip):
    import firstlight.torch as flt

    m = nn.Linear(4, 4)
    torch._dynamo.reset()
    with pytest.raises(Exception, match=r"inference graphs: call the compiled model under torch.no_grad"):
        torch.compile(m, backend=flt.backend(chip, report=None))(torch.randn(2, 4))
    torch._dynamo.reset()


def test_a_kernel_refusal_at_run_time_falls_back_with_the_kernels_words():
    """A head dimension past the attention kernel's range (300 > 256) is refused when the node runs:
    it runs on the CPU and the table quotes why; the GEMMs run with A0's mitigations, listed."""
    require_sim("verilator")
    import firstlight
    import firstlight.torch as flt

    class Attn(nn.Module):
        def forward(self, q):
            return F.scaled_dot_product_attention(q, q, q) @ q.transpose(-1, -2)

    q = torch.randn(1, 1, 8, 300, generator=torch.Generator().manual_seed(SEED + 3))  # 4-D: one SDPA node
    with firstlight.open(rev="A0", config=VECTOR_CHIP) as s, torch.no_grad():
        be = flt.backend(s, report=None)
        torch._dynamo.reset()
        torch.compile(Attn(), backend=be)(q)
        torch._dynamo.reset()
    where = {r["op"]: r for r in be.table()}
    sdpa = where["aten._scaled_dot_product_flash_attention_for_cpu.default"]
    assert sdpa["where"].startswith("CPU: the kernel refused: dim must be in [1, 256]"), sdpa
    assert "FL-ME-001" in where["aten.bmm.default"]["mitigations"], where
    assert "FL-ME-001" in be.summary()["mitigations"]


# ---- the models ----------------------------------------------------------------------------------

def test_digits_mlp_int8_channel_is_within_a_point_of_fp32(chip):
    from firstlight.torch.models import evaluate

    r = evaluate(chip, "mlp", "int8-channel", seed=0)
    assert r["fp32_accuracy"] > 0.9, r
    assert abs(r["accuracy"] - r["fp32_accuracy"]) <= 0.01, {k: v for k, v in r.items() if k != "operators"}
    assert (r["ops_on_chip"], r["ops_total"]) == (3, 3) and r["inferences"] == 360
    assert r["cycles_per_inference"] == r["cycles"] / 360 > 0


def test_transformer_block_runs_on_chip_but_its_embedding(chip):
    from firstlight.torch.models import evaluate

    r = evaluate(chip, "transformer", "int8-channel", seed=0)
    assert r["fallbacks"] == ["aten.embedding.default: a gather (no arithmetic; the chip has no indexed load)"], r
    assert r["ops_on_chip"] == r["ops_total"] - 1 == 11
    assert r["sqnr_db"] > 35, {k: v for k, v in r.items() if k != "operators"}


def test_model_command_writes_the_keys_scripts_read(tmp_path, capsys):
    require_sim("verilator")
    from firstlight import cli

    out = tmp_path / "m.json"
    argv = ["model", "transformer", "--rev", "B1", "--formats", "int8", "--sram-depth", "64",  # = VECTOR_CHIP
            "--recipe", "int8-channel", "int8-tensor", "--json", str(out)]
    assert cli.main(argv) == cli.EXIT_OK
    d = json.loads(out.read_text())
    assert {"recipe", "ops_total", "ops_on_chip", "cycles", "sqnr_db", "operators", "runs"} <= set(d)
    assert d["recipe"] == "int8-channel" and [r["recipe"] for r in d["runs"]] == ["int8-channel", "int8-tensor"]
    assert np.isfinite(d["sqnr_db"]) and d["ops_on_chip"] == 11
    text = " ".join(capsys.readouterr().out.split())
    assert "int8-tensor" in text and "embedding" in text


@pytest.mark.parametrize("argv, needle", [
    (["model", "mlp", "--recipe", "int4"], "unknown recipe 'int4'"),
    (["model", "mlp", "--formats", "int8", "--recipe", "mxfp8-e4m3-rceil"], "needs the e4m3 MATMUL path"),
    (["model", "transformer", "--no-vector"], "needs the vector unit"),
])
def test_model_command_refuses_before_building(argv, needle, capsys):
    from firstlight import cli

    assert cli.main(argv) == cli.EXIT_CANNOT_START
    assert needle in " ".join(capsys.readouterr().err.split())
