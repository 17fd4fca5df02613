"""The openai backend streaming over real HTTP: the real SDK and a stub server on 127.0.0.1."""

import json
import logging
import threading
import time

from jsonagent import Agent, AgentConfig
from jsonagent import events as ev
from jsonagent.models.openai import OpenAIModel
from jsonagent.testing import step

from openai_stub import OpenAIStub, completion, error, streamed

DONE = json.dumps(step("TaskCompleteTool", {"output": "4"}, "two and two"))
PIECES = [DONE[i:i + 5] for i in range(0, len(DONE), 5)]


def model(stub, **kw):
    return OpenAIModel("stub-model", base_url=stub.url, api_key="sk-test", **kw)


def test_a_watched_reply_is_streamed_with_exact_usage():
    got = []
    with OpenAIStub([(200, streamed(PIECES, prompt_tokens=123, completion_tokens=45))]) as stub:
        m = model(stub)
        reply = m.complete([{"role": "user", "content": "x"}], {"type": "json_object"},
                           on_delta=got.append)
        m.close()
    body = stub.requests[0]["body"]
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert body["response_format"] == {"type": "json_object"}  # kept while streaming
    assert got == PIECES and reply.text == DONE
    assert (reply.usage.prompt_tokens, reply.usage.completion_tokens) == (123, 45)


def test_an_unwatched_reply_is_not_streamed_without_a_thought_to_watch():
    with OpenAIStub([DONE]) as stub:
        r = Agent(model=model(stub), config=AgentConfig(thought_max_chars=None)).run("x")
    assert r.ok and "stream" not in stub.requests[0]["body"]


def test_an_unwatched_reply_is_streamed_only_to_watch_its_thought():
    seen = []
    with OpenAIStub([(200, streamed(PIECES, prompt_tokens=123, completion_tokens=45))]) as stub:
        r = Agent(model=model(stub), on_event=seen.append).run("x")
    assert r.ok and stub.requests[0]["body"]["stream"] is True
    assert r.usage.prompt_tokens == 123  # exact, as a whole reply's
    assert not [e for e in seen if isinstance(e, ev.Delta)]  # nobody watches: no deltas


def test_an_endpoint_refusing_streams_gets_one_fallback_said_once(caplog):
    def answer(body):
        if body.get("stream"):
            return error(400, "stream is not supported by this server")
        return (200, completion(DONE, prompt_tokens=9, completion_tokens=3))

    with OpenAIStub([answer] * 4) as stub, caplog.at_level(logging.WARNING, "jsonagent.models"):
        agent = Agent(model=model(stub))
        first = list(agent.iter("x", deltas=True))
        second = list(agent.iter("y", deltas=True))
    streamed_requests = [r for r in stub.requests if r["body"].get("stream")]
    assert len(streamed_requests) == 1 and len(stub.requests) == 3  # remembered
    said = [r for r in caplog.records if "refused a streamed request" in r.getMessage()]
    assert len(said) == 1
    for events in (first, second):
        assert events[-1].status == "completed"
        # the whole reply still reaches the watchers, as one piece
        assert "".join(e.text for e in events if isinstance(e, ev.ThoughtDelta)) == "two and two"
    assert first[-1].usage.prompt_tokens == 9


def test_a_cancel_mid_stream_closes_it():
    slow = streamed([DONE[:12]] + [" "] * 200 + [DONE[12:]])
    slow.delay = 0.05
    with OpenAIStub([(200, slow)]) as stub:
        agent = Agent(model=model(stub))
        events = agent.iter("x", deltas=True)
        for e in events:
            if isinstance(e, ev.ThoughtDelta):
                break
        t0 = time.monotonic()
        threading.Timer(0.05, agent.cancel).start()
        rest = list(events)
        took = time.monotonic() - t0
        assert stub.hung_up.wait(5)  # the server saw the connection closed
    assert rest[-1].status == "interrupted" and took < 2


def test_a_whole_reply_that_outlasts_the_read_timeout_is_asked_for_streamed(caplog):
    """A local server writes a whole reply of 1,024 tokens under its grammar in more than the
    read timeout, and sends nothing until then: asked again whole, it timed out again, four
    times, and the run failed after 620 s. Streamed, the same reply comes within the timeout
    of each token, and so does every reply after it."""
    call = json.dumps(step("TaskCompleteTool", {"output": "4"}, "two and two"))

    def slow(body):
        if not body.get("stream"):
            time.sleep(1.5)  # writing it all before a byte is sent
            return 200, completion(call)
        out = streamed([call[i:i + 8] for i in range(0, len(call), 8)])
        out.delay = 0.1  # in all longer than the timeout, but never silent that long
        return 200, out

    with OpenAIStub([slow] * 3) as stub, caplog.at_level(logging.WARNING):
        m = model(stub, timeout=0.6, detect=False)
        r = Agent(model=m, config=AgentConfig(thought_max_chars=None)).run("x")
        again = m.complete([{"role": "user", "content": "x"}], None)
        m.close()
    assert r.ok and r.answer == "4", r.error
    assert [bool(q["body"].get("stream")) for q in stub.requests] == [False, True, True]
    assert again.text == call
    assert "sent no whole reply within 0.6 s; streaming replies from now on" in caplog.text
