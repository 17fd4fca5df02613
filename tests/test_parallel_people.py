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
    with pytest.raises(ConfigError, match=f"it has no item {run}.1.9 "):  # a mistyped id
        a.resume(run, approve=True, items={f"{run}.1.9": {"approve": False}})
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


def gated_send(tmp_path, script):
    """A `send` tool spec that needs approval, and a script of one step that sends twice."""
    (tmp_path / "sendtools.py").write_text("def send(to):\n    return f'sent to {to}'\n")
    specs = tmp_path / "tools.json"
    specs.write_text(json.dumps([{"name": "send", "handler": "sendtools:send", "confirm": True,
                                  "parameters": [{"name": "to", "type": "string"}]}]))
    return specs, script(tmp_path, several(("send", {"to": "ann"}), ("send", {"to": "eve"})),
                         DONE)


def test_the_cli_resumes_each_item_by_its_index(tmp_path):
    from test_cli import cli, script

    specs, model = gated_send(tmp_path, script)
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


def test_one_waiting_call_of_several_is_decided_by_its_id_over_rest_and_the_library(serve,
                                                                                    tmp_path):
    """When one call of a step of several waits, its item's decision by id is the one
    taken, over a top-level value (REST and the library agree), and --item takes it too."""
    ran = []

    @tool(confirm=True)
    def send(to: str) -> str:
        """Sends."""
        ran.append(to)
        return f"sent to {to}"

    a = Agent(model=ScriptedModel([several(("send", {"to": "eve"}), ("GetTimeTools", {})),
                                   DONE]), tools=[send, *core_tools()],
              config=AgentConfig(parallel_calls=2), store=tmp_path / "runs.db")
    paused = a.run("send")
    item = paused.pending.id
    assert item == call_key(paused.run_id, 1, 0) and not paused.pending.items
    done = a.resume(paused.run_id, approve=True, items={item: {"approve": False}})
    assert done.status == "completed" and ran == []  # denied by its id: never ran

    server = serve([several(("delete_file", {"path": "a"}), ("GetTimeTools", {})), DONE],
                   "--parallel-calls", "2")
    run = server.create(input="clean")["id"]
    action = server.wait(run, "requires_action")["required_action"]
    with server.client as c:
        assert c.post(f"/v1/runs/{run}/respond", json={"approve": True, "items": {
            call_key(run, 1, 0): {"approve": False, "reason": "keep a"}}}).status_code == 202
    calls = server.wait(run, "completed")["steps"][0]["calls"]
    assert "keep a" in json.dumps(calls[0]) and calls[0]["error"], action


def test_a_sub_runs_items_are_decided_each_and_never_taken_for_the_parents_calls(tmp_path):
    """A sub-agent whose step of several calls waits for two approvals: the parent (one call,
    the agent) pauses with the sub-run's two items, each decided by its id; the denied call
    never runs, and the parent does not pause again."""
    ran = []

    @tool(confirm=True)
    def send(to: str) -> str:
        """Sends."""
        ran.append(to)
        return f"sent to {to}"

    sub = Agent(model=ScriptedModel([several(("send", {"to": "ann"}), ("send", {"to": "eve"})),
                                     step("TaskCompleteTool", {"output": "sent"})]),
                tools=[send], config=AgentConfig(parallel_calls=2))
    top = Agent(model=ScriptedModel([step("mailer", {"task": "send them"}), DONE]),
                tools=[sub.as_tool("mailer", "Sends mail.")], store=tmp_path / "runs.db")
    paused = top.run("mail")
    assert paused.status == "needs_human", paused.error
    items = paused.pending.items
    assert len(items) == 2 and all(i.path and i.path[0] == paused.run_id for i in items)
    done = top.resume(paused.run_id, items={items[0].id: {"approve": True},
                                            items[1].id: {"approve": False, "reason": "no"}})
    assert done.status == "completed", (done.status, done.error, done.pending)
    assert ran == ["ann"]


def test_a_sub_run_item_denied_by_its_parent_id_does_not_run(tmp_path):
    """A parent step of two calls: a sub-agent waiting for an approval, and a gated call. The
    sub-run's item denied by its id in the parent's pending reaches the sub-run as a denial."""
    ran = []

    @tool(confirm=True)
    def send(to: str) -> str:
        """Sends."""
        ran.append(to)
        return f"sent to {to}"

    sub = Agent(model=ScriptedModel([step("send", {"to": "rm"}),
                                     step("TaskCompleteTool", {"output": "ok"})]), tools=[send])
    top = Agent(model=ScriptedModel([several(("mailer", {"task": "x"}), ("send", {"to": "bob"})),
                                     DONE]),
                tools=[sub.as_tool("mailer", "Sends mail."), send],
                config=AgentConfig(parallel_calls=2), store=tmp_path / "runs.db")
    paused = top.run("go")
    ids = [i.id for i in paused.pending.items]
    assert ids == [call_key(paused.run_id, 1, 0), call_key(paused.run_id, 1, 1)]
    done = top.resume(paused.run_id, items={ids[0]: {"approve": False},
                                            ids[1]: {"approve": True}})
    assert done.status == "completed", (done.error, done.pending)
    assert ran == ["bob"]  # the sub-run's send was denied


def test_chat_asks_for_each_item_in_turn(tmp_path):
    from test_cli import cli, script

    specs, model = gated_send(tmp_path, script)
    env = {"PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]),
           "JSONAGENT_HOME": str(tmp_path)}
    chat = cli("chat", "--model", model, "--tools", str(specs), "--parallel-calls", "2",
               "--session", "mail", stdin="send them\ny\nn\n", env=env)
    assert chat.returncode == 0, chat.stderr
    assert chat.stderr.count("allow this call?") == 2, chat.stderr
    shown = cli("sessions", "show", "mail", "-o", "json", env=env)
    assert "sent to ann" in shown.stdout and "sent to eve" not in shown.stdout, shown.stdout
