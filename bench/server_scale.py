"""Several `jsonagent serve` nodes on one PostgreSQL, against one node on SQLite: 200 runs of
5 scripted steps, each with a 50 ms tool, posted round-robin to the nodes.

    python bench/server_scale.py [--runs 200] [--workers 4] [--clients 8] [--chart PATH]

Every node is a real `jsonagent serve` on 127.0.0.1 with its own node id; PostgreSQL is a
throwaway cluster of Debian's `postgresql` (tests/pg.py). Latency is the server's own: from a
run's creation to its end. Runs/s counts from the first POST to the last run's end. Each
run's events are then read back from the store to check that no run was driven twice (one
unbroken sequence, one start, no step done twice).

On a 2-core machine the nodes compete for the same CPUs, so more nodes cannot mean more
runs per second here; what this shows is PostgreSQL's cost against SQLite on one node, and
that throughput holds as nodes are added.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))
from pg import Cluster  # noqa: E402
from server_load import came_up, stop, wait_all  # noqa: E402

TOOL = "import time\n\ndef nap(seconds):\n    time.sleep(0.05)\n    return f'rested {seconds}'\n"
SPEC = [{"name": "Nap", "description": "Rest 50 ms.", "handler": "napper:nap",
         "parameters": [{"name": "seconds", "type": "float"}]}]
STEPS = [{"thought": f"step {n}", "tool_name": "Nap", "args_list": {"seconds": n}}
         for n in range(4)] + [{"thought": "done", "tool_name": "TaskCompleteTool",
                                "args_list": {"output": "42"}}]


class Node:
    def __init__(self, home: Path, name: str, store: str, workers: int):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        home.mkdir(parents=True, exist_ok=True)
        (home / "napper.py").write_text(TOOL)
        (home / "nap.json").write_text(json.dumps(SPEC))
        (home / "script.json").write_text(json.dumps(STEPS))
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "jsonagent", "serve", "--port", str(self.port),
             "--workers", str(workers), "--model", f"scripted:{home / 'script.json'}",
             "--tools", str(home / "nap.json"), "--max-steps", "10", "--store", store,
             "--node-id", name],
            env=dict(os.environ, JSONAGENT_HOME=str(home),
                     PYTHONPATH=os.pathsep.join(filter(None, [str(home),
                                                              os.environ.get("PYTHONPATH")]))),
            start_new_session=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=open(home / "server.log", "wb"))
        if not came_up(self.url, 60):
            self.stop()
            raise SystemExit(f"node {name} did not come up: {(home / 'server.log').read_text()}")

    def stop(self) -> None:
        stop(self.proc, 30)


def submit(nodes: list[Node], n: int, clients: int) -> list[str]:
    with ThreadPoolExecutor(clients) as pool:
        def one(i: int) -> str:
            r = httpx.post(nodes[i % len(nodes)].url + "/v1/runs", json={"input": f"task {i}"},
                           timeout=30)
            r.raise_for_status()
            return r.json()["id"]
        return list(pool.map(one, range(n)))


def driven_twice(store_where: str, ids: list[str]) -> int:
    """Runs whose events show two drivers: a broken sequence, two starts, a step twice."""
    from jsonagent.store import open_store

    store, bad = open_store(store_where), 0
    try:
        for run_id in ids:
            events = store.events(run_id=run_id)
            steps = [e["step"] for e in events if e["type"] == "tool_result"]
            if [e["seq"] for e in events] != list(range(1, len(events) + 1)) \
                    or [e["type"] for e in events].count("run_start") != 1 \
                    or len(steps) != len(set(steps)):
                bad += 1
    finally:
        store.close()
    return bad


def measure(label: str, root: Path, store: str, n_nodes: int, runs: int, workers: int,
            clients: int) -> dict:
    nodes = [Node(root / f"{label}-{name}", name, store, workers) for name in "abc"[:n_nodes]]
    try:
        submit(nodes, 20, clients)  # warm-up, not counted (the first runs of a node are slower)
        time.sleep(3)
        t0 = time.time()
        ids = submit(nodes, runs, clients)
        done = wait_all(nodes[0].url, ids, "completed")
    finally:
        for node in nodes:
            node.stop()
    latencies = sorted(r["updated_at"] - r["created_at"] for r in done)
    end = max(r["updated_at"] for r in done)
    return {"label": label, "nodes": n_nodes, "runs": runs,
            "completed": sum(r["status"] == "completed" for r in done),
            "seconds": end - t0, "runs_per_s": runs / (end - t0),
            "p50_ms": 1000 * statistics.median(latencies),
            "p95_ms": 1000 * latencies[int(0.95 * (len(latencies) - 1))],
            "driven_twice": driven_twice(store, ids)}


def chart(results: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [r["label"] for r in results]
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    left.bar(labels, [r["runs_per_s"] for r in results], color="#4c72b0")
    left.set_title("runs per second (higher is better)")
    x = range(len(results))
    right.bar([i - 0.2 for i in x], [r["p50_ms"] for r in results], 0.4, label="p50")
    right.bar([i + 0.2 for i in x], [r["p95_ms"] for r in results], 0.4, label="p95")
    right.set_xticks(list(x), labels)
    right.set_title("latency per run, ms (lower is better)")
    right.legend()
    fig.suptitle(f"{results[0]['runs']} runs x 5 steps (50 ms tool), 4 workers a node, "
                 f"{os.cpu_count()} CPUs shared by every node")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--clients", type=int, default=8, help="Threads posting runs.")
    ap.add_argument("--chart", type=Path, default=HERE / "results" / "server_scale" / "chart.png")
    args = ap.parse_args()
    print(f"{args.runs} runs of {len(STEPS)} steps (a 50 ms tool), {args.workers} workers a "
          f"node, {args.clients} posting clients, {os.cpu_count()} CPUs, "
          f"python {sys.version.split()[0]}")
    results = []
    cluster = Cluster()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp)
            plan = [("sqlite x1", str(root / "one.db"), 1)] + \
                [(f"postgres x{n}", cluster.database(), n) for n in (1, 2, 3)]
            for label, store, n in plan:
                r = measure(label, root, store, n, args.runs, args.workers, args.clients)
                results.append(r)
                print(f"{label:<12} {r['completed']:>3}/{r['runs']} completed  "
                      f"{r['runs_per_s']:6.1f} runs/s  p50 {r['p50_ms']:7.1f} ms  "
                      f"p95 {r['p95_ms']:7.1f} ms  ({r['seconds']:.1f} s)  "
                      f"driven twice: {r['driven_twice']}", flush=True)
    finally:
        cluster.close()
    base, pg1 = results[0], results[1]
    print(f"PostgreSQL against SQLite on one node: {pg1['runs_per_s'] / base['runs_per_s']:.2f}x "
          f"the runs/s, p50 {pg1['p50_ms'] - base['p50_ms']:+.1f} ms")
    print("runs/s as nodes are added (PostgreSQL): "
          + ", ".join(f"{r['nodes']}: {r['runs_per_s']:.1f}" for r in results[1:]))
    chart(results, args.chart)
    print(f"chart: {args.chart}")
    ok = all(r["completed"] == r["runs"] and r["driven_twice"] == 0 for r in results)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
