"""Verilog generation and simulator builds, cached by content hash and built once per variant.

Two cache levels under one folder (``$FIRSTLIGHT_CACHE`` or ``~/.cache/firstlight``):

* ``verilog/<key>/fl_chip.v`` -- key: the variant (config, revision, injected faults), the
  text of every file under ``rtl/`` (the RTL and the spec it is elaborated from: ``rtl`` imports
  nothing outside itself, a test holds it to that) and the Amaranth version. A hit skips
  elaboration.
* ``sim/<sim>-<key>/`` -- key: the Verilog text, the testbench wrapper, the Verilator control
  file, the simulator and its version, cocotb's version, the clock mode and the build flags. A
  hit skips compilation.

A file lock per key makes concurrent builders (``pytest -n 2``) build each variant once; a
``.complete`` marker written last means an interrupted build is never reused.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from filelock import FileLock

from rtl.config import ChipConfig

from .toolchain import SimInfo, find_simulator

__all__ = ["Variant", "Build", "cache_root", "generate_verilog", "build_simulator", "verilog_key", "rtl_source_digest",
           "TB_TOPLEVEL"]

_log = logging.getLogger("firstlight.build")
TB_TOPLEVEL = "fl_tb"
CHIP_MODULE = "fl_chip"
_HDL_DIR = Path(__file__).resolve().parent / "hdl"
_RTL_DIR = Path(__file__).resolve().parent.parent / "rtl"

# Verilator: keep lint warnings visible in the build log but not fatal (Amaranth's Verilog has
# width-mismatch patterns Verilator flags); --timing for the HDL clock in the wrapper.
VERILATOR_ARGS = ("-Wno-fatal", "-Wno-WIDTHEXPAND", "-Wno-WIDTHTRUNC", "-Wno-UNOPTFLAT", "--timing")
# Icarus: Yosys' Verilog kicks every `always @*` block at time 0 through a `reg x = 0;`
# declaration, which is an event in Verilog-2005 but not in SystemVerilog. cocotb compiles with
# -g2012, so combinational outputs such as csr_ready stayed X after reset (the bring-up reset
# stage caught it). The generated code is Verilog-2005: compile it as such (the later flag wins).
ICARUS_ARGS = ("-g2005",)


def cache_root() -> Path:
    root = os.environ.get("FIRSTLIGHT_CACHE")
    if root:
        return Path(root).expanduser().resolve()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "firstlight"


@dataclass(frozen=True)
class Variant:
    """One hardware variant: everything that changes the generated RTL."""

    config: ChipConfig = field(default_factory=ChipConfig)
    revision: str = "A0"
    faults: tuple[str, ...] = ()

    def describe(self) -> dict:
        return {"config": self.config.as_dict(), "revision": self.revision, "faults": list(self.faults)}


@dataclass
class Build:
    variant: Variant
    sim: str
    clock: str
    build_dir: Path
    verilog: Path
    cache_hit: bool
    build_s: float  # this call: a cache lookup when cache_hit
    elaborate_s: float
    verilog_cache_hit: bool
    first_build_s: float | None = None  # recorded when the cached build was made


def _sha(*parts: bytes | str) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(p.encode() if isinstance(p, str) else p)
        h.update(b"\0")
    return h.hexdigest()[:20]


def rtl_source_digest(rtl_dir: Path | None = None) -> str:
    """Hash of every source file the chip is elaborated from (all of ``rtl/``, recursively)."""
    root = rtl_dir or _RTL_DIR
    parts = []
    for path in sorted(p for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
        parts.append(str(path.relative_to(root)))
        parts.append(path.read_bytes())
    return _sha(*parts)


def verilog_key(variant: Variant, rtl_dir: Path | None = None) -> str:
    """The Verilog cache key of a variant: what it is, what it is elaborated from, and by what."""
    import amaranth

    return _sha(json.dumps(variant.describe(), sort_keys=True), rtl_source_digest(rtl_dir), amaranth.__version__)


def elaborate(variant: Variant):
    """Build the Amaranth top for a variant (the one place that knows how)."""
    from rtl.chip import Chip

    return Chip(variant.config, revision=variant.revision, faults=variant.faults)


def generate_verilog(variant: Variant) -> tuple[Path, bool, float]:
    """Return (path to fl_chip.v, cache hit?, seconds spent elaborating)."""
    key = verilog_key(variant)
    out_dir = cache_root() / "verilog" / key
    out = out_dir / f"{CHIP_MODULE}.v"
    if out.exists():
        return out, True, 0.0
    out_dir.mkdir(parents=True, exist_ok=True)
    with FileLock(str(out_dir) + ".lock"):
        if out.exists():
            return out, True, 0.0
        from amaranth.back import verilog

        t0 = time.perf_counter()
        text = verilog.convert(elaborate(variant), name=CHIP_MODULE, emit_src=False)
        tmp = out.with_suffix(".tmp")
        tmp.write_text(text)
        tmp.replace(out)
        return out, False, time.perf_counter() - t0


def control_file_text() -> str:
    """Verilator control file: expose to VPI only what the testbench touches (instead of
    --public-flat-rw): the wrapper's signals and every SRAM the backdoor opens."""
    from rtl.memories import MEMORIES

    lines = ["`verilator_config"]
    for mem in MEMORIES:
        lines.append(f'public_flat_rw -module "{CHIP_MODULE}" -var "{mem.backdoor}"')
    lines.append(f'public_flat_rw -module "{TB_TOPLEVEL}" -var "*"')
    return "\n".join(lines) + "\n"


def _runner(sim: SimInfo):
    from cocotb_tools.runner import Verilator, get_runner

    if sim.name != "verilator":
        return get_runner(sim.name)

    class NarrowVerilator(Verilator):
        """cocotb's Verilator runner minus --public-flat-rw (up to ~10x slower models)."""

        def _build_command(self):
            cmds = super()._build_command()
            cmds[0] = [c for c in cmds[0] if c != "--public-flat-rw"]
            return cmds

    return NarrowVerilator()


def build_simulator(variant: Variant, sim: str = "verilator", clock: str = "hdl", waves: bool = False) -> Build:
    """Generate Verilog and compile it for ``sim``; reuse the cached build when inputs match."""
    import cocotb

    if clock not in ("hdl", "gpi"):
        raise ValueError(f"clock must be 'hdl' or 'gpi', not {clock!r}")
    info = find_simulator(sim)
    info.apply_env()
    verilog_path, v_hit, elab_s = generate_verilog(variant)
    tb = (_HDL_DIR / "fl_tb.v").read_bytes()
    args = list(VERILATOR_ARGS) if sim == "verilator" else list(ICARUS_ARGS)
    control = control_file_text() if sim == "verilator" else ""
    key = _sha(verilog_path.read_bytes(), tb, control, sim, info.version, cocotb.__version__, clock, json.dumps(args),
               str(waves), json.dumps(info.env, sort_keys=True))
    build_dir = cache_root() / "sim" / f"{sim}-{key}"
    marker = build_dir / ".complete"
    t0 = time.perf_counter()
    hit = marker.exists()
    if not hit:
        build_dir.mkdir(parents=True, exist_ok=True)
        with FileLock(str(build_dir) + ".lock"):
            hit = marker.exists()
            if not hit:
                cfg = variant.config
                _log.info("compiling the %s model (%dx%d, revision %s, formats %s%s): first time for this "
                          "variant, cached afterwards in %s", sim, cfg.rows, cfg.cols, variant.revision,
                          "/".join(cfg.formats), f", faults {list(variant.faults)}" if variant.faults else "",
                          build_dir)
                sources: list = [verilog_path, _HDL_DIR / "fl_tb.v"]
                if sim == "verilator":
                    vlt = build_dir / "public.vlt"
                    vlt.write_text(control)
                    sources.insert(0, vlt)
                runner = _runner(info)
                runner.build(
                    sources=sources,
                    hdl_toplevel=TB_TOPLEVEL,
                    build_dir=build_dir,
                    build_args=args,
                    defines={**({"FL_GPI_CLOCK": 1} if clock == "gpi" else {}),
                             **({"FL_DUMP": 1} if waves and sim == "icarus" else {})},
                    timescale=("1ns", "1ps"),
                    waves=waves and sim == "verilator",
                    log_file=build_dir / "build.log",
                    always=True,
                )
                marker.write_text(json.dumps({"variant": variant.describe(), "sim": sim, "clock": clock,
                                              "build_s": time.perf_counter() - t0}))
    try:
        first = json.loads(marker.read_text()).get("build_s")
    except (OSError, ValueError):
        first = None
    return Build(variant, sim, clock, build_dir, verilog_path, hit, time.perf_counter() - t0, elab_s, v_hit, first)
