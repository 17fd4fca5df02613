"""The batch's files and the values in them: the task file, the results file (appended a
flushed line at a time, rewritten atomically), and the summary read back from it.

The task file holds `{"id", "input"}` a line (optional `session` and `expect`). Each finished
task appends one line to the results file, so a batch killed at any moment goes on where it
stopped when run again: ids already there are skipped.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import statistics
from collections import Counter
from pathlib import Path
from typing import Any, Callable

from pydantic import BaseModel

from ..errors import BatchError, read_text
from ..usage import Usage
from ..status import COMPLETED, FAILED


class Task(BaseModel):
    id: str
    input: str
    session: str | None = None
    """Run the task in this session (needs `Agent.run(..., session=)`)."""
    expect: str | None = None
    """A literal string the answer must contain; sets `ok` in the result line."""
    extra: dict[str, Any] | None = None
    """Carried as is to the task's result line, even when its worker dies (an eval's keys)."""


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
    extra: dict[str, Any] | None = None
    """The task's `extra`, and what a task function other than `run_task` adds to it (an
    eval's scores)."""

    def line(self) -> str:
        optional = ("ok", "run_id", "session_id", "extra")
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
    cost: float | None = None
    """What the results cost in all, in US dollars; None when any one's is unknown."""
    ok_rate: float | None
    """Share of results with ok true, among tasks that gave `expect`."""
    seconds: float
    """Wall time of this call."""

    @property
    def all_completed(self) -> bool:
        return self.missing == 0 and set(self.counts) <= {COMPLETED}


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
        if data.get("extra") is not None and not isinstance(data["extra"], dict):
            raise BatchError(f"{path}:{n}: \"extra\" must be an object")
        if data["id"] in seen:
            raise BatchError(f"{path}:{n}: duplicate id {data['id']!r} (first on line "
                             f"{seen[data['id']]})")
        seen[data["id"]] = n
        tasks.append(Task(**{k: data.get(k) for k in Task.model_fields}))
    if not tasks:
        raise BatchError(f"{path}: no tasks")
    return tasks


def read_results(path: str | Path, check: Callable[[dict], str | None] | None = None
                 ) -> list[dict]:
    """The lines of a results file; a torn last line (the writer was killed) is left out.
    `check` says what is wrong with a line that its reader could not use (None: nothing),
    which is refused with the file and the line's number; the file is left as it is."""
    path = Path(path)
    if not os.path.lexists(path):
        return []
    text = read_text(path, BatchError, "results")
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
        problem = check(data) if check is not None else None
        if problem is not None:
            raise BatchError(f"{path}:{n}: {problem}")
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
        try:
            self._file.write((result.line() + "\n").encode("utf-8"))
            self._file.flush()
        except OSError as exc:  # a full disk: the tasks before this one are kept
            raise BatchError(f"cannot write results {self.path}: {exc.strerror or exc}") from None

    def close(self) -> None:
        try:
            self._file.close()
        except OSError:
            pass  # the line its flush fails on was refused by write, which said so


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


def is_failed(line: dict) -> bool:
    """What `retry_failed` runs again: a task whose result failed (an eval: whose run ended
    on an error of the eval)."""
    return line["status"] == FAILED


def began(line: dict) -> list[dict]:
    """The `once` calls the line's run began (`RunResult.once`: key, tool and how each
    ended), which running its task again would make a second time."""
    return (line.get("extra") or {}).get("once") or []


def to_retry(previous: list[dict], force: bool = False,
             failed: Callable[[dict], bool] = is_failed) -> set[str]:
    """The ids whose result `failed`: `retry_failed` drops their lines and runs them again;
    without `force`, not those whose `once` calls began: a new run has new keys, so the
    API's idempotency check cannot stop their effects happening twice."""
    return {r["id"] for r in previous if failed(r) and (force or not began(r))}


def repeats(previous: list[dict], failed: Callable[[dict], bool] = is_failed
            ) -> dict[str, list[dict[str, Any]]]:
    """What running the `failed` results of `previous` again would repeat, by id: each
    `once` call its run began (`began`). `to_retry` leaves these without `force`."""
    return {r["id"]: began(r) for r in previous if failed(r) and began(r)}


def to_run(tasks: list[Task], previous: list[dict], retry_failed: bool = False,
           force: bool = False) -> list[Task]:
    """The tasks a batch runs: those without a line in `previous` (failed ones count as
    without, with `retry_failed`; those whose `once` calls began only with `force` too)."""
    done = {r["id"] for r in previous} - (to_retry(previous, force) if retry_failed else set())
    return [t for t in tasks if t.id not in done]


def summarize(tasks: list[Task], results: list[dict], ran: int = 0,
              seconds: float = 0.0) -> BatchSummary:
    ids = {t.id for t in tasks}
    mine = {r["id"]: r for r in results if r["id"] in ids}.values()
    secs = [r.get("seconds") or 0.0 for r in mine]
    oks = [r["ok"] for r in mine if r.get("ok") is not None]
    tokens = sum((r.get("usage") or {}).get("prompt_tokens", 0)
                 + (r.get("usage") or {}).get("completion_tokens", 0) for r in mine)
    used = Usage()
    for r in mine:
        used.add(Usage.model_validate(r.get("usage") or {}))
    return BatchSummary(total=len(tasks), ran=ran, counts=dict(Counter(r["status"] for r in mine)),
                        missing=len(ids) - len(mine),
                        median_seconds=statistics.median(secs) if secs else None,
                        total_tokens=tokens, cost=None if used.empty() else used.cost,
                        ok_rate=sum(oks) / len(oks) if oks else None,
                        seconds=round(seconds, 3))

