"""Several calls a step (issue 42) against a real llama.cpp server serving the 135M model: the
server takes the constrained schema of a list of calls, and the model writes a well-formed
reply of several calls, which run side by side.

The 135M model does not plan in parallel by itself (asked cold, it answers at once), so the
session's first run, scripted, shows it one such step; the second run is the real model's.
"""

from __future__ import annotations

import pytest

pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (pip install 'jsonagent[local,server]')")

from jsonagent import Agent, AgentConfig, tool  # noqa: E402
from jsonagent.envelope import parse_reply  # noqa: E402
from jsonagent.models.openai import OpenAIModel  # noqa: E402
from jsonagent.reply import Parsed  # noqa: E402
from jsonagent.testing import ScriptedModel, step  # noqa: E402


@tool
def weather(city: str) -> str:
    """The weather in one city.

    Args:
        city: the city's name
    """
    return f"sunny in {city}"


def test_the_schema_of_several_calls_is_taken_and_the_reply_is_a_well_formed_list(
        llama_server, tmp_path):
    config = AgentConfig(json_mode="schema", parallel_calls=3)
    store = tmp_path / "runs.db"
    shown = [{"thought": "Three cities: one call each, at once.", "calls": [
        {"tool_name": "weather", "args_list": {"city": c}} for c in ("Oslo", "Rome", "Lima")]},
        step("TaskCompleteTool", {"output": "Sunny in Oslo, Rome and Lima."}, "All in.")]
    first = Agent(model=ScriptedModel(shown), tools=[weather], config=config, store=store)
    assert first.run("What is the weather in Oslo, Rome and Lima?", session="w").ok
    model = OpenAIModel(llama_server.model.stem, base_url=llama_server.base_url,
                        api_key="sk-local", temperature=0.0, max_tokens=256,
                        grammar_costly=False)  # the schema of several calls, taken by the grammar
    agent = Agent(model=model, tools=[weather], max_steps=2, config=config, store=store)
    events = list(agent.iter("What is the weather in Paris, Berlin and Madrid?", session="w"))
    end = events[-1]
    assert end.status != "failed", end.error
    assert end.result.json_mode == "schema"  # the server took the schema: no step-down
    assert not [e for e in events if e.type == "json_mode"]
    [reply, *_] = [e for e in events if e.type == "model_reply"]
    assert reply.finish_reason == "stop"
    parsed = parse_reply(reply.raw, agent.toolset, most=3)
    assert isinstance(parsed, Parsed) and parsed.repairs == [], reply.raw
    assert 2 <= len(parsed.calls) <= 3 and all(c.tool == "weather" for c in parsed.calls)
    step1 = end.result.steps[0]
    assert [c.args for c in step1.calls] == [c.args for c in parsed.calls]
    assert all(c.observation == f"sunny in {c.args['city']}" for c in step1.calls)
