"""The supervisor: the `Sandbox` object the agent holds, and the one process tree it drives.

    agent process (this module)
      └── boot      outside the pid namespace; only waits (its exit is the sandbox's exit)
          └── reaper   pid 1 inside; trusted; kills leftovers, mirrors files, reports deaths
              └── worker  pid 2; confined; runs the cells

The tree, its pipes and the poll loop that drives them live in `sandbox.worker_session`;
this module owns the object around them: its settings, its lock, and when a tree is
started again or torn down.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
import warnings
import weakref
from pathlib import Path
from typing import Iterable

from .errors import IsolationUnavailable, IsolationWarning, SandboxClosed, SandboxStartError
from .limits import Limits
from .result import ExecResult, IsolationReport
from .worker_session import WorkerSession

_DISABLEABLE = {"namespaces", "landlock", "seccomp", "rlimits", "capabilities"}
_warned: set[str] = set()


class Sandbox:
    """A persistent, isolated Python interpreter for untrusted code.

    `run` never raises for anything the code does: exceptions, crashes, timeouts and
    protocol forgery all come back as an `ExecResult`. Only the supervisor's own
    failures raise (see `sandbox.errors`).
    """

    def __init__(self, workdir: str | os.PathLike | None = None, timeout: float = 10.0,
                 memory_mb: int = 1024, network: bool = False, persistent: bool = True,
                 output_limit: int = 65536, files: Iterable[str | os.PathLike] = (),
                 require_isolation: bool = False, limits: Limits | None = None,
                 disable: Iterable[str] = ()) -> None:
        if timeout <= 0 or memory_mb < 64 or output_limit < 0:
            raise ValueError("timeout must be > 0, memory_mb >= 64 and output_limit >= 0")
        self.disable = frozenset(disable)
        if self.disable - _DISABLEABLE:
            raise ValueError(f"unknown protections to disable: {sorted(self.disable - _DISABLEABLE)}")
        self.timeout = float(timeout)
        self.memory_mb = int(memory_mb)
        self.network = bool(network)
        self.persistent = bool(persistent)
        self.output_limit = int(output_limit)
        self.require_isolation = bool(require_isolation)
        self.limits = limits or Limits()
        self._lock = threading.Lock()
        self._closed = False
        self._killed = False
        owned = workdir is None
        path = Path(tempfile.mkdtemp(prefix="jsonagent-sandbox-")) if owned else Path(workdir)
        self.workdir: Path = path.resolve()
        # The finalizer holds the process tree and the temp dir, not `self`, so a
        # forgotten sandbox is still cleaned up when collected or at exit.
        self._state: dict = {"session": None, "remove": self.workdir if owned else None}
        self._finalizer = weakref.finalize(self, _release, self._state)
        try:
            self.workdir.mkdir(parents=True, exist_ok=True)
            _copy_in(files, self.workdir)
            self._session = self._start()
        except BaseException:
            self.close()
            raise

    # ---- public ------------------------------------------------------------------------
    @property
    def isolation(self) -> IsolationReport:
        """The protections in force for the current (or last) worker."""
        return self._report

    def run(self, code: str, timeout: float | None = None) -> ExecResult:
        """Execute `code` in the persistent namespace. Safe to call from any one thread at a time."""
        with self._lock:
            if self._closed:
                raise SandboxClosed("this sandbox is closed")
            limit = float(timeout) if timeout is not None else self.timeout
            state_lost, self._killed = self._killed, False
            session = self._session
            if session is not None and not session.healthy():
                session.close()  # it died or was tampered with between calls
                session, state_lost = None, True
            if session is None:
                session = self._session = self._start()
            outcome = session.execute(str(code), limit, self.limits.grace_s)
            if outcome.get("ended") or not self.persistent:
                session.close()
                self._session = None
            if outcome.get("ended") and self.persistent:
                state_lost = True
            outcome.pop("ended", None)
            return ExecResult(state_lost=state_lost, **outcome)

    def kill(self) -> None:
        """Stop the call in progress now, from any thread: the worker and everything it
        started are killed, that call returns, and the next one starts a fresh interpreter
        and reports `state_lost`."""
        session = self._session
        if session is not None:
            self._killed = True
            session.hard_kill()

    def close(self) -> None:
        """Kill the worker and everything it started; remove the workdir if we created it."""
        if self._closed:
            return
        self._closed = True
        if not self._lock.acquire(blocking=False):
            session = self._session
            if session is not None:
                session.hard_kill()  # makes the run in progress on another thread return now
            self._lock.acquire()
        try:
            self._finalizer()
        finally:
            self._lock.release()

    def __enter__(self) -> "Sandbox":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"<Sandbox {state} workdir={str(self.workdir)!r}>"

    # ---- internals ---------------------------------------------------------------------
    @property
    def _session(self) -> "WorkerSession | None":
        return self._state["session"]

    @_session.setter
    def _session(self, value: "WorkerSession | None") -> None:
        self._state["session"] = value

    def _start(self) -> "WorkerSession":
        session = WorkerSession(self)
        try:
            self._report = session.start()
        except BaseException:
            session.close()
            raise
        missing = self._report.missing()
        if missing and self.require_isolation:
            session.close()
            raise IsolationUnavailable(missing, self._report)
        if missing:
            message = ("sandbox running with weaker isolation, missing: " + ", ".join(missing)
                       + "; see `jsonagent sandbox check`")
            if message not in _warned:
                _warned.add(message)
                warnings.warn(message, IsolationWarning, stacklevel=4)
        return session


def _copy_in(files: Iterable[str | os.PathLike], workdir: Path) -> None:
    for item in files:
        src = Path(item)
        try:
            if src.is_dir():
                shutil.copytree(src, workdir / src.name, symlinks=True, dirs_exist_ok=True)
            else:
                shutil.copy2(src, workdir / src.name)
        except OSError as exc:
            raise SandboxStartError(f"cannot copy {src} into the workdir: {exc.strerror or exc}") from None


def _release(state: dict) -> None:
    session, state["session"] = state.get("session"), None
    if session is not None:
        session.close()
    remove, state["remove"] = state.get("remove"), None
    if remove is not None:
        shutil.rmtree(remove, ignore_errors=True)
