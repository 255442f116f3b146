"""Two real models end to end on the chip, through ``torch.compile`` and the firstlight backend.

* ``mlp``: a digits classifier (64 -> 32 -> ReLU -> 10) trained here, in about a second, on
  scikit-learn's bundled 8x8 digits (no download), 1,437 training images, 360 held out. Metric:
  top-1 accuracy on the held-out images, chip vs eager fp32.
* ``transformer``: one pre-LN encoder block with fixed random weights: token embedding plus a
  learned position table, LayerNorm, 2-head self-attention (SDPA), a residual, LayerNorm, an MLP
  with tanh-GELU, a residual. Metric: SQNR of the block's output, chip vs eager fp32.

:func:`evaluate` compiles the model with :func:`firstlight.torch.backend` for one recipe, runs the
evaluation batch once and returns one row: the metric against fp32, the operators on the chip,
the chip cycles per inference and the errata mitigations that ran, with the coverage table.
Everything is seeded; the same seed gives the same weights, data split and numbers.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

__all__ = ["MODELS", "digits_data", "train_digits_mlp", "EncoderBlock", "transformer_inputs", "evaluate",
           "build_model"]

MODELS = ("mlp", "transformer")


def digits_data(seed: int = 0):
    """(x_train, y_train, x_test, y_test): scikit-learn's digits, pixels scaled to [0, 1], a
    seeded 80/20 split."""
    try:
        from sklearn.datasets import load_digits
    except ImportError as e:  # pragma: no cover - depends on the installation
        raise ImportError("the digits MLP needs scikit-learn: pip install 'firstlight[torch]'") from e
    d = load_digits()
    x = torch.tensor(d.data / 16.0, dtype=torch.float32)
    y = torch.tensor(d.target, dtype=torch.long)
    perm = torch.randperm(len(x), generator=torch.Generator().manual_seed(seed))
    cut = int(0.8 * len(x))
    tr, te = perm[:cut], perm[cut:]
    return x[tr], y[tr], x[te], y[te]


def train_digits_mlp(seed: int = 0, hidden: int = 32, steps: int = 300) -> tuple[nn.Module, tuple]:
    """The MLP trained on the digits (full-batch Adam, seeded); returns (model in eval mode, data)."""
    data = digits_data(seed)
    xtr, ytr = data[0], data[1]
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(64, hidden), nn.ReLU(), nn.Linear(hidden, 10))
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(steps):
        opt.zero_grad()
        F.cross_entropy(model(xtr), ytr).backward()
        opt.step()
    return model.eval(), data


class EncoderBlock(nn.Module):
    """A pre-LN transformer encoder block over token ids (fixed random weights from ``seed``)."""

    def __init__(self, vocab: int = 32, seq: int = 16, dim: int = 16, heads: int = 2, ffn: int = 32, seed: int = 0):
        super().__init__()
        if dim % heads:
            raise ValueError(f"dim {dim} must be a multiple of heads {heads}")
        torch.manual_seed(seed)
        self.heads, self.dim = heads, dim
        self.embed = nn.Embedding(vocab, dim)
        self.pos = nn.Parameter(0.1 * torch.randn(seq, dim))
        self.ln1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.ln2 = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, ffn)
        self.fc2 = nn.Linear(ffn, dim)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        b, s = ids.shape
        x = self.embed(ids) + self.pos[:s]
        q, k, v = self.qkv(self.ln1(x)).split(self.dim, dim=-1)
        q, k, v = (t.view(b, s, self.heads, self.dim // self.heads).transpose(1, 2) for t in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v)
        x = x + self.proj(a.transpose(1, 2).reshape(b, s, self.dim))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x)), approximate="tanh"))


def transformer_inputs(seed: int = 0, batch: int = 1, seq: int = 16, vocab: int = 32) -> torch.Tensor:
    return torch.randint(0, vocab, (batch, seq), generator=torch.Generator().manual_seed(seed + 1))


def build_model(name: str, seed: int = 0):
    """(model, inputs, labels or None, what one inference is) for ``name`` in :data:`MODELS`."""
    if name == "mlp":
        model, (_, _, xte, yte) = train_digits_mlp(seed)
        return model, xte, yte, "image"
    if name == "transformer":
        return EncoderBlock(seed=seed).eval(), transformer_inputs(seed), None, "sequence of 16 tokens"
    raise ValueError(f"unknown model {name!r}; accepted: {', '.join(MODELS)}")


def _sqnr_db(ref: torch.Tensor, got: torch.Tensor) -> float:
    r, g = ref.double(), got.double()
    noise = float(((r - g) ** 2).sum())
    return float("inf") if noise == 0 else 10 * math.log10(float((r ** 2).sum()) / noise)


def evaluate(chip, name: str, recipe: str = "int8-channel", seed: int = 0, report=None) -> dict:
    """Compile model ``name`` for ``chip`` with ``recipe``, run its evaluation batch once, and
    return its row (see the module docstring); ``report`` receives the coverage table text."""
    import torch._dynamo

    from .compile import backend as make_backend

    model, x, labels, unit = build_model(name, seed)
    be = make_backend(chip, recipe, report=report)
    torch._dynamo.reset()  # a fresh compile: a cached graph would run another recipe's backend
    with torch.no_grad():
        ref = model(x)
        got = torch.compile(model, backend=be, dynamic=False)(x)
    torch._dynamo.reset()
    s = be.summary()
    n = x.shape[0]
    row = {"model": name, "recipe": recipe, "revision": chip.revision,
           "array": f"{chip.config.rows}x{chip.config.cols}", "seed": seed,
           "ops_total": s["ops_total"], "ops_on_chip": s["ops_on_chip"], "chip_share": s["chip_share"],
           "cycles": s["cycles"], "inferences": n, "inference": unit, "cycles_per_inference": s["cycles"] / n,
           "mitigations": s["mitigations"], "fallbacks": s["fallbacks"], "operators": be.table()}
    if labels is not None:
        row["accuracy"] = float((got.argmax(-1) == labels).float().mean())
        row["fp32_accuracy"] = float((ref.argmax(-1) == labels).float().mean())
        row["agreement"] = float((got.argmax(-1) == ref.argmax(-1)).float().mean())
    else:
        row["sqnr_db"] = _sqnr_db(ref, got)
        row["max_abs_err"] = float((ref - got).abs().max())
    return row
