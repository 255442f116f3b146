"""The errata registry, detection/policy, and the mitigations kernels apply.

Kernels call :func:`for_device` once per call: it reads the revision the chip reported, resolves
the policy the device was opened with, installs the stream passes and returns the
:class:`~workarounds.policy.Resolution` (cached on the device).
"""

from __future__ import annotations

from .passes import install
from .policy import POLICIES, ErratumWarning, Resolution, parse_policy, resolve
from .registry import BY_ID, ERRATA, Erratum, erratum

__all__ = [
    "BY_ID", "ERRATA", "Erratum", "ErratumWarning", "POLICIES", "Resolution", "erratum", "for_device",
    "parse_policy", "resolve", "kernel_report", "set_policy",
]


def for_device(dev) -> Resolution:
    if dev.errata is None or dev.errata.revision != dev.revision:
        dev.errata = resolve(dev.revision, dev.errata_policy)
        install(dev, dev.errata.active)
    return dev.errata


def kernel_report(dev, units: tuple[str, ...]) -> dict:
    """What a kernel's stats say about errata: the mitigations applied for the units it uses."""
    res = for_device(dev)
    applied = [e.id for e in ERRATA if e.id in res.active and e.unit in units]
    return {
        "mitigations": applied,
        "errata_status": {e.id: res.status[e.id] for e in ERRATA if e.unit in units},
        "errata_warnings": [w for w in res.warnings if any(w.startswith(e.id) for e in ERRATA if e.unit in units)],
        "stream_pass_insertions": dict(dev.pass_counts),
    }


def set_policy(dev, policy: dict[str, str] | None) -> Resolution:
    """Change the device's errata policy and re-install the passes it implies."""
    dev.errata_policy = parse_policy(policy) if policy else {}
    dev.errata = None
    return for_device(dev)
