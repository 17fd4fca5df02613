"""Typed model errors: every way an endpoint fails has one name, from the openai SDK, plain
HTTP and llama.cpp alike, and a run that ends on one says which (RunResult.error_kind, the
CLI's exit code and line, the server's run JSON)."""

from __future__ import annotations

import json
import socket

import pytest

from jsonagent import Agent
from jsonagent.errors import (AuthenticationFailed, BadRequest, ContentFiltered,
                              ContextWindowExceeded, ModelTimeout, ModelUnavailable,
                              QuotaExceeded, RateLimited, model_error_for, retry_after_s)
from jsonagent.models.openai import OpenAIModel
from jsonagent.testing import step

from openai_stub import OpenAIStub, completion, error
from test_cli import cli

DONE = json.dumps(step("TaskCompleteTool", {"output": "4"}))


def model(url: str, **kw) -> OpenAIModel:
    return OpenAIModel("stub-model", base_url=url, api_key="sk-test", max_retries=0, **kw)


def ask(url: str, **kw):
    return model(url, **kw).complete([{"role": "user", "content": "x"}], None)


@pytest.mark.parametrize("status,message,kind", [
    (429, "Rate limit reached for requests", RateLimited),
    (429, "You exceeded your current quota, please check your plan and billing", QuotaExceeded),
    (503, "The server is overloaded", ModelUnavailable),
    (500, "internal error", ModelUnavailable),
    (401, "Incorrect API key provided", AuthenticationFailed),
    (403, "no access to this model", AuthenticationFailed),
    (400, "This model's maximum context length is 4096 tokens", ContextWindowExceeded),
    (500, "Requested tokens (5000) exceed context window of 4096", ContextWindowExceeded),
    (400, "The response was filtered due to the content management policy", ContentFiltered),
    (404, "The model `nope` does not exist", BadRequest),
    (408, "Request timed out", ModelTimeout),
])
def test_each_http_failure_has_its_kind(status, message, kind):
    with OpenAIStub([error(status, message)]) as stub:
        with pytest.raises(kind) as caught:
            ask(stub.url)
    err = caught.value
    assert type(err) is kind and err.kind == kind.kind
    assert err.model == "stub-model" and err.endpoint == stub.url
    # the model too, a 401's as well (issue 58, finding 28)
    assert str(err).startswith(f"{stub.url} answered {status} for model 'stub-model': ")
    assert "\n" not in str(err)
    assert type(model_error_for(status, message)) is kind  # plain HTTP maps the same way


def test_a_rate_limit_carries_its_retry_after():
    with OpenAIStub([(*error(429, "slow down"), {"retry-after": "2"})]) as stub:
        with pytest.raises(RateLimited) as caught:
            ask(stub.url)
    assert caught.value.retry_after == 2.0


def test_retry_after_in_seconds_in_milliseconds_and_as_a_date():
    assert retry_after_s({"retry-after": "3"}) == 3.0
    assert retry_after_s({"retry-after-ms": "1500"}) == 1.5
    assert 0 <= retry_after_s({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}) <= 0.0
    assert retry_after_s({"retry-after": "soon"}) is None and retry_after_s(None) is None


def test_a_dead_endpoint_is_unavailable_and_a_silent_one_times_out():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}/v1"
    with pytest.raises(ModelUnavailable, match="cannot reach"):
        ask(dead)
    with socket.socket() as silent:  # accepts, never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        with pytest.raises(ModelTimeout):
            ask(f"http://127.0.0.1:{silent.getsockname()[1]}/v1", timeout=0.5)


def test_a_reply_withheld_by_the_content_filter():
    withheld = completion("")
    withheld["choices"][0]["finish_reason"] = "content_filter"
    with OpenAIStub([(200, withheld)]) as stub:
        with pytest.raises(ContentFiltered):
            ask(stub.url)


def test_a_run_that_ends_on_a_model_error_names_its_kind():
    with OpenAIStub([error(401, "Incorrect API key provided")]) as stub:
        result = Agent(model=model(stub.url)).run("x")
    assert result.status == "failed" and result.error_kind == "authentication"
    assert "Incorrect API key" in result.error


def test_the_cli_says_the_kind_and_exits_6_for_now_or_7_for_good(tmp_path):
    for status, message, code, kind in [(401, "Incorrect API key provided", 7, "authentication"),
                                        (503, "overloaded", 6, "unavailable")]:
        with OpenAIStub([error(status, message)] * 4) as stub:
            proc = cli("run", "x", "--no-store", "--model", "stub-model", "--base-url", stub.url,
                       "--retries", "0", env={"OPENAI_API_KEY": "sk-test"}, timeout=120)
        assert len(stub.requests) == 1  # the SDK's own retries are off, and so are ours here
        assert proc.returncode == code, proc.stderr
        assert f"failed ({kind}):" in proc.stderr and "Traceback" not in proc.stderr
