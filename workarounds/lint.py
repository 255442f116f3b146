"""Registry lint: the records are well formed and point at defects that exist."""

from __future__ import annotations

import re

from rtl.revisions import DEFECTS, REVISIONS

from .registry import ASSESSED_REVISIONS, CATEGORIES, ERRATA, UNITS, Erratum
from .reproducers import REPRODUCERS

__all__ = ["lint"]

_ID = re.compile(r"^FL-(ME|RU|SR|CP|NU)-\d{3}$")


def lint(errata: tuple[Erratum, ...] = ERRATA) -> list[str]:
    """Return every problem found (empty when the registry is clean)."""
    problems = []
    seen = set()
    for e in errata:
        where = f"{e.id}:"
        if e.id in seen:
            problems.append(f"{where} duplicate id")
        seen.add(e.id)
        if not _ID.match(e.id):
            problems.append(f"{where} id must look like FL-<ME|RU|SR|CP|NU>-NNN")
        if e.unit not in UNITS:
            problems.append(f"{where} unknown unit {e.unit!r} (known: {', '.join(UNITS)})")
        if e.category not in CATEGORIES:
            problems.append(f"{where} unknown category {e.category!r} (known: {', '.join(CATEGORIES)})")
        for rev in (*e.affected, *([e.fixed_in] if e.fixed_in else [])):
            if rev not in REVISIONS or rev not in ASSESSED_REVISIONS:
                problems.append(f"{where} unknown revision {rev!r}")
        if not e.affected:
            problems.append(f"{where} affects no revision")
        if e.fixed_in in e.affected:
            problems.append(f"{where} fixed_in {e.fixed_in} is also listed as affected")
        if e.defect not in DEFECTS:
            problems.append(f"{where} points at defect {e.defect!r}, which rtl/revisions.py does not have")
        if e.reproducer not in REPRODUCERS:
            problems.append(f"{where} reproducer {e.reproducer!r} does not exist")
        if e.category != "A" and not e.mitigation:
            problems.append(f"{where} category {e.category} needs a mitigation")
        if e.mitigation and e.mitigation_kind not in ("stream", "kernel"):
            problems.append(f"{where} mitigation_kind must be 'stream' or 'kernel'")
        if not e.cell:
            problems.append(f"{where} has no kernel cell for the regression matrix")
        for name in ("title", "conditions", "description", "implication"):
            if not getattr(e, name).strip():
                problems.append(f"{where} empty {name}")
    return problems
