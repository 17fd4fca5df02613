"""A person in a step of several calls (issue 42): the gated calls are asked for at once, as
one pending with an item each, and each item is approved or denied on its own, in the
library, the CLI and the HTTP API; calls that need no approval run at once."""

from __future__ import annotations

import json
import os

import pytest

from jsonagent import Agent, AgentConfig, ConfigError, core_tools, tool
from jsonagent.calls import call_key
from jsonagent.testing import ScriptedModel, step

DONE = step("TaskCompleteTool", {"output": "done"}, "done")


def several(*calls) -> dict:
    return {"thought": "at once", "calls": [{"tool_name": n, "args_list": a} for n, a in calls]}


SENDS = several(("send", {"to": "ann"}), ("count", {"n": 1}), ("send", {"to": "eve"}),
                ("send", {"to": "bob"}))


def people(tmp_path, ran: list) -> Agent:
    @tool(confirm=True)
    def send(to: str) -> str:
        """Sends."""
        ran.append(to)
        return f"sent to {to}"

    @tool
    def count(n: int) -> int:
        """Counts."""
        ran.append(n)
        return n

    return Agent(model=ScriptedModel([SENDS, DONE], replay=True), tools=[send, count],
                 config=AgentConfig(parallel_calls=4), store=tmp_path / "runs.db")


def test_gated_calls_wait_as_one_pending_with_an_item_each_and_the_others_run_at_once(tmp_path):
    ran = []
    a = people(tmp_path, ran)
    paused = a.run("send them", session="s")
    run = paused.run_id
    assert paused.status == "needs_human" and ran == [1]  # the call that needs no approval ran
    ids = [call_key(run, 1, i) for i in (0, 2, 3)]
    assert paused.pending.model_dump() == {
        "kind": "approval", "tool": "send", "args": {"to": "ann"}, "id": ids[0],
        "items": [{"kind": "approval", "tool": "send", "args": {"to": to}, "id": i}
                  for to, i in zip(("ann", "eve", "bob"), ids)]}
    with pytest.raises(ConfigError, match=f"item {ids[1]}: an approval of send"):
        a.resume(run, items={ids[0]: {"approve": True}, ids[2]: {"approve": True}})
    result = a.resume(run, items={ids[0]: {"approve": True}, ids[2]: {"approve": True},
                                  ids[1]: {"approve": False, "reason": "not eve"}})
    assert result.status == "completed" and ran == [1, "ann", "bob"]  # eve's never ran
    calls = result.steps[0].calls
    assert calls[2].error and "not eve" in calls[2].observation["error"]
    assert [c.observation for c in calls] == ["sent to ann", 1, calls[2].observation,
                                              "sent to bob"]


def test_one_decision_for_every_item_and_the_same_in_a_new_process(tmp_path):
    ran = []
    a = people(tmp_path, ran)
    run = a.run("send them", session="s").run_id
    ran.clear()
    again = people(tmp_path, ran)  # another Agent, from the store: as another process would
    assert again.resume(run, approve=True).status == "completed"
    assert sorted(map(str, ran)) == ["ann", "bob", "eve"]  # the count ran once, before


def test_an_ask_and_approvals_in_one_step_are_answered_together(tmp_path):
    ran = []

    @tool(confirm=True)
    def send(to: str) -> str:
        """Sends."""
        ran.append(to)
        return f"sent to {to}"

    replies = [several(("send", {"to": "ann"}), ("AskHumanHelpTool", {"question": "Who else?"})),
               DONE]
    a = Agent(model=ScriptedModel(replies), tools=[send, *core_tools()],
              config=AgentConfig(parallel_calls=2))
    paused = a.run("go")
    [approval, question] = paused.pending.items
    assert (approval.kind, question.kind) == ("approval", "question") and ran == []
    result = a.resume(a.last_state, items={approval.id: {"approve": True},
                                           question.id: {"answer": "bob"}})
    assert result.status == "completed" and ran == ["ann"]
    assert [c.observation for c in result.steps[0].calls] == ["sent to ann", "bob"]


def test_the_cli_resumes_each_item_by_its_index(tmp_path):
    from test_cli import cli, script

    (tmp_path / "sendtools.py").write_text("def send(to):\n    return f'sent to {to}'\n")
    specs = tmp_path / "tools.json"
    specs.write_text(json.dumps([{"name": "send", "handler": "sendtools:send", "confirm": True,
                                  "parameters": [{"name": "to", "type": "string"}]}]))
    model = script(tmp_path, several(("send", {"to": "ann"}), ("send", {"to": "eve"})), DONE)
    env = {"PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    paused = cli("run", "send", "--model", model, "--tools", str(specs), "--parallel-calls", "2",
                 "--no-input", env=env)
    assert paused.returncode == 4, paused.stderr
    run = paused.stderr.split("jsonagent resume ")[1].split()[0]
    assert f"--item {run}.1.0=approve|deny --item {run}.1.1=approve|deny" in paused.stderr
    done = cli("resume", run, "--item", "0=approve", "--item", "1=deny", "--reason", "not eve",
               "-o", "json", env=env)
    assert done.returncode == 0, done.stderr
    calls = json.loads(done.stdout)["steps"][0]["calls"]
    assert calls[0]["observation"] == "sent to ann"
    assert calls[1]["error"] and "not eve" in calls[1]["observation"]["error"]


def test_the_api_takes_each_items_decision_by_its_id(serve):
    server = serve([several(("delete_file", {"path": "a"}), ("delete_file", {"path": "b"}),
                            ("GetTimeTools", {"timezone": "UTC"})), DONE],
                   "--parallel-calls", "3")
    run = server.create(input="clean")["id"]
    action = server.wait(run, "requires_action")["required_action"]
    ids = [item["id"] for item in action["items"]]
    assert ids == [call_key(run, 1, 0), call_key(run, 1, 1)]
    with server.client as c:
        half = c.post(f"/v1/runs/{run}/respond", json={"items": {ids[0]: {"approve": True}}})
        assert half.status_code == 422 and f"item {ids[1]}" in half.text
        assert c.post(f"/v1/runs/{run}/respond", json={"items": {
            ids[0]: {"approve": True},
            ids[1]: {"approve": False, "reason": "keep b"}}}).status_code == 202
    calls = server.wait(run, "completed")["steps"][0]["calls"]
    assert calls[0]["observation"] == "deleted a" and "keep b" in json.dumps(calls[1])
    assert calls[2]["observation"]["timezone"] == "UTC"


@pytest.fixture
def serve(tmp_path):
    pytest.importorskip("fastapi")
    pytest.importorskip("a2a")
    from test_server import Server

    servers = []

    def start(replies, *args):
        servers.append(Server(tmp_path, replies, *args))
        return servers[-1].start()

    yield start
    for server in servers:
        server.kill()


TWO_DELETES = several(("delete_file", {"path": "a"}), ("delete_file", {"path": "b"}))


def test_ag_ui_shows_one_interrupt_per_item_and_resume_answers_each_by_id(serve):
    from test_agui_edges import body, post

    server = serve([TWO_DELETES, DONE], "--parallel-calls", "2")
    status, events = post(server, body("two"))
    calls = [e["toolCallId"] for e in events if e["type"] == "TOOL_CALL_START"]
    interrupts = events[-1]["outcome"]["interrupts"]
    run = events[0]["runId"]
    assert calls == [call_key(run, 1, 0), call_key(run, 1, 1)]
    assert [i["toolCallId"] for i in interrupts] == calls
    assert [i["message"] for i in interrupts] == ['Allow delete_file with {"path": "a"}?',
                                                  'Allow delete_file with {"path": "b"}?']
    yes, no = ({"interruptId": i["id"], "status": "resolved", "payload": p} for i, p in zip(
        interrupts, ({"approved": True}, {"approved": False, "reason": "keep b"})))
    status, events = post(server, body("two", text=None, resume=[yes, no]))
    results = {e["toolCallId"]: e["content"] for e in events
               if e["type"] == "TOOL_CALL_RESULT"}
    assert results[calls[0]] == "deleted a" and "keep b" in results[calls[1]]
    assert events[-1]["type"] == "RUN_FINISHED" and server.get(run)["status"] == "completed"


def test_a2a_asks_each_item_on_a_line_and_takes_an_answer_a_line(serve):
    pytest.importorskip("a2a")
    from a2a.helpers import get_message_text
    from a2a.types import TaskState
    from test_server_a2a import client_for, run, send

    server = serve([TWO_DELETES, DONE], "--parallel-calls", "2")
    server.token = None

    async def flow():
        client, http = await client_for(server, streaming=False)
        try:
            _, task = await send(client, "clean up")
            asked = get_message_text(task.status.message)
            assert task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
            assert asked.startswith("1. May I call delete_file with {\"path\": \"a\"}?")
            assert "\n2. May I call delete_file with {\"path\": \"b\"}?" in asked
            _, task = await send(client, "yes\nno, keep b", task)
            assert task.status.state == TaskState.TASK_STATE_COMPLETED
        finally:
            await http.aclose()

    run(flow())
    [done] = server.client.get("/v1/runs").json()["data"]
    calls = done["steps"][0]["calls"]
    assert calls[0]["observation"] == "deleted a" and "keep b" in json.dumps(calls[1])
