"""The seams of the house, checked: jobs are callables, no string glue, no import circle,
no package reaches into another's private attributes, one decoder of the command layout."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("rtl", "cosim", "interp", "kernels", "golden", "workarounds", "firstlight")


def _py(pkgs=PACKAGES):
    for pkg in pkgs:
        yield from sorted((ROOT / pkg).rglob("*.py"))


def test_no_string_job_targets():
    hits = [f"{p.relative_to(ROOT)}:{i}" for p in _py((*PACKAGES, "tests")) for i, line in
            enumerate(p.read_text().splitlines(), 1) if re.search(r"""run_job\(\s*["']""", line)]
    assert not hits, f"run_job takes the job function, not a string: {hits}"


def test_run_job_refuses_what_the_simulator_cannot_import():
    from cosim.jobs import job_target
    from firstlight.jobs.kernels import gemm_job

    assert job_target(gemm_job) == "firstlight.jobs.kernels:gemm_job"

    async def local_job(dev, emit):
        return None

    with pytest.raises(TypeError, match="top level of a module"):
        job_target(local_job)


def test_command_fields_decoded_only_by_the_isa():
    pattern = re.compile(r"(cmd|command|c)\s*&\s*0x[fF]{2}\b|>>\s*(8|16|32|64|80|88|96)\)\s*&\s*0x[fF]+")
    hits = [f"{p.relative_to(ROOT)}:{i}: {line.strip()}" for p in _py() if p.name != "isa.py"
            for i, line in enumerate(p.read_text().splitlines(), 1) if pattern.search(line)]
    assert not hits, hits


def _modules():
    out = {}
    for p in _py():
        rel = p.relative_to(ROOT).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = p
    return out


def _imports(mod: str, path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    pkg = mod if path.name == "__init__.py" else mod.rsplit(".", 1)[0]
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = pkg.split(".")[: len(pkg.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            out.add(target)
            out |= {f"{target}.{a.name}" for a in node.names}
    return out


def test_no_import_circle_between_modules():
    mods = _modules()
    graph = {m: {i for i in _imports(m, p) if i in mods and i != m} for m, p in mods.items()}
    # a package's __init__ re-exporting its own modules is not a circle worth the name
    for m in graph:
        graph[m] = {d for d in graph[m] if not (m.startswith(d + ".") and (mods[d].name == "__init__.py"))}
    seen, stack, cycles = set(), [], []

    def visit(n):
        if n in stack:
            cycles.append(stack[stack.index(n):] + [n])
            return
        if n in seen:
            return
        seen.add(n)
        stack.append(n)
        for d in sorted(graph[n]):
            visit(d)
        stack.pop()

    for n in sorted(graph):
        visit(n)
    assert not cycles, f"import circles: {cycles[:3]}"


def test_dependency_direction():
    """rtl <- cosim <- workarounds <- kernels; interp beside cosim (rtl, golden); golden depends on numpy only; nothing imports the CLI."""
    allowed = {
        "rtl": {"rtl"},
        "golden": {"golden"},
        "cosim": {"cosim", "rtl"},
        "interp": {"interp", "rtl", "cosim", "golden"},  # the chip's contract in numpy, the Device API's seam
        "workarounds": {"workarounds", "rtl", "cosim", "golden"},
        "kernels": {"kernels", "rtl", "cosim", "workarounds", "golden"},
        "firstlight": set(PACKAGES),
    }
    bad = []
    for m, p in _modules().items():
        top = m.split(".")[0]
        for i in _imports(m, p):
            dep = i.split(".")[0]
            if dep in PACKAGES and dep not in allowed[top]:
                bad.append(f"{m} imports {i}")
            if i.startswith("firstlight.cli") and not m.startswith("firstlight.cli"):
                bad.append(f"{m} imports the CLI ({i})")
    assert not bad, bad


def test_no_package_reaches_into_another_packages_private_attributes():
    """``obj._name`` is fine where ``_name`` is defined in the same package, and nowhere else."""
    defined: dict[str, set[str]] = {}
    trees = {p: ast.parse(p.read_text()) for p in _py()}
    for p, tree in trees.items():
        pkg = p.relative_to(ROOT).parts[0]
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name.startswith("_"):
                defined.setdefault(node.name, set()).add(pkg)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) and node.attr.startswith("_"):
                defined.setdefault(node.attr, set()).add(pkg)
    hits = []
    for p, tree in trees.items():
        pkg = p.relative_to(ROOT).parts[0]
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__")
                    and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))
                    and pkg not in defined.get(node.attr, {pkg})):
                hits.append(f"{p.relative_to(ROOT)}:{node.lineno}: .{node.attr} (defined in {sorted(defined[node.attr])})")
    assert not hits, hits
