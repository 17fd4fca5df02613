"""AG-UI over a real `jsonagent serve`, driven by the official client (@ag-ui/client in Node,
tests/agui_client/drive.mjs): its own event verification runs on every stream, so an event
out of order fails the run there. The model is scripted: every run starts at reply 1."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from test_server import ASK, DONE, TIME, serve  # noqa: F401  (the fixture)
from jsonagent.testing import step

CLIENT = Path(__file__).parent / "agui_client"
pytestmark = pytest.mark.skipif(
    shutil.which("node") is None or not (CLIENT / "node_modules" / "@ag-ui" / "client").is_dir(),
    reason="needs node and @ag-ui/client (.ci/run installs it: npm ci in tests/agui_client)")


def drive(server, scenario: str, thread: str, **args) -> dict:
    body = {"url": server.url + "/ag-ui", "token": server.token, "scenario": scenario,
            "thread": thread, **args}
    out = subprocess.run(["node", str(CLIENT / "drive.mjs"), json.dumps(body)], cwd=CLIENT,
                         capture_output=True, text=True, timeout=90)
    assert out.stdout.strip(), out.stderr[-3000:]
    data = json.loads(out.stdout.strip().splitlines()[-1])
    for run in data["runs"]:  # the client's verification rejected nothing
        assert run.get("error") is None, (run.get("error"), server.output()[-2000:])
    return data


def types(run: dict) -> list[str]:
    return [e["type"] for e in run["events"]]


def assert_call_order(run: dict) -> dict[str, list[str]]:
    """Each tool call: START, its ARGS, END, then at most one RESULT, nothing of it between
    and no other call open meanwhile; returns each call's events in order."""
    calls: dict[str, list[str]] = {}
    open_call = None
    for e in run["events"]:
        kind, cid = e["type"], e.get("toolCallId")
        if not kind.startswith("TOOL_CALL"):
            assert open_call is None, f"{kind} inside the open call {open_call}"
            continue
        seen = calls.setdefault(cid, [])
        if kind == "TOOL_CALL_START":
            assert open_call is None and not seen, (cid, seen)
            open_call = cid
        elif kind == "TOOL_CALL_ARGS":
            assert open_call == cid and seen[0] == "TOOL_CALL_START", (cid, seen)
        elif kind == "TOOL_CALL_END":
            assert open_call == cid, (cid, seen)
            open_call = None
        else:
            assert open_call is None and "TOOL_CALL_RESULT" not in seen, (cid, seen)
        seen.append(kind)
    assert open_call is None
    return calls


def results(run: dict) -> dict[str, str]:
    return {e["toolCallId"]: e["content"] for e in run["events"]
            if e["type"] == "TOOL_CALL_RESULT"}


def test_a_run_that_calls_two_tools_completes(serve):
    server = serve([TIME, step("GetTimeTools", {"timezone": "Europe/Paris"}, "and Paris"), DONE])
    data = drive(server, "complete", "two-tools", input="What time is it?")
    [run] = data["runs"]
    kinds = types(run)
    assert kinds[:2] == ["RUN_STARTED", "STATE_SNAPSHOT"] and kinds[-1] == "RUN_FINISHED"
    assert run["outcome"] == "success" and run["result"] == "42"
    calls = assert_call_order(run)
    assert len(calls) == 2
    for seen in calls.values():
        assert seen[0] == "TOOL_CALL_START" and seen[-2:] == ["TOOL_CALL_END", "TOOL_CALL_RESULT"]
        assert "TOOL_CALL_ARGS" in seen
    assert kinds.count("STEP_STARTED") == kinds.count("STEP_FINISHED") == 3
    started = [e for e in run["events"] if e["type"] == "RUN_STARTED"][0]
    assert started["threadId"] == "two-tools" and started["runId"].startswith("run_")
    assert server.get(started["runId"])["status"] == "completed"  # the run is the run
    # what the client holds: the thoughts as reasoning, the calls, their results, the answer
    roles = [m["role"] for m in data["messages"]]
    assert roles[0] == "user" and "reasoning" in roles and roles.count("tool") == 2
    assert data["messages"][-1] == {"id": f"{started['runId']}.answer", "role": "assistant",
                                    "content": "42"}
    reasoning = [m["content"] for m in data["messages"] if m["role"] == "reasoning"]
    assert reasoning == ["what time is it", "and Paris", "done"]


def test_a_question_interrupts_and_resume_answers_it(serve):
    server = serve([ASK, DONE])
    data = drive(server, "question", "asks", input="Weather?", answer="Lyon")
    first, second, again = data["runs"]
    assert first["outcome"] == "interrupt"
    [item] = first["interrupts"]
    assert item["reason"] == "question" and item["message"] == "Which city?"
    assert item["responseSchema"]["required"] == ["answer"]
    assert types(first)[-2:] == ["STATE_SNAPSHOT", "RUN_FINISHED"]
    snapshot = [e for e in first["events"] if e["type"] == "STATE_SNAPSHOT"][-1]["snapshot"]
    assert snapshot["status"] == "requires_action" and snapshot["pending"]["kind"] == "question"
    [ask_call] = assert_call_order(first)
    # the resume goes on as the same jsonagent run; the answer is the question's observation
    assert second["outcome"] == "success" and second["result"] == "42"
    run_id = first["events"][0]["runId"]
    assert second["events"][0]["runId"] == run_id
    assert results(second) == {ask_call: "Lyon"}
    assert_call_order(second)
    # the answered interrupt is never offered again: an error that says so
    assert again["outcome"] == "error" and "not open" in again["message"]
    assert server.get(run_id)["status"] == "completed"


def test_an_approval_denied_through_resume_does_not_run_the_tool(serve):
    server = serve([step("delete_file", {"path": "/tmp/x"}, "clean up"), DONE])
    data = drive(server, "deny", "denies", input="Delete it", reason="keep it")
    first, stale, denied = data["runs"]
    [item] = first["interrupts"]
    [call] = assert_call_order(first)
    assert item["reason"] == "approval" and item["toolCallId"] == call
    assert item["metadata"]["pending"] == {"kind": "approval", "tool": "delete_file",
                                           "args": {"path": "/tmp/x"}}
    assert item["responseSchema"]["required"] == ["approved"]
    # an unknown interrupt id: RUN_ERROR, and the run is left waiting as it was
    assert stale["outcome"] == "error" and "no-such-interrupt" in stale["message"]
    assert types(stale) == ["RUN_ERROR"]
    run_id = first["events"][0]["runId"]
    # (the denial went on meanwhile; the store says the stale one changed nothing)
    events = server.client.get(f"/v1/runs/{run_id}").json()
    assert denied["outcome"] == "success"
    observation = results(denied)[call]
    assert "deleted" not in observation and "keep it" in observation
    assert events["steps"][0]["error"] is True


def test_a_frontend_tool_result_comes_in_the_next_input(serve):
    server = serve([step("show_chart", {"title": "sales"}, "draw it"), DONE])
    tool = {"name": "show_chart", "description": "Draws a chart in the page",
            "parameters": {"type": "object", "properties": {"title": {"type": "string"}},
                           "required": ["title"]}}
    data = drive(server, "frontend", "front", input="Chart?", tool=tool, result="drawn")
    first, second = data["runs"]
    assert first["outcome"] == "success" and len(first["pending"]) == 1
    [call] = assert_call_order(first)
    assert first["pending"] == [call] and results(first) == {}
    start = next(e for e in first["events"] if e["type"] == "TOOL_CALL_START")
    assert start["toolCallName"] == "show_chart"
    assert second["outcome"] == "success" and second["result"] == "42"
    assert results(second) == {call: "drawn"}
    run_id = first["events"][0]["runId"]
    assert server.get(run_id)["steps"][0]["observation"] == "drawn"


def test_an_aborted_run_is_cancelled(serve):
    server = serve([step("wait", {"seconds": 20}, "wait long"), DONE])
    data = drive(server, "abort", "aborts", input="Wait", abortAfter="TOOL_CALL_END")
    [run] = data["runs"]
    run_id = run["events"][0]["runId"]
    assert "RUN_FINISHED" not in types(run)
    cancelled = server.wait(run_id, "cancelled", timeout=10)
    assert cancelled["steps"][0]["observation"] != "waited"
    time.sleep(0.2)


def test_a_reasked_reply_and_the_one_written_again_are_two_calls_to_the_client(
        tmp_path, monkeypatch):
    """A streamed reply whose arguments do not validate is re-asked: the client holds it as
    a void call with its own arguments, and the reply written again as another call whose
    arguments are its own alone (they were appended to the void one's: '{..}{..}')."""
    from openai_stub import OpenAIStub, streamed
    from test_server import Server

    bad = json.dumps(step("GetTimeTools", {"timezone": 5}, "the time"))
    good = json.dumps(step("GetTimeTools", {"timezone": "UTC"}, "the time, again"))
    replies = iter([bad, good, json.dumps(DONE)])

    def reply(body: dict):
        text = next(replies)
        chunks = streamed([text[i:i + 8] for i in range(0, len(text), 8)])
        chunks.delay = 0.01
        return 200, chunks

    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    with OpenAIStub([reply] * 3) as stub:
        server = Server(tmp_path, [])
        server.args = ["--model", "stub-model", "--base-url", stub.url, *server.args[2:]]
        server.start()
        try:
            data = drive(server, "complete", "reasked", input="What time is it?")
        finally:
            server.kill()
    [run] = data["runs"]
    assert run["outcome"] == "success", run
    calls = {c["id"]: c["function"]["arguments"] for m in data["messages"]
             if m["role"] == "assistant" for c in m.get("toolCalls") or []}
    assert len(calls) == 2, calls
    void, real = calls.values()
    assert json.loads(void) == {"timezone": 5} and json.loads(real) == {"timezone": "UTC"}
    said = results(run)
    assert "not run" in said[list(calls)[0]] and "UTC" in said[list(calls)[1]]
