"""Load on `jsonagent serve`: 200 runs of 5 scripted steps against one server with 4 workers,
then the same with 50 runs waiting for a person in the store.

    python bench/server_load.py [--runs 200] [--workers 4] [--waiting 50] [--clients 8]

Each server is a real `jsonagent serve` subprocess on 127.0.0.1 with a scripted model (four
GetTimeTools steps, then TaskCompleteTool). Latency is the server's own: from the run's
creation (queued) to its end. Runs/s counts from the first POST to the last run's end.
The waiting runs are made by a first server whose script asks a question, so they are real
paused runs that the load server inherits from the store.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

# a different zone each step: the same call again would be a stall (the run ends incomplete)
STEPS = [{"thought": f"step {n}", "tool_name": "GetTimeTools", "args_list": {"timezone": zone}}
         for n, zone in enumerate(("UTC", "Europe/Paris", "Asia/Tokyo", "America/Lima"))] + [{"thought": "done", "tool_name": "TaskCompleteTool",
                                "args_list": {"output": "42"}}]
ASK = [{"thought": "ask", "tool_name": "AskHumanHelpTool",
        "args_list": {"question": "Which city?"}}]


class Server:
    def __init__(self, home: Path, script: list, workers: int):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        path = home / f"script-{self.port}.json"
        path.write_text(json.dumps(script))
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "jsonagent", "serve", "--port", str(self.port),
             "--workers", str(workers), "--model", f"scripted:{path}", "--max-steps", "10"],
            env=dict(os.environ, JSONAGENT_HOME=str(home)), start_new_session=True,
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        if not came_up(self.url, 30):
            self.stop()
            raise SystemExit("the server did not come up")

    def stop(self) -> None:
        stop(self.proc, 20)


def came_up(url: str, seconds: float) -> bool:
    """Whether a server at `url` answers /healthz within `seconds`."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            if httpx.get(url + "/healthz", timeout=1).status_code == 200:
                return True
        except httpx.HTTPError:
            time.sleep(0.1)
    return False


def stop(proc: subprocess.Popen, grace: float) -> None:
    """SIGTERM to the server's process group, SIGKILL after `grace` seconds."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def submit(url: str, n: int, clients: int) -> list[str]:
    with httpx.Client(base_url=url, timeout=30) as c, ThreadPoolExecutor(clients) as pool:
        def one(i: int) -> str:
            r = c.post("/v1/runs", json={"input": f"task {i}"})
            r.raise_for_status()
            return r.json()["id"]
        return list(pool.map(one, range(n)))


def wait_all(url: str, ids: list[str], status: str, timeout: float = 600) -> list[dict]:
    wanted, done = set(ids), {}
    deadline = time.monotonic() + timeout
    with httpx.Client(base_url=url, timeout=30) as c:
        while wanted - done.keys():
            if time.monotonic() > deadline:
                raise SystemExit(f"only {len(done)} of {len(ids)} runs reached {status}")
            offset = 0
            while True:
                page = c.get("/v1/runs", params={"limit": 200, "offset": offset}).json()
                for run in page["data"]:
                    if run["id"] in wanted and run["status"] in (status, "failed", "incomplete",
                                                                  "cancelled", "expired"):
                        done[run["id"]] = run
                if not page["has_more"]:
                    break
                offset += 200
            time.sleep(0.2)
    return [done[i] for i in ids]


def load(home: Path, runs: int, workers: int, clients: int) -> dict:
    server = Server(home, STEPS, workers)
    try:
        t0 = time.time()
        ids = submit(server.url, runs, clients)
        done = wait_all(server.url, ids, "completed")
        with httpx.Client(base_url=server.url, timeout=30) as c:
            waiting = c.get("/v1/runs", params={"status": "requires_action", "limit": 200}).json()
    finally:
        server.stop()
    bad = [r for r in done if r["status"] != "completed" or len(r["steps"]) != len(STEPS)]
    latencies = sorted(r["updated_at"] - r["created_at"] for r in done)
    end = max(r["updated_at"] for r in done)
    return {"runs": runs, "completed": runs - len(bad), "seconds": end - t0,
            "runs_per_s": runs / (end - t0),
            "p50_ms": 1000 * statistics.median(latencies),
            "p95_ms": 1000 * latencies[int(0.95 * (len(latencies) - 1))],
            "still_waiting": len(waiting["data"])}


def make_waiting(home: Path, n: int, workers: int, clients: int) -> None:
    server = Server(home, ASK, workers)
    try:
        wait_all(server.url, submit(server.url, n, clients), "requires_action")
    finally:
        server.stop()


def show(label: str, r: dict) -> None:
    print(f"{label:<26} {r['completed']:>3}/{r['runs']} completed  {r['runs_per_s']:6.1f} runs/s  "
          f"p50 {r['p50_ms']:7.1f} ms  p95 {r['p95_ms']:7.1f} ms  "
          f"({r['seconds']:.1f} s; {r['still_waiting']} runs waiting for a person)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--waiting", type=int, default=50)
    ap.add_argument("--clients", type=int, default=8, help="Threads posting runs.")
    args = ap.parse_args()
    print(f"{args.runs} runs of {len(STEPS)} scripted steps, {args.workers} workers, "
          f"{args.clients} posting clients, python {sys.version.split()[0]}")
    with tempfile.TemporaryDirectory() as tmp:
        plain, busy, warm = Path(tmp, "plain"), Path(tmp, "waiting"), Path(tmp, "warm-up")
        plain.mkdir(), busy.mkdir(), warm.mkdir()
        load(warm, 40, args.workers, args.clients)  # not counted: the first server runs slower
        base = load(plain, args.runs, args.workers, args.clients)
        show("no runs waiting", base)
        make_waiting(busy, args.waiting, args.workers, args.clients)
        loaded = load(busy, args.runs, args.workers, args.clients)
        show(f"{args.waiting} runs waiting", loaded)
    ok = base["completed"] == loaded["completed"] == args.runs \
        and loaded["still_waiting"] == args.waiting
    print(f"every run completed: {ok}; throughput with {args.waiting} waiting / without: "
          f"{loaded['runs_per_s'] / base['runs_per_s']:.2f}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
