"""cocotb module for tests/test_cocotb_runner.py: the second test kills the simulator process."""

import os
import cocotb
from cocotb.triggers import Timer

@cocotb.test()
async def first_passes(dut):
    await Timer(10, "ns")

@cocotb.test()
async def second_kills_the_simulator(dut):
    await Timer(10, "ns")
    print("last words before the crash")  # no flush: the log must keep it anyway
    dut._log.warning("a last log line before the crash")
    os._exit(3)

@cocotb.test()
async def third_never_runs(dut):
    await Timer(10, "ns")
