"""The hostile pass's frontend tools (issue 58), replayed over a real `jsonagent serve`: a
schema that reaches outside, loops, explodes or cannot be matched in time is a one-line 422
before any run, or is matched in bounded time while the server goes on answering."""

from __future__ import annotations

import json
import threading
import time

import httpx

from test_agui_edges import body, post
from test_schema_bounds import REDOS, SECRET, bomb, probe  # noqa: F401  (the fixture)
from test_server import DONE, serve  # noqa: F401  (the fixture)
from jsonagent.testing import step


def tool(parameters: dict, name: str = "show") -> dict:
    return {"name": name, "description": "Shows a thing in the page", "parameters": parameters}


def refused(server, tools: list[dict], thread: str = "t") -> str:
    status, answer = post(server, body(thread, tools=tools))
    assert status == 422, (status, answer)
    said = answer["error"]
    assert "\n" not in said and "Traceback" not in server.output()
    assert server.client.get(f"/v1/sessions/{thread}").status_code == 404  # nothing ran
    return said


def test_a_file_ref_is_refused_and_the_file_appears_nowhere(serve, tmp_path):
    secret = tmp_path / "creds.json"
    secret.write_text(json.dumps(SECRET))
    server = serve([step("show", {"who": "x"}, "show it"), DONE])
    said = refused(server, [tool({"type": "object", "properties": {
        "who": {"$ref": secret.as_uri()}}})])
    assert "points outside the schema" in said and "tools[0]" in said
    with server.client as c:
        runs = c.get("/v1/runs").text
    for text in (said, runs, server.output()):
        assert "s3cr3t" not in text and "rt-123" not in text


def test_an_http_ref_is_refused_and_nothing_is_fetched(serve, probe):
    server = serve([step("show", {"who": "x"}, "show it"), DONE])
    said = refused(server, [tool({"type": "object", "properties": {"who": {"$ref": probe.url}}})])
    assert "points outside the schema" in said
    assert probe.seen == []


def test_a_recursive_ref_and_a_ref_bomb_are_refused_fast(serve):
    server = serve([DONE])
    assert "loops" in refused(server, [tool({"$ref": "#"})])
    assert "recursive" in refused(server, [tool({"type": "object", "properties": {
        "kids": {"type": "array", "items": {"$ref": "#"}}}})])
    start = time.monotonic()
    assert "64 KB" in refused(server, [tool(bomb())])
    assert time.monotonic() - start < 2


def test_two_tools_of_one_name_or_a_core_tools_name_in_other_case_are_a_422(serve):
    server = serve([DONE])
    said = refused(server, [tool({}), tool({}, name="Show")])
    assert "tools[1]" in said and "tools[0]" in said
    assert "tool of the agent" in refused(server, [tool({}, name="taskcompletetool")])
    assert "at most 64" in refused(server, [tool({}, name=f"t{i}") for i in range(65)])


def test_the_tools_of_one_request_share_one_size_budget(serve):
    # each tool is within its own 64 KB (34 KB shown); two of them together are not
    props = {f"p{i}": {"type": "string", "description": "d" * 40} for i in range(400)}
    big = [tool({"type": "object", "properties": props}, name=f"t{i}") for i in range(3)]
    server = serve([DONE])
    said = refused(server, big)
    assert "at most 64 KB in all" in said and "tools[0] to tools[1];" in said, said
    status, _ = post(server, body("t2", tools=big[:1]))
    assert status == 200


def test_a_redos_pattern_is_matched_in_bounded_time_and_healthz_answers(serve):
    server = serve([step("show", {"who": "a" * 60 + "!"}, "show it"), DONE])
    parameters = {"type": "object", "properties": {"who": {"type": "string", "pattern": REDOS}},
                  "required": ["who"]}
    got: dict = {}

    def run():
        got["status"], got["events"] = post(server, body("redos", tools=[tool(parameters)]))

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    slowest, start = 0.0, time.monotonic()
    with httpx.Client(base_url=server.url, timeout=1) as c:
        while worker.is_alive() and time.monotonic() - start < 15:
            asked = time.monotonic()
            assert c.get("/healthz").status_code == 200
            slowest = max(slowest, time.monotonic() - asked)
            time.sleep(0.02)
    worker.join(5)
    assert slowest < 1, slowest
    assert got["status"] == 200 and got["events"][-1]["type"] == "RUN_FINISHED", got
    assert server.get(got["events"][0]["runId"])["status"] == "completed"
    # the call was refused, never left to the page, and the model asked again
    [result] = [e for e in got["events"] if e["type"] == "TOOL_CALL_RESULT"]
    assert "void" in result["content"], result


def test_json_nested_past_200_levels_is_called_too_deep_not_invalid(serve):
    server = serve([DONE])
    deep = "[" * 250 + "]" * 250
    raw = json.dumps(body("deep"))[:-1] + f', "forwardedProps": {{"x": {deep}}}}}'
    json.loads(raw)  # valid JSON
    status, answer = post(server, raw)
    assert status == 422 and "nested too deeply to read: more than 200 levels" in answer["error"], answer
    assert "not valid JSON" not in answer["error"]
    with server.client as c:
        r = c.post("/v1/runs", content=f'{{"input": "hi", "x": {deep}}}',
                   headers={"Content-Type": "application/json"})
    # the REST API reads it whole, and says what is really wrong with it
    assert r.status_code == 422 and r.json()["error"] == "x: Extra inputs are not permitted"
