"""The context policy (memory.py), with a scripted model: budget, summaries, truncation."""

import json
import subprocess
import sys
import textwrap

import pytest

from jsonagent import Agent, AgentConfig, read_journal, tool
from jsonagent.errors import ModelError
from jsonagent.memory import budget
from jsonagent.models import ModelReply, Usage
from jsonagent.testing import ScriptedModel, step
from jsonagent.tools.toolset import core_tools

DONE = step("TaskCompleteTool", {"output": "done"})


@tool
def fetch(page: int) -> str:
    """Fetch a page."""
    return f"page {page}: " + "lorem ipsum " * 20


def stepper(summary="SUMMARY: pages fetched so far", long_thoughts=False, finish_after=None):
    """Replies to step requests by fetching the next page (or finishing), and to summary
    requests (no response_format) with `summary`, or raises it when it is an exception."""
    calls = {"steps": 0}

    def reply(messages, response_format):
        if response_format is None:  # a summary request
            if isinstance(summary, BaseException):
                raise summary
            return summary
        calls["steps"] += 1
        if finish_after is not None and calls["steps"] > finish_after:
            return DONE
        thought = ("I should read the next page. " * 24) if long_thoughts else "next"
        return step("fetch", {"page": calls["steps"]}, thought)

    return ScriptedModel(reply)


def step_requests(model):
    return [r["messages"] for r in model.requests if r["response_format"] is not None]


def tokens(messages):
    """What ScriptedModel reports as prompt_tokens."""
    return sum(len(str(m.get("content", ""))) for m in messages) // 4


def agent(model, max_context_tokens=None, **kw):
    config = AgentConfig(max_context_tokens=max_context_tokens, max_steps=kw.pop("max_steps", 30),
                         stall_after=None)
    return Agent(model=model, tools=[fetch], config=config, **kw)


def test_no_budget_sends_the_whole_history():
    model = stepper(finish_after=12)
    r = agent(model).run("read the pages")
    assert r.status == "completed" and r.usage.counting == ""
    sizes = [len(m) for m in step_requests(model)]
    assert sizes == list(range(2, 2 + 2 * len(sizes), 2))  # every step, every observation


def test_a_budget_is_never_exceeded_and_old_turns_are_summarised(tmp_path):
    model = stepper(finish_after=25)
    r = agent(model, 900, transcript=tmp_path / "t.jsonl").run("read the pages")
    assert r.status == "completed" and r.usage.counting == "estimate"
    requests = step_requests(model)
    assert max(tokens(m) for m in requests) <= 900
    events = read_journal(tmp_path / "t.jsonl")
    summaries = [e for e in events if e.type == "summary"]
    changes = [e for e in events if e.type == "context"]
    assert summaries and all(s.text.startswith("SUMMARY") and s.usage.prompt_tokens > 0
                             for s in summaries)
    assert {c.action for c in changes} <= {"thoughts", "summarised"} and \
        any(c.action == "summarised" for c in changes)
    assert all(c.tokens_after < c.tokens_before <= c.budget * 2 for c in changes)
    last = requests[-1]
    assert last[0]["role"] == "system" and "SUMMARY: pages fetched" in last[1]["content"]
    assert last[2]["content"] == "read the pages"  # the question stays in view
    # a summary request is the cached prefix of the request before it, plus one instruction
    at = next(i for i, r in enumerate(model.requests) if r["response_format"] is None)
    asked = model.requests[at]["messages"]
    assert asked[:-1] == model.requests[at - 1]["messages"][:len(asked) - 1]
    assert "plain text" in asked[-1]["content"]
    # summaries count among the model's calls (a replayed script relies on it)
    assert r.stats.model_calls == len(model.requests)


def test_between_two_compactions_the_prefix_stays_byte_identical():
    model = stepper(finish_after=40)
    agent(model, 1200, max_steps=45).run("read the pages")
    requests = step_requests(model)
    extended = sum(1 for a, b in zip(requests, requests[1:]) if b[:len(a)] == a)
    compactions = len(requests) - 1 - extended
    assert compactions >= 2 and extended >= 6 * compactions


def test_a_step_is_never_split_from_its_observation():
    model = stepper(finish_after=30)
    agent(model, 700, max_steps=35).run("read the pages")
    for messages in step_requests(model):
        body = messages[1:]
        for i, m in enumerate(body):
            if m["content"].startswith('{"tool_name"'):  # an observation
                assert json.loads(body[i - 1]["content"])["tool_name"] == "fetch"
            if m["role"] == "assistant":
                assert i + 1 == len(body) or body[i + 1]["content"].startswith('{"tool_name"')


def test_old_thoughts_go_before_old_answers(tmp_path):
    model = stepper(long_thoughts=True, finish_after=12)
    r = agent(model, 2600, transcript=tmp_path / "t.jsonl").run("read the pages")
    assert r.status == "completed"
    changes = [e for e in read_journal(tmp_path / "t.jsonl") if e.type == "context"]
    assert changes[0].action == "thoughts"
    first_after = step_requests(model)[changes[0].step - 1]
    steps = [json.loads(m["content"]) for m in first_after if m["role"] == "assistant"]
    assert [bool(s["thought"]) for s in steps] == [False] * (len(steps) - 2) + [True, True]
    assert sum(m["content"].startswith('{"tool_name"') for m in first_after) == len(steps)
    assert r.steps[0].thought.startswith("I should")  # the record keeps them


def test_large_observations_are_cut_in_the_context_and_kept_whole_in_the_record(tmp_path):
    @tool
    def dump() -> str:
        """A very long output."""
        return "x" * 50_000

    model = ScriptedModel([step("dump"), DONE])
    r = Agent(model=model, tools=[dump], transcript=tmp_path / "t.jsonl",
              config=AgentConfig(max_context_tokens=4000)).run("dump it")
    seen = json.loads(model.requests[1]["messages"][-1]["content"])
    assert len(seen["response"]) < 3100 and "cut: 47" in seen["response"]
    assert r.steps[0].observation == "x" * 50_000
    results = [e for e in read_journal(tmp_path / "t.jsonl") if e.type == "tool_result"]
    assert results[0].observation == "x" * 50_000


def test_when_the_summary_fails_old_turns_are_dropped_and_an_event_says_so(tmp_path):
    model = stepper(summary=ModelError("summary endpoint down"), finish_after=20)
    r = agent(model, 800, transcript=tmp_path / "t.jsonl").run("read the pages")
    assert r.status == "completed"
    events = read_journal(tmp_path / "t.jsonl")
    failed = [e for e in events if e.type == "summary"]
    assert failed and failed[0].text is None and "summary endpoint down" in failed[0].error
    dropped = [e for e in events if e.type == "context" and e.action == "dropped"]
    assert dropped and "summary endpoint down" in dropped[0].reason
    later = step_requests(model)[-1]
    assert "removed to save space" in later[1]["content"]
    assert max(tokens(m) for m in step_requests(model)) <= 800


def test_a_summary_model_can_be_named(tmp_path):
    script = tmp_path / "summaries.json"
    script.write_text(json.dumps(["CHEAP SUMMARY"] * 10))
    model = stepper(summary=AssertionError("the run's model was asked"), finish_after=20)
    config = AgentConfig(max_context_tokens=800, summary_model=f"scripted:{script}",
                         stall_after=None, max_steps=30)
    r = Agent(model=model, tools=[fetch], config=config).run("read the pages")
    assert r.status == "completed"
    assert "CHEAP SUMMARY" in step_requests(model)[-1][1]["content"]


def test_when_the_newest_turn_does_not_fit_the_run_fails_before_sending_it():
    model = ScriptedModel([DONE])
    r = Agent(model=model, config=AgentConfig(max_context_tokens=256)).run("x " * 2000)
    assert r.status == "failed" and "over the budget of 256" in r.error
    assert model.requests == []


class WindowModel(ScriptedModel):
    """A model that knows its window and counts exactly (one token per character here)."""

    context_tokens = 3000

    def count_tokens(self, messages):
        return sum(len(m["content"]) for m in messages)

    def complete(self, messages, response_format, **kw):
        reply = super().complete(messages, response_format, **kw)
        return ModelReply(text=reply.text, usage=Usage(prompt_tokens=self.count_tokens(messages)))


def test_the_budget_comes_from_the_model_window_and_counts_exactly():
    model = WindowModel(stepper(finish_after=25)._fn)
    assert budget(model, AgentConfig()) == 3000 - 1024
    assert budget(model, AgentConfig(max_context_tokens=1500)) == 1500
    assert budget(ScriptedModel([]), AgentConfig()) is None
    r = Agent(model=model, tools=[fetch], config=AgentConfig(max_steps=30, stall_after=None)).run("go")
    assert r.status == "completed" and r.usage.counting == "exact"
    assert max(model.count_tokens(m) for m in step_requests(model)) <= 3000 - 1024


def test_a_session_resumed_in_a_new_process_keeps_its_summary(tmp_path):
    """Two processes, one stored session: the second shows the summary the first made."""
    program = textwrap.dedent(f"""
        import json, sys
        sys.path.insert(0, {str(tmp_path)!r})
        sys.path.insert(0, {str(__file__.rsplit('/', 1)[0])!r})
        from test_memory import stepper, fetch, step_requests
        from jsonagent import Agent, AgentConfig
        model = stepper(summary=sys.argv[2], finish_after=int(sys.argv[3]))
        config = AgentConfig(max_context_tokens=900, stall_after=None, max_steps=30)
        agent = Agent(model=model, tools=[fetch], config=config, store={str(tmp_path / "db")!r})
        result = agent.run(sys.argv[1], session="chat")
        print(json.dumps({{"status": result.status, "first": step_requests(model)[0][:3]}}))
    """)
    path = tmp_path / "prog.py"
    path.write_text(program)

    def turn(question, summary, finish_after):
        proc = subprocess.run([sys.executable, str(path), question, summary, str(finish_after)],
                              capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stderr
        return json.loads(proc.stdout)

    first = turn("read the pages", "SUMMARY ONE", 20)
    assert first["status"] == "completed" and "SUMMARY" not in json.dumps(first["first"])
    second = turn("and now?", "SUMMARY TWO", 0)
    assert second["status"] == "completed"
    assert "SUMMARY ONE" in second["first"][1]["content"]


def test_a_paused_run_resumed_from_the_store_keeps_its_summary(tmp_path):
    calls = {"n": 0}

    def reply(messages, response_format):
        if response_format is None:
            return "SUMMARY BEFORE THE PAUSE"
        calls["n"] += 1
        if calls["n"] == 16:
            return step("AskHumanHelpTool", {"question": "go on?"})
        return DONE if calls["n"] > 18 else step("fetch", {"page": calls["n"]})

    config = AgentConfig(max_context_tokens=1600, stall_after=None, max_steps=30)
    a = Agent(model=ScriptedModel(reply), tools=[fetch, *core_tools()], config=config,
              store=tmp_path / "db")
    r = a.run("read the pages", session="s")
    assert r.status == "needs_human"
    b = Agent(model=ScriptedModel(reply), tools=[fetch, *core_tools()], config=config,
              store=tmp_path / "db")
    r2 = b.resume(r.run_id, answer="yes")
    assert r2.status == "completed"
    assert "SUMMARY BEFORE THE PAUSE" in b.model.requests[0]["messages"][1]["content"]


@pytest.mark.parametrize("value", [0, 100])
def test_a_tiny_budget_is_a_config_error(value):
    from pydantic import ValidationError

    with pytest.raises(ValidationError):
        AgentConfig(max_context_tokens=value)


def cli(*args):
    import os

    return subprocess.run([sys.executable, "-m", "jsonagent", *map(str, args)],
                          capture_output=True, text=True, timeout=60, env=dict(os.environ))


def test_cli_max_context_tokens(tmp_path):
    path = tmp_path / "script.json"
    path.write_text(json.dumps([json.dumps(DONE)]))
    ok = cli("run", "x", "--model", f"scripted:{path}", "--max-context-tokens", "4000",
             "--output", "json")
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["usage"]["counting"] == "estimate"
    over = cli("run", "x " * 3000, "--model", f"scripted:{path}", "--max-context-tokens", "2000")
    assert over.returncode == 1 and "over the budget of 2000" in over.stderr
    assert "Traceback" not in over.stderr
    bad = cli("run", "x", "--model", f"scripted:{path}", "--max-context-tokens", "10")
    assert bad.returncode == 2


def test_a_backend_that_cannot_count_after_all_falls_back_to_the_estimate():
    class Broken(ScriptedModel):
        context_tokens = 3000

        def count_tokens(self, messages):
            raise RuntimeError("no tokenizer")

    model = Broken([DONE])
    r = Agent(model=model, tools=[fetch]).run("go")
    assert r.status == "completed" and r.usage.counting == "estimate"
