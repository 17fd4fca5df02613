"""Fallback from an endpoint that keeps failing to the local 135M model, in this process: the
request is rebuilt for what the local model declares (its JSON mode, its chat roles)."""

from __future__ import annotations

import pytest

pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (pip install 'jsonagent[local,server]')")

from jsonagent import Agent  # noqa: E402
from jsonagent import events as ev  # noqa: E402
from jsonagent.config import AgentConfig, RetryConfig  # noqa: E402
from jsonagent.models.local import LocalConfig, LocalModel  # noqa: E402
from jsonagent.models.openai import OpenAIModel  # noqa: E402

from openai_stub import OpenAIStub, error  # noqa: E402


def test_503s_until_the_retries_are_spent_then_the_local_model_answers(gguf):
    local = LocalModel(gguf, LocalConfig(n_ctx=4096, max_tokens=256))
    events: list = []
    try:
        with OpenAIStub([error(503, "overloaded")] * 3) as stub:
            remote = OpenAIModel("remote", base_url=stub.url, api_key="sk-test")
            agent = Agent(model=[remote, local], max_steps=1, on_event=events.append,
                          config=AgentConfig(retry=RetryConfig(retries=2, backoff_s=0.05)))
            result = agent.run("What time is it?")
        assert len(stub.requests) == 3
    finally:
        local.close()
    assert [e.kind for e in events if isinstance(e, ev.ModelRetry)] == ["unavailable"] * 2
    [fell] = [e for e in events if isinstance(e, ev.ModelFallback)]
    assert (fell.model, fell.fallback) == ("remote", local.name)
    calls = [e for e in events if isinstance(e, ev.ModelCall)]
    # the local model's own JSON mode (a grammar from the schema), not the endpoint's object
    assert calls and {c.model for c in calls} == {local.name}
    assert {c.json_mode for c in calls} == {local.default_json_mode}
    # whatever the 135M model then does with the task, the step it took is recorded as its;
    # one that repeats a clause to its token limit has each reply cut, and none run (issue 58)
    if result.steps:
        assert result.steps[0].model == local.name
    else:
        assert "each was cut off at the token limit" in result.error, result.error
