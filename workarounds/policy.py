"""Detection and policy: which errata apply to the chip in hand, and which mitigations run.

The revision always comes from the chip's REV register (``dev.revision``), never from a flag.
A per-erratum policy ``auto | on | off`` (default auto) is always reported; an affected chip
with a mitigation turned off gets a loud warning.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field

from .registry import ASSESSED_REVISIONS, BY_ID, ERRATA, Erratum

__all__ = ["POLICIES", "parse_policy", "Resolution", "resolve", "ErratumWarning"]

POLICIES = ("auto", "on", "off")


class ErratumWarning(UserWarning):
    """An erratum affects this chip and its mitigation is off: results may be wrong."""


def parse_policy(items: list[str] | dict[str, str] | None) -> dict[str, str]:
    """``["FL-ME-001=off", ...]`` (or a dict) -> ``{id: policy}``, with precise errors."""
    if not items:
        return {}
    pairs = items.items() if isinstance(items, dict) else []
    if not isinstance(items, dict):
        parsed = []
        for item in items:
            if "=" not in item:
                raise ValueError(f"errata policy {item!r} must look like ID=auto|on|off (e.g. FL-ME-001=off)")
            k, v = item.split("=", 1)
            parsed.append((k.strip().upper(), v.strip().lower()))  # ids and values case-insensitive
        pairs = parsed
    out = {}
    for k, v in pairs:
        if k not in BY_ID:
            raise ValueError(f"errata policy names unknown erratum {k!r}; known: {', '.join(BY_ID)}")
        if v not in POLICIES:
            raise ValueError(f"errata policy for {k} must be one of {', '.join(POLICIES)}, not {v!r}")
        if k in out and out[k] != v:
            raise ValueError(f"errata policy for {k} given twice, as {out[k]} and as {v}: give it once")
        out[k] = v
    return out


@dataclass
class Resolution:
    revision: str
    assessed: bool
    policy: dict[str, str]
    active: frozenset[str]
    status: dict[str, str]
    warnings: list[str] = field(default_factory=list)

    def on(self, err_id: str) -> bool:
        """Is this erratum's mitigation active? An id the registry does not know raises."""
        if err_id not in BY_ID:
            raise KeyError(f"unknown erratum {err_id!r}; known: {', '.join(BY_ID)}")
        return err_id in self.active

    def report(self) -> dict:
        return {
            "revision": self.revision,
            "assessed": self.assessed,
            "policy": {e.id: self.policy.get(e.id, "auto") for e in ERRATA},
            "status": dict(self.status),
            "active": sorted(self.active),
            "warnings": list(self.warnings),
        }


def status_for(e: Erratum, revision: str, active: bool) -> str:
    if revision not in ASSESSED_REVISIONS:
        return "Mitigated: " + e.mitigation + " (forced on)" if active else "Unknown"
    if revision not in e.affected:
        return f"Not affected (mitigation forced on: {e.mitigation})" if active else "Not affected"
    return "Mitigated: " + e.mitigation if active else "Vulnerable"


def resolve(revision: str, policy: dict[str, str] | None = None, *, warn: bool = True) -> Resolution:
    policy = parse_policy(policy) if policy else {}
    assessed = revision in ASSESSED_REVISIONS
    active, status, notes = set(), {}, []
    for e in ERRATA:
        p = policy.get(e.id, "auto")
        on = p == "on" or (p == "auto" and assessed and revision in e.affected and e.category != "A")
        if on:
            active.add(e.id)
        status[e.id] = status_for(e, revision, on)
        if assessed and revision in e.affected and not on:
            msg = f"{e.id} ({e.title}) affects {revision} and its mitigation is OFF: results may be wrong"
            notes.append(msg)
            if warn:
                warnings.warn(msg, ErratumWarning, stacklevel=2)
    if not assessed:
        notes.append(f"revision {revision} is not in the errata registry: no mitigations applied automatically")
    return Resolution(revision, assessed, policy, frozenset(active), status, notes)
