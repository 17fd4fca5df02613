"""Batch runs: many tasks from a JSONL file, one result line each, resumable.

    run_batch("tasks.jsonl", "results.jsonl", functools.partial(make_agent), workers=4)

The task file holds `{"id", "input"}` a line (optional `session` and `expect`). Each finished
task appends one flushed line to the results file, so a batch killed at any moment goes on
where it stopped when run again: ids already there are skipped.

Workers get a picklable agent factory, not an agent: each worker process calls it once and
reuses the agent, so a local model loads once per worker. The same task function runs in
the local process pool and in Ray actors (one per slot, so a task's clock starts when the
task does). Only the parent writes the results file.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import socket
import statistics
import threading
import time
from collections import Counter, deque
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterable

from pydantic import BaseModel

from .errors import BatchError, RunError, UserError, read_text
from .models import Usage

_HUNG_AFTER = 10.0
"""Seconds past its task's timeout after which a worker that has not answered is killed."""

AgentFactory = Callable[[], Any]
"""Returns an `Agent`; must pickle (a module-level function or a functools.partial of one)."""


class Task(BaseModel):
    id: str
    input: str
    session: str | None = None
    """Run the task in this session (needs `Agent.run(..., session=)`)."""
    expect: str | None = None
    """A literal string the answer must contain; sets `ok` in the result line."""


class TaskResult(BaseModel):
    """One line of the results file."""

    id: str
    status: str
    answer: Any = None
    error: str | None = None
    steps: int = 0
    usage: Usage = Usage()
    seconds: float = 0.0
    """Wall time of the task in its worker (or until it was given up on)."""
    worker: str = ""
    """host:pid of the process that ran it (ray:host:pid on Ray)."""
    ok: bool | None = None
    """The answer contains `expect`; only when the task gave one."""
    run_id: str | None = None
    """The stored run, when the agent stores runs."""
    session_id: str | None = None

    def line(self) -> str:
        optional = ("ok", "run_id", "session_id")
        return self.model_dump_json(exclude={k for k in optional if getattr(self, k) is None})


class BatchSummary(BaseModel):
    total: int
    """Tasks in the task file."""
    ran: int
    """Tasks run by this call; the rest were already in the results file."""
    counts: dict[str, int]
    """Results by status, over every task of the file that has one."""
    missing: int
    """Tasks without a result (the batch was interrupted)."""
    median_seconds: float | None
    total_tokens: int
    ok_rate: float | None
    """Share of results with ok true, among tasks that gave `expect`."""
    seconds: float
    """Wall time of this call."""

    @property
    def all_completed(self) -> bool:
        return self.missing == 0 and set(self.counts) <= {"completed"}


# -- files ------------------------------------------------------------------------------------

def read_tasks(path: str | Path) -> list[Task]:
    """Every task of the file, checked; a bad line or a duplicate id raises BatchError."""
    path = Path(path)
    text = read_text(path, BatchError)
    tasks: list[Task] = []
    seen: dict[str, int] = {}
    for n, raw in enumerate(text.splitlines(), 1):
        if not raw.strip():
            continue
        try:
            data = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise BatchError(f"{path}:{n}: not valid JSON: {exc.msg} at column {exc.colno}") from None
        if not isinstance(data, dict):
            raise BatchError(f"{path}:{n}: a task is a JSON object with \"id\" and \"input\"")
        for key in ("id", "input"):
            if not isinstance(data.get(key), str) or not data[key]:
                what = "missing" if key not in data else "not a non-empty string"
                raise BatchError(f"{path}:{n}: \"{key}\" is {what}")
        for key in ("session", "expect"):
            if data.get(key) is not None and not isinstance(data[key], str):
                raise BatchError(f"{path}:{n}: \"{key}\" must be a string")
        if data["id"] in seen:
            raise BatchError(f"{path}:{n}: duplicate id {data['id']!r} (first on line "
                             f"{seen[data['id']]})")
        seen[data["id"]] = n
        tasks.append(Task(**{k: data.get(k) for k in Task.model_fields}))
    if not tasks:
        raise BatchError(f"{path}: no tasks")
    return tasks


def read_results(path: str | Path) -> list[dict]:
    """The lines of a results file; a torn last line (the writer was killed) is left out."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    except (OSError, UnicodeDecodeError) as exc:
        raise BatchError(f"{path}: cannot read results: {exc}") from None
    lines = text.split("\n")
    lines.pop()  # after the last newline: empty, or the torn tail of a killed write
    results = []
    for n, raw in enumerate(lines, 1):
        if not raw.strip():
            continue
        try:
            data = json.loads(raw)
        except json.JSONDecodeError:
            data = None
        if not isinstance(data, dict) or not isinstance(data.get("id"), str) \
                or "status" not in data:
            raise BatchError(f"{path}:{n}: not a results line; is --out the right file?")
        results.append(data)
    return results


class ResultsFile:
    """Append-only; each line is flushed as it is written, so a kill loses at most one task."""

    def __init__(self, path: Path):
        self.path = path
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._file = path.open("a+b")
            self._drop_torn_tail()
        except OSError as exc:
            raise BatchError(f"cannot write results {path}: {exc.strerror or exc}") from None

    def _drop_torn_tail(self) -> None:
        size = self._file.seek(0, os.SEEK_END)
        if size == 0:
            return
        self._file.seek(max(0, size - 65536))
        tail = self._file.read()
        if tail.endswith(b"\n"):
            return
        cut = tail.rfind(b"\n")
        if cut < 0 and size > len(tail):  # one very long torn line: find its start the slow way
            self._file.seek(0)
            whole = self._file.read()
            self._file.truncate(whole.rfind(b"\n") + 1)
        else:
            self._file.truncate(size - len(tail) + cut + 1)

    def write(self, result: TaskResult) -> None:
        self._file.write((result.line() + "\n").encode("utf-8"))
        self._file.flush()

    def close(self) -> None:
        self._file.close()


def rewrite_without(path: Path, ids: set[str]) -> None:
    """Drop the lines of `ids` from a results file, atomically (write aside, then rename)."""
    keep = [r for r in read_results(path) if r["id"] not in ids]
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with tmp.open("w", encoding="utf-8") as f:
        f.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in keep)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def transcript_path(directory: Path, task_id: str) -> Path:
    """One file per task; an id that is not a safe file name gets a hash to stay unique."""
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", task_id)[:100]
    if safe != task_id or safe.startswith("."):
        safe = f"{safe}-{hashlib.sha256(task_id.encode()).hexdigest()[:8]}"
    return directory / f"{safe}.jsonl"


def to_retry(previous: list[dict]) -> set[str]:
    """The ids whose result failed: `retry_failed` drops their lines and runs them again."""
    return {r["id"] for r in previous if r["status"] == "failed"}


def to_run(tasks: list[Task], previous: list[dict], retry_failed: bool = False) -> list[Task]:
    """The tasks a batch runs: those without a line in `previous` (failed ones count as
    without, with `retry_failed`)."""
    done = {r["id"] for r in previous} - (to_retry(previous) if retry_failed else set())
    return [t for t in tasks if t.id not in done]


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
    line = TaskResult(id=task.id, status="failed", worker=worker or _worker_name())
    try:
        from .events import jsonable

        result, timed_out = _run_within(agent, task, timeout)
        line.answer, line.error = jsonable(result.answer), result.error
        line.steps, line.usage = len(result.steps), result.usage
        line.run_id, line.session_id = result.run_id or None, result.session_id or None
        line.status = result.status
        if timed_out and result.status == "interrupted":
            line.status, line.error = "failed", f"timed out after {timeout:g} s"
    except Exception as exc:
        line.error = f"{type(exc).__name__}: {exc}"
    if task.expect is not None:
        text = line.answer if isinstance(line.answer, str) \
            else json.dumps(line.answer, ensure_ascii=False)
        line.ok = line.status == "completed" and task.expect in text
    line.seconds = round(time.perf_counter() - start, 4)
    return line


def _run_within(agent: Any, task: Task, timeout: float | None) -> tuple[Any, bool]:
    """The task's run, cancelled once `timeout` seconds have passed; and whether it was."""
    start, timer, fired = time.monotonic(), None, []
    end = None
    try:
        for end in agent.iter(task.input, session=task.session):
            if timer is None and timeout:  # the first event names the run
                left = max(0.0, timeout - (time.monotonic() - start))
                timer = threading.Timer(left, lambda run_id=end.run_id: fired.append(
                    agent.cancel(run_id)))
                timer.daemon = True
                timer.start()
    finally:
        if timer is not None:
            timer.cancel()
    return end.result, bool(fired)


def _worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def _failed(task: Task, error: str, worker: str, seconds: float) -> TaskResult:
    return TaskResult(id=task.id, status="failed", error=error, worker=worker,
                      seconds=round(seconds, 4), ok=False if task.expect is not None else None)


# -- one dispatcher for both backends ----------------------------------------------------------

class _Slot:
    """One worker: a local process or a Ray actor, running at most one task."""

    def __init__(self):
        self.ready = False
        self.name = ""
        self.task: Task | None = None
        self.started = 0.0
        self.handle: Any = None
        """The backend's own: (process, pipe) locally, the actor and its pending call on Ray."""


def _dispatch(tasks: list[Task], size: int, timeout: float | None, backend: Any,
              emit: Callable[[TaskResult], None]) -> None:
    """Keep every slot busy; a dead or overdue worker's task is failed and the worker replaced.

    A worker answers ("ready", name) or ("fatal", message, is_user_error) once, then
    ("done", result) per task; the backend reports ("dead", reason) when it is gone.
    """
    queue = deque(tasks)
    slots = [backend.start() for _ in range(min(size, len(tasks)))]

    def replace(slot: _Slot, error: str) -> _Slot | None:
        backend.stop(slot, force=True)
        if not slot.ready:
            raise RunError(f"a batch worker died while building its agent: {error}"
                           f"{backend.start_hint}")
        if slot.task is not None:
            emit(_failed(slot.task, error, slot.name, time.perf_counter() - slot.started))
        return backend.start() if queue else None

    try:
        while queue or any(s.task for s in slots):
            for s in slots:
                if s.ready and s.task is None and queue:
                    s.task, s.started = queue.popleft(), time.perf_counter()
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
                elif msg and msg[0] == "done":
                    s.task = None
                    emit(TaskResult(**msg[1]))
                elif s.task and limit and now - s.started >= limit:
                    slots[i] = replace(s, f"timed out after {timeout:g} s")
            slots = [s for s in slots if s is not None]
    finally:
        for s in slots:
            backend.stop(s, force=s.task is not None)


# -- the local backend: spawned processes, one pipe each ---------------------------------------

def _worker_main(conn, factory: AgentFactory, transcripts: Path | None,
                 timeout: float | None) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides what Ctrl-C stops
    _exit_with_parent()
    try:
        agent = factory()
    except BaseException as exc:
        conn.send(_fatal(exc))
        return
    name = _worker_name()
    conn.send(("ready", name))
    while True:
        try:
            task = conn.recv()
        except (EOFError, OSError):
            return
        if task is None:
            return
        conn.send(("done", run_task(agent, Task(**task), transcripts, name, timeout).model_dump()))


def _fatal(exc: BaseException) -> tuple:
    user = isinstance(exc, UserError)
    return ("fatal", str(exc) if user else
            f"building the agent failed: {type(exc).__name__}: {exc}", user)


def _exit_with_parent() -> None:
    """A worker whose batch was killed (even with kill -9) must not run on."""
    parent = os.getppid()

    def watch():
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(1)

    threading.Thread(target=watch, daemon=True, name="parent-watch").start()


class _LocalBackend:
    start_hint = ("; see its output above. A script that calls run_batch needs "
                  "`if __name__ == \"__main__\":`, as workers import it")

    def __init__(self, factory: AgentFactory, transcripts: Path | None, timeout: float | None):
        import multiprocessing

        self.ctx = multiprocessing.get_context("spawn")  # no inherited threads or locks
        self.factory, self.transcripts, self.timeout = factory, transcripts, timeout

    def start(self) -> _Slot:
        slot = _Slot()
        conn, child = self.ctx.Pipe()
        proc = self.ctx.Process(target=_worker_main,
                                args=(child, self.factory, self.transcripts, self.timeout),
                                daemon=True, name="jsonagent-batch-worker")
        with _sigint_ignored():  # inherited, so Ctrl-C during its start-up is the parent's too
            proc.start()
        child.close()
        slot.handle, slot.name = (proc, conn), f"{socket.gethostname()}:{proc.pid}"
        return slot

    def give(self, slot: _Slot, task: Task) -> None:
        slot.handle[1].send(task.model_dump())

    def wait(self, slots: list[_Slot], timeout: float | None) -> list[tuple[int, tuple]]:
        from multiprocessing.connection import wait

        ready = wait([h for s in slots for h in (s.handle[1], s.handle[0].sentinel)], timeout)
        news = []
        for s in slots:
            proc, conn = s.handle
            if conn in ready or proc.sentinel in ready:
                try:
                    msg = conn.recv() if conn.poll() else None
                except (EOFError, OSError):  # the worker is gone or going
                    msg = None
                    proc.join(5)
                if msg is None and not proc.is_alive():
                    msg = ("dead", f"worker crashed ({_death(proc)})")
                if msg:
                    news.append((id(s), msg))
        return news

    def stop(self, slot: _Slot, force: bool = False) -> None:
        proc, conn = slot.handle
        if proc.is_alive() and not force:
            try:
                conn.send(None)
            except OSError:
                pass
            proc.join(2)
        if proc.is_alive():
            proc.kill()
        proc.join(5)
        conn.close()


@contextmanager
def _sigint_ignored():
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _death(proc) -> str:
    code = proc.exitcode
    if code is not None and code < 0:
        try:
            return f"signal {signal.Signals(-code).name}"
        except ValueError:
            return f"signal {-code}"
    return f"exit code {code}"


# -- the Ray backend: one actor per slot -------------------------------------------------------

class _RayWorker:
    """A Ray actor that, like a local worker, builds its agent once and runs `run_task` on
    it one task at a time, so a task's clock starts when the task really starts."""

    def __init__(self, factory: AgentFactory, transcripts: str | None, timeout: float | None):
        self.name = "ray:" + _worker_name()
        self.transcripts = Path(transcripts) if transcripts else None
        self.timeout = timeout
        try:
            self.agent, self.fatal = factory(), None
        except Exception as exc:
            self.agent, self.fatal = None, _fatal(exc)

    def ready(self) -> tuple:
        return self.fatal or ("ready", self.name)

    def run(self, task: dict) -> tuple:
        return ("done", run_task(self.agent, Task(**task), self.transcripts, self.name,
                                 self.timeout).model_dump())


class _RayBackend:
    start_hint = ""

    def __init__(self, ray, factory: AgentFactory, transcripts: Path | None,
                 timeout: float | None):
        self.ray, self.timeout = ray, timeout
        self.cls = ray.remote(num_cpus=1, max_restarts=0, max_task_retries=0)(_RayWorker)
        self.factory_ref = ray.put(factory)
        self.transcripts = str(transcripts) if transcripts else None

    def start(self) -> _Slot:
        slot = _Slot()
        actor = self.cls.remote(self.factory_ref, self.transcripts, self.timeout)
        slot.handle, slot.name = [actor, actor.ready.remote()], "ray"
        return slot

    def give(self, slot: _Slot, task: Task) -> None:
        slot.handle[1] = slot.handle[0].run.remote(task.model_dump())

    def wait(self, slots: list[_Slot], timeout: float | None) -> list[tuple[int, tuple]]:
        pending = [s.handle[1] for s in slots if s.handle[1] is not None]
        done, _ = self.ray.wait(pending, num_returns=1, timeout=timeout) if pending else ([], [])
        news = []
        for s in slots:
            ref = s.handle[1]
            if ref is not None and ref in done:
                s.handle[1] = None
                try:
                    news.append((id(s), self.ray.get(ref)))
                except self.ray.exceptions.RayError as exc:
                    news.append((id(s), ("dead", f"worker crashed ({_first_line(exc)})")))
        return news

    def stop(self, slot: _Slot, force: bool = False) -> None:
        self.ray.kill(slot.handle[0])


def _run_ray(tasks: list[Task], factory: AgentFactory, workers: int | None, address: str | None,
             timeout: float | None, transcripts: Path | None,
             emit: Callable[[TaskResult], None]) -> None:
    try:
        import ray
    except ImportError:
        raise BatchError("the ray backend needs Ray: pip install 'jsonagent[ray]'") from None

    started_here = not ray.is_initialized()
    if started_here:
        if address:
            _check_reachable(address)
        try:
            ray.init(address=address, include_dashboard=False, logging_level="WARNING",
                     log_to_driver=False,
                     **({} if address or not workers else {"num_cpus": workers}))
        except (ConnectionError, ValueError, RuntimeError) as exc:
            raise BatchError(f"cannot start or reach Ray at {address or 'a local Ray'}: "
                             f"{exc}") from None
    try:
        size = workers or max(1, int(ray.cluster_resources().get("CPU", 1)))
        _dispatch(tasks, size, timeout, _RayBackend(ray, factory, transcripts, timeout), emit)
    finally:
        if started_here:
            ray.shutdown()


def _check_reachable(address: str) -> None:
    """Ray waits minutes on an address nobody answers; a wrong one should fail at once."""
    host, sep, port = address.removeprefix("ray://").rpartition(":")
    if not sep or not port.isdigit():
        return  # "auto", "local" and the like are Ray's to resolve
    try:
        socket.create_connection((host.strip("[]") or "127.0.0.1", int(port)), timeout=5).close()
    except OSError as exc:
        raise BatchError(f"cannot reach Ray at {address}: {exc.strerror or exc}") from None


def _first_line(exc: Exception) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


# -- the entry point ---------------------------------------------------------------------------

def run_batch(tasks: str | Path | Iterable[Task], out: str | Path, agent_factory: AgentFactory,
              *, workers: int | None = None, backend: str = "local",
              ray_address: str | None = None, task_timeout: float | None = None,
              retry_failed: bool = False, transcripts: str | Path | None = None,
              on_result: Callable[[TaskResult], None] | None = None) -> BatchSummary:
    """Run every task not yet in `out`, appending one line each; return the summary.

    `workers` is the number of processes (local; default 1) or of tasks in flight (Ray;
    default the cluster's CPUs). `retry_failed` first drops the failed lines of `out` so
    those tasks run again. `on_result` sees each result once its line is written. Bad input
    raises BatchError before anything runs.
    """
    t0 = time.perf_counter()
    task_list = read_tasks(tasks) if isinstance(tasks, (str, Path)) else list(tasks)
    out = Path(out)
    if backend not in ("local", "ray"):
        raise BatchError(f"unknown backend {backend!r}: use local or ray")
    if workers is not None and workers < 1:
        raise BatchError("workers must be at least 1")
    previous = read_results(out)
    todo = to_run(task_list, previous, retry_failed)
    again = to_retry(previous) if retry_failed else set()
    if again:
        rewrite_without(out, again)
        previous = [r for r in previous if r["id"] not in again]
    where = Path(transcripts).resolve() if transcripts else None
    if where is not None:
        try:
            where.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise BatchError(f"cannot create {where}: {exc.strerror or exc}") from None

    results = ResultsFile(out)
    fresh: list[dict] = []

    def emit(result: TaskResult) -> None:
        results.write(result)
        fresh.append(result.model_dump())
        if on_result:
            on_result(result)

    try:
        if todo and backend == "ray":
            _run_ray(todo, agent_factory, workers, ray_address, task_timeout, where, emit)
        elif todo:
            _dispatch(todo, workers or 1, task_timeout,
                      _LocalBackend(agent_factory, where, task_timeout), emit)
    finally:
        results.close()
    return summarize(task_list, previous + fresh, ran=len(fresh),
                     seconds=time.perf_counter() - t0)


def summarize(tasks: list[Task], results: list[dict], ran: int = 0,
              seconds: float = 0.0) -> BatchSummary:
    ids = {t.id for t in tasks}
    mine = {r["id"]: r for r in results if r["id"] in ids}.values()
    secs = [r.get("seconds") or 0.0 for r in mine]
    oks = [r["ok"] for r in mine if r.get("ok") is not None]
    tokens = sum((r.get("usage") or {}).get("prompt_tokens", 0)
                 + (r.get("usage") or {}).get("completion_tokens", 0) for r in mine)
    return BatchSummary(total=len(tasks), ran=ran, counts=dict(Counter(r["status"] for r in mine)),
                        missing=len(ids) - len(mine),
                        median_seconds=statistics.median(secs) if secs else None,
                        total_tokens=tokens, ok_rate=sum(oks) / len(oks) if oks else None,
                        seconds=round(seconds, 3))

