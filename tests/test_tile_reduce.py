"""int32 row reductions in the tile language (kernels/tiled/reduce.py; golden.reduce_rows) and the
reduction unit's errata as lowering rules (kernels/tile/errata.py).

Host tests: with FL-RU-002's rule every REDUCE SUM has an even count; with FL-RU-001's every
int32 MAX is a MIN of complemented words, and a kernel that would use those words any other way
is refused with its line. Simulator tests (`-m sim`): bit-exact on A0 (both errata) and B1, rows
of one, odd and even word counts and rows longer than the SRAM (chunks whose partial results are
reduced again); the errata matrix (tests/test_errata_matrix.py) shows the defects escaping with
the mitigations off.
"""

import pytest

from conftest import source_module
from kernels import tile
from kernels.tile.spec import registry
from rtl.board import BoardConfig
from rtl.config import ChipConfig
from rtl.isa import Opcode, ReduceOp, decode
from workarounds import ReduceConstraints

SEED = 1
CHIP = ChipConfig()
BOTH = ReduceConstraints(max_via_min=True, even_sum_count=True)


def _compile(constraints=None, **kw):
    spec = registry()["reduce"]
    return spec.compile(spec.resolve(kw), CHIP, BoardConfig().resolve(CHIP), {"reduce": constraints})


def _reduces(c):
    return [(ReduceOp(d["flags"]["op"]), d["length"]) for d in map(decode, c.commands)
            if d["opcode"] == Opcode.REDUCE]


@pytest.mark.parametrize("cols", [4, 12, 37, 9000])
def test_fl_ru_002_leaves_no_odd_sum(cols):
    plain = _reduces(_compile(None, rows=3, cols=cols, op="sum"))
    fixed = _reduces(_compile(BOTH, rows=3, cols=cols, op="sum"))
    odd = any(n % 2 for _, n in plain)
    assert odd == (cols in (4, 12, 9000)), plain  # 1 and 3 words; 9000: 9 chunks of partials
    assert all(n % 2 == 0 for op, n in fixed if op == ReduceOp.SUM), fixed


def test_fl_ru_001_reduces_max_as_min():
    assert {op for op, _ in _reduces(_compile(None, rows=3, cols=37, op="max"))} == {ReduceOp.MAX}
    c = _compile(BOTH, rows=3, cols=37, op="max")
    assert {op for op, _ in _reduces(c)} == {ReduceOp.MIN}
    assert {t.name: t.complement for t in c.tensors} == {"x": True, "y": True}


MISUSE = '''
    from kernels import tile

    def reuse(x, y, z):
        t = tile.load(x[0:2])
        tile.store(y[0:2], tile.row_max(t))
        tile.store(z[0:2], tile.row_sum(t))

    def on_chip(x, y, z):
        t = tile.load(x[0:2])
        tile.store(y[0:2], tile.row_max(t + t))
'''


def test_a_complemented_tile_used_otherwise_is_refused_with_the_line(tmp_path, monkeypatch):
    m = source_module(tmp_path, monkeypatch, "ru_misuse", MISUSE)

    ts = [tile.TensorSpec("x", 2, 8, "int32"), tile.TensorSpec("y", 2, 1, "int32", role="out"),
          tile.TensorSpec("z", 2, 1, "int32", role="out")]
    for fn, msg in ((m.reuse, r"ru_misuse.py:7: x\d holds complemented words"),
                    (m.on_chip, r"ru_misuse.py:11: .*FL-RU-001.*computed on the chip")):
        with pytest.raises(tile.TileError, match=msg):
            tile.build(fn.__name__, fn, CHIP, ts, {}, dram_bytes=1 << 22, bus_bytes=4, constraints={"reduce": BOTH})
        tile.build(fn.__name__, fn, CHIP, ts, {}, dram_bytes=1 << 22, bus_bytes=4)  # fine on a chip without it


CASES = [({"rows": 7, "cols": 1, "op": "sum"}, True), ({"rows": 5, "cols": 12, "op": "sum"}, True),
         ({"rows": 5, "cols": 37, "op": "max"}, True), ({"rows": 9, "cols": 9, "op": "max"}, False),
         ({"rows": 6, "cols": 13, "op": "min"}, True), ({"rows": 3, "cols": 9000, "op": "sum"}, True),
         ({"rows": 2, "cols": 9000, "op": "max"}, True)]


@pytest.mark.sim
@pytest.mark.parametrize("rev", ["A0", "B1"])
def test_reduce_bit_exact_verilator(rev):
    from cosim.build import Variant
    from cosim.jobs import run_job
    from firstlight.jobs.tile import tile_cases_job

    results = run_job(tile_cases_job, {"cases": [["reduce", p, x] for p, x in CASES], "seed": SEED},
                      variant=Variant(config=CHIP, revision=rev), sim="verilator").value
    bad = [f"first wrong word {r['mismatch']}; reproduce: firstlight run reduce --rows {p['rows']} --cols "
           f"{p['cols']} --op {p['op']} --rev {rev} --seed {SEED}" + (" --extremes" if x else "")
           for r, (p, x) in zip(results, CASES) if not r["passed"]]
    assert not bad, "\n".join(bad)
    if rev == "A0":
        assert {"FL-RU-001", "FL-RU-002"} <= set(results[0]["mitigations"])
