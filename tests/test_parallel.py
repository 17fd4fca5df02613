"""Several calls in one step, run side by side (issue 42), with a scripted model: the time
they take, the order of their results, a failure among them, a call made twice, a cancel, a
person, kill -9 in the middle of a step, stall detection, and the spans."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from jsonagent import Agent, AgentConfig, RunContext, core_tools, tool
from jsonagent.calls import call_key
from jsonagent.store import open_store
from jsonagent.testing import ScriptedModel, step

DONE = step("TaskCompleteTool", {"output": "done"}, "done")


def several(*calls, thought="side by side") -> dict:
    return {"thought": thought, "calls": [{"tool_name": name, "args_list": args}
                                          for name, args in calls]}


def agent(replies, tools, n=4, **kw) -> Agent:
    return Agent(model=ScriptedModel(replies, replay=kw.pop("replay", False)), tools=tools,
                 config=AgentConfig(parallel_calls=n, **kw.pop("config", {})), **kw)


def observations(result_or_state) -> list:
    """The observations the model reads next, in the order of the history."""
    return [json.loads(m.content) for m in result_or_state.messages if m.role == "observation"]


@tool
def weather(city: str) -> str:
    """The weather in a city, after a second."""
    time.sleep(1)
    return f"sunny in {city}"


@tool
async def forecast(city: str) -> str:
    """Tomorrow's weather in a city, after a second."""
    await asyncio.sleep(1)
    return f"rain in {city}"


CITIES = several(*[("weather", {"city": c}) for c in ("Oslo", "Rome", "Lima", "Pune")])


def test_four_one_second_tools_in_one_step_take_about_one_second_not_four():
    events = list(agent([CITIES, DONE], [weather]).iter("Weather in four cities?"))
    took = sum(e.duration_s for e in events if e.type == "tool_result")
    started = [e for e in events if e.type == "tool_call"]
    wall = events[-1].t - started[0].t
    assert events[-1].status == "completed"
    assert [e.call for e in started] == [0, 1, 2, 3] and took > 3.9  # each took its second
    assert wall < 2.5, f"{wall:.2f} s for four calls of 1 s"
    assert [e.key for e in started] == [call_key(events[0].run_id, 1, i) for i in range(4)]


def test_async_tools_run_together_on_the_event_loop_beside_sync_ones():
    step_ = several(("forecast", {"city": "Oslo"}), ("forecast", {"city": "Rome"}),
                    ("weather", {"city": "Lima"}))
    a = agent([step_, DONE], [weather, forecast])
    t0 = time.perf_counter()
    result = a.run("Weather?")
    assert time.perf_counter() - t0 < 2.5 and result.status == "completed"
    assert [c.observation for c in result.steps[0].calls] == ["rain in Oslo", "rain in Rome",
                                                              "sunny in Lima"]


def test_results_come_back_in_call_order_when_the_calls_end_out_of_order():
    @tool
    def wait(s: float) -> str:
        """Waits."""
        time.sleep(s)
        return f"waited {s}"

    a = agent([several(("wait", {"s": 0.6}), ("wait", {"s": 0.05}), ("wait", {"s": 0.3})),
               DONE], [wait])
    events = list(a.iter("go"))
    ended = [e.call for e in events if e.type == "tool_result"]
    assert ended == [1, 2, 0]  # each is said as it ends...
    assert [o["response"] for o in observations(a.last_state)] == [  # ...and read in order
        "waited 0.6", "waited 0.05", "waited 0.3"]
    assert [m["role"] for m in a.model.requests[1]["messages"][-4:]] == ["assistant"] + \
        ["user"] * 3  # one observation a call


def test_one_failing_call_among_three_is_an_error_for_that_call_alone():
    @tool
    def lookup(key: str) -> str:
        """Looks a key up."""
        if key == "b":
            raise ValueError("no such key: b")
        return key.upper()

    result = agent([several(*[("lookup", {"key": k}) for k in "abc"]), DONE],
                   [lookup]).run("go")
    calls = result.steps[0].calls
    assert result.status == "completed"
    assert [(c.observation, c.error) for c in calls] == [
        ("A", False), ({"error": "ValueError: no such key: b"}, True), ("C", False)]


def test_a_call_made_twice_in_a_step_runs_once_and_both_are_answered():
    ran = []

    @tool
    def fetch(url: str) -> str:
        """Fetches."""
        ran.append(url)
        return f"page {url}"

    a = agent([several(("fetch", {"url": "a"}), ("fetch", {"url": "b"}),
                       ("fetch", {"url": "a"})), DONE], [fetch])
    result = a.run("go")
    assert sorted(ran) == ["a", "b"]
    again = result.steps[0].calls[2]
    assert again.observation == "page a" and "call 1 of this step: it ran once" in again.note
    assert observations(a.last_state)[2]["note"] == again.note


def test_a_cancel_stops_every_call_in_flight():
    stopped, started = [], threading.Barrier(4, timeout=10)

    @tool
    def long(n: int, ctx: RunContext) -> str:
        """Takes a long time, unless the run is cancelled."""
        started.wait()
        if ctx.cancel.wait(30):
            stopped.append(n)
        return "finished"

    a = agent([several(*[("long", {"n": n}) for n in range(3)]), DONE], [long])
    threading.Thread(target=lambda: (started.wait(), a.cancel()), daemon=True).start()
    t0 = time.perf_counter()
    result = a.run("go")
    assert result.status == "interrupted" and time.perf_counter() - t0 < 5
    deadline = time.monotonic() + 5
    while len(stopped) < 3 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert sorted(stopped) == [0, 1, 2]  # each saw the cancel and stopped
    calls = result.steps[0].calls
    assert all(c.error and "cancelled" in c.observation["error"] for c in calls)
    assert len(observations(a.last_state)) == 3  # the history stays whole


def test_ask_human_pauses_the_run_after_the_other_calls_of_the_step_have_finished():
    ran = []

    @tool
    def count(n: int) -> int:
        """Counts."""
        time.sleep(0.2)
        ran.append(n)
        return n

    a = agent([several(("count", {"n": 1}), ("AskHumanHelpTool", {"question": "Which city?"}),
                       ("count", {"n": 2})), DONE], [count, *core_tools()])
    paused = a.run("go")
    assert paused.status == "needs_human" and sorted(ran) == [1, 2]  # the others finished
    run = paused.run_id
    assert paused.pending.model_dump() == {"kind": "question", "question": "Which city?",
                                           "id": call_key(run, 1, 1)}
    result = a.resume(a.last_state, answer="Oslo")
    assert result.status == "completed" and sorted(ran) == [1, 2]  # they never ran again
    assert [o["response"] for o in observations(a.last_state)] == [1, "Oslo", 2]


def test_approvals_in_a_script_are_asked_once_per_gated_call_and_a_denied_tool_never_runs():
    ran, asked = [], []

    @tool(confirm=True)
    def send(to: str) -> str:
        """Sends."""
        ran.append(to)
        return f"sent to {to}"

    def approve(tool_name, args):
        asked.append(args["to"])
        return args["to"] != "eve"

    a = agent([several(*[("send", {"to": t}) for t in ("ann", "eve", "bob")]), DONE], [send],
              approve=approve)
    events = list(a.iter("go"))
    assert events[-1].status == "completed" and asked == ["ann", "eve", "bob"]
    assert sorted(ran) == ["ann", "bob"]  # eve's call never ran
    assert [(e.call, e.approved) for e in events if e.type == "approval"] == [
        (0, True), (1, False), (2, True)]
    calls = a.last_state.steps[0].calls
    assert calls[1].error and "the person refused this call" in calls[1].observation["error"]


def test_stall_detection_compares_the_steps_set_of_calls():
    @tool
    def look(thing: str) -> str:
        """Looks."""
        return f"a {thing}"

    both = [("look", {"thing": "cat"}), ("look", {"thing": "dog"})]
    result = agent([several(*both), several(*reversed(both)), several(*both), DONE],
                   [look]).run("go")
    assert result.status == "stalled" and len(result.steps) == 3
    assert "You are repeating yourself" in result.steps[1].calls[-1].note
    assert result.error.startswith("the model repeated itself")


DRIVER = textwrap.dedent('''
    import json, sys, time
    from jsonagent import Agent, AgentConfig, RunContext, core_tools, tool
    from jsonagent.testing import ScriptedModel

    ledger, db = sys.argv[1], sys.argv[2]

    @tool
    def quick(ctx: RunContext) -> str:
        """Answers at once."""
        open(ledger, "a").write(json.dumps(["quick", ctx.call_id]) + "\\n")
        return "quick done"

    @tool
    def slow(n: int, ctx: RunContext) -> str:
        """Takes a minute."""
        open(ledger, "a").write(json.dumps(["slow", ctx.call_id]) + "\\n")
        time.sleep(60)
        return "too late"

    calls = [{"tool_name": "quick", "args_list": {}}] + [
        {"tool_name": "slow", "args_list": {"n": n}} for n in (1, 2)]
    replies = [{"thought": "", "calls": calls},
               {"thought": "", "tool_name": "TaskCompleteTool", "args_list": {"output": "ok"}}]
    Agent(model=ScriptedModel(replies, replay=True), tools=[quick, slow], store=db,
          config=AgentConfig(parallel_calls=3)).run("go")
''')


def test_kill_9_in_the_middle_of_a_step_then_a_resume_runs_only_the_unfinished_calls(tmp_path):
    ledger, db, driver = tmp_path / "ledger.jsonl", tmp_path / "runs.db", tmp_path / "driver.py"
    driver.write_text(DRIVER)
    proc = subprocess.Popen([sys.executable, str(driver), str(ledger), str(db)],
                            start_new_session=True)
    deadline = time.monotonic() + 60
    while not _quick_ended(db):
        assert time.monotonic() < deadline and proc.poll() is None, "the step never ran"
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(10)
    run = open_store(db).runs()[0].id
    ran = []

    @tool
    def quick(ctx: RunContext) -> str:
        """Answers at once."""
        ran.append(("quick", ctx.call_id))
        return "quick done"

    @tool
    def slow(n: int, ctx: RunContext) -> str:
        """Takes a minute."""
        ran.append(("slow", ctx.call_id))
        return f"slow {n} done"

    replies = [CITIES, DONE]  # what the model would say now: never asked for step 1 again
    resumed = Agent(model=ScriptedModel(replies, replay=True), tools=[quick, slow], store=db,
                    config=AgentConfig(parallel_calls=3))
    result = resumed.resume(run)
    assert result.status == "completed", result.error
    assert sorted(ran) == [("slow", call_key(run, 1, 1)), ("slow", call_key(run, 1, 2))]
    assert [c.observation for c in result.steps[0].calls] == ["quick done", "slow 1 done",
                                                             "slow 2 done"]
    before = [json.loads(line) for line in ledger.read_text().splitlines()]
    assert sorted(before) == sorted([["quick", call_key(run, 1, 0)], *map(list, ran)])
    recovered = [(e["call"], e["action"]) for e in open_store(db).events(run_id=run)
                 if e["type"] == "call_recovered"]
    assert recovered == [(1, "ran_again"), (2, "ran_again")]  # the same keys, said so


def _quick_ended(db) -> bool:
    """The quick call's end is in the call log, and both slow calls have started."""
    if not db.exists():
        return False
    try:
        with sqlite3.connect(db) as conn:
            rows = conn.execute("SELECT idx, ended_at FROM calls").fetchall()
    except sqlite3.OperationalError:  # not migrated yet
        return False
    return len(rows) == 3 and any(idx == 0 and ended for idx, ended in rows)


def test_a_step_of_many_calls_writes_the_state_a_few_times_not_twice_a_call(tmp_path,
                                                                           monkeypatch):
    """The state is written whole at a checkpoint: once for the starts of the calls that run
    together, and at only some of their results (the call log has each), else a step of N
    calls costs N squared (2,000 calls through the server took 77 s). What a resume needs
    is still there: every result, in the run's steps and in the call log."""
    from jsonagent.store.sqlite import SQLiteStore

    writes = []
    real = SQLiteStore._checkpoint
    monkeypatch.setattr(SQLiteStore, "_checkpoint",
                        lambda self, db, state: (writes.append(state.seq), real(self, db, state)))

    @tool
    def echo(n: int) -> int:
        """Echoes."""
        return n

    n = 200
    many = {"thought": "many", "calls": [{"tool_name": "echo", "args_list": {"n": i}}
                                         for i in range(n)]}
    store = open_store(tmp_path / "runs.db")
    result = Agent(model=ScriptedModel([many, DONE]), tools=[echo], store=store,
                   config=AgentConfig(parallel_calls=n)).run("go")
    assert result.status == "completed"
    assert [c.observation for c in result.steps[0].calls] == list(range(n))
    assert len(writes) < n / 4, len(writes)  # was 2 n + 3
    assert [c.result for c in store.calls(result.run_id)] == list(range(n))
    stored = store.load_run(result.run_id).state
    assert all(c.done for c in stored.steps[0].calls)




def test_a_result_held_back_mid_step_reaches_a_follower_while_a_sibling_still_runs(
        tmp_path, monkeypatch):
    """The state is written at only some results (above): a result held back still reaches
    whoever follows the run (SSE, AG-UI read the store) within half a second, not when the
    slowest call beside it ends."""
    from jsonagent.store.rows import Throttle, mid_step

    monkeypatch.setattr(Throttle, "skip", lambda self, event, state: mid_step(event, state))
    release = threading.Event()

    @tool
    def slow() -> str:
        """Waits."""
        release.wait(20)
        return "slow"

    @tool
    def fast() -> str:
        """Returns."""
        return "fast"

    both = {"thought": "both", "calls": [{"tool_name": "slow", "args_list": {}},
                                         {"tool_name": "fast", "args_list": {}}]}
    path = tmp_path / "runs.db"
    agent = Agent(model=ScriptedModel([both, DONE]), tools=[slow, fast], store=open_store(path),
                  config=AgentConfig(parallel_calls=2))
    done = []
    runner = threading.Thread(target=lambda: done.append(agent.run("go")))
    runner.start()
    follower, seen = open_store(path), []
    try:
        deadline = time.monotonic() + 5
        while not seen and time.monotonic() < deadline:
            seen = [e for s in follower.sessions() for e in follower.events(None, s.id)
                    if e["type"] == "tool_result"]
            time.sleep(0.05)
        assert [e["observation"] for e in seen] == ["fast"], seen
        assert not release.is_set() and runner.is_alive()
    finally:
        release.set()
        runner.join(20)
    assert done and done[0].status == "completed"

def test_a_step_of_many_calls_writes_the_state_a_few_times_on_postgresql_too(pg_url,
                                                                            monkeypatch):
    """As on SQLite: PostgreSQL writes the state at only some of a step's results, while
    every result still checks the claim (a node that lost the run never writes to it)."""
    from jsonagent.store.postgres import PostgresStore

    writes, checks = [], []
    real = PostgresStore._checkpoint

    def counted(self, db, state, only_check=False):
        (checks if only_check else writes).append(state.seq)
        return real(self, db, state, only_check)

    monkeypatch.setattr(PostgresStore, "_checkpoint", counted)

    @tool
    def echo(n: int) -> int:
        """Echoes."""
        return n

    n = 100
    many = {"thought": "many", "calls": [{"tool_name": "echo", "args_list": {"n": i}}
                                         for i in range(n)]}
    store = open_store(pg_url)
    try:
        result = Agent(model=ScriptedModel([many, DONE]), tools=[echo], store=store,
                       config=AgentConfig(parallel_calls=n)).run("go")
        assert result.status == "completed"
        assert len(writes) < n / 2, len(writes)  # was n + 3 (27 on a loaded machine)
        assert len(writes) + len(checks) > 2 * n  # each event checks the claim
        assert [c.result for c in store.calls(result.run_id)] == list(range(n))
        assert all(c.done for c in store.load_run(result.run_id).state.steps[0].calls)
    finally:
        store.close()

def test_each_call_has_its_own_execute_tool_span_under_the_run():
    pytest.importorskip("opentelemetry.sdk")
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from jsonagent.spans import SpanBuilder

    exporter, provider = InMemorySpanExporter(), TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    spans = SpanBuilder(model="m", tracer_provider=provider, meter_provider=MeterProvider())
    a = agent([several(*[("weather", {"city": c}) for c in ("Oslo", "Rome", "Lima")]), DONE],
              [weather])
    for event in a.iter("go"):
        spans.write(event)
    done = exporter.get_finished_spans()
    [run] = [s for s in done if s.name.startswith("invoke_agent")]
    tools = sorted((s for s in done if s.name == "execute_tool weather"),
                   key=lambda s: s.attributes["jsonagent.call"])
    assert len(tools) == 3 and all(s.parent.span_id == run.context.span_id for s in tools)
    rid = a.last_state.run_id
    assert [s.attributes["gen_ai.tool.call.id"] for s in tools] == [call_key(rid, 1, i)
                                                                     for i in range(3)]
    assert max(s.start_time for s in tools) < min(s.end_time for s in tools)  # side by side
    assert all(s.end_time - s.start_time >= 0.9e9 for s in tools)


def test_an_evals_trace_has_an_entry_for_each_call_with_its_own_result():
    from jsonagent.evals.runner import _trace

    @tool
    def double(n: int) -> int:
        """Doubles."""
        return 2 * n

    a = agent([several(("double", {"n": 1}), ("double", {"n": 5})), DONE], [double])
    trace = _trace(list(a.iter("double them")))
    assert [(t["step"], t.get("call"), t["args"], t["observation"]) for t in trace[:2]] == [
        (1, 0, {"n": 1}, 2), (1, 1, {"n": 5}, 10)]
    assert trace[2]["tool"] == "TaskCompleteTool" and "call" not in trace[2]


def test_sub_runs_side_by_side_each_go_under_the_span_of_the_call_that_started_it():
    pytest.importorskip("opentelemetry.sdk")
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from jsonagent.spans import SpanBuilder

    exporter, provider = InMemorySpanExporter(), TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    spans = SpanBuilder(model="m", tracer_provider=provider, meter_provider=MeterProvider())
    helper = Agent(model=ScriptedModel([step("weather", {"city": "Oslo"}), DONE], replay=True),
                   tools=[weather])
    a = Agent(model=ScriptedModel([several(("ask", {"task": "a"}), ("ask", {"task": "b"})),
                                   DONE]),
              tools=[helper.as_tool("ask", "Asks.")], config=AgentConfig(parallel_calls=2),
              on_event=lambda e: spans.write(e))
    assert a.run("go").status == "completed"
    done = exporter.get_finished_spans()
    calls = {s.attributes["gen_ai.tool.call.id"]: s for s in done if s.name == "execute_tool ask"}
    subs = [s for s in done if s.name.startswith("invoke_agent") and s.parent is not None
            and s.parent.span_id in {c.context.span_id for c in calls.values()}]
    assert len(calls) == 2 and len(subs) == 2
    assert {s.parent.span_id for s in subs} == {c.context.span_id for c in calls.values()}
