"""The local backend: spawned worker processes, one pipe each.

A worker is started with "spawn", so it inherits no threads or locks and imports
`_worker_main` from this module by name.
"""

from __future__ import annotations

import os
import signal
import socket
import threading
import time
from contextlib import contextmanager
from pathlib import Path

from .dispatch import (AgentFactory, Job, Slot, fatal, may_call_once, run_task, tell_parent,
                       worker_name)
from .files import Task


def _worker_main(conn, factory: AgentFactory, transcripts: Path | None,
                 timeout: float | None, job: Job = run_task) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides what Ctrl-C stops
    _exit_with_parent()
    try:
        agent = factory()
    except BaseException as exc:
        conn.send(fatal(exc))
        return
    name = worker_name()
    tell_parent(conn.send)  # the run a task began, in case this process dies in it
    conn.send(("ready", name, may_call_once(agent)))
    while True:
        try:
            task = conn.recv()
        except (EOFError, OSError):
            return
        if task is None:
            return
        conn.send(("done", job(agent, Task(**task), transcripts, name, timeout).model_dump()))


def _exit_with_parent() -> None:
    """A worker whose batch was killed (even with kill -9) must not run on."""
    parent = os.getppid()

    def watch():
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(1)

    threading.Thread(target=watch, daemon=True, name="parent-watch").start()


class LocalBackend:
    start_hint = ("; see its output above. A script that calls run_batch needs "
                  "`if __name__ == \"__main__\":`, as workers import it")

    def __init__(self, factory: AgentFactory, transcripts: Path | None, timeout: float | None,
                 job: Job = run_task):
        import multiprocessing

        self.ctx = multiprocessing.get_context("spawn")  # no inherited threads or locks
        self.factory, self.transcripts, self.timeout = factory, transcripts, timeout
        self.job = job

    def start(self) -> Slot:
        slot = Slot()
        conn, child = self.ctx.Pipe()
        proc = self.ctx.Process(target=_worker_main,
                                args=(child, self.factory, self.transcripts, self.timeout,
                                      self.job),
                                daemon=True, name="jsonagent-batch-worker")
        with _sigint_ignored():  # inherited, so Ctrl-C during its start-up is the parent's too
            proc.start()
        child.close()
        slot.handle, slot.name = (proc, conn), f"{socket.gethostname()}:{proc.pid}"
        slot.tells_runs = True
        return slot

    def give(self, slot: Slot, task: Task) -> None:
        slot.handle[1].send(task.model_dump())

    def wait(self, slots: list[Slot], timeout: float | None) -> list[tuple[int, tuple]]:
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

    def stop(self, slot: Slot, force: bool = False) -> None:
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
