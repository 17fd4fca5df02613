"""One retry loop, ours, and fallback to the next model (issue 38, items 2-4), against fake
OpenAI-compatible endpoints on 127.0.0.1: what each endpoint received is counted, and what
the run said is read from its events."""

from __future__ import annotations

import json
import threading
import time

import pytest

from jsonagent import Agent, tool
from jsonagent import events as ev
from jsonagent.cli.display import Display
from jsonagent.config import AgentConfig, RetryConfig
from jsonagent.models.openai import OpenAIModel
from jsonagent.testing import step

from openai_stub import OpenAIStub, completion, error, streamed
from test_cli import cli

DONE = json.dumps(step("TaskCompleteTool", {"output": "4"}))


def model(url: str, name: str = "primary") -> OpenAIModel:
    return OpenAIModel(name, base_url=url, api_key="sk-test")


def agent(*urls_or_models, retry: RetryConfig | None = None, events=None, **kw) -> Agent:
    models = [model(m, f"model-{i}") if isinstance(m, str) else m
              for i, m in enumerate(urls_or_models)]
    config = AgentConfig(retry=retry or RetryConfig(backoff_s=0.05), **kw.pop("config", {}))
    return Agent(model=models, config=config,
                 on_event=events.append if events is not None else None, **kw)


def of(events, kind):
    return [e for e in events if isinstance(e, kind)]


def test_the_sdk_retries_nothing_of_its_own():
    with OpenAIStub([error(503, "overloaded")] * 5) as stub:
        with pytest.raises(Exception, match="503"):
            model(stub.url).complete([{"role": "user", "content": "x"}], None)
        assert len(stub.requests) == 1
        result = agent(stub.url, retry=RetryConfig(retries=0)).run("x")
    assert result.error_kind == "unavailable" and len(stub.requests) == 2  # one more, no more


def test_a_429_with_retry_after_2_is_answered_after_2_s_and_not_sooner():
    events: list = []
    with OpenAIStub([(*error(429, "Rate limit reached"), {"retry-after": "2"}), DONE]) as stub:
        t0 = time.monotonic()
        result = agent(stub.url, events=events).run("x")
        elapsed = time.monotonic() - t0
    assert result.status == "completed" and len(stub.requests) == 2
    assert 2.0 <= elapsed < 20
    [retry] = of(events, ev.ModelRetry)
    assert (retry.kind, retry.wait_s, retry.said) == ("rate_limited", 2.0,
                                                      "rate limited, retrying in 2 s")
    assert result.stats.retries == 1


def test_a_503_with_retry_after_is_answered_after_it_capped_at_max_wait_s():
    events: list = []
    with OpenAIStub([(*error(503, "overloaded"), {"retry-after": "1"}),
                     (*error(503, "overloaded"), {"retry-after": "3600"}), DONE]) as stub:
        t0 = time.monotonic()
        result = agent(stub.url, events=events,
                       retry=RetryConfig(backoff_s=0.05, max_wait_s=1.5)).run("x")
        elapsed = time.monotonic() - t0
    assert result.status == "completed" and len(stub.requests) == 3
    assert [(e.kind, e.wait_s) for e in of(events, ev.ModelRetry)] == [("unavailable", 1.0),
                                                                       ("unavailable", 1.5)]
    assert 2.5 <= elapsed < 20


def test_503s_until_the_retries_are_spent_then_the_second_endpoint_answers():
    events: list = []
    with OpenAIStub([error(503, "overloaded")] * 3) as first, OpenAIStub([DONE]) as second:
        result = agent(first.url, second.url, events=events,
                       retry=RetryConfig(retries=2, backoff_s=0.05)).run("x")
    assert result.status == "completed" and result.answer == "4"
    assert (len(first.requests), len(second.requests)) == (3, 1)
    assert [e.kind for e in of(events, ev.ModelRetry)] == ["unavailable", "unavailable"]
    [fell] = of(events, ev.ModelFallback)
    assert (fell.model, fell.fallback, fell.kind) == ("model-0", "model-1", "unavailable")
    assert of(events, ev.ModelCall)[-1].model == "model-1" and result.steps[0].model == "model-1"


def test_the_run_budget_of_retries_is_shared_by_its_requests():
    with OpenAIStub([error(503, "overloaded")] * 2) as first, OpenAIStub([DONE]) as second:
        result = agent(first.url, second.url,
                       retry=RetryConfig(retries=5, budget=1, backoff_s=0.05)).run("x")
    assert result.status == "completed" and len(first.requests) == 2  # one retry, then over


def test_a_content_filter_falls_back_without_retrying():
    events: list = []
    refused = error(400, "The response was filtered due to the content management policy")
    with OpenAIStub([refused] * 3) as first, OpenAIStub([DONE]) as second:
        result = agent(first.url, second.url, events=events).run("x")
    assert result.status == "completed" and len(first.requests) == 1
    assert not of(events, ev.ModelRetry)
    assert [e.kind for e in of(events, ev.ModelFallback)] == ["content_filter"]


def test_a_bad_key_fails_at_once_on_the_last_model():
    with OpenAIStub([error(401, "Incorrect API key provided")] * 3) as stub:
        result = agent(stub.url).run("x")
    assert result.error_kind == "authentication" and len(stub.requests) == 1
    assert "\n" not in result.error


@tool
def lookup(n: int) -> str:
    """A long result, so that old turns are worth summarising."""
    return f"record {n}: " + "lorem ipsum " * 300


def test_a_context_window_error_is_summarised_and_the_request_sent_again():
    events: list = []
    script = [json.dumps(step("lookup", {"n": 1})), json.dumps(step("lookup", {"n": 2})),
              json.dumps(step("lookup", {"n": 3})),
              error(400, "This model's maximum context length is 4096 tokens"),
              "The user asked for records; three were looked up.",  # the summary
              DONE]
    with OpenAIStub(script) as stub, OpenAIStub([DONE]) as spare:
        result = agent(stub.url, spare.url, events=events, tools=[lookup]).run("x")
        sizes = [len(json.dumps(r["body"]["messages"])) for r in stub.requests]
    assert result.status == "completed" and not spare.requests  # no fallback was needed
    [retry] = of(events, ev.ModelRetry)
    assert retry.kind == "context_window" and retry.said == "summarising the context"
    assert [e.action for e in of(events, ev.ContextChange)] == ["summarised"]
    assert sizes[-1] < sizes[3] / 2  # sent again, much shorter


def test_a_window_still_exceeded_once_summarised_falls_back():
    over = error(400, "This model's maximum context length is 4096 tokens")
    events: list = []
    with OpenAIStub([over, over]) as stub, OpenAIStub([DONE]) as spare:
        result = agent(stub.url, spare.url, events=events).run("x")
    assert result.status == "completed" and len(stub.requests) == 2
    assert [e.kind for e in of(events, ev.ModelFallback)] == ["context_window"]


def test_a_cancel_in_the_middle_of_a_backoff_ends_the_run_at_once():
    events: list = []
    waiting = threading.Event()

    def seen(event):
        events.append(event)
        if isinstance(event, ev.ModelRetry):
            waiting.set()

    with OpenAIStub([(*error(429, "slow down"), {"retry-after": "30"})]) as stub:
        a = agent(stub.url, retry=RetryConfig(max_wait_s=60))
        a.on_event = seen
        done: dict = {}
        runner = threading.Thread(target=lambda: done.update(result=a.run("x")))
        runner.start()
        assert waiting.wait(20)
        t0 = time.monotonic()
        a.cancel()
        runner.join(10)
        took = time.monotonic() - t0
    assert done["result"].status == "interrupted" and took < 0.5


def test_a_stream_cut_halfway_is_asked_again_with_its_head_and_the_display_told(capsys):
    """A body that broke off mid-reply is a reply cut (issue 58): its head is shown on the
    re-ask, as a connection-close stream's would be, and nothing in it runs."""
    events: list = []
    cut = streamed(['{"thought": "half a tho', 'ught that', ' never ends"'])
    cut.cut_after = 2
    with OpenAIStub([(200, cut), DONE]) as stub:
        result = agent(stub.url, events=events, deltas=True).run("x")
    assert result.status == "completed" and len(stub.requests) == 2
    assert not of(events, ev.ModelRetry)
    [reask] = of(events, ev.Reask)
    assert reask.stage == "cut"
    before = events[:events.index(reask)]
    assert any(isinstance(e, ev.ThoughtDelta) for e in before)  # shown, then void
    assert stub.requests[1]["body"]["messages"][-2]["content"] == '{"thought": "half a thought that'
    display = Display()
    for event in events:
        display.event(event)
    assert "invalid reply (cut): your reply stopped before it ended" in capsys.readouterr().err


def test_invalid_replies_in_a_row_hand_over_to_the_next_model():
    events: list = []
    with OpenAIStub(["not json at all"] * 2) as first, OpenAIStub([DONE]) as second:
        result = agent(first.url, second.url, events=events,
                       retry=RetryConfig(fallback_on_invalid=2)).run("x")
    assert result.status == "completed" and len(first.requests) == 2
    [fell] = of(events, ev.ModelFallback)
    assert fell.kind == "invalid_replies" and "2 invalid replies in a row" in fell.error


BROKEN = json.dumps(step("NoSuchTool", {}, "hm"))


def costly_then_second(replies: list[str], n: int):
    """A run on a server whose grammar is costly (llama-cpp-python's), falling back to a
    second model after `n` invalid replies in a row: the result, its events, both stubs."""
    events: list = []
    with OpenAIStub(replies) as first, OpenAIStub([DONE]) as second:
        costly = OpenAIModel("primary", base_url=first.url, api_key="sk-test",
                             grammar_costly=True)
        result = agent(costly, second.url, events=events, config={"json_mode": "schema"},
                       retry=RetryConfig(fallback_on_invalid=n)).run("x")
    return result, events, first, second


def test_a_reply_without_a_costly_grammar_is_not_held_against_the_model():
    """A try without the schema's grammar that breaks the envelope is asked for again under
    it: that is no invalid reply in a row for the fallback."""
    result, events, first, second = costly_then_second([BROKEN, DONE], 1)
    assert result.status == "completed" and not of(events, ev.ModelFallback)
    assert len(first.requests) == 2 and not second.requests
    assert "response_format" not in first.requests[0]["body"]
    assert "response_format" in first.requests[1]["body"]
    assert (result.stats.invalid_replies, result.stats.grammar_reasks) == (1, 1)


def test_a_reply_under_the_grammar_counts_the_grammar_free_one_before_it():
    """N = max_reasks still fires in a step that began without the grammar: the try under it
    that breaks too makes the row of two."""
    result, events, first, _ = costly_then_second([BROKEN, BROKEN], 2)
    assert result.status == "completed" and len(first.requests) == 2
    [fell] = of(events, ev.ModelFallback)
    assert "2 invalid replies in a row" in fell.error


def test_a_resumed_run_starts_again_from_the_primary():
    ask = json.dumps(step("AskHumanHelpTool", {"question": "which?"}))
    with OpenAIStub([error(401, "bad key"), DONE]) as first, OpenAIStub([ask]) as second:
        a = agent(first.url, second.url, store=":memory:")
        paused = a.run("x")
        assert paused.status == "needs_human" and len(first.requests) == 1
        result = a.resume(paused.run_id, answer="this one")
    assert result.status == "completed" and len(first.requests) == 2
    assert len(second.requests) == 1


def test_the_cli_falls_back_to_a_model_at_its_own_endpoint(tmp_path):
    with OpenAIStub([(*error(429, "Rate limit reached"), {"retry-after": "1"}),
                     error(503, "overloaded")]) as first, OpenAIStub([DONE]) as second:
        proc = cli("run", "x", "--no-store", "--model", "big", "--base-url", first.url,
                   "--retries", "1", "--fallback", f"small@{second.url}",
                   env={"OPENAI_API_KEY": "sk-test"}, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "big rate limited, retrying in 1 s" in proc.stderr
    assert "small takes over" in proc.stderr
    assert second.requests[0]["body"]["model"] == "small"


def test_a_summary_rate_limited_after_an_overflow_is_retried_not_the_end():
    events: list = []
    over = error(400, "This model's maximum context length is 4096 tokens")
    script = [*(json.dumps(step("lookup", {"n": n})) for n in range(3)), over,
              error(429, "Rate limit reached"),  # the summary's own request, turned away
              "Three records were looked up.", DONE]
    with OpenAIStub(script) as stub:
        result = agent(stub.url, events=events, tools=[lookup]).run("x")
    assert result.status == "completed", result.error
    assert [e.kind for e in of(events, ev.ModelRetry)] == ["context_window", "rate_limited"]
    assert [e.action for e in of(events, ev.ContextChange)] == ["summarised"]


def test_the_model_that_takes_over_has_its_own_overflow_summarised():
    events: list = []
    over = error(400, "This model's maximum context length is 4096 tokens")
    first = [*(json.dumps(step("lookup", {"n": n})) for n in range(6)), over,
             "Six records were looked up.", over]  # summarised once, then still over
    with OpenAIStub(first) as one, OpenAIStub([over, DONE, DONE]) as two:
        result = agent(one.url, two.url, events=events, tools=[lookup]).run("x")
    assert result.status == "completed", result.error
    assert [e.kind for e in of(events, ev.ModelFallback)] == ["context_window"]
    retried = [e.model for e in of(events, ev.ModelRetry) if e.kind == "context_window"]
    assert retried == ["model-0", "model-1"]  # the second model's first overflow: summarised


def test_the_summary_goes_to_the_model_that_answers_the_run():
    """memory.fit may summarise before the request: the route is set by then, so the
    summary's 503 is retried by our loop (an event, a cancellable wait), not slept on."""
    events: list = []
    # each turn is about 950 tokens (the lookup's 3,600 characters), as the endpoint says
    def looked_up(n: int):
        text, tokens = json.dumps(step("lookup", {"n": n})), 300 + 950 * n
        return lambda body: (200, streamed([text], prompt_tokens=tokens) if body.get("stream")
                             else completion(text, prompt_tokens=tokens))

    script = [looked_up(n) for n in range(3)]
    script += [error(503, "overloaded"), "Three records were looked up.", DONE]
    with OpenAIStub(script) as stub:
        result = agent(stub.url, events=events, tools=[lookup],
                       config={"max_context_tokens": 2500}).run("x")
    assert result.status == "completed", result.error
    assert [e.kind for e in of(events, ev.ModelRetry)] == ["unavailable"]
    assert of(events, ev.SummaryCall)[0].error is None


def test_a_resumed_run_sends_the_primary_its_own_json_mode_not_the_fallbacks():
    from jsonagent.testing import ScriptedModel

    ask = json.dumps(step("AskHumanHelpTool", {"question": "which?"}))
    with OpenAIStub([error(401, "bad key"), DONE]) as first:
        schema_one = ScriptedModel([ask], name="schema-one")
        schema_one.default_json_mode = "schema"
        a = agent(first.url, schema_one, store=":memory:")
        paused = a.run("x")
        assert paused.status == "needs_human" and a.last_state.json_mode == "schema"
        result = a.resume(paused.run_id, answer="this one")
        sent = first.requests[-1]["body"]
    assert result.status == "completed"
    assert sent["response_format"] == {"type": "json_object"}  # the primary's, not "schema"


def test_fallback_on_invalid_above_max_reasks_is_refused_in_one_line():
    from jsonagent.errors import ConfigError

    with pytest.raises(ConfigError) as caught:
        agent("http://127.0.0.1:9/v1", "http://127.0.0.1:9/v1",
              retry=RetryConfig(fallback_on_invalid=3))
    assert "\n" not in str(caught.value) and "at most 2" in str(caught.value)


def test_an_abandoned_run_leaves_no_route_behind():
    import gc

    with OpenAIStub([json.dumps(step("lookup", {"n": 1})), DONE]) as stub:
        a = agent(stub.url, tools=[lookup])
        events = a.iter("x")
        next(events), next(events)  # started, and asked once: then dropped
        events.close()
        a.last_state = None
        del events
        gc.collect()
    assert a.model._routes == {}
