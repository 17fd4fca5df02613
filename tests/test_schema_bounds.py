"""No schema reaches outside the process (issue 58): every $ref resolution goes through one
walk and one validator. A ref to a file or a URL is refused before use and never read or
fetched, a loop or a ref bomb is refused fast, and a pattern is matched in bounded time.
The server's side of it is in test_agui_schemas.py."""

from __future__ import annotations

import http.server
import json
import threading
import time
from types import SimpleNamespace

import pytest

from jsonagent import SpecError, ToolSpec, load_tools
from jsonagent.errors import EvalError, MissingRef, SchemaRefused
from jsonagent.tools.schema import (
    AUTHORED,
    FRONTEND,
    MATCH_TIMEOUT_S,
    check_bounds,
    schema_problem,
    validator,
)

SECRET = {"client_secret": "s3cr3t-do-not-show", "refresh_token": "rt-123"}
REDOS = r"^(a|aa)+$"
"""Exponential on "aaa...a!" under `re` (a day at 60 a's); `regex` gives up on time."""


def bomb(levels: int = 12, fan: int = 4) -> dict:
    """About 1 KB that grows `fan` times at each level: 4**12 copies of a string schema."""
    defs = {"l0": {"type": "string"}}
    for i in range(1, levels):
        defs[f"l{i}"] = {"anyOf": [{"$ref": f"#/$defs/l{i - 1}"}] * fan}
    return {"type": "object", "properties": {"x": {"$ref": f"#/$defs/l{levels - 1}"}},
            "$defs": defs}


@pytest.fixture
def probe():
    """An HTTP server on 127.0.0.1 that records every request it gets."""
    seen: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            seen.append(self.path)
            body = json.dumps({"type": "string"}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield SimpleNamespace(url=f"http://127.0.0.1:{server.server_port}/schema.json", seen=seen)
    server.shutdown()
    server.server_close()


def refused(schema, bounds=FRONTEND) -> str:
    with pytest.raises(SchemaRefused) as info:
        check_bounds(schema, bounds)
    return info.value.args[1]


@pytest.mark.parametrize("ref", ["file:///etc/passwd", "http://127.0.0.1:9/x.json",
                                 "other.json#/a", "#anchor"])
def test_a_ref_that_leaves_the_schema_is_refused_at_either_bound(ref):
    schema = {"type": "object", "properties": {"a": {"$ref": ref}}}
    for bounds in (FRONTEND, AUTHORED):
        assert "points outside the schema" in refused(schema, bounds)


def test_a_self_referencing_ref_is_refused_not_a_recursion_error():
    assert "loops" in refused({"$ref": "#"})
    loop = {"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}},
            "type": "object", "properties": {"x": {"$ref": "#/$defs/a"}}}
    assert "loops" in refused(loop, AUTHORED)
    with pytest.raises(SpecError, match="loops"):
        ToolSpec.from_dict({"name": "t", "parameters": loop})


def test_a_tree_is_a_spec_authors_choice_and_no_clients():
    tree = {"type": "object", "properties": {"kids": {"type": "array", "items": {"$ref": "#"}}}}
    check_bounds(tree, AUTHORED)
    assert "recursive" in refused(tree)


def test_a_ref_bomb_is_refused_after_its_first_64_kb():
    start = time.perf_counter()
    assert len(json.dumps(bomb())) < 1500
    assert "64 KB" in refused(bomb())
    assert "256 KB" in refused(bomb(), AUTHORED)
    assert time.perf_counter() - start < 2  # the unbounded walk: 4**12 copies
    with pytest.raises(SpecError, match="expanded"):
        ToolSpec.from_dict({"name": "t", "parameters": bomb()})


def test_a_ref_bomb_in_a_data_keyword_is_copied_as_data_never_expanded():
    # check_bounds sizes a `default` as data; inlining must not then follow its refs
    levels = 16  # 30 levels were 2**30 dicts before: the process ran out of memory
    defs = {"d0": {"type": "string"}}
    for i in range(1, levels):
        defs[f"d{i}"] = {"examples": [{"$ref": f"#/$defs/d{i - 1}"}] * 2}
    ref = {"$ref": f"#/$defs/d{levels - 1}"}
    params = {"type": "object", "$defs": defs,
              "properties": {"x": {"type": "object", "default": ref, "enum": [ref]}}}
    start = time.perf_counter()
    spec = ToolSpec.from_dict({"name": "t", "parameters": params}, bounds=FRONTEND)
    assert time.perf_counter() - start < 1
    x = spec.parameters["properties"]["x"]
    assert x["default"] == ref and x["enum"] == [ref]
    assert len(json.dumps(spec.parameters)) < 200


def test_a_ref_is_inlined_by_its_whole_pointer_as_check_bounds_sized_it():
    params = {"type": "object", "$defs": {
        "a": {"type": "object", "properties": {"b": {"type": "integer"}}},
        "b": {"type": "string", "description": "not what the ref names"}},
        "properties": {"x": {"$ref": "#/$defs/a/properties/b"}}}
    spec = ToolSpec.from_dict({"name": "t", "parameters": params}, bounds=FRONTEND)
    assert spec.parameters["properties"]["x"] == {"type": "integer"}


def test_unevaluated_properties_is_refused_beside_pattern_properties_only():
    closed = {"type": "object", "unevaluatedProperties": False}
    check_bounds({**closed, "properties": {"a": {"type": "string", "pattern": "^x"}}}, FRONTEND)
    assert "beside patternProperties" in refused({**closed, "patternProperties": {"^x": {}}})


def test_depth_and_pattern_length_are_bounded():
    deep: dict = {"type": "string"}
    for _ in range(40):
        deep = {"type": "object", "properties": {"a": deep}}
    assert "levels deep" in refused(deep)
    assert "at most 256" in refused({"properties": {"a": {"pattern": "a" * 257}}})
    assert "at most 256" in refused({"patternProperties": {"a" * 300: {}}})
    assert "at most 256" in refused({"propertyNames": {"pattern": "a" * 300}})
    assert "repeats" in refused({"properties": {"a": {"pattern": "(a{1000}){1000}"}}})
    with pytest.raises(MissingRef):
        check_bounds({"properties": {"a": {"$ref": "#/$defs/none"}}}, FRONTEND)


@pytest.mark.parametrize("schema, value", [
    ({"type": "string", "pattern": REDOS}, "a" * 60 + "!"),
    ({"type": "object", "patternProperties": {REDOS: {}}}, {"a" * 60 + "!": 1}),
    ({"type": "object", "propertyNames": {"pattern": REDOS}}, {"a" * 60 + "!": 1}),
    ({"type": "object", "patternProperties": {REDOS: {}}, "additionalProperties": False},
     {"a" * 60 + "!": 1}),
])
def test_every_pattern_keyword_gives_up_on_time(schema, value):
    check_bounds(schema, FRONTEND)  # short enough: it is the matching that is bounded
    start = time.perf_counter()
    errors = [e.message for e in validator(schema).iter_errors(value)]
    took = time.perf_counter() - start
    assert any("could not be matched" in m for m in errors), errors
    assert took < 10 * MATCH_TIMEOUT_S + 0.5, took


def test_format_regex_compiles_nothing_a_model_wrote():
    # no format is asserted: a hostile "regex" as the value is a string like any other
    assert list(validator({"type": "string", "format": "regex"}).iter_errors("(a")) == []


def test_the_validator_fetches_no_url_even_unchecked(probe):
    with pytest.raises(Exception) as info:
        list(validator({"$ref": probe.url}).iter_errors("x"))
    assert "Unresolvable" in type(info.value).__name__ or "resolv" in str(info.value).lower()
    assert probe.seen == []


def test_a_spec_file_with_a_file_ref_is_refused_and_its_file_never_read(tmp_path):
    secret = tmp_path / "creds.json"
    secret.write_text(json.dumps(SECRET))
    (tmp_path / "tools.json").write_text(json.dumps([{
        "name": "pay", "parameters": {"type": "object", "properties": {
            "who": {"$ref": secret.as_uri()}}}}]))
    with pytest.raises(SpecError) as info:
        load_tools(tmp_path / "tools.json")
    said = str(info.value)
    assert "points outside the schema" in said and "/parameters/properties/who/$ref" in said
    assert "s3cr3t" not in said and "\n" not in said


def test_an_eval_schema_evaluator_with_an_http_ref_is_refused_before_any_run(tmp_path, probe):
    from jsonagent.evals import Dataset
    from jsonagent.evals.evaluators import Schema

    path = tmp_path / "ds.yaml"
    path.write_text(json.dumps({"cases": [{"input": "x", "evaluators": [
        {"schema": {"type": "object", "properties": {"a": {"$ref": probe.url}}}}]}]}))
    with pytest.raises(EvalError, match="points outside the schema"):
        Dataset.load(path)
    # one built in Python is refused when it checks, and fetches nothing either
    check = Schema({"$ref": probe.url})
    ok, why = check.check(None, SimpleNamespace(answer={"a": 1}, status="completed"))
    assert not ok and "refused" in why
    assert probe.seen == []


def test_an_mcp_tool_with_a_remote_ref_is_refused(probe):
    from jsonagent.tools.mcp import MCPServer

    server = MCPServer(["true"], name="remote")
    listed = SimpleNamespace(name="fetchy", description="", output_schema=None,
                             input_schema={"type": "object", "properties": {
                                 "a": {"$ref": probe.url}}})
    with pytest.raises(SpecError, match="points outside the schema"):
        server._tool(listed)
    assert probe.seen == []


def test_a_schema_is_checked_by_the_engine_that_matches_its_patterns():
    # `re` cannot compile a variable-width look-behind; `regex`, which matches it, can: the
    # meta-schema check is ours, with no format checker handing the pattern to re.compile
    schema = {"type": "object", "properties": {"a": {"type": "string", "pattern": "(?<=a+)b"}}}
    assert schema_problem(schema, FRONTEND) is None
    spec = ToolSpec.from_dict({"name": "t", "parameters": schema}, bounds=FRONTEND)
    assert spec.validate_args({"a": "aab"}) == [] and spec.validate_args({"a": "b"})


def test_schema_problem_says_where_in_one_line():
    assert schema_problem({"type": "object"}, FRONTEND) is None
    assert schema_problem({"properties": {"a": {"$ref": "#/$defs/x"}}}, AUTHORED) == \
        "/properties/a/$ref: $ref points to a missing definition"
    assert schema_problem({"type": 5}, AUTHORED).startswith("/type: not a valid JSON Schema")


@pytest.mark.parametrize("depth, said", [
    (250, "unexpected argument"),  # read: what is wrong is the argument, not the JSON
    (1200, "nested deeper than it can be read"),
])
def test_a_deeply_nested_reply_is_never_called_invalid_json(depth, said):
    from jsonagent.envelope import parse_reply
    from jsonagent.tools.toolset import Toolset

    nested = "[" * depth + "]" * depth
    text = ('{"thought": "t", "tool_name": "TaskCompleteTool", "args_list": '
            f'{{"output": "x", "extra": {nested}}}}}')
    problem = parse_reply(text, Toolset.build(None))
    assert said in problem.message and "invalid JSON" not in problem.message, problem.message
