"""Bad input at every edge of a real `jsonagent serve`: every answer is a 4xx JSON error that
says what is allowed, and the server's log holds no traceback."""

from __future__ import annotations

import json

import httpx

from test_server import ASK, DONE, serve  # noqa: F401  (the fixture)

HUGE = 9223372036854775808  # one past SQLite's integers
DEEP = "[" * 100_000 + "]" * 100_000


def routes(run_id: str) -> list[tuple[str, str]]:
    return [("POST", "/v1/runs"), ("GET", "/v1/runs"), ("GET", f"/v1/runs/{run_id}"),
            ("POST", f"/v1/runs/{run_id}/respond"), ("GET", f"/v1/runs/{run_id}/events"),
            ("GET", "/v1/sessions"), ("GET", "/v1/sessions/desk"), ("POST", "/a2a"),
            ("POST", f"/v1/runs/{run_id}/cancel")]


def raw(server, method: str, path: str, header: str) -> tuple[int, str]:
    """One request as bytes on a socket: a client library will not send a lying header."""
    import socket

    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\n"
                     f"Authorization: Bearer {server.token}\r\n{header}\r\n"
                     "Connection: close\r\n\r\n".encode())
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), body.decode()


def assert_refused(response: httpx.Response, *words: str) -> dict:
    """A 4xx JSON error; or, from /a2a, a JSON-RPC error object (a2a-sdk answers those
    with HTTP 200, as JSON-RPC over HTTP does)."""
    body = response.json()
    rpc = response.request.url.path == "/a2a" and "code" in body.get("error", {})
    assert rpc or 400 <= response.status_code < 500, (response.status_code, response.text[:300])
    text = json.dumps(body)
    assert all(w in text for w in words), text
    return body


def test_bad_input_at_every_edge_is_a_4xx_json_error_without_a_traceback(serve):
    server = serve([ASK, DONE], token="t")
    run = server.create(input="x", session="desk")
    server.wait(run["id"], "requires_action")
    with server.client as c:
        for method, path in routes(run["id"]):
            bodies = [DEEP, json.dumps({"input": "x" * (2 << 20)}), "[1, 2]", "\"text\"",
                      json.dumps({"input": 5, "answer": 5, "approve": "yes", "max_steps": "5",
                                  "session": 7, "jsonrpc": 2, "id": [], "method": 3})]
            if path.endswith("/cancel"):  # takes no body: only one nobody can read is refused
                bodies = [DEEP]
            for body in bodies if method == "POST" else []:
                r = c.request(method, path, content=body,
                              headers={"Content-Type": "application/json"})
                assert_refused(r)
            for param in ("limit", "offset", "status", "session") if "events" not in path else ():
                for value in (HUGE, -HUGE, "nope", 10 ** 30, "x" * 5000):
                    r = c.request(method, path, params={param: value})
                    assert r.status_code < 500, (method, path, r.text[:200])
                    json.loads(r.text) if r.status_code != 200 or "events" not in path else None
                    if method == "GET" and path in ("/v1/runs", "/v1/sessions") and \
                            param in ("limit", "offset") and value != "x" * 5000:
                        assert_refused(r, param)
            for value in (str(HUGE), "99999999999999999999999999", "-1", "x"):
                r = c.get(f"/v1/runs/{run['id']}/events", headers={"Last-Event-ID": value})
                assert_refused(r, "Last-Event-ID")
            status, reply = raw(server, method, path, f"Content-Length: {HUGE}")
            assert 400 <= status < 500 and "error" in json.loads(reply), (status, reply)
    log = server.output()
    assert "Traceback" not in log and "OverflowError" not in log, log[-3000:]


def test_integers_out_of_range_say_what_is_allowed(serve):
    server = serve([DONE])
    with server.client as c:
        body = assert_refused(c.get("/v1/runs", params={"offset": HUGE}), "offset")
        assert "less than or equal to 1000000000" in body["error"]
        run = server.create(input="x")
        body = assert_refused(c.get(f"/v1/runs/{run['id']}/events",
                                    headers={"Last-Event-ID": "99999999999999999999999999"}))
        assert body["error"] == "Last-Event-ID: an event number from 0 to 9007199254740991"
    assert "Traceback" not in server.output()


def test_a_deeply_nested_body_is_refused_in_words_that_fit(serve):
    server = serve([DONE])
    with server.client as c:
        body = assert_refused(c.post("/v1/runs", content=DEEP,
                                     headers={"Content-Type": "application/json"}))
        assert "nested too deeply" in body["error"] and "UTF-8" not in body["error"]
        rpc = assert_refused(c.post("/a2a", content=DEEP,
                                    headers={"Content-Type": "application/json"}))
        assert rpc["jsonrpc"] == "2.0" and rpc["error"]["code"] == -32700
        assert "nested too deeply" in rpc["error"]["message"]
        assert "recursion" not in rpc["error"]["message"]
    assert "Traceback" not in server.output()


def test_a_body_of_another_content_type_is_told_to_send_json(serve):
    server = serve([DONE])
    with server.client as c:
        r = c.post("/v1/runs", content="input=hello",
                   headers={"Content-Type": "application/x-www-form-urlencoded"})
        assert r.status_code == 415
        assert "Content-Type: application/json" in r.json()["error"]


def test_request_bodies_are_strict(serve):
    server = serve([step_delete(), DONE])
    with server.client as c:
        assert_refused(c.post("/v1/runs", json={"input": "x", "max_steps": "5"}), "max_steps")
        run = server.create(input="clean up")
        server.wait(run["id"], "requires_action")
        r = c.post(f"/v1/runs/{run['id']}/respond", json={"approve": "yes"})
        assert_refused(r, "approve")
        assert server.get(run["id"])["status"] == "requires_action"  # nothing was approved


def step_delete():
    from jsonagent.testing import step

    return step("delete_file", {"path": "a.txt"}, "clean")


def test_the_agent_card_is_open_declares_the_bearer_and_names_no_tool(serve):
    server = serve([DONE], token="s3cret")
    card = httpx.get(server.url + "/.well-known/agent-card.json", timeout=10)
    assert card.status_code == 200
    data = card.json()
    assert "bearer" in json.dumps(data["securitySchemes"]).lower()
    assert "GetTimeTools" not in card.text and "delete_file" not in card.text
    assert httpx.post(server.url + "/a2a", json={}, timeout=10).status_code == 401


def test_the_bearer_scheme_is_case_insensitive(serve):
    server = serve([DONE], token="s3cret")
    for scheme in ("bearer", "BEARER", "Bearer"):
        r = httpx.get(server.url + "/v1/runs", headers={"Authorization": f"{scheme} s3cret"},
                      timeout=10)
        assert r.status_code == 200, scheme
    assert httpx.get(server.url + "/v1/runs", headers={"Authorization": "Basic s3cret"},
                     timeout=10).status_code == 401


def test_a_busy_session_names_the_http_route_to_answer(serve):
    server = serve([ASK, DONE])
    run = server.create(input="x", session="desk")
    server.wait(run["id"], "requires_action")
    with server.client as c:
        r = c.post("/v1/runs", json={"input": "again", "session": "desk"})
    assert r.status_code == 409
    message = r.json()["error"]
    assert f"POST /v1/runs/{run['id']}/respond" in message and "jsonagent resume" not in message



def test_a_session_another_process_runs_is_a_409_without_its_pid_or_host(serve):
    """The store knows which process holds the run (its pid and host): the server's log
    says so, its client is only told the session is busy."""
    import os
    import socket
    import threading

    from jsonagent import Agent, tool
    from jsonagent.store import default_store
    from jsonagent.testing import ScriptedModel, step

    server = serve([DONE])
    release, started = threading.Event(), threading.Event()

    @tool
    def hold() -> str:
        """Holds the run."""
        started.set()
        release.wait(30)
        return "held"

    agent = Agent(model=ScriptedModel([step("hold", {}, "hold"), DONE]), tools=[hold],
                  store=default_store())
    held = threading.Thread(target=agent.run, args=("hold it",), kwargs={"session": "desk"})
    held.start()
    try:
        assert started.wait(20)
        with server.client as c:
            r = c.post("/v1/runs", json={"input": "again", "session": "desk"})
    finally:
        release.set()
        held.join(30)
    assert r.status_code == 409 and "session busy" in r.json()["error"], r.text
    for secret in (f"pid {os.getpid()}", socket.gethostname()):
        assert secret not in r.text and secret in server.output()


def test_sigterm_after_a2a_use_and_with_a_stream_open_ends_cleanly_and_soon(serve):
    import asyncio
    import signal
    import threading
    import time

    from test_server_a2a import client_for, send

    server = serve([ASK, DONE], token="t")

    async def ask():
        client, http = await client_for(server, streaming=True)
        try:
            await send(client, "weather?")
        finally:
            await http.aclose()

    asyncio.run(asyncio.wait_for(ask(), 60))
    run = server.create(input="x")
    server.wait(run["id"], "requires_action")
    opened = threading.Event()

    def listen():
        try:
            with httpx.stream("GET", f"{server.url}/v1/runs/{run['id']}/events",
                              headers={"Authorization": "Bearer t"}, timeout=30) as r:
                opened.set()
                for _ in r.iter_lines():
                    pass
        except httpx.HTTPError:
            pass

    threading.Thread(target=listen, daemon=True).start()
    assert opened.wait(10)
    t0 = time.monotonic()
    code = server.kill(signal.SIGTERM, wait_s=15)
    assert code == 0 and time.monotonic() - t0 < 3, (code, time.monotonic() - t0)
    log = server.output()
    assert "Traceback" not in log and "Task was destroyed" not in log, log[-2000:]
