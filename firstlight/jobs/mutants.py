"""The job of ``firstlight mutants``: a kernel's compiled stream and each of its mutants
(interp.races.mutants) run on the chip, each judged against the golden.

One simulator process per (kernel, shape): the unmutated stream first (it must pass, and its
cycles set every mutant's budget, so a mutant that hangs costs twice a good run, not the
watchdog's million cycles), then every mutant after a soft reset (a deleted wait leaves a
semaphore counting, which must not release the next mutant's wait early).
"""

from __future__ import annotations

import workarounds
from cosim.device import DeviceError, DeviceTimeout
from interp.races import apply_mutant
from kernels.tile.runtime import run
from kernels.tile.spec import get

from .tile import golden_mismatch

__all__ = ["mutants_job", "outcome_of", "stream_sha"]


async def outcome_of(dev, spec, p, compiled, ins, budget) -> tuple[str, int]:
    """("correct" | "corrupt" | "hang" | "error", cycles) of one run of ``compiled`` on inputs
    ``ins`` (the kernel's generated inputs: its tensors and what its golden reads besides)."""
    await dev.soft_reset()
    t0 = dev.now_cycles()
    tensors = {t.name: ins[t.name] for t in spec.tensors(p) if t.role == "in"}
    try:
        outs = await run(dev, compiled, tensors, budget)
        await dev.check_no_error()
    except DeviceTimeout:
        await dev.soft_reset()
        return "hang", dev.now_cycles() - t0
    except DeviceError:
        await dev.soft_reset()
        return "error", dev.now_cycles() - t0
    # bits only, no SQNR: a corrupted output may hold NaN
    wrong = golden_mismatch(spec, p, ins, outs, dev.config.lanes, compiled.kernel_args)
    return ("corrupt" if wrong else "correct"), dev.now_cycles() - t0



async def mutants_job(dev, emit, kernel: str, params: dict, seed: int, mutants: list, budget_factor: float = 2.0
                      ) -> dict:
    """Run ``kernel`` at ``params`` unmutated, then each of ``mutants`` ((kind, index) pairs of
    interp.races.mutants); emits a record per mutant as it ends."""
    from dataclasses import replace

    spec = get(kernel)
    p = spec.resolve(params)
    mit = workarounds.attach(dev)
    compiled = spec.compile(p, dev.config, dev.board, {"gemm": mit.gemm, "reduce": mit.reduce, "lowp": mit.lowp})
    ins = spec.inputs(p, seed, False)
    if spec.prepare is not None:
        from kernels.tile.spec import Target

        ins.update(spec.prepare(ins, p, Target(dev.config, dev.board, mit.gemm, mit.lowp)))
    base, cycles = await outcome_of(dev, spec, p, compiled, ins, None)
    budget = max(2_000, int(budget_factor * cycles))
    out = []
    for kind, i in mutants:
        m = replace(compiled, commands=apply_mutant(compiled.commands, kind, i))
        verdict, _ = await outcome_of(dev, spec, p, m, ins, budget)
        rec = {"kind": kind, "index": i, "outcome": verdict}
        emit({"type": "mutant", **rec})
        out.append(rec)
    return {"unmutated": base, "cycles": cycles, "budget": budget, "mutants": out,
            "commands": len(compiled.commands), "sha": stream_sha(compiled.commands)}


def stream_sha(commands) -> str:
    """A short hash of a command stream (the host and the simulator must mutate the same one)."""
    import hashlib

    return hashlib.sha256(",".join(str(int(c)) for c in commands).encode()).hexdigest()[:16]
