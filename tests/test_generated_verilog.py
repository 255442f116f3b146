"""The Verilog the build writes from the Amaranth chip: what it changes in Yosys's output still
means what Amaranth said (checked on Icarus, which leaves an uninitialised word X where Verilator
would show a zero)."""
from __future__ import annotations

import subprocess

import pytest

from amaranth import Elaboratable, Module, Signal
from amaranth.back import verilog
from amaranth.lib.memory import Memory

from conftest import require_sim

ZERO_DEPTH, ZERO_WIDTH = 40, 72
SET_INIT = [5, 0, 7, 0]


class TwoMemories(Elaboratable):
    """A memory that starts all zero and one that does not, each read combinationally."""

    def __init__(self):
        self.addr = Signal(range(ZERO_DEPTH))
        self.zero_data = Signal(ZERO_WIDTH)
        self.set_data = Signal(8)

    def elaborate(self, platform):
        m = Module()
        m.submodules.zeros = zeros = Memory(shape=ZERO_WIDTH, depth=ZERO_DEPTH, init=[])
        m.submodules.set = kept = Memory(shape=8, depth=len(SET_INIT), init=SET_INIT)
        rz, rs = zeros.read_port(domain="comb"), kept.read_port(domain="comb")
        w = zeros.write_port()  # a written memory, as the chip's SRAMs are (else Yosys folds it away)
        m.d.comb += [rz.addr.eq(self.addr), self.zero_data.eq(rz.data),
                     rs.addr.eq(self.addr[:2]), self.set_data.eq(rs.data),
                     w.addr.eq(self.addr), w.data.eq(0), w.en.eq(0)]
        return m


TB = f"""
module tb;
  reg clk = 0;
  reg [5:0] addr;
  wire [{ZERO_WIDTH - 1}:0] zero_data;
  wire [7:0] set_data;
  top dut(.clk(clk), .rst(1'b0), .addr(addr), .zero_data(zero_data), .set_data(set_data));
  integer a;
  initial begin
    #1;
    for (a = 0; a < {ZERO_DEPTH}; a = a + 1) begin
      addr = a; #1; $display("%0d %h %h", a, zero_data, set_data);
    end
    $finish;
  end
endmodule
"""


def _converted() -> str:
    d = TwoMemories()
    return verilog.convert(d, name="top", ports=[d.addr, d.zero_data, d.set_data], emit_src=False)


def test_an_all_zero_memory_is_initialised_by_one_loop_and_others_are_left_alone():
    from cosim.build import _looped_zero_inits

    text = _converted()
    out = _looped_zero_inits(text)
    word = f"] = {ZERO_WIDTH}'h{'0' * (ZERO_WIDTH // 4)};"
    assert text.count(word) == ZERO_DEPTH, text  # as Yosys writes it: a statement per word
    assert out.count(word) == 0, out
    assert out.count("initial for (fl_meminit_1 = 0; fl_meminit_1 < 40;") == 1, out
    assert "fl_meminit_2" not in out, "the memory with non-zero words was rewritten"
    assert "'h05;" in out or "'d5;" in out, "the memory with non-zero words lost them"
    assert len(out) < len(text)


def test_the_looped_memory_reads_zero_on_icarus(tmp_path):
    """Every word of the looped memory reads 0 (not X), the other memory its own words."""
    require_sim("icarus")
    from cosim.build import _looped_zero_inits

    (tmp_path / "top.v").write_text(_looped_zero_inits(_converted()))
    (tmp_path / "tb.v").write_text(TB)
    subprocess.run(["iverilog", "-o", "sim.vvp", "-s", "tb", "top.v", "tb.v"], cwd=tmp_path, check=True,
                   capture_output=True, text=True)
    run = subprocess.run(["vvp", "-n", "sim.vvp"], cwd=tmp_path, check=True, capture_output=True, text=True)
    rows = [ln.split() for ln in run.stdout.splitlines() if ln and ln[0].isdigit()]
    assert len(rows) == ZERO_DEPTH, run.stdout
    for a, zero, kept in rows:
        assert int(zero, 16) == 0 and "x" not in zero.lower(), (a, zero)
        assert int(kept, 16) == SET_INIT[int(a) % len(SET_INIT)], (a, kept)


# Two hash seeds under which a set of the names "sync" and "fp" iterates in opposite orders.
OPPOSITE_SEEDS = ("1", "2")

GENERATE = """
import sys
from cosim.build import Variant, generate_verilog
from rtl.config import ChipConfig
config = ChipConfig(rows=2, cols=2, operand_depth=64, acc_depth=64, cmdq_depth=64, vector=False)
path, _, _ = generate_verilog(Variant(config=config, revision="B1"))
sys.stdout.write(str(path))
"""


def test_the_verilog_is_the_same_whatever_the_hash_seed(tmp_path):
    """The simulator build is cached by the Verilog's hash: Verilog that depends on a process's
    string-hash seed (Python's set order) would rebuild a chip that did not change. The FP chip's
    PE, converted alone with a clock domain per path, once listed its clock ports in set order."""
    import os
    import sys

    orders = {seed: subprocess.run([sys.executable, "-c", "print(list({'sync', 'fp'}))"], check=True, text=True,
                                   capture_output=True, env={**os.environ, "PYTHONHASHSEED": seed}).stdout
              for seed in OPPOSITE_SEEDS}
    assert len(set(orders.values())) == 2, f"these seeds no longer give opposite set orders: {orders}"
    texts = []
    for seed in OPPOSITE_SEEDS:
        env = {**os.environ, "PYTHONHASHSEED": seed, "FIRSTLIGHT_CACHE": str(tmp_path / f"seed{seed}")}
        run = subprocess.run([sys.executable, "-c", GENERATE], env=env, check=True, text=True, capture_output=True)
        texts.append(open(run.stdout.strip()).read())
    assert "module fl_pe(" in texts[0] and "fp_clk" in texts[0], "the chip no longer has a PE module with an FP clock"
    if texts[0] != texts[1]:
        diff = [(a, b) for a, b in zip(texts[0].splitlines(), texts[1].splitlines()) if a != b]
        raise AssertionError(f"the Verilog differs between hash seeds {OPPOSITE_SEEDS}: {diff[:3]}")


def test_an_escaped_memory_name_is_looped_and_a_partial_or_offset_one_is_not():
    from cosim.build import _looped_zero_inits

    escaped = ("  reg [7:0] \\mem$1  [2:0];\n  initial begin\n"
               + "".join(f"    \\mem$1 [{i}] = 8'h00;\n" for i in range(3)) + "  end\n")
    assert _looped_zero_inits(escaped) == ("  reg [7:0] \\mem$1  [2:0];\n  integer fl_meminit_1;\n"
                                           "  initial for (fl_meminit_1 = 0; fl_meminit_1 < 3; fl_meminit_1 = "
                                           "fl_meminit_1 + 1) \\mem$1 [fl_meminit_1] = 8'h0;\n")
    short = escaped.replace("    \\mem$1 [2] = 8'h00;\n", "")  # a word left out: not every word is set
    assert _looped_zero_inits(short) == short
    offset = escaped.replace("[2:0];", "[3:1];")  # words 1..3, written as 0..2: not this form
    assert _looped_zero_inits(offset) == offset


def test_the_pe_module_ports_are_directed_as_its_signature_and_its_clocks_are_inputs():
    """The PE converted alone (the FP chip's, with the gated FP clock): every member an input or
    output as its signature says, then clk, rst, fp_clk, fp_rst as inputs, in that order."""
    import re

    from amaranth.lib.wiring import In

    from cosim.build import _module_verilog
    from rtl.config import ChipConfig
    from rtl.pe import ProcessingElement

    pe = ProcessingElement(ChipConfig(), fp_domain="fp")
    text = _module_verilog(pe, "fl_pe")
    declared = dict((name, kind) for kind, name in re.findall(r"^\s*(input|output)\s+(?:\[[^]]*\]\s*)?(\S+);", text, re.M))
    for path, member, _value in pe.signature.flatten(pe):
        name = "__".join(map(str, path))
        assert declared.get(name) == ("input" if member.flow == In else "output"), (name, declared.get(name))
    header = re.search(r"^module fl_pe\((.*?)\);", text, re.M | re.S).group(1)
    clocks = [p.strip() for p in header.split(",") if p.strip() in ("clk", "rst", "fp_clk", "fp_rst")]
    assert clocks == ["clk", "rst", "fp_clk", "fp_rst"], header
    assert all(declared[c] == "input" for c in clocks), declared


def test_a_clock_domain_the_design_uses_but_does_not_list_is_an_error():
    from cosim.build import _module_verilog
    from rtl.config import ChipConfig
    from rtl.pe import ProcessingElement

    class Forgetful(ProcessingElement):
        clock_domains = ("sync",)  # the FP pipes run on "fp" too

    with pytest.raises(Exception, match="Domain 'fp' is used but not defined"):
        _module_verilog(Forgetful(ChipConfig(), fp_domain="fp"), "fl_pe")


SMALL = dict(rows=2, cols=2, operand_depth=64, acc_depth=64, cmdq_depth=64, vector=True)


def test_the_verilog_made_beside_is_the_verilog_made_in_one_process(tmp_path, monkeypatch):
    """generate_verilog converts the chip here and its PE, lane and DRAM in a second process: the
    file is byte for byte what one process converting all of it in turn writes."""
    from cosim.build import (CHIP_MODULE, DRAM_MODULE, Variant, _inlined, _looped_zero_inits, _module_verilog,
                             elaborate, elaborate_dram, generate_verilog)
    from rtl.config import ChipConfig
    from rtl.dram_array import array_verilog

    monkeypatch.setenv("FIRSTLIGHT_CACHE", str(tmp_path / "cache"))
    variant = Variant(config=ChipConfig(**SMALL), revision="B1")
    path, hit, _ = generate_verilog(variant)
    assert not hit
    # one process, in turn: the chip, then the modules this very chip instances, then the DRAM
    chip = elaborate(variant)
    alone = verilog.convert(chip, name=CHIP_MODULE, emit_src=False)
    alone += "".join(_inlined(_module_verilog(design, mod), mod) for mod, design in chip.instanced_modules().items())
    alone += verilog.convert(elaborate_dram(variant), name=DRAM_MODULE, emit_src=False) + array_verilog()
    alone = _looped_zero_inits(alone)
    assert "module fl_pe(" in alone and "module fl_vec_lane(" in alone and "module fl_dram(" in alone
    assert path.read_text() == alone
    assert sorted(p.name for p in path.parent.iterdir()) == ["fl_chip.v", "manifest.json"]  # no leftovers


def test_a_failure_in_the_second_process_is_a_build_error_with_its_log(tmp_path):
    from cosim.build import BuildFailed, ConvertBeside, Variant

    beside = ConvertBeside(Variant(revision="Z9"), tmp_path)  # no such revision: the child's elaborate raises
    with pytest.raises(BuildFailed) as e:
        beside.result("whatever")
    msg = str(e.value)
    assert "second process" in msg and "exited with code 1" in msg and str(tmp_path / "beside.log") in msg, msg
    assert "Z9" in msg, msg  # the child's own error, from its log


def test_verilog_made_under_another_key_is_refused(tmp_path):
    from cosim.build import BuildFailed, ConvertBeside, Variant
    from rtl.config import ChipConfig

    beside = ConvertBeside(Variant(config=ChipConfig(**SMALL), revision="B1"), tmp_path)
    with pytest.raises(BuildFailed, match="made them under another Verilog key"):
        beside.result("0" * 20)  # not the key of the sources the second process loaded


def test_an_interrupted_conversion_stops_the_second_process_and_leaves_no_files(tmp_path, monkeypatch):
    """Ctrl-C while this process converts the chip: the second process is stopped, not left to
    run, and its files are gone from the cache folder."""
    import amaranth.back.verilog as amaranth_verilog

    from cosim.build import Variant, generate_verilog, running_children
    from rtl.config import ChipConfig

    monkeypatch.setenv("FIRSTLIGHT_CACHE", str(tmp_path / "cache"))
    started = []

    def interrupted(*args, **kwargs):
        started.extend(running_children())
        raise KeyboardInterrupt

    monkeypatch.setattr(amaranth_verilog, "convert", interrupted)  # this process's only
    with pytest.raises(KeyboardInterrupt):
        generate_verilog(Variant(config=ChipConfig(**SMALL), revision="B1"))
    assert started, "no second process was running while the chip was converted"
    assert not set(started) & set(running_children())
    left = [p.name for p in (tmp_path / "cache" / "verilog").rglob("beside*")]
    assert left == [], left


def test_a_cancelled_second_process_is_stopped_and_forgotten(tmp_path):
    from cosim.build import ConvertBeside, Variant, running_children

    beside = ConvertBeside(Variant(revision="B1"), tmp_path)
    pid = beside._proc.pid
    assert pid in running_children()
    beside.cancel()
    assert beside._proc.returncode is not None and beside._proc.returncode < 0, beside._proc.returncode
    assert pid not in running_children()
