"""The server's runs: queued in the store, claimed and driven by N worker threads.

The queue is the store itself: a worker claims the next run there (`Store.next_run`), so
several servers sharing one database share one queue, and no run is ever driven by two. A
run waiting for a person holds no worker: its pause ends the worker's iterator, and a
decision queues it again (`respond`). A restarted server, or another node, takes over the
runs whose driver died.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Callable

from ..acting import Resume, unfit
from ..calls import once_answer
from ..errors import ConfigError, Conflict, SessionBusy, StoreDown, Unknown
from ..events import Delta
from ..session import Session
from ..status import (EXPIRED, INTERRUPTED, NEEDS_HUMAN, QUEUED, RUNNING, SERVER_FINAL, Reason,
                      server_status)
from .frontend_tools import KEY as FRONTEND_KEY, with_frontend_tools
from .live import Live

if TYPE_CHECKING:
    from ..agent import Agent
    from ..store import RunInfo, Store

log = logging.getLogger("jsonagent.server")

# Events after which a stopping server may let go of a run: its state is checkpointed there,
# so the next start resumes it from that point.
SAFE_STOPS = {"run_start", "run_resumed", "tool_result"}
WRITTEN = {"model_reply", "reask", "run_end"}
"""Events after which the reply being written is done: a follower that comes later gets
nothing of it as a delta."""
DRAIN_TIMEOUT = 10.0
"""Seconds a stopping node waits for its runs' current tool calls before it hands them over."""
LOOK_S = 0.5
"""How often an idle node looks for queued work it was not told about."""


def public_status(info: RunInfo) -> str:
    """The server's status of a stored run (the table in status.py)."""
    if info.orphaned:  # its process died: a server's run is taken over
        return server_status(RUNNING if info.served else INTERRUPTED)
    return server_status(info.status)


class Runner:
    def __init__(self, build_agent: Callable[[], Agent], store: Store, workers: int = 4,
                 expire_after: float = 86400.0, drain_timeout: float = DRAIN_TIMEOUT):
        self.build_agent, self.store = build_agent, store
        self.front = build_agent()
        """Builds new runs' states; its model is never called."""
        self.workers, self.expire_after = workers, expire_after
        self.stopping = threading.Event()
        self.drain_timeout = drain_timeout
        self.hurry = threading.Event()
        """Set by a second SIGTERM: let go of the runs now, without waiting for their tools."""
        self._claimed: queue.Queue[RunInfo] = queue.Queue()
        self._free = threading.Semaphore(workers)
        """A node claims a run only for a free worker, so that busy nodes leave work to idle
        ones."""
        self._news = threading.Event()
        self._active: dict[str, Session] = {}
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._unlisten: Callable[[], None] | None = None
        self.live = Live()
        """The deltas of the runs driven here, for the streams following them now."""

    # -- lifetime -----------------------------------------------------------------------------

    def start(self) -> None:
        """Claim runs as workers are free: first those whose driver died (this server's
        before a restart, or another node's), then the queued ones, oldest first. Waiting
        runs keep waiting."""
        self._unlisten = self.store.on_queued(self._news.set)
        for n in range(self.workers):
            self._spawn(self._work, f"jsonagent-worker-{n}")
        self._spawn(self._claim, "jsonagent-claims")
        self._spawn(self._expire, "jsonagent-expiry")

    def _spawn(self, target: Callable[[], None], name: str) -> None:
        thread = threading.Thread(target=target, name=name, daemon=True)
        thread.start()
        self._threads.append(thread)

    def stop(self, wait_s: float | None = None) -> None:
        """Drain: claim nothing more, let each worker finish its current tool call (up to
        `drain_timeout`, or until `hurry`), and hand its run over at that checkpoint: the
        claim is released, so another node takes it over at once, not after a missed
        heartbeat. A run whose tool outlasts the wait is released where it is: its call
        is in the log, and the next node decides it by its effects (calls.py)."""
        self.stopping.set()
        self._news.set()
        if self._unlisten is not None:
            self._unlisten()
        deadline = time.monotonic() + (self.drain_timeout if wait_s is None else wait_s)
        for thread in self._threads:
            while thread.is_alive() and not self.hurry.is_set() and time.monotonic() < deadline:
                thread.join(0.05)
        with self._lock:
            left = list(self._active)
        while not self._claimed.empty():  # claimed as the workers stopped: never driven here
            left.append(self._claimed.get_nowait().id)
        for run_id in left:
            self._release(run_id)

    def _release(self, run_id: str) -> None:
        try:
            self.store.release(run_id)
        except Exception as exc:  # the store is down: the heartbeat's end hands it over
            log.warning("run %s: could not hand it over at once: %s", run_id, exc)

    # -- requests -----------------------------------------------------------------------------

    def submit(self, text: str, session: str | None = None, max_steps: int | None = None,
               traceparent: str | None = None, stream: bool = False,
               client_tools: list[dict[str, Any]] | None = None,
               recorded: dict[str, Any] | None = None, run_id: str | None = None) -> str:
        """`traceparent`: the caller's trace (its request's header), the run span's parent.
        `stream`: someone may follow the run, so its replies are streamed from its first
        call, not only while a follower is there (which it cannot be before the first call
        starts). `client_tools`: tools the client runs (frontend_tools.py). `recorded`: more a
        front end keeps with the run (AG-UI: the message that started it). `run_id`: the
        run's id when the caller derives it (from a tool call's key, calls.py)."""
        s = Session(with_frontend_tools(self.front.deps, client_tools), session, self.store)
        recorded = {**({"max_steps": max_steps} if max_steps else {}),
                    **({"stream": True} if stream else {}),
                    **({FRONTEND_KEY: client_tools} if client_tools else {}), **(recorded or {})}
        try:
            state = s.enqueue(text, traceparent=traceparent, run_id=run_id, **recorded)
        finally:
            s.close()
        self._news.set()
        return state.run_id

    def get(self, run_id: str) -> RunInfo:
        try:
            return self.store.load_run(run_id)
        except ConfigError:
            raise Unknown(f"no run {run_id}") from None

    def respond(self, run_id: str, answer: str | None = None, approve: bool | None = None,
                reason: str | None = None, items: dict[str, dict] | None = None) -> None:
        """A person's decision on a waiting run; each is taken once. `items`: each item's,
        by its id, when it waits for several."""
        info = self.get(run_id)
        pending = info.state.pending if info.status == NEEDS_HUMAN else None
        if pending is None:
            raise Conflict(f"run {run_id} is {public_status(info)}; it waits for nothing")
        if pending.items:
            problem = unfit(pending, Resume.given(answer, approve, reason, items))
            if problem is not None:
                raise ValueError(f"run {run_id} waits for {len(pending.items)} items, and "
                                 f"{problem}: send {{\"items\": {{\"ID\": {{...}}}}}}")
            decision = {"answer": answer, "approve": approve, "reason": reason, "items": items}
        else:  # one item: its id (a call of a step of several) may name it in `items`
            given = Resume.given(answer, approve, reason, items).of(pending)
            _fits(run_id, pending, given.answer, given.approved)
            decision = {"approve": given.approved, "reason": given.reason} \
                if pending.kind == "approval" else {"answer": given.answer,
                                                    "reason": given.reason}
            if items and pending.path:  # a sub-run's: its own items go down to it
                decision["items"] = items
        if not self.store.decide(run_id, decision):
            raise Conflict(f"run {run_id} was answered already")
        self._news.set()

    def cancel(self, run_id: str) -> None:
        """Stop a run: at once when no worker has it; else its worker's loop stops waiting
        at once and the model or tool call in flight is stopped (see cancel.py). A run that
        another process drives (another node) is asked to stop through the store."""
        info = self.get(run_id)
        if public_status(info) in SERVER_FINAL:
            raise Conflict(f"run {run_id} has ended ({public_status(info)})")
        with self._lock:  # a worker registers a run under this lock before it claims it
            active = self._active.get(run_id)
            if active is None:
                idle = (QUEUED, NEEDS_HUMAN)
                if self.store.end_run(run_id, INTERRUPTED, Reason.CANCELLED, idle):
                    self._end_sub_runs(run_id)
                    return
                if self.store.request_cancel(run_id, Reason.CANCELLED):
                    return
                if self.get(run_id).orphaned:
                    self.store.end_run(run_id, INTERRUPTED, Reason.CANCELLED, (RUNNING,))
                    return
                raise Conflict(f"run {run_id} has just ended")
        active.cancel()
        if self.store.end_run(run_id, INTERRUPTED, Reason.CANCELLED, (NEEDS_HUMAN,)):  # paused just now
            self._end_sub_runs(run_id)

    def _end_sub_runs(self, run_id: str) -> None:
        """A paused tree is cancelled as a whole: its waiting sub-runs end with it."""
        for sub in self.store.sub_runs(run_id):
            if self.store.end_run(sub.id, INTERRUPTED, Reason.CANCELLED, (NEEDS_HUMAN,)):
                self._end_sub_runs(sub.id)

    # -- workers ------------------------------------------------------------------------------

    def _claim(self) -> None:
        """Claim the next run from the store whenever a worker is free; look again when
        the store has news (a run queued or answered, on any node) or every LOOK_S."""
        while not self.stopping.is_set():
            if not self._free.acquire(timeout=0.2):
                continue
            try:
                info = self.store.next_run()
            except StoreDown:
                info = None  # the store says so in the log, once, and again when it is back
            except Exception as exc:  # the next look may well work: say why, and go on
                log.warning("claiming a run failed: %s", exc)
                info = None
            if info is not None and self.stopping.is_set():
                # likely the run a worker just let go of (stale at once), claimed back: no
                # worker here drives it now, nor would another node before its heartbeat is due
                self._release(info.id)
                self._free.release()
                return
            if info is None:
                self._free.release()
                self._news.wait(LOOK_S)
                self._news.clear()
                continue
            self._claimed.put(info)

    def _work(self) -> None:
        agent = self.build_agent()  # one per worker: a model object need not be thread-safe
        base = agent.config
        while not self.stopping.is_set():
            try:
                info = self._claimed.get(timeout=0.2)
            except queue.Empty:
                continue
            try:
                self._drive(agent, base, info)
            except StoreDown as exc:
                log.warning("run %s: %s; it goes on once the store is back", info.id, exc)
            except Exception:
                log.exception("run %s failed in the server", info.id)
            finally:
                self._free.release()

    def _drive(self, agent: Agent, base: Any, info: RunInfo) -> None:
        run_id = info.id
        # what the run recorded over the agent's settings (its max_steps)
        config = base.model_copy(update={
            "max_steps": info.state.config.get("max_steps", base.max_steps)})
        recorded = info.state.config
        deps = with_frontend_tools(replace(agent.deps, config=config), recorded.get(FRONTEND_KEY))
        session = Session(deps, info.session_id, self.store)
        # a run that may be followed streams from its first call; else only while followed
        streamed = True if recorded.get("stream") else (lambda: self.live.watched(run_id))
        with self._lock:  # so that a cancel sees either the claimed run or this worker's
            self._active[run_id] = session
        decision = (info.decision or {}) if info.state.pending is not None else {}
        try:
            events = session.iter_claimed(info.state, decision.get("answer"),
                                          decision.get("approve"), decision.get("reason"),
                                          deltas=streamed, items=decision.get("items"))
            for event in events:
                if isinstance(event, Delta):
                    self.live.publish(run_id, event)
                    continue
                if event.type in WRITTEN:
                    self.live.written(run_id)
                if self.stopping.is_set() and event.type in SAFE_STOPS:
                    events.close()  # checkpointed: another node goes on from here at once
                    self._release(run_id)
                    break
        except (ConfigError, SessionBusy, Conflict) as exc:
            log.warning("run %s: %s", run_id, exc)
        finally:
            self.live.written(run_id)
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
                            info.id, EXPIRED, Reason.unanswered(self.expire_after),
                            (NEEDS_HUMAN,)):
                        self._end_sub_runs(info.id)
            except StoreDown:
                pass  # the store says so in the log; expiring waits for it too
            except Exception:
                log.exception("expiring waiting runs failed")


def _fits(run_id: str, pending: Any, answer: str | None, approve: bool | None) -> None:
    """Refuse input that does not fit the one item a run waits for, saying what does."""
    if pending.kind == "question" and answer is None:
        raise ValueError(f"run {run_id} waits for an answer: send {{\"answer\": \"...\"}}")
    if pending.kind == "approval" and approve is None:
        raise ValueError(f"run {run_id} waits for an approval of {pending.tool}: send "
                         "{\"approve\": true} or {\"approve\": false, \"reason\": \"...\"}")
    if pending.kind == "once" and once_answer(answer) is None:
        raise ValueError(f"run {run_id} waits for a person to say what became of a call of "
                         f"{pending.tool} (key {pending.key}): send {{\"answer\": "
                         "\"happened\"}, \"again\" or \"fail\" (and an optional reason)")
