"""Batch runs: many tasks from a JSONL file, one result line each, resumable.

    run_batch("tasks.jsonl", "results.jsonl", functools.partial(make_agent), workers=4)

`files` owns the task and results files, `dispatch` the task function and the dispatcher,
`local` and `ray` one backend each. The library prints and draws nothing: a caller that
shows progress does it from `on_result` (the CLI's bar does).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Callable, Iterable

from .. import tracing
from ..errors import BatchError
from .dispatch import AgentFactory, Job, dispatch, run_task, worker_name
from .files import (BatchSummary, ResultsFile, Task, TaskResult, read_results, read_tasks,
                    repeats, rewrite_without, summarize, to_retry, to_run, transcript_path)
from .local import LocalBackend
from .ray import run_ray

__all__ = ["AgentFactory", "BatchError", "BatchSummary", "Job", "ResultsFile", "Task",
           "TaskResult", "read_results", "read_tasks", "repeats", "rewrite_without", "run_batch",
           "run_task", "summarize", "to_retry", "to_run", "transcript_path"]


def run_batch(tasks: str | Path | Iterable[Task], out: str | Path, agent_factory: AgentFactory,
              *, workers: int | None = None, backend: str = "local",
              ray_address: str | None = None, task_timeout: float | None = None,
              retry_failed: bool = False, force: bool = False,
              transcripts: str | Path | None = None,
              on_result: Callable[[TaskResult], None] | None = None,
              job: Job = run_task) -> BatchSummary:
    """Run every task not yet in `out`, appending one line each; return the summary.

    `workers` is the number of processes (local; default 1) or of tasks in flight (Ray;
    default the cluster's CPUs). The `inline` backend runs the tasks one at a time in this
    process, so its factory need not pickle. `job` is what a worker does with each task
    (`run_task`: run it on the factory's agent). `retry_failed` first drops the failed lines
    of `out` so those tasks run again; one whose `once` calls began (a payment, an email)
    only with `force` too, since they happen again under new keys (`repeats`). `on_result`
    sees each result once its line is written. Bad input raises BatchError before anything
    runs.
    """
    t0 = time.perf_counter()
    task_list = read_tasks(tasks) if isinstance(tasks, (str, Path)) else list(tasks)
    out = Path(out)
    if backend not in ("local", "ray", "inline"):
        raise BatchError(f"unknown backend {backend!r}: use local, ray or inline")
    if workers is not None and workers < 1:
        raise BatchError("workers must be at least 1")
    previous = read_results(out)
    todo = to_run(task_list, previous, retry_failed, force)
    again = to_retry(previous, force) if retry_failed else set()
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
        with tracing.batch_span(len(todo)):  # its tasks' runs join its trace
            if todo and backend == "ray":
                run_ray(todo, agent_factory, workers, ray_address, task_timeout, where, emit,
                        job)
            elif todo and backend == "inline":
                agent = agent_factory()
                for task in todo:
                    emit(job(agent, task, where, worker_name(), task_timeout))
            elif todo:
                dispatch(todo, workers or 1, task_timeout,
                         LocalBackend(agent_factory, where, task_timeout, job), emit)
    finally:
        results.close()
    return summarize(task_list, previous + fresh, ran=len(fresh),
                     seconds=time.perf_counter() - t0)
