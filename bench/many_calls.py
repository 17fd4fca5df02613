"""Many calls in one step through `jsonagent serve` (issue 58, finding 21): a scripted step of N
calls of a tool that returns at once, then the final answer. A round's figure was 77 s for
2,000 calls, and more than 6 minutes for 5,000: a cost that grows with N squared.

    python bench/many_calls.py [--calls 500 1000 2000] [--workers 4]

Each size runs on a fresh `jsonagent serve` (SQLite store, --parallel-calls N): once over the
REST API (POST /v1/runs, then polling until it completes) and once over AG-UI, whose stream
follows the run and translates every event. Printed: seconds per run, and microseconds per
call, which stays flat when the cost is linear.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).parent))
from server_load import came_up, stop  # noqa: E402

TOOL = "def echo(n):\n    return n\n"


def script(n: int) -> list[dict]:
    calls = [{"tool_name": "echo", "args_list": {"n": i}} for i in range(n)]
    return [{"thought": f"{n} at once", "calls": calls},
            {"thought": "done", "tool_name": "TaskCompleteTool", "args_list": {"output": "42"}}]


def serve(home: Path, n: int, workers: int) -> tuple[subprocess.Popen, str]:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    (home / "script.json").write_text(json.dumps(script(n)))
    (home / "benchtools.py").write_text(TOOL)
    (home / "tools.json").write_text(json.dumps([
        {"name": "echo", "handler": "benchtools:echo",
         "parameters": [{"name": "n", "type": "integer"}]}]))
    proc = subprocess.Popen(
        [sys.executable, "-m", "jsonagent", "serve", "--port", str(port), "--workers",
         str(workers), "--model", f"scripted:{home / 'script.json'}", "--tools",
         str(home / "tools.json"), "--parallel-calls", str(n), "--max-steps", "5"],
        env=dict(os.environ, JSONAGENT_HOME=str(home),
                 PYTHONPATH=os.pathsep.join(filter(None, [str(home),
                                                           os.environ.get("PYTHONPATH")]))),
        start_new_session=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
        stderr=open(home / "server.log", "wb"))
    url = f"http://127.0.0.1:{port}"
    if not came_up(url, 60):
        stop(proc, 10)
        raise SystemExit(f"the server did not come up: {(home / 'server.log').read_text()}")
    return proc, url


def over_rest(url: str, limit_s: float) -> float:
    t0 = time.perf_counter()
    with httpx.Client(base_url=url, timeout=30) as c:
        run = c.post("/v1/runs", json={"input": "go"}).json()["id"]
        while time.perf_counter() - t0 < limit_s:
            status = c.get(f"/v1/runs/{run}").json()["status"]
            if status == "completed":
                return time.perf_counter() - t0
            if status not in ("queued", "in_progress"):
                raise SystemExit(f"run {run} ended {status}")
            time.sleep(0.05)
    raise SystemExit(f"run {run} still going after {limit_s} s")


def over_agui(url: str, limit_s: float) -> float:
    body = {"threadId": f"t{time.time_ns()}", "runId": "r", "messages": [
        {"id": "m1", "role": "user", "content": "go"}]}
    t0 = time.perf_counter()
    last = None
    with httpx.Client(base_url=url, timeout=limit_s) as c, \
            c.stream("POST", "/ag-ui", json=body) as r:
        for line in r.iter_lines():
            if line.startswith("data:"):
                last = json.loads(line[5:])
    if not last or last["type"] != "RUN_FINISHED":
        raise SystemExit(f"the AG-UI run ended with {last}")
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, nargs="+", default=[500, 1000, 2000])
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--limit", type=float, default=600.0, help="seconds a run may take")
    args = ap.parse_args()
    print(f"{'calls':>6} {'REST s':>8} {'µs/call':>8} {'AG-UI s':>8} {'µs/call':>8}")
    for n in args.calls:
        row = []
        for how in (over_rest, over_agui):
            with tempfile.TemporaryDirectory() as tmp:
                proc, url = serve(Path(tmp), n, args.workers)
                try:
                    row.append(how(url, args.limit))
                finally:
                    stop(proc, 20)
        rest, agui = row
        print(f"{n:>6} {rest:>8.2f} {rest / n * 1e6:>8.0f} {agui:>8.2f} {agui / n * 1e6:>8.0f}",
              flush=True)


if __name__ == "__main__":
    main()
