"""The task function and the one dispatcher that both backends (local processes, Ray actors)
plug into.

Workers get a picklable agent factory, not an agent: each worker calls it once and reuses the
agent, so a local model loads once per worker. Every worker runs `run_task`, one task at a
time, so a task's clock starts when the task does. Only the parent writes the results file.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from collections import deque
from pathlib import Path
from typing import Any, Callable, Protocol

from ..calls import CALL_FAILED, ONCE, RETURNED
from ..errors import BatchError, RunError, UserError
from ..status import COMPLETED, FAILED, INTERRUPTED, NEEDS_HUMAN, Reason
from .files import Task, TaskResult, transcript_path

_HUNG_AFTER = 10.0
"""Seconds past its task's timeout after which a worker that has not answered is killed."""

AgentFactory = Callable[[], Any]
"""Returns an `Agent`; must pickle (a module-level function or a functools.partial of one)."""

Job = Callable[[Any, Task, "Path | None", "str | None", "float | None"], TaskResult]
"""What a worker does with one task: `run_task`, or another module-level function with its
signature that the factory's object suits (an eval runs its case and scores it)."""

_tell_parent: list[Callable[[tuple], None]] = []
"""A local worker's pipe (`tell_parent`): how `_run_within` tells the parent a task's run
has begun (`began`), so that a worker killed in the run still leaves a line that names it."""


def tell_parent(send: Callable[[tuple], None]) -> None:
    _tell_parent[:] = [send]


# -- the task function, the same in every backend ---------------------------------------------

def run_task(agent: Any, task: Task, transcripts: Path | None = None,
             worker: str | None = None, timeout: float | None = None) -> TaskResult:
    """Run one task on a ready agent; every failure becomes a failed result, never a raise.
    Past `timeout` seconds its run is cancelled: the tool in flight is stopped, and the
    worker is free for the next task at once."""
    start = time.perf_counter()
    if transcripts is not None:
        path = transcript_path(transcripts, task.id)
        path.unlink(missing_ok=True)  # an attempt cut short earlier starts over
        agent.transcript = path
    line = TaskResult(id=task.id, status=FAILED, worker=worker or worker_name(),
                      extra=task.extra)
    try:
        from ..events import jsonable

        result, timed_out = _run_within(agent, task, timeout)
        line.answer, line.error = jsonable(result.answer), result.error
        line.steps, line.usage = len(result.steps), result.usage
        line.run_id, line.session_id = result.run_id or None, result.session_id or None
        line.status = result.status
        if result.once:  # what running it again would repeat (files.repeats)
            line.extra = {**(line.extra or {}), "once": [o.model_dump() for o in result.once]}
        if timed_out and result.status == INTERRUPTED:
            line.status, line.error = FAILED, Reason.timed_out(timeout)
        elif timed_out and result.status == NEEDS_HUMAN and _once_pending(result):
            line.error = Reason.timed_out(timeout)  # it waits to be asked: the status stays
    except Exception as exc:
        line.error = f"{type(exc).__name__}: {exc}"
    if task.expect is not None:
        text = line.answer if isinstance(line.answer, str) \
            else json.dumps(line.answer, ensure_ascii=False)
        line.ok = line.status == COMPLETED and task.expect in text
    line.seconds = round(time.perf_counter() - start, 4)
    return line


def _once_pending(result: Any) -> bool:
    """The run waits for a person to say what became of a `once` call it was stopped in."""
    pending = getattr(result, "pending", None)
    return pending is not None and any(p.kind == ONCE for p in pending.each)


def _run_within(agent: Any, task: Task, timeout: float | None) -> tuple[Any, bool]:
    """The task's run, cancelled once `timeout` seconds have passed; and whether it was."""
    start, timer, fired, told = time.monotonic(), None, [], []
    end = None
    try:
        for end in agent.iter(task.input, session=task.session):
            if not told and _tell_parent:  # before any tool can run
                told.append(_tell_parent[0](began(agent, end.run_id)))
            if timer is None and timeout:  # the first event names the run
                left = max(0.0, timeout - (time.monotonic() - start))
                # marked before the cancel: the run may end, and this function return,
                # before agent.cancel() does (a timed-out task then read as cancelled)
                timer = threading.Timer(left, lambda run_id=end.run_id: (
                    fired.append(run_id), agent.cancel(run_id)))
                timer.daemon = True
                timer.start()
    finally:
        if timer is not None:
            timer.cancel()
    return end.result, bool(fired)


def began(agent: Any, run_id: str) -> tuple:
    """A worker's word that a task's run has begun: its id, the agent's store (where the
    parent reads its `once` calls should the worker die in it) and whether any of its tools
    is `once`."""
    store = getattr(agent, "store", None)
    where = getattr(getattr(store, "link", None), "url", None) or getattr(store, "path", None)
    return ("began", run_id, str(where) if where else None, may_call_once(agent))


def may_call_once(agent: Any) -> bool:
    """Whether a worker's object has a `once` tool; an eval's worker, whose agents are built
    per case, may."""
    tools = getattr(agent, "toolset", None)
    return tools is None or any(t.effects == ONCE for t in tools)


def worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def fatal(exc: BaseException) -> tuple:
    """A worker's one answer when its agent cannot be built: a UserError keeps its message
    (and becomes a BatchError in the parent), anything else is named."""
    user = isinstance(exc, UserError)
    return ("fatal", str(exc) if user else
            f"building the agent failed: {type(exc).__name__}: {exc}", user)


def _failed(slot: Slot, error: str, seconds: float) -> TaskResult:
    """The line of a task whose worker died or was killed in it. It names the run, and the
    `once` calls the run began (its store's call log), so that `--retry-failed` leaves the
    task as it does one that failed after a payment; when those cannot be read, a `once`
    call is assumed (UNKNOWN_ONCE): a worker killed in a payment must not pay again."""
    task = slot.task
    line = TaskResult(id=task.id, status=FAILED, error=error, worker=slot.name,
                      seconds=round(seconds, 4), ok=False if task.expect is not None else None,
                      extra=task.extra)
    run_id, where, may_once = slot.run or (None, None, slot.may_once and not slot.tells_runs)
    line.run_id = run_id
    once = _once_calls(run_id, where) if run_id and where else None
    if once is None and may_once:
        once = [UNKNOWN_ONCE]
    if once:
        line.extra = {**(task.extra or {}), "once": once}
    return line


UNKNOWN_ONCE = {"key": None, "tool": "?", "ended": None}
"""A failed line's `once` call when its worker died and which calls its run began is not
known (no store, or a backend that does not say which run it was in)."""


def _once_calls(run_id: str, where: str) -> list[dict] | None:
    """The `once` calls in the call log of `run_id`, as `RunResult.once` lists them; None
    when the store cannot be read."""
    from ..store import open_store

    try:
        store = open_store(where)
        try:
            calls = store.calls(run_id)
        finally:
            store.close()
    except Exception:
        return None
    return [{"key": c.key, "tool": c.tool,
             "ended": (CALL_FAILED if c.error else RETURNED) if c.ended else None}
            for c in calls if c.effects == ONCE]


# -- one dispatcher for both backends ----------------------------------------------------------

class Slot:
    """One worker: a local process or a Ray actor, running at most one task."""

    def __init__(self):
        self.ready = False
        self.name = ""
        self.task: Task | None = None
        self.started = 0.0
        self.handle: Any = None
        """The backend's own: (process, pipe) locally, the actor and its pending call on Ray."""
        self.run: tuple | None = None
        """The task's run, once the worker said it began (`began`): id, store, once tools."""
        self.may_once = True
        """Whether the worker's agent has a `once` tool (its "ready" says)."""
        self.tells_runs = False
        """Whether the backend's workers say when a run began (a Ray actor cannot)."""


class Backend(Protocol):
    start_hint: str
    """Appended to the error when a worker dies before its agent is built."""

    def start(self) -> Slot: ...

    def give(self, slot: Slot, task: Task) -> None: ...

    def wait(self, slots: list[Slot], timeout: float | None) -> list[tuple[int, tuple]]:
        """The messages that arrived within `timeout`, each keyed by `id(slot)`."""

    def stop(self, slot: Slot, force: bool = False) -> None: ...


def dispatch(tasks: list[Task], size: int, timeout: float | None, backend: Backend,
             emit: Callable[[TaskResult], None]) -> None:
    """Keep every slot busy; a dead or overdue worker's task is failed and the worker replaced.

    A worker answers ("ready", name, may_call_once) or ("fatal", message, is_user_error)
    once, then per task ("began", ...) when its run has begun (local workers) and
    ("done", result); the backend reports ("dead", reason) when it is gone.
    """
    queue = deque(tasks)
    slots = [backend.start() for _ in range(min(size, len(tasks)))]

    def replace(slot: Slot, error: str) -> Slot | None:
        backend.stop(slot, force=True)
        if not slot.ready:
            raise RunError(f"a batch worker died while building its agent: {error}"
                           f"{backend.start_hint}")
        if slot.task is not None:
            emit(_failed(slot, error, time.perf_counter() - slot.started))
        return backend.start() if queue else None

    try:
        while queue or any(s.task for s in slots):
            for s in slots:
                if s.ready and s.task is None and queue:
                    s.task, s.started, s.run = queue.popleft(), time.perf_counter(), None
                    backend.give(s, s.task)
            now = time.perf_counter()
            # the worker cancels an overdue run itself; this is for a worker that hangs
            limit = timeout + _HUNG_AFTER if timeout else None
            deadlines = [s.started + limit - now for s in slots if s.task and limit]
            news = dict(backend.wait(slots, max(0.0, min(deadlines)) if deadlines else None))
            now = time.perf_counter()
            for i, s in enumerate(slots):
                msg = news.get(id(s))
                if msg and msg[0] == "dead":
                    slots[i] = replace(s, msg[1])
                elif msg and msg[0] == "fatal":
                    raise (BatchError if msg[2] else RunError)(msg[1])
                elif msg and msg[0] == "ready":
                    s.ready, s.name = True, msg[1]
                    s.may_once = msg[2] if len(msg) > 2 else True
                elif msg and msg[0] == "began":
                    s.run = msg[1:]
                elif msg and msg[0] == "done":
                    s.task = None
                    emit(TaskResult(**msg[1]))
                elif s.task and limit and now - s.started >= limit:
                    slots[i] = replace(s, Reason.timed_out(timeout))
            slots = [s for s in slots if s is not None]
    finally:
        for s in slots:
            backend.stop(s, force=s.task is not None)
