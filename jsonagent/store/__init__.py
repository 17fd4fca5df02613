"""Where runs are kept: the `Store` protocol, and who owns a running run.

SQLite (`store.sqlite`) is the embedded default, at `$JSONAGENT_HOME/jsonagent.db`.
PostgreSQL (`store.postgres`) is the store several processes and machines share: any of
them lists, reads and streams every run, and a run whose node died is taken over. The
protocol is the one seam: claiming queued work, heartbeats and live news are its methods,
so no caller writes SQL.
"""

from __future__ import annotations

import os
import socket
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Protocol

from ..calls import Call
from ..errors import SessionBusy
from ..home import home
from ..state import RunState
from ..status import Reason


__all__ = ["Store", "open_store", "RunInfo", "SessionInfo", "Owner"]
"""The names a store's user needs; sqlite.SQLiteStore and postgres.PostgresStore implement Store."""

STORE_ENV = "JSONAGENT_STORE"
NODE_ENV = "JSONAGENT_NODE_ID"


def node_id() -> str:
    """This node's id: `$JSONAGENT_NODE_ID`, else one made up once and kept in the home.
    Not the host name: that repeats across containers."""
    configured = os.environ.get(NODE_ENV, "").strip()
    if configured:
        return configured
    path = home() / "node-id"
    try:
        return path.read_text().strip() or _new_node_id(path)
    except OSError:
        return _new_node_id(path)


def _new_node_id(path: Path) -> str:
    made = f"node-{uuid.uuid4().hex[:12]}"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(made + "\n")
    except OSError:
        pass  # a read-only home: this process's id is new each time, which is still unique
    return made


@dataclass(frozen=True)
class Owner:
    """The process running a run. On one machine, alive while its pid lives with the same
    start time; elsewhere, while its heartbeat is recent."""

    pid: int
    host: str
    started: float
    node: str = ""

    @classmethod
    def me(cls) -> Owner:
        return cls(os.getpid(), socket.gethostname(), _started(os.getpid()) or 0.0, node_id())

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

    def next_run(self) -> RunInfo | None:
        """Claim a server's next run for this process, atomically across every process that
        shares the store: one whose driver died first (taken over from its checkpoint), then
        the oldest queued one. None when there is nothing to do."""

    def drive(self, run_id: str, stop: Callable[[str], None]) -> Callable[[], None]:
        """This process drives `run_id` until the returned function is called: keep its
        heartbeat, and call `stop(reason)` when another process asks to cancel it
        (`request_cancel`) or has taken it over."""

    def request_cancel(self, run_id: str, reason: str = Reason.CANCELLED) -> bool:
        """Ask the process driving `run_id` to stop it; False when no live process does."""

    def decide(self, run_id: str, decision: dict[str, Any]) -> bool:
        """Queue a waiting run again with a person's decision, once."""

    def end_run(self, run_id: str, status: str, error: str, only_from: tuple[str, ...]) -> bool:
        """End a run that no process runs (cancelled while queued or waiting, expired)."""

    def record(self, event: Any, state: RunState) -> None:
        """Append an event; at a step boundary, also checkpoint the state."""

    # -- the call log (calls.py) --------------------------------------------------------------

    def call_started(self, call: Call, state: RunState) -> Call:
        """Record a tool call before it runs, and checkpoint `state` (its step in flight)
        with it: a run resumed or taken over goes on from this call, and never asks the
        model for the step again. The first record of a key wins: the call returned is the
        one recorded, so a key always stays with the same tool and arguments. Raises
        Conflict when this process no longer drives the run (another node took it over)."""

    def calls_started(self, calls: list[Call], state: RunState) -> None:
        """As `call_started`, for the calls of a step that start together: one checkpoint."""

    def call_ended(self, key: str, result: Any, error: bool) -> None:
        """Record what the call returned (JSON data), once: it is never run again."""

    def call(self, key: str) -> Call | None:
        """The call recorded under `key`, if any."""

    def calls(self, run_id: str) -> list[Call]:
        """The run's calls, in the order of their steps."""

    def release(self, run_id: str) -> None:
        """Let go of a run this process drives, at its checkpoint, so that another process
        takes it over at once instead of after a missed heartbeat (a node that stops)."""

    def on_queued(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Call `callback()`, from any thread, whenever a run is queued or answered (in any
        process sharing the store): there is work to claim. Returns the function that stops
        it."""

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

    def put_item(self, kind: str, key: str, value: str) -> None:
        """Keep a small document for the front ends (an A2A task), shared like the runs."""

    def add_item(self, kind: str, key: str, value: str) -> str:
        """Keep `value` unless the key holds one already; the value it holds now. Of two
        nodes adding the same key at once, one wins, and both are told which."""

    def get_item(self, kind: str, key: str) -> str | None: ...

    def items(self, kind: str) -> list[str]: ...

    def delete_item(self, kind: str, key: str) -> None: ...

    def close(self) -> None: ...


def resume_command(run_id: str, pending: dict | None) -> str:
    """The exact command that answers a paused run."""
    if pending and pending.get("items"):
        said = {"approval": "approve|deny", "once": "happened|again|fail", "question": "TEXT"}
        return f"jsonagent resume {run_id} " + " ".join(
            f"--item {item['id']}={said[item['kind']]}" for item in pending["items"])
    if pending and pending.get("kind") == "approval":
        return f"jsonagent resume {run_id} --approve   (or --deny --reason TEXT)"
    if pending and pending.get("kind") == "once":
        return f"jsonagent resume {run_id} --answer happened   (or again, or fail)"
    return f"jsonagent resume {run_id} --answer TEXT"


def default_path() -> Path:
    return home() / "jsonagent.db"


def default_store() -> str:
    """Where runs go unless told otherwise: `$JSONAGENT_STORE`, else the home's SQLite file."""
    return os.environ.get(STORE_ENV, "").strip() or str(default_path())


def is_url(where: str | Path) -> bool:
    return isinstance(where, str) and where.startswith(("postgresql://", "postgres://"))


def open_store(where: str | Path | None = None, takeover_after: float | None = None) -> Store:
    """A store from a PostgreSQL URL (`postgresql://user:pass@host/db`), a SQLite path (or
    `sqlite:///path`), or by default `default_store()`. `takeover_after`: seconds without a
    heartbeat after which another node takes a run over (PostgreSQL; 15 by default)."""
    where = where or default_store()
    if is_url(where):
        from .postgres import PostgresStore

        return PostgresStore(str(where), takeover_after)
    if isinstance(where, str) and where.startswith("sqlite://"):
        where = where.removeprefix("sqlite://")
    from .sqlite import SQLiteStore

    return SQLiteStore(where)
