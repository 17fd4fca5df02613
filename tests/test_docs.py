"""Every example in the docs and the README runs as written.

A page's Python blocks run in order in one namespace, as a reader would paste them. An HTML
comment right before a block says how, where the block needs more than Python:

- `<!-- doctest: scripted STEPS -->`: a model named in the block (`model="local"`,
  `"gpt-4o-mini"`) is a `ScriptedModel` replaying STEPS, a JSON list of `[tool, args]`
  or of whole replies (a step of several calls), or a list of such lists: one script per
  model, in the order the block builds them;
- `<!-- doctest: skip REASON -->`: not run, and the reason says why;
- `<!-- doctest: output -->` before a text block: what the blocks above printed since the
  last such block, exactly.

A shell block (bash, console) is `<!-- doctest: run -->`, or says why it is not:
`<!-- doctest: illustrative (REASON) -->`. A console block's `$ ` lines are run, in a
folder where `docs/` and `tool_specs/` are at hand, and what they print must be what the
block shows (run ids, seconds and token counts aside; `...` stands for anything).
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
import io
import json
import os
import re
import subprocess
import sys
import types
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
SHELLS = {"bash", "console", "sh", "shell"}
FENCE = re.compile(r"(?:<!-- doctest: (?P<kind>[a-z]+)(?P<arg>[^\n]*?) -->\n)?"
                   r"^```(?P<lang>[a-z]*)\n(?P<body>.*?)^```", re.S | re.M)


@dataclass
class Block:
    page: Path
    line: int
    lang: str
    kind: str | None
    arg: str
    body: str

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def blocks(page: Path) -> list[Block]:
    text = page.read_text(encoding="utf-8")
    return [Block(page, text.count("\n", 0, m.start("body")), m["lang"], m["kind"],
                  (m["arg"] or "").strip(), m["body"]) for m in FENCE.finditer(text)]


def section_blocks(page: str, lang: str) -> list[str]:
    """The bodies of one page's blocks in `lang`, for tests that check one example closely."""
    return [b.body for b in blocks(ROOT / page) if b.lang == lang]


ALL = [b for page in PAGES for b in blocks(page)]


def _scripted(arg: str):
    from jsonagent.testing import ScriptedModel, step

    scripts = json.loads(arg)
    if not (scripts and isinstance(scripts[0], list) and not isinstance(scripts[0][0], str)):
        scripts = [scripts]  # one script: its steps are [tool, args] or whole replies
    made = iter([ScriptedModel([s if isinstance(s, dict) else step(*s) for s in script])
                 for script in scripts])
    return lambda *args, **kwargs: next(made)


@pytest.fixture
def at_hand(tmp_path, monkeypatch):
    """A working folder where the examples' relative paths resolve, the checkout's jsonagent
    on the path of any process they start."""
    work = tmp_path / "work"
    work.mkdir()
    for name in ("docs", "tool_specs"):
        (work / name).symlink_to(ROOT / name)
    monkeypatch.chdir(work)
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    return work


PYTHON_PAGES = sorted({b.page for b in ALL if b.lang == "python"})


@pytest.mark.parametrize("page", PYTHON_PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_the_python_blocks_run(page, at_hand, monkeypatch):
    import jsonagent.agent

    page_module = types.ModuleType("docs_page")  # a real module: pydantic resolves its types there
    monkeypatch.setitem(sys.modules, page_module.__name__, page_module)
    namespace = page_module.__dict__
    printed = io.StringIO()
    for block in blocks(page):
        if block.kind == "output":
            assert printed.getvalue() == block.body, block.where
            printed = io.StringIO()
        if block.lang != "python":
            continue
        assert block.kind in (None, "scripted", "skip"), f"{block.where}: {block.kind}?"
        if block.kind == "skip":
            assert block.arg, f"{block.where}: say why it is skipped"
            continue
        with monkeypatch.context() as m, contextlib.redirect_stdout(printed):
            if block.kind == "scripted":
                m.setattr(jsonagent.agent, "resolve_model", _scripted(block.arg))
                m.setenv("OPENAI_API_KEY", "sk-never-sent")  # a model built by hand, never called
            code = compile("\n" * block.line + block.body, str(block.page), "exec",
                           flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
            result = eval(code, namespace)
            if asyncio.iscoroutine(result):
                asyncio.run(result)


def _says_a_command(block: Block) -> bool:
    return block.lang in SHELLS or any(re.match(r"(\$ )?jsonagent ", line)
                                       for line in block.body.splitlines())


def test_every_shell_block_is_run_or_marked_illustrative():
    unmarked = [b.where for b in ALL if _says_a_command(b) and b.kind not in ("run", "illustrative")]
    assert not unmarked, unmarked
    bare = [b.where for b in ALL if b.kind == "illustrative" and not b.arg.strip("() ")]
    assert not bare, f"say why each is only illustrative: {bare}"


RUN = [b for b in ALL if b.kind == "run"]


@pytest.mark.parametrize("block", RUN, ids=lambda b: b.where)
def test_the_commands_shown_run(block, at_hand):
    if block.lang != "console":
        out = subprocess.run(["bash", "-euo", "pipefail", "-c", block.body], capture_output=True,
                             text=True, timeout=120)
        assert out.returncode == 0, (block.where, out.stdout[-2000:], out.stderr[-2000:])
        return
    last_run = None
    for command, shown in _session(block.body):
        if last_run:  # a later command names the run the earlier one made
            command = re.sub(r"run_[0-9a-f]{16}", last_run, command)
        out = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=120)
        seen = out.stderr + out.stdout  # as on a terminal: the steps as they come, then the answer
        runs = re.findall(r"run_[0-9a-f]{16}", seen)
        last_run = runs[-1] if runs else last_run
        assert _matches(shown, seen), (block.where, command, seen)


def _session(body: str) -> list[tuple[str, str]]:
    """The `$ ` commands of a console block, each with the output shown after it."""
    steps: list[tuple[str, list[str]]] = []
    for line in body.splitlines():
        if line.startswith("$ "):
            steps.append((line[2:], []))
        else:
            steps[-1][1].append(line)
    return [(command, "\n".join(lines)) for command, lines in steps]


def _matches(shown: str, actual: str) -> bool:
    return _shape(shown).fullmatch(actual.strip("\n")) is not None


def _shape(shown: str) -> re.Pattern:
    """A pattern of the shown output: what varies from run to run matches anything of its form."""
    varying = re.compile(r"run_[0-9a-f]{16}|\(\d+\.\d+s\)|\d+\+\d+ tokens|\.\.\.")
    parts, at = [], 0
    text = shown.strip("\n")
    for m in varying.finditer(text):
        parts.append(re.escape(text[at:m.start()]))
        found = m.group()
        parts.append(r"run_[0-9a-f]{16}" if found.startswith("run_") else
                     r"\(\d+\.\d+s\)" if found.startswith("(") else
                     r"\d+\+\d+ tokens" if found.endswith("tokens") else r".*?")
        at = m.end()
    parts.append(re.escape(text[at:]))
    return re.compile("".join(parts), re.S)


def test_every_environment_variable_the_code_names_has_its_one_home():
    from jsonagent.environment import VARIABLES

    named = re.compile(r"^(JSONAGENT|OPENAI|OTEL)_[A-Z0-9_]+$|^TRACEPARENT$|^XDG_DATA_HOME$")
    found = {node.value for path in (ROOT / "jsonagent").rglob("*.py")
             for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
             if isinstance(node, ast.Constant) and isinstance(node.value, str)
             and named.match(node.value) and path.name != "environment.py"}
    assert found == set(VARIABLES), (sorted(found - set(VARIABLES)), sorted(set(VARIABLES) - found))


def test_nothing_points_outside_the_repository():
    """No `../shared`, no absolute path of this machine: a clone reads the same everywhere."""
    outside = re.compile(r"\.\./shared|/work/|shared/(DESIGN|STYLE)")
    files = [p for p in [*PAGES, ROOT / "pyproject.toml", ROOT / ".ci" / "run", ROOT / "mkdocs.yml",
                         *(ROOT / "jsonagent").rglob("*.py"), *(ROOT / "bench").glob("*.py"),
                         *(ROOT / "docs" / "hooks").glob("*.py")]]
    found = [f"{p.relative_to(ROOT)}:{n}" for p in files
             for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
             if outside.search(line)]
    assert not found, found
