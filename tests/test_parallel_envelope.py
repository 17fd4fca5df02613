"""The envelope of several calls a step (issue 42): what a reply may hold, the re-ask that
says precisely what is wrong, the constrained schema, the prompt, and the request an
endpoint with native tool calling gets."""

from __future__ import annotations

import json

import pytest

from jsonagent import Agent, AgentConfig, ConfigError, tool
from jsonagent.envelope import parse_reply, response_schema
from jsonagent.models.openai import OpenAIModel
from jsonagent.reply import Parsed, ReplyProblem
from jsonagent.testing import ScriptedModel, step
from jsonagent.tools.toolset import Toolset
from openai_stub import OpenAIStub, error

DONE = step("TaskCompleteTool", {"output": "done"}, "done")


@tool
def weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"


TOOLS = Toolset.build([weather])


def several(*calls, thought="t") -> str:
    return json.dumps({"thought": thought, "calls": [
        {"tool_name": name, "args_list": args} for name, args in calls]})


def test_a_reply_of_several_calls_is_read_in_order_and_kept_as_written():
    text = several(("weather", {"city": "Oslo"}), ("weather", {"city": "Rome"}))
    got = parse_reply(text, TOOLS, most=3)
    assert isinstance(got, Parsed) and got.repairs == [] and got.raw == text
    assert [(c.tool, c.args) for c in got.calls] == [
        ("weather", {"city": "Oslo"}), ("weather", {"city": "Rome"})]
    assert got.step.tool_name == "weather" and got.thought == "t"


def test_the_one_call_envelope_is_one_call_and_each_call_is_repaired_as_a_step_is():
    one = parse_reply(json.dumps(step("weather", {"city": "Oslo"})), TOOLS, most=3)
    assert isinstance(one, Parsed) and len(one.calls) == 1 and one.raw is not None
    repaired = parse_reply('{"thought": "t", "calls": [{"tool": "WEATHER", "args": {"city": '
                           '"Oslo"}}]}', TOOLS, most=3)
    assert isinstance(repaired, Parsed) and repaired.calls[0].tool == "weather"
    assert repaired.repairs == ["/calls/0:alias:tool->tool_name",
                                "/calls/0:alias:args->args_list", "/calls/0:tool_name_case"]
    assert json.loads(repaired.to_json(several=True)) == {
        "thought": "t", "calls": [{"tool_name": "weather", "args_list": {"city": "Oslo"}}]}


@pytest.mark.parametrize("text, stage, words", [
    (several(), "calls", "/calls: the list is empty; a step makes 1 to 3 calls"),
    (several(*[("weather", {"city": c}) for c in "ABCD"]), "calls",
     "/calls: 4 calls, and a step makes at most 3"),
    (several(("weather", {"city": "Oslo"}), ("TaskCompleteTool", {"output": "x"})), "calls",
     "/calls: TaskCompleteTool is called beside 1 other call; it ends the task, so it goes "
     "alone"),
    (several(("weather", {"city": "Oslo"}), ("nope", {})), "tool",
     '/calls/1/tool_name: unknown tool "nope"'),
    (several(("weather", {"town": "Oslo"})), "args", "bad arguments for weather: "
     "/calls/0/args_list"),
    ('{"thought": "t", "calls": [{"args_list": {}}]}', "envelope",
     "/calls/0/tool_name: required key is missing"),
])
def test_a_reply_that_does_not_fit_is_refused_precisely(text, stage, words):
    got = parse_reply(text, TOOLS, most=3)
    assert isinstance(got, ReplyProblem) and got.stage == stage and words in got.message
    told = got.for_model(TOOLS, 3)
    assert words in told and '"calls": [{"tool_name": "<one of weather, TaskCompleteTool>"' \
        in told and "with 1 to 3 calls; TaskCompleteTool only alone" in told


def test_the_final_tool_mixed_with_a_call_is_reasked_and_none_of_its_calls_runs():
    ran = []

    @tool
    def note(text: str) -> str:
        """Notes."""
        ran.append(text)
        return "noted"

    model = ScriptedModel([several(("note", {"text": "a"}), ("TaskCompleteTool", {"output": "x"})),
                           several(("note", {"text": "b"})), DONE])
    result = Agent(model=model, tools=[note], config=AgentConfig(parallel_calls=2)).run("go")
    assert result.status == "completed" and ran == ["b"]  # the mixed reply ran nothing
    reask = model.requests[1]["messages"][-1]["content"]
    assert reask.startswith("Your last reply was rejected: /calls: TaskCompleteTool is called "
                            "beside 1 other call")
    assert result.stats.reasks == 1


def test_the_schema_lists_each_tools_arguments_in_an_array_of_at_most_n_and_the_final_alone():
    jsonschema = pytest.importorskip("jsonschema")
    schema = response_schema(TOOLS, 600, most=3)
    calls = schema["anyOf"][0]["properties"]["calls"]
    assert (calls["minItems"], calls["maxItems"]) == (1, 3)
    assert calls["items"]["properties"]["args_list"] == TOOLS.get("weather").spec.parameters
    final = schema["anyOf"][1]["properties"]["calls"]
    assert final["maxItems"] == 1 and final["items"]["properties"]["tool_name"] == {
        "const": "TaskCompleteTool"}
    ok = json.loads(several(("weather", {"city": "Oslo"}), ("weather", {"city": "Rome"})))
    jsonschema.validate(ok, schema)
    for bad in (several(*[("weather", {"city": c}) for c in "ABCD"]),
                several(("weather", {"city": "Oslo"}), ("TaskCompleteTool", {"output": "x"})),
                several(("weather", {"town": "Oslo"}))):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(json.loads(bad), schema)


def test_the_prompt_says_how_and_the_react_style_stays_at_one_call():
    prompt = Agent(model=ScriptedModel([]), tools=[weather],
                   config=AgentConfig(parallel_calls=4)).system_prompt
    assert '{"thought": "<why these calls, briefly>", "calls": [{"tool_name": ' in prompt
    assert "1. 1 to 4 tool calls per reply" in prompt and "run side by side" in prompt
    assert "TaskCompleteTool is always the only call of its reply" in prompt
    with pytest.raises(ConfigError, match="needs the json prompt style"):
        Agent(model=ScriptedModel([]), config=AgentConfig(parallel_calls=2,
                                                          prompt_style="react"))


def test_an_endpoint_gets_parallel_tool_calls_and_several_tool_calls_in_the_history():
    stub = OpenAIStub([several(("weather", {"city": "Oslo"}), ("weather", {"city": "Rome"})),
                       error(400, "parallel_tool_calls is only allowed when tools are given"),
                       json.dumps(DONE)])
    with stub:
        model = OpenAIModel("stub", base_url=stub.url, api_key="k", detect=False)
        config = AgentConfig(parallel_calls=2, tool_calls=True, json_mode="object")
        result = Agent(model=model, tools=[weather], config=config).run("Oslo and Rome?")
        model.close()
    assert result.status == "completed", result.error
    first, refused, last = (r["body"] for r in stub.requests)
    assert first["parallel_tool_calls"] is True and refused["parallel_tool_calls"] is True
    assert "parallel_tool_calls" not in last  # refused once: it goes no more
    step_, *answers = last["messages"][2:]
    calls = step_["tool_calls"]
    assert [json.loads(c["function"]["arguments"]) for c in calls] == [{"city": "Oslo"},
                                                                      {"city": "Rome"}]
    assert [a["role"] for a in answers] == ["tool", "tool"]
    assert [a["tool_call_id"] for a in answers] == [c["id"] for c in calls]
    assert [json.loads(a["content"])["response"] for a in answers] == ["sunny in Oslo",
                                                                       "sunny in Rome"]
