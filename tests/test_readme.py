"""The README's Python examples run as written (the local-model call aside: the scripted
example right after it runs instead, as the README says to do in tests)."""

import re
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"


def python_blocks(section: str) -> list[str]:
    text = README.read_text(encoding="utf-8")
    body = text.split(f"## {section}\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", body, re.S)


def test_use_it_from_python_examples_run():
    first, scripted = python_blocks("Use it from Python")[:2]
    assert 'Agent(model="local"' in first
    definitions = first.split("agent = Agent(")[0]  # the local model is not pulled in tests
    namespace: dict = {}
    exec(compile(definitions + scripted, "README.md", "exec"), namespace)
    assert namespace["result"].status == "completed"


def test_the_streaming_example_runs(capsys):
    blocks = [b for b in python_blocks("Use it from Python") if "deltas=True" in b]
    assert len(blocks) == 1
    exec(compile(blocks[0], "README.md", "exec"), {})
    assert capsys.readouterr().out == "two and two make four\n→ TaskCompleteTool {'output': '4'}\n"
