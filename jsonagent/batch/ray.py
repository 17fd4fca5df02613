"""The Ray backend: one actor per slot, each running the same task function as a local worker.

Ray pickles `_RayWorker` by its module path, so its workers import this module: they need
jsonagent importable (a local Ray inherits the driver's environment, PYTHONPATH included).
Ray itself is imported only when a batch uses it.
"""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Callable

from ..errors import BatchError
from .dispatch import (AgentFactory, Job, Slot, dispatch, fatal, may_call_once, run_task,
                       worker_name)
from .files import Task, TaskResult


class _RayWorker:
    """A Ray actor that, like a local worker, builds its agent once and runs `run_task` on
    it one task at a time, so a task's clock starts when the task really starts."""

    def __init__(self, factory: AgentFactory, transcripts: str | None, timeout: float | None,
                 job: Job = run_task):
        self.name = "ray:" + worker_name()
        self.job = job
        self.transcripts = Path(transcripts) if transcripts else None
        self.timeout = timeout
        try:
            self.agent, self.fatal = factory(), None
        except Exception as exc:
            self.agent, self.fatal = None, fatal(exc)

    def ready(self) -> tuple:
        return self.fatal or ("ready", self.name, may_call_once(self.agent))

    def run(self, task: dict) -> tuple:
        return ("done", self.job(self.agent, Task(**task), self.transcripts, self.name,
                                 self.timeout).model_dump())


class RayBackend:
    start_hint = ""

    def __init__(self, ray, factory: AgentFactory, transcripts: Path | None,
                 timeout: float | None, job: Job = run_task):
        self.ray, self.timeout, self.job = ray, timeout, job
        self.cls = ray.remote(num_cpus=1, max_restarts=0, max_task_retries=0)(_RayWorker)
        self.factory_ref = ray.put(factory)
        self.transcripts = str(transcripts) if transcripts else None

    def start(self) -> Slot:
        slot = Slot()
        actor = self.cls.remote(self.factory_ref, self.transcripts, self.timeout, self.job)
        slot.handle, slot.name = [actor, actor.ready.remote()], "ray"
        return slot

    def give(self, slot: Slot, task: Task) -> None:
        slot.handle[1] = slot.handle[0].run.remote(task.model_dump())

    def wait(self, slots: list[Slot], timeout: float | None) -> list[tuple[int, tuple]]:
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

    def stop(self, slot: Slot, force: bool = False) -> None:
        self.ray.kill(slot.handle[0])


def run_ray(tasks: list[Task], factory: AgentFactory, workers: int | None, address: str | None,
            timeout: float | None, transcripts: Path | None,
            emit: Callable[[TaskResult], None], job: Job = run_task) -> None:
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
        dispatch(tasks, size, timeout, RayBackend(ray, factory, transcripts, timeout, job), emit)
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
