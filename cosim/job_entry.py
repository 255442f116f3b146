"""cocotb test module that runs one firstlight job inside the simulator.

The host side (:mod:`cosim.jobs`) writes a job file naming an async function
``module:function`` (derived from the function the caller passed) and its keyword arguments; this test opens the device, calls
``await function(dev, emit, **kwargs)`` and appends every record the job emits to a JSON-lines
file as it goes, so whatever was reported survives a later crash or watchdog expiry.
"""

from __future__ import annotations

import gc
import importlib
import json
import os
import traceback
from pathlib import Path

import cocotb

from cosim.device import Device
from cosim.testbench import Testbench
from rtl.board import BoardConfig
from rtl.config import ChipConfig


class Emitter:
    def __init__(self, path: Path):
        self._f = open(path, "a", buffering=1)

    def __call__(self, record: dict) -> None:
        self._f.write(json.dumps(record, default=_jsonable) + "\n")
        self._f.flush()


def _jsonable(o):
    try:
        import numpy as np

        if isinstance(o, np.generic):
            return o.item()
        if isinstance(o, np.ndarray):
            return o.tolist()
    except ImportError:
        pass
    return str(o)


@cocotb.test()
async def firstlight_job(dut):
    # Everything imported so far lives as long as the process: keep the cyclic collector off it,
    # and collect less often (a kernel allocates many short-lived handle and command objects).
    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 20, 20)
    spec = json.loads(Path(os.environ["FIRSTLIGHT_JOB"]).read_text())
    emit = Emitter(Path(spec["records"]))
    try:
        mod_name, fn_name = spec["target"].split(":")
        fn = getattr(importlib.import_module(mod_name), fn_name)
        tb = Testbench(dut, clock=spec.get("clock", "hdl"))
        if spec.get("stimulus"):  # record what the run does to the board, for a replay (cosim/limit.py)
            from cosim.stimulus import StimulusRecorder
            from cosim.testbench import CLOCK_PERIOD_NS

            tb.recorder = StimulusRecorder(CLOCK_PERIOD_NS)
        if spec.get("discover", True):
            dev = await Device.open(tb)
            emit({"type": "device", "revision": dev.revision, "config": dev.config.as_dict(),
                  "board": dev.board.as_dict()})
        else:  # bring-up: identity registers are under test, use the config the chip was built with
            b = spec["board"]
            board = BoardConfig(dram_bytes=b["dram_bytes"], bus_bytes=b["bus_bytes"], latency=b["latency"],
                                beats=b["beats"], period=b["period"], bandwidth=b["bytes_per_cycle"])
            dev = await Device.open(tb, discover=False, config=ChipConfig(**spec["config"]), board=board)
        result = await fn(dev, emit, **spec.get("kwargs", {}))
        if tb.recorder is not None:
            end = tb.recorder.write(Path(spec["stimulus"]), tb.now_ns())
            emit({"type": "stimulus", "path": spec["stimulus"], "end_cycle": end, "events": len(tb.recorder.events)})
        emit({"type": "result", "value": result})
    except Exception as e:
        from cosim.build import HarnessError

        emit({"type": "exception", "error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc(),
              "harness": isinstance(e, HarnessError)})  # the backdoor's VPI, say: not a verdict on the chip
        raise
