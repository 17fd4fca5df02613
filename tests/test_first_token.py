"""Every stream streams from its first token: a run that may be followed streams its first
model call, so a client that connects right after posting sees the first step's thought
written, long before the step ends, on /v1's events and on /ag-ui. The endpoint is a slow
OpenAI-compatible fake that writes each reply in pieces."""

from __future__ import annotations

import json
import time

import pytest

from openai_stub import OpenAIStub, streamed
from test_server import DONE, Server
from jsonagent.testing import step

THOUGHT = "reading the question slowly, the way a long prompt is read, before one tool call"
FIRST = json.dumps(step("GetTimeTools", {"timezone": "UTC"}, THOUGHT))
PIECES, DELAY = 40, 0.08  # the first reply takes about 3.2 s to write


def slow_first(body: dict):
    """A run's first request gets the slow step; any later one the answer, at once."""
    if len(body["messages"]) > 2:
        return json.dumps(DONE)
    size = -(-len(FIRST) // PIECES)
    chunks = streamed([FIRST[i:i + size] for i in range(0, len(FIRST), size)])
    chunks.delay = DELAY
    return 200, chunks


def timed(stream, t0: float) -> list[tuple[float, dict]]:
    """Each event's data with when it came, seconds after `t0`, until the stream ends."""
    out = []
    for line in stream.iter_lines():
        if line.startswith("data:"):
            out.append((time.monotonic() - t0, json.loads(line[5:])))
            if out[-1][1]["type"] == "run_end" and out[-1][1]["status"] != "needs_human":
                break
    return out


@pytest.fixture
def slow_server(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    with OpenAIStub([slow_first] * 20) as stub:
        server = Server(tmp_path, [])
        server.args = ["--model", "stub-model", "--base-url", stub.url,
                       *server.args[2:]]  # the scripted model's place, taken by the endpoint
        server.start()
        try:
            yield server
        finally:
            server.kill()


def test_v1_events_with_deltas_show_the_first_steps_thought(slow_server):
    with slow_server.client as c:
        posted = time.monotonic()
        run = c.post("/v1/runs", json={"input": "time?", "stream": True}).json()
        with c.stream("GET", f"/v1/runs/{run['id']}/events", params={"deltas": "true"},
                      timeout=30) as stream:
            seen = timed(stream, posted)
    thought = [(t, e) for t, e in seen if e["type"] == "thought_delta" and e["step"] == 1]
    ended = next(t for t, e in seen if e["type"] == "step" and e["step"] == 1)
    assert thought, [e["type"] for _, e in seen]
    assert ended - thought[0][0] > 1.0, (thought[0][0], ended)
    assert "".join(e["text"] for _, e in thought) == THOUGHT  # what was written so far, then the rest


def test_ag_ui_shows_the_first_steps_thought(slow_server):
    body = {"threadId": "slow", "runId": "r1", "messages": [
        {"id": "m1", "role": "user", "content": "time?"}], "tools": [], "context": [],
        "state": {}, "forwardedProps": {}}
    with slow_server.client as c:
        posted = time.monotonic()
        with c.stream("POST", "/ag-ui", json=body, timeout=30,
                      headers={"Accept": "text/event-stream"}) as stream:
            seen = timed(stream, posted)
    kinds = [e["type"] for _, e in seen]
    thought = [(t, e) for t, e in seen if e["type"] == "REASONING_MESSAGE_CONTENT"
               and e["messageId"].split(".")[1] == "1"]
    ended = next(t for t, e in seen if e["type"] == "TOOL_CALL_END")
    assert thought, kinds
    assert ended - thought[0][0] > 1.0, (thought[0][0], ended)
    assert len(thought) > 1 and "".join(e["delta"] for _, e in thought) == THOUGHT
    assert kinds[-1] == "RUN_FINISHED"
