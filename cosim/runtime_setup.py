"""``python -m cosim.runtime_setup``: compile, at setup, the Verilator runtime that every model of
the default build links (``make venv`` runs it).

Why: every Verilator model links the same runtime objects (:class:`cosim.build.RuntimePrebuild`),
about 18 s of one core, compiled once per machine and set of flags. Left to a machine's first
simulator build, it ran beside that build and took it from about 16 s to 24 s on 2 cores (the
model's own C++ waited for a core). ``make venv`` runs this while pip installs PyTorch, which
keeps one core busy unpacking: the runtime costs the setup nothing it did not already wait for,
and the first build does not compile it.

It compiles the runtime of a build with the default clock and no waveforms (what ``firstlight
run``, ``bringup`` and the tests build first); another clock or a waveform build compiles its own
on its first build, as before. Exit status 0 when the runtime is ready, 1 (with the reason and
the log) when it could not be compiled; the first build then tries again and reports its error.
"""

from __future__ import annotations

import sys
import time


def main() -> int:
    from .build import verilator_runtime
    from .toolchain import SimulatorMissing

    try:
        runtime = verilator_runtime()
    except SimulatorMissing as e:
        print(f"runtime_setup: {e}", file=sys.stderr)
        return 1
    if runtime.ready():
        print(f"runtime_setup: the Verilator runtime is already compiled in {runtime.dir}")
        return 0
    t0 = time.monotonic()
    why = runtime.start().wait()
    if why is not None:
        print(f"runtime_setup: the Verilator runtime was not compiled into {runtime.dir}: {why}", file=sys.stderr)
        return 1
    print(f"runtime_setup: compiled the Verilator runtime in {time.monotonic() - t0:.1f} s into {runtime.dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
