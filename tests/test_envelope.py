"""The step protocol: a table of malformed and invalid replies, each with its outcome."""

import json

import pytest

from jsonagent import Toolset, tool
from jsonagent.envelope import Parsed, ReplyProblem, parse_reply, response_format, response_schema


@tool
def add(a: int, b: int = 0) -> int:
    """Add two integers."""
    return a + b


@tool
def search(query: str, limit: int = 5, tags: list[str] | None = None) -> list:
    """Search notes."""
    return []




@pytest.fixture(scope="module")
def toolset():
    return Toolset.build([_core(), add, search])


def _core():
    from jsonagent.tools.toolset import default_tools_path

    return default_tools_path()


GOOD = '{"thought": "t", "tool_name": "add", "args_list": {"a": 1, "b": 2}}'

# (id, raw reply, expected: ("ok", tool, args, repairs ⊇) | ("fail", stage, message fragment))
CASES = [
    # --- valid as sent
    ("plain", GOOD, ("ok", "add", {"a": 1, "b": 2}, [])),
    ("no_args_tool", '{"thought":"","tool_name":"GetTimeTools","args_list":{}}',
     ("ok", "GetTimeTools", {}, [])),
    ("unicode", '{"thought":"现在几点","tool_name":"TaskCompleteTool","args_list":{"output":"十点"}}',
     ("ok", "TaskCompleteTool", {"output": "十点"}, [])),
    ("whitespace", "\n\n  " + GOOD + "  \n", ("ok", "add", {"a": 1, "b": 2}, [])),
    ("float_integral_is_int", '{"thought":"","tool_name":"add","args_list":{"a":1.0}}',
     ("ok", "add", {"a": 1.0}, [])),
    # --- local repairs
    ("code_fence", "```json\n" + GOOD + "\n```", ("ok", "add", {"a": 1, "b": 2}, ["stripped_code_fence"])),
    ("bare_fence", "```\n" + GOOD + "\n```", ("ok", "add", {"a": 1, "b": 2}, ["stripped_code_fence"])),
    ("prose_before", "Sure! Here is my step: " + GOOD, ("ok", "add", {"a": 1, "b": 2}, ["extracted_object"])),
    ("prose_after", GOOD + "\nLet me know if that helps.", ("ok", "add", {"a": 1, "b": 2}, ["extracted_object"])),
    ("two_objects", GOOD + GOOD, ("ok", "add", {"a": 1, "b": 2}, ["extracted_object"])),
    ("think_block", "<think>I should add.</think>" + GOOD, ("ok", "add", {"a": 1, "b": 2}, ["stripped_think"])),
    ("single_quotes", "{'thought': 't', 'tool_name': 'add', 'args_list': {'a': 1}}",
     ("ok", "add", {"a": 1}, ["json_repair"])),
    ("python_literals", "{'thought': 't', 'tool_name': 'search', 'args_list': {'query': 'x', 'tags': None}}",
     ("ok", "search", {"query": "x", "tags": None}, ["json_repair"])),
    ("python_true", '{"thought": "t", "tool_name": "TaskCompleteTool", "args_list": {"output": "y"}, "ok": True}',
     ("ok", "TaskCompleteTool", {"output": "y"}, ["json_repair"])),
    ("trailing_comma", '{"thought": "t", "tool_name": "add", "args_list": {"a": 1,},}',
     ("ok", "add", {"a": 1}, ["json_repair"])),
    # JSON the repair had to close is a reply that was cut: never run, whatever its end said
    ("truncated_closers", '{"thought": "t", "tool_name": "add", "args_list": {"a": 1',
     ("fail", "cut", "nothing in it was run")),
    ("truncated_string", '{"thought": "t", "tool_name": "search", "args_list": {"query": "hel',
     ("fail", "cut", "nothing in it was run")),
    ("truncated_final_answer_is_reasked",
     '{"thought": "t", "tool_name": "TaskCompleteTool", "args_list": {"output": "The answer is 1',
     ("fail", "cut", "nothing in it was run")),
    ("braces_in_prose_first", "I will use {x} notation. " + GOOD,
     ("ok", "add", {"a": 1, "b": 2}, ["extracted_object"])),
    ("args_beside_envelope", '{"thought": "t", "tool_name": "GetTimeTools", "timezone": "Asia/Tokyo"}',
     ("ok", "GetTimeTools", {"timezone": "Asia/Tokyo"}, ["args_from_top_level:timezone"])),
    ("args_beside_empty_args_list", '{"thought": "t", "tool_name": "add", "args_list": {}, "a": 7}',
     ("ok", "add", {"a": 7}, ["args_from_top_level:a"])),
    ("unquoted_keys", '{thought: "t", tool_name: "add", args_list: {a: 1}}',
     ("ok", "add", {"a": 1}, ["json_repair"])),
    ("braces_in_string", '{"thought": "use {x}", "tool_name": "TaskCompleteTool", "args_list": {"output": "}{"}}',
     ("ok", "TaskCompleteTool", {"output": "}{"}, [])),
    ("alias_action", '{"thought": "t", "action": "add", "action_input": {"a": 3}}',
     ("ok", "add", {"a": 3}, ["alias:action->tool_name", "alias:action_input->args_list"])),
    ("alias_name_arguments", '{"thought": "t", "name": "add", "arguments": {"a": 3}}',
     ("ok", "add", {"a": 3}, ["alias:name->tool_name", "alias:arguments->args_list"])),
    ("alias_args", '{"thought": "t", "tool_name": "add", "args": {"a": 3}}',
     ("ok", "add", {"a": 3}, ["alias:args->args_list"])),
    ("alias_parameters", '{"thought": "t", "tool": "add", "parameters": {"a": 3}}',
     ("ok", "add", {"a": 3}, ["alias:tool->tool_name", "alias:parameters->args_list"])),
    ("alias_thoughts", '{"thoughts": "t", "tool_name": "add", "args_list": {"a": 3}}',
     ("ok", "add", {"a": 3}, ["alias:thoughts->thought"])),
    ("openai_function_shape", '{"function": {"name": "add", "arguments": "{\\"a\\": 4}"}}',
     ("ok", "add", {"a": 4}, ["unwrapped_function_call", "args_list_from_string"])),
    ("args_as_json_string", '{"thought": "t", "tool_name": "add", "args_list": "{\\"a\\": 5}"}',
     ("ok", "add", {"a": 5}, ["args_list_from_string"])),
    ("python_triple_quoted_code",
     '```json\n{"thought": "t", "tool_name": "CodeInterpreterTool", "args_list": {"code": """\n'
     'import math\nprint("a {b}", math.pi)\n"""}}\n```',
     ("ok", "CodeInterpreterTool", {"code": '\nimport math\nprint("a {b}", math.pi)\n'},
      ["stripped_code_fence", "triple_quoted_string"])),
    ("python_triple_single_quoted",
     "{'thought': 't', 'tool_name': 'search', 'args_list': {'query': " + "'" * 3 + "x\ny" + "'" * 3 + "}}",
     ("ok", "search", {"query": "x\ny"}, ["triple_quoted_string"])),
    ("triple_quotes_inside_a_valid_string_stay",
     '```json\n{"thought": "t", "tool_name": "CodeInterpreterTool", "args_list": {"code": "s = \'\'\'a\'\'\'"}}\n```',
     ("ok", "CodeInterpreterTool", {"code": "s = " + "'" * 3 + "a" + "'" * 3}, ["stripped_code_fence"])),
    ("missing_thought", '{"tool_name": "add", "args_list": {"a": 1}}',
     ("ok", "add", {"a": 1}, ["missing_thought"])),
    ("missing_args_for_no_arg_tool", '{"thought": "t", "tool_name": "GetTimeTools"}',
     ("ok", "GetTimeTools", {}, ["empty_args_list"])),
    ("null_args", '{"thought": "t", "tool_name": "GetTimeTools", "args_list": null}',
     ("ok", "GetTimeTools", {}, ["empty_args_list"])),
    ("extra_keys", '{"thought": "t", "tool_name": "add", "args_list": {"a": 1}, "confidence": 0.9}',
     ("ok", "add", {"a": 1}, ["dropped_keys:confidence"])),
    ("wrapped_in_list", "[" + GOOD + "]", ("ok", "add", {"a": 1, "b": 2}, ["unwrapped_list"])),
    ("tool_name_case", '{"thought": "t", "tool_name": "gettimetools", "args_list": {}}',
     ("ok", "GetTimeTools", {}, ["tool_name_case"])),
    ("tool_name_snake", '{"thought": "t", "tool_name": "Task_Complete_Tool", "args_list": {"output": "x"}}',
     ("ok", "TaskCompleteTool", {"output": "x"}, ["tool_name_case"])),
    # --- JSON that cannot be had
    ("empty", "", ("fail", "json", "empty reply")),
    ("only_whitespace", "   \n ", ("fail", "json", "empty reply")),
    ("prose_only", "I think the answer is 42.", ("fail", "json", "expected a JSON object, got text")),
    ("number", "42", ("fail", "json", "expected a JSON object, got integer")),
    ("string", '"hello"', ("fail", "json", "expected a JSON object, got string")),
    ("list_of_numbers", "[1, 2]", ("fail", "json", "expected a JSON object, got array")),
    ("null", "null", ("fail", "json", "expected a JSON object, got null")),
    ("lone_brace", "{", ("fail", "json", "invalid JSON")),
    ("deeply_nested", "[" * 100_000, ("fail", "json", "expected a JSON object")),
    ("deeply_nested_object", '{"a":' * 50_000, ("fail", "json", "")),
    # --- envelope
    ("no_tool_name", '{"thought": "t", "args_list": {}}', ("fail", "envelope", "/tool_name: required key is missing")),
    ("tool_name_number", '{"thought": "t", "tool_name": 7, "args_list": {}}',
     ("fail", "envelope", "/tool_name: expected string, got integer 7")),
    ("args_list_array", '{"thought": "t", "tool_name": "add", "args_list": [1, 2]}',
     ("fail", "envelope", "/args_list: expected object, got array")),
    ("thought_object", '{"thought": {"x": 1}, "tool_name": "add", "args_list": {"a": 1}}',
     ("fail", "envelope", "/thought: expected string, got object")),
    # --- tool lookup
    ("unknown_tool", '{"thought": "t", "tool_name": "WebSearch", "args_list": {}}',
     ("fail", "tool", 'unknown tool "WebSearch"; expected one of: GetTimeTools')),
    ("empty_tool_name", '{"thought": "t", "tool_name": "", "args_list": {}}', ("fail", "tool", "unknown tool")),
    # --- arguments, JSON Schema semantics
    ("string_for_int", '{"thought": "t", "tool_name": "add", "args_list": {"a": "5"}}',
     ("fail", "args", '/args_list/a: expected integer, got string "5"')),
    ("bool_for_int", '{"thought": "t", "tool_name": "add", "args_list": {"a": true}}',
     ("fail", "args", "/args_list/a: expected integer, got boolean true")),
    ("float_for_int", '{"thought": "t", "tool_name": "add", "args_list": {"a": 1.5}}',
     ("fail", "args", "/args_list/a: expected integer, got number 1.5")),
    ("missing_required", '{"thought": "t", "tool_name": "add", "args_list": {"b": 1}}',
     ("fail", "args", "/args_list/a: required argument is missing")),
    ("unknown_arg", '{"thought": "t", "tool_name": "add", "args_list": {"a": 1, "c": 2}}',
     ("fail", "args", "/args_list/c: unexpected argument; allowed: a, b")),
    ("nested_item_type", '{"thought": "t", "tool_name": "search", "args_list": {"query": "q", "tags": ["x", 3]}}',
     ("fail", "args", "/args_list/tags/1")),
    ("legacy_missing_required", '{"thought": "t", "tool_name": "TaskCompleteTool", "args_list": {}}',
     ("fail", "args", "/args_list/output: required argument is missing")),
    ("legacy_wrong_type", '{"thought": "t", "tool_name": "CodeInterpreterTool", "args_list": {"code": 1}}',
     ("fail", "args", "/args_list/code: expected string, got integer 1")),
    ("two_errors", '{"thought": "t", "tool_name": "add", "args_list": {"a": "x", "b": false}}',
     ("fail", "args", "/args_list/b")),
]


@pytest.mark.parametrize("raw,expected", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_reply_table(toolset, raw, expected):
    got = parse_reply(raw, toolset)
    if expected[0] == "ok":
        _, tool_name, args, repairs = expected
        assert isinstance(got, Parsed), got
        assert got.step.tool_name == tool_name
        assert got.step.args_list == args
        for r in repairs:
            assert r in got.repairs, (r, got.repairs)
        if not repairs:
            assert got.repairs == []
    else:
        _, stage, fragment = expected
        assert isinstance(got, ReplyProblem), got
        assert got.stage == stage
        assert fragment in got.message, got.message


def test_table_is_large_enough():
    assert len(CASES) >= 40


def test_problem_for_model_names_the_tools(toolset):
    problem = parse_reply("nope", toolset)
    text = problem.for_model(toolset)
    assert "rejected" in text and "add" in text and "TaskCompleteTool" in text


def test_response_schema_one_alternative_per_tool(toolset):
    schema = response_schema(toolset, thought_max=200)
    alts = schema["anyOf"]
    assert [a["properties"]["tool_name"]["const"] for a in alts] == toolset.names
    add_alt = alts[toolset.names.index("add")]
    assert add_alt["properties"]["args_list"]["required"] == ["a"]
    assert add_alt["properties"]["thought"]["maxLength"] == 200
    assert add_alt["additionalProperties"] is False


def test_response_schema_accepts_exactly_valid_steps(toolset):
    from jsonschema import Draft202012Validator

    v = Draft202012Validator(response_schema(toolset))
    assert v.is_valid(json.loads(GOOD))
    assert not v.is_valid({"thought": "", "tool_name": "add", "args_list": {"a": "1"}})
    assert not v.is_valid({"thought": "", "tool_name": "nope", "args_list": {}})


def test_response_format_modes(toolset):
    assert response_format("prompt", toolset) is None
    assert response_format("object", toolset) == {"type": "json_object"}
    fmt = response_format("schema", toolset)
    assert fmt["type"] == "json_schema" and "anyOf" in fmt["json_schema"]["schema"]


def test_recursive_tool_schema_nests_inside_the_response_schema():
    from jsonschema import Draft202012Validator
    from pydantic import BaseModel

    class Node(BaseModel):
        name: str
        children: list["Node"] = []

    @tool
    def count_nodes(tree: Node) -> int:
        """Count the nodes of a tree."""
        return 1

    ts = Toolset.build([count_nodes])
    v = Draft202012Validator(response_schema(ts))
    good = {"thought": "", "tool_name": "count_nodes",
            "args_list": {"tree": {"name": "a", "children": [{"name": "b"}]}}}
    assert v.is_valid(good)
    bad = {"thought": "", "tool_name": "count_nodes",
           "args_list": {"tree": {"name": "a", "children": [{"name": 3}]}}}
    assert not v.is_valid(bad)
    assert isinstance(parse_reply(json.dumps(good), ts), Parsed)


def test_a_reply_steered_to_its_close_is_never_acted_on(toolset):
    """The local decoder steers a runaway reply to a valid close in its last tokens
    (`unended`): its JSON is whole, yet no call or answer in it is the model's to the end."""
    final = '{"thought": "t", "tool_name": "TaskCompleteTool", "args_list": {"output": "The ans"}}'
    assert isinstance(parse_reply(final, toolset), Parsed)
    step = '{"thought": "t", "tool_name": "search", "args_list": {"query": "hel"}}'
    for reply in (final, step):
        problem = parse_reply(reply, toolset, cut=True, unended=True)
        assert isinstance(problem, ReplyProblem) and problem.stage == "cut"
        assert "cut off at the length limit" in problem.message


def test_a_reply_at_its_token_cap_with_whole_json_is_a_finished_one(toolset):
    step = '{"thought": "t", "tool_name": "search", "args_list": {"query": "hello"}}'
    parsed = parse_reply(step, toolset, cut=True)
    assert isinstance(parsed, Parsed) and parsed.calls[0].args == {"query": "hello"}
    cut = parse_reply(step[:-12], toolset, cut=True)  # '..."query": "he'
    assert isinstance(cut, ReplyProblem) and cut.stage == "cut"
    assert "cut off at the length limit" in cut.message


def test_a_stream_that_stopped_before_its_end_is_never_acted_on_even_when_whole(toolset):
    step = '{"thought": "t", "tool_name": "search", "args_list": {"query": "hello"}}'
    problem = parse_reply(step, toolset, unended=True)
    assert isinstance(problem, ReplyProblem) and problem.stage == "cut"
    assert "stopped before it ended" in problem.message


def test_every_call_of_a_cut_parallel_step_is_refused_with_it(toolset):
    """The first call is whole; the second was cut: neither runs."""
    two = ('{"thought": "t", "calls": [{"tool_name": "search", "args_list": {"query": "a"}}, '
           '{"tool_name": "add", "args_list": {"a": 1, "b": 10')
    for cut in (False, True):
        problem = parse_reply(two, toolset, cut=cut, most=2)
        assert isinstance(problem, ReplyProblem) and problem.stage == "cut", problem
