"""The tile language and its compiler, without a simulator.

The central check is an independent happens-before analysis of the *lowered* stream, written
here from docs/chip.md's rules (in-order issue; a VEC or REDUCE starts once every earlier
command-stream command is done; each DMA queue runs in order and completes in order; the k-th
wait on a semaphore pairs with its k-th signal), reading only the command words. It proves
every compiled kernel race-free (no two commands of different queues touch the same words, one
writing, without an order between them), and that no wait is redundant: removing any one wait
with the signal it pairs with makes a race appear.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

from conftest import source_module
from kernels import tile
from kernels.tile.spec import registry
from rtl.board import BoardConfig
from rtl.config import ChipConfig
from rtl.isa import Opcode, VecB, VecOp, decode, with_sync
from rtl.memories import Region
from workarounds import GemmConstraints

CHIP = ChipConfig()
SMALL = ChipConfig(formats=("int8",), operand_depth=64, acc_depth=64, cmdq_depth=64)
BOARD = BoardConfig().resolve(CHIP)

_UNARY = {VecOp.EXP, VecOp.RECIP, VecOp.RSQRT, VecOp.RELU, VecOp.I2F}


def _access(cmd: int, word_bytes: int, stale_a: bool = False, zero_b: int | None = None):
    """(queue, kind, reads, writes) of one command from its fields alone."""
    d = decode(cmd)
    op = d["opcode"]
    if op == Opcode.DMA_LOAD:
        n = d["length"] * max(1, d["arg1"])
        region = Region(d["flags"]["region"]).name
        return "load", "dma", [("DRAM", d["dram"], d["dram"] + n * word_bytes)], [(region, d["arg0"], d["arg0"] + n)]
    if op == Opcode.DMA_STORE:
        n = d["length"] * max(1, d["arg1"])
        return "store", "dma", [("ACC", d["arg0"], d["arg0"] + n)], [("DRAM", d["dram"], d["dram"] + n * word_bytes)]
    if op == Opcode.VEC:
        f = d["flags"]
        n = d["length"]
        reads = [("ACC", d["arg0"], d["arg0"] + n)]
        if VecOp(f["op"]) not in _UNARY and f["b"] != VecB.FOLD:
            bn = n if f["b"] == VecB.VECTOR else 1
            reads.append(("ACC", d["arg1"], d["arg1"] + bn))
        out = 1 if f["b"] == VecB.FOLD else n
        into = {0: "ACC", 1: "A", 2: "B"}[f["dst"]]  # CVT_I8 writes operand words
        return "exec", "unit", reads, [(into, d["arg2"], d["arg2"] + out)]
    if op == Opcode.REDUCE:
        return "exec", "unit", [("ACC", d["arg0"], d["arg0"] + d["length"])], [("ACC", d["arg2"], d["arg2"] + 1)]
    if op == Opcode.MATMUL:
        k, a, b, c = d["length"], d["arg0"], d["arg1"], d["arg2"]
        rows = CHIP.rows
        # on a chip with FL-ME-002 the A range is one word longer: the stale read is at base + K
        reads = [("A", a, a + k + int(stale_a)), ("B", b, b + k)] + ([("ACC", c, c + rows)] if d["flags"]["accumulate"] else [])
        if b == zero_b:  # FL-ME-002's spacer: any A word times zero B words adds 0; its A read is benign
            reads = reads[1:]
        if d["flags"]["fmt"]:  # FP: a scale word per 32-step block from SA and SB (docs/numerics.md)
            nblk, sa, sb = -(-k // 32), d["arg3"]["sa"], d["arg3"]["sb"]
            reads += [("SA", sa, sa + nblk), ("SB", sb, sb + nblk)]
        return "exec", "matmul", reads, [("ACC", c, c + rows)]
    if op == Opcode.FENCE:
        return "exec", "unit", [], []
    if op == Opcode.DMA_STRIDE:
        return "exec", "nop", [], []
    return "exec", "nop", [], []  # NOP: retires at once, completes nothing before it


def races(cmds: list[int], word_bytes: int, stale_a: bool = False) -> list[str]:
    """Unordered conflicting pairs of the stream, and semaphore misuse.

    Per command, the set of commands known complete when it starts (``before_start``) and when it
    completes (``before_end``), as bitmasks, from these rules alone: a queue starts its commands
    in order, and the stream pushes a DMA only once it reaches it; a VEC, REDUCE or FENCE starts
    once every earlier command-stream command is done, a MATMUL once every earlier VEC, REDUCE
    and FENCE is; a DMA queue and the stream's MATMULs, VECs, REDUCEs and FENCEs complete in
    order (a NOP or DMA_STRIDE retires at once and implies nothing); the k-th wait on a
    semaphore starts after its k-th signal's command completed."""
    # on a chip with FL-ME-002 the spacers' zero B words are the bottom two of B
    zero_b = 0 if stale_a else None
    acc = [_access(c, word_bytes, stale_a, zero_b) for c in cmds]
    n = len(cmds)
    before_start = [0] * n
    before_end = [0] * n
    last = {"exec": None, "load": None, "store": None}
    last_ordered = None  # the last command-stream command that completes in order
    exec_done = 0  # known complete once every earlier command-stream command is done
    unit_done = 0  # known complete once the last VEC/REDUCE/FENCE is done
    signals: dict[int, list[int]] = {}
    for i, c in enumerate(cmds):
        s = decode(c)["sync"]
        for k in ("signal", "signal2"):
            if s[k]:
                signals.setdefault(s[f"{k}_sem"], []).append(i)
    taken: dict[int, int] = {}
    problems = []
    for i, c in enumerate(cmds):
        q, kind, _, _ = acc[i]
        bs = 0
        if last[q] is not None:
            bs |= before_start[last[q]]
        if last["exec"] is not None:
            bs |= before_start[last["exec"]]  # pushed in stream order
        if kind == "unit":
            bs |= exec_done
        elif kind == "matmul":
            bs |= unit_done
        s = decode(c)["sync"]
        if s["wait"]:
            sem = s["wait_sem"]
            k = taken.get(sem, 0)
            taken[sem] = k + 1
            sig = signals.get(sem, [])
            if k >= len(sig):
                problems.append(f"command {i} waits on semaphore {sem} with no signal left: a deadlock")
            elif sig[k] > i:
                problems.append(f"command {i} waits on semaphore {sem}, signalled only later by {sig[k]}")
            else:
                bs |= before_end[sig[k]]
        before_start[i] = bs
        be = bs | (1 << i)
        if q != "exec" and last[q] is not None:
            be |= before_end[last[q]]
        if kind in ("unit", "matmul"):
            if last_ordered is not None:
                be |= before_end[last_ordered]
            last_ordered = i
            exec_done |= be
            if kind == "unit":
                unit_done = be
        before_end[i] = be
        last[q] = i
    for sem, sig in signals.items():
        if taken.get(sem, 0) != len(sig):
            problems.append(f"semaphore {sem}: {len(sig)} signals, {taken.get(sem, 0)} waits (left non-zero)")
    for i in range(n):
        qi, _, ri, wi = acc[i]
        for j in range(i):
            qj, _, rj, wj = acc[j]
            if qi == qj:
                continue
            clash = any(_ov(a, b) for a in wj for b in ri + wi) or any(_ov(a, b) for a in rj for b in wi)
            if clash and not (before_start[i] >> j) & 1:
                problems.append(f"race: command {j} ({qj}) and {i} ({qi}) touch the same words unordered")
    return problems


def _ov(a, b) -> bool:
    return a[0] == b[0] and a[1] < b[2] and b[1] < a[2]


def _compiled(name: str, params: dict, config=CHIP, constraints=None):
    spec = registry()[name]
    p = spec.resolve(params)
    return spec.compile(p, config, BoardConfig().resolve(config), constraints)


CASES = [("gemm", {"m": 12, "n": 8, "k": 9, "kc": 4}), ("gemm", {"m": 32, "n": 24, "k": 24, "ga": 4, "gb": 2, "kc": 8}),
         ("gemm", {"m": 21, "n": 19, "k": 17, "ga": 3, "gb": 2, "kc": 8}),
         ("gemm", {"m": 21, "n": 19, "k": 17, "epilogue": "requant"}),
         ("gemm", {"m": 32, "n": 24, "k": 40, "ga": 3, "gb": 2, "kc": 8, "epilogue": "relu"}),
         ("flash_attention", {"seq": 9, "dim": 8, "causal": True}),
         ("flash_attention", {"seq": 13, "dim": 8, "nq": 2, "tk": 8}),
         ("softmax", {"rows": 7, "cols": 13}), ("softmax", {"rows": 9, "cols": 100, "tile_rows": 2}),
         ("layernorm", {"rows": 5, "cols": 13}), ("rmsnorm", {"rows": 6, "cols": 16, "tile_rows": 1}),
         ("gelu", {"rows": 5, "cols": 9}), ("silu", {"rows": 12, "cols": 9, "tile_rows": 3}),
         ("elementwise", {"rows": 9, "cols": 13, "op": "fmul", "broadcast": "row"}),
         ("elementwise", {"rows": 9, "cols": 13, "op": "iadd", "broadcast": "col", "tile_rows": 2}),
         ("elementwise", {"rows": 7, "cols": 5, "op": "expsub"}),
         ("gemm_fp", {"m": 21, "n": 19, "k": 70, "recipe": "mxfp8-e4m3-rceil", "ga": 3, "gb": 2, "kc": 32}),
         ("gemm_fp", {"m": 12, "n": 8, "k": 100, "recipe": "fp8-e5m2-tensor"}),
         ("gemm_fp", {"m": 32, "n": 24, "k": 128, "recipe": "mxfp4-e2m1-floor", "ga": 4, "gb": 2, "kc": 64})]


# an int8 matmul(by="b") with more A panels than B panels: FL-ME-002's panel order (errata.panel_order)
PANEL_CASES = [("flash_attention", {"seq": 40, "dim": 32, "nq": 2, "tk": 8}),
               ("flash_attention", {"seq": 40, "dim": 32, "nq": 2, "tk": 16, "recipe": "fp8-e4m3"})]

ERRATA_ON = GemmConstraints(b_reserved_top_words=1, avoid_unit_chunk=True, repeat_first_a_word=True)


@pytest.mark.parametrize("constraints", [None, ERRATA_ON], ids=["no-errata", "A0-passes"])
@pytest.mark.parametrize("name,params", CASES, ids=[f"{n}-" + "x".join(str(v) for v in p.values()) for n, p in CASES])
def test_compiled_streams_are_race_free_and_need_every_wait(name, params, constraints):
    c = _compiled(name, params, constraints=constraints)
    wb = 4 * CHIP.lanes
    stale = constraints is not None and constraints.repeat_first_a_word
    assert races(c.commands, wb, stale) == [], c.dump()
    assert c.waits >= 2  # a pipeline always orders its loads before the work and the work before its stores
    for i, cmd in enumerate(c.commands):
        s = decode(cmd)["sync"]
        if not s["wait"]:
            continue
        sem = s["wait_sem"]
        k = sum(1 for x in c.commands[:i] if decode(x)["sync"]["wait"] and decode(x)["sync"]["wait_sem"] == sem)
        sig = [j for j, x in enumerate(c.commands) for key in ("signal", "signal2")
               if decode(x)["sync"][key] and decode(x)["sync"][f"{key}_sem"] == sem]
        cut = list(c.commands)
        cut[i] = _without(cut[i], wait=True)
        cut[sig[k]] = _without(cut[sig[k]], sem=sem)
        assert any(p.startswith("race") for p in races(cut, wb, stale)), \
            f"the wait of command {i} on semaphore {sem} is redundant:\n{c.dump()}"


def stale_reads(cmds: list[int], word_bytes: int) -> list[str]:
    """FL-ME-002 checked from the stream alone: a MATMUL issued right after another (no VEC,
    REDUCE or FENCE between them) reads its first A word at the previous one's base + K, so that
    word must hold what the MATMUL's own first word holds: the same DRAM word, by the A loads so far
    (each DMA_LOAD's rows and strides). A spacer (B at word 0: FL-ME-002's zero B words) adds 0
    whatever it reads."""
    src: dict[int, int] = {}  # A word -> the DRAM address it was loaded from
    stride = 0
    prev = None
    problems = []
    for i, d in enumerate(_dram_strides(cmds)):
        op = d["opcode"]
        if op == Opcode.DMA_STRIDE and d["flags"]["queue"] == 0:
            stride = d["arg0"]
        elif op == Opcode.DMA_LOAD and d["flags"]["region"] == Region.A:
            rows = max(1, d["arg1"])
            for r in range(rows):
                for w in range(d["length"]):
                    src[d["arg0"] + r * (stride if rows > 1 else 0) + w] = \
                        d["dram"] + r * d["dram_stride"] + w * word_bytes
        elif op == Opcode.MATMUL:
            a, k, b = d["arg0"], d["length"], d["arg1"]
            if prev is not None and b != 0:
                stale = prev[0] + prev[1]
                if src.get(stale) != src.get(a) or a not in src:
                    problems.append(f"command {i}: MATMUL at A {a} right after one at {prev[0]} (K {prev[1]}) reads "
                                    f"its first word at {stale}: DRAM {src.get(stale)} instead of {src.get(a)}")
            prev = (a, k)
        elif op in (Opcode.VEC, Opcode.REDUCE, Opcode.FENCE):
            prev = None
    return problems


def _dram_strides(cmds: list[int]) -> list[dict]:
    """Each command decoded, a load with the DRAM row stride of the load queue's last DMA_STRIDE."""
    out, dram_stride = [], 0
    for c in cmds:
        d = decode(c)
        if d["opcode"] == Opcode.DMA_STRIDE and d["flags"]["queue"] == 0:
            dram_stride = d["dram_stride"]
        if d["opcode"] == Opcode.DMA_LOAD:
            d["dram_stride"] = dram_stride
        out.append(d)
    return out


@pytest.mark.parametrize("name,params", CASES + PANEL_CASES,
                         ids=[f"{n}-" + "x".join(str(v) for v in p.values()) for n, p in CASES + PANEL_CASES])
def test_every_back_to_back_matmul_reads_the_right_stale_word_with_fl_me_002s_passes(name, params):
    c = _compiled(name, params, constraints=ERRATA_ON)
    assert stale_reads(c.commands, 4 * CHIP.lanes) == [], c.dump()


def test_a_matmul_with_more_a_panels_than_b_panels_goes_panel_after_panel_with_a_spacer_per_b_panel():
    """Attention's O^T = V^T P^T on A0: V^T's 8 panels packed (no copy words: K apart), each P^T
    panel's 8 MATMULs in a row with no spacer between them, one spacer before each but the first;
    the checker above sees the stale reads go wrong once those spacers are taken out."""
    name, params = PANEL_CASES[0]
    c = _compiled(name, params, constraints=ERRATA_ON)
    ds = [decode(x) for x in c.commands]
    mm = [(i, d) for i, d in enumerate(ds) if d["opcode"] == Opcode.MATMUL]
    # the V^T MATMULs: K = the key tile (8), A bases K apart
    pv = [(i, d) for i, d in mm if d["length"] == 8 and d["arg1"] != 0]
    runs, cur = [], []
    for (i, d), nxt in zip(pv, pv[1:] + [(None, None)]):
        cur.append(d)
        if nxt[0] is None or nxt[0] != i + 1 or nxt[1]["arg0"] != d["arg0"] + 8:
            runs.append(cur)
            cur = []
    assert max(len(r) for r in runs) == 8, [len(r) for r in runs]  # a whole V^T tile, panel after panel
    spacers = [i for i, d in mm if d["arg1"] == 0]
    assert spacers and c.errata_insertions == len(spacers)
    cut = [x for i, x in enumerate(c.commands) if i not in set(spacers)]
    assert stale_reads(cut, 4 * CHIP.lanes), "without its spacers the stream must read stale A words"


def _without(cmd: int, wait: bool = False, sem: int | None = None) -> int:
    s = decode(cmd)["sync"]
    w = None if wait or not s["wait"] else s["wait_sem"]
    sig = [s[f"{k}_sem"] for k in ("signal", "signal2") if s[k] and s[f"{k}_sem"] != sem]
    return with_sync(cmd, wait=w, signal=sig[0] if sig else None, signal2=sig[1] if len(sig) > 1 else None)


def test_the_checker_catches_a_missing_wait():
    """Seen failing: the first wait of a compiled softmax dropped alone is a race and a count left over."""
    c = _compiled("softmax", {"rows": 4, "cols": 8, "tile_rows": 1})
    i = next(i for i, x in enumerate(c.commands) if decode(x)["sync"]["wait"])
    cut = list(c.commands)
    cut[i] = _without(cut[i], wait=True)
    found = races(cut, 4 * CHIP.lanes)
    assert any(p.startswith("race") for p in found) and any("left non-zero" in p for p in found)


def test_pipeline_overlaps_the_next_load_with_this_tiles_work():
    """stages=2: the second tile's load is queued before the first tile's first command, and its
    words differ from the first tile's; stages=1 keeps them in program order."""
    c = _compiled("softmax", {"rows": 8, "cols": 16, "tile_rows": 2})
    ops = [decode(x)["opcode"] for x in c.commands]
    first_unit = next(i for i, o in enumerate(ops) if o in (Opcode.REDUCE, Opcode.VEC))
    loads = [i for i, o in enumerate(ops) if o == Opcode.DMA_LOAD]
    assert loads[1] < first_unit
    a0, a1 = (decode(c.commands[i])["arg0"] for i in loads[:2])
    assert a0 != a1


def test_every_kernel_compiles_at_its_bench_shape_with_lines():
    for spec in registry().values():
        for shape in spec.bench:
            c = spec.compile(spec.resolve(shape), CHIP, BOARD)
            dump = c.dump()
            # each command names the kernel source line that made it (a loop the GEMM kernels share,
            # kernels/tiled/gemm.py chains, names its own lines)
            assert all(re.search(r"kernels/tiled/\w+\.py:\d+", line)
                       for line in dump.splitlines() if not line.startswith("#")), dump[:2000]
            assert f"kernels/tiled/{spec.module.rsplit('.', 1)[1]}.py:" in dump


@pytest.mark.parametrize("constraints", [None, ERRATA_ON], ids=["B1", "A0"])
@pytest.mark.parametrize("stages", [1, 2])
def test_the_benchs_gemm_shapes_compile_single_and_double_buffered(stages, constraints):
    """firstlight bench runs each GEMM shape with --stages 2 and 1; single buffering must fit what
    its planner chose (64^3 was refused: the tail interleave held two A tiles in one buffer's room)."""
    from firstlight.cli.bench import DEFAULT_SHAPES

    spec = registry()["gemm"]
    for shape in DEFAULT_SHAPES:
        m, n, k = map(int, shape.split("x"))
        c = spec.compile(spec.resolve({"m": m, "n": n, "k": k, "stages": stages}), CHIP, BOARD, constraints)
        assert c.kernel_args.get("stages", 2) == stages, (shape, c.kernel_args)


def test_a_working_set_that_does_not_fit_names_the_tile_and_what_to_change():
    with pytest.raises(tile.TileError, match=r"kernels/tiled/softmax.py:\d+: the tile x1 needs 50 words of ACC, "
                                             r"but only 14 contiguous words are left of 64 \(live: x0 50 .*\); "
                                             r"use fewer rows per tile or fewer pipeline stages"):
        _compiled("softmax", {"rows": 8, "cols": 100, "tile_rows": 2}, SMALL)


def _toy_module(tmp_path, monkeypatch, body: str, name: str = "toy_tile_kernel"):
    source_module(tmp_path, monkeypatch, name, body, register=True)


TOY = '''
    from kernels import tile
    from kernels.tile.runtime import TensorSpec
    from kernels.tile.spec import KernelSpec, Param
    import numpy as np
    from golden.vector import floats, row_words, vector_op


    def double(x, out, *, rows):
        for r in tile.pipeline(range(0, x.rows, rows), stages=2):
            t = tile.load(x[r:r + rows])
            tile.store(out[r:r + rows], t + t)


    def golden(ins, p, lanes):
        w = row_words(ins["x"], lanes, 0)
        return {"out": floats(vector_op("fadd", w, w).reshape(len(ins["x"]), -1)[:, :p["cols"]]).copy()}


    SPECS = [KernelSpec(
        name="toydouble", summary="x + x", source=double,
        params=(Param("rows", int, 4, "rows", 1, 64, shape=True), Param("cols", int, 8, "cols", 1, 64, shape=True),
                Param("tile_rows", int, 2, "rows per tile", 1, 64)),
        tensors=lambda p: [TensorSpec("x", p["rows"], p["cols"]), TensorSpec("out", p["rows"], p["cols"], role="out")],
        inputs=lambda p, seed, ext: {"x": np.random.default_rng(seed).standard_normal((p["rows"], p["cols"])).astype(np.float32)},
        golden=golden, kernel_args=lambda p, cfg: {"rows": p["tile_rows"]}, bench=({"rows": 8, "cols": 16},))]
'''


def test_a_kernel_declared_in_a_new_module_reaches_every_generated_surface(tmp_path, monkeypatch, capsys):
    _toy_module(tmp_path, monkeypatch, TOY)
    reg = registry()
    assert "toydouble" in reg and reg["toydouble"].module == "toy_tile_kernel"
    from firstlight.cli import main as cli_main

    assert cli_main(["run", "toydouble", "--help"]) == 0
    assert "rows per tile" in capsys.readouterr().out
    assert cli_main(["run", "toydouble", "--rows", "6", "--cols", "5", "--dump"]) == 0
    out = capsys.readouterr().out
    assert "toy_tile_kernel.py:" in out and "VEC FADD" in out
    # the sweep's workload kinds read the same registry, its parameters checked by the declaration
    from firstlight.sweep.spec import SpecError, parse_spec, workload_kinds

    assert "toydouble" in workload_kinds()
    spec = parse_spec({"name": "t", "grid": {"array": "4x4"}, "workload": [{"kind": "toydouble", "rows": 4, "cols": 8}]})
    assert spec.workloads[0].p["tile_rows"] == 2
    with pytest.raises(SpecError, match="tile_rows must be in"):
        parse_spec({"name": "t", "grid": {"array": "4x4"},
                    "workload": [{"kind": "toydouble", "rows": 4, "cols": 8, "tile_rows": 0}]})


def test_errors_name_the_kernel_line(tmp_path, monkeypatch):
    _toy_module(tmp_path, monkeypatch, '''
        from kernels import tile

        def bad_store(x, out):
            t = tile.load(x[0:2])
            tile.store(x[0:2], t)

        def bad_broadcast(x, out):
            t = tile.load(x[0:2])
            u = tile.load(x[0:3])
            tile.store(out[0:2], t * tile.row_sum(u))

        def bad_in_place(x, out):
            t = tile.load(x[0:2])
            m = tile.mask_tail(t, x.cols)
            tile.store(out[0:2], m + t)
    ''', name="bad_tile_kernels")
    import bad_tile_kernels as m

    ts = [tile.TensorSpec("x", 4, 6), tile.TensorSpec("out", 4, 6, role="out")]
    for fn, msg in ((m.bad_store, r"bad_tile_kernels.py:6: x is an input of the kernel"),
                    (m.bad_broadcast, r"bad_tile_kernels.py:11: cannot broadcast fmul"),
                    (m.bad_in_place, r"bad_tile_kernels.py:15: mask_tail overwrites x\d in place, but .*"
                                     r"bad_tile_kernels.py:16 reads it afterwards")):
        with pytest.raises(tile.TileError, match=msg):
            tile.build(fn.__name__, fn, CHIP, ts, {}, dram_bytes=1 << 22, bus_bytes=4)


def test_a_chip_without_the_vector_unit_is_refused_before_anything_runs():
    spec = registry()["softmax"]
    why = spec.refusal(ChipConfig(vector=False))
    assert why and "vector unit" in why


def test_parameters_are_checked_with_what_is_accepted():
    spec = registry()["layernorm"]
    with pytest.raises(ValueError, match=r"eps must be in \[0.0, 1.0\], not -1"):
        spec.resolve({"rows": 2, "cols": 3, "eps": -1})
    with pytest.raises(ValueError, match="has no parameter colz"):
        spec.resolve({"colz": 3})
    assert np.isclose(spec.resolve({"rows": 2, "cols": 3})["eps"], 1e-5)
