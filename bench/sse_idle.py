"""What fifty SSE clients on a run that waits for a person cost the server, in CPU.

    python bench/sse_idle.py [--clients 50] [--seconds 10]

A real `jsonagent serve` on 127.0.0.1 runs a scripted run that asks a question and waits;
the clients open `/v1/runs/{id}/events` and stay. The figure is the server process's CPU
time (user + system, from /proc) over the window, as a share of one core. Then a person
answers, and the time until every client has seen the run end is printed too.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

ASK = {"thought": "ask", "tool_name": "AskHumanHelpTool", "args_list": {"question": "Which city?"}}
DONE = {"thought": "done", "tool_name": "TaskCompleteTool", "args_list": {"output": "42"}}


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=10.0)
    opts = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "script.json"
        script.write_text(json.dumps([ASK, DONE]))
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        url = f"http://127.0.0.1:{port}"
        proc = subprocess.Popen(
            [sys.executable, "-m", "jsonagent", "serve", "--port", str(port),
             "--model", f"scripted:{script}"], env=dict(os.environ, JSONAGENT_HOME=tmp),
            start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            for _ in range(300):
                try:
                    if httpx.get(url + "/healthz", timeout=1).status_code == 200:
                        break
                except httpx.HTTPError:
                    time.sleep(0.1)
            run = httpx.post(url + "/v1/runs", json={"input": "weather?"}).json()["id"]
            while httpx.get(f"{url}/v1/runs/{run}").json()["status"] != "requires_action":
                time.sleep(0.05)
            ended: list[float] = []

            def client() -> None:
                with httpx.stream("GET", f"{url}/v1/runs/{run}/events", timeout=None) as r:
                    for line in r.iter_lines():
                        if line.startswith("data:") and '"status": "completed"' in line:
                            ended.append(time.monotonic())
                            return

            threads = [threading.Thread(target=client, daemon=True) for _ in range(opts.clients)]
            for t in threads:
                t.start()
            time.sleep(2)  # every client connected and caught up
            c0, t0 = cpu_seconds(proc.pid), time.monotonic()
            time.sleep(opts.seconds)
            share = (cpu_seconds(proc.pid) - c0) / (time.monotonic() - t0)
            print(f"{opts.clients} SSE clients on a waiting run: {share * 100:.1f} % of a core "
                  f"(server CPU over {opts.seconds:g} s)")
            answered = time.monotonic()
            httpx.post(f"{url}/v1/runs/{run}/respond", json={"answer": "Oslo"})
            for t in threads:
                t.join(30)
            print(f"the answer reached all {len(ended)} clients' streams in "
                  f"{(max(ended) - answered) * 1000:.0f} ms (the run's end)")
        finally:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


if __name__ == "__main__":
    main()
