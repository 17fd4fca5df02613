"""Usage limits and cost (issue 38, items 5 and 6): every limit warns the model in an
observation before it and ends the run `limit_reached` after; a tool's own limit refuses its
next call and the run goes on; the cost comes from genai-prices, None when unknown, never 0;
a cost limit on a model whose price is unknown is refused at the start."""

from __future__ import annotations

import json

import pytest

from jsonagent import Agent, tool
from jsonagent import AgentConfig, UsageLimits
from jsonagent.errors import ConfigError
from jsonagent.models import Capabilities, ModelReply
from jsonagent.models.openai import OpenAIModel
from jsonagent.pricing import Price
from jsonagent.status import LIMIT_REACHED, TABLE, exit_code, server_status
from jsonagent.testing import ScriptedModel, step
from jsonagent.usage import Usage

from openai_stub import OpenAIStub, completion, streamed
from test_cli import assert_one_line_error, cli, script

WARNED = "left; finish with what you have"


@tool
def noop(n: int) -> int:
    """Return n."""
    return n


def replies(count: int, prompt: int = 100, completion_: int = 10) -> list[ModelReply]:
    """`count` calls of noop, then the answer, each reply reporting the given usage."""
    texts = [json.dumps(step("noop", {"n": i})) for i in range(count)]
    texts.append(json.dumps(step("TaskCompleteTool", {"output": "done"})))
    return [ModelReply(text=t, usage=Usage(prompt_tokens=prompt, completion_tokens=completion_))
            for t in texts]


class Counted(ScriptedModel):
    """A scripted model that counts each request's prompt tokens exactly, as a local model
    does (100 a request), and may declare a price (a model and a provider genai-prices knows)."""

    def __init__(self, script, name: str = "scripted", provider: str | None = None):
        super().__init__(script, name=name)
        self.provider = provider
        self.count_tokens = lambda wire: 100


def run(limits: UsageLimits, model=None, tools=(noop,), steps: int = 8):
    model = model or Counted(replies(steps))
    agent = Agent(model=model, tools=list(tools), max_steps=20,
                  config=AgentConfig(limits=limits))
    result = agent.run("count")
    return result, agent.last_state, model


# (the limit, the requests the model gets, the step whose observation warns, what it says)
EVERY_LIMIT = [
    # 5 requests: the 6th is refused; after the 4th, 1 is left
    (UsageLimits(requests=5), 5, 4, "1 model request left"),
    # 3 tool calls: the 4th call is refused, its step's observation says why
    (UsageLimits(tool_calls=3), 4, 3, "0 tool calls left"),
    # 100 prompt tokens a request, counted before it is sent: the 5th would make 500
    (UsageLimits(input_tokens=450), 4, 4, "50 input tokens left"),
    # 10 output tokens a reply: after 40 the next request is refused
    (UsageLimits(output_tokens=35), 4, 3, "5 output tokens left"),
    # 110 a request, and the next one's 100 counted: 440 + 101 > 500
    (UsageLimits(total_tokens=500), 4, 4, "60 tokens left"),
]


@pytest.mark.parametrize("limits,requests,warned_at,left", EVERY_LIMIT,
                         ids=["requests", "tool_calls", "input_tokens", "output_tokens",
                              "total_tokens"])
def test_every_limit_warns_before_it_and_ends_the_run_after(limits, requests, warned_at, left):
    result, state, model = run(limits)
    name = next(k for k, v in limits if v is not None and k != "warn_at")
    assert result.status == LIMIT_REACHED
    assert result.error.startswith(f"limit {name}=") and "\n" not in result.error
    assert len(model.requests) == requests  # the refused request was never sent
    notes = [json.loads(m.content).get("note") for m in state.messages
             if m.role == "observation"]
    assert notes[warned_at - 1] is not None and left in notes[warned_at - 1] \
        and WARNED in notes[warned_at - 1], notes
    assert all(n is None for n in notes[:warned_at - 1]), notes  # not before 80% of it


def test_a_tool_call_past_the_limit_gets_an_observation_and_the_history_stays_whole():
    result, state, _ = run(UsageLimits(tool_calls=3))
    last = result.steps[-1]
    assert last.index == 4 and last.error
    assert last.observation == {"error": "not run: the run reached its limit on tool_calls"}
    assert state.messages[-1].role == "observation"


def test_a_parallel_step_past_the_tool_calls_limit_says_what_ran():
    """Its calls are all decided before any runs, so none ran: the message said "2 used"."""
    ran = []

    @tool
    def mark(n: int) -> int:
        """Return n."""
        ran.append(n)
        return n

    calls = {"thought": "all three", "calls": [{"tool_name": "mark", "args_list": {"n": n}}
                                               for n in (1, 2, 3)]}
    script = [step("mark", {"n": 0}), calls, step("TaskCompleteTool", {"output": "done"})]
    agent = Agent(model=ScriptedModel(script), tools=[mark],
                  config=AgentConfig(parallel_calls=4, limits=UsageLimits(tool_calls=2)))
    result = agent.run("count")
    assert result.status == LIMIT_REACHED and ran == [0]
    assert result.error == ("limit tool_calls=2 reached: 1 used, and the model asked for 3 "
                            "more in one step, none of which ran")


def test_a_cost_limit_warns_and_ends_the_run():
    # gpt-4o at OpenAI: 100,000 prompt tokens are $0.25 and 10,000 output tokens $0.10,
    # so $0.35 a reply; before the 4th request $1.05 is spent and its prompt adds $0.25
    script = replies(8, prompt=100_000, completion_=10_000)
    model = Counted(script, name="gpt-4o", provider="openai")
    model.count_tokens = lambda wire: 100_000
    result, state, model = run(UsageLimits(cost=1.2), model)
    assert result.status == LIMIT_REACHED and result.error.startswith("limit cost=$1.2000")
    assert len(model.requests) == 3
    assert result.usage.cost == pytest.approx(1.05)
    notes = [json.loads(m.content).get("note") for m in state.messages
             if m.role == "observation"]
    assert notes[:2] == [None, None] and "$0.1500 of the budget left" in notes[2]


def test_a_tools_own_limit_refuses_its_next_call_and_the_run_goes_on():
    @tool(max_calls=2)
    def add(a: int) -> int:
        """Add one."""
        return a + 1

    script = [step("add", {"a": i}) for i in range(3)] + [step("TaskCompleteTool",
                                                                {"output": "ok"})]
    result, state, _ = run(UsageLimits(), ScriptedModel(script), tools=[add])
    assert result.status == "completed" and result.answer == "ok"
    assert [s.observation for s in result.steps[:2]] == [1, 2]
    refused = result.steps[2]
    assert refused.error and refused.observation["error"].startswith(
        "add was not run: it may be called 2 times in a run, and it has been")
    second = json.loads(state.messages[-4].content)  # the 2nd call's observation warned
    assert "0 calls of add left" in second["note"]


def test_a_specs_max_calls_is_the_tools_own_limit():
    from jsonagent.tools.specs import ToolSpec

    spec = ToolSpec.from_dict({"name": "search", "description": "Search.", "max_calls": 3,
                               "parameters": {"type": "object", "properties": {}}})
    assert spec.max_calls == 3
    openai_form = ToolSpec.from_dict({"type": "function", "max_calls": 1,
                                      "function": {"name": "f", "parameters": {}}})
    assert openai_form.max_calls == 1


def test_a_cost_limit_on_an_unknown_price_is_refused_at_the_start():
    limits = AgentConfig(limits=UsageLimits(cost=0.5))
    with OpenAIStub([]) as stub:
        with pytest.raises(ConfigError) as caught:
            Agent(model=OpenAIModel("stub-model", base_url=stub.url, api_key="k"), config=limits)
        assert stub.requests == []
    message = str(caught.value)
    assert "\n" not in message and "cost limit ($0.5)" in message and "'stub-model'" in message
    with pytest.raises(ConfigError):
        Agent(model=ScriptedModel([]), config=limits)


def test_the_cli_refuses_a_cost_limit_on_an_unknown_price_in_one_line(tmp_path):
    model = script(tmp_path, step("TaskCompleteTool", {"output": "x"}))
    out = cli("run", "q", "--model", model, "--no-store", "--limit", "cost=0.10")
    assert out.returncode == 2
    assert_one_line_error(out)
    assert "cost limit ($0.1) needs the model's price" in out.stderr
    bad = cli("run", "q", "--model", model, "--no-store", "--limit", "steps=3")
    assert bad.returncode == 2 and "--limit steps=3: expected NAME=VALUE" in bad.stderr


def test_the_cli_ends_limit_reached_with_its_exit_code_and_names_the_limit(tmp_path):
    model = script(tmp_path, *[step("GetTimeTools", {"timezone": "UTC"})] * 3)
    out = cli("run", "q", "--model", model, "--no-store", "--limit", "requests=2")
    assert out.returncode == 8 == exit_code(LIMIT_REACHED), out.stderr
    assert "limit_reached: limit requests=2 reached" in out.stderr
    assert "1 model request left" not in out.stderr  # the model's notes are not the display's


def test_limit_reached_is_one_row_of_the_status_table():
    assert server_status(LIMIT_REACHED) == "incomplete"
    assert TABLE[LIMIT_REACHED].a2a == "TASK_STATE_FAILED"


# -- cost -------------------------------------------------------------------------------------

def cached(text: str, prompt: int, completion_: int, cached_: int):
    """A reply, whole or streamed as the request asks, whose usage reports cached tokens."""
    def reply(body):
        if not body.get("stream"):
            return 200, completion(text, prompt, completion_, cached=cached_)
        chunks = streamed([text], prompt, completion_)
        chunks[-1]["usage"]["prompt_tokens_details"] = {"cached_tokens": cached_}
        return 200, chunks
    return reply


def test_cost_is_genai_prices_own_figure_with_cached_tokens_priced_as_such():
    from genai_prices import Usage as Tokens, calc_price

    answer = json.dumps(step("TaskCompleteTool", {"output": "4"}))
    call = json.dumps(step("noop", {"n": 1}))
    with OpenAIStub([cached(call, 1200, 80, 1024), cached(answer, 1300, 20, 1024)]) as stub:
        model = OpenAIModel("gpt-4o", base_url=stub.url, api_key="k", max_retries=0,
                            provider="openai")
        events = []
        result = Agent(model=model, tools=[noop], on_event=events.append).run("2+2?")
    assert result.status == "completed"
    own = [float(calc_price(Tokens(input_tokens=p, output_tokens=c, cache_read_tokens=1024),
                            "gpt-4o", provider_id="openai").total_price)
           for p, c in ((1200, 80), (1300, 20))]
    calls = [e.usage.cost for e in events if e.type == "model_reply"]
    assert calls == pytest.approx(own)
    assert result.usage.cost == pytest.approx(sum(own))
    uncached = float(calc_price(Tokens(input_tokens=1200, output_tokens=80), "gpt-4o",
                                provider_id="openai").total_price)
    assert own[0] < uncached  # the cached part was priced as cached


def test_the_endpoint_url_names_the_provider():
    price = Price(Capabilities(name="gpt-4o", base_url="https://api.openai.com/v1"))
    assert price.known and price.cost(Usage(prompt_tokens=1000)) == pytest.approx(0.0025)


def test_cost_is_none_when_unknown_never_0():
    answer = json.dumps(step("TaskCompleteTool", {"output": "4"}))
    with OpenAIStub([answer]) as stub:  # gpt-4o, but who bills it?
        model = OpenAIModel("gpt-4o", base_url=stub.url, api_key="k", max_retries=0)
        result = Agent(model=model).run("2+2?")
    assert result.status == "completed" and result.usage.prompt_tokens == 11
    assert result.usage.cost is None
    assert Agent(model=ScriptedModel([answer])).run("2+2?").usage.cost is None
    total = Usage()
    total.add(Usage(prompt_tokens=10, cost=0.5))
    total.add(Usage(prompt_tokens=10))  # one unknown part: the total is unknown
    total.add(Usage(prompt_tokens=10, cost=0.5))
    assert total.cost is None


def test_a_local_model_costs_0_by_declaration():
    from jsonagent.models.local import LocalModel

    assert LocalModel.free is True
    assert Price(Capabilities(name="local", free=True)).cost(Usage(prompt_tokens=9)) == 0.0


def test_the_sessions_total_adds_its_runs():
    answer = json.dumps(step("TaskCompleteTool", {"output": "4"}))
    script = [ModelReply(text=answer, usage=Usage(prompt_tokens=1000, completion_tokens=100))] * 2
    model = Counted(script, name="gpt-4o", provider="openai")
    with Agent(model=model).session() as conversation:
        first = conversation.run("a")
        second = conversation.run("b")
        total = conversation.usage
    assert total.prompt_tokens == 2000
    assert total.cost == pytest.approx(first.usage.cost + second.usage.cost)
    assert first.usage.cost == pytest.approx(0.0035)


def test_the_closing_line_shows_the_cost(capsys):
    from jsonagent.cli.display import Display
    from jsonagent.result import RunResult

    Display().result(RunResult(status=LIMIT_REACHED, error="limit cost=$0.0100 reached",
                               usage=Usage(prompt_tokens=5, completion_tokens=2, cost=0.0123)))
    err = capsys.readouterr().err
    assert "limit_reached" in err and "5+2 tokens, $0.0123" in err


def test_the_batch_summary_and_the_eval_table_add_the_cost():
    from jsonagent.batch.files import Task, summarize
    from jsonagent.evals.report import Run

    tasks = [Task(id="a", input="x"), Task(id="b", input="y")]
    lines = [{"id": "a", "status": "completed", "usage": {"prompt_tokens": 5, "cost": 0.25}},
             {"id": "b", "status": LIMIT_REACHED, "usage": {"prompt_tokens": 5, "cost": 0.5}}]
    summary = summarize(tasks, lines)
    assert summary.cost == pytest.approx(0.75) and summary.counts[LIMIT_REACHED] == 1
    lines[1]["usage"].pop("cost")
    assert summarize(tasks, lines).cost is None
    run = Run.of({"status": "completed", "usage": {"prompt_tokens": 1, "cost": 0.5},
                  "extra": {"variant": "v", "case": "c"}})
    assert run.cost == 0.5


def test_an_endpoints_requests_are_estimated_before_they_are_sent():
    """No tokenizer at an endpoint: the next request's tokens are estimated from its
    characters, calibrated on what the endpoint reported."""
    calls = [json.dumps(step("noop", {"n": n})) for n in range(6)]
    with OpenAIStub([cached(call, 1000, 10, 0) for call in calls]) as stub:
        model = OpenAIModel("stub-model", base_url=stub.url, api_key="k", max_retries=0)
        result, state, _ = run(UsageLimits(input_tokens=3700), model)
        sent = len(stub.requests)
    assert result.status == LIMIT_REACHED and sent == 3  # 3,000 used, and about 1,600 more
    assert "limit input_tokens=3700 reached: 3000 used" in result.error
    notes = [json.loads(m.content).get("note") for m in state.messages
             if m.role == "observation"]
    assert notes[:2] == [None, None] and "700 input tokens left" in notes[2]


def test_a_cost_limit_needs_the_price_of_every_fallback_too():
    from jsonagent.testing import ScriptedModel as Scripted

    priced = Counted([], name="gpt-4o", provider="openai")
    with pytest.raises(ConfigError, match="'unpriced'"):
        Agent(model=[priced, Scripted([], name="unpriced")],
              config=AgentConfig(limits=UsageLimits(cost=1.0)))


def test_after_a_takeover_the_cost_limit_counts_the_new_models_price():
    from jsonagent.errors import ContentFiltered

    # gpt-4o's prompt of 100,000 tokens is $0.25; gpt-4o-mini's reply, $0.021 in all
    primary = Counted([ContentFiltered("filtered")], name="gpt-4o", provider="openai")
    cheaper = Counted(replies(5, prompt=100_000, completion_=10_000), name="gpt-4o-mini",
                      provider="openai")
    for m in (primary, cheaper):
        m.count_tokens = lambda wire: 100_000
    result, _, _ = run(UsageLimits(cost=0.3), [primary, cheaper])
    assert result.status == "completed", result.error  # not held to gpt-4o's price
    assert result.usage.cost == pytest.approx(6 * 0.021)


# -- what an endpoint reports ---------------------------------------------------------------

@pytest.mark.parametrize("count", [-1000, None, "twelve", 3.5])
@pytest.mark.parametrize("streams", [False, True], ids=["whole", "streamed"])
def test_a_usage_count_that_is_not_a_non_negative_integer_is_the_endpoints_error(count,
                                                                                  streams):
    """A negative or null count would keep a token limit from firing; one of another type
    ended the run on a pydantic ValidationError. (The SDK itself makes "12" and true counts.)"""
    call = json.dumps(step("noop", {"n": 1}))

    def reply(body):
        out = streamed([call], 100, 10) if body.get("stream") else completion(call, 100, 10)
        (out[-1] if body.get("stream") else out)["usage"]["completion_tokens"] = count
        return 200, out

    with OpenAIStub([reply] * 4) as stub:
        model = OpenAIModel("stub-model", base_url=stub.url, api_key="k", max_retries=0)
        agent = Agent(model=model, tools=[noop], deltas=streams,
                      config=AgentConfig(limits=UsageLimits(output_tokens=15)))
        result = agent.run("count")
    assert result.status == "failed" and result.error_kind == "model_error"
    assert result.error == (f"{stub.url} reported a usage its token limits cannot count: "
                            f"completion_tokens {count!r} is not a count of tokens (a "
                            f"non-negative integer)")
    assert len(stub.requests) == 1
