"""A gated clock domain: the core clock in the cycles a unit has work, held otherwise.

Why: Verilator schedules logic by the clocks that can change its inputs, so logic whose
registers sit on a gated clock is not evaluated on the cycles the clock is held. The vector
unit and the engine's FP finalize stage use it (docs/chip.md); their registers change only
when they work, so they behave cycle for cycle as on the core clock.

The enable is registered on the falling edge, as a clock-gating cell's latch does, so the
gated clock has the core clock's rising edges and no glitch. Amaranth's own simulator delays a
logic-driven clock by a delta cycle (its registers would sample the core clock's registers after
they changed), which is why gating is a build option (``Chip(gated_clocks=True)``), on only for
the Verilog builds.
"""

from __future__ import annotations

from amaranth.hdl import ClockDomain, ClockSignal, Module, ResetSignal, Signal

__all__ = ["add_gated_domain"]


def add_gated_domain(m: Module, name: str, enable) -> None:
    """Add the local clock domain ``name`` to ``m``: the ``sync`` clock in the cycles ``enable``
    is high (the enable is sampled at the falling edge before the rising one) and during a
    ``sync`` reset, with ``sync``'s reset. A soft reset reaches it only if ``enable`` includes it."""
    m.domains += [ClockDomain(name, local=True),
                  ClockDomain(f"{name}_en", clk_edge="neg", reset_less=True, local=True)]
    en_q = Signal(name=f"{name}_clk_en")
    m.d.comb += [ClockSignal(f"{name}_en").eq(ClockSignal("sync")),
                 ClockSignal(name).eq(ClockSignal("sync") & en_q),
                 ResetSignal(name).eq(ResetSignal("sync"))]
    m.d[f"{name}_en"] += en_q.eq(enable | ResetSignal("sync"))
