"""A reply that did not end is never acted on (issue 58, finding 2): one stopped at its token
cap mid-argument, or a stream that stopped without its end (sized, chunked or connection-close
framing), is asked for again with its head and a note that it was cut, and its call never
runs. A payment of "1000000" cut at "10" is the case: the ledger shows what ran."""

from __future__ import annotations

import json

import pytest

from jsonagent import Agent, AgentConfig, tool
from jsonagent import events as ev
from jsonagent.models import ModelReply
from jsonagent.models.openai import OpenAIModel
from jsonagent.testing import ScriptedModel, step

from openai_stub import Chunks, OpenAIStub, completion, streamed

DONE = json.dumps(step("TaskCompleteTool", {"output": "paid"}, "paid"))
PAY = json.dumps(step("pay", {"amount": "1000000"}, "pay it"))
CUT = PAY[:PAY.index('"1000000"') + 3]  # ... "args_list": {"amount": "10
assert CUT.endswith('"amount": "10')


def ledger_tool(paid: list):
    @tool
    def pay(amount: str) -> str:
        """Pay an amount, in cents."""
        paid.append(amount)
        return f"paid {amount}"
    return pay


def at_cap(text: str):
    """A reply stopped at max_tokens, whole or streamed as the request asks."""
    def reply(request: dict):
        if request.get("stream"):
            chunks = streamed([text])
            chunks[1]["choices"][0]["finish_reason"] = "length"
            return 200, chunks
        body = completion(text)
        body["choices"][0]["finish_reason"] = "length"
        return 200, body
    return reply


def broken(text: str, framing: str) -> tuple[int, Chunks]:
    """A stream of `text` whose body stops before its finish_reason and [DONE]."""
    pieces = [text[i:i + 7] for i in range(0, len(text), 7)]
    chunks = streamed(pieces)
    chunks.cut_after, chunks.framing = len(pieces), framing
    return 200, chunks


def model(stub, **kw) -> OpenAIModel:
    return OpenAIModel("stub-model", base_url=stub.url, api_key="sk-test", detect=False, **kw)


def run(script, deltas: bool = False, **config):
    """`deltas`: every reply streamed, as to someone watching it (the thought's cap streams
    them too, in a JSON mode)."""
    paid: list = []
    events: list = []
    with OpenAIStub(script) as stub:
        m = model(stub)
        result = Agent(model=m, tools=[ledger_tool(paid)], config=AgentConfig(**config),
                       on_event=events.append, deltas=deltas).run("pay 1000000")
        m.close()
    return result, paid, stub.requests, events


def assert_reasked(result, paid, requests, events, head=CUT):
    assert result.status == "completed", result.error
    assert paid == ["1000000"]  # the cut call never ran; the whole one, once
    [reask] = [e for e in events if isinstance(e, ev.Reask)]  # (deltas are not stored)
    assert reask.stage == "cut" and "nothing in it was run" in reask.problem
    shown, told = requests[1]["body"]["messages"][-2:]
    assert shown == {"role": "assistant", "content": head}  # its head...
    assert "nothing in it was run" in told["content"]  # ...and that it was cut


@pytest.mark.parametrize("mode", ["object", "schema", "prompt"])
def test_a_reply_stopped_at_max_tokens_mid_argument_is_asked_again_and_never_run(mode):
    result, paid, requests, events = run([at_cap(CUT), PAY, DONE], json_mode=mode)
    assert_reasked(result, paid, requests, events)
    assert "cut off at the length limit" in requests[1]["body"]["messages"][-1]["content"]
    sent = requests[0]["body"].get("response_format", {}).get("type")
    assert sent == {"object": "json_object", "schema": "json_schema", "prompt": None}[mode]


@pytest.mark.parametrize("framing", ["chunked", "close", "length"])
def test_a_stream_closed_mid_argument_is_asked_again_and_never_run(framing):
    # the thought's cap is watched through a stream, so each reply here is streamed
    result, paid, requests, events = run([broken(CUT, framing), PAY, DONE])
    assert requests[0]["body"]["stream"] is True
    assert_reasked(result, paid, requests, events)
    [first] = [e for e in events if isinstance(e, ev.ModelCall)][:1]
    assert first.finish_reason is None  # no end came


def test_a_cut_stream_counts_its_prompt_against_the_token_limits():
    """It brings no usage; counted as its reply's chunks alone, an endpoint that always cuts
    would read every prompt for free (issue 58, from review)."""
    from jsonagent.config import UsageLimits

    result, paid, _, events = run([broken(CUT, "close")] * 3)
    cut = [e for e in events if isinstance(e, ev.ModelCall)]
    assert len(cut) == 3 and all(e.usage.prompt_tokens > 50 for e in cut)
    assert {e.usage.counting for e in cut} == {"estimate"}
    assert result.usage.prompt_tokens == sum(e.usage.prompt_tokens for e in cut)
    most = cut[0].usage.prompt_tokens * 3 // 2  # one request's prompt, not two
    result, paid, requests, _ = run([broken(CUT, "close")] * 3,
                                    limits=UsageLimits(input_tokens=most))
    assert result.status == "limit_reached" and len(requests) == 1 and paid == []


@pytest.mark.parametrize("framing", ["chunked", "close"])
def test_a_stream_closed_after_whole_json_but_before_its_end_is_never_run(framing):
    """The JSON looks whole; the stream's end never came, so the reply may have gone on."""
    whole = json.dumps(step("pay", {"amount": "10"}, "pay it"))
    result, paid, requests, events = run([broken(whole, framing), PAY, DONE])
    assert_reasked(result, paid, requests, events, head=whole)
    assert "stopped before it ended" in requests[1]["body"]["messages"][-1]["content"]


def test_every_call_of_a_cut_parallel_step_is_asked_again():
    two = json.dumps({"thought": "both", "calls": [
        {"tool_name": "pay", "args_list": {"amount": "5"}},
        {"tool_name": "pay", "args_list": {"amount": "1000000"}}]})
    cut = two[:two.index('"1000000"') + 3]
    for script in ([at_cap(cut), two, DONE], [broken(cut, "close"), two, DONE]):
        paid: list = []
        with OpenAIStub(script) as stub:
            m = model(stub)
            result = Agent(model=m, tools=[ledger_tool(paid)],
                           config=AgentConfig(parallel_calls=2)).run("pay both")
            m.close()
        assert result.status == "completed", result.error
        assert sorted(paid) == ["1000000", "5"]  # the whole first call did not run alone
        assert result.stats.reasks == 1


REACT_CUT = 'Thought: pay it\nAction: pay\nAction Input: {"amount": "10'
REACT_PAY = 'Thought: pay it\nAction: pay\nAction Input: {"amount": "1000000"}'


@pytest.mark.parametrize("first,deltas", [
    (at_cap(REACT_CUT), False), (broken(REACT_CUT, "close"), True),
    (at_cap('Thought: pay it\nAction: pay\nAction Input: 10'), False),
    (at_cap('Thought: pay it\nAction: pay\nAction Input: {"amount": "5"}\n' + REACT_CUT), False)])
def test_a_cut_react_reply_is_asked_again_and_never_run(first, deltas):
    result, paid, requests, events = run([first, REACT_PAY, "Final Answer: paid"],
                                         deltas=deltas, prompt_style="react")
    assert result.status == "completed", result.error
    assert paid == ["1000000"]
    assert [e.stage for e in events if isinstance(e, ev.Reask)] == ["cut"]
    assert "nothing in it was run" in requests[1]["body"]["messages"][-1]["content"]


def test_a_cut_reply_after_a_step_in_the_tool_call_form_is_asked_again():
    first = json.dumps(step("pay", {"amount": "5"}, "a small one first"))
    result, paid, requests, events = run([first, at_cap(CUT), PAY, DONE])
    assert result.status == "completed" and paid == ["5", "1000000"]
    history = requests[2]["body"]["messages"]
    assert any(m.get("tool_calls") for m in history)  # the step before, in the tool-call form
    assert history[-2] == {"role": "assistant", "content": CUT}


def test_a_reply_at_max_tokens_whose_json_is_whole_is_a_finished_one():
    result, paid, _, events = run([at_cap(PAY), DONE])
    assert result.status == "completed" and paid == ["1000000"]
    assert not [e for e in events if isinstance(e, ev.Reask)]


SMALL = json.dumps(step("pay", {"amount": "10"}, "pay it"))


@pytest.mark.parametrize("head", [
    f"[{SMALL}, {CUT}",  # a list whose first call is whole, its second cut
    f"First the small one: {SMALL} and then {CUT}",  # prose that goes on
    f"```json\n{SMALL}\n```\nand then {CUT}",  # a fenced call, and more after it
])
def test_a_cut_reply_whose_first_object_is_whole_is_asked_again_and_never_run(head):
    """The repair reads the first whole object; what followed it was cut."""
    result, paid, requests, events = run([at_cap(head), PAY, DONE])
    assert_reasked(result, paid, requests, events, head=head)


def test_a_cut_reply_guessed_where_its_code_ends_is_never_read():
    from jsonagent.envelope import parse_reply
    from jsonagent.tools.toolset import Toolset

    @tool
    def run_code(code: str) -> str:
        """Run Python code."""
        return code

    text = '{"thought": "t", "tool_name": "run_code", "args_list": {"code": "print("hi")"}}'
    toolset = Toolset.build([run_code])
    assert parse_reply(text, toolset).repairs == ["code_quotes_escaped"]  # finished: read
    assert parse_reply(text, toolset, cut=True).stage == "cut"


@pytest.mark.parametrize("text", [
    f"```json\n{PAY}\n```", f"<think>the amount is 1000000</think>{PAY}  \n"])
def test_a_reply_at_max_tokens_whose_repaired_json_ends_it_is_a_finished_one(text):
    result, paid, _, events = run([at_cap(text), DONE])
    assert result.status == "completed" and paid == ["1000000"]
    assert not [e for e in events if isinstance(e, ev.Reask)]


def test_when_every_try_is_cut_the_run_ends_naming_reply_tokens():
    result, paid, requests, _ = run([at_cap(CUT)] * 3, reply_tokens=1024)
    assert paid == [] and len(requests) == 3
    assert result.status == "failed"
    assert result.error == ("no valid reply after 3 tries: each was cut off at the token limit, "
                            "reply_tokens (1024); raise it with --reply-tokens N or "
                            "AgentConfig(reply_tokens=N) (a model built by hand takes its own "
                            "max_tokens)")


def test_a_local_reply_steered_to_its_close_is_never_run():
    """The in-process decoder closes a constrained reply at its cap (`unended`): the JSON is
    whole, the amount in it is where the cap fell."""
    paid: list = []
    steered = ModelReply(text=json.dumps(step("pay", {"amount": "10"})), cut=True, unended=True)
    result = Agent(model=ScriptedModel([steered, PAY, DONE]),
                   tools=[ledger_tool(paid)]).run("pay")
    assert result.status == "completed" and paid == ["1000000"]


# -- the backend: what a stream's end is ---------------------------------------------------

def unmarked(text: str) -> Chunks:
    """A whole stream from a server that sends neither a finish_reason nor [DONE]."""
    chunks = streamed([text])
    del chunks[1]  # the finish_reason's chunk
    chunks.done = False
    return chunks


def complete(stub, **kw) -> ModelReply:
    m = model(stub, **kw)
    try:
        return m.complete([{"role": "user", "content": "x"}], None, on_delta=lambda _: None)
    finally:
        m.close()


def test_a_stream_ends_with_its_finish_reason_or_its_done():
    no_finish = streamed([PAY])
    del no_finish[1]
    with OpenAIStub([(200, streamed([PAY])), (200, no_finish), (200, unmarked(PAY))]) as stub:
        assert not complete(stub).unended
        assert not complete(stub).unended  # [DONE] alone ends it
        reply = complete(stub)
    assert reply.unended and not reply.cut and reply.text == PAY
    assert len(stub.requests) == 3  # no request counted the cut reply's tokens


def test_a_server_profiled_as_sending_no_end_has_whole_streams():
    with OpenAIStub([(200, unmarked(PAY))]) as stub:
        reply = complete(stub, stream_unmarked=True)
    assert not reply.unended and reply.text == PAY


def test_the_command_line_raises_the_cap_with_reply_tokens(tmp_path):
    from test_cli import cli

    with OpenAIStub([at_cap(CUT)] * 3) as stub:
        proc = cli("run", "pay", "--model", "stub-model", "--base-url", stub.url, "--no-store",
                   "--reply-tokens", "64", env={"OPENAI_API_KEY": "sk-cli"})
    assert [r["body"]["max_tokens"] for r in stub.requests if r["path"].endswith("/completions")
            ] == [64] * 3
    assert proc.returncode != 0
    assert "reply_tokens (64); raise it with --reply-tokens N" in proc.stderr
