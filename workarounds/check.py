"""Hold the registry against what the RTL really does (reproducer observations)."""

from __future__ import annotations

from . import registry
from .registry import Erratum

__all__ = ["NO_FINDING", "compare"]


# compare's verdicts that are no finding (errata check and the bring-up errata stage pass on them)
NO_FINDING = frozenset({"ok", "not applicable", "not seen"})


def compare(revision: str, observed: dict[str, dict], errata: tuple[Erratum, ...] | None = None) -> list[dict]:
    """One row per erratum: expected (registry) vs detected (reproducer) on ``revision``.

    ``verdict`` is ``ok``, ``not applicable`` (the chip lacks the feature, e.g. no FP path), ``new
    finding`` (fired where the registry says not affected) or ``not reproduced`` (the registry
    says affected, the reproducer saw nothing). On a revision the registry has not assessed,
    ``expected`` is None (nothing is expected or ruled out) and the verdict is ``not seen`` or
    ``new finding`` (a defect on it that nobody has registered).
    """
    assessed = revision in registry.ASSESSED_REVISIONS
    rows = []
    for e in registry.ERRATA if errata is None else errata:
        expected = (revision in e.affected) if assessed else None
        obs = observed.get(e.id)
        fired = bool(obs and obs.get("fired"))
        if obs is None:
            verdict = "not run"
        elif obs.get("applicable") is False:
            verdict = "not applicable"
        elif expected is None:
            verdict = "new finding" if fired else "not seen"
        elif fired == expected:
            verdict = "ok"
        elif fired:
            verdict = "new finding"
        else:
            verdict = "not reproduced"
        rows.append({"id": e.id, "unit": e.unit.name.lower(), "expected": expected, "detected": fired, "verdict": verdict,
                     "detail": (obs or {}).get("detail", "")})
    return rows
