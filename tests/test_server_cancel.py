"""A cancel through the server stops the tool in flight, for every tool kind, through REST and
through A2A: a real `jsonagent serve`, real processes, a real slow HTTP server and a real MCP
server over stdio. After both cancels, the same server completes a next run."""

from __future__ import annotations

import asyncio
import shlex
import time

import pytest

import slow_tools
from test_server import DONE, serve  # noqa: F401  (the fixture)
from jsonagent.testing import step

pytest.importorskip("a2a")
from a2a.client import ClientConfig, create_client  # noqa: E402
from a2a.helpers import new_text_message  # noqa: E402
from a2a.types import CancelTaskRequest, Role, SendMessageRequest, TaskState  # noqa: E402
import httpx  # noqa: E402


def sandboxes(server) -> list[int]:
    return slow_tools.sandboxes(server.proc.pid)


def stopped(kind: str, tmp, http, server, pids) -> bool:
    """What the cancelled tool left running is gone (or, for MCP, told to stop)."""
    if kind == "command":
        return slow_tools.gone(slow_tools.command_pids(tmp))
    if kind == "http":
        return http.hung_up.wait(3)
    if kind == "mcp":
        return slow_tools.wait_for(lambda: (tmp / "mcp.pid.cancelled").exists(), 3) \
            and slow_tools.alive(int((tmp / "mcp.pid").read_text()))
    if kind == "code":
        return slow_tools.gone(pids)
    return True  # a Python tool that ignores the token finishes in the background


def reset(kind: str, tmp, http) -> None:
    for name in ("command.pids", "python.started", "mcp.pid.sleeping", "mcp.pid.cancelled"):
        (tmp / name).unlink(missing_ok=True)
    http.requests = 0
    http.hung_up.clear()


KINDS = ["command", "python", "http", "code", "mcp"]
CODE_SLEEP_S = 20


def slow_step(kind: str, until: float) -> dict:
    if kind == "code":
        # the code interpreter sees no release file, and each of the test's runs makes this
        # call: an absolute deadline could pass before a later run's cancel on a loaded machine
        code = f"import time\ntime.sleep({CODE_SLEEP_S})\nprint('slept')"
        return step("CodeInterpreterTool", {"code": code})
    if kind == "mcp":
        return step("sleep", {"seconds": 600})
    return step(f"slow_{kind}", {"until": until})


@pytest.mark.parametrize("kind", KINDS)
def test_a_cancel_stops_the_tool_through_rest_and_a2a(serve, tmp_path, kind):
    http = slow_tools.SlowHttp()
    try:
        specs = slow_tools.write(tmp_path, http.port)
        until = time.time() + 600  # room for a loaded machine
        mcp = shlex.join(slow_tools.mcp_command(tmp_path))
        server = serve([slow_step(kind, until), DONE], "--tools", str(specs), "--mcp", mcp,
                       token="t")

        def in_flight() -> list[int]:
            assert slow_tools.wait_for(
                lambda: slow_tools.started(kind, tmp_path, http, server.proc.pid), 30), \
                server.output()[-2000:]
            time.sleep(0.3)  # well inside the call
            return sandboxes(server)

        # through REST
        run = server.create(input="go")
        pids = in_flight()
        t0 = time.monotonic()
        with server.client as c:
            assert c.post(f"/v1/runs/{run['id']}/cancel").status_code == 202
        done = server.wait(run["id"], "cancelled", timeout=10)
        assert time.monotonic() - t0 < 3, time.monotonic() - t0
        assert done["steps"][-1]["observation"] == {
            "error": "the run was cancelled before the tool finished"}
        assert stopped(kind, tmp_path, http, server, pids)
        reset(kind, tmp_path, http)

        # through A2A
        seconds, run_id, pids = asyncio.run(asyncio.wait_for(a2a_cancel(server, in_flight), 60))
        assert server.get(run_id)["status"] == "cancelled"
        assert seconds < 3, seconds
        assert stopped(kind, tmp_path, http, server, pids)
        reset(kind, tmp_path, http)

        # and the server completes a next run
        (tmp_path / "release").touch()
        (tmp_path / "mcp.pid.release").touch()
        http.release.set()
        run = server.create(input="again")
        done = server.wait(run["id"], "completed", timeout=40 + CODE_SLEEP_S)
        assert done["steps"][0]["error"] is False, done["steps"][0]
    finally:
        http.close()


async def a2a_cancel(server, wait_in_flight) -> tuple[float, str, list[int]]:
    """Start a task over A2A, cancel it once its tool runs; the seconds from the cancel
    request to the run's `cancelled`, the run's id, and what `wait_in_flight` returned."""
    http = httpx.AsyncClient(timeout=20, headers={"Authorization": f"Bearer {server.token}"})
    client = await create_client(server.url, ClientConfig(streaming=True, httpx_client=http),
                                 resolver_http_kwargs={"headers": http.headers})
    try:
        stream = client.send_message(SendMessageRequest(
            message=new_text_message("go", role=Role.ROLE_USER)))
        task_id = None
        async for response in stream:
            task_id = response.task.id if response.HasField("task") \
                else response.status_update.task_id
            break
        await stream.aclose()
        pids = await asyncio.to_thread(wait_in_flight)
        with server.client as c:
            run_id = c.get("/v1/runs", params={"limit": 1}).json()["data"][0]["id"]
        t0 = time.monotonic()
        task = await client.cancel_task(CancelTaskRequest(id=task_id))
        assert task.status.state == TaskState.TASK_STATE_CANCELED
        await asyncio.to_thread(server.wait, run_id, "cancelled", timeout=10)
        return time.monotonic() - t0, run_id, pids
    finally:
        await http.aclose()
