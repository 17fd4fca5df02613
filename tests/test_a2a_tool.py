"""A remote agent as a tool: two real `jsonagent serve` processes, A using B over A2A."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import httpx
import pytest

from test_server import ASK, DONE, TIME, Server, free_port  # noqa: F401
from jsonagent.calls import call_key
from jsonagent.store import open_store
from jsonagent.testing import step

pytest.importorskip("a2a")

ANSWERED = step("TaskCompleteTool", {"output": "delegated"}, "done")


def delegate(task: str) -> dict:
    return step("jsonagent", {"task": task}, "hand it to B")


@pytest.fixture
def pair(tmp_path, monkeypatch):
    """start(b_replies, a_replies, *a_args): B first, then A with `--a2a B` (or the options
    `a_args[0](B's url)` gives); both are killed at the end."""
    started: list[Server] = []

    def start(b_replies, a_replies, *a_args, b_token=None):
        (tmp_path / "b").mkdir()
        (tmp_path / "a").mkdir()
        monkeypatch.setenv("JSONAGENT_HOME", str(tmp_path / "b" / "home"))
        b = Server(tmp_path / "b", b_replies, token=b_token)
        started.append(b)
        b.start()
        monkeypatch.setenv("JSONAGENT_HOME", str(tmp_path / "a" / "home"))
        monkeypatch.setenv("JSONAGENT_A2A_TIMEOUT", "20")
        args = a_args[0](b.url) if a_args and callable(a_args[0]) else \
            a_args or ("--a2a", b.url)
        a = Server(tmp_path / "a", a_replies, *args)
        started.append(a)
        a.start()
        return a, b

    yield start
    for server in started:
        server.kill()


def b_is_waiting(b: Server) -> None:
    """B's run has started its slow tool (its step is checkpointed only once the tool ends)."""
    deadline = time.monotonic() + 20
    while not any(r["status"] == "in_progress" for r in runs_of(b)):
        assert time.monotonic() < deadline, runs_of(b)
        time.sleep(0.1)
    time.sleep(1.0)


def runs_of(server: Server) -> list[dict]:
    with server.client as c:
        return c.get("/v1/runs").json()["data"]


def test_the_card_is_read_and_the_remote_agent_is_listed_as_a_tool(pair, tmp_path):
    a, b = pair([DONE], [DONE])
    out = subprocess.run([sys.executable, "-m", "jsonagent", "tools", "list", "--a2a", b.url,
                          "--output", "json"], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    [tool] = [t for t in json.loads(out.stdout) if t["name"] == "jsonagent"]
    assert "JSON tool-calling agent" in tool["description"]
    assert "Answer with tools" in tool["description"]  # the card's skill
    assert tool["parameters"]["required"] == ["task"]
    bad = subprocess.run([sys.executable, "-m", "jsonagent", "tools", "list", "--a2a",
                          f"http://127.0.0.1:{free_port()}"], capture_output=True, text=True,
                         timeout=30)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1 and "cannot read its card" in bad.stderr


def test_a_delegated_task_completes_with_bs_answer_as_the_observation(pair):
    a, b = pair([TIME, DONE], [delegate("What time is it?"), ANSWERED])
    run = a.wait(a.create(input="Ask B for the time")["id"], "completed")
    assert run["steps"][0]["tool"] == "jsonagent" and run["steps"][0]["observation"] == 42
    [remote] = runs_of(b)
    assert remote["status"] == "completed" and remote["input"] == "What time is it?"
    assert remote["steps"][0]["tool"] == "GetTimeTools"


def test_bs_question_reaches_as_required_action_and_the_answer_goes_back_to_b(pair):
    a, b = pair([ASK, DONE], [delegate("What is the weather?"), ANSWERED])
    run_id = a.create(input="Weather, via B")["id"]
    waiting = a.wait(run_id, "requires_action")
    action = waiting["required_action"]
    assert action["kind"] == "question" and action["question"] == "Which city?"
    assert action["path"][0] == run_id and action["path"][1].startswith("a2a:")
    with a.client as c:
        assert c.post(f"/v1/runs/{run_id}/respond", json={"answer": "Oslo"}).status_code == 202
    done = a.wait(run_id, "completed")
    assert done["steps"][0]["observation"] == 42
    [remote] = runs_of(b)
    assert remote["status"] == "completed" and remote["steps"][0]["observation"] == "Oslo"


def test_b_killed_mid_task_gives_a_an_error_observation_not_a_hang(pair):
    a, b = pair([step("wait", {"seconds": 30}, "wait"), DONE],
                [delegate("Wait a while"), ANSWERED])
    run_id = a.create(input="Wait, via B")["id"]
    b_is_waiting(b)
    b.kill()
    t0 = time.monotonic()
    done = a.wait(run_id, "completed", timeout=30)
    assert time.monotonic() - t0 < 25
    observation = done["steps"][0]["observation"]
    assert done["steps"][0]["error"] and b.url in observation["error"]
    assert "\n" not in observation["error"]


def test_cancelling_as_run_cancels_the_remote_task(pair):
    a, b = pair([step("wait", {"seconds": 30}, "wait"), DONE],
                [delegate("Wait a while"), ANSWERED])
    run_id = a.create(input="Wait, via B")["id"]
    b_is_waiting(b)
    with a.client as c:
        r = c.post(f"/v1/runs/{run_id}/cancel")
        assert r.status_code == 202, r.text
    a.wait(run_id, "cancelled", timeout=10)
    deadline = time.monotonic() + 10
    while runs_of(b)[0]["status"] != "cancelled" and time.monotonic() < deadline:
        time.sleep(0.1)
    assert runs_of(b)[0]["status"] == "cancelled"


def test_an_a2a_spec_handler_sends_its_auth_header_from_the_environment(pair, tmp_path,
                                                                          monkeypatch):
    monkeypatch.setenv("B_TOKEN", "secret-b")
    spec = tmp_path / "remote.json"

    def with_spec(b_url: str) -> tuple[str, ...]:
        spec.write_text(json.dumps([{
            "name": "helper", "description": "B, over A2A.",
            "handler": {"a2a": b_url, "headers": {"Authorization": "Bearer ${env:B_TOKEN}"}},
            "parameters": {"type": "object", "properties": {"task": {"type": "string"}},
                           "required": ["task"]}}]))
        return ("--tools", str(spec))

    a, b = pair([TIME, DONE], [step("helper", {"task": "time?"}), ANSWERED], with_spec,
                b_token="secret-b")
    run = a.wait(a.create(input="Ask B")["id"], "completed")
    assert run["steps"][0]["observation"] == 42


def test_a_killed_mid_call_and_restarted_re_attaches_to_bs_task_never_a_second_one(
        pair, tmp_path):
    """kill -9 of A while B works on A's call; A restarted takes its run over and does the
    step again with the same key: B's one task and run are followed on to their answer."""
    a, b = pair([step("wait", {"seconds": 6}, "wait"), DONE],
                [delegate("Wait a while"), ANSWERED])
    run_id = a.create(input="Wait, via B")["id"]
    b_is_waiting(b)
    a.kill()  # kill -9, mid-call
    assert runs_of(b)[0]["status"] == "in_progress"
    a.start()
    done = a.wait(run_id, "completed", timeout=40)
    assert done["steps"][0]["observation"] == 42  # B's answer
    [remote] = runs_of(b)  # never a second run
    assert remote["status"] == "completed"
    assert [s["tool"] for s in remote["steps"]] == ["wait", "TaskCompleteTool"]  # waited once
    tasks = open_store(tmp_path / "b" / "home" / "jsonagent.db").items("a2a_task")
    assert len(tasks) == 1 and json.loads(tasks[0])["status"]["state"] == "TASK_STATE_COMPLETED"
    recovered = [e for e in open_store(tmp_path / "a" / "home" / "jsonagent.db").events(
        run_id=run_id) if e["type"] == "call_recovered"]
    assert [(e["key"], e["action"]) for e in recovered] == [(call_key(run_id, 1), "ran_again")]
