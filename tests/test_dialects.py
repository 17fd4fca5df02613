"""The two text dialects (ReAct and PAUSE) as input to the envelope, and the react prompt style."""

import json

import pytest

from jsonagent import Agent, AgentConfig, Toolset, tool
from jsonagent.envelope import Parsed, ReplyProblem, parse_reply
from jsonagent.prompt import ReactStyle, prompt_style, system_prompt
from jsonagent.state import Message
from jsonagent.testing import ScriptedModel, step


@tool
def lookup(city: str) -> str:
    """Look up a city."""
    return f"{city}: 12 degrees"


@tool
def add(a: int, b: int = 0) -> int:
    """Add two integers."""
    return a + b


@tool
def count(n: int) -> int:
    """Count to n."""
    return n


@pytest.fixture(scope="module")
def toolset():
    from jsonagent.tools.toolset import core_tools

    return Toolset.build([*core_tools(), lookup, add, count])


CODE = "CodeInterpreterTool"
DONE = "TaskCompleteTool"
OBS = "dropped_hallucinated_observation"
EXTRA = "ignored_extra_actions"

# (id, raw reply, expected: ("ok", tool, args, repairs ⊇) | ("fail", stage, message fragments))
REACT = [
    # --- good replies
    ("json_input", 'Thought: weather?\nAction: lookup\nAction Input: {"city": "Oslo"}',
     ("ok", "lookup", {"city": "Oslo"}, ["dialect:react"])),
    ("final_answer", "Thought: I now know the final answer\nFinal Answer: 42",
     ("ok", DONE, {"output": "42"}, ["dialect:react"])),
    ("final_multiline", "Thought: done\nFinal Answer: line one\nline two",
     ("ok", DONE, {"output": "line one\nline two"}, ["dialect:react"])),
    ("no_input_no_params", "Thought: time\nAction: GetTimeTools\nAction Input: {}",
     ("ok", "GetTimeTools", {}, ["dialect:react"])),
    ("no_input_line_optional_params", "Thought: time\nAction: GetTimeTools",
     ("ok", "GetTimeTools", {}, ["dialect:react"])),
    ("python_literal", "Thought: t\nAction: lookup\nAction Input: {'city': 'Oslo'}",
     ("ok", "lookup", {"city": "Oslo"}, ["dialect:react", "python_literal_input"])),
    ("bare_string", "Thought: t\nAction: lookup\nAction Input: Oslo",
     ("ok", "lookup", {"city": "Oslo"}, ["dialect:react", "bare_input"])),
    ("quoted_string", 'Thought: t\nAction: lookup\nAction Input: "Oslo"',
     ("ok", "lookup", {"city": "Oslo"}, ["bare_input"])),
    ("bare_number_fills_int", "Thought: t\nAction: count\nAction Input: 7",
     ("ok", "count", {"n": 7}, ["bare_input"])),
    ("bare_fills_only_required", "Thought: t\nAction: add\nAction Input: 5",
     ("ok", "add", {"a": 5}, ["bare_input"])),
    ("fenced_code_input", "Thought: run\nAction: CodeInterpreterTool\nAction Input: ```python\nprint(2**10)\n```",
     ("ok", CODE, {"code": "print(2**10)"}, ["bare_input"])),
    ("multiline_json_input", 'Thought: t\nAction: add\nAction Input: {\n  "a": 1,\n  "b": 2\n}',
     ("ok", "add", {"a": 1, "b": 2}, ["dialect:react"])),
    ("bold_markers", '**Thought:** t\n**Action:** lookup\n**Action Input:** {"city": "Rome"}',
     ("ok", "lookup", {"city": "Rome"}, ["dialect:react"])),
    ("lowercase_markers", 'thought: t\naction: lookup\naction input: {"city": "Rome"}',
     ("ok", "lookup", {"city": "Rome"}, ["dialect:react"])),
    ("name_in_backticks", 'Thought: t\nAction: `lookup`\nAction Input: {"city": "Rome"}',
     ("ok", "lookup", {"city": "Rome"}, ["dialect:react"])),
    ("name_in_a_sentence", 'Thought: t\nAction: Call lookup\nAction Input: {"city": "Rome"}',
     ("ok", "lookup", {"city": "Rome"}, ["tool_name_in_text"])),
    ("name_case", 'Thought: t\nAction: LOOKUP\nAction Input: {"city": "Rome"}',
     ("ok", "lookup", {"city": "Rome"}, ["tool_name_case"])),
    ("no_thought", 'Action: lookup\nAction Input: {"city": "Rome"}',
     ("ok", "lookup", {"city": "Rome"}, ["missing_thought"])),
    ("prose_before_is_thought", 'Let me look it up.\nAction: lookup\nAction Input: {"city": "Rome"}',
     ("ok", "lookup", {"city": "Rome"}, ["dialect:react"])),
    ("think_block", '<think>hmm</think>Thought: t\nAction: lookup\nAction Input: {"city": "Rome"}',
     ("ok", "lookup", {"city": "Rome"}, ["dialect:react"])),
    ("repaired_json_input", 'Thought: t\nAction: add\nAction Input: {"a": 1 "b": 2}',
     ("ok", "add", {"a": 1, "b": 2}, ["json_repair"])),
    # an input the repair had to close was cut: it is never run, whatever the reply's end
    ("unclosed_json_input", 'Thought: t\nAction: add\nAction Input: {"a": 1, "b": 10',
     ("fail", "cut", ["nothing in it was run"])),
    ("action_over_a_json_step", 'Thought: t\nAction:\n{"thought": "t", "tool_name": "add", "args_list": {"a": 1}}',
     ("ok", "add", {"a": 1}, ["extracted_object"])),
    # --- the usual defects, repaired
    ("hallucinated_observation",
     'Thought: t\nAction: lookup\nAction Input: {"city": "Oslo"}\nObservation: 30 degrees\n'
     "Thought: I now know the final answer\nFinal Answer: 30 degrees",
     ("ok", "lookup", {"city": "Oslo"}, ["dialect:react", OBS])),
    ("two_actions", 'Thought: t\nAction: lookup\nAction Input: {"city": "Oslo"}\n'
     'Thought: and\nAction: add\nAction Input: {"a": 1}',
     ("ok", "lookup", {"city": "Oslo"}, [EXTRA])),
    ("action_then_final", 'Thought: t\nAction: lookup\nAction Input: {"city": "Oslo"}\nFinal Answer: 12',
     ("ok", "lookup", {"city": "Oslo"}, [EXTRA])),
    ("final_tool_then_final_answer", "Thought: I know it\nAction: TaskCompleteTool\nFinal Answer: Monday",
     ("ok", DONE, {"output": "Monday"}, ["final_answer_after_final_action"])),
    ("final_answer_inside_thought", "Thought: I know it now. Final Answer: 42",
     ("ok", DONE, {"output": "42"}, ["final_answer_in_thought"])),
    ("echoed_observation_first", "Observation: 12 degrees\nThought: done\nFinal Answer: 12 degrees",
     ("ok", DONE, {"output": "12 degrees"}, ["dialect:react"])),
    # --- the usual defects, re-asked
    ("missing_input", "Thought: t\nAction: lookup",
     ("fail", "args", ["line 2", "no input for lookup", "requires city", "Action Input"])),
    ("unknown_tool", 'Thought: t\nAction: search_web\nAction Input: {"q": "x"}',
     ("fail", "tool", ["line 2", "unknown tool", "search_web", "lookup"])),
    ("bad_args", 'Thought: t\nAction: add\nAction Input: {"a": "one"}',
     ("fail", "args", ["/args_list/a"])),
    ("bare_input_ambiguous", "Thought: t\nAction: GetTimeTools\nAction Input: UTC",
     ("fail", "args", ["line 2", "not a JSON object", "timezone", "format"])),
    ("input_without_action", 'Thought: t\nAction Input: {"city": "Oslo"}',
     ("fail", "envelope", ["line 2", "without an 'Action: NAME' line"])),
    ("empty_final_answer", "Thought: done\nFinal Answer:",
     ("fail", "args", ["line 2", "'Final Answer:' is empty"])),
    ("thought_only", "Thought: the answer is probably 42",
     ("fail", "envelope", ["line 1", "no 'Action:' line", "Final Answer"])),
    ("observation_only_invented",
     'Thought: t\nAction: lookup\nObservation: 30 degrees',
     ("fail", "args", ["line 2", "requires city"])),
]

PAUSE = [
    # --- good replies
    ("bare_string", "Thought: weather\nAction: lookup: Oslo\nPAUSE",
     ("ok", "lookup", {"city": "Oslo"}, ["dialect:pause", "bare_input"])),
    ("no_pause_line", "Thought: weather\nAction: lookup: Oslo",
     ("ok", "lookup", {"city": "Oslo"}, ["dialect:pause", "bare_input"])),
    ("answer", "Thought: I know\nAnswer: 12 degrees",
     ("ok", DONE, {"output": "12 degrees"}, ["dialect:pause"])),
    ("answer_only", "Answer: 12",
     ("ok", DONE, {"output": "12"}, ["dialect:pause", "missing_thought"])),
    ("json_input", 'Thought: t\nAction: add: {"a": 2, "b": 3}\nPAUSE',
     ("ok", "add", {"a": 2, "b": 3}, ["dialect:pause"])),
    ("python_dict_input", "Thought: t\nAction: add: {'a': 2}\nPAUSE",
     ("ok", "add", {"a": 2}, ["python_literal_input"])),
    ("bare_number", "Thought: t\nAction: count: 9\nPAUSE",
     ("ok", "count", {"n": 9}, ["bare_input"])),
    ("bare_fills_only_required", "Thought: t\nAction: add: 4\nPAUSE",
     ("ok", "add", {"a": 4}, ["bare_input"])),
    ("number_into_string_param", "Thought: t\nAction: lookup: 1984\nPAUSE",
     ("ok", "lookup", {"city": "1984"}, ["bare_input"])),
    ("code", "Thought: compute\nAction: CodeInterpreterTool: print(4 * 7 / 3)\nPAUSE",
     ("ok", CODE, {"code": "print(4 * 7 / 3)"}, ["dialect:pause", "bare_input"])),
    ("multiline_code", "Thought: c\nAction: CodeInterpreterTool: x = 2\nprint(x ** 8)\nPAUSE",
     ("ok", CODE, {"code": "x = 2\nprint(x ** 8)"}, ["bare_input"])),
    ("fenced_code", "Thought: c\nAction: CodeInterpreterTool:\n```python\nprint(1)\n```\nPAUSE",
     ("ok", CODE, {"code": "print(1)"}, ["bare_input"])),
    ("ask_human", "Thought: ask\nAction: AskHumanHelpTool: What is your name?\nPAUSE",
     ("ok", "AskHumanHelpTool", {"question": "What is your name?"}, ["bare_input"])),
    ("no_params_no_input", "Thought: time\nAction: GetTimeTools:\nPAUSE",
     ("ok", "GetTimeTools", {}, ["dialect:pause"])),
    ("pause_lowercase", "Thought: w\nAction: lookup: Oslo\npause",
     ("ok", "lookup", {"city": "Oslo"}, ["dialect:pause"])),
    ("name_case", "Thought: w\nAction: Lookup: Oslo\nPAUSE",
     ("ok", "lookup", {"city": "Oslo"}, ["tool_name_case"])),
    ("input_with_colons", "Thought: w\nAction: lookup: Oslo: Norway\nPAUSE",
     ("ok", "lookup", {"city": "Oslo: Norway"}, ["bare_input"])),
    ("thought_spans_lines", "Thought: first\nsecond\nAction: lookup: Oslo\nPAUSE",
     ("ok", "lookup", {"city": "Oslo"}, ["dialect:pause"])),
    # --- the usual defects, repaired
    ("hallucinated_observation",
     "Thought: w\nAction: lookup: Oslo\nPAUSE\nObservation: 30 degrees\nAnswer: 30 degrees",
     ("ok", "lookup", {"city": "Oslo"}, ["dialect:pause", OBS])),
    ("two_actions", "Thought: w\nAction: lookup: Oslo\nPAUSE\nAction: lookup: Rome\nPAUSE",
     ("ok", "lookup", {"city": "Oslo"}, [EXTRA])),
    ("action_then_answer", "Thought: w\nAction: lookup: Oslo\nAnswer: 12",
     ("ok", "lookup", {"city": "Oslo"}, [EXTRA])),
    # --- the usual defects, re-asked
    ("missing_input", "Thought: w\nAction: lookup:\nPAUSE",
     ("fail", "args", ["line 2", "no input for lookup", "requires city", "Action: lookup: INPUT"])),
    ("unknown_tool", "Thought: w\nAction: wikipedia: Oslo\nPAUSE",
     ("fail", "tool", ["line 2", "unknown tool", "wikipedia"])),
    ("bare_input_ambiguous", "Thought: w\nAction: GetTimeTools: UTC\nPAUSE",
     ("fail", "args", ["line 2", "not a JSON object", "GetTimeTools takes 2 parameters"])),
    ("bad_bare_type", "Thought: w\nAction: count: many\nPAUSE",
     ("fail", "args", ["/args_list/n"])),
    ("empty_answer", "Thought: done\nAnswer:",
     ("fail", "args", ["line 2", "'Answer:' is empty"])),
]


def _check(toolset, raw, expected):
    got = parse_reply(raw, toolset)
    if expected[0] == "ok":
        _, name, args, repairs = expected
        assert isinstance(got, Parsed), got
        assert (got.step.tool_name, got.step.args_list) == (name, args)
        assert set(repairs) <= set(got.repairs), got.repairs
    else:
        _, stage, fragments = expected
        assert isinstance(got, ReplyProblem), got
        assert got.stage == stage, got.message
        for fragment in fragments:
            assert fragment in got.message, got.message


@pytest.mark.parametrize("raw,expected", [c[1:] for c in REACT], ids=[c[0] for c in REACT])
def test_react_table(toolset, raw, expected):
    _check(toolset, raw, expected)


@pytest.mark.parametrize("raw,expected", [c[1:] for c in PAUSE], ids=[c[0] for c in PAUSE])
def test_pause_table(toolset, raw, expected):
    _check(toolset, raw, expected)


def test_tables_are_large_enough():
    assert len(REACT) >= 20 and len(PAUSE) >= 20


def test_each_repair_is_counted_once_under_its_own_name(toolset):
    raw = ('Thought: t\nAction: lookup\nAction Input: Oslo\nObservation: x\n'
           'Action: add\nAction Input: {"a": 1}')
    got = parse_reply(raw, toolset)
    assert got.repairs == ["dialect:react", OBS, "bare_input"]


def test_a_final_answer_under_the_final_tool_is_not_an_extra_action(toolset):
    got = parse_reply("Thought: t\nAction: TaskCompleteTool\nFinal Answer: Monday", toolset)
    assert got.repairs == ["dialect:react", "final_answer_after_final_action"] and got.note is None
    other = parse_reply("Thought: t\nAction: GetTimeTools\nFinal Answer: Monday", toolset)
    assert other.step.tool_name == "GetTimeTools" and "ignored_extra_actions" in other.repairs


def test_the_model_is_told_what_was_ignored_or_dropped(toolset):
    two = parse_reply('Thought: t\nAction: lookup\nAction Input: {"city": "Oslo"}\n'
                      'Action: add\nAction Input: {"a": 1}\nFinal Answer: 3', toolset)
    assert "3 actions" in two.note and "add, Final Answer" in two.note
    dropped = parse_reply("Thought: w\nAction: lookup: Oslo\nObservation: sunny", toolset)
    assert "line 3" in dropped.note and "dropped" in dropped.note
    assert parse_reply("Thought: w\nAction: lookup: Oslo", toolset).note is None


def test_json_replies_never_take_the_dialect_path(toolset):
    got = parse_reply(json.dumps(step("lookup", {"city": "Action: x"}, "Thought: y")), toolset)
    assert got.repairs == [] and got.step.args_list == {"city": "Action: x"}


def test_a_typed_final_answer_takes_a_json_object():
    from pydantic import BaseModel

    class Weather(BaseModel):
        city: str
        degrees: int

    ts = Toolset.build([lookup], output_type=Weather)
    got = parse_reply('Thought: done\nFinal Answer: {"city": "Oslo", "degrees": 12}', ts)
    assert got.step.tool_name == DONE and got.step.args_list == {"city": "Oslo", "degrees": 12}
    assert "as one JSON object" in system_prompt(ts, "react")


# --- the react prompt style


def test_react_system_prompt_lists_tools_with_schemas_and_the_format(toolset):
    text = system_prompt(toolset, "react")
    assert "lookup: Look up a city. Parameters: {" in text and '"required": ["city"]' in text
    for line in ("Thought:", "Action:", "Action Input:", "Observation:", "Final Answer:"):
        assert line in text
    assert DONE not in text  # Final Answer stands for it
    assert system_prompt(toolset, "react") == text  # byte-identical: the prefix cache stays warm


def test_react_render_turns_stored_json_into_text():
    history = [
        Message(role="system", content="S"), Message(role="user", content="Q"),
        Message(role="assistant", content=json.dumps(step("lookup", {"city": "Oslo"}, "need it"))),
        Message(role="observation", content=json.dumps({"tool_name": "lookup", "response": "12",
                                                        "note": "careful"})),
        Message(role="assistant", content=json.dumps(step(CODE, {"code": "1"}))),
        Message(role="observation", content=json.dumps({"tool_name": CODE, "response": {"stdout": "1"}})),
        Message(role="assistant", content=json.dumps(step(DONE, {"output": "12 degrees"}, "know it"))),
        Message(role="assistant", content="not a step"),
    ]
    wire = ReactStyle().render(history)
    assert [m["content"] for m in wire] == [
        "S", "Q",
        'Thought: need it\nAction: lookup\nAction Input: {"city": "Oslo"}',
        "Observation: 12\nNote: careful",
        f'Action: {CODE}\nAction Input: {{"code": "1"}}',
        'Observation: {"stdout": "1"}',
        "Thought: know it\nFinal Answer: 12 degrees",
        "not a step",
    ]
    assert [m["role"] for m in wire] == ["system", "user", "assistant", "user", "assistant", "user",
                                         "assistant", "assistant"]


def test_styles_own_stop_format_and_reask(toolset):
    react, json_style = prompt_style("react"), prompt_style("json")
    assert react.stop == ["Observation:"] and json_style.stop is None
    assert react.response_format("schema", toolset) is None
    assert json_style.response_format("object", toolset) == {"type": "json_object"}
    problem = parse_reply("Thought: t\nAction: lookup", toolset)
    text = react.reask(problem, toolset)
    assert text.startswith("Your last reply was rejected: line 2: no input for lookup")
    assert "Action Input:" in text and "Final Answer:" in text and "{\"thought\"" not in text


def test_a_react_run_sends_stop_no_format_and_records_json_steps(tmp_path):
    model = ScriptedModel([
        "Thought: look\nAction: lookup\n",  # missing input: re-asked in the react style
        'Thought: look\nAction: lookup\nAction Input: {"city": "Oslo"}\nAction: add\nAction Input: 1',
        "Thought: I now know the final answer\nFinal Answer: 12 degrees",
    ])
    agent = Agent(model=model, tools=[lookup], config=AgentConfig(prompt_style="react"),
                  transcript=tmp_path / "t.jsonl")
    result = agent.run("Weather in Oslo?")
    assert result.status == "completed" and result.answer == "12 degrees"
    assert [r["stop"] for r in model.requests] == [["Observation:"]] * 3
    assert [r["response_format"] for r in model.requests] == [None] * 3
    reask = model.requests[1]["messages"][-1]["content"]
    assert "line 2: no input for lookup" in reask and "Action Input:" in reask
    last = model.requests[2]["messages"]
    assert last[0]["content"].startswith("Solve the user's task")
    assert last[-2]["content"] == 'Thought: look\nAction: lookup\nAction Input: {"city": "Oslo"}'
    assert last[-1]["content"].startswith("Observation: Oslo: 12 degrees\nNote: Your reply had 2 actions")
    assert result.steps[0].repairs == ["dialect:react", EXTRA]
    from jsonagent import read_journal

    taken = [e for e in read_journal(tmp_path / "t.jsonl") if e.type == "step"]
    assert [(e.tool, e.args) for e in taken] == [("lookup", {"city": "Oslo"}),
                                                 (DONE, {"output": "12 degrees"})]


def test_json_style_reads_a_react_reply_too():
    model = ScriptedModel(["Thought: done\nFinal Answer: 4"])
    result = Agent(model=model, tools=[add]).run("2+2?")
    assert result.answer == "4" and result.steps[0].repairs == ["dialect:react"]
    assert model.requests[0]["stop"] is None
    assert model.requests[0]["response_format"] == {"type": "json_object"}


def test_cli_prompt_style_react_sends_the_stop_to_an_endpoint(tmp_path):
    import os
    import subprocess
    import sys

    from openai_stub import OpenAIStub

    replies = ["Thought: time\nAction: GetTimeTools\nAction Input: {}", "Final Answer: noon"]
    with OpenAIStub(replies) as stub:
        proc = subprocess.run(
            [sys.executable, "-m", "jsonagent", "run", "What time is it?", "--model", "stub-model",
             "--base-url", stub.url, "--prompt-style", "react", "--output", "json"],
            capture_output=True, text=True, timeout=60,
            env={**os.environ, "OPENAI_API_KEY": "sk-cli"})
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["answer"] == "noon" and result["steps"][0]["repairs"] == ["dialect:react"]
    first, second = (r["body"] for r in stub.requests)
    assert first["stop"] == ["Observation:"] and "response_format" not in first
    assert first["messages"][0]["content"].startswith("Solve the user's task")
    assert second["messages"][-1]["content"].startswith("Observation: {")


def test_indented_code_lines_are_not_markers(toolset):
    raw = "Thought: c\nAction: CodeInterpreterTool: def f():\n    answer: int = 5\n    return answer\nprint(f())"
    got = parse_reply(raw, toolset)
    assert got.step.args_list == {"code": "def f():\n    answer: int = 5\n    return answer\nprint(f())"}
