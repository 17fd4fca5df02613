"""What the openai backend sends a real llama.cpp server: temperature 0, no repetition
penalty, and the history in the native tool-call form, which the server takes.

A recording proxy on 127.0.0.1 sits between the backend and the server, so the test reads
the request bodies as they went over the wire, and the replies as the server wrote them.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest

pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (pip install 'jsonagent[local,server]')")

from http_fakes import FakeAPI, Request  # noqa: E402
from jsonagent import Agent, AgentConfig, tool  # noqa: E402
from jsonagent.models.openai import OpenAIModel  # noqa: E402
from jsonagent.testing import step  # noqa: E402


class RecordingProxy(FakeAPI):
    """Forwards each request to `target` and keeps each POST's (request body, status, reply
    body); GETs (the server's detection) pass unrecorded."""

    def __init__(self, target: str):
        self.exchanges: list[tuple[dict, int, dict]] = []
        super().__init__({"/": self._forward})
        self.target, self.url = target, self.url + "/v1"

    def _forward(self, req: Request) -> tuple[int, dict]:
        post = req.method == "POST"
        forward = urllib.request.Request(self.target + req.path, method=req.method,
                                         data=json.dumps(req.body).encode() if post else None,
                                         headers={"content-type": "application/json"})
        try:
            with urllib.request.urlopen(forward, timeout=120) as response:
                status, data = response.status, response.read()
        except urllib.error.HTTPError as exc:
            status, data = exc.code, exc.read()
        reply = json.loads(data or b"{}")
        if post:
            self.exchanges.append((req.body, status, reply))
        return status, reply


class FirstStepGiven:
    """The real backend, except that the first reply is a given tool call: the 135M model
    cannot be relied on to call a tool, and what is tested here is the request after one."""

    def __init__(self, model: OpenAIModel, first: str):
        self.model, self.first, self.name = model, first, model.name
        self.tool_calls = model.tool_calls

    def complete(self, messages, response_format, *, stop=None, on_delta=None):
        if self.first is not None:
            from jsonagent.models import ModelReply

            first, self.first = self.first, None
            return ModelReply(text=first)
        return self.model.complete(messages, response_format, stop=stop, on_delta=on_delta)


@tool
def order_status(order_id: int) -> str:
    """The status of an order, by its number."""
    return f"order {order_id}: shipped by Zorblat Freight on 3 March"


def test_the_request_is_the_in_process_prompt_at_temperature_0_with_no_penalty(llama_server,
                                                                              tmp_path):
    """llama-cpp-python's server is detected: its penalty is turned off, and each step goes as
    its JSON alone with the result in the tool turn (its id kept), which its chat template
    renders token for token as the in-process backend does (bench/token_diff.py)."""
    with RecordingProxy(llama_server.base_url.removesuffix("/v1")) as proxy:
        real = OpenAIModel(llama_server.model.stem, base_url=proxy.url, api_key="sk-local",
                           max_retries=0)
        model = FirstStepGiven(real, json.dumps(step("order_status", {"order_id": 1234}, "look")))
        agent = Agent(model=model, tools=[order_status], max_steps=2,
                      config=AgentConfig(json_mode="object", max_reasks=0),
                      transcript=tmp_path / "run.jsonl")
        result = agent.run("What is the status of order 1234? Look it up.")

    assert len(proxy.exchanges) == 1, "the request was refused and sent again"
    body, status, reply = proxy.exchanges[0]
    assert status == 200, reply
    assert body["temperature"] == 0.0
    assert body["repeat_penalty"] == 1.0
    assert [m["role"] for m in body["messages"]] == ["system", "user", "assistant", "tool"]
    assert "tool_calls" not in body["messages"][2]
    assert json.loads(body["messages"][2]["content"]) == step("order_status", {"order_id": 1234},
                                                              "look")
    assert body["messages"][3]["tool_call_id"]
    assert "Zorblat" in json.loads(body["messages"][3]["content"])["response"]
    assert reply["choices"][0]["message"]["content"], "the server wrote no reply"
    assert result.steps[0].tool == "order_status" and result.stats.model_calls == 2
    events = [json.loads(line) for line in (tmp_path / "run.jsonl").read_text().splitlines()]
    sent = [e["sampling"] for e in events if e["type"] == "model_reply" and e.get("sampling")]
    assert sent == [{"temperature": 0.0, "repeat_penalty": 1.0}]


def test_a_run_of_several_steps_completes_against_the_server(llama_server):
    """The first step given (left alone, the 135M model answers at once, without the tool);
    every later one from the real model, which reads the result in the tool turn. At
    temperature 0 it calls the tool again; the stall warning then leaves the tool out of the
    grammar, and it finishes."""
    with RecordingProxy(llama_server.base_url.removesuffix("/v1")) as proxy:
        real = OpenAIModel(llama_server.model.stem, base_url=proxy.url, api_key="sk-local",
                           max_retries=0)
        model = FirstStepGiven(real, json.dumps(step("order_status", {"order_id": 1234}, "look")))
        agent = Agent(model=model, tools=[order_status], max_steps=4,
                      config=AgentConfig(json_mode="schema"))
        result = agent.run("What is the status of order 1234? Look it up.")

    assert result.status == "completed", (result.status, result.error)
    assert len(result.steps) >= 2 and result.steps[0].tool == "order_status"
    answered = [(body, reply) for body, status, reply in proxy.exchanges if status == 200]
    assert len(answered) == len(result.steps) - 1 >= 1
    # detected, llama-cpp-python is sent its own schema dialect at once: nothing is refused
    assert len(proxy.exchanges) == len(answered)
    for body, _ in answered:
        assert body["temperature"] == 0.0 and body["repeat_penalty"] == 1.0
        roles = [m["role"] for m in body["messages"]]
        assert roles[2:4] == ["assistant", "tool"] and "user" not in roles[2:]
        assert body["messages"][3]["tool_call_id"] and "tool_calls" not in body["messages"][2]
