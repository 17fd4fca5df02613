"""Tool effects happen once (issue 41): one key per tool call reaches every kind of tool, and
the call log in the store decides a call cut short by a crash: its recorded result, a run
again with the same key, or a person's answer for a `once` call. Real SQLite files; the
kill -9 is of a real process."""

from __future__ import annotations

import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from http_fakes import FakeAPI
from jsonagent import Agent, ConfigError, RunContext, tool
from jsonagent.calls import call_key, sub_run_id
from jsonagent.state import RunState
from jsonagent.store import open_store
from jsonagent.testing import ScriptedModel, step

DONE = step("TaskCompleteTool", {"output": "done"}, "done")


def test_the_key_reaches_a_python_tool_a_command_and_an_http_handler(tmp_path):
    seen = {}

    @tool
    def note_key(x: int, ctx: RunContext) -> str:
        """Notes the call's key."""
        seen["python"] = (ctx.call_id, ctx.idempotency_key)
        return "ok"

    with FakeAPI({"/pay": lambda r: (200, {"ok": True})}) as api:
        specs = tmp_path / "tools.json"
        specs.write_text(json.dumps([
            {"name": "shell_key", "parameters": [],
             "handler": {"command": [sys.executable, "-c",
                                     "import os; print(os.environ['JSONAGENT_IDEMPOTENCY_KEY'])"],
                         "output": "text"}},
            {"name": "pay", "parameters": [{"name": "amount", "type": "integer"}],
             "handler": {"http": {"method": "POST", "url": api.url + "/pay"}}},
            {"name": "look", "parameters": [],
             "handler": {"http": {"url": api.url + "/pay/look"}}}]))
        agent = Agent(model=ScriptedModel([step("note_key", {"x": 1}), step("shell_key", {}),
                                           step("pay", {"amount": 5}), step("look", {}), DONE]),
                      tools=[note_key, specs], store=tmp_path / "runs.db")
        result = agent.run("pay")
        sent = [r.headers.get("idempotency-key") for r in api.requests]
    run = result.run_id
    assert result.status == "completed"
    assert seen["python"] == (call_key(run, 1), call_key(run, 1)) == (f"{run}.1.0",) * 2
    assert result.steps[1].observation.strip() == call_key(run, 2)  # the command's env
    assert sent == [call_key(run, 3), call_key(run, 4)]  # asserted where the API received it
    calls = open_store(tmp_path / "runs.db").calls(run)
    assert [(c.step, c.tool, c.effects, c.ended) for c in calls] == [
        (1, "note_key", "unknown", True), (2, "shell_key", "unknown", True),
        (3, "pay", "unknown", True), (4, "look", "idempotent", True)]  # HTTP GET reads
    assert calls[2].args == {"amount": 5} and calls[2].result == {"ok": True}


DRIVER = """
import json, sys
from jsonagent import Agent
from jsonagent.testing import ScriptedModel, step

phase, db, specs, run = sys.argv[1:5]
amount = 1 if phase == "first" else 2  # what the model would say for step 1 the second time
model = ScriptedModel([step("pay", {"amount": amount}, f"pay {amount}"),
                       step("TaskCompleteTool", {"output": "paid"}, "done")], replay=True)
agent = Agent(model=model, tools=[specs], store=db)
if phase == "first":
    agent.run("pay the bill", session="bills")
else:
    result = agent.resume(run)
    print(json.dumps({"status": result.status, "steps": [[s.tool, s.args] for s in result.steps]}))
"""

PAY = """
import json, os, sys, time
with open(sys.argv[1], "a") as ledger:
    ledger.write(json.dumps({"key": os.environ["JSONAGENT_IDEMPOTENCY_KEY"],
                             "amount": int(sys.argv[2])}) + "\\n")
while os.path.exists(sys.argv[3]):  # held until the test lets go
    time.sleep(0.05)
print("paid")
"""


def test_kill_9_mid_call_then_resume_runs_the_recorded_call_with_the_same_key(tmp_path):
    """The step is not asked of the model again: the recorded call (same key, tool and
    arguments) runs again, though the scripted model would now answer amount 2."""
    ledger, hold, db = tmp_path / "ledger.jsonl", tmp_path / "hold", tmp_path / "runs.db"
    (tmp_path / "pay.py").write_text(PAY)
    (tmp_path / "driver.py").write_text(DRIVER)
    specs = tmp_path / "tools.json"
    specs.write_text(json.dumps([{"name": "pay", "parameters": [
        {"name": "amount", "type": "integer"}], "handler": {"command": [
            sys.executable, str(tmp_path / "pay.py"), str(ledger), "{amount}", str(hold)]}}]))
    hold.touch()
    proc = subprocess.Popen([sys.executable, str(tmp_path / "driver.py"), "first", str(db),
                             str(specs), "-"], start_new_session=True)
    deadline = time.monotonic() + 30
    while not (ledger.exists() and ledger.read_text()):
        assert time.monotonic() < deadline and proc.poll() is None, "the tool never ran"
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(10)
    hold.unlink()
    run = open_store(db).runs()[0].id
    out = subprocess.run([sys.executable, str(tmp_path / "driver.py"), "second", str(db),
                          str(specs), run], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    lines = [json.loads(line) for line in ledger.read_text().splitlines()]
    assert lines == [{"key": call_key(run, 1), "amount": 1}] * 2  # same key, same arguments
    assert result == {"status": "completed", "steps": [["pay", {"amount": 1}],
                                                       ["TaskCompleteTool", {"output": "paid"}]]}
    recovered = [e for e in open_store(db).events(run_id=run) if e["type"] == "call_recovered"]
    assert [(e["key"], e["effects"], e["action"]) for e in recovered] == [
        (call_key(run, 1), "unknown", "ran_again")]  # unknown effects: said in the events


def _crash_during(db, run_id: str, step: int, ended: bool) -> None:
    """Make a finished run look as if its process died while step `step`'s tool ran: the
    state of that moment (the step in flight), an owner that is gone, and the call's end
    taken out of the log unless `ended`."""
    conn = sqlite3.connect(db)
    state = RunState.model_validate_json(
        conn.execute("SELECT state FROM runs WHERE id = ?", (run_id,)).fetchone()[0])
    state.status, state.answer, state.steps = "running", None, state.steps[:step]
    state.messages = state.messages[:2 + 2 * (step - 1) + 1]
    state.steps[-1].observation, state.stats.model_calls = None, step
    state.steps[-1].calls[0].done = False  # in flight at the crash
    dead = json.dumps({"pid": 999999, "host": socket.gethostname(), "started": 1.0})
    conn.execute("UPDATE runs SET state = ?, status = 'running', owner = ? WHERE id = ?",
                 (state.model_dump_json(), dead, run_id))
    if not ended:
        conn.execute("UPDATE calls SET ended_at = NULL, result = NULL WHERE key = ?",
                     (call_key(run_id, step),))
    conn.commit()
    conn.close()


def _paid_then_cut_short(tmp_path, ended: bool):
    """A run that paid once, made to look as if its process died while paying."""
    paid = []
    agent = _payer(tmp_path, paid)
    run = agent.run("pay").run_id
    _crash_during(tmp_path / "runs.db", run, 1, ended=ended)
    paid.clear()
    return agent, run, paid


def _payer(tmp_path, paid: list, store=None):
    @tool(effects="once")
    def pay(amount: int, ctx: RunContext) -> str:
        """Pays."""
        paid.append((ctx.call_id, amount))
        return f"paid {amount}"

    return Agent(model=ScriptedModel([step("pay", {"amount": 3}), DONE], replay=True),
                 tools=[pay], store=store or tmp_path / "runs.db")


def test_a_finished_call_is_never_run_again_its_recorded_result_is_used(tmp_path):
    agent, run, paid = _paid_then_cut_short(tmp_path, ended=True)
    result = agent.resume(run)
    assert result.status == "completed" and paid == []
    assert result.steps[0].observation == "paid 3"


@pytest.mark.parametrize("answer", ["happened", "run it again", "fail"])
def test_a_once_call_with_no_result_waits_for_a_person_and_each_answer_does_what_it_says(
        tmp_path, answer):
    agent, run, paid = _paid_then_cut_short(tmp_path, ended=False)
    waiting = agent.resume(run)
    key = call_key(run, 1)
    assert waiting.status == "needs_human" and paid == []
    assert waiting.pending.model_dump() == {"kind": "once", "tool": "pay", "args": {"amount": 3},
                                            "key": key}
    with pytest.raises(ConfigError, match="happened, again or fail"):
        agent.resume(run, answer="maybe")
    result = agent.resume(run, answer=answer, reason="the bank says so")
    assert result.status == "completed"
    observation, failed = result.steps[0].observation, result.steps[0].error
    if answer == "happened":
        assert paid == [] and not failed and "went through" in observation["note"]
    elif answer == "run it again":
        assert paid == [(key, 3)] and observation == "paid 3"  # the same key
    else:
        assert paid == [] and failed and "the bank says so" in observation["error"]
    logged = open_store(tmp_path / "runs.db").call(key)
    assert logged.ended  # decided once: never asked again


def test_a_sub_run_is_reattached_after_a_crash_and_never_started_twice(tmp_path):
    ran = []

    @tool
    def look(q: str) -> str:
        """Looks."""
        ran.append(q)
        return f"found {q}"

    db = tmp_path / "runs.db"
    helper = Agent(model=ScriptedModel([step("look", {"q": "x"}), step(
        "TaskCompleteTool", {"output": "sub answer"})], replay=True), tools=[look], store=db)
    top = Agent(model=ScriptedModel([step("helper", {"task": "find x"}), DONE], replay=True),
                tools=[helper.as_tool("helper")], store=db)
    run = top.run("go").run_id
    store = open_store(db)
    (sub,) = store.sub_runs(run)
    assert sub.id == sub_run_id(call_key(run, 1))  # its identity is the calling step's key
    _crash_during(db, run, 1, ended=False)
    ran.clear()
    result = top.resume(run)
    assert result.status == "completed" and ran == []
    assert result.steps[0].observation == "sub answer"
    assert [s.id for s in store.sub_runs(run)] == [sub.id]  # not started twice


def test_the_store_down_as_a_call_ends_leaves_the_run_as_it_was_never_ended_failed(tmp_path):
    """bench/chaos.py: PostgreSQL was down past the write's patience as a tool returned, and
    the run was ended failed, for good, once the database was back. A store that cannot be
    reached is not the run's failure: the run stays running from its checkpoint, for its
    node or another to go on with (the call log then decides the call)."""
    from jsonagent.errors import StoreDown
    from jsonagent.store.sqlite import SQLiteStore

    class GoneOnce(SQLiteStore):
        def call_ended(self, key, result, error):
            if not getattr(self, "was_down", False):
                self.was_down = True
                raise StoreDown("the PostgreSQL store at db:5432/runs cannot be reached")
            super().call_ended(key, result, error)

    paid, store = [], GoneOnce(tmp_path / "runs.db")
    agent = _payer(tmp_path, paid, store)
    with pytest.raises(StoreDown):
        agent.run("pay")
    (run,) = store.runs()
    assert paid and run.status == "running"  # not failed: nothing ended it
    assert [e["type"] for e in store.events(run_id=run.id)][-1] != "run_end"
    assert not store.call(call_key(run.id, 1)).ended  # so a once call is asked about


# -- a run stopped inside a `once` call by Ctrl-C (issue 58, finding 3) -----------------------

class Ledger:
    """A payment API's ledger: it charges once per idempotency key, as such APIs do, and
    keeps every key it was sent."""

    def __init__(self):
        self.charged: dict[str, int] = {}
        self.sent: list[str] = []

    def charge(self, key: str, amount: int) -> None:
        self.sent.append(key)
        self.charged.setdefault(key, amount)


def _keeps_paying(messages, response_format):
    """A model that pays until it reads a payment's result that is not an error (told the
    call was interrupted, it pays again, as the model did in the hostile pass)."""
    last = messages[-1]
    text = last["content"] if isinstance(last, dict) else last.content
    if "tool_name" in str(text) and '"error"' not in str(text):
        return step("TaskCompleteTool", {"output": "paid"}, "done")
    return step("pay", {"amount": 3}, "pay")


def _ctrl_c_payer(ledger: Ledger, store=None) -> Agent:
    cut = [True]

    @tool(effects="once")
    def pay(amount: int, ctx: RunContext) -> str:
        """Pays."""
        ledger.charge(ctx.call_id, amount)
        if cut:  # the API took the payment; Ctrl-C lands before its answer is back
            cut.clear()
            raise KeyboardInterrupt
        return f"paid {amount}"

    return Agent(model=ScriptedModel(_keeps_paying), tools=[pay], store=store)


@pytest.mark.parametrize("answer", ["happened", "again"])
def test_ctrl_c_inside_a_once_call_asks_what_became_of_it_and_it_is_charged_once(
        tmp_path, answer):
    ledger = Ledger()
    agent = _ctrl_c_payer(ledger, tmp_path / "runs.db")
    stopped = agent.run("pay 3")
    run, key = stopped.run_id, call_key(stopped.run_id, 1)
    assert stopped.status == "needs_human" and stopped.error == "interrupted by the user"
    assert stopped.pending.model_dump() == {"kind": "once", "tool": "pay",
                                            "args": {"amount": 3}, "key": key}
    assert [(o.key, o.tool, o.ended) for o in stopped.once] == [(key, "pay", "cut_short")]
    with pytest.raises(ConfigError, match="what became of a call of pay"):
        agent.resume(run)  # resume asks; it never goes on unasked
    done = agent.resume(run, answer=answer)
    assert done.status == "completed" and done.steps[0].tool == "pay"
    assert ledger.charged == {key: 3}  # once: the one key, never a second one
    assert ledger.sent == ([key] if answer == "happened" else [key, key])
    assert [(o.key, o.ended) for o in done.once] == [
        (key, "happened" if answer == "happened" else "returned")]


def test_ctrl_c_inside_a_once_call_in_a_chat_without_a_store_asks_as_the_next_turn():
    """Chat's next input is the answer (a run not stored has no call log: the question is
    its record)."""
    ledger = Ledger()
    with _ctrl_c_payer(ledger).session() as chat:
        stopped = chat.run("pay 3")
        assert stopped.status == "needs_human" and chat.pending.kind == "once"
        done = chat.run("it happened")
    assert done.status == "completed"
    assert ledger.sent == [call_key(stopped.run_id, 1)]


def test_ctrl_c_in_jsonagent_run_inside_a_once_call_then_resume_asks(tmp_path):
    """A real Ctrl-C (SIGINT to the process group) while a payment's answer is awaited: the
    run exits 4 naming the question, `jsonagent resume` asks it, and the answer finishes the
    run without paying again."""
    from slow_tools import ctrl_c_once_written, payer

    (ledger, spec), db = payer(tmp_path, nap=30), tmp_path / "runs.db"
    script = tmp_path / "script.json"
    script.write_text(json.dumps([json.dumps(step("pay", {"amount": 3}, "pay")),
                                  json.dumps(DONE)]))
    common = ["--store", db, "--model", f"scripted:{script}", "--tools", spec]
    stopped = ctrl_c_once_written(["run", "pay 3", *common], ledger, 1)
    [key] = ledger.read_text().split()
    run = key.rsplit(".", 2)[0]
    assert stopped.returncode == 4, stopped.stderr
    assert f"(key {key}) started before the run was interrupted" in stopped.stderr
    assert f"jsonagent resume {run} --answer happened" in stopped.stderr
    cli = [sys.executable, "-m", "jsonagent", "resume", run, *map(str, common)]
    asked = subprocess.run(cli, capture_output=True, text=True, timeout=60)
    assert asked.returncode == 2 and f"what became of a call of pay (key {key})" in asked.stderr
    done = subprocess.run([*cli, "--answer", "happened"], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == "done", done.stderr
    assert ledger.read_text().split() == [key]  # paid once


def test_ctrl_c_in_a_step_of_several_calls_asks_only_about_the_once_call(tmp_path):
    """Side by side, the `once` call is asked about (an item named by its key); the call
    beside it, whose effects let it, is told it was interrupted."""
    from jsonagent import AgentConfig

    ledger, looked = Ledger(), []

    @tool(effects="once")
    def pay(amount: int, ctx: RunContext) -> str:
        """Pays."""
        ledger.charge(ctx.call_id, amount)
        if len(ledger.sent) == 1:
            time.sleep(0.3)  # the look beside it has begun
            raise KeyboardInterrupt
        return f"paid {amount}"

    @tool(effects="idempotent")
    def look(q: str) -> str:
        """Looks."""
        looked.append(q)
        time.sleep(5)
        return "found"

    both = {"thought": "both", "calls": [{"tool_name": "pay", "args_list": {"amount": 3}},
                                         {"tool_name": "look", "args_list": {"q": "bill"}}]}
    agent = Agent(model=ScriptedModel([both, DONE], replay=True), tools=[pay, look],
                  store=tmp_path / "runs.db", config=AgentConfig(parallel_calls=2))
    stopped = agent.run("pay and look")
    run = stopped.run_id
    key = call_key(run, 1, 0)
    assert stopped.status == "needs_human" and looked == ["bill"]
    assert stopped.pending.model_dump() == {"kind": "once", "tool": "pay", "args": {"amount": 3},
                                            "key": key, "id": key}
    assert stopped.steps[0].calls[1].observation == {
        "error": "interrupted by the user before the tool finished"}
    done = agent.resume(run, answer="happened")
    assert done.status == "completed" and ledger.sent == [key]


def test_a_new_run_after_an_abandoned_once_question_is_told_the_call_may_have_happened(
        tmp_path):
    """The question cancelled unanswered (as the server's cancel does), the session's next
    run is not told the call was merely interrupted, which reads as "it failed"."""
    ledger = Ledger()
    agent = _ctrl_c_payer(ledger, tmp_path / "runs.db")
    stopped = agent.run("pay 3", session="bills")
    key = call_key(stopped.run_id, 1)
    store = open_store(tmp_path / "runs.db")
    assert store.end_run(stopped.run_id, "interrupted", "cancelled", ("needs_human",))
    seen = []
    after = Agent(model=ScriptedModel(lambda m, f: (seen.append(m[-2]), DONE)[1]),
                  tools=list(agent.toolset), store=tmp_path / "runs.db").run(
                      "anything else?", session="bills")
    assert after.status == "completed" and ledger.sent == [key]
    told = seen[0]["content"] if isinstance(seen[0], dict) else seen[0].content
    assert f"nobody said whether it went through (key {key})" in told


def test_a_hook_failing_beside_a_once_call_in_flight_asks_what_became_of_it(tmp_path):
    """In a step `[pay, look]`, look ends first and its after_tool hook raises: the run ends
    on the hook's error, and leaving the step stops the payment mid-call. That call is asked
    about (the error kept), never told it failed, which the model would read as "pay again"
    (issue 58, finding 3, from review)."""
    from jsonagent import AgentConfig

    ledger, began = Ledger(), threading.Event()

    @tool(effects="once")
    def pay(amount: int, ctx: RunContext) -> str:
        """Pays."""
        ledger.charge(ctx.call_id, amount)
        began.set()
        ctx.cancel.wait(5)  # stopped with the run
        return f"paid {amount}"

    @tool(effects="idempotent")
    def look(q: str) -> str:
        """Looks."""
        began.wait(5)
        return "found"

    class Broken:
        def after_tool(self, state, call, observation):
            if call.tool == "look":
                raise RuntimeError("audit log is full")

    both = {"thought": "both", "calls": [{"tool_name": "pay", "args_list": {"amount": 3}},
                                         {"tool_name": "look", "args_list": {"q": "bill"}}]}
    agent = Agent(model=ScriptedModel([both, DONE], replay=True), tools=[pay, look],
                  store=tmp_path / "runs.db", config=AgentConfig(parallel_calls=2),
                  hooks=[Broken()])
    t0 = time.perf_counter()
    stopped = agent.run("pay and look")
    assert time.perf_counter() - t0 < 4  # the payment was stopped, not waited for
    key = call_key(stopped.run_id, 1, 0)
    assert stopped.status == "needs_human", stopped.error
    assert stopped.error == "hook Broken.after_tool failed: RuntimeError: audit log is full"
    assert stopped.pending.model_dump() == {"kind": "once", "tool": "pay", "args": {"amount": 3},
                                            "key": key, "id": key}
    assert [(o.key, o.ended) for o in stopped.once] == [(key, "cut_short")]
    done = agent.resume(stopped.run_id, answer="happened")
    assert done.status == "completed" and ledger.sent == [key]


def test_a_sub_agents_once_calls_are_in_its_parents_record(tmp_path):
    """A payment made by a sub-agent, then the parent's model fails: the parent's record
    lists the payment, so `eval --retry-errors` (and batch's --retry-failed) leave the task
    without --force, as for a payment the parent made itself (issue 58, finding 3, from
    review)."""
    ledger = Ledger()

    @tool(effects="once")
    def pay(amount: int, ctx: RunContext) -> str:
        """Pays."""
        ledger.charge(ctx.call_id, amount)
        return f"paid {amount}"

    billing = Agent(ScriptedModel([step("pay", {"amount": 3}, "pay"), DONE]), tools=[pay])
    parent = Agent(ScriptedModel([step("billing", {"task": "pay 3"})]),  # then it fails
                   tools=[billing.as_tool("billing", "Pays bills.")], store=tmp_path / "r.db")
    failed = parent.run("pay the bill")
    [key] = ledger.sent
    assert failed.status == "failed" and "ran out of replies" in failed.error
    assert [(o.key, o.tool, o.ended) for o in failed.once] == [(key, "pay", "returned")]
    assert open_store(tmp_path / "r.db").load_run(failed.run_id).state.once == failed.once


def test_a_persons_answer_about_a_once_call_outlives_a_later_takeover(tmp_path):
    """Answered "happened", then the run's process died before the step closed: taken over,
    the call's recorded result is used, and the record still says a person answered for it,
    not that the tool returned (issue 58, finding 3, from review)."""
    agent, run, paid = _paid_then_cut_short(tmp_path, ended=False)
    key = call_key(run, 1)
    assert agent.resume(run).status == "needs_human"
    answered = agent.resume(run, answer="happened")
    assert [(o.key, o.ended) for o in answered.once] == [(key, "happened")]
    _crash_during(tmp_path / "runs.db", run, 1, ended=True)
    taken = agent.resume(run)
    assert taken.status == "completed" and paid == []
    assert [(o.key, o.ended) for o in taken.once] == [(key, "happened")]
