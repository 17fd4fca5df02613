"""Agents as tools: a sub-run is a run, stored with its parent, paused and resumed with it."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

from pydantic import BaseModel

from jsonagent import Agent, AgentConfig
from jsonagent.delegate import agent_tool
from jsonagent.store import open_store
from jsonagent.testing import ScriptedModel, step

DONE = step("TaskCompleteTool", {"output": "done"})


class Sum(BaseModel):
    total: int


def test_a_sub_agents_typed_answer_is_the_observation_and_the_tree_is_one_record(tmp_path):
    store = open_store(tmp_path / "db.sqlite")
    coder = Agent(ScriptedModel([step("TaskCompleteTool", {"total": 42})]), output_type=Sum)
    seen = []
    writer = Agent(ScriptedModel([step("coder", {"task": "6*7"}), DONE]),
                   tools=[coder.as_tool("coder", "Does arithmetic.")], store=store,
                   on_event=seen.append)
    result = writer.run("Write about 6*7")
    assert result.status == "completed"
    assert result.steps[0].observation == {"total": 42}
    # the sub-run's events reached the parent's records, marked with its own ids
    sub = [e for e in seen if e.depth == 1]
    assert [e.type for e in sub] == ["run_start", "model_reply", "step", "run_end"]
    assert {e.parent_run_id for e in sub} == {result.run_id}
    assert {e.run_id for e in sub} != {result.run_id}
    # one store: the sub-run is a run with its parent and depth; its usage adds up at the top
    [child] = store.sub_runs(result.run_id)
    assert (child.parent_run_id, child.depth, child.status) == (result.run_id, 1, "completed")
    assert child.state.question == "6*7"
    assert result.usage.completion_tokens > child.state.usage.completion_tokens > 0
    assert store.load_run(result.run_id).depth == 0


SUBAGENTS = '''
from jsonagent import Agent
from jsonagent.testing import step
from jsonagent.models import resolve_model

helper = Agent(model=resolve_model("scripted:{script}"))
'''


def test_a_question_inside_a_sub_agent_pauses_the_tree_and_resume_in_a_new_process_completes_it(
        tmp_path):
    (tmp_path / "sub.json").write_text(json.dumps(
        [step("AskHumanHelpTool", {"question": "Which city?"}),
         step("TaskCompleteTool", {"output": "sunny in Oslo"})]))
    (tmp_path / "subagents.py").write_text(SUBAGENTS.format(script=tmp_path / "sub.json"))
    (tmp_path / "tools.json").write_text(json.dumps([{
        "name": "helper", "description": "Finds the weather.", "handler": {"agent": "subagents:helper"},
        "parameters": {"type": "object", "properties": {"task": {"type": "string"}},
                       "required": ["task"]}}]))
    (tmp_path / "top.json").write_text(json.dumps(
        [step("helper", {"task": "weather?"}), step("TaskCompleteTool", {"output": "told"})]))
    env = {**__import__("os").environ, "PYTHONPATH": f"{tmp_path}:{Path.cwd()}"}

    def cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "jsonagent", *args], capture_output=True,
                              text=True, env=env, timeout=60, cwd=tmp_path)

    first = cli("run", "What is the weather?", "--model", f"scripted:{tmp_path / 'top.json'}",
                "--tools", str(tmp_path / "tools.json"), "--no-input", "--output", "json")
    assert first.returncode == 4, first.stderr
    paused = json.loads(first.stdout)
    top = paused["run_id"]
    assert paused["pending"]["kind"] == "question"
    assert paused["pending"]["question"] == "Which city?"
    path = paused["pending"]["path"]
    assert path[0] == top and len(path) == 2
    second = cli("resume", top, "--answer", "Oslo", "--output", "json")
    assert second.returncode == 0, second.stderr
    done = json.loads(second.stdout)
    assert done["answer"] == "told" and done["steps"][0]["observation"] == "sunny in Oslo"
    store = open_store()
    [child] = store.sub_runs(top)
    assert child.id == path[1] and child.status == "completed"
    assert child.state.steps[0].observation == "Oslo"


def test_an_approval_two_levels_down_is_asked_at_the_top_and_denied(tmp_path):
    store = open_store(tmp_path / "db.sqlite")
    ran = []

    def delete_file(path: str) -> str:
        ran.append(path)
        return "deleted"

    leaf = Agent(ScriptedModel([step("delete_file", {"path": "a.txt"}),
                                step("TaskCompleteTool", {"output": "kept it"})]),
                 tools=[delete_file], config=AgentConfig(confirm=["delete_file"]))
    mid = Agent(ScriptedModel([step("leaf", {"task": "clean"}),
                               step("TaskCompleteTool", {"output": "leaf says kept"})]),
                tools=[leaf.as_tool("leaf")])
    top = Agent(ScriptedModel([step("mid", {"task": "tidy up"}), DONE]),
                tools=[mid.as_tool("mid")], store=store)
    paused = top.run("tidy")
    assert paused.status == "needs_human"
    assert paused.pending.kind == "approval" and paused.pending.tool == "delete_file"
    path = paused.pending.path
    assert len(path) == 3 and path[0] == paused.run_id
    assert [store.load_run(r).depth for r in path] == [0, 1, 2]
    assert all(store.load_run(r).status == "needs_human" for r in path)
    result = top.resume(paused.run_id, approve=False, reason="keep my files")
    assert result.status == "completed" and not ran
    leaf_run = store.load_run(path[2]).state
    assert "keep my files" in leaf_run.steps[0].observation["error"]
    assert store.load_run(path[1]).state.steps[0].observation == "kept it"
    assert result.steps[0].observation == "leaf says kept"


def test_the_step_budget_holds_for_the_whole_tree(tmp_path):
    zones = ["UTC", "Europe/Paris", "Asia/Tokyo", "America/Lima", "Africa/Cairo"]
    busy = Agent(ScriptedModel([step("GetTimeTools", {"timezone": z}) for z in zones]),
                 max_steps=10)
    top = Agent(ScriptedModel([step("busy", {"task": "keep busy"}), DONE]),
                tools=[busy.as_tool("busy")], max_steps=4)
    result = top.run("go")
    # the sub-run got what was left (3 steps), and the top then had none
    assert result.status == "max_steps"
    assert "max_steps" in result.steps[0].observation["error"]
    assert len(result.steps) == 1


class _Later:
    """An agent's own tool needs the agent, which needs its tools: fill it in afterwards."""
    deps = None


def test_an_agent_that_calls_itself_is_refused_at_the_depth_limit(tmp_path):
    store = open_store(tmp_path / "db.sqlite")

    def reply(messages, fmt):
        if '"tool_name"' in messages[-1]["content"]:
            return step("TaskCompleteTool", {"output": "stopped"})
        return step("myself", {"task": "again"})

    later = _Later()
    agent = Agent(ScriptedModel(reply), tools=[agent_tool(later, "myself")], store=store,
                  config=AgentConfig(max_depth=2))
    later.deps = agent.deps
    result = agent.run("recurse")
    assert result.status == "completed"
    [one] = store.sub_runs(result.run_id)
    [two] = store.sub_runs(one.id)
    assert store.sub_runs(two.id) == [] and two.depth == 2
    assert "nest 2 deep" in two.state.steps[0].observation["error"]


def test_cancelling_the_top_run_cancels_the_sub_run(tmp_path):
    store = open_store(tmp_path / "db.sqlite")
    started = threading.Event()

    def slow(seconds: float) -> str:
        started.set()
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            time.sleep(0.02)
        return "waited"

    sub = Agent(ScriptedModel([step("slow", {"seconds": 30}), DONE]), tools=[slow])
    top = Agent(ScriptedModel([step("sub", {"task": "wait"}), DONE]),
                tools=[sub.as_tool("sub")], store=store)
    threading.Thread(target=lambda: started.wait(10) and top.cancel(), daemon=True).start()
    t0 = time.monotonic()
    result = top.run("go")
    assert time.monotonic() - t0 < 5
    assert result.status == "interrupted"
    [child] = store.sub_runs(result.run_id)
    assert child.status == "interrupted"


def test_a_store_from_before_sub_runs_migrates_and_its_events_still_read(tmp_path):
    import sqlite3

    from jsonagent import events as ev

    path = tmp_path / "old.db"
    store = open_store(path)
    run = Agent(ScriptedModel([DONE]), store=store).run("x", session="s")
    store.close()
    db = sqlite3.connect(path)  # back to the schema and records of migration 3
    db.executescript("""
        DROP INDEX runs_by_parent;
        ALTER TABLE runs DROP COLUMN parent_run_id;
        ALTER TABLE runs DROP COLUMN depth;
        DELETE FROM _jsonagent_migrations WHERE version = 4;
        UPDATE events SET data = json_remove(data, '$.parent_run_id', '$.depth');
        UPDATE runs SET state = json_remove(state, '$.parent_run_id', '$.depth', '$.sub_steps');
    """)
    db.close()
    store = open_store(path)
    info = store.load_run(run.run_id)
    assert (info.parent_run_id, info.depth, info.state.depth) == (None, 0, 0)
    events = [ev.reader().validate_python(e) for e in store.events(run.run_id)]
    assert events[0].type == "run_start" and events[0].depth == 0
    assert events[0].parent_run_id is None and store.sub_runs(run.run_id) == []


def test_a_served_tree_streams_its_sub_run_and_is_answered_after_a_restart(tmp_path):
    import httpx

    from test_server import Server, read_sse

    (tmp_path / "sub.json").write_text(json.dumps(
        [step("AskHumanHelpTool", {"question": "Which city?"}),
         step("TaskCompleteTool", {"output": "sunny in Oslo"})]))
    (tmp_path / "subagents.py").write_text(SUBAGENTS.format(script=tmp_path / "sub.json"))
    (tmp_path / "helper.json").write_text(json.dumps([{
        "name": "helper", "description": "Finds the weather.", "handler": {"agent": "subagents:helper"},
        "parameters": {"type": "object", "properties": {"task": {"type": "string"}},
                       "required": ["task"]}}]))
    server = Server(tmp_path, [step("helper", {"task": "weather?"}), DONE],
                    "--tools", str(tmp_path / "helper.json"))
    try:
        server.start()
        run_id = server.create(input="What is the weather?")["id"]
        with httpx.Client(base_url=server.url, timeout=20) as c, \
                c.stream("GET", f"/v1/runs/{run_id}/events") as response:
            events = read_sse(response, until=lambda e: e["type"] == "run_end"
                              and e["depth"] == 0)
        sub = [e["data"] for e in events if e["data"]["depth"] == 1]
        assert [e["type"] for e in sub] == ["run_start", "model_reply", "step", "run_end"]
        assert all("id" not in e for e in events if e["data"]["depth"] == 1)
        waiting = server.wait(run_id, "requires_action")
        path = waiting["required_action"]["path"]
        assert waiting["required_action"]["question"] == "Which city?" and path[0] == run_id
        assert waiting["sub_runs"][0]["id"] == path[1]
        assert waiting["sub_runs"][0]["status"] == "requires_action"
        server.kill()
        server.start()  # the answer goes down the tree after a restart too
        with server.client as c:
            assert c.post(f"/v1/runs/{run_id}/respond", json={"answer": "Oslo"}).status_code == 202
        done = server.wait(run_id, "completed")
        assert done["steps"][0]["observation"] == "sunny in Oslo"
        [child] = done["sub_runs"]
        assert (child["status"], child["depth"], child["parent_run_id"]) == \
            ("completed", 1, run_id)
        assert child["steps"][0]["observation"] == "Oslo"
    finally:
        server.kill()


def test_the_delegation_example_runs_the_coders_code_and_the_writer_uses_its_answer(tmp_path):
    examples = Path(__file__).resolve().parent.parent / "tool_specs" / "examples"
    (tmp_path / "coder.json").write_text(json.dumps(
        [step("CodeInterpreterTool", {"code": "print(366 * 24 * 60 * 60)"}),
         step("TaskCompleteTool", {"output": "31622400"})]))
    (tmp_path / "writer.json").write_text(json.dumps(
        [step("coder", {"task": "How many seconds are in a leap year?"}),
         step("TaskCompleteTool", {"output": "A leap year has 31,622,400 seconds."})]))
    env = {**__import__("os").environ, "PYTHONPATH": f"{examples}:{Path.cwd()}",
           "JSONAGENT_CODER_MODEL": f"scripted:{tmp_path / 'coder.json'}"}
    out = subprocess.run(
        [sys.executable, "-m", "jsonagent", "run", "Seconds in a leap year?", "--model",
         f"scripted:{tmp_path / 'writer.json'}", "--no-core-tools", "--tools",
         str(examples / "coder.json"), "--output", "json"],
        capture_output=True, text=True, env=env, timeout=90, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["steps"][0]["observation"] == "31622400"
    [coder] = open_store().sub_runs(result["run_id"])
    assert coder.state.steps[0].observation["stdout"].strip() == "31622400"


def test_an_agent_that_calls_itself_twice_in_a_step_of_several_does_not_wait_on_itself():
    """Its sub-runs' calls run in threads of their own, and the agent's lock (one sub-run of
    an agent at a time) is held by the run they belong to: they must not wait for it."""
    def reply(messages, fmt):
        last = messages[-1]["content"]
        if '"tool_name"' in last:
            return step("TaskCompleteTool", {"output": "stopped"})
        return {"thought": "two at once", "calls": [
            {"tool_name": "myself", "args_list": {"task": "a"}},
            {"tool_name": "myself", "args_list": {"task": "b"}}]}

    later = _Later()
    agent = Agent(ScriptedModel(reply), tools=[agent_tool(later, "myself")],
                  config=AgentConfig(max_depth=2, parallel_calls=2, max_steps=50))
    later.deps = agent.deps
    done = []
    worker = threading.Thread(target=lambda: done.append(agent.run("recurse")), daemon=True)
    worker.start()
    worker.join(20)
    assert done and done[0].status == "completed", "the agent waited on itself"
