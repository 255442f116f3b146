"""``python -m cosim.toolchain_setup``: compile, at setup, what a machine's first simulator build
would otherwise compile for itself (``make venv`` runs it):

* the Verilator runtime that every model of the default build links
  (:class:`cosim.build.RuntimePrebuild`): about 18 s of one core, once per machine and set of
  flags;
* Amaranth's Yosys: a WebAssembly module that wasmtime compiles to machine code on its first run
  and caches (``~/.cache/wasmtime``): about 2.5 s and 5 CPU-s, paid by the first elaboration,
  twice over when the chip and its modules are converted side by side.

Why: in a fresh clone with empty caches the build stage of ``make bringup`` took 25.3-27.5 s
with both compiled inside it, and 14.9-19.3 s with both done here (docs/simulation.md, "The
chip's modules in a second process, and the toolchain at setup"). ``make venv`` runs this while
pip installs PyTorch, which keeps about one core busy unpacking; the setup still took 4-10 s
longer there, the cost moved rather than removed.

The runtime is the one of a build with the default clock and no waveforms (what ``firstlight
run``, ``bringup`` and the tests build first); another clock or a waveform build compiles its own
on its first build, as before. Exit status 0 when both are ready, 1 (with the reason) when either
could not be made; the first build then tries again and reports its own error.
"""

from __future__ import annotations

import sys
import time


def warm_yosys() -> None:
    """Run Amaranth's Yosys once on a one-register design (its first run compiles and caches it)."""
    from amaranth.back import verilog
    from amaranth.hdl import Module, Signal

    m = Module()
    a, b = Signal(4), Signal(4)
    m.d.sync += b.eq(a)
    verilog.convert(m, ports=[a, b], name="fl_setup_probe", emit_src=False)


def main() -> int:
    from .build import verilator_runtime
    from .toolchain import SimulatorMissing

    failed = False
    try:
        runtime = verilator_runtime()
    except SimulatorMissing as e:
        print(f"toolchain_setup: {e}", file=sys.stderr)
        runtime, failed = None, True
    t0 = time.monotonic()
    if runtime is not None and runtime.ready():
        print(f"toolchain_setup: the Verilator runtime is already compiled in {runtime.dir}")
        runtime = None
    elif runtime is not None:
        runtime.start()  # on its own thread: Yosys runs on this one meanwhile
    try:
        warm_yosys()
        print(f"toolchain_setup: Amaranth's Yosys ran once ({time.monotonic() - t0:.1f} s)")
    except Exception as e:  # noqa: BLE001 - reported; the first elaboration meets it again
        print(f"toolchain_setup: Amaranth's Yosys did not run: {type(e).__name__}: {e}", file=sys.stderr)
        failed = True
    if runtime is not None:
        why = runtime.wait()
        if why is not None:
            print(f"toolchain_setup: the Verilator runtime was not compiled into {runtime.dir}: {why}",
                  file=sys.stderr)
            failed = True
        else:
            print(f"toolchain_setup: compiled the Verilator runtime in {time.monotonic() - t0:.1f} s "
                  f"into {runtime.dir}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
