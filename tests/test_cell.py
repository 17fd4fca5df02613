"""Statements that ran together on one line: split where that is safe, told how otherwise."""

from __future__ import annotations

import pytest

from jsonagent import Agent, core_tools
from jsonagent.notes import note
from jsonagent.testing import ScriptedModel, step
from jsonagent.tools.cell import prepare


@pytest.mark.parametrize("sent,ran", [
    ("x = 1 y = 2 print(x + y)", "x = 1\ny = 2\nprint(x + y)"),
    ("import math print(math.pi)", "import math\nprint(math.pi)"),
    ("total = 0 for i in range(10): total += i print(total)",
     "total = 0\nfor i in range(10): total += i\nprint(total)"),
    ("for i in range(3): print(i) print('done')", "for i in range(3): print(i)\nprint('done')"),
    ("def f():\n    a = 1 return a\nprint(f())", "def f():\n    a = 1\n    return a\nprint(f())"),
])
def test_statements_that_ran_together_are_split_and_the_model_is_told(sent, ran):
    cell = prepare(sent)
    assert cell.runs and cell.code == ran
    compile(cell.code, "<cell>", "exec")
    assert cell.note == note("code_split", lines=len(ran.splitlines()))


@pytest.mark.parametrize("code", [
    "print('a b c') ",
    "x = [1, 2,\n     3]\nprint(x)",
    "s = 'print(1) print(2)'",
    "for i in range(3):\n    print(i)\n",
])
def test_code_that_compiles_is_never_touched(code):
    cell = prepare(code)
    assert cell == prepare(code) and cell.code == code and cell.note is None and cell.runs


@pytest.mark.parametrize("code", [
    "x = [1, 2 3]",                # inside brackets: a missing comma, not two statements
    "x = = 1",                     # another mistake altogether
])
def test_no_split_inside_brackets_or_for_other_mistakes(code):
    cell = prepare(code)
    assert cell.code == code and cell.note is None and cell.runs  # Python's own error says it


@pytest.mark.parametrize("code", ["pip list", "print total", "numbers sorted(x)"])
def test_words_are_not_statements_that_ran_together(code):
    cell = prepare(code)  # splitting would run each word as a name, and fail on the first
    assert cell.code == code and cell.note is None and cell.runs


@pytest.mark.parametrize("code", [
    "pip install warehouse_api",
    "!pip install requests\nimport requests",
    "import sys\npip3 install mathx; import mathx",
    "python -m pip install numpy",
])
def test_a_shell_install_is_told_there_is_only_python_and_no_network(code):
    cell = prepare(code)
    assert not cell.runs and cell.note == note("code_shell_install") and cell.code == code


def test_a_keyword_before_the_next_statement_is_still_split():
    assert prepare("for i in range(3): pass print(i)").code == \
        "for i in range(3): pass\nprint(i)"


def test_split_but_still_wrong_is_told_how_to_write_it():
    cell = prepare("s = 'a' 'b' print(s) +")
    assert not cell.runs and "statements ran together at column 13" in cell.note


def test_a_block_header_after_a_block_header_has_no_safe_split():
    cell = prepare("while x: if y: pass")
    assert not cell.runs and cell.code == "while x: if y: pass"
    assert cell.note == ("SyntaxError: statements ran together at column 10: one statement per "
                         "line, with \\n between lines inside the JSON string, and blocks "
                         "indented by 4 spaces.")


def test_an_indented_cell_is_dedented_as_before():
    assert prepare("    x = 1\n    print(x)").code == "x = 1\nprint(x)"


class FakeSandbox:
    def run(self, code, timeout=None):
        from types import SimpleNamespace

        ns: dict = {}
        import contextlib
        import io

        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(code, "<cell>", "exec"), ns)
        return SimpleNamespace(stdout=out.getvalue(), exit_code=0, stderr="", error=None,
                               stdout_truncated=False, stderr_truncated=False, timed_out=False,
                               crashed=False, state_lost=False, files_changed=[])

    def close(self):
        pass


def test_a_run_whose_model_writes_one_line_code_completes():
    code = "total = 0 for i in range(10): total += i print(total)"
    model = ScriptedModel([step("CodeInterpreterTool", {"code": code}),
                           step("TaskCompleteTool", {"output": "45"})])
    result = Agent(model=model, tools=[core_tools()], sandbox_factory=FakeSandbox).run("sum")
    assert result.status == "completed" and result.answer == "45"
    record = result.steps[0]
    assert record.args == {"code": code}  # the step keeps the code as sent
    assert list(record.observation)[:2] == ["note", "ran"]  # the note comes first
    assert record.observation["ran"] == "total = 0\nfor i in range(10): total += i\nprint(total)"
    assert record.observation["stdout"] == "45\n" and "3 lines" in record.observation["note"]


def test_a_run_with_no_safe_split_says_what_to_do_without_running():
    model = ScriptedModel([step("CodeInterpreterTool", {"code": "while x: if y: pass"}),
                           step("TaskCompleteTool", {"output": "ok"})])
    result = Agent(model=model, tools=[core_tools()], sandbox_factory=FakeSandbox).run("q")
    observation = result.steps[0].observation
    assert observation["exit_code"] == 1 and "column 10" in observation["error"]
    assert result.steps[0].error is False  # a result of the code, like any SyntaxError
