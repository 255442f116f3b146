"""The tile FP8 / MX GEMM (tlowp, kernels/tiled/lowp.py) beside the hand stream it ports
(kernels/lowp.py gemm_lowp), on the same seeded float32 inputs in one simulator process: cycles,
and each checked bit for bit against golden.mx.

    PYTHONPATH=examples .venv/bin/python examples/lowp_tile_vs_hand.py B1 64 64 256 mxfp8-e4m3-rceil [seed]
"""

from __future__ import annotations

import json
import sys


async def compare_job(dev, emit, m: int, n: int, k: int, recipe: str, seed: int) -> dict:
    import workarounds
    from firstlight.jobs.checks import lowp_mismatch
    from firstlight.jobs.tile import tile_job
    from kernels.lowp import gemm_lowp
    from kernels.tile.spec import get

    mit = workarounds.attach(dev, None, warn=False)
    params = {"m": m, "n": n, "k": k, "recipe": recipe}
    ins = get("tlowp").inputs(get("tlowp").resolve(params), seed, False)
    hand = await gemm_lowp(dev, ins["a_f32"], ins["b_f32"], recipe, mitigations=mit)
    tile = await tile_job(dev, emit, "tlowp", params, seed)
    return {"hand_cycles": hand.stats.cycles, "hand_bit_exact": lowp_mismatch(hand) is None,
            "tile_cycles": tile["stats"]["cycles"], "tile_bit_exact": tile["passed"],
            "tile_vs_hand": round(tile["stats"]["cycles"] / hand.stats.cycles - 1, 4),
            "sqnr_db": {"hand": hand.sqnr_db, "tile": tile["sqnr_db"]},
            "tile_compile_s": tile["stats"]["host"]["compile_s"], "tile_plan": tile["stats"].get("plan")}


if __name__ == "__main__":
    from cosim.build import Variant
    from cosim.jobs import run_job
    from lowp_tile_vs_hand import compare_job as job  # the simulator process imports it by this name

    rev, m, n, k, recipe = sys.argv[1], *map(int, sys.argv[2:5]), sys.argv[5]
    seed = int(sys.argv[6]) if len(sys.argv) > 6 else 3
    out = run_job(job, {"m": m, "n": n, "k": k, "recipe": recipe, "seed": seed}, variant=Variant(revision=rev),
                  sim="verilator").value
    print(json.dumps({"revision": rev, "shape": [m, n, k], "recipe": recipe, "seed": seed, **out}, indent=1))
