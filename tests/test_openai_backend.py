"""The openai backend over real HTTP: the real SDK talking to a stub server on 127.0.0.1."""

import json

import pytest

from jsonagent import Agent, AgentConfig, ConfigError, ModelError
from jsonagent.config import RetryConfig
from jsonagent.errors import ModelTimeout
from jsonagent.models.openai import OpenAIModel
from jsonagent.testing import step

from http_fakes import FakeAPI, Trickle
from openai_stub import OpenAIStub, completion, error, streamed

DONE = json.dumps(step("TaskCompleteTool", {"output": "4"}, "done"))


def model(stub, **kw):
    return OpenAIModel("stub-model", base_url=stub.url, api_key="sk-test", **kw)


def test_request_carries_messages_and_schema_response_format():
    with OpenAIStub([json.dumps(step("GetTimeTools")), DONE]) as stub:
        r = Agent(model=model(stub), config=AgentConfig(json_mode="schema")).run("2+2?")
    assert r.status == "completed" and r.answer == "4"
    first = stub.requests[0]
    assert first["path"] == "/v1/chat/completions" and first["auth"] == "Bearer sk-test"
    body = first["body"]
    assert body["model"] == "stub-model"
    assert [m["role"] for m in body["messages"]] == ["system", "user"]
    assert body["messages"][1]["content"] == "2+2?"
    fmt = body["response_format"]
    assert fmt["type"] == "json_schema"
    consts = [alt["properties"]["tool_name"]["const"] for alt in fmt["json_schema"]["schema"]["anyOf"]]
    assert consts == ["GetTimeTools", "AskHumanHelpTool", "TaskCompleteTool", "CodeInterpreterTool"]
    second = stub.requests[1]["body"]["messages"]
    assert [m["role"] for m in second] == ["system", "user", "assistant", "tool"]
    call = second[2]["tool_calls"][0]
    assert call["type"] == "function" and call["function"]["name"] == "GetTimeTools"
    assert json.loads(second[2]["content"])["tool_name"] == "GetTimeTools"
    assert second[3]["tool_call_id"] == call["id"]
    assert json.loads(second[3]["content"])["tool_name"] == "GetTimeTools"
    assert r.usage.prompt_tokens == 22 and r.usage.completion_tokens == 14


def test_default_mode_is_json_object():
    with OpenAIStub([DONE]) as stub:
        Agent(model=model(stub)).run("x")
    assert stub.requests[0]["body"]["response_format"] == {"type": "json_object"}


def test_400_on_response_format_steps_down_and_stays_down():
    with OpenAIStub([error(400, "response_format json_schema is not supported"),
                     error(400, "response_format with a schema is not supported"),
                     json.dumps(step("GetTimeTools")), error(400, "json_object unsupported too"),
                     DONE]) as stub:
        r = Agent(model=model(stub), config=AgentConfig(json_mode="schema")).run("x")
    formats = [req["body"].get("response_format") for req in stub.requests]
    assert formats[0]["type"] == "json_schema"
    # the same schema in llama-cpp-python's dialect, before giving up on schemas
    assert formats[1]["type"] == "json_object" and "anyOf" in formats[1]["schema"]
    assert formats[2:] == [{"type": "json_object"}, {"type": "json_object"}, None]
    assert r.status == "completed" and r.json_mode == "prompt"


def test_schema_in_json_object_dialect_when_json_schema_is_refused():
    """llama-cpp-python's server answers a 500 naming response_format for "json_schema"."""
    with OpenAIStub([error(500, "Unsupported response_format type json_schema"),
                     json.dumps(step("GetTimeTools")), DONE]) as stub:
        r = Agent(model=model(stub, max_retries=0), config=AgentConfig(json_mode="schema")).run("x")
    formats = [req["body"]["response_format"] for req in stub.requests]
    assert formats[0]["type"] == "json_schema"
    assert all(f["type"] == "json_object" and "anyOf" in f["schema"] for f in formats[1:])
    assert r.status == "completed" and r.json_mode == "schema"


def test_prompt_mode_sends_no_response_format():
    with OpenAIStub([DONE]) as stub:
        Agent(model=model(stub), config=AgentConfig(json_mode="prompt")).run("x")
    assert "response_format" not in stub.requests[0]["body"]


def retrying(n: int) -> AgentConfig:
    """Our retries (the SDK's are off), quickly."""
    return AgentConfig(retry=RetryConfig(retries=n, backoff_s=0.01))


def test_5xx_and_429_are_retried_then_succeed():
    with OpenAIStub([error(503, "busy"), error(429, "slow down"), DONE]) as stub:
        r = Agent(model=model(stub), config=retrying(2)).run("x")
    assert r.status == "completed" and len(stub.requests) == 3


def test_persistent_5xx_is_reported_clearly():
    with OpenAIStub([error(500, "kaboom")] * 3) as stub:
        r = Agent(model=model(stub), config=retrying(1)).run("x")
    assert r.status == "failed" and len(stub.requests) == 2
    assert "answered 500 for model 'stub-model': kaboom (server error)" in r.error


def test_401_is_not_retried_and_names_the_key():
    with OpenAIStub([error(401, "bad key")]) as stub:
        r = Agent(model=model(stub)).run("x")
    assert len(stub.requests) == 1 and "401" in r.error and "OPENAI_API_KEY" in r.error


def test_400_without_response_format_is_an_error_not_a_step_down():
    with OpenAIStub([error(400, "context too long")]) as stub:
        r = Agent(model=model(stub), config=AgentConfig(json_mode="prompt")).run("x")
    assert r.status == "failed" and "context too long" in r.error


def test_dead_server_is_a_clear_error():
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    m = OpenAIModel("m", base_url=f"http://127.0.0.1:{port}/v1", api_key="k", max_retries=0, timeout=5)
    with pytest.raises(ModelError, match=f"cannot reach http://127.0.0.1:{port}/v1"):
        m.complete([{"role": "user", "content": "hi"}], None)


def test_timeout_is_reported():
    import time

    def slow(body):
        time.sleep(1.5)
        return (200, completion(DONE))

    # a whole reply past the read timeout is asked for again streamed; silent, it times out
    with OpenAIStub([slow, slow]) as stub:
        m = model(stub, timeout=0.3, max_retries=0)
        with pytest.raises(ModelError, match="timed out"):
            m.complete([{"role": "user", "content": "hi"}], None)
    assert [bool(r["body"].get("stream")) for r in stub.requests] == [False, True]


def answer(req, every: float | None = None):
    """DONE, whole or as server-sent events as the request asks; with `every`, a byte at a
    time, that many seconds apart."""
    if req.body.get("stream"):
        sse = "".join(f"data: {json.dumps(c)}\n\n" for c in streamed([DONE])) + "data: [DONE]\n\n"
        body, headers = sse.encode(), {"content-type": "text/event-stream"}
    else:
        body, headers = json.dumps(completion(DONE)).encode(), {"content-type": "application/json"}
    return 200, body if every is None else Trickle(body, every), headers


def test_an_endpoint_that_trickles_its_reply_ends_the_run_on_the_requests_deadline():
    """A byte every 0.3 s keeps every read within the SDK's timeout; only the deadline ends
    it (a slowloris endpoint held a run 481 s)."""
    import time

    with FakeAPI({"/v1/chat/completions": lambda req: answer(req, every=0.3)}) as api:
        m = OpenAIModel("m", base_url=api.url + "/v1", api_key="k", detect=False, deadline=1.5)
        started = time.monotonic()
        result = Agent(model=m, config=AgentConfig(retry=RetryConfig(retries=0))).run("hi")
        took = time.monotonic() - started
    assert result.status == "failed" and result.error_kind == "timeout"
    assert result.error == (f"{api.url}/v1 sent no whole reply within 1.5 s (the request's "
                            "deadline)")
    assert 1.5 <= took < 4, took
    assert len(api.requests) == 1


def test_a_trickling_endpoint_holds_a_run_with_the_default_retries_one_deadline():
    """Past its deadline a request is not tried again on the same model, as a read that
    timed out is (issue 58, finding 11, from review): with `retries` 3, a slow drip held
    one step four deadlines and their backoffs, 20 minutes at 300 s."""
    import time

    with FakeAPI({"/v1/chat/completions": lambda req: answer(req, every=0.3)}) as api:
        m = OpenAIModel("m", base_url=api.url + "/v1", api_key="k", detect=False, deadline=1.5)
        started = time.monotonic()
        result = Agent(model=m).run("hi")  # the default RetryConfig
        took = time.monotonic() - started
    assert result.status == "failed" and result.error_kind == "timeout"
    assert "within 1.5 s (the request's deadline)" in result.error
    assert len(api.requests) == 1 and 1.5 <= took < 3, took


def test_a_whole_reply_asked_again_streamed_keeps_the_requests_deadline():
    """A whole reply silent past the read timeout is asked for again streamed; that second
    request has what is left of the first's deadline, not a deadline of its own."""
    import time

    def slow_whole(req):
        if not req.body.get("stream"):
            time.sleep(3)  # past the read timeout, and silent
        return answer(req, every=0.3)

    with FakeAPI({"/v1/chat/completions": slow_whole}) as api:
        m = OpenAIModel("m", base_url=api.url + "/v1", api_key="k", detect=False,
                        deadline=2.5, timeout=1.5, max_retries=0)
        started = time.monotonic()
        with pytest.raises(ModelTimeout, match="no whole reply within 2.5 s") as caught:
            m.complete([{"role": "user", "content": "hi"}], None)  # no on_delta: whole
        took = time.monotonic() - started
    assert caught.value.past_deadline  # so a fallback does not ask this model again
    assert [bool(r.body.get("stream")) for r in api.requests] == [False, True]
    assert 2.5 <= took < 3.7, took  # a deadline of its own: 1.5 + 2.5 s


def test_a_whole_reply_that_trickles_ends_on_the_deadline_too():
    import time

    with FakeAPI({"/v1/chat/completions": lambda req: answer(req, every=0.3)}) as api:
        m = OpenAIModel("m", base_url=api.url + "/v1", api_key="k", detect=False, deadline=1.5)
        started = time.monotonic()
        with pytest.raises(ModelTimeout, match="no whole reply within 1.5 s"):
            m.complete([{"role": "user", "content": "hi"}], None)  # no on_delta: whole
        assert time.monotonic() - started < 4
    assert api.requests[0].body.get("stream") is None


def test_an_endpoint_that_trickles_its_models_listing_is_unknown_after_the_deadline():
    """Detection asks /v1/models before the first request: a listing sent a byte at a time
    held the run, as the chat request did."""
    import time

    listing = Trickle(b" " * 1000 + b'{"object": "list", "data": []}', every=0.3)
    with FakeAPI({"/v1/models": lambda req: (200, listing),
                  "/v1/chat/completions": answer}) as api:
        m = OpenAIModel("m", base_url=api.url + "/v1", api_key="k", deadline=1.5)
        started = time.monotonic()
        result = Agent(model=m).run("hi")
        took = time.monotonic() - started
    assert result.status == "completed" and result.answer == "4"
    assert [r.path for r in api.requests][:2] == ["/v1/models", "/v1/chat/completions"]
    assert m.server is None or m.server["kind"] == "unknown"
    assert took < 4, took


def test_a_stream_that_ends_after_detection_went_unanswered_does_not_wait_on_itself(
        monkeypatch):
    """The stream's end asks what the server is; asked again there, on the loop the
    detection itself must run on, the request waited for itself for ever."""
    import threading

    from jsonagent.models import servers

    monkeypatch.setattr(servers, "ASK_AGAIN_S", 0.0)  # every ask is "later"
    listing = Trickle(b" " * 1000 + b"{}", every=0.3)  # unanswered within the deadline
    # neither a finish_reason nor [DONE]: whether that is whole asks what the server is
    unmarked = "".join(f"data: {json.dumps(c)}\n\n" for c in streamed([DONE])[:1])
    with FakeAPI({"/v1/models": lambda req: (200, listing), "/v1/chat/completions":
                  lambda req: (200, unmarked, {"content-type": "text/event-stream"})}) as api:
        m = OpenAIModel("m", base_url=api.url + "/v1", api_key="k", deadline=1.5)
        replies = []
        asking = threading.Thread(target=lambda: replies.append(m.complete(
            [{"role": "user", "content": "hi"}], None, on_delta=lambda piece: None)),
            daemon=True)
        asking.start()
        asking.join(10)
    assert not asking.is_alive() and replies[0].text == DONE and replies[0].unended


def test_a_deadline_is_a_number_of_seconds_above_0():
    with pytest.raises(ConfigError, match="deadline 0: a request's deadline"):
        OpenAIModel("m", base_url="http://127.0.0.1:9/v1", deadline=0)


@pytest.mark.parametrize("answer,streams,said", [
    ((200, "<html><body>\n  <h1>Sign in</h1> to the proxy</body></html>",
      {"content-type": "text/html; charset=utf-8"}), False,
     "the request with text/html, starting '<html><body> <h1>Sign in</h1> to the proxy</body></html>'"),
    ((200, b"\x00\xff\x1b[2Jgarbage", {"content-type": "application/octet-stream"}), False,
     "the request with application/octet-stream, starting '\\x00\ufffd\\x1b[2Jgarbage'"),
    ((200, {"id": "chatcmpl-1", "object": "chat.completion", "choices": []}), False,
     "the request with application/json, starting '{\"id\": \"chatcmpl-1\", \"object\": "
     "\"chat.completion\", \"choices\": []}'"),
    ((200, completion(DONE)), True,
     "a streamed request with application/json, starting '{\"id\": \"chatcmpl-1\", "
     "\"object\": \"chat.completion\", \"created\": 0, \"model\": \"stub\", "
     "\"choices\": [{\"index\": 0, \"finish_reason...'"),
    ((200, b""), False, "the request with no content type and an empty body"),
], ids=["html", "garbage", "json-without-choices", "json-to-a-stream", "empty"])
def test_a_200_that_is_not_a_chat_completion_says_what_came_back(answer, streams, said):
    """Each was "returned no choices", which left the reader to guess (a proxy's sign-in
    page, a server that ignores stream). Control characters are escaped, never printed."""
    with FakeAPI({"/v1/chat/completions": lambda req: answer}) as api:
        m = OpenAIModel("m", base_url=api.url + "/v1", api_key="k", detect=False)
        with pytest.raises(ModelError) as caught:
            m.complete([{"role": "user", "content": "hi"}], None,
                       on_delta=(lambda piece: None) if streams else None)
    assert str(caught.value) == f"{api.url}/v1 returned no choices: it answered {said}"
    assert api.requests[0].body.get("stream") is (True if streams else None)


def test_cached_tokens_are_reported():
    with OpenAIStub([(200, completion(DONE, prompt_tokens=100, cached=80))]) as stub:
        reply = model(stub).complete([{"role": "user", "content": "x"}], None)
    assert reply.usage.cached_tokens == 80


def test_missing_key_without_base_url_is_a_config_error():
    with pytest.raises(ConfigError, match="no API key"):
        OpenAIModel("gpt-4o-mini")


def test_local_base_url_needs_no_key(monkeypatch):
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:1/v1")
    m = OpenAIModel("llama")
    assert m.base_url == "http://127.0.0.1:1/v1"


def test_resolve_model_from_environment(monkeypatch, tmp_path):
    from jsonagent.models import resolve_model
    from jsonagent.testing import ScriptedModel

    monkeypatch.setenv("OPENAI_API_KEY", "k")
    monkeypatch.setenv("JSONAGENT_MODEL", "qwen2.5:7b")  # Ollama names contain a colon
    assert resolve_model().name == "qwen2.5:7b"
    assert resolve_model("openai:gpt-4o").name == "gpt-4o"
    (tmp_path / "s.json").write_text("[]")
    assert isinstance(resolve_model(f"scripted:{tmp_path}/s.json"), ScriptedModel)
    monkeypatch.delenv("JSONAGENT_MODEL")
    with pytest.raises(ConfigError, match="no model"):
        resolve_model()


def test_400_unrelated_to_the_format_does_not_step_down():
    # sent once more (summarised, had there been anything to summarise), then the run fails
    with OpenAIStub([error(400, "This model's maximum context length is 4096 tokens")] * 2) as stub:
        r = Agent(model=model(stub), config=AgentConfig(json_mode="schema")).run("x")
    assert r.status == "failed" and "maximum context length" in r.error
    assert len(stub.requests) == 2 and r.json_mode == "schema"


def test_temperature_and_max_tokens_are_sent_when_set():
    with OpenAIStub([DONE]) as stub:
        Agent(model=model(stub, temperature=0.0, max_tokens=256)).run("x")
    body = stub.requests[0]["body"]
    assert body["temperature"] == 0.0 and body["max_tokens"] == 256


def test_every_model_sends_its_requests_from_one_thread():
    """A server or a script builds many models; each used to start an event loop thread of
    its own that nothing ever stopped (34 of them were alive when the test suite ended)."""
    import threading

    with OpenAIStub([DONE] * 4) as stub:
        for _ in range(4):
            m = model(stub)
            assert m.complete([{"role": "user", "content": "x"}], None).text == DONE
        m.close()
    loops = [t for t in threading.enumerate() if "openai" in t.name]
    assert len(loops) == 1


def test_a_forked_child_gets_a_requests_thread_of_its_own():
    """The loop's thread does not survive a fork: a child that took the parent's loop as
    running would wait on it forever (a server forked after a request, as gunicorn's
    --preload)."""
    import os
    import time

    with OpenAIStub([DONE] * 2) as stub:
        assert model(stub).complete([{"role": "user", "content": "x"}], None).text == DONE
        pid = os.fork()
        if pid == 0:  # the child leaves through os._exit, whatever happens
            ok = False
            try:
                ok = model(stub).complete([{"role": "user", "content": "x"}], None).text == DONE
            finally:
                os._exit(0 if ok else 1)
        deadline = time.monotonic() + 30
        while (done := os.waitpid(pid, os.WNOHANG))[0] == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        if done[0] == 0:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
    assert done[0] == pid and os.waitstatus_to_exitcode(done[1]) == 0
