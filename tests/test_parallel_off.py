"""With parallel calls off (the default), what goes to an endpoint is what went before they
existed, byte for byte: the system prompt, the response schema, the history in the tool-call
form and in plain messages, a re-ask. The snapshot was written by the commit before them
(7b9f79e); regenerate it only for a deliberate change, with
JSONAGENT_UPDATE_SNAPSHOTS=1 python -m pytest tests/test_parallel_off.py
"""

from __future__ import annotations

import json
import os

import pytest

from jsonagent import Agent, AgentConfig, tool
from jsonagent.models.openai import OpenAIModel
from openai_stub import OpenAIStub

SNAPSHOT = os.path.join(os.path.dirname(__file__), "snapshots", "requests-parallel-off.json")


@tool
def weather(city: str) -> dict:
    """The weather in a city.

    Args:
        city: the city's name
    """
    if city == "Atlantis":
        raise ValueError("no such city")
    return {"city": city, "sky": "clear", "degrees": 21}


REPLIES = [
    {"thought": "Oslo first", "tool_name": "weather", "args_list": {"city": "Oslo"}},
    "not json at all",
    {"thought": "then Atlantis", "tool_name": "weather", "args_list": {"city": "Atlantis"}},
    {"thought": "done", "tool_name": "TaskCompleteTool", "args_list": {"output": "21 degrees"}},
]


def _bodies(json_mode: str, tool_calls: bool) -> list[dict]:
    stub = OpenAIStub([r if isinstance(r, str) else json.dumps(r) for r in REPLIES])
    with stub:
        model = OpenAIModel("stub", base_url=stub.url, api_key="k", detect=False)
        config = AgentConfig(json_mode=json_mode, tool_calls=tool_calls, check_answers=False)
        result = Agent(model=model, tools=[weather], config=config).run("Weather in Oslo?")
        model.close()
    assert result.status == "completed", result.error
    return [r["body"] for r in stub.requests]


def test_the_requests_are_those_of_the_commit_before_parallel_calls():
    got = {f"{mode}-{'tool_calls' if form else 'plain'}": _bodies(mode, form)
           for mode in ("schema", "object") for form in (True, False)}
    if os.environ.get("JSONAGENT_UPDATE_SNAPSHOTS"):
        with open(SNAPSHOT, "w", encoding="utf-8") as f:
            json.dump(got, f, ensure_ascii=False, indent=1)
    with open(SNAPSHOT, encoding="utf-8") as f:
        expected = json.load(f)
    for name, bodies in got.items():
        assert json.dumps(bodies, ensure_ascii=False) == \
            json.dumps(expected[name], ensure_ascii=False), name


@pytest.mark.parametrize("n", [0, -1])
def test_parallel_calls_below_one_is_refused_with_a_clear_error(n):
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="parallel_calls"):
        AgentConfig(parallel_calls=n)


@pytest.mark.parametrize("n", [0, -1, True, "2"])
def test_parallel_calls_other_than_a_count_of_one_or_more_is_refused_clearly(n):
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="parallel_calls is the most tool calls one "
                                              f"step may make.*got {n!r}"):
        AgentConfig(parallel_calls=n)
