"""Installed, jsonagent owns one top-level name: the repository's sandbox/, tool_specs/ and
core_function.json go inside the package at build time, where no other distribution's
`sandbox` can collide with them (jsonagent/bundled.py finds them in either layout)."""

import ast
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def test_the_wheel_installs_only_jsonagent_with_its_bundled_parts_inside(tmp_path):
    pytest.importorskip("hatchling")  # without build isolation the backend must be here
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", str(REPO), "-w", str(tmp_path),
                           "--no-deps", "--no-build-isolation", "--quiet"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    [wheel] = tmp_path.glob("jsonagent-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        core = zf.read("jsonagent/core_function.json")
    assert {n.split("/")[0] for n in names if ".dist-info/" not in n} == {"jsonagent"}
    assert [n for n in names if n.endswith("core_function.json")] == ["jsonagent/core_function.json"]
    assert core == (REPO / "core_function.json").read_bytes()
    assert {"jsonagent/bundled.py", "jsonagent/sandbox/__init__.py", "jsonagent/sandbox/boot.py",
            "jsonagent/tool_specs/meta_schema.json",
            "jsonagent/tool_specs/examples/calculator.json"} <= set(names)


def test_the_sandbox_works_under_any_name():
    """It is `sandbox` in a checkout, `jsonagent.sandbox` installed and a private name in its
    own child process, so its modules import one another relatively, and nothing of jsonagent."""
    for path in sorted((REPO / "sandbox").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                roots = {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                roots = {node.module.split(".")[0]}
            else:
                continue
            assert not roots & {"sandbox", "jsonagent"}, f"{path.name}:{node.lineno}"
