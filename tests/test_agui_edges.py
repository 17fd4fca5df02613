"""/ag-ui at its edges, over a real `jsonagent serve`: bad bodies get a 4xx and one line,
the guard of /v1 holds, an unknown thread or interrupt is an error that leaves every run as
it was, and a run paused on one node is resumed through another sharing PostgreSQL."""

from __future__ import annotations

import json

import pytest

from test_server import ASK, DONE, read_sse, serve  # noqa: F401  (the fixture)
from jsonagent.testing import step


def body(thread: str = "t", text: str | None = "hi", **extra) -> dict:
    messages = [{"id": "m1", "role": "user", "content": text}] if text else []
    return {"threadId": thread, "runId": "r1", "messages": messages, **extra}


def post(server, payload, **kw) -> tuple[int, list[dict] | dict]:
    """The status and, for a stream, its events; else the JSON body."""
    with server.client as c:
        raw = isinstance(payload, (str, bytes))
        r = c.post("/ag-ui", **({"content": payload} if raw else {"json": payload}),
                   headers={"Content-Type": "application/json"} if raw else {}, **kw)
    if r.headers.get("content-type", "").startswith("text/event-stream"):
        return r.status_code, [json.loads(line[5:]) for line in r.text.splitlines()
                               if line.startswith("data:")]
    return r.status_code, r.json()


@pytest.mark.parametrize("payload, said", [
    ("{not json", "not valid JSON"),
    ({"threadId": "t", "runId": "r"}, "messages"),
    ({"threadId": "t", "runId": "r", "messages": "hi"}, "messages"),
    ({"threadId": "t", "runId": "r", "messages": [{"id": "m", "role": "wizard"}]}, "messages"),
    ({"threadId": "", "runId": "r", "messages": [{"id": "m", "role": "user", "content": "x"}]},
     "threadId"),
    (body(tools=[{"name": "x", "description": "d", "parameters": {"type": "nonsense"}}]),
     "tools[0]"),
    (body(tools=[{"name": "GetTimeTools", "description": "d"}]), "tool of the agent"),
    (body(thread="new", text=None), "nothing to run"),
    ({**body(thread="new", text=None), "messages": [
        {"id": "t1", "role": "tool", "toolCallId": "run_x.1.0", "content": "drawn"}]},
     "answers no call"),
])
def test_bad_inputs_get_a_4xx_and_one_line(serve, payload, said):
    server = serve([DONE])
    status, answer = post(server, payload)
    assert 400 <= status < 500 and said in answer["error"], answer
    assert "\n" not in answer["error"] and "Traceback" not in server.output()


def test_the_guard_of_v1_holds(serve):
    server = serve([DONE], token="s3cret")
    with server.client as c:
        c.headers.pop("Authorization")
        assert c.post("/ag-ui", json=body()).status_code == 401
    status, _ = post(server, "x" * (2 << 20))
    assert status == 413


def test_an_unknown_thread_or_interrupt_changes_nothing(serve):
    server = serve([ASK, DONE])
    # resuming a thread that does not exist: an error in the stream, and no session made
    status, events = post(server, body("nobody", text=None, resume=[
        {"interruptId": "x", "status": "resolved", "payload": {"answer": "a"}}]))
    assert status == 200 and [e["type"] for e in events] == ["RUN_ERROR"]
    assert "no thread nobody" in events[0]["message"]
    assert server.client.get("/v1/sessions/nobody").status_code == 404
    # a run paused on a question
    status, events = post(server, body("asks"))
    outcome = events[-1]["outcome"]
    [item] = outcome["interrupts"]
    run_id = events[0]["runId"]
    # an unknown id, and a payload that does not fit: errors, the run left waiting
    for resume, said in (
            ({"interruptId": "stale", "status": "resolved", "payload": {"answer": "a"}}, "stale"),
            ({"interruptId": item["id"], "status": "resolved", "payload": {"approved": True}},
             "responseSchema")):
        status, events = post(server, body("asks", text=None, resume=[resume]))
        assert [e["type"] for e in events] == ["RUN_ERROR"] and said in events[0]["message"]
        assert server.get(run_id)["status"] == "requires_action"
    # a new message while it waits: refused, naming the interrupt
    status, events = post(server, {**body("asks", "other"), "messages": [
        {"id": "m2", "role": "user", "content": "something else"}]})
    assert events[0]["type"] == "RUN_ERROR" and item["id"] in events[0]["message"]
    # the same input again (a reconnect): the open interrupt is offered again, same id
    status, events = post(server, body("asks"))
    assert events[-1]["outcome"]["interrupts"][0]["id"] == item["id"]
    # answered, it is never offered again: a reconnect follows the run to its end
    status, events = post(server, body("asks", text=None, resume=[
        {"interruptId": item["id"], "status": "resolved", "payload": {"answer": "Lyon"}}]))
    assert events[-1]["type"] == "RUN_FINISHED" and events[-1]["outcome"] == {"type": "success"}
    status, events = post(server, body("asks"))
    assert all(e.get("outcome", {}).get("type") != "interrupt" for e in events)


def test_a_cancelled_resume_entry_cancels_the_run(serve):
    server = serve([step("delete_file", {"path": "/tmp/x"}, "clean"), DONE])
    _, events = post(server, body("cancels"))
    [item] = events[-1]["outcome"]["interrupts"]
    _, events = post(server, body("cancels", text=None, resume=[
        {"interruptId": item["id"], "status": "cancelled"}]))
    assert events[-1]["outcome"] == {"type": "cancelled"}
    assert server.get(events[0]["runId"])["status"] == "cancelled"


@pytest.mark.parametrize("order", ["follow, then drop", "drop, then follow", "drop only"])
def test_a_reconnect_with_the_same_input_follows_the_run_the_dropped_stream_leaves(serve, order):
    """The same input again (a reconnect) follows the same run, whether it comes before the
    old stream drops or soon after: that drop does not cancel a run another stream follows.
    A stream dropped for good still cancels its run."""
    import time

    server = serve([step("wait", {"seconds": 4}, "wait a while"), DONE])
    with server.client as c:
        first = c.stream("POST", "/ag-ui", json=body("again"))
        a = first.__enter__()
        seen = read_sse(a, until=lambda e: e["type"] == "TOOL_CALL_END")
        run_id = seen[0]["data"]["runId"]
        if order != "follow, then drop":
            first.__exit__(None, None, None)
            if order == "drop only":
                assert server.wait(run_id, "cancelled", timeout=10)["steps"][0][
                    "observation"] != "waited"
                return
            time.sleep(0.5)
        with c.stream("POST", "/ag-ui", json=body("again")) as b:
            events = [e["data"] for e in read_sse(b, until=lambda e: e["type"] == "RUN_STARTED")]
            if order == "follow, then drop":
                first.__exit__(None, None, None)
            events += [e["data"] for e in read_sse(b)]
    assert events[0]["runId"] == run_id
    assert events[-1]["type"] == "RUN_FINISHED" and events[-1]["outcome"] == {"type": "success"}
    assert server.get(run_id)["status"] == "completed"


def test_a_resume_on_another_node_sharing_postgresql(tmp_path, pg_url):
    pytest.importorskip("psycopg")
    from test_server import Server

    nodes = []
    try:
        for name in "ab":
            (tmp_path / name).mkdir()
            nodes.append(Server(tmp_path / name, [ASK, DONE], "--store", pg_url,
                                "--node-id", name).start())
        a, b = nodes
        _, events = post(a, body("shared"))
        [item] = events[-1]["outcome"]["interrupts"]
        run_id = events[0]["runId"]
        _, events = post(b, body("shared", text=None, resume=[
            {"interruptId": item["id"], "status": "resolved", "payload": {"answer": "Oslo"}}]))
        kinds = [e["type"] for e in events]
        assert kinds[0] == "RUN_STARTED" and events[0]["runId"] == run_id
        assert events[-1]["type"] == "RUN_FINISHED" and events[-1]["result"] == "42"
        result = next(e for e in events if e["type"] == "TOOL_CALL_RESULT")
        assert result["content"] == "Oslo" and result["toolCallId"] == item["id"].split(".")[0] + ".1.0"
        assert a.get(run_id)["status"] == "completed"
    finally:
        for node in nodes:
            node.kill()


def test_a_call_whose_name_came_live_and_its_arguments_did_not_gets_them_whole():
    """A reader that joins between the tool's name and its arguments (CI saw it on a loaded
    machine) still gets TOOL_CALL_ARGS, from the stored step."""
    from jsonagent.events import ToolNameKnown
    from jsonagent.server.agui_events import Translator

    t = Translator("run_1", "TaskCompleteTool")
    live = t.delta(ToolNameKnown(run_id="run_1", step=1, name="GetTimeTools"))
    stored = t.event({"type": "step", "run_id": "run_1", "step": 1, "thought": "",
                      "tool": "GetTimeTools", "args": {"timezone": "UTC"}})
    kinds = [e.type.value if hasattr(e.type, "value") else e.type for e in live + stored]
    assert kinds[-3:] == ["TOOL_CALL_START", "TOOL_CALL_ARGS", "TOOL_CALL_END"], kinds
    assert json.loads(stored[-2].delta) == {"timezone": "UTC"}


def test_a_resume_that_answers_some_of_the_open_interrupts_says_so_in_ag_ui_words(serve):
    """Two calls wait at once: a resume entry for one of them names the other, and asks for
    one entry each (never the REST API's body); the run is left waiting as it was."""
    two = {"thought": "both", "calls": [
        {"tool_name": "delete_file", "args_list": {"path": p}} for p in "ab"]}
    server = serve([two, DONE], "--parallel-calls", "2")
    _, events = post(server, body("half"))
    first, second = events[-1]["outcome"]["interrupts"]
    run_id = events[0]["runId"]
    _, events = post(server, body("half", text=None, resume=[
        {"interruptId": first["id"], "status": "resolved", "payload": {"approved": True}}]))
    assert [e["type"] for e in events] == ["RUN_ERROR"]
    said = events[0]["message"]
    assert second["id"] in said and "one resume entry for each open interrupt" in said, said
    assert "items" not in said and "{" not in said
    assert server.get(run_id)["status"] == "requires_action"


def test_a_reasked_reply_is_a_call_of_its_own_with_only_its_own_arguments():
    """A reply re-asked (it did not validate) was shown live as a call: it ends void, and the
    reply written again is another call, with another id, even when its deltas come before
    the stored re-ask (which waits for the step's checkpoint). A reader that comes later, from
    the stored events only, names the real call the same."""
    from jsonagent.events import ArgsDelta, ToolNameKnown
    from jsonagent.server.agui_events import Translator

    def kinds(events):
        return [(e.type.value if hasattr(e.type, "value") else e.type, e.tool_call_id)
                for e in events if hasattr(e, "tool_call_id")]

    t = Translator("run_1", "TaskCompleteTool")
    reask = {"type": "reask", "run_id": "run_1", "step": 1, "attempt": 1, "seq": 4,
             "stage": "args", "problem": "code: a string is required"}
    stored = [reask, {"type": "step", "run_id": "run_1", "step": 1, "thought": "",
                      "tool": "Notes", "args": {"text": "hi"}},
              {"type": "tool_result", "run_id": "run_1", "step": 1, "tool": "Notes",
               "observation": "noted", "call": 0, "seq": 7}]
    out = t.delta(ToolNameKnown(run_id="run_1", step=1, name="Code"))
    out += t.delta(ArgsDelta(run_id="run_1", step=1, text='{"code": 1}'))
    out += t.delta(ToolNameKnown(run_id="run_1", step=1, attempt=1, name="Notes"))
    out += t.delta(ArgsDelta(run_id="run_1", step=1, attempt=1, text='{"text": "hi"}'))
    for e in stored:
        out += t.event(e)
    void, real = "run_1.1.0", "run_1.1.0.r1"
    assert kinds(out) == [("TOOL_CALL_START", void), ("TOOL_CALL_ARGS", void),
                          ("TOOL_CALL_END", void), ("TOOL_CALL_RESULT", void),
                          ("TOOL_CALL_START", real), ("TOOL_CALL_ARGS", real),
                          ("TOOL_CALL_END", real), ("TOOL_CALL_RESULT", real)]
    args = {}
    for e in out:
        if hasattr(e, "delta") and hasattr(e, "tool_call_id"):
            args[e.tool_call_id] = args.get(e.tool_call_id, "") + e.delta
    assert args == {void: '{"code": 1}', real: '{"text": "hi"}'}
    assert "not run" in next(e.content for e in out if getattr(e, "tool_call_id", None) == void
                             and hasattr(e, "content"))
    later = Translator("run_1", "TaskCompleteTool")
    late = [e for s in stored for e in later.event(s)]
    assert {i for _, i in kinds(late)} == {real}


def test_a_reply_restarted_by_a_model_retry_is_a_call_of_its_own():
    """A request that failed after part of its reply was shown live is sent again from the
    reply's start (`restart`): the call shown is void, and the one written again has another
    id, though its attempt is the same; a reader from the stored events only, whose seed read
    some of them already, names it the same."""
    from jsonagent.events import ArgsDelta, ToolNameKnown
    from jsonagent.server.agui_events import Translator, attempts

    t = Translator("run_1", "TaskCompleteTool")
    retry = {"type": "model_retry", "run_id": "run_1", "step": 1, "attempt": 0, "seq": 3,
             "restart": True, "said": "overloaded, retrying in 1 s"}
    stored = [retry, {"type": "step", "run_id": "run_1", "step": 1, "thought": "",
                      "tool": "Notes", "args": {"text": "hi"}, "seq": 4},
              {"type": "tool_result", "run_id": "run_1", "step": 1, "tool": "Notes",
               "observation": "noted", "call": 0, "seq": 5}]
    out = t.delta(ToolNameKnown(run_id="run_1", step=1, name="Notes"))
    out += t.delta(ArgsDelta(run_id="run_1", step=1, text='{"te'))
    out += t.event(retry)
    out += t.delta(ToolNameKnown(run_id="run_1", step=1, name="Notes"))
    out += t.delta(ArgsDelta(run_id="run_1", step=1, text='{"text": "hi"}'))
    for e in stored[1:]:
        out += t.event(e)
    calls = [(e.type.value, e.tool_call_id) for e in out if hasattr(e, "tool_call_id")]
    void, real = "run_1.1.0", "run_1.1.0s1"
    assert calls == [("TOOL_CALL_START", void), ("TOOL_CALL_ARGS", void),
                     ("TOOL_CALL_END", void), ("TOOL_CALL_RESULT", void),
                     ("TOOL_CALL_START", real), ("TOOL_CALL_ARGS", real),
                     ("TOOL_CALL_END", real), ("TOOL_CALL_RESULT", real)]
    later = Translator("run_1", "TaskCompleteTool", attempts(stored))
    late = [e for s in stored for e in later.event(s)]
    assert {e.tool_call_id for e in late if hasattr(e, "tool_call_id")} == {real}
