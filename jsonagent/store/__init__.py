"""Where runs are kept: the `Store` protocol, and who owns a running run.

SQLite (`store.sqlite`) is the embedded default, at `$JSONAGENT_HOME/jsonagent.db`. The
protocol is small on purpose, so that a store shared by several machines (Postgres) can
implement it too.
"""

from __future__ import annotations

import os
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Protocol

from ..errors import SessionBusy
from ..home import home
from ..state import RunState


@dataclass(frozen=True)
class Owner:
    """The process running a run: alive while its pid lives with the same start time."""

    pid: int
    host: str
    started: float

    @classmethod
    def me(cls) -> Owner:
        return cls(os.getpid(), socket.gethostname(), _started(os.getpid()) or 0.0)

    def alive(self, heartbeat: float | None = None) -> bool:
        if self.host != socket.gethostname():  # another machine: trust a recent heartbeat
            return heartbeat is not None and time.time() - heartbeat < 300
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            pass
        started = _started(self.pid)
        return started is None or not self.started or abs(started - self.started) < 1e-6


def _started(pid: int) -> float | None:
    """The process's start time in clock ticks since boot, so a reused pid is not mistaken
    for the owner (Linux only; None elsewhere)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return float(stat.rsplit(")", 1)[1].split()[19])


@dataclass
class RunInfo:
    id: str
    session_id: str
    session: str | None
    status: str
    """The run's status; `interrupted` when it was running and its process is gone."""
    question: str
    created_at: float
    updated_at: float
    state: RunState | None = None
    served: bool = False
    """A server queued it: a restarted server takes it over."""
    orphaned: bool = False
    """It was running and its process died (its status says interrupted)."""
    decision: dict[str, Any] | None = None
    """A person's answer or approval, queued for a worker (`decide`)."""
    parent_run_id: str | None = None
    """The run whose tool started this one (an agent used as a tool); None at the top."""
    depth: int = 0
    """0 at the top of a tree of runs; a sub-run's parent's depth + 1."""


@dataclass
class SessionInfo:
    id: str
    name: str | None
    created_at: float
    updated_at: float
    runs: int = 0
    last_status: str | None = None
    last_run: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


class Store(Protocol):
    def open_session(self, name: str | None) -> str:
        """The id of the session called `name`, created if need be; None makes a new one."""

    def find_session(self, name_or_id: str) -> SessionInfo | None: ...

    def start_run(self, session_id: str, build: Callable[[RunState | None], RunState],
                  wait_s: float, queued: bool = False) -> RunState:
        """Claim the session for a new run: `build` gets the session's last run and returns
        the new one. Raises SessionBusy while another live process runs one of its runs, or
        one waits. `queued`: a server's run, stored to wait for a worker (`claim_run`)."""

    def claim_run(self, run_id: str, wait_s: float) -> RunState:
        """Take a paused, interrupted or queued run over, to resume (or start) it."""

    def decide(self, run_id: str, decision: dict[str, Any]) -> bool:
        """Queue a waiting run again with a person's decision, once."""

    def end_run(self, run_id: str, status: str, error: str, only_from: tuple[str, ...]) -> bool:
        """End a run that no process runs (cancelled while queued or waiting, expired)."""

    def record(self, event: Any, state: RunState) -> None:
        """Append an event; at a step boundary, also checkpoint the state."""

    def listen(self, callback: Callable[[str], None]) -> Callable[[], None]:
        """Call `callback(run_id)`, from any thread, whenever new events of a run can be
        read; returns the function that stops it. A store shared by several processes says
        so for its own writes at least: a reader still looks again now and then."""

    def load_run(self, run_id: str) -> RunInfo: ...

    def last_run(self, session_id: str) -> RunState | None: ...

    def sub_runs(self, run_id: str) -> list[RunInfo]:
        """The runs started by `run_id`'s tools (agents used as tools), oldest first."""

    def runs(self, session_id: str | None = None, status: str | tuple[str, ...] | None = None,
             limit: int = 50, offset: int = 0, served: bool | None = None) -> list[RunInfo]: ...

    def sessions(self) -> list[SessionInfo]:
        """Every session but a sub-run's own (the one a sub-run's `Session` opens)."""

    def events(self, run_id: str | None = None, session_id: str | None = None,
               after: int = 0) -> list[dict[str, Any]]: ...

    def delete_session(self, session_id: str) -> None: ...

    def close(self) -> None: ...


def resume_command(run_id: str, pending: dict | None) -> str:
    """The exact command that answers a paused run."""
    if pending and pending.get("kind") == "approval":
        return f"jsonagent resume {run_id} --approve   (or --deny --reason TEXT)"
    return f"jsonagent resume {run_id} --answer TEXT"


def default_path() -> Path:
    return home() / "jsonagent.db"


def open_store(path: str | Path | None = None) -> Store:
    from .sqlite import SQLiteStore

    return SQLiteStore(path or default_path())
