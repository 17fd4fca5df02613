"""The openai backend's sampling defaults and the native tool-call form, over real HTTP
(the real SDK talking to a stub server on 127.0.0.1), with the step-downs they allow."""

import json
import logging

import httpx
import openai
import pytest

from jsonagent import Agent, AgentConfig
from jsonagent.models import resolve_model
from jsonagent.models.openai import OpenAIModel
from jsonagent.prompt import prompt_style
from jsonagent.state import Message
from jsonagent.testing import step

from openai_stub import OpenAIStub, completion, error

TIME = json.dumps(step("GetTimeTools", {}, "the time first"))
DONE = json.dumps(step("TaskCompleteTool", {"output": "4"}, "done"))


def model(stub, **kw):
    return OpenAIModel("stub-model", base_url=stub.url, api_key="sk-test", **kw)


def warnings(caplog, words):
    return [r for r in caplog.records if r.levelno == logging.WARNING and words in r.getMessage()]


def test_a_request_carries_temperature_0_and_no_repetition_penalty():
    events = []
    with OpenAIStub([DONE]) as stub:
        Agent(model=model(stub), on_event=events.append).run("x")
    body = stub.requests[0]["body"]
    assert body["temperature"] == 0.0
    assert body["repeat_penalty"] == 1.0 and body["repetition_penalty"] == 1.0
    call = next(e for e in events if e.type == "model_reply")
    assert call.sampling == {"temperature": 0.0, "repeat_penalty": 1.0, "repetition_penalty": 1.0}


def test_a_temperature_given_is_sent_and_none_leaves_it_to_the_server():
    with OpenAIStub([DONE, DONE]) as stub:
        Agent(model=model(stub, temperature=0.7)).run("x")
        Agent(model=model(stub, temperature=None)).run("x")
    assert stub.requests[0]["body"]["temperature"] == 0.7
    assert "temperature" not in stub.requests[1]["body"]


def test_resolve_model_passes_the_temperature_on():
    assert resolve_model("openai:m", base_url="http://127.0.0.1:9/v1").sampling == {"temperature": 0.0}
    m = resolve_model("openai:m", base_url="http://127.0.0.1:9/v1", temperature=0.3)
    assert m.sampling == {"temperature": 0.3}


def test_openai_itself_never_gets_the_llama_cpp_fields():
    sent = []

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(json.loads(request.content))
        return httpx.Response(200, json=completion(DONE))

    m = OpenAIModel("gpt-4o-mini", api_key="sk-test")
    assert m.base_url == "https://api.openai.com/v1" and m.sampling_extra == {}
    m._client = openai.AsyncOpenAI(api_key="sk-test", http_client=httpx.AsyncClient(
        transport=httpx.MockTransport(handler)))
    reply = m.complete([{"role": "user", "content": "x"}], None)
    assert sent[0]["temperature"] == 0.0
    assert not {"repeat_penalty", "repetition_penalty"} & set(sent[0])
    assert reply.sampling == {"temperature": 0.0}
    azure = OpenAIModel("m", base_url="https://me.openai.azure.com/openai/v1", api_key="k")
    assert azure.sampling_extra == {}
    assert OpenAIModel("m", base_url="https://api.deepseek.com/v1", api_key="k").sampling_extra


def test_a_refused_temperature_is_dropped_once_and_remembered(caplog):
    refusal = error(400, "Unsupported value: 'temperature' does not support 0 with this model. "
                         "Only the default (1) value is supported.")
    events = []
    with OpenAIStub([refusal, TIME, DONE, DONE]) as stub:
        m = model(stub)
        first = Agent(model=m, on_event=events.append).run("x")
        second = Agent(model=m).run("y")
    assert first.status == second.status == "completed"
    bodies = [r["body"] for r in stub.requests]
    assert bodies[0]["temperature"] == 0.0
    assert all("temperature" not in b for b in bodies[1:]) and len(bodies) == 4
    assert all(b["repeat_penalty"] == 1.0 for b in bodies)  # only the refused field goes
    assert len(warnings(caplog, "refused temperature")) == 1
    assert all("temperature" not in e.sampling for e in events if e.type == "model_reply")


def test_an_unknown_field_refused_drops_that_field_only(caplog):
    refusal = error(400, "Unrecognized request argument supplied: repeat_penalty")
    with OpenAIStub([refusal, DONE]) as stub:
        assert Agent(model=model(stub)).run("x").status == "completed"
    second = stub.requests[1]["body"]
    assert "repeat_penalty" not in second and second["repetition_penalty"] == 1.0
    assert second["temperature"] == 0.0
    assert len(warnings(caplog, "refused repeat_penalty")) == 1


def refuses_tool_messages(reply):
    """An endpoint that knows only system, user and assistant messages."""
    def answer(body):
        if any(m["role"] == "tool" or m.get("tool_calls") for m in body["messages"]):
            return error(400, "Invalid value for 'role': 'tool' is not one of system, user, "
                              "assistant")
        return reply(body)
    return answer


def test_an_endpoint_refusing_tool_messages_is_stepped_down_once(caplog):
    script = [refuses_tool_messages(lambda b, reply=reply: reply) for reply in (TIME, TIME, TIME, DONE)]
    with OpenAIStub(script) as stub:
        result = Agent(model=model(stub), config=AgentConfig(stall_after=None)).run("x")
    assert result.status == "completed" and [s.tool for s in result.steps] == \
        ["GetTimeTools", "GetTimeTools", "TaskCompleteTool"]
    roles = [[m["role"] for m in r["body"]["messages"]] for r in stub.requests]
    assert roles[0] == ["system", "user"]
    assert roles[1][-1] == "tool"  # the probe: refused
    assert roles[2] == ["system", "user", "assistant", "user"]  # the same request, plain
    assert all("tool" not in r for r in roles[2:]) and len(roles) == 4
    assert not any(m.get("tool_calls") for r in stub.requests[2:] for m in r["body"]["messages"])
    assert len(warnings(caplog, "refused the tool-call form")) == 1


def test_call_ids_are_the_same_on_every_request():
    with OpenAIStub([TIME, json.dumps(step("GetTimeTools", {}, "again")), DONE]) as stub:
        Agent(model=model(stub), config=AgentConfig(stall_after=None)).run("x")
    second, third = (r["body"]["messages"] for r in stub.requests[1:])
    assert second[2] == third[2]  # the first step, as both requests show it
    assert third[3]["tool_call_id"] == second[2]["tool_calls"][0]["id"]
    assert third[4]["tool_calls"][0]["id"] != second[2]["tool_calls"][0]["id"]
    assert third[5]["tool_call_id"] == third[4]["tool_calls"][0]["id"]


def test_a_model_without_the_capability_and_config_off_keep_the_plain_form():
    with OpenAIStub([TIME, DONE]) as stub:
        Agent(model=model(stub), config=AgentConfig(tool_calls=False)).run("x")
    assert [m["role"] for m in stub.requests[1]["body"]["messages"]] == \
        ["system", "user", "assistant", "user"]


def test_render_pairs_only_a_step_with_its_result():
    step_json = json.dumps(step("GetTimeTools", {"zone": "UTC"}, "t"))
    history = [Message(role="user", content="q"),
               Message(role="assistant", content="not json"),  # a raw reply re-asked
               Message(role="user", content="reply in JSON"),
               Message(role="assistant", content=step_json),
               Message(role="observation", content='{"tool_name": "GetTimeTools", "response": 1}'),
               Message(role="observation", content='{"response": "orphan"}')]
    wire = prompt_style("json").render(history, "user", tool_calls=True)
    assert [m["role"] for m in wire] == ["user", "assistant", "user", "assistant", "tool", "user"]
    assert "tool_calls" not in wire[1]
    call = wire[3]["tool_calls"][0]
    assert call["function"] == {"name": "GetTimeTools", "arguments": '{"zone": "UTC"}'}
    assert wire[3]["content"] == step_json and wire[4]["tool_call_id"] == call["id"]
    # ReAct shows steps and observations as text whatever the flag says
    react = prompt_style("react").render(history, "user", tool_calls=True)
    assert all("tool_calls" not in m and m["role"] != "tool" for m in react)


@pytest.mark.parametrize("status", [401, 404, 500])
def test_other_errors_are_no_reason_to_drop_anything(status):
    with OpenAIStub([error(status, "temperature tool role")] * 5) as stub:
        result = Agent(model=model(stub, max_retries=0)).run("x")
    assert result.status == "failed"
    assert all(r["body"]["temperature"] == 0.0 for r in stub.requests)
