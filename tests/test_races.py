"""The happens-before checker (interp/races.py), its score against the RTL (firstlight mutants)
and the interpreter's DMA orders that make a race show in the output.

The checker is held to an oracle written separately for the compiler's tests (tests/test_tile.py
``races``, bitsets of every command instead of vector clocks): on every mutant of the suite's
compiled-stream cases, both must flag the same ones. Every stream any test compiles also goes
through the checker (tests/conftest.py, kernels.tile.runtime.STREAM_CHECKS).
"""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest

from conftest import SEED, require_sim
from interp.races import apply_mutant, check_compiled, check_stream, mutants
from rtl import isa
from rtl.board import BoardConfig
from rtl.config import ChipConfig
from rtl.memories import Region

CHIP = ChipConfig()
BOARD = BoardConfig().resolve(CHIP)
REPRO = f"reproduce: FIRSTLIGHT_SEED={SEED} pytest tests/test_races.py"


def _compiled(name, params):
    from kernels.tile.spec import get

    spec = get(name)
    return spec.compile(spec.resolve(params), CHIP, BOARD)


def test_no_stream_the_compiler_makes_is_flagged():
    """0 false positives: every kernel of the registry at its bring-up shapes and defaults, and
    the compiled-stream cases of tests/test_tile.py."""
    from kernels.tile.spec import registry
    from test_tile import CASES

    cases = list(CASES) + [(n, dict(p)) for n, s in registry().items() for p in (*s.bringup, {})]
    flagged = {f"{n} {p}": [str(f) for f in check_compiled(_compiled(n, p), CHIP, BOARD)[:2]] for n, p in cases}
    assert not {k: v for k, v in flagged.items() if v}, flagged


@pytest.mark.parametrize("name,params", [("softmax", {"rows": 9, "cols": 100, "tile_rows": 2}),
                                         ("gemm", {"m": 21, "n": 19, "k": 17, "epilogue": "requant"}),
                                         ("flash_attention", {"seq": 13, "dim": 8, "nq": 2, "tk": 8}),
                                         ("layernorm", {"rows": 5, "cols": 13})])
def test_the_checker_agrees_with_the_suites_oracle_on_every_mutant(name, params):
    from test_tile import races

    c = _compiled(name, params)
    differ = []
    for kind, i in mutants(c.commands):
        m = apply_mutant(c.commands, kind, i)
        mine = bool(check_compiled(c, CHIP, BOARD, m))
        oracle = bool(races(m, 4 * CHIP.lanes))
        if mine != oracle:
            differ.append(f"{kind} at {i}: checker {mine}, oracle {oracle}")
    assert len(mutants(c.commands)) > 10 and not differ, differ


def test_a_race_names_both_commands_the_words_and_the_kernel_lines():
    """A VEC's wait for the load of its rows deleted: the finding names the DMA_LOAD and the VEC,
    their queues, the ACC words both touch and the kernel source line of each."""
    c = _compiled("softmax", {"rows": 4, "cols": 37})
    first_vec_wait = next(i for i, x in enumerate(c.commands)
                          if isa.decode(x)["opcode"] in (isa.Opcode.VEC, isa.Opcode.REDUCE) and isa.decode(x)["sync"]["wait"])
    found = check_compiled(c, CHIP, BOARD, apply_mutant(c.commands, "delete wait", first_vec_wait))
    race = next(f for f in found if f.kind == "race")
    load, unit = race.commands
    assert unit == first_vec_wait and isa.decode(c.commands[load])["opcode"] == isa.Opcode.DMA_LOAD
    assert race.space == "ACC" and race.words[1] > race.words[0]
    text = str(race)
    assert f"command {load} (DMA_LOAD, the DMA load queue) and command {unit} (" in text, text
    assert f"ACC words [{race.words[0]}, {race.words[1]}) with nothing ordering them" in text, text
    assert all(ln.startswith("kernels/tiled/") for ln in race.lines) and "kernels/tiled/softmax.py:" in text, text
    # and the signal that wait took is now left counting
    assert any(f.kind == "semaphore" and "is left at 1" in f.message for f in found), found


def test_deadlock_semaphore_uninitialised_and_refused_streams():
    deadlock = check_stream([isa.nop(), isa.matmul(a=0, b=0, c=0, k=4, wait=3)], CHIP, BOARD, sram_initialised=True)
    assert [f.kind for f in deadlock] == ["deadlock"] and "semaphore 3, which the whole stream signals 0" in \
        deadlock[0].message
    left = check_stream([isa.nop(signal=5)], CHIP, BOARD)
    assert [f.kind for f in left] == ["semaphore"] and "semaphore 5 is signalled 1 time(s) and waited on 0" in \
        left[0].message
    poison = check_stream([isa.matmul(a=0, b=0, c=0, k=4)], CHIP, BOARD)
    assert {f.kind for f in poison} == {"uninitialised"} and "reads A word 0" in poison[0].message
    fed = check_stream([isa.dma_load(Region.A, sram=0, dram=0, words=4, signal=1),
                        isa.dma_load(Region.B, sram=0, dram=0, words=4, signal=2), isa.nop(wait=1),
                        isa.matmul(a=0, b=0, c=0, k=4, wait=2)], CHIP, BOARD)
    assert fed == [], fed
    refused = check_stream([isa.matmul(a=CHIP.operand_depth - 1, b=0, c=0, k=4)], CHIP, BOARD, sram_initialised=True)
    assert refused[0].kind == "refused" and "ERR A_RANGE" in refused[0].message


def test_a_dma_into_words_a_unit_may_still_read_is_a_race():
    """A load that overwrites the A words a MATMUL reads, with no wait on the MATMUL's signal."""
    stream = [isa.dma_load(Region.A, sram=0, dram=0, words=4, signal=1),
              isa.dma_load(Region.B, sram=0, dram=0, words=4, signal=2), isa.nop(wait=1),
              isa.matmul(a=0, b=0, c=0, k=4, wait=2),
              isa.dma_load(Region.A, sram=0, dram=64, words=4)]
    found = check_stream(stream, CHIP, BOARD)
    assert [(f.kind, f.commands, f.space, f.words) for f in found] == [("race", (3, 4), "A", (0, 4))], found


@pytest.mark.parametrize("name,params", [("softmax", {"rows": 8, "cols": 100}), ("layernorm", {"rows": 4, "cols": 37})])
def test_the_late_dma_order_shows_races_the_eager_one_hides(name, params, capsys, seed=SEED):
    """On the interpreter, loads that land only once the stream needs them make a missing wait
    corrupt the output; every mutant wrong in any order is one the checker flags. Prints the
    counts docs/interpret.md quotes (`pytest tests/test_races.py -k late_dma_order -s`)."""
    from firstlight.jobs.tile import compare
    from interp import InterpDevice
    from interp.errors import InterpError
    from kernels.tile.runtime import run
    from kernels.tile.spec import get

    spec = get(name)
    p = spec.resolve(params)
    c = spec.compile(p, CHIP, BOARD)
    ins = spec.inputs(p, seed, False)
    tensors = {t.name: ins[t.name] for t in spec.tensors(p) if t.role == "in"}

    def wrong(m, order, s=0):
        dev = InterpDevice(CHIP, BOARD, "B1", dma_order=order, seed=s, strict_semaphores=False)
        try:
            outs = asyncio.run(run(dev, m, dict(tensors)))
        except InterpError:  # a deadlock
            return True
        return compare(spec, p, ins, outs, CHIP.lanes, m.kernel_args)[0] is not None

    assert not wrong(c, "eager") and not wrong(c, "late") and not any(wrong(c, "random", s) for s in range(3)), REPRO
    every = mutants(c.commands)
    eager = late = rand = either = 0
    for kind, i in every:
        m = replace(c, commands=apply_mutant(c.commands, kind, i))
        e, lt, r = wrong(m, "eager"), wrong(m, "late"), any(wrong(m, "random", s) for s in range(3))
        eager, late, rand, either = eager + e, late + lt, rand + r, either + (e or lt or r)
        if e or lt or r:
            assert check_stream(m.commands, CHIP, BOARD), f"{kind} at {i} is wrong on the interpreter, not flagged"
    with capsys.disabled():
        print(f"\n{name} {params}: of {len(every)} mutants wrong eager {eager}, late {late}, random (3 seeds) {rand}, "
              f"in any order {either}")
    assert late > eager, (eager, late)


def test_random_order_is_reproducible_by_its_seed():
    """The order commands execute in (each signals, or not, as it completes) is the seed's."""
    from interp.machine import Machine

    def order(seed):
        m = Machine(CHIP, BOARD, "random", seed)
        seen = []
        orig = m._signal

        def spy(e):
            seen.append(e.index)
            orig(e)
        m._signal = spy
        m.push(_compiled("softmax", {"rows": 8, "cols": 100}).commands)
        return tuple(seen)

    assert order(3) == order(3) and len({order(s) for s in range(6)}) > 1


# ---- the score against the RTL: firstlight mutants ------------------------------------------------

@pytest.mark.sim
def test_mutants_command_flags_every_mutant_the_rtl_gets_wrong(tmp_path, capsys):
    """A CI-sized sample (two kernels, 25 mutants per shape); `firstlight mutants` runs them all."""
    import json

    from firstlight import cli

    require_sim("verilator")
    out = tmp_path / "m.json"
    code = cli.main(["mutants", "--kernel", "softmax", "gemm", "--sample", "25", "--json", str(out)])
    text = capsys.readouterr().out
    assert code == cli.EXIT_OK, text
    doc = json.loads(out.read_text())
    t = doc["total"]
    assert t["mutants"] >= 80 and t["missed"] == 0 and t["unmutated_flagged"] == 0, t
    assert t["exposed"] > 0 and t["flagged"] >= t["exposed"], t
    assert "0 missed; 0 unmutated streams flagged" in text.replace("\n", " ")
    assert all(m["rtl"] in ("correct", "corrupt", "hang", "error") for c in doc["cases"] for m in c["mutants"])


def test_mutants_refuses_an_unknown_kernel_before_anything_runs(capsys):
    from firstlight import cli

    assert cli.main(["mutants", "--kernel", "softmx"]) == cli.EXIT_CANNOT_START
    assert "unknown kernel softmx; the registry has: " in capsys.readouterr().err
