"""Registry lint: the records are well formed and point at things that exist.

Every cross-reference a record makes is checked here against its one declaration: the RTL
defect (``rtl.revisions.Defect``), the reproducer, the regression cells (kernel fields,
reduction ops, quantization recipes, input distributions), the constraint knobs and, for a
stream mitigation, its pass.
"""

from __future__ import annotations

import re

from golden.distributions import DISTRIBUTIONS
from golden.quant import RECIPES
from rtl.isa import ReduceOp
from rtl.revisions import REVISIONS, Defect

from .cells import CELL_TYPES, DmaCell, GemmCell, GemmSumCell, LowpCell, ReduceCell, TileCell, VecCell
from .constraints import knob_problems
from .passes import PASSES
from .registry import ASSESSED_REVISIONS, CATEGORIES, ERRATA, ID_PREFIXES, NEEDS, Unit, Erratum
from .reproducers import REPRODUCERS

__all__ = ["lint", "cell_problems"]

_ID = re.compile(rf"^FL-({'|'.join(ID_PREFIXES)})-\d{{3}}$")


def cell_problems(cell) -> list[str]:
    """Why a regression cell cannot run (empty when it can)."""
    if not isinstance(cell, CELL_TYPES):
        return [f"cell {cell!r} is not one of {', '.join(c.__name__ for c in CELL_TYPES)}"]
    out = []
    if isinstance(cell, TileCell):  # its kernel's declaration checks the values (kernels sit above workarounds)
        if not isinstance(cell.name, str) or not cell.name:
            return [f"tile cell: the kernel name must be a non-empty string, not {cell.name!r}"]
        if not all(isinstance(p, tuple) and len(p) == 2 and isinstance(p[0], str) for p in cell.params):
            return [f"tile cell {cell.name}: params must be (name, value) pairs, not {cell.params!r}"]
        return []
    dims = (("m", "n", "k") if isinstance(cell, (GemmCell, GemmSumCell, LowpCell))
            else ("rows", "words", "pitch") if isinstance(cell, DmaCell) else ("rows", "cols"))
    for d in dims:
        v = getattr(cell, d)
        if not isinstance(v, int) or v < 1:
            out.append(f"{cell.kernel} cell: {d} must be a positive integer, not {v!r}")
    if isinstance(cell, ReduceCell) and cell.op.upper() not in ReduceOp.__members__:
        out.append(f"reduce cell: op {cell.op!r} is not one of {', '.join(o.lower() for o in ReduceOp.__members__)}")
    if isinstance(cell, LowpCell):
        if cell.recipe not in RECIPES:
            out.append(f"lowp cell: unknown recipe {cell.recipe!r}")
        if cell.dist not in DISTRIBUTIONS:
            out.append(f"lowp cell: unknown distribution {cell.dist!r} (known: {', '.join(DISTRIBUTIONS)})")
    if isinstance(cell, DmaCell):
        if not isinstance(cell.offset, int) or cell.offset < 0:
            out.append(f"dma cell: offset must be a non-negative integer, not {cell.offset!r}")
        if isinstance(cell.pitch, int) and isinstance(cell.words, int) and cell.pitch < cell.words:
            out.append(f"dma cell: pitch {cell.pitch} < words {cell.words}: its rows would overlap in DRAM")
    if isinstance(cell, VecCell):
        from golden.vector import BROADCASTS, VEC_OPS

        if cell.op not in VEC_OPS:
            out.append(f"elementwise cell: op {cell.op!r} is not one of {', '.join(VEC_OPS)}")
        if cell.broadcast not in BROADCASTS:
            out.append(f"elementwise cell: broadcast {cell.broadcast!r} is not one of {', '.join(BROADCASTS)}")
    if isinstance(cell, GemmCell) and cell.k_chunk is not None and (not isinstance(cell.k_chunk, int) or cell.k_chunk < 1):
        out.append(f"gemm cell: k_chunk must be a positive integer or None, not {cell.k_chunk!r}")
    return out


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
            problems.append(f"{where} id must look like FL-<{'|'.join(ID_PREFIXES)}>-NNN")
        if not isinstance(e.unit, Unit):
            problems.append(f"{where} unit must be a workarounds.Unit, not {e.unit!r}")
        if e.category not in CATEGORIES:
            problems.append(f"{where} unknown category {e.category!r} (known: {', '.join(CATEGORIES)})")
        for rev in (*e.affected, *([e.fixed_in] if e.fixed_in else [])):
            if rev not in REVISIONS or rev not in ASSESSED_REVISIONS:
                problems.append(f"{where} unknown revision {rev!r}")
        if not e.affected:
            problems.append(f"{where} affects no revision")
        if e.fixed_in in e.affected:
            problems.append(f"{where} fixed_in {e.fixed_in} is also listed as affected")
        if not isinstance(e.defect, Defect):
            problems.append(f"{where} defect must be an rtl.revisions.Defect, not {e.defect!r}")
        else:
            for rev in e.affected:
                if rev in REVISIONS and e.defect not in REVISIONS[rev].defects:
                    problems.append(f"{where} says {rev} is affected, but rtl/revisions.py gives {rev} no "
                                    f"{e.defect.name}")
        if e.reproducer not in REPRODUCERS:
            problems.append(f"{where} reproducer {e.reproducer!r} does not exist")
        if e.category != "A" and not e.mitigation:
            problems.append(f"{where} category {e.category} needs a mitigation")
        if e.mitigation and e.mitigation_kind not in ("stream", "kernel"):
            problems.append(f"{where} mitigation_kind must be 'stream' or 'kernel'")
        if e.mitigation_kind == "stream" and e.id not in PASSES:
            problems.append(f"{where} a stream mitigation needs a pass in workarounds/passes.py")
        if e.needs is not None and e.needs not in NEEDS:
            problems.append(f"{where} needs {e.needs!r}, not one of {', '.join(NEEDS)}")
        if e.mitigation_kind == "kernel" and e.mitigation and not e.knobs:
            problems.append(f"{where} a kernel mitigation must set constraint knobs (workarounds/constraints.py)")
        problems += [f"{where} {p}" for p in knob_problems(e.knobs)]
        if not e.cell:
            problems.append(f"{where} has no kernel cell for the regression matrix")
        for c in (e.cell if isinstance(e.cell, tuple) else (e.cell,)) if e.cell else ():
            problems += [f"{where} {p}" for p in cell_problems(c)]
        if e.scale is not None:
            problems += [f"{where} scale: {p}" for p in cell_problems(e.scale)]
        for name in ("title", "conditions", "description", "implication"):
            if not getattr(e, name).strip():
                problems.append(f"{where} empty {name}")
    return problems
