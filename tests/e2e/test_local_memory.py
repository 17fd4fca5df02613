"""The context budget on a real GGUF model: exact token counts, and a run kept under budget."""

from __future__ import annotations

import pytest

pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (pip install 'jsonagent[local,server]')")

from jsonagent import Agent, AgentConfig, read_journal, tool  # noqa: E402
from jsonagent.memory import budget  # noqa: E402
from jsonagent.models.local import LocalConfig, LocalModel  # noqa: E402


@pytest.fixture(scope="module")
def local_model(gguf):
    model = LocalModel(gguf, LocalConfig(n_ctx=2048, max_tokens=128))
    yield model
    model.close()


def test_count_tokens_is_what_llama_cpp_evaluates(local_model):
    messages = [{"role": "system", "content": "You are terse."},
                {"role": "user", "content": "Say hi in French, é à 日本 {\"json\": [1, 2]}"},
                {"role": "assistant", "content": '{"thought": "", "tool_name": "x", "args_list": {}}'},
                {"role": "user", "content": "again"}]
    reply = local_model.complete(messages, None)
    assert local_model.count_tokens(messages) == reply.usage.prompt_tokens
    assert local_model.context_tokens == 2048
    assert budget(local_model, AgentConfig(reply_tokens=128)) == 2048 - 128


def test_a_run_on_the_local_model_stays_under_its_budget(local_model, tmp_path):
    """The tiny model cannot be trusted to loop usefully, so a scripted tool fills the
    context; the budget must still hold on every request, counted exactly."""
    @tool(repeatable=True)
    def page(n: int) -> str:
        """Read page n."""
        return f"page {n}: " + "words " * 80

    agent = Agent(model=local_model, tools=[page], transcript=tmp_path / "t.jsonl",
                  config=AgentConfig(max_context_tokens=1200, max_steps=8, json_mode="schema"))
    result = agent.run("Read pages 1 to 8 with the page tool, one call each, then finish.")
    events = read_journal(tmp_path / "t.jsonl")
    replies = [e for e in events if e.type == "model_reply"]
    assert replies and all(e.usage.prompt_tokens <= 1200 for e in replies)
    assert all(e.usage.counting == "exact" for e in replies)
    assert result.status in ("completed", "max_steps", "failed")
