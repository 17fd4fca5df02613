"""What brings an endpoint's requests to the tokens the in-process backend feeds the model
(issue 37): earlier replies kept as written (llama.cpp's cache_prompt is its detected profile's: servers.py), tool results
without the call echoed, and whole replies where the server's grammar holds the thought's cap."""

import json

from jsonagent import Agent, AgentConfig
from jsonagent.envelope import parse_reply
from jsonagent.models.openai import OpenAIModel
from jsonagent.notes import note
from jsonagent.testing import ScriptedModel, step
from jsonagent.tools.toolset import Toolset

from openai_stub import OpenAIStub

COMPACT = '{"thought":"the time first","tool_name":"GetTimeTools","args_list":{}}'
DONE = json.dumps(step("TaskCompleteTool", {"output": "4"}, "done"))


def test_a_reply_that_is_the_step_exactly_is_kept_as_written():
    toolset = Toolset.build()
    assert parse_reply(COMPACT, toolset).raw == COMPACT
    assert parse_reply(' ' + COMPACT + '\n', toolset).raw == ' ' + COMPACT + '\n'


def test_a_repaired_reply_keeps_the_canonical_step():
    toolset = Toolset.build()
    assert parse_reply(COMPACT.replace("GetTimeTools", "gettimetools"), toolset).raw is None
    assert parse_reply("```json\n" + COMPACT + "\n```", toolset).raw is None
    assert parse_reply(COMPACT + ",", toolset).raw is None  # a trailing comma repaired
    # one the repairer had to close is never kept, nor run: it was cut (issue 58)
    assert parse_reply(COMPACT[:-1], toolset).stage == "cut"


def test_the_history_shows_the_reply_byte_for_byte():
    model = ScriptedModel([COMPACT, DONE])
    Agent(model=model).run("x")
    shown = [m["content"] for m in model.requests[1]["messages"] if m["role"] == "assistant"]
    assert shown == [COMPACT]


def test_tool_results_alone_sends_the_step_without_its_call_echoed():
    with OpenAIStub([json.dumps(step("GetTimeTools", {}, "t")), DONE, DONE]) as stub:
        Agent(model=OpenAIModel("m", base_url=stub.url, api_key="k",
                                tool_results_alone=True)).run("x")
    messages = stub.requests[1]["body"]["messages"]
    assistant = next(m for m in messages if m["role"] == "assistant")
    result = next(m for m in messages if m["role"] == "tool")
    assert "tool_calls" not in assistant and json.loads(assistant["content"])["tool_name"] == "GetTimeTools"
    assert result["tool_call_id"].startswith("call_")


def test_a_server_whose_grammar_keeps_max_length_gets_whole_replies():
    with OpenAIStub([DONE, DONE]) as stub:
        Agent(model=OpenAIModel("m", base_url=stub.url, api_key="k"),
              config=AgentConfig(json_mode="schema")).run("x")
        Agent(model=OpenAIModel("m", base_url=stub.url, api_key="k", keeps_max_length=True),
              config=AgentConfig(json_mode="schema")).run("x")
    streamed = [r["body"].get("stream", False) for r in stub.requests]
    assert streamed == [True, False]  # watched for the thought's cap, then not needed


def _costly(replies):
    """A model whose grammar is costly (llama-cpp-python's server): first tries go without."""
    model = ScriptedModel(replies)
    model.grammar_costly = True
    return model


def test_a_step_with_no_reask_left_keeps_the_grammar_from_its_first_try():
    model = _costly([COMPACT, DONE])
    assert Agent(model=model, config=AgentConfig(json_mode="schema", max_reasks=0)).run("x").ok
    assert all(r["response_format"] is not None for r in model.requests)


def test_a_thought_past_its_cap_without_the_grammar_is_reasked_under_it():
    """The grammar's maxLength is what held the thought to its cap: a try without it is
    measured whole, and one past the cap is re-asked, under the grammar."""
    long = json.dumps(step("GetTimeTools", {}, "I think " * 100))  # 800 characters
    model = _costly([long, COMPACT, DONE])
    events = []
    result = Agent(model=model, config=AgentConfig(json_mode="schema"),
                   on_event=events.append).run("x")
    assert result.ok and result.steps[0].thought == "the time first"
    assert [e.problem for e in events if e.type == "reask"] == \
        [note("thought_too_long", cap=600)]
    assert [r["response_format"] is None for r in model.requests] == [True, False, True]
