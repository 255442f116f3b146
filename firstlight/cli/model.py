"""``firstlight model mlp|transformer``: a real model through ``torch.compile`` on the chip, per
quantization recipe: accuracy (the digits MLP) or output SQNR (the encoder block) against eager
fp32, the operators that ran on the chip, the chip cycles per inference, the errata mitigations,
and the operator coverage table (:mod:`firstlight.torch.models`)."""

from __future__ import annotations

import argparse
import json

from firstlight.errors import EXIT_OK, CannotStart, exit_codes_help

from .common import (
    FittedTable,
    add_array_option,
    add_formats_option,
    add_json_option,
    add_rev_option,
    add_sim_option,
    add_sram_depth_option,
    console,
    fmt_pct,
    plain,
    require_sim,
    uses_build_cache,
    variant_from_args,
)

__all__ = ["add_parser", "cmd", "summary_rows", "coverage_rows"]

MODELS = ("mlp", "transformer")  # firstlight.torch.models.MODELS, without importing torch for --help


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "model", help="a real PyTorch model on the chip through torch.compile: accuracy/SQNR vs fp32, coverage",
        description="Compiles the model with the firstlight torch.compile backend for each recipe and runs it "
        "once: mlp is a 64-32-10 classifier trained here on scikit-learn's bundled digits (accuracy on 360 "
        "held-out images); transformer is one encoder block (embedding, attention, LayerNorm, MLP) with fixed "
        "random weights (output SQNR). Needs the firstlight[torch] extra.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="examples:\n  firstlight model mlp\n  firstlight model transformer --recipe int8-channel "
               "mxfp8-e4m3-rceil --json t.json\n\n" + exit_codes_help(ok="the model ran (the numbers are "
                                                                      "reported, not judged)"))
    p.set_defaults(handler=cmd)
    uses_build_cache(p)
    p.add_argument("model", choices=MODELS)
    p.add_argument("--recipe", nargs="+", default=["int8-channel"], metavar="R",
                   help="quantization recipes of the matrix products (golden/quant.py: int8-channel, int8-tensor, "
                        "fp8-e4m3-tensor, mxfp8-e4m3-rceil, mxfp4-e2m1-rceil, ...; default: int8-channel)")
    add_sim_option(p)
    add_array_option(p)
    add_rev_option(p, default="B0", help="silicon revision (default B0; on A0/A1 attention falls back to the CPU: "
                                         "its errata mitigations are not built for the attention kernel)")
    add_formats_option(p)
    add_sram_depth_option(p)
    p.add_argument("--seed", type=int, default=0, help="weights, data split and inputs (default 0)")
    add_json_option(p, help="write the rows as JSON: the first recipe's keys at the top level (recipe, ops_total, "
                            "ops_on_chip, cycles, accuracy and fp32_accuracy or sqnr_db, operators), every "
                            "recipe's row in 'runs'")


def _check(args, variant) -> None:
    try:
        import sklearn  # noqa: F401
        import torch  # noqa: F401
    except ImportError as e:
        raise CannotStart(f"firstlight model needs PyTorch and scikit-learn ({e}): pip install 'firstlight[torch]' "
                          "(torch==2.13.0 exactly)") from None
    from golden.quant import RECIPES

    cfg = variant.config
    for r in args.recipe:
        if r not in RECIPES:
            raise CannotStart(f"--recipe: unknown recipe {r!r}; known: {', '.join(RECIPES)}")
        fmt = RECIPES[r].fmt
        if fmt != "int8" and fmt not in cfg.formats:
            raise CannotStart(f"--recipe {r} needs the {fmt} MATMUL path and --formats builds "
                              f"{' '.join(cfg.formats)}")
    if args.model == "transformer" and not cfg.vector:
        raise CannotStart("the transformer block needs the vector unit (softmax, LayerNorm, attention): drop "
                          "--no-vector")


def summary_rows(rows: list[dict]) -> tuple[list[str], list[list[str]]]:
    mlp = "accuracy" in rows[0]
    head = ["recipe", *(["accuracy", "fp32\naccuracy", "points\nvs fp32"] if mlp else ["SQNR dB\nvs fp32"]),
            "ops on chip", "chip\nshare", "cycles per\ninference", "mitigations"]
    body = []
    for r in rows:
        metric = ([f"{100 * r['accuracy']:.2f}%", f"{100 * r['fp32_accuracy']:.2f}%",
                   f"{100 * (r['accuracy'] - r['fp32_accuracy']):+.2f}"] if mlp else [f"{r['sqnr_db']:.1f}"])
        body.append([r["recipe"], *metric, f"{r['ops_on_chip']} of {r['ops_total']}", fmt_pct(r["chip_share"]),
                     f"{r['cycles_per_inference']:,.0f}", ", ".join(r["mitigations"]) or "none"])
    return head, body


def coverage_rows(ops: list[dict]) -> tuple[list[str], list[list[str]]]:
    head = ["operator", "count", "where", "recipe", "cycles", "SQNR dB", "max |err|"]
    body = [[o["op"].removeprefix("aten.").removesuffix(".default"), str(o["count"]), o["where"], o["recipe"] or "-",
             f"{o['cycles']:,}" if o["cycles"] else "-",
             "-" if o["sqnr_db"] is None else ("inf" if o["sqnr_db"] == float("inf") else f"{o['sqnr_db']:.1f}"),
             "-" if o["max_abs_err"] is None else f"{o['max_abs_err']:.3g}"] for o in ops]
    return head, body


def cmd(args) -> int:
    require_sim(args.sim)
    variant = variant_from_args(args)
    _check(args, variant)

    import firstlight
    from firstlight.torch.models import evaluate

    cfg = variant.config
    rows = []
    with firstlight.open(rev=args.rev, sim=args.sim, config=cfg, board=variant.board) as chip:
        for recipe in args.recipe:
            r = evaluate(chip, args.model, recipe, seed=args.seed, report=None)
            rows.append(r)
            head, body = coverage_rows(r["operators"])
            console.print(FittedTable(f"{args.model}, recipe {recipe}: operator coverage (count: nodes in the "
                                      "compiled graph; SQNR / max |err|: the chip operator vs the same operator "
                                      "in fp32 on the CPU, same inputs)", head, body, keys=1,
                                      justify=["left", "right", "left", "left", "right", "right", "right"]))
    what = ("top-1 accuracy on 360 held-out digits" if args.model == "mlp"
            else "SQNR of the block's output (1 x 16 tokens, dim 16, 2 heads)")
    head, body = summary_rows(rows)
    console.print(FittedTable(f"{args.model} on a {cfg.rows}x{cfg.cols} chip, revision {chip.revision}, {args.sim}, "
                              f"seed {args.seed}: {what}, chip vs eager fp32", head, body, keys=1,
                              justify=["left"] + ["right"] * (len(head) - 2) + ["left"]))
    fb = sorted({f for r in rows for f in r["fallbacks"]})
    if fb:
        console.print(plain("on the CPU: ", "; ".join(fb)))
    if args.json:
        from firstlight.provenance import with_provenance

        out = {**rows[0], "runs": rows, "command": args.command_line}
        args.json.write_text(json.dumps(with_provenance(out, args.sim, args.command_line), indent=2, default=str))
    return EXIT_OK
