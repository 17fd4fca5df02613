"""The `docs` extra alone builds the site (issue 58, finding 24: the HTTP reference needed
fastapi, from `serve`). This venv has every extra, so the build passes here either way: the
build's generated sections (docs/hooks/, run here as the build runs them) are run with every
distribution the `docs` extra would not install made unimportable, as in a fresh venv."""

from __future__ import annotations

import importlib.metadata as md
import re
import subprocess
import sys
from pathlib import Path

import pytest

requirements = pytest.importorskip("packaging.requirements")
tomllib = pytest.importorskip("tomllib")  # Python 3.11

ROOT = Path(__file__).resolve().parent.parent
SECTIONS = sorted({m for page in (ROOT / "docs").rglob("*.md")
                   for m in re.findall(r"<!-- generated: ([a-z_]+) -->", page.read_text())})

WITHOUT = """
import importlib.metadata as md, re, sys
root, allowed, sections = sys.argv[1], set(sys.argv[2].split()), sys.argv[3:]
absent = {m for m, ds in md.packages_distributions().items()
          if not any(re.sub(r"[-_.]+", "-", d).lower() in allowed for d in ds)}
absent -= set(sys.stdlib_module_names) | {"jsonagent", "sandbox"}

class Absent:  # before every other finder: not installed
    def find_spec(self, name, path=None, target=None):
        if name in absent:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)

sys.meta_path.insert(0, Absent())
sys.path[:0] = [root + "/docs/hooks", root]
import reference
for name in sections:
    getattr(reference, name)()
"""


def _name(text: str) -> str:
    return re.sub(r"[-_.]+", "-", text).lower()


def installed_with(extra: str) -> set[str]:
    """The distributions `pip install -e '.[extra]'` installs: the package's dependencies,
    the extra's, those of the extras it names (jsonagent[serve]), and all they require."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras, todo, seen = project["optional-dependencies"], [], set()

    def add(spec: str, env_extra: str = "") -> None:
        req = requirements.Requirement(spec)
        if req.marker is not None and not req.marker.evaluate({"extra": env_extra}):
            return
        if _name(req.name) == "jsonagent":
            for named in req.extras:
                for s in extras[named]:
                    add(s)
        else:
            todo.append((_name(req.name), sorted(req.extras)))

    for spec in [*project["dependencies"], *extras[extra]]:
        add(spec)
    while todo:
        name, wanted = todo.pop()
        if (name, tuple(wanted)) in seen:
            continue
        seen.add((name, tuple(wanted)))
        try:
            needs = md.requires(name) or []
        except md.PackageNotFoundError:
            continue
        for spec in needs:
            for e in ["", *wanted]:
                add(spec, e)
    return {name for name, _ in seen}


def test_the_sites_generated_sections_need_only_the_docs_extra():
    assert "http" in SECTIONS and "cli" in SECTIONS  # the pages still name them
    allowed = installed_with("docs")
    assert "mkdocs-material" in allowed
    done = subprocess.run([sys.executable, "-c", WITHOUT, str(ROOT), " ".join(sorted(allowed)),
                           *SECTIONS], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
