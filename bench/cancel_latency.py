"""Seconds from a cancel request to `cancelled`, for each tool kind, through a real server.

    python bench/cancel_latency.py [--repeat 5]

For each kind (a command with a grandchild, a Python tool that ignores the token, an HTTP
request to a slow local server, the sandboxed code interpreter, an MCP tool over stdio), a
real `jsonagent serve` runs a scripted call to a tool that would take ten minutes; once the
tool is running, `POST /v1/runs/{id}/cancel`, then poll `GET /v1/runs/{id}` every 10 ms until
it says `cancelled`. The tools are the tests' own (tests/slow_tools.py).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
import slow_tools  # noqa: E402

KINDS = ("command", "python", "http", "code", "mcp")


def call(kind: str) -> dict:
    if kind == "code":
        args, tool = {"code": "import time\ntime.sleep(600)"}, "CodeInterpreterTool"
    elif kind == "mcp":
        args, tool = {"seconds": 600}, "sleep"
    else:
        args, tool = {"until": time.time() + 600}, f"slow_{kind}"
    return {"thought": "slow", "tool_name": tool, "args_list": args}


def measure(kind: str, repeat: int) -> list[float]:
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        http = slow_tools.SlowHttp()
        specs = slow_tools.write(tmp, http.port)
        script = tmp / "script.json"
        script.write_text(json.dumps([call(kind)]))
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        core = ROOT / "core_function.json"
        proc = subprocess.Popen(
            [sys.executable, "-m", "jsonagent", "serve", "--port", str(port), "--model",
             f"scripted:{script}", "--tools", str(core), "--tools", str(specs),
             "--mcp", shlex.join(slow_tools.mcp_command(tmp))],
            env=dict(os.environ, JSONAGENT_HOME=str(tmp / "home"),
                     PYTHONPATH=os.pathsep.join([str(tmp), os.environ.get("PYTHONPATH", "")])),
            start_new_session=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL)
        url = f"http://127.0.0.1:{port}"
        try:
            assert slow_tools.wait_for(lambda: _up(url), 60), "the server did not come up"
            seconds = []
            with httpx.Client(base_url=url, timeout=10) as c:
                for _ in range(repeat):
                    for name in ("command.pids", "python.started", "mcp.pid.sleeping"):
                        (tmp / name).unlink(missing_ok=True)
                    http.requests = 0
                    run = c.post("/v1/runs", json={"input": "go"}).json()["id"]
                    assert slow_tools.wait_for(
                        lambda: slow_tools.started(kind, tmp, http, proc.pid), 60)
                    time.sleep(0.3)
                    t0 = time.perf_counter()
                    c.post(f"/v1/runs/{run}/cancel")
                    while c.get(f"/v1/runs/{run}").json()["status"] != "cancelled":
                        time.sleep(0.01)
                    seconds.append(time.perf_counter() - t0)
            return seconds
        finally:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            http.close()


def _up(url: str) -> bool:
    try:
        return httpx.get(url + "/healthz", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    opts = parser.parse_args()
    print(f"{'tool kind':<10} {'median':>8} {'max':>8}   (seconds from POST cancel to "
          f"'cancelled', n={opts.repeat})")
    for kind in KINDS:
        seconds = measure(kind, opts.repeat)
        print(f"{kind:<10} {statistics.median(seconds):8.3f} {max(seconds):8.3f}", flush=True)


if __name__ == "__main__":
    main()
