"""Deltas over a real `jsonagent serve`: SSE delivers the reply being written, without ids, so
`Last-Event-ID` still counts stored events; A2A streams the partial thought."""

from __future__ import annotations

import asyncio

import pytest

from test_server import DONE, TIME, read_sse, serve  # noqa: F401  (the fixture)
from jsonagent.testing import step

LONG = "checking the clock in UTC before I answer, one small piece at a time"
# a reply is written slowly only when streamed: the first step's tool gives the client time
# to connect, so that the second step is written while it watches
SLOW = {"chunk": 3, "delay": 0.04,
        "replies": [step("wait", {"seconds": 1.5}, "wait"),
                    step("GetTimeTools", {"timezone": "UTC"}, LONG), DONE]}


def test_sse_delivers_deltas_while_a_step_is_written(serve):
    server = serve(SLOW)
    run = server.create(input="time?")
    with server.client as c, c.stream("GET", f"/v1/runs/{run['id']}/events",
                                      params={"deltas": "true"}) as stream:
        events = read_sse(stream, until=lambda e: e["type"] == "run_end")
    stored = [e for e in events if "id" in e]
    live = [e["data"] for e in events if "id" not in e]
    assert [e["id"] for e in stored] == list(range(1, len(stored) + 1))  # no gaps
    assert {e["type"] for e in live} <= {"thought_delta", "tool_name", "args_delta"}
    assert all(e["run_id"] == run["id"] and "seq" not in e for e in live)
    # step 2 was written while the client watched: its thought came in pieces, before the step
    step2 = next(i for i, e in enumerate(events) if e["data"]["type"] == "step"
                 and e["data"]["step"] == 2)
    pieces = [e["data"]["text"] for e in events[:step2]
              if e["data"]["type"] == "thought_delta" and e["data"]["step"] == 2]
    assert len(pieces) > 1 and "".join(pieces) == LONG
    # the same run read again from a Last-Event-ID: stored events only, as before
    with server.client as c, c.stream("GET", f"/v1/runs/{run['id']}/events",
                                      headers={"Last-Event-ID": "2"}) as again:
        tail = read_sse(again)
    assert [e["id"] for e in tail] == [e["id"] for e in stored if e["id"] > 2]
    assert [e["data"] for e in tail] == [e["data"] for e in stored if e["id"] > 2]


def test_sse_without_deltas_gets_stored_events_only(serve):
    server = serve(SLOW)
    run = server.create(input="time?")
    with server.client as c, c.stream("GET", f"/v1/runs/{run['id']}/events") as stream:
        events = read_sse(stream)
    assert all("id" in e for e in events) and events[-1]["data"]["status"] == "completed"


def test_a2a_stream_sends_the_partial_thought(serve):
    pytest.importorskip("a2a")
    from test_server_a2a import client_for, send
    from a2a.helpers import get_message_text
    from a2a.types import TaskState

    server = serve(SLOW, token="a2a-token")

    async def flow():
        client, http = await client_for(server, streaming=True)
        try:
            seen, task = await send(client, "What time is it?")
        finally:
            await http.aclose()
        return seen, task

    seen, task = asyncio.run(asyncio.wait_for(flow(), 60))
    assert task.status.state == TaskState.TASK_STATE_COMPLETED
    texts = [get_message_text(r.status_update.status.message) for r in seen
             if r.HasField("status_update") and r.status_update.status.HasField("message")
             and r.status_update.status.state == TaskState.TASK_STATE_WORKING]
    partial = [t for t in texts if LONG.startswith(t) and t != LONG]
    assert partial, texts  # the thought of step 2, cut short, before the step ended
    assert any(t.startswith(LONG + " → GetTimeTools") for t in texts)


def test_a_delta_taken_after_its_step_was_read_still_goes_out_before_it():
    """A stream reads the store, then takes the deltas that came meanwhile: the last pieces of
    a reply can be taken after the step they make up was read. They go out before it, so an
    AG-UI client's reasoning holds the whole thought, not its first word."""
    from jsonagent.events import ThoughtDelta
    from jsonagent.server.agui_events import Translator
    from jsonagent.server.live import in_order

    def piece(text, step=2, attempt=0, run="r"):
        return ThoughtDelta(run_id=run, step=step, attempt=attempt, text=text)

    void, sub = piece("void ", attempt=0), piece("below", step=1, run="sub")
    read = [(True, {"type": "reask", "run_id": "r", "step": 2, "attempt": 1, "seq": 5}),
            (False, {"type": "step", "run_id": "sub", "step": 1, "seq": 1}),
            (True, {"type": "step", "run_id": "r", "step": 2, "thought": "and Paris",
                    "tool": "GetTimeTools", "args": {}, "repairs": [], "seq": 6}),
            (True, {"type": "tool_result", "run_id": "r", "step": 2, "seq": 7})]
    late = [void, sub, piece("and", attempt=1), piece(" Paris", attempt=1),
            piece("next", step=3)]
    order = [e if stored is False and not isinstance(e, dict) else e["type"] + str(e["seq"])
             for stored, e in in_order(read, late)]
    assert order == [void, "reask5", sub, "step1", late[2], late[3], "step6", "tool_result7",
                     late[4]]

    translator = Translator("r", "TaskCompleteTool")
    shown = translator.delta(piece("and"))
    for _, e in in_order(read[2:3], [piece(" Paris")]):
        shown += translator.delta(e) if not isinstance(e, dict) else translator.event(e)
    assert "".join(getattr(e, "delta", "") for e in shown
                   if type(e).__name__ == "ReasoningMessageContentEvent") == "and Paris"
