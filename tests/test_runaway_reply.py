"""A reply that never ends: the 135M model behind llama.cpp's server once wrote one clause of
its thought for 3,534 tokens, over 109 s, and the re-ask that sent it back whole overflowed
the model's window. Every request carries a cap, the thought is stopped where it passes its
own, and a re-ask shows only the head of a cut reply."""

from __future__ import annotations

import json

from jsonagent import Agent, AgentConfig
from jsonagent.loop import HEAD
from jsonagent.models.openai import OpenAIModel
from jsonagent.testing import step

from openai_stub import Chunks, OpenAIStub, completion, streamed

DONE = json.dumps(step("TaskCompleteTool", {"output": "4"}, "two and two"))
CLAUSE = "and then I check it again "


class Endless(Chunks):
    """A thought that goes on until the request's max_tokens (a token a chunk), or for good
    when the request sets none (bounded here only so that a broken test cannot hang)."""

    def __init__(self, max_tokens: int | None):
        super().__init__()
        self.max_tokens = max_tokens or 100_000
        self.written = 0

    def __iter__(self):
        base = {"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "stub"}
        yield {**base, "choices": [{"index": 0, "delta": {"content": '{"thought": "'},
                                    "finish_reason": None}]}
        for self.written in range(1, self.max_tokens):
            yield {**base, "choices": [{"index": 0, "delta": {"content": CLAUSE},
                                        "finish_reason": None}]}
        yield {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]}


def rambling(first: list):
    def answer(body):
        if not first:  # the first request rambles; the re-ask gets a proper reply
            first.append(Endless(body.get("max_tokens")))
            if body.get("stream"):
                return 200, first[0]
            whole = completion('{"thought": "' + CLAUSE * (body.get("max_tokens") or 100_000))
            whole["choices"][0]["finish_reason"] = "length"
            return 200, whole
        return (200, streamed([DONE])) if body.get("stream") else (200, completion(DONE))
    return answer


def test_every_request_carries_the_reply_cap():
    with OpenAIStub([DONE]) as stub:
        model = OpenAIModel("stub-model", base_url=stub.url, api_key="sk-test")
        assert Agent(model=model).run("x").ok
    assert stub.requests[0]["body"]["max_tokens"] == AgentConfig().reply_tokens == 1024


def test_a_model_built_from_its_name_takes_the_configured_cap(monkeypatch):
    with OpenAIStub([DONE]) as stub:
        monkeypatch.setenv("OPENAI_BASE_URL", stub.url)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
        assert Agent(model="stub-model", config=AgentConfig(reply_tokens=300)).run("x").ok
    assert stub.requests[0]["body"]["max_tokens"] == 300


def test_a_thought_that_runs_on_is_stopped_and_its_reask_shows_only_its_head():
    first: list = []
    with OpenAIStub([rambling(first)] * 2) as stub:
        model = OpenAIModel("stub-model", base_url=stub.url, api_key="sk-test")
        result = Agent(model=model).run("2+2?")
        assert stub.hung_up.wait(5)  # we stopped reading: the server stops writing
    assert result.status == "completed" and result.stats.reasks == 1
    assert first[0].written < 100  # stopped near 600 characters, not at 1,024 tokens
    reask = stub.requests[1]["body"]["messages"]
    cut, told = reask[-2]["content"], reask[-1]["content"]
    assert cut.startswith('{"thought": "and then') and len(cut) < HEAD + 60
    assert cut.endswith("more characters]")
    assert "ran past 600 characters" in told
    assert sum(len(m["content"] or "") for m in reask) < 6000  # far inside a 4,096-token window


def test_a_reply_cut_at_the_cap_goes_back_as_its_head(monkeypatch):
    """Without a thought cap to watch, the reply runs to max_tokens (finish_reason length);
    the re-ask still shows only its head."""
    first: list = []
    with OpenAIStub([rambling(first)] * 2) as stub:
        model = OpenAIModel("stub-model", base_url=stub.url, api_key="sk-test", max_tokens=200)
        result = Agent(model=model, config=AgentConfig(thought_max_chars=None)).run("2+2?")
    assert result.status == "completed" and result.stats.reasks == 1
    assert "stream" not in stub.requests[0]["body"] and stub.requests[0]["body"]["max_tokens"] == 200
    cut = stub.requests[1]["body"]["messages"][-2]["content"]
    assert len(cut) < HEAD + 60 and cut.endswith("more characters]")


def test_the_cap_counts_characters_as_decoded_and_only_the_steps_own_thought():
    from jsonagent.partial import ThoughtCap, ThoughtTooLong

    def cut(text: str, cap: int) -> bool:
        watch = ThoughtCap(cap)
        try:
            for i in range(0, len(text), 3):
                watch.feed(text[i:i + 3])
        except ThoughtTooLong:
            return True
        return False

    # a thought still being written (no closing quote): stopped once past the cap
    assert not cut('{"thought": "' + "\\u00e9" * 10, 10)  # 10 characters, not 60
    assert cut('{"thought": "' + "\\u00e9" * 11, 10)
    assert not cut('{"thought": "' + "\\\\" * 10, 10)  # \\ is one character
    assert cut('{"thought": "' + "\\\\" * 11, 10)
    nested = '{"tool_name": "t", "args_list": {"thought": "' + "y" * 50 + '"}}'
    assert not cut(nested, 10)  # an argument named thought is not the step's
    assert cut('{"tool_name": "t", "args_list": {"a": "}{"}, "thought": "' + "y" * 50, 10)
