"""`jsonagent serve`: a real uvicorn on a free 127.0.0.1 port, in a subprocess whose process
group every fixture kills. The model is `scripted:FILE`: every run starts at its first reply."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

httpx = pytest.importorskip("httpx")
pytest.importorskip("fastapi")
pytest.importorskip("sse_starlette")
pytest.importorskip("a2a")  # `jsonagent serve` needs the whole serve extra

from jsonagent import bundled  # noqa: E402
from jsonagent.testing import step  # noqa: E402

DONE = step("TaskCompleteTool", {"output": "42"}, "done")
ASK = step("AskHumanHelpTool", {"question": "Which city?"}, "need a city")
TIME = step("GetTimeTools", {"timezone": "UTC"}, "what time is it")
TOOLS = '''
import time

def delete(path):
    return f"deleted {path}"

def evil():
    return '<img src=x onerror="window.pwned=1"><script>window.pwned=2</script>'

def wait(seconds):
    end = time.monotonic() + seconds
    while time.monotonic() < end:  # short sleeps: a cancel lands between them
        time.sleep(0.02)
    return "waited" if seconds == int(seconds) else f"waited {seconds}"
'''


from ports import free_port  # noqa: E402,F401  one port block per xdist worker


class Server:
    """One `jsonagent serve` process; `start` again after `kill` to restart on the same store."""

    def __init__(self, tmp_path: Path, replies: list, *args: str, token: str | None = None):
        self.tmp = tmp_path
        script = tmp_path / "script.json"
        script.write_text(json.dumps(replies))
        (tmp_path / "srvtools.py").write_text(TOOLS)
        (tmp_path / "tools.json").write_text(json.dumps([
            {"name": "delete_file", "handler": "srvtools:delete", "confirm": True,
             "parameters": [{"name": "path", "type": "string"}]},
            {"name": "evil", "handler": "srvtools:evil", "parameters": []},
            {"name": "wait", "handler": "srvtools:wait",
             "parameters": [{"name": "seconds", "type": "float"}]}]))
        core = bundled.path("core_function.json")
        self.args = ["--model", f"scripted:{script}", "--tools", str(core),
                     "--tools", str(tmp_path / "tools.json"), *args]
        self.token = token
        self.proc: subprocess.Popen | None = None
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"

    def start(self) -> Server:
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(
            [str(self.tmp), *filter(None, [os.environ.get("PYTHONPATH")])]))
        if self.token:
            env["JSONAGENT_SERVER_TOKEN"] = self.token
        self.log = open(self.tmp / "server.log", "ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "jsonagent", "serve", "--port", str(self.port), *self.args],
            stdout=self.log, stderr=self.log, stdin=subprocess.DEVNULL, env=env,
            start_new_session=True)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"server exited {self.proc.returncode}: {self.output()}")
            try:
                if httpx.get(self.url + "/healthz", timeout=1).status_code == 200:
                    return self
            except httpx.HTTPError:
                time.sleep(0.1)
        raise AssertionError("server did not come up within 30 s: " + self.output())

    def output(self) -> str:
        return (self.tmp / "server.log").read_text(errors="replace")

    def kill(self, sig: int = signal.SIGKILL, wait_s: float = 15) -> int:
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else 0
        try:
            os.killpg(self.proc.pid, sig)
        except ProcessLookupError:
            pass
        try:
            return self.proc.wait(wait_s)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            return self.proc.wait(5)
        finally:
            self.log.close()

    @property
    def client(self) -> httpx.Client:
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=10)

    # -- helpers for the tests ----------------------------------------------------------------

    def create(self, **body) -> dict:
        with self.client as c:
            r = c.post("/v1/runs", json=body)
        assert r.status_code == 201, r.text
        return r.json()

    def get(self, run_id: str) -> dict:
        with self.client as c:
            return c.get(f"/v1/runs/{run_id}").json()

    def wait(self, run_id: str, *statuses: str, timeout: float = 20) -> dict:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            run = self.get(run_id)
            if run["status"] in statuses:
                return run
            time.sleep(0.05)
        raise AssertionError(f"run {run_id} is {run['status']}, not {statuses}; "
                             f"{json.dumps(run)[:500]}\n{self.output()[-2000:]}")


@pytest.fixture
def serve(tmp_path):
    servers: list[Server] = []

    def start(replies, *args, token=None) -> Server:
        server = Server(tmp_path, replies, *args, token=token)
        servers.append(server)
        return server.start()

    yield start
    for server in servers:
        server.kill()


def read_sse(response, until=lambda e: False, limit_s: float = 15) -> list[dict]:
    """Events from an open stream until it closes or `until(event)`."""
    events, current = [], {}
    deadline = time.monotonic() + limit_s
    if not hasattr(response, "lines"):  # one iterator, so a test can read on after a pause
        response.lines = response.iter_lines()
    for line in response.lines:
        if time.monotonic() > deadline:
            raise AssertionError(f"stream still open after {limit_s} s: {events}")
        if line.startswith("id:"):
            current["id"] = int(line[3:].strip())
        elif line.startswith("data:"):
            current["data"] = json.loads(line[5:].strip())
        elif line == "" and "data" in current:
            events.append(current)
            current = {}
            if until(events[-1]["data"]):
                break
    return events


# -- lifecycle ---------------------------------------------------------------------------------

def test_a_run_completes_with_its_steps_and_the_cli_sees_it(serve):
    server = serve([TIME, DONE])
    run = server.create(input="what time is it?", session="desk")
    assert run["status"] in ("queued", "in_progress") and run["session"] == "desk"
    done = server.wait(run["id"], "completed")
    assert done["answer"] == "42" and done["result_status"] == "completed"
    assert [s["tool"] for s in done["steps"]] == ["GetTimeTools", "TaskCompleteTool"]
    first = done["steps"][0]
    assert first["thought"] == "what time is it" and first["args"] == {"timezone": "UTC"}
    assert first["observation"]["timezone"] == "UTC" and first["seconds"] >= 0
    assert done["usage"]["prompt_tokens"] > 0 and done["required_action"] is None
    shown = subprocess.run([sys.executable, "-m", "jsonagent", "sessions", "show", "desk"],
                           capture_output=True, text=True, timeout=60)
    assert shown.returncode == 0 and "what time is it?" in shown.stdout, shown.stderr


def test_ask_then_answer_once(serve):
    server = serve([ASK, DONE])
    run = server.create(input="weather?")
    waiting = server.wait(run["id"], "requires_action")
    assert waiting["required_action"] == {"kind": "question", "question": "Which city?"}
    assert waiting["result_status"] == "needs_human"
    with server.client as c:
        wrong = c.post(f"/v1/runs/{run['id']}/respond", json={"approve": True})
        assert wrong.status_code == 422 and "waits for an answer" in wrong.json()["error"]
        assert c.post(f"/v1/runs/{run['id']}/respond", json={"answer": "Oslo"}).status_code == 202
        again = c.post(f"/v1/runs/{run['id']}/respond", json={"answer": "Bergen"})
        assert again.status_code == 409
    done = server.wait(run["id"], "completed")
    assert done["steps"][0]["observation"] == "Oslo" and done["answer"] == "42"


def test_approve_and_deny(serve):
    server = serve([step("delete_file", {"path": "a.txt"}, "clean up"), DONE])
    yes, no = server.create(input="clean"), server.create(input="clean too")
    for run in (yes, no):
        waiting = server.wait(run["id"], "requires_action")
        assert waiting["required_action"] == {"kind": "approval", "tool": "delete_file",
                                              "args": {"path": "a.txt"}}
    with server.client as c:
        assert c.post(f"/v1/runs/{yes['id']}/respond", json={"answer": "x"}).status_code == 422
        assert c.post(f"/v1/runs/{yes['id']}/respond", json={"approve": True}).status_code == 202
        assert c.post(f"/v1/runs/{no['id']}/respond",
                      json={"approve": False, "reason": "keep it"}).status_code == 202
    assert server.wait(yes["id"], "completed")["steps"][0]["observation"] == "deleted a.txt"
    denied = server.wait(no["id"], "completed")["steps"][0]
    assert denied["error"] and "keep it" in json.dumps(denied["observation"])


def test_cancel_interrupts_a_tool_in_flight_and_a_queued_run(serve):
    server = serve([step("wait", {"seconds": 30}, "wait a while"), DONE], "--workers", "1")
    run = server.create(input="wait")
    with server.client as c, c.stream("GET", f"/v1/runs/{run['id']}/events") as stream:
        read_sse(stream, until=lambda e: e["type"] == "step")
        queued = server.create(input="behind it")  # the one worker is busy
        assert c.post(f"/v1/runs/{queued['id']}/cancel").status_code == 202
        assert server.get(queued["id"])["status"] == "cancelled"
        t0 = time.monotonic()
        assert c.post(f"/v1/runs/{run['id']}/cancel").status_code == 202
        events = read_sse(stream)
    cancelled = server.wait(run["id"], "cancelled", timeout=10)
    assert time.monotonic() - t0 < 10  # not the 30 s the tool would take
    assert events[-1]["data"]["type"] == "run_end" and events[-1]["data"]["status"] == "interrupted"
    assert cancelled["steps"][0]["error"] and cancelled["result_status"] == "interrupted"
    with server.client as c:
        assert c.post(f"/v1/runs/{run['id']}/cancel").status_code == 409
    time.sleep(0.5)  # the worker is free again, and the cancelled run never starts
    assert server.get(queued["id"])["steps"] == []


def test_cancel_a_waiting_run_frees_its_session(serve):
    server = serve([ASK, DONE])
    run = server.create(input="weather?", session="s")
    server.wait(run["id"], "requires_action")
    with server.client as c:
        busy = c.post("/v1/runs", json={"input": "again", "session": "s"})
        assert busy.status_code == 409 and run["id"] in busy.json()["error"]
        assert c.post(f"/v1/runs/{run['id']}/cancel").status_code == 202
        assert c.get(f"/v1/runs/{run['id']}").json()["status"] == "cancelled"
        assert c.post(f"/v1/runs/{run['id']}/respond", json={"answer": "x"}).status_code == 409
    assert server.create(input="again", session="s")["status"] in ("queued", "in_progress")


def test_waiting_runs_hold_no_worker(serve):
    server = serve([ASK, DONE], "--workers", "1")
    runs = [server.create(input=f"q{n}") for n in range(3)]
    for run in runs:  # one worker, yet all three get to their question
        server.wait(run["id"], "requires_action")
    with server.client as c:
        answered = c.post(f"/v1/runs/{runs[1]['id']}/respond", json={"answer": "Oslo"})
        assert answered.status_code == 202
    assert server.wait(runs[1]["id"], "completed")["answer"] == "42"
    assert server.get(runs[0]["id"])["status"] == "requires_action"


def test_a_run_that_waits_too_long_expires(serve):
    server = serve([ASK, DONE], "--expire-after", "1")
    run = server.create(input="weather?")
    server.wait(run["id"], "requires_action")
    with server.client as c, c.stream("GET", f"/v1/runs/{run['id']}/events") as stream:
        events = read_sse(stream)
    assert events[-1]["data"]["status"] == "expired"
    expired = server.wait(run["id"], "expired")
    assert "no answer within 1 s" in expired["error"] and expired["required_action"] is None


def test_max_steps_from_the_body_makes_it_incomplete(serve):
    server = serve([TIME, TIME, TIME, DONE])
    run = server.create(input="loop", max_steps=2)
    done = server.wait(run["id"], "incomplete")
    assert done["result_status"] == "max_steps" and len(done["steps"]) == 2
    assert "stopped after 2 steps" in done["error"]


# -- events ------------------------------------------------------------------------------------

def test_sse_stays_open_through_a_pause_and_resumes_from_last_event_id(serve):
    server = serve([TIME, ASK, DONE])
    run = server.create(input="weather?")
    with server.client as c, c.stream("GET", f"/v1/runs/{run['id']}/events") as stream:
        assert stream.headers["content-type"].startswith("text/event-stream")
        first = read_sse(stream, until=lambda e: e["type"] == "run_end")
        assert first[-1]["data"]["status"] == "needs_human"
        assert [e["id"] for e in first] == list(range(1, len(first) + 1))
        assert c.post(f"/v1/runs/{run['id']}/respond", json={"answer": "Oslo"}).status_code == 202
        rest = read_sse(stream)  # the same stream goes on, then closes after the end
    assert rest[0]["data"]["type"] == "run_resumed" and rest[0]["data"]["answer"] == "Oslo"
    assert rest[-1]["data"]["status"] == "completed"
    everything = first + rest
    with server.client as c, c.stream("GET", f"/v1/runs/{run['id']}/events",
                                      headers={"Last-Event-ID": "4"}) as again:
        tail = read_sse(again)
    assert [e["id"] for e in tail] == [e["id"] for e in everything if e["id"] > 4]
    assert tail == [e for e in everything if e["id"] > 4]


# -- durability --------------------------------------------------------------------------------

def test_restart_after_kill_9_loses_nothing(serve):
    server = serve([step("wait", {"seconds": 2}, "slow"), ASK, DONE], "--workers", "1")
    other = server.create(input="slow first", session="a")
    with server.client as c, c.stream("GET", f"/v1/runs/{other['id']}/events") as stream:
        read_sse(stream, until=lambda e: e["type"] == "step")
    queued = server.create(input="queued behind it", session="b")
    assert server.get(queued["id"])["status"] == "queued"  # one worker, and it is busy
    server.kill(signal.SIGKILL)
    server.start()
    # the run that was in its tool resumes that step; the queued run starts
    waiting = server.wait(other["id"], "requires_action")
    assert waiting["steps"][0]["observation"] == "waited"
    assert server.wait(queued["id"], "requires_action")["required_action"]["kind"] == "question"
    server.kill(signal.SIGKILL)  # while both wait for a person
    server.start()
    assert server.get(other["id"])["status"] == "requires_action"
    with server.client as c:
        assert c.post(f"/v1/runs/{other['id']}/respond", json={"answer": "Oslo"}).status_code == 202
    done = server.wait(other["id"], "completed")
    assert done["steps"][1]["observation"] == "Oslo" and done["answer"] == "42"


def test_sigterm_exits_0_and_leaves_queued_runs_for_the_next_start(serve):
    # 3 s: long enough to be seen in flight on a loaded machine (1 s was not, in CI)
    server = serve([step("wait", {"seconds": 3}, "slow"), DONE], "--workers", "1")
    runs = [server.create(input=f"run {n}") for n in range(3)]
    server.wait(runs[0]["id"], "in_progress")
    assert server.kill(signal.SIGTERM) == 0
    from jsonagent.store import open_store  # the server is down: read its store

    store = open_store(Path(os.environ["JSONAGENT_HOME"]) / "jsonagent.db")
    assert {store.load_run(r["id"]).status for r in runs[1:]} <= {"queued", "completed"}
    store.close()
    server.start()
    for run in runs:
        assert server.wait(run["id"], "completed")["answer"] == "42"


# -- the API's edges ---------------------------------------------------------------------------

def test_bad_bodies_unknown_ids_and_lists(serve):
    server = serve([DONE])
    with server.client as c:
        for body in ({}, {"input": 3}, {"input": "x", "max_steps": 0}, {"input": "x", "nope": 1}):
            r = c.post("/v1/runs", json=body)
            assert r.status_code == 422 and r.json()["error"], body
        bad = c.post("/v1/runs", content=b"{not json", headers={"content-type": "application/json"})
        assert bad.status_code == 422 and "not valid JSON" in bad.json()["error"]
        huge = c.post("/v1/runs", content=b'{"input": "' + b"x" * (2 << 20) + b'"}',
                      headers={"content-type": "application/json"})
        assert huge.status_code == 413
        chunked = c.post("/v1/runs", content=iter([b'{"input": "', b"x" * (2 << 20), b'"}']),
                         headers={"content-type": "application/json"})
        assert chunked.status_code == 413  # no Content-Length: counted as it arrives
        not_utf8 = c.post("/v1/runs", content=b'\xff\xfe{"input": "x"}',
                          headers={"content-type": "application/json"})
        assert not_utf8.status_code == 422 and not_utf8.json()["error"]
        assert c.post("/v1/runs", json=[]).status_code == 422
        assert c.get("/v1/nothing").json() == {"error": "no such route"}
        assert c.get("/v1/runs/run_nope").status_code == 404
        assert c.get("/v1/runs/run_nope/events").status_code == 404
        assert c.post("/v1/runs/run_nope/cancel").status_code == 404
        assert c.post("/v1/runs/run_nope/respond", json={"answer": "x"}).status_code == 404
        assert c.get("/v1/sessions/nope").status_code == 404
        assert c.get("/v1/sessions/a%2Fb").status_code == 404  # a name with a slash is a name
        assert c.get("/v1/runs", params={"status": "bogus"}).status_code == 422
        assert c.get("/v1/runs", params={"limit": 0}).status_code == 422
        ids = []
        for n in range(3):  # one session runs one run at a time: each waits for the last
            created = c.post("/v1/runs", json={"input": f"q{n}", "session": "list"})
            assert created.status_code == 201, created.text
            ids.insert(0, created.json()["id"])
            server.wait(ids[0], "completed")
    with server.client as c:
        page = c.get("/v1/runs", params={"limit": 2}).json()
        assert [r["id"] for r in page["data"]] == ids[:2] and page["has_more"]
        rest = c.get("/v1/runs", params={"limit": 2, "offset": 2}).json()
        assert [r["id"] for r in rest["data"]] == ids[2:] and not rest["has_more"]
        assert c.get("/v1/runs", params={"status": "failed"}).json()["data"] == []
        by_session = c.get("/v1/runs", params={"session": "list", "status": "completed"}).json()
        assert [r["id"] for r in by_session["data"]] == ids
        sessions = c.get("/v1/sessions").json()["data"]
        assert [s["name"] for s in sessions] == ["list"] and sessions[0]["runs"] == 3
        assert [r["id"] for r in c.get("/v1/sessions/list").json()["data"]] == ids
        spec = c.get("/openapi.json").json()
        assert "/v1/runs/{run_id}/respond" in spec["paths"]


def test_token_guards_every_api_route(serve):
    server = serve([DONE], token="s3cret")
    anon = httpx.Client(base_url=server.url, timeout=10)
    wrong = httpx.Client(base_url=server.url, timeout=10,
                         headers={"Authorization": "Bearer nope"})
    with anon, wrong:
        for client in (anon, wrong):
            assert client.post("/v1/runs", json={"input": "x"}).status_code == 401
            assert client.get("/v1/runs").status_code == 401
            assert client.get("/v1/sessions").status_code == 401
            assert client.get("/openapi.json").status_code == 401
            assert client.post("/a2a", json={}).status_code == 401
        assert anon.get("/healthz").status_code == 200
        assert anon.get("/").status_code == 200  # the page asks for the token itself
        assert "access-control-allow-origin" not in anon.options(
            "/v1/runs", headers={"Origin": "http://evil.example",
                                 "Access-Control-Request-Method": "POST"}).headers
    run = server.create(input="x")
    assert server.wait(run["id"], "completed")["answer"] == "42"


def test_bad_options_exit_2_in_one_line(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        script = tmp_path / "s.json"
        script.write_text("[]")
        for args, message in ((["--model", f"scripted:{tmp_path / 'none.json'}"], "none.json"),
                              (["--model", f"scripted:{script}", "--port", str(port)],
                               "cannot listen"),
                              (["--model", f"scripted:{script}", "--workers", "0"], "--workers")):
            out = subprocess.run([sys.executable, "-m", "jsonagent", "serve", *args],
                                 capture_output=True, text=True, timeout=60)
            assert out.returncode == 2 and message in out.stderr, out.stderr
            assert "Traceback" not in out.stderr


def test_refuses_a_public_host_without_a_token(tmp_path):
    out = subprocess.run([sys.executable, "-m", "jsonagent", "serve", "--host", "0.0.0.0",
                          "--model", "scripted:x.json"], capture_output=True, text=True,
                         timeout=60, env={k: v for k, v in os.environ.items()
                                          if k != "JSONAGENT_SERVER_TOKEN"})
    assert out.returncode == 2 and "--token" in out.stderr and "Traceback" not in out.stderr


def test_a_tokenless_server_serves_only_loopback_hosts_and_its_own_page(serve):
    """DNS rebinding: a page on evil.example resolves its name to 127.0.0.1 and calls the
    server with `Host: evil.example:PORT`; without a token, that must not drive it."""
    server = serve([DONE], "--allowed-host", "agent.internal")
    port = server.port
    with httpx.Client(base_url=server.url, timeout=10) as c:
        for host in (f"evil.example:{port}", "evil.example", f"127.0.0.1.evil.example:{port}"):
            r = c.post("/v1/runs", json={"input": "x"},
                       headers={"Host": host, "Origin": "http://evil.example"})
            assert r.status_code == 403 and "not this server's" in r.json()["error"], r.text
            assert c.get("/v1/runs", headers={"Host": host}).status_code == 403
            assert c.get("/", headers={"Host": host}).status_code == 403
        # a loopback Host with a foreign page as its Origin changes nothing
        for origin in ("http://evil.example", f"http://localhost:{port + 1}", "null"):
            r = c.post("/v1/runs", json={"input": "x"}, headers={"Origin": origin})
            assert r.status_code == 403 and "refused" in r.json()["error"], r.text
        assert c.get("/v1/runs", headers={"Origin": "http://evil.example"}).status_code == 200
        # what is allowed: every loopback name, the server's own page, and --allowed-host
        for host in (f"127.0.0.1:{port}", f"localhost:{port}", "localhost", f"[::1]:{port}",
                     f"agent.internal:{port}"):
            assert c.get("/v1/runs", headers={"Host": host}).status_code == 200, host
        r = c.post("/v1/runs", json={"input": "x"},
                   headers={"Host": f"localhost:{port}", "Origin": f"http://localhost:{port}"})
        assert r.status_code == 201, r.text
        r = c.post("/v1/runs", json={"input": "x"},
                   headers={"Host": f"agent.internal:{port}",
                            "Origin": "https://agent.internal"})
        assert r.status_code == 201, r.text


def test_with_a_token_any_host_is_served(serve):
    server = serve([DONE], token="s3cret")
    with server.client as c:
        r = c.post("/v1/runs", json={"input": "x"},
                   headers={"Host": "agent.example.com", "Origin": "https://agent.example.com"})
        assert r.status_code == 201, r.text
