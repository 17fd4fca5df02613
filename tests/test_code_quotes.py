"""A `"` left unescaped in a code string, the commonest way a small model breaks its JSON
through an endpoint (round 6: `print("hi")` written into the string as it stands). Such a
reply is repaired when escaping those quotes gives code that compiles; otherwise it is
re-asked with a precise message, and the broken code never runs."""

from __future__ import annotations

import pytest

from jsonagent import Agent, core_tools
from jsonagent.envelope import Parsed, ReplyProblem, parse_reply
from jsonagent.testing import ScriptedModel, step
from jsonagent.tools.toolset import Toolset

TOOLS = Toolset.build([core_tools()])
HEAD = '{"thought": "compute it", "tool_name": "CodeInterpreterTool", "args_list": {"code": "'


@pytest.mark.parametrize("code,then,expected", [
    ('print("hello")', '"}}', 'print("hello")'),
    ('x = "a"\\nprint(x)', '"}}', 'x = "a"\nprint(x)'),
    ('d = {"k": 1}\\nprint(d["k"])', '"}}', 'd = {"k": 1}\nprint(d["k"])'),
    ("s = 'say \"hi\"'\\nprint(s, \"!\")", '"}}', "s = 'say \"hi\"'\nprint(s, \"!\")"),
    ('print(f"{1+1} items")', '"}} ', 'print(f"{1+1} items")'),
    ('import json\\nprint(json.dumps({"a": [1, 2]}))', '"} }', 'import json\nprint(json.dumps({"a": [1, 2]}))'),
])
def test_a_code_string_broken_by_its_quotes_is_read_again(code, then, expected):
    parsed = parse_reply(HEAD + code + then, TOOLS)
    assert isinstance(parsed, Parsed), parsed.message
    assert parsed.step.args_list == {"code": expected}
    assert parsed.repairs == ["code_quotes_escaped"]


def test_the_code_may_come_before_the_thought():
    raw = ('{"tool_name": "CodeInterpreterTool", "args_list": {"code": "print("a", "b")"}, '
           '"thought": "both"}')
    parsed = parse_reply(raw, TOOLS)
    assert isinstance(parsed, Parsed) and parsed.step.args_list["code"] == 'print("a", "b")'
    assert parsed.step.thought == "both"


@pytest.mark.parametrize("code", ['print("hello)', 'x = "a\\nprint(x"', 'print("a" "b" c")'])
def test_no_reading_that_compiles_is_a_precise_reask(code):
    parsed = parse_reply(HEAD + code + '"}}', TOOLS)
    assert isinstance(parsed, ReplyProblem) and parsed.stage == "json"
    assert "holds a \" that ends its string early" in parsed.message
    assert 'inside the code as \\"' in parsed.message


def test_code_whose_quotes_are_escaped_or_that_has_none_is_left_to_the_usual_repairs():
    assert parse_reply(HEAD + 'print(\\"ok\\")"}}', TOOLS).repairs == []
    cut = parse_reply(HEAD + "print(1)", TOOLS)  # cut short: no quote of the code's own
    assert "code_quotes_escaped" not in (cut.repairs or [])


def test_broken_code_is_not_run_and_the_reask_gets_it_right():
    ran = []

    class Watch:
        def before_tool(self, state, call):
            ran.append(call.args.get("code"))

    broken = HEAD + 'print("hello)"}}'
    model = ScriptedModel([broken, step("CodeInterpreterTool", {"code": 'print("hello")'}),
                           step("TaskCompleteTool", {"output": "hello"})])
    result = Agent(model=model, tools=[core_tools()], hooks=[Watch()]).run("say hello")
    assert result.status == "completed" and result.stats.reasks == 1
    assert ran == ['print("hello")'] and result.steps[0].observation["stdout"] == "hello\n"
    assert "ends its string early" in model.requests[1]["messages"][-1]["content"]
