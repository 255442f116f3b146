"""The spec layer (rtl/): one declaration per chip fact, read by the RTL and the software.

Holds the declarations to their promises: the command layout packs and decodes symmetrically,
the register fields pack and unpack, the memory table agrees with the elaborated chip, and the
Verilog cache key covers every file the RTL is elaborated from.
"""

from __future__ import annotations

import ast
import shutil
from pathlib import Path

import pytest

from cosim.build import Variant, verilog_key
from rtl import isa
from rtl.config import ChipConfig
from rtl.csr_map import REG, REGISTERS, Access
from rtl.memories import MEM, MEMORIES, Region, memory

ROOT = Path(__file__).resolve().parent.parent


def test_command_constructors_pack_the_documented_bits():
    # Worked by hand from the layout: opcode [7:0], flags [15:8] (accumulate bit 8, fmt [11:9]),
    # length [31:16], arg0 [47:32], arg1 [63:48], arg2 [79:64], arg3 [95:80] (sa, sb),
    # sync [107:96] (wait 96, wait_sem [99:97], signal 100, signal_sem [103:101], signal2 104,
    # signal2_sem [107:105]), tag [127:108].
    cmd = isa.matmul(a=1, b=2, c=3, k=4, accumulate=True, fmt=isa.Format.E4M3, sa=5, sb=6, tag=7)
    assert cmd == 0x10 | (0b011 << 8) | (4 << 16) | (1 << 32) | (2 << 48) | (3 << 64) | (5 << 80) | (6 << 88) | (7 << 108)
    no_sync = {"wait": 0, "wait_sem": 0, "signal": 0, "signal_sem": 0, "signal2": 0, "signal2_sem": 0}
    assert isa.decode(cmd) == {"opcode": 0x10, "flags": {"accumulate": 1, "fmt": 1, "reserved": 0}, "length": 4,
                               "arg0": 1, "arg1": 2, "arg2": 3, "arg3": {"sa": 5, "sb": 6}, "sync": no_sync, "tag": 7}
    synced = isa.matmul(a=0, b=0, c=0, k=1, wait=3, signal=5, signal2=7)
    assert synced == 0x10 | (1 << 16) | ((1 | 3 << 1) << 96) | ((1 | 5 << 1) << 100) | ((1 | 7 << 1) << 104)
    # DMA_LOAD 0x30: flags.region [10:8], length = words, arg0 SRAM word, arg1 rows, DRAM address in arg2 | arg3 << 16
    ld = isa.dma_load(isa_region_b(), sram=9, dram=0x0003_0040, words=5, rows=2)
    assert ld == 0x30 | (1 << 8) | (5 << 16) | (9 << 32) | (2 << 48) | (0x0040 << 64) | (0x0003 << 80)
    assert isa.decode(ld)["dram"] == 0x30040
    st = isa.dma_stride(isa.DmaQueue.STORE, sram=4, dram=0x1_0000)
    assert st == 0x32 | (1 << 8) | (4 << 32) | (1 << 80)
    red = isa.reduce(isa.ReduceOp.MIN, src=9, count=10, dst=11)
    assert red == 0x20 | (2 << 8) | (10 << 16) | (9 << 32) | (11 << 64)
    assert isa.opcode_of(red) == isa.Opcode.REDUCE and isa.opcode_of(isa.fence()) == isa.Opcode.FENCE


def isa_region_b() -> int:
    return int(Region.B)


def test_command_packing_rejects_what_does_not_fit():
    with pytest.raises(ValueError, match="length=65536 does not fit in 16 bits"):
        isa.matmul(a=0, b=0, c=0, k=65536)
    with pytest.raises(ValueError, match="has no member 'acc'"):
        isa.pack_command(isa.Opcode.MATMUL, flags={"matmul": {"acc": 1}})
    with pytest.raises(ValueError, match="int8 MATMUL has no block scales"):
        isa.matmul(a=0, b=0, c=0, k=1, sa=1)
    with pytest.raises(ValueError, match="command has no field 'arg9'"):
        isa.pack_command(isa.Opcode.NOP, arg9=1)


def test_register_fields_pack_and_unpack():
    caps = ChipConfig(rows=8, cols=8, operand_depth=2048, formats=("int8", "e5m2")).caps()
    assert REG["CAPS0"].unpack(caps["CAPS0"]) == {"rows": 8, "cols": 8, "lanes": 8, "formats": 0b101, "vector": 1}
    assert ChipConfig.from_caps(caps["CAPS0"], caps["CAPS1"], caps["TRACE_DEPTH"]) == ChipConfig(
        rows=8, cols=8, operand_depth=2048, formats=("int8", "e5m2"))
    no_vu = ChipConfig(vector=False)
    assert ChipConfig.from_caps(no_vu.caps()["CAPS0"], no_vu.caps()["CAPS1"], no_vu.caps()["TRACE_DEPTH"]) == no_vu
    assert REG["MEM_ADDR"].pack(region=Region.SB, chunk=3) == (5 << 28) | 3
    with pytest.raises(ValueError, match="region=16 does not fit in 4 bits"):
        REG["MEM_ADDR"].pack(region=16)
    with pytest.raises(KeyError, match="has no field 'regoin'"):
        REG["MEM_ADDR"].pack(regoin=1)
    assert all(isinstance(r.access, Access) for r in REGISTERS)


def test_memory_table_matches_the_elaborated_chip():
    from amaranth.hdl import Fragment

    from rtl.chip import Chip

    cfg = ChipConfig(rows=2, cols=4, operand_depth=64, acc_depth=32, cmdq_depth=8, formats=("int8",))
    chip = Chip(cfg, defects=frozenset())
    frag = Fragment.get(chip, None)  # elaborate it for real: one SRAM submodule per table entry
    assert {m.instance for m in MEMORIES} <= {name for _, name, *_ in frag.subfragments}
    assert chip.region_words() == {m.region: (m.depth(cfg), m.chunks(cfg)) for m in MEMORIES}
    assert memory("acc") is MEM["ACC"] and memory(int(Region.CMDQ)) is MEM["CMDQ"]
    assert [m.region for m in MEMORIES] == [int(Region[m.name]) for m in MEMORIES]
    with pytest.raises(KeyError, match="unknown memory 'D'; memories: A, B, ACC, CMDQ, SA, SB"):
        memory("D")


def _rtl_imports() -> set[str]:
    out = set()
    for path in (ROOT / "rtl").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                out |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                out.add(node.module.split(".")[0])
    return out


def test_rtl_imports_nothing_of_the_project_outside_itself():
    """What the Verilog cache key hashes (rtl/) is all the chip is elaborated from."""
    project = {"cosim", "kernels", "golden", "workarounds", "firstlight", "tests"}
    assert not (_rtl_imports() & project), _rtl_imports() & project


def test_changing_a_spec_file_changes_the_verilog_key(tmp_path):
    copy = tmp_path / "rtl"
    shutil.copytree(ROOT / "rtl", copy, ignore=shutil.ignore_patterns("__pycache__"))
    v = Variant()
    before = verilog_key(v, copy)
    assert before == verilog_key(v, ROOT / "rtl"), "a copy of the same sources has the same key"
    spec = copy / "memories.py"
    spec.write_text(spec.read_text().replace('"operand A:', '"operand A (edited):'))
    assert verilog_key(v, copy) != before, "an edit to the memory table must invalidate cached Verilog"
    (copy / "spec_extra.py").write_text("X = 1\n")  # a new file in the RTL tree counts too
    assert verilog_key(v, copy) not in (before,)


def test_matmul_fast_path_equals_the_generic_packer():
    import itertools

    for acc, fmt, (a, b, c, k, sa, sb, tag) in itertools.product(
            (False, True), (isa.Format.INT8, isa.Format.E2M1),
            ((0, 0, 0, 1, 0, 0, 0), (65535, 1, 2, 65535, 255, 255, 0xFFFFF))):
        if fmt == isa.Format.INT8:
            sa = sb = 0
        generic = isa.pack_command(isa.Opcode.MATMUL, flags={"matmul": {"accumulate": int(acc), "fmt": int(fmt)}},
                                   length=k, arg0=a, arg1=b, arg2=c, arg3={"scales": {"sa": sa, "sb": sb}}, tag=tag)
        assert isa.matmul(a=a, b=b, c=c, k=k, accumulate=acc, fmt=fmt, sa=sa, sb=sb, tag=tag) == generic


def test_rtl_edited_under_a_running_process_is_refused(monkeypatch):
    """A process elaborates the rtl/ it imported; if the files changed since, their key would
    name Verilog of the old code (a poisoned cache entry), so the key is refused instead."""
    import cosim.build as build

    v = Variant()
    assert build.verilog_key(v) == build.verilog_key(v, ROOT / "rtl")  # unchanged: the files' own key
    monkeypatch.setattr(build, "_LOADED_DIGEST", "what rtl/ hashed to at import")
    with pytest.raises(build.BuildFailed, match="changed while this process was running"):
        build.verilog_key(v)
