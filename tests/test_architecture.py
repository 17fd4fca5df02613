"""The shape of the package, checked: no import circles, small files, one home per fact.

The layers themselves are import-linter's contracts (pyproject.toml), run by `lint-imports`
in CI and here."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SOURCES = [*sorted((ROOT / "jsonagent").rglob("*.py")), *sorted((ROOT / "sandbox").rglob("*.py"))]


def under(path: Path, *folders: str) -> bool:
    """`path` is in `folders` of the repository: read from its root, since the clone's own
    folder may be named jsonagent, or any folder above it models."""
    return path.relative_to(ROOT).parts[:len(folders)] == folders


def test_the_import_contracts_hold():
    linter = shutil.which("lint-imports")
    if linter is None:
        pytest.skip("import-linter is not installed (pip install -e '.[dev]')")
    out = subprocess.run([linter], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]


def test_no_import_circles_counting_lazy_and_type_checking_imports():
    grimp = pytest.importorskip("grimp")
    graph = grimp.build_graph("jsonagent", "sandbox", include_external_packages=False)
    edges = {m: {i for i in graph.find_modules_directly_imported_by(m)
                 if not _lazy_own_submodule(m, i)} for m in graph.modules}
    cycles = [c for c in _strongly_connected(edges) if len(c) > 1]
    assert not cycles, cycles


def _lazy_own_submodule(importer: str, imported: str) -> bool:
    """A package's __init__ importing its own submodule (lazily, or to re-export it)."""
    return imported.startswith(importer + ".")


def _strongly_connected(edges: dict[str, set[str]]) -> list[list[str]]:
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            out.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def test_no_source_file_is_over_400_lines():
    long = {str(p.relative_to(ROOT)): n for p in SOURCES
            if (n := len(p.read_text().splitlines())) > 400}
    assert not long, long


def test_nothing_outside_models_probes_a_model_with_getattr():
    probing = re.compile(r"getattr\([^,()]*model\b")
    found = [f"{p.relative_to(ROOT)}:{n}" for p in SOURCES
             if not under(p, "jsonagent", "models")
             for n, line in enumerate(p.read_text().splitlines(), 1) if probing.search(line)]
    assert not found, found


def test_the_run_statuses_are_spelled_in_status_py_only():
    """(max_steps is also a setting's name, and "interrupted" a note's and a reason's.)"""
    spelled = re.compile(r"""["'](needs_human|stalled|interrupted|requires_action|in_progress|"""
                         r"""incomplete|queued)["']""")
    words = re.compile(r"\b(cancel|note|fail|_interrupted)\(")
    found = [f"{p.relative_to(ROOT)}:{n}: {line.strip()}" for p in SOURCES
             if p.name != "status.py" and under(p, "jsonagent")
             for n, line in enumerate(p.read_text().splitlines(), 1)
             if spelled.search(line) and not words.search(line)]
    assert not found, found


def test_the_reasons_a_run_stops_are_spelled_in_status_py_only():
    spelled = re.compile(r"""["'](cancelled|abandoned|interrupted by the user|"""
                         r"""taken over by another node)["']|steps without calling|"""
                         r"""repeated itself \(""")
    found = [f"{p.relative_to(ROOT)}:{n}: {line.strip()}" for p in SOURCES
             if p.name != "status.py" and under(p, "jsonagent")
             for n, line in enumerate(p.read_text().splitlines(), 1) if spelled.search(line)]
    assert not found, found
