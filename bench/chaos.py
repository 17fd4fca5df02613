"""Chaos on `jsonagent serve` nodes sharing one PostgreSQL (issue 41): runs pay and reserve
through a ledger that refuses a key it has seen, while nodes are killed and restarted.

    PYTHONPATH=. python bench/chaos.py [--runs 200] [--nodes 3] [--every 2] [--db-down 3]

Each node is a real `jsonagent serve` (tests/test_server.py's Server) with a scripted model on
a throwaway cluster (tests/pg.py). A run makes four HTTP calls: `pay` (effects "once") and
`reserve` ("idempotent"), twice each. The ledger, a payment API in this process, applies an
Idempotency-Key once, answers a key it has seen with the first response, and records every
attempt with the node life (id and restart count) that sent it.

Half the workload first runs with no faults, for the throughput. Then a random node gets SIGTERM
or kill -9, in turn, and is started again, --every seconds after the last one came back; half
way, PostgreSQL stops as if it crashed and stays down --db-down seconds. A run paused on an
uncertain once call is answered over REST: "happened" if the ledger applied the key, else
"again". Counted from the store's events and the ledger:
- driven by two at once: events that are not one unbroken sequence with one start and each
  step's result once, or two ledger calls of the run in flight together (from two nodes, or
  two workers of one);
- a once effect twice: a pay key sent to the ledger again (it refused; an API without keys
  would have charged twice);
- takeover latency: from the signal to the run_resumed of each run the node held.
Exit status 1 when either count is not 0, or a run did not complete.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import signal
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import psycopg

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent / "tests")]
from pg import Cluster  # noqa: E402
from test_server import DONE, Server  # noqa: E402
from jsonagent.testing import step  # noqa: E402
from chaos_ledger import Attempt, Ledger  # noqa: E402

TAKEOVER_AFTER = 2.0
# different arguments each call: the same call again would be a stall
SCRIPT = [step("reserve", {"item": "seat 12A"}, "hold a seat"),
          step("pay", {"amount": 120}, "pay for the seat"),
          step("reserve", {"item": "meal"}, "hold a meal"),
          step("pay", {"amount": 15}, "pay for the meal"), DONE]
WAITING = ("queued", "running", "needs_human")


class Nodes:
    """The serve processes; a node restarts under its own id, as a deployment's would."""

    def __init__(self, root: Path, url: str, specs: Path, n: int, workers: int):
        self.names, self.servers, self.lives, self.up = "abcdefgh"[:n], [], Counter(), set()
        self.starting, self.lock = threading.Lock(), threading.Lock()
        for name in self.names:
            (root / name).mkdir()
            self.servers.append(Server(root / name, SCRIPT, "--store", url, "--node-id", name,
                                       "--tools", str(specs), "--workers", str(workers),
                                       "--takeover-after", str(TAKEOVER_AFTER)))

    def start(self, i: int) -> None:
        with self.starting:  # one at a time: the spec's header reads the environment
            self.lives[i] += 1
            os.environ["CHAOS_NODE"] = f"{self.names[i]}#{self.lives[i]}"
            for attempt in range(3):  # a start during the database's restart may fail
                try:
                    self.servers[i].start()
                    break
                except AssertionError as exc:
                    print(f"node {self.names[i]} did not come up: {str(exc)[-300:]}")
            else:
                return
        with self.lock:  # a new set each time: other threads read the old one meanwhile
            self.up = self.up | {i}

    def stop(self, i: int, sig: int) -> int:
        with self.lock:
            self.up = self.up - {i}
        return self.servers[i].kill(sig, wait_s=30)

    def alive(self) -> list[Server]:
        return random.sample([self.servers[i] for i in self.up], len(self.up))

    def post(self, path: str, body: dict) -> httpx.Response | None:
        """To any node that is up; another one when a node goes down under the request."""
        for _ in range(300):  # a minute: the database may be down
            for server in self.alive():
                try:
                    r = httpx.post(server.url + path, json=body, timeout=10)
                except httpx.HTTPError:
                    continue
                if r.status_code < 500:
                    return r
            time.sleep(0.2)
        return None


class Store:
    """The bench's own connection to PostgreSQL, made again after the database restart."""

    def __init__(self, url: str):
        self.url, self.db = url, None

    def rows(self, sql: str, args: tuple = ()) -> list[tuple]:
        for _ in range(300):
            try:
                if self.db is None or self.db.closed:
                    self.db = psycopg.connect(self.url, autocommit=True, connect_timeout=2)
                return self.db.execute(sql, args).fetchall()
            except psycopg.OperationalError:
                self.db = None
                time.sleep(0.1)
        raise RuntimeError("PostgreSQL did not come back within 30 s")

    def statuses(self, ids: list[str]) -> list[tuple]:
        return self.rows("SELECT id, status, updated_at, CASE WHEN status = 'needs_human' THEN "
                         "state END FROM jsonagent.runs WHERE id = ANY(%s)", (ids,))

    def held(self, pid: int | None = None) -> list[str]:
        """The runs a node process drives now (any process: None)."""
        return [r[0] for r in self.rows(
            "SELECT id FROM jsonagent.runs WHERE status = 'running' AND "
            "(owner::json->>'pid')::int = coalesce(%s, (owner::json->>'pid')::int)", (pid,))]

    def events(self, ids: list[str]) -> dict[str, list[tuple]]:
        out: dict[str, list[tuple]] = {i: [] for i in ids}
        for run_id, *event in self.rows(
                "SELECT run_id, seq, type, t, data::json->>'step', concat_ws(' ', "
                "data::json->>'status', data::json->>'error', data::json->>'action') FROM "
                "jsonagent.events WHERE run_id = ANY(%s) ORDER BY run_id, seq", (ids,)):
            out[run_id].append(tuple(event))
        return out


@dataclass
class Phase:
    """Runs kept `in_flight` at a time until `total` were made and every one ended."""

    label: str
    total: int
    ids: list[str] = field(default_factory=list)
    ended: dict[str, tuple[str, float]] = field(default_factory=dict)
    answers: dict[tuple[str, str], str] = field(default_factory=dict)
    t0: float = 0.0

    @property
    def seconds(self) -> float:
        return max((t for _, t in self.ended.values()), default=self.t0) - self.t0


def drive(phase: Phase, nodes: Nodes, store: Store, ledger: Ledger, in_flight: int,
          limit_s: float, progress=lambda: "") -> None:
    phase.t0 = time.time()
    said = phase.t0
    while len(phase.ended) < phase.total and time.time() - phase.t0 < limit_s:
        while len(phase.ids) - len(phase.ended) < in_flight and len(phase.ids) < phase.total:
            r = nodes.post("/v1/runs", {"input": f"{phase.label} trip {len(phase.ids)}"})
            if r is None or r.status_code != 201:
                raise SystemExit(f"no node took a run: {r and r.text}")
            phase.ids.append(r.json()["id"])
        for run_id, status, updated, state in store.statuses(
                [i for i in phase.ids if i not in phase.ended]):
            if status not in WAITING:
                phase.ended[run_id] = (status, updated)
            elif status == "needs_human":
                answer_once(phase, nodes, ledger, run_id, json.loads(state)["pending"])
        if time.time() - said >= 10:
            said = time.time()
            print(f"[{said - phase.t0:4.0f}s] {phase.label}: {len(phase.ended)}/{phase.total} "
                  f"runs ended{progress()}", flush=True)
        time.sleep(0.25)


def answer_once(phase: Phase, nodes: Nodes, ledger: Ledger, run_id: str, pending: dict) -> None:
    """What a person would say after looking at the payment API's dashboard."""
    if pending.get("kind") != "once" or (run_id, pending["key"]) in phase.answers:
        return
    answer = "happened" if ledger.applied(pending["key"]) else "again"
    r = nodes.post(f"/v1/runs/{run_id}/respond", {"answer": answer})
    if r is not None and r.status_code in (202, 409):  # 409: answered already
        phase.answers[(run_id, pending["key"])] = answer


@dataclass
class Fault:
    kind: str  # SIGTERM, kill -9, db restart
    node: str
    at: float
    held: list[str]
    code: int | None = None


class Chaos(threading.Thread):
    """`every` seconds after the last fault, a random node is stopped, SIGTERM and kill -9 in
    turn, and started again before the next one: one node down at a time, so that a takeover
    always finds a free worker and its latency is the handover's, not a queue's. Once half
    the runs ended, PostgreSQL stops instead, for `db_down` seconds."""

    def __init__(self, nodes: Nodes, cluster: Cluster, store: Store, phase: Phase, every: float,
                 db_down: float):
        super().__init__(daemon=True)
        self.nodes, self.cluster, self.store, self.phase = nodes, cluster, store, phase
        self.every, self.db_down, self.faults, self.done = every, db_down, [], threading.Event()

    def say(self, at: float, text: str) -> None:
        print(f"[{at - self.phase.t0:4.0f}s] {text}", flush=True)

    def run(self) -> None:
        while not self.done.wait(self.every):
            if len(self.phase.ended) >= self.phase.total // 2 and \
                    not any(f.kind == "db restart" for f in self.faults):
                held, at = self.store.held(), time.time()
                self.cluster.stop("immediate")  # as a crash: connections drop mid-work
                time.sleep(self.db_down)
                self.cluster.start()
                self.faults.append(Fault("db restart", "-", at, held))
                self.say(at, f"database restarted, down {time.time() - at:.1f} s; "
                         f"{len(held)} runs were running")
                continue
            i = random.choice(sorted(self.nodes.up))
            kills = sum(f.kind != "db restart" for f in self.faults)
            sig, kind = ((signal.SIGTERM, "SIGTERM"), (signal.SIGKILL, "kill -9"))[kills % 2]
            held = self.store.held(self.nodes.servers[i].proc.pid)  # before: a drain is quick
            at = time.time()
            code = self.nodes.stop(i, sig)
            self.faults.append(Fault(kind, self.nodes.names[i], at, held, code))
            gone = time.time()
            self.say(at, f"{kind} to node {self.nodes.names[i]}: it held {len(held)} runs, "
                     f"exited {code} after {gone - at:.1f} s")
            self.nodes.start(i)
            self.say(time.time(), f"node {self.nodes.names[i]} up again after "
                     f"{time.time() - gone:.1f} s")

    def summary(self) -> str:
        kinds = Counter(f.kind for f in self.faults)
        return (f", faults: {kinds['SIGTERM']} SIGTERM, {kinds['kill -9']} kill -9, "
                f"{kinds['db restart']} db restart; once pauses answered {len(self.phase.answers)}")


def double_driven(events: list[tuple], attempts: list[Attempt]) -> str:
    """Why the run had two drivers at once; "" when it had one at a time."""
    seqs = [e[0] for e in events]
    results = [e[3] for e in events if e[1] == "tool_result"]
    if seqs != list(range(1, len(seqs) + 1)):
        return f"events numbered {seqs}"
    if [e[1] for e in events].count("run_start") != 1:
        return "two run_start events"
    if len(results) != len(set(results)):
        return f"a step's result twice: {results}"
    # one driver makes one call at a time; a dead node's call ends (on the ledger) before
    # anyone may take its run over, since --delay is shorter than the takeover window
    both = [(a, b) for n, a in enumerate(attempts) for b in attempts[n + 1:]
            if a.start < b.end and b.start < a.end]
    return f"ledger calls in flight together: {both[0]}" if both else ""


def evidence(run_id: str, why: str, events: list[tuple], t0: float) -> None:
    """What went wrong with a run, and its events with their times (s into the phase)."""
    print(f"  {run_id}: {why}\n    " + " ".join(
        f"{seq}:{kind}@{t - t0:.2f}" + (f"({more})" if more else "")
        for seq, kind, t, _, more in events))


def takeover(events: list[tuple], fault: Fault) -> float | None:
    """Seconds from the signal to the next driver's run_resumed; None when the run ended (or
    paused) on the stopping node first."""
    for _, kind, t, *_ in events:
        if t >= fault.at and kind in ("run_resumed", "run_end"):
            return t - fault.at if kind == "run_resumed" else None
    return None


def pct(values: list[float], q: float) -> float:
    return sorted(values)[max(0, math.ceil(q * len(values)) - 1)]  # nearest rank


def report(phase: Phase, base: Phase, chaos: Chaos, store: Store, ledger: Ledger) -> bool:
    events = store.events(phase.ids)
    by_run: dict[str, list[Attempt]] = {i: [] for i in phase.ids}
    for a in ledger.attempts:
        by_run.setdefault(a.key.rsplit(".", 2)[0], []).append(a)
    per_key = Counter((a.tool, a.key) for i in phase.ids for a in by_run[i])
    statuses = Counter(s for s, _ in phase.ended.values())
    stuck = len(phase.ids) - len(phase.ended) + phase.total - len(phase.ids)
    waiting = sum(1 for r in store.statuses(phase.ids) if r[1] == "needs_human")
    why = {i: double_driven(events[i], by_run[i]) for i in phase.ids}
    twice = [i for i in phase.ids if why[i]]
    once_twice = [k for (tool, k), n in per_key.items() if tool == "pay" and n > 1]
    repeats = Counter(n for (tool, _), n in per_key.items() if tool == "reserve" and n > 1)
    calls = Counter(tool for tool, _ in per_key)
    answers = Counter(phase.answers.values())
    print(f"runs completed / paused / failed: {statuses['completed']} / {waiting} / "
          f"{len(phase.ended) - statuses['completed']}"
          + (f" ({dict(statuses)})" if len(statuses) > 1 else "")
          + (f"; {stuck} did not end within the time limit" if stuck else ""))
    for run_id in [i for i, (s, _) in phase.ended.items() if s != "completed"][:5]:
        evidence(run_id, phase.ended[run_id][0], events[run_id], phase.t0)
    print(f"runs driven by two nodes at once: {len(twice)}")
    for run_id in twice[:5]:
        evidence(run_id, why[run_id], events[run_id], phase.t0)
    print(f"once effects that happened twice: {len(once_twice)} (a pay key sent to the ledger "
          f"again; of {calls['pay']} pay keys)" + (f" {once_twice[:5]}" if once_twice else ""))
    print(f"idempotent calls repeated with the same key: {sum(repeats.values())} of "
          f"{calls['reserve']} reserve keys ("
          + (", ".join(f"{v} sent {k} times" for k, v in sorted(repeats.items())) or "none")
          + ")")
    print(f"pauses asking a person about an uncertain once call: {len(phase.answers)} "
          f"(answered happened {answers['happened']}, again {answers['again']})")
    for kind, how in (("SIGTERM", "drain, then hand over"),
                      ("kill -9", f"--takeover-after {TAKEOVER_AFTER:g} s"),
                      ("db restart", f"down {chaos.db_down:g} s, timed from the stop")):
        faults = [f for f in chaos.faults if f.kind == kind]
        held = [(f, r) for f in faults for r in f.held if r in events]
        took = [s for s in (takeover(events[r], f) for f, r in held) if s is not None]
        line = f"p50 {pct(took, 0.5):.2f} s, p95 {pct(took, 0.95):.2f} s" if took else "none"
        exits = Counter(f.code for f in faults if f.code is not None)
        codes = f", exit codes {dict(exits)}" if exits else ""
        print(f"takeover after {kind} ({how}): {line}; {len(took)} of the {len(held)} runs "
              f"held were taken over, the rest ended or paused there first ({len(faults)} "
              f"times{codes})")
    logs = "".join(server.output() for server in chaos.nodes.servers)
    print(f"node logs: {logs.count('Traceback')} tracebacks" + (
        ", the first: " + logs[logs.index("Traceback"):][:1500] if "Traceback" in logs
        else ""))
    fast, slow = base.total / base.seconds, len(phase.ended) / phase.seconds
    print(f"throughput: {slow:.2f} runs/s with faults ({phase.seconds:.0f} s), {fast:.2f} runs/s "
          f"without ({base.seconds:.0f} s): {100 * slow / fast:.0f}%")
    return not twice and not once_twice and statuses["completed"] == phase.total


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--nodes", type=int, default=3)
    ap.add_argument("--workers", type=int, default=4, help="Workers per node.")
    ap.add_argument("--in-flight", type=int, default=8, help="Runs kept going at a time.")
    ap.add_argument("--every", type=float, default=2.0,
                    help="Seconds from a node's restart to the next fault.")
    ap.add_argument("--db-down", type=float, default=3.0, help="Seconds PostgreSQL stays "
                    "down: past the takeover window, every heartbeat lapses.")
    ap.add_argument("--delay", type=float, default=0.8, help="The ledger's answer time, s.")
    ap.add_argument("--baseline-runs", type=int, default=None, help="Default: half --runs.")
    ap.add_argument("--limit", type=float, default=420, help="Seconds the chaos may take.")
    ap.add_argument("--seed", type=int, default=41)
    args = ap.parse_args()
    if args.delay >= 0.75 * TAKEOVER_AFTER - 0.2:  # a dead node's call would look like a driver
        ap.error("--delay must end within the takeover window: under 1.3 s")
    random.seed(args.seed)
    started = time.time()
    print(f"{args.nodes} nodes x {args.workers} workers on one PostgreSQL, {args.runs} runs "
          f"of 4 calls (pay: once, reserve: idempotent; the ledger answers in {args.delay:g} s), "
          f"{args.in_flight} in flight; a fault {args.every:g} s after the last node is back, "
          f"the database down {args.db_down:g} s once; --takeover-after "
          f"{TAKEOVER_AFTER:g} s; {os.cpu_count()} CPUs", flush=True)
    cluster, ledger, nodes = Cluster(), Ledger(args.delay), None
    tmp = tempfile.TemporaryDirectory()
    try:
        with ledger.api:
            root = Path(tmp.name)
            os.environ["JSONAGENT_HOME"] = str(root / "home")
            url = cluster.database()
            nodes = Nodes(root, url, ledger.specs(root / "ledger.json"), args.nodes,
                          args.workers)
            for i in range(args.nodes):
                nodes.start(i)
            store = Store(url)
            base = Phase("fault-free", args.baseline_runs or max(1, args.runs // 2))
            drive(base, nodes, store, ledger, args.in_flight, args.limit)
            print(f"fault-free: {len(base.ended)}/{base.total} ended in {base.seconds:.1f} s: "
                  f"{base.total / base.seconds:.2f} runs/s", flush=True)
            phase = Phase("chaos", args.runs)
            chaos = Chaos(nodes, cluster, store, phase, args.every, args.db_down)
            chaos.start()
            drive(phase, nodes, store, ledger, args.in_flight, args.limit, chaos.summary)
            chaos.done.set()
            chaos.join()
            ok = report(phase, base, chaos, store, ledger)
    finally:
        for server in nodes.servers if nodes else []:
            server.kill(signal.SIGTERM)
        cluster.close()
        tmp.cleanup()
    print(f"wall time: {time.time() - started:.0f} s")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
