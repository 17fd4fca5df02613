"""Durable runs in the library: RunState, the event iterator, the SQLite store, sessions,
resume, approvals and hooks. Real SQLite files in temporary directories."""

import json
import sqlite3

import pytest

from jsonagent import Agent, ConfigError, tool
from jsonagent.events import RunEnd
from jsonagent.hooks import ToolCall, Veto
from jsonagent.state import Pending, RunState
from jsonagent.store import SessionBusy, open_store
from jsonagent.testing import ScriptedModel, step

DONE = step("TaskCompleteTool", {"output": "42"}, "done")
ASK = step("AskHumanHelpTool", {"question": "Which city?"}, "need a city")


@tool(confirm=True)
def delete_file(path: str) -> str:
    """Delete a file."""
    return f"deleted {path}"


def test_iter_yields_typed_events_in_order_and_ends_with_the_result():
    agent = Agent(model=ScriptedModel(["oops", step("GetTimeTools", {"timezone": "UTC"}), DONE]))
    events = list(agent.iter("time?"))
    assert [e.type for e in events] == ["run_start", "model_reply", "reask", "model_reply", "step",
                                        "tool_result", "model_reply", "step", "run_end"]
    assert [e.seq for e in events] == list(range(1, 10))
    assert len({(e.run_id, e.session_id, e.v) for e in events}) == 1 and events[0].run_id
    end = events[-1]
    assert isinstance(end, RunEnd) and end.result.status == "completed" and end.result.answer == "42"
    assert end.result.run_id == events[0].run_id and end.result.session_id == events[0].session_id


def test_run_state_round_trips_exactly_through_json():
    agent = Agent(model=ScriptedModel([step("GetTimeTools"), ASK]))
    result = agent.run("weather?")
    assert result.status == "needs_human"
    state = Agent.load_state(agent.save_state())
    assert state == agent.last_state
    assert state.model_dump_json() == agent.save_state()
    assert state.pending == Pending(kind="question", question="Which city?")
    assert [m.role for m in state.messages] == ["system", "user", "assistant", "observation",
                                                "assistant"]
    assert state.seq == 7 and state.stats.model_calls == 2


def test_a_saved_state_resumes_in_another_agent():
    first = Agent(model=ScriptedModel([ASK]))
    assert first.run("weather?").status == "needs_human"
    saved = first.save_state()
    model = ScriptedModel([DONE])
    result = Agent(model=model).resume(Agent.load_state(saved), answer="Oslo")
    assert result.status == "completed" and result.steps[0].observation == "Oslo"
    assert json.loads(model.requests[0]["messages"][-1]["content"])["response"] == "Oslo"


def test_named_session_carries_history_across_agents(tmp_path):
    store = tmp_path / "s.db"
    Agent(model=ScriptedModel([DONE]), store=store).run("first question", session="work")
    model = ScriptedModel([DONE])
    result = Agent(model=model, store=store).run("second question", session="work")
    assert result.status == "completed"
    users = [m["content"] for m in model.requests[0]["messages"] if m["role"] == "user"]
    assert users == ["first question", "second question"]
    info = open_store(store).find_session("work")
    assert info.runs == 2 and info.last_status == "completed"


def test_session_name_without_a_store_uses_the_home_database(tmp_path):
    Agent(model=ScriptedModel([DONE])).run("hi", session="default-home")
    store = open_store(tmp_path / "home" / "jsonagent.db")  # JSONAGENT_HOME from conftest
    assert store.find_session("default-home").runs == 1


def test_resume_by_run_id_after_a_pause(tmp_path):
    store = tmp_path / "s.db"
    paused = Agent(model=ScriptedModel([ASK]), store=store).run("weather?", session="s")
    assert paused.status == "needs_human" and paused.pending.question == "Which city?"
    events = list(Agent(model=ScriptedModel([DONE]), store=store).iter_resume(
        paused.run_id, answer="Oslo"))
    assert [e.type for e in events] == ["run_resumed", "tool_result", "model_reply", "step",
                                        "run_end"]
    assert events[0].seq == 5 and events[0].run_id == paused.run_id  # the sequence goes on
    assert events[-1].result.status == "completed"
    run = open_store(store).load_run(paused.run_id)
    assert run.status == "completed"
    assert [e["seq"] for e in open_store(store).events(run_id=paused.run_id)] == list(range(1, 10))


def test_a_waiting_session_refuses_a_new_run_and_names_the_resume_command(tmp_path):
    store = tmp_path / "s.db"
    paused = Agent(model=ScriptedModel([ASK]), store=store).run("weather?", session="s")
    with pytest.raises(SessionBusy, match=f"jsonagent resume {paused.run_id} --answer TEXT"):
        Agent(model=ScriptedModel([DONE]), store=store).run("something else", session="s")


def test_resume_input_must_fit_what_the_run_waits_for(tmp_path):
    store = tmp_path / "s.db"
    paused = Agent(model=ScriptedModel([ASK]), store=store).run("weather?", session="s")
    agent = Agent(model=ScriptedModel([DONE]), store=store)
    with pytest.raises(ConfigError, match="waits for an answer"):
        agent.resume(paused.run_id, approve=True)
    assert open_store(store).load_run(paused.run_id).status == "needs_human"  # untouched
    assert agent.resume(paused.run_id, answer="Oslo").status == "completed"
    with pytest.raises(ConfigError, match="has ended"):
        agent.resume(paused.run_id, answer="again")


def test_approval_granted_denied_and_headless(tmp_path):
    asked = []

    def approve(tool_name, args):
        asked.append((tool_name, args))
        return True

    call = step("delete_file", {"path": "a.txt"})
    ok = Agent(model=ScriptedModel([call, DONE]), tools=[delete_file], approve=approve).run("x")
    assert ok.status == "completed" and ok.steps[0].observation == "deleted a.txt"
    assert asked == [("delete_file", {"path": "a.txt"})]

    model = ScriptedModel([call, DONE])
    no = Agent(model=model, tools=[delete_file], approve=lambda t, a: False).run("x")
    assert no.status == "completed" and no.steps[0].error
    assert "refused this call" in no.steps[0].observation["error"]
    assert "refused" in json.loads(model.requests[1]["messages"][-1]["content"])["response"]["error"]

    store = tmp_path / "s.db"
    headless = Agent(model=ScriptedModel([call]), tools=[delete_file], store=store).run("x")
    assert headless.status == "needs_human"
    assert headless.pending.model_dump() == {"kind": "approval", "tool": "delete_file",
                                             "args": {"path": "a.txt"}}
    model = ScriptedModel([DONE])
    denied = Agent(model=model, tools=[delete_file], store=store).resume(
        headless.run_id, approve=False, reason="keep it")
    assert denied.status == "completed"
    assert "refused this call: keep it" in denied.steps[0].observation["error"]


def test_async_approve_callback():
    import asyncio

    async def approve(tool_name, args):
        return True

    async def main():
        agent = Agent(model=ScriptedModel([step("delete_file", {"path": "b"}), DONE]),
                      tools=[delete_file], approve=approve)
        return await agent.arun("x")

    assert asyncio.run(main()).steps[0].observation == "deleted b"


def test_confirm_in_a_spec_and_in_config(tmp_path):
    from jsonagent import AgentConfig

    spec = {"name": "shout", "confirm": True, "parameters": {"type": "object", "properties": {}}}
    agent = Agent(model=ScriptedModel([step("shout")]), tools=[spec | {"handler": "os:getcwd"}])
    assert agent.run("x").pending.tool == "shout"
    code = Agent(model=ScriptedModel([step("CodeInterpreterTool", {"code": "1"})]),
                 config=AgentConfig(confirm=["CodeInterpreterTool"]))
    assert code.run("x").pending.kind == "approval"


class Recorder:
    def __init__(self):
        self.calls = []

    def before_model(self, state):
        self.calls.append(("before_model", len(state.steps)))

    def after_model(self, state, reply):
        self.calls.append(("after_model", reply.text[:1]))

    def on_end(self, state, result):
        self.calls.append(("on_end", result.status))


def test_hooks_see_the_state_veto_replace_and_rewrite():
    class Guard:
        def before_tool(self, state, call):
            if call.args.get("timezone") == "Mars/Base":
                return Veto("no clocks on Mars")
            if call.args.get("timezone") == "Europe/Oslo":
                return ToolCall(call.tool, {"timezone": "UTC"})
            return None

        def after_tool(self, state, call, observation):
            return {"redacted": sorted(observation)} if call.args.get("timezone") == "UTC" else None

    recorder = Recorder()
    model = ScriptedModel([step("GetTimeTools", {"timezone": "Mars/Base"}),
                           step("GetTimeTools", {"timezone": "Europe/Oslo"}), DONE])
    result = Agent(model=model, hooks=[recorder, Guard()]).run("x")
    assert result.status == "completed"
    assert result.steps[0].observation == {"error": "no clocks on Mars"} and result.steps[0].error
    assert result.steps[1].observation == {"redacted": ["now", "timezone", "weekday"]}
    assert recorder.calls[:2] == [("before_model", 0), ("after_model", "{")]
    assert recorder.calls[-1] == ("on_end", "completed")


def test_a_hook_that_raises_fails_the_run_with_a_clear_error():
    class Broken:
        def before_tool(self, state, call):
            raise ValueError("bad day")

    result = Agent(model=ScriptedModel([step("GetTimeTools")]), hooks=[Broken()]).run("x")
    assert result.status == "failed"
    assert result.error == "hook Broken.before_tool failed: ValueError: bad day"


def test_ctrl_c_in_a_tool_leaves_a_consistent_state_and_the_session_goes_on():
    @tool
    def slow() -> str:
        """Gets interrupted."""
        raise KeyboardInterrupt

    model = ScriptedModel([step("slow"), DONE])
    agent = Agent(model=model, tools=[slow])
    with agent.session() as s:
        first = s.run("x")
        assert first.status == "interrupted"
        assert "interrupted by the user" in first.steps[0].observation["error"]
        second = s.run("go on")
    assert second.status == "completed"
    roles = [m["role"] for m in model.requests[-1]["messages"]]
    assert roles == ["system", "user", "assistant", "user", "user"]  # the step got its result


@pytest.mark.parametrize("logged", [False, True], ids=["never-started", "finished"])
def test_an_interrupted_run_resumes_and_redoes_only_the_step_in_flight(tmp_path, logged):
    """A crash after step 2 was taken: a call the log never saw runs; one the log saw
    finish is not run again, its recorded result is used (issue 41)."""
    store = tmp_path / "s.db"
    ran = []

    @tool
    def count(n: int) -> int:
        """Counts."""
        ran.append(n)
        return n

    agent = Agent(model=ScriptedModel([step("count", {"n": 1}), step("count", {"n": 2}), DONE],
                                      replay=True), tools=[count], store=store)
    paused = agent.run("x")  # completes; now forge a crash after step 2 was taken
    db = sqlite3.connect(store)
    state = RunState.model_validate_json(db.execute("SELECT state FROM runs").fetchone()[0])
    state.status, state.steps, state.messages = "running", state.steps[:2], state.messages[:5]
    state.steps[1].observation, state.stats.model_calls, state.answer = None, 2, None
    state.steps[1].calls[0].done = False  # in flight at the crash
    db.execute("UPDATE runs SET state = ?, status = 'running', owner = ?",
               (state.model_dump_json(), json.dumps({"pid": 999999, "host": __import__(
                   "socket").gethostname(), "started": 1.0})))
    if not logged:
        db.execute("DELETE FROM calls WHERE step = 2")
    db.commit()
    assert open_store(store).load_run(paused.run_id).status == "interrupted"  # owner is gone
    ran.clear()
    result = agent.resume(paused.run_id)
    assert result.status == "completed" and ran == ([] if logged else [2])
    assert result.steps[1].observation == 2
    assert [s.tool for s in result.steps] == ["count", "count", "TaskCompleteTool"]


def test_resume_in_a_fresh_process_says_the_code_interpreter_was_restarted(tmp_path):
    class FakeSandbox:
        def run(self, code):
            from types import SimpleNamespace

            return SimpleNamespace(stdout="ok\n", stderr="", error=None, exit_code=0,
                                   stdout_truncated=False, stderr_truncated=False, stdout_bytes=3,
                                   stderr_bytes=0, timed_out=False, crashed=False,
                                   state_lost=False, files_changed=[])

        def close(self):
            pass

    store = tmp_path / "s.db"
    paused = Agent(model=ScriptedModel([step("CodeInterpreterTool", {"code": "x = 1"}), ASK]),
                   store=store, sandbox_factory=FakeSandbox).run("x")
    model = ScriptedModel([DONE])
    Agent(model=model, store=store, sandbox_factory=FakeSandbox).resume(paused.run_id, answer="Oslo")
    last = json.loads(model.requests[0]["messages"][-1]["content"])
    assert last["response"] == "Oslo" and "code interpreter was restarted" in last["note"]


def test_store_migrates_an_empty_file_and_reopens(tmp_path):
    path = tmp_path / "fresh.db"
    store = open_store(path)
    store.close()
    db = sqlite3.connect(path)
    from jsonagent.store.migrations import MIGRATIONS

    assert db.execute("SELECT version, name FROM _jsonagent_migrations").fetchall() == [
        (n, m.__name__) for n, m in enumerate(MIGRATIONS, start=1)]
    assert MIGRATIONS[:2] and MIGRATIONS[0].__name__ == "_m001_initial"
    assert db.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    again = open_store(path)
    assert again.sessions() == []
    Agent(model=ScriptedModel([DONE]), store=again).run("x", session="a")
    assert open_store(path).find_session("a").runs == 1


@pytest.mark.parametrize("content,fragment", [
    (b"this is not sqlite at all" * 100, "not a usable jsonagent database"),
    (None, r"not a jsonagent database \(it holds other tables: recipes\)"),
])
def test_a_corrupt_or_foreign_database_is_refused_and_left_alone(tmp_path, content, fragment):
    path = tmp_path / "other.db"
    if content is None:
        db = sqlite3.connect(path)
        db.execute("CREATE TABLE recipes (name TEXT)")
        db.commit()
        db.close()
    else:
        path.write_bytes(content)
    before = path.read_bytes()
    with pytest.raises(ConfigError, match=fragment) as info:
        open_store(path)
    assert str(path) in str(info.value) and "\n" not in str(info.value)
    assert path.read_bytes() == before
