"""Jobs: async functions that run inside the simulator process, and their host-side drivers.

A job is ``async def job(dev, emit, **kwargs)``. The host hands the function itself to
:func:`cosim.jobs.run_job` (never a string), which derives its import path, launches one
simulator process, and returns the records the job emitted. Everything a job returns or emits
crosses the process boundary as JSON: kernel stats are serialised here, at that boundary.

* :mod:`firstlight.jobs.kernels`: one kernel on seeded random data, checked against its golden.
* :mod:`firstlight.jobs.errata`: reproducers, the regression matrix and costs at scale.
* :mod:`firstlight.jobs.numerics`: SQNR of every quantization recipe on the RTL.
* :mod:`firstlight.jobs.checks`: the golden checks the jobs and the bring-up stages share.
"""
