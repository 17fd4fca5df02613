"""The server's runs: queued in the store, driven by N worker threads.

A run waiting for a person holds no worker: its pause ends the worker's iterator, and a
decision queues it again (`respond`). The queue itself lives in the store, so a restarted
server takes over the runs it had queued or was running (`start`).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Callable

from ..errors import ConfigError, Conflict, SessionBusy, Unknown
from ..session import Session
from ..status import (EXPIRED, INTERRUPTED, NEEDS_HUMAN, QUEUED, RUNNING, SERVER_FINAL,
                      server_status)

if TYPE_CHECKING:
    from ..agent import Agent
    from ..store import RunInfo, Store

log = logging.getLogger("jsonagent.server")

# Events after which a stopping server may let go of a run: its state is checkpointed there,
# so the next start resumes it from that point.
SAFE_STOPS = {"run_start", "run_resumed", "tool_result"}


def public_status(info: RunInfo) -> str:
    """The server's status of a stored run (the table in status.py)."""
    if info.orphaned:  # its process died: a server's run is taken over at the next start
        return server_status(RUNNING if info.served else INTERRUPTED)
    return server_status(info.status)


class Runner:
    def __init__(self, build_agent: Callable[[], Agent], store: Store, workers: int = 4,
                 expire_after: float = 86400.0):
        self.build_agent, self.store = build_agent, store
        self.front = build_agent()
        """Builds new runs' states; its model is never called."""
        self.workers, self.expire_after = workers, expire_after
        self.queue: queue.Queue[str] = queue.Queue()
        self.stopping = threading.Event()
        self._active: dict[str, Session] = {}
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []

    # -- lifetime -----------------------------------------------------------------------------

    def start(self) -> None:
        """Take over this store's server runs: those that were running first, then the
        queued ones, oldest first. Waiting runs keep waiting."""
        every = 10 ** 9
        orphans = [i for i in self.store.runs(status=INTERRUPTED, served=True, limit=every)
                   if i.orphaned]
        queued = self.store.runs(status=QUEUED, served=True, limit=every)
        for info in [*reversed(orphans), *reversed(queued)]:
            self.queue.put(info.id)
        for n in range(self.workers):
            self._spawn(self._work, f"jsonagent-worker-{n}")
        self._spawn(self._expire, "jsonagent-expiry")

    def _spawn(self, target: Callable[[], None], name: str) -> None:
        thread = threading.Thread(target=target, name=name, daemon=True)
        thread.start()
        self._threads.append(thread)

    def stop(self, wait_s: float = 30.0) -> None:
        """Let each worker finish its current step, then leave its run for the next start."""
        self.stopping.set()
        deadline = time.monotonic() + wait_s
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))

    # -- requests -----------------------------------------------------------------------------

    def submit(self, text: str, session: str | None = None, max_steps: int | None = None) -> str:
        s = Session(self.front.deps, session, self.store)
        try:
            state = s.enqueue(text, **({"max_steps": max_steps} if max_steps else {}))
        finally:
            s.close()
        self.queue.put(state.run_id)
        return state.run_id

    def get(self, run_id: str) -> RunInfo:
        try:
            return self.store.load_run(run_id)
        except ConfigError:
            raise Unknown(f"no run {run_id}") from None

    def respond(self, run_id: str, answer: str | None = None, approve: bool | None = None,
                reason: str | None = None) -> None:
        """A person's decision on a waiting run; each is taken once."""
        info = self.get(run_id)
        pending = info.state.pending if info.status == NEEDS_HUMAN else None
        if pending is None:
            raise Conflict(f"run {run_id} is {public_status(info)}; it waits for nothing")
        if pending.kind == "question" and answer is None:
            raise ValueError(f"run {run_id} waits for an answer: send {{\"answer\": \"...\"}}")
        if pending.kind == "approval" and approve is None:
            raise ValueError(f"run {run_id} waits for an approval of {pending.tool}: send "
                             "{\"approve\": true} or {\"approve\": false, \"reason\": \"...\"}")
        decision = {"answer": answer} if pending.kind == "question" else \
            {"approve": approve, "reason": reason}
        if not self.store.decide(run_id, decision):
            raise Conflict(f"run {run_id} was answered already")
        self.queue.put(run_id)

    def cancel(self, run_id: str) -> None:
        """Stop a run: at once when no worker has it; else its worker's loop stops waiting
        at once and the model or tool call in flight is stopped (see cancel.py)."""
        info = self.get(run_id)
        if public_status(info) in SERVER_FINAL:
            raise Conflict(f"run {run_id} has ended ({public_status(info)})")
        with self._lock:  # a worker registers a run under this lock before it claims it
            active = self._active.get(run_id)
            if active is None:
                idle = (QUEUED, NEEDS_HUMAN)
                if self.store.end_run(run_id, INTERRUPTED, "cancelled", idle):
                    self._end_sub_runs(run_id)
                    return
                if self.get(run_id).orphaned:
                    self.store.end_run(run_id, INTERRUPTED, "cancelled", (RUNNING,))
                    return
                raise Conflict(f"run {run_id} is running in another process; stop it there")
        active.cancel()
        if self.store.end_run(run_id, INTERRUPTED, "cancelled", (NEEDS_HUMAN,)):  # paused just now
            self._end_sub_runs(run_id)

    def _end_sub_runs(self, run_id: str) -> None:
        """A paused tree is cancelled as a whole: its waiting sub-runs end with it."""
        for sub in self.store.sub_runs(run_id):
            if self.store.end_run(sub.id, INTERRUPTED, "cancelled", (NEEDS_HUMAN,)):
                self._end_sub_runs(sub.id)

    # -- workers ------------------------------------------------------------------------------

    def _work(self) -> None:
        agent = self.build_agent()  # one per worker: a model object need not be thread-safe
        base = agent.config
        while not self.stopping.is_set():
            try:
                run_id = self.queue.get(timeout=0.2)
            except queue.Empty:
                continue
            try:
                self._drive(agent, base, run_id)
            except Exception:
                log.exception("run %s failed in the server", run_id)

    def _drive(self, agent: Agent, base: Any, run_id: str) -> None:
        with self._lock:  # so that a cancel sees either the queued run or this worker's
            if run_id in self._active:
                return  # queued twice (a decision and a restart): one worker is enough
            info = self.store.load_run(run_id)
            if not (info.status == QUEUED or info.orphaned):
                return  # cancelled or expired while it waited in the queue
            # what the run recorded over the agent's settings (its max_steps)
            config = base.model_copy(update={
                "max_steps": info.state.config.get("max_steps", base.max_steps)})
            session = Session(replace(agent.deps, config=config), info.session_id, self.store)
            self._active[run_id] = session
        state = info.state
        decision = (info.decision or {}) if state.pending is not None else {}
        try:
            events = session.iter_resume(decision.get("answer"), decision.get("approve"),
                                         decision.get("reason"), run_id)
            for event in events:
                if self.stopping.is_set() and event.type in SAFE_STOPS:
                    events.close()  # the row stays running; the next start takes it over
                    break
        except (ConfigError, SessionBusy) as exc:
            log.warning("run %s: %s", run_id, exc)
        finally:
            with self._lock:
                self._active.pop(run_id, None)
            session.close()

    def _expire(self) -> None:
        tick = min(max(self.expire_after / 4, 0.1), 5.0)
        while not self.stopping.wait(tick):
            cutoff = time.time() - self.expire_after
            try:
                for info in self.store.runs(status=NEEDS_HUMAN, served=True, limit=10 ** 9):
                    if info.updated_at < cutoff and self.store.end_run(
                            info.id, EXPIRED, f"no answer within {self.expire_after:g} s",
                            (NEEDS_HUMAN,)):
                        self._end_sub_runs(info.id)
            except Exception:
                log.exception("expiring waiting runs failed")
