"""The errata registry, detection/policy, and the mitigations kernels apply.

A caller that opened a device attaches the software's errata knowledge to it once::

    mit = workarounds.attach(dev, policy={"FL-ME-002": "off"})
    c, stats = await gemm(dev, a, b, mitigations=mit)

:func:`attach` resolves the revision the chip reported (``dev.revision``, read from REV) under
the policy, installs the stream passes on the device's generic submit hook, and returns the
:class:`Mitigations` handed to kernels: typed constraints per kernel family plus the report.
"""

from __future__ import annotations

from dataclasses import dataclass

from .constraints import GemmConstraints, LowpConstraints, ReduceConstraints, constraints_for
from .passes import StreamFilter, stream_filter
from .policy import POLICIES, ErratumWarning, Resolution, parse_policy, resolve
from .registry import BY_ID, ERRATA, NEEDS, Erratum, Unit, erratum

__all__ = [
    "BY_ID", "ERRATA", "Erratum", "ErratumWarning", "POLICIES", "Resolution", "Unit", "erratum",
    "parse_policy", "resolve", "attach", "Mitigations", "GemmConstraints", "ReduceConstraints",
    "LowpConstraints",
]


@dataclass
class Mitigations:
    """What the active mitigations ask of the kernels, for one device and policy."""

    resolution: Resolution
    gemm: GemmConstraints
    reduce: ReduceConstraints
    lowp: LowpConstraints
    filter: StreamFilter
    inapplicable: dict[str, str] = None  # erratum id -> why it cannot arise on this chip (Erratum.needs)

    def report(self, units: tuple[Unit, ...]) -> dict:
        """What a kernel's stats say about errata: the mitigations applied for the units it uses
        (not those of errata this chip cannot have: they are "Not applicable")."""
        res = self.resolution
        na = self.inapplicable or {}
        mine = [e for e in ERRATA if e.unit in units]
        return {
            "mitigations": [e.id for e in mine if e.id in res.active and e.id not in na],
            "errata_status": {e.id: f"Not applicable: {na[e.id]}" if e.id in na else res.status[e.id] for e in mine},
            "errata_warnings": [w for w in res.warnings if any(w.startswith(e.id) for e in mine)],
            "stream_pass_insertions": dict(self.filter.insertions),
        }


def attach(dev, policy: dict[str, str] | list[str] | None = None, *, warn: bool = True) -> Mitigations:
    """Resolve the chip's errata under ``policy`` and install its stream passes on ``dev``.

    Replaces whatever an earlier ``attach`` installed on the same device.
    """
    res = resolve(dev.revision, parse_policy(policy) if policy else None, warn=warn)
    flt = stream_filter(res.active, dev.config, getattr(dev, "board", None))  # the DMA passes need both
    dev.set_submit_filter(flt)
    k = constraints_for([e for e in ERRATA if e.id in res.active])
    return Mitigations(res, k["gemm"], k["reduce"], k["lowp"], flt, inapplicable(dev.config))


def inapplicable(config) -> dict[str, str]:
    """The errata a chip of ``config`` cannot have (their ``needs`` is not built), with why."""
    out = {}
    for e in ERRATA:
        if e.needs is not None:
            has, why = NEEDS[e.needs]
            if not has(config):
                out[e.id] = why.format(formats="/".join(config.formats))
    return out
