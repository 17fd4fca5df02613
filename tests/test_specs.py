"""Tool specs: three dialects, Python type names, meta-schema errors, argument validation."""

import json
import os

import pytest

from jsonagent import SpecError, ToolSpec, load_tools
from jsonagent.tools.toolset import default_tools_path

SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
          "required": ["city"]}


def test_openai_dialect():
    spec = ToolSpec.from_dict({"type": "function", "function": {
        "name": "weather", "description": "Forecast.", "parameters": SCHEMA}})
    assert spec.name == "weather" and spec.description == "Forecast."
    assert spec.parameters["required"] == ["city"]


def test_plain_dialect():
    spec = ToolSpec.from_dict({"name": "weather", "parameters": SCHEMA})
    assert spec.parameters["properties"]["days"] == {"type": "integer"}


def test_plain_dialect_without_parameters_takes_no_arguments():
    spec = ToolSpec.from_dict({"name": "ping"})
    assert spec.validate_args({}) == []
    assert spec.validate_args({"x": 1})[0].path == "/x"


def test_the_fast_path_for_plain_arguments_agrees_with_jsonschema():
    spec = ToolSpec.from_dict({"name": "calc", "parameters": {"type": "object", "properties": {
        "n": {"type": "integer"}, "x": {"type": "number", "description": "d"},
        "s": {"type": "string"}, "b": {"type": "boolean", "default": False}}, "required": ["n"]}})
    assert spec._plain is not None
    cases = [{"n": 1}, {"n": 1, "x": 2, "s": "a", "b": True}, {"n": 1, "x": 2.5}, {"n": 3.0},
             {"n": True}, {"n": 1, "x": False}, {"n": 1, "b": 0}, {"n": "1"}, {"n": None}, {},
             {"n": 1, "extra": 1}, [], "n", None, {"n": 1, "s": ["a"]}, {"n": 2**70}]
    for args in cases:
        full = sorted(spec._validator.iter_errors(args), key=lambda e: list(e.absolute_path))
        assert bool(spec.validate_args(args)) == bool(full), args
    assert spec.validate_args({"n": True})[0].message == "expected integer, got boolean true"


def test_the_fast_path_leaves_constrained_schemas_to_jsonschema():
    for prop in ({"type": "string", "enum": ["a"]}, {"type": "string", "pattern": "^a$"},
                 {"type": "integer", "minimum": 0}, {"type": ["string", "null"]},
                 {"type": "array"}, {"anyOf": [{"type": "string"}]}):
        spec = ToolSpec.from_dict({"name": "t", "parameters": {
            "type": "object", "properties": {"p": prop}}})
        assert spec._plain is None, prop


def test_legacy_dialect_with_python_type_names():
    spec = ToolSpec.from_dict({"name": "calc", "description": "d", "parameters": [
        {"name": "a", "type": "int", "description": "first"},
        {"name": "b", "type": "float"},
        {"name": "opts", "type": "dict"},
        {"name": "items", "type": "list"},
        {"name": "pair", "type": "tuple"},
        {"name": "flag", "type": "bool"},
        {"name": "label", "type": "str"},
        {"name": "anything", "type": "any"},
    ], "required": ["a"], "return": {"type": "float", "description": "sum"}})
    props = spec.parameters["properties"]
    assert [props[k].get("type") for k in props] == [
        "integer", "number", "object", "array", "array", "boolean", "string", None]
    assert props["a"]["description"] == "first"
    assert spec.parameters["required"] == ["a"]
    assert spec.returns == {"type": "number", "description": "sum"}
    assert spec.validate_args({"a": 1, "anything": [1, "x"]}) == []


def test_legacy_without_required_requires_every_parameter():
    spec = ToolSpec.from_dict({"name": "t", "parameters": [{"name": "x", "type": "string"}]})
    assert spec.parameters["required"] == ["x"]


def test_python_type_names_in_nested_json_schema():
    spec = ToolSpec.from_dict({"name": "t", "parameters": {"type": "dict", "properties": {
        "type": {"type": "str"},  # a property *named* type
        "xs": {"type": "list", "items": {"type": "int"}},
        "u": {"anyOf": [{"type": "float"}, {"type": "None" if False else "null"}]},
    }}})
    p = spec.parameters
    assert p["type"] == "object"
    assert p["properties"]["type"] == {"type": "string"}
    assert p["properties"]["xs"] == {"type": "array", "items": {"type": "integer"}}
    assert p["properties"]["u"]["anyOf"][0] == {"type": "number"}


def test_core_function_json_loads_in_legacy_dialect():
    specs = load_tools(default_tools_path())
    assert [s.name for s in specs] == ["GetTimeTools", "AskHumanHelpTool", "TaskCompleteTool",
                                       "CodeInterpreterTool"]
    raw = json.loads(default_tools_path().read_text())
    assert all(isinstance(item["parameters"], list) for item in raw)


# --- argument validation: JSON Schema semantics, no coercion

@pytest.fixture
def weather():
    return ToolSpec.from_dict({"name": "weather", "parameters": SCHEMA})


@pytest.mark.parametrize("args,path,fragment", [
    ({"city": "Oslo", "days": "5"}, "/days", 'expected integer, got string "5"'),
    ({"city": "Oslo", "days": True}, "/days", "expected integer, got boolean true"),
    ({"city": "Oslo", "days": 2.5}, "/days", "expected integer, got number 2.5"),
    ({"city": 5}, "/city", "expected string, got integer 5"),
    ({"days": 1}, "/city", "required argument is missing"),
    ({"city": "Oslo", "country": "NO"}, "/country", "unexpected argument; allowed: city, days"),
    ([], "", "expected object, got array"),
])
def test_validate_args_rejects(weather, args, path, fragment):
    errors = weather.validate_args(args)
    assert errors, args
    assert errors[0].path == path
    assert fragment in errors[0].message


def test_validate_args_accepts(weather):
    assert weather.validate_args({"city": "Oslo"}) == []
    assert weather.validate_args({"city": "Oslo", "days": 3}) == []


def test_string_is_not_a_number():
    spec = ToolSpec.from_dict({"name": "t", "parameters": [{"name": "x", "type": "float"}]})
    assert "expected number" in spec.validate_args({"x": "1.5"})[0].message
    assert spec.validate_args({"x": 2}) == []  # an integer is a number


def test_additional_properties_allowed_when_spec_says_so():
    spec = ToolSpec.from_dict({"name": "t", "parameters": {
        "type": "object", "properties": {}, "additionalProperties": True}})
    assert spec.validate_args({"anything": 1}) == []


def test_errors_report_every_problem(weather):
    errors = weather.validate_args({"days": "x", "extra": 1})
    assert {e.path for e in errors} == {"/city", "/days", "/extra"}
    assert all(str(e).startswith("/") for e in errors)


# --- bad specs: file, index, tool and pointer, never a traceback

def _write(tmp_path, data, name="tools.json"):
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


@pytest.mark.parametrize("data,fragments", [
    ([{"name": "ok"}, {"name": "bad tool!"}], ["[1]", "(bad tool!)", "/name", "does not match"]),
    ([{"name": "t", "parameters": [{"name": "x", "type": "strnig"}]}],
     ["[0]", "(t)", "/parameters/0/type", "strnig", "legacy"]),
    ([{"name": "t", "parameters": [{"type": "string"}]}], ["/parameters/0", "'name' is missing"]),
    ([{"name": "t", "parameters": {"type": "object", "properties": {"x": {"type": "strnig"}}}}],
     ["(t)", "/parameters/properties/x/type", "not a valid JSON Schema"]),
    ([{"name": "t", "parameters": {"type": "array"}}], ["/parameters/type", "plain"]),
    ([{"type": "function", "function": {"description": "no name"}}], ["[0]", "/function", "'name' is missing", "openai"]),
    ([{"name": "t", "descripton": "typo"}], ["[0]", "(t)", "unknown key(s) 'descripton'"]),
    ([{"name": "t", "parameters": [{"name": "x", "type": "int"}, {"name": "x", "type": "int"}]}],
     ["/parameters/1/name", "duplicate parameter 'x'"]),
    ([{"name": "t", "parameters": [{"name": "x", "type": "int"}], "required": ["y"]}],
     ["/required/0", "'y' is not one of the parameters"]),
    ([{"name": "t"}, {"name": "t"}], ["[1] (t)", "duplicate tool name", "[0]"]),
    (["not an object"], ["[0]", "must be an object, got string"]),
    ([{"name": "t", "handler": "no colon"}], ["/handler"]),
])
def test_bad_spec_errors_are_precise(tmp_path, data, fragments):
    path = _write(tmp_path, data)
    with pytest.raises(SpecError) as info:
        load_tools(path)
    message = str(info.value)
    assert message.startswith(str(path))
    assert "\n" not in message
    for fragment in fragments:
        assert fragment in message, message


def test_invalid_json_file_names_line_and_column(tmp_path):
    path = _write(tmp_path, '[{"name": "t",}\n')
    with pytest.raises(SpecError, match=r"tools.json:1:\d+: invalid JSON"):
        load_tools(path)


def test_missing_file(tmp_path):
    with pytest.raises(SpecError, match="cannot read tool specs"):
        load_tools(tmp_path / "nope.json")


@pytest.mark.parametrize("kind", ["device", "pipe"])
def test_a_device_or_a_pipe_is_refused_not_read(tmp_path, kind):
    """/dev/zero as a tools path was read until the process was killed at 18.7 GB; a named
    pipe's open would wait for a writer that never comes."""
    path = "/dev/zero"
    if kind == "pipe":
        path = tmp_path / "specs.json"
        os.mkfifo(path)
    with pytest.raises(SpecError) as caught:
        load_tools(path)
    assert str(caught.value) == (f"{path}: cannot read tool specs: not a regular file (a "
                                 "device, a pipe or a socket)")


def test_a_directory_is_called_a_directory_and_its_descriptor_closed(tmp_path):
    from jsonagent.errors import read_text

    before = len(os.listdir("/proc/self/fd"))
    for _ in range(3):
        with pytest.raises(SpecError) as caught:
            read_text(tmp_path, SpecError, "tool specs")
        assert str(caught.value) == f"{tmp_path}: cannot read tool specs: is a directory"
    assert len(os.listdir("/proc/self/fd")) == before  # os.fdopen refused it and kept it open


def test_a_file_past_the_limit_is_refused_unread(tmp_path):
    from jsonagent.errors import read_text

    big = tmp_path / "big.json"
    big.write_text("[" + " " * 100 + "]")
    assert read_text(big, SpecError, limit=102) == "[" + " " * 100 + "]"
    with pytest.raises(SpecError, match=r"big.json: cannot read tool specs: larger than 101 "
                                        r"bytes$"):
        read_text(big, SpecError, "tool specs", limit=101)


def test_file_may_hold_one_spec_or_a_tools_key(tmp_path):
    assert [s.name for s in load_tools(_write(tmp_path, {"name": "one"}))] == ["one"]
    assert [s.name for s in load_tools(_write(tmp_path, {"tools": [{"name": "a"}, {"name": "b"}]}))] == ["a", "b"]


@pytest.mark.parametrize("data,fragments", [
    ({"tools": 5}, ['"tools" must be a list of specs, got integer 5']),
    ([], ["no tool specs in the file"]),
    ({"name": "t", "parameters": {"type": "object", "properties": {"a": {"$ref": "#/$defs/nope"}}}},
     ["(t): /parameters/properties/a/$ref: $ref points to a missing definition"]),
    ({"name": "t", "parameters": {"type": "object", "properties": {}, "required": ["ghost"]}},
     ["(t): /parameters/required/0: 'ghost' is required but not among the properties"]),
])
def test_more_bad_files(tmp_path, data, fragments):
    with pytest.raises(SpecError) as info:
        load_tools(_write(tmp_path, data))
    for fragment in fragments:
        assert fragment in str(info.value)
    assert ": :" not in str(info.value)


def test_non_utf8_spec_file(tmp_path):
    path = tmp_path / "latin1.json"
    path.write_bytes(b'[{"name": "caf\xe9"}]')
    with pytest.raises(SpecError, match="not UTF-8 text"):
        load_tools(path)


def test_a_toolset_fingerprint_is_the_sorted_json_of_what_the_model_is_shown():
    # stored runs carry it: a resume compares it, so its bytes must not drift
    import hashlib

    from jsonagent import Toolset, tool

    @tool
    def greet(name: str, times: int = 1) -> str:
        """Say hello: «bonjour»."""
        return name

    toolset = Toolset.build([greet])
    blob = json.dumps([t.spec.describe() for t in toolset], sort_keys=True).encode()
    assert toolset.fingerprint() == hashlib.sha256(blob).hexdigest()[:16]
    assert [t.spec.shown for t in toolset] == [json.dumps(t.spec.describe(), ensure_ascii=False)
                                              for t in toolset]


def test_core_specs_pass_the_checks():
    """The bundled specs load unchecked at every start (jsonschema costs ~60 ms to import);
    here they go through every check, and come out the same."""
    from jsonagent.tools.toolset import core_tools, default_tools_path

    assert load_tools(default_tools_path()) == core_tools()
