"""The SQLite store: sessions, runs (a checkpoint of each run's state) and an append-only
events table, in one file with WAL, so readers never block the run that writes."""

from __future__ import annotations

import json
import sqlite3
import threading
import time
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

from ..errors import ConfigError, Held
from ..state import RunState
from ..status import INTERRUPTED, NEEDS_HUMAN, QUEUED, RESUMABLE, RUNNING, Reason
from . import Owner, RunInfo, SessionBusy, SessionInfo
from .driven import Driven
from .call_log import CallLog
from .news import News, Told
from .migrations import MIGRATIONS, MIGRATIONS_TABLE
from .rows import (CHECKPOINTS, SUB_SESSIONS_HIDDEN, claimed, ended, owner,
                   owner_json, run_info, session_info, Throttle, waiting_message)

CANCEL_LOOK_S = 0.5
"""How often a process looks for cancels asked of the runs it drives by other processes."""


class SQLiteStore(CallLog, Told):
    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._lock = threading.RLock()  # one connection, shared by the threads of a server
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(self.path, timeout=10, isolation_level=None,
                                       check_same_thread=False)
            tables = {r[0] for r in self._db.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table'")}
        except sqlite3.DatabaseError as exc:
            raise ConfigError(f"{self.path}: not a usable jsonagent database ({exc}); it was left "
                              "as it is: move it away or pick another JSONAGENT_HOME") from None
        except OSError as exc:
            raise ConfigError(f"{self.path}: cannot open the store: {exc.strerror or exc}") from None
        self._migrate(tables)
        self.me = Owner.me()
        self._pending: dict[str, list[tuple]] = {}  # each run's events since its checkpoint
        self._throttle = Throttle()
        self.news = News()  # told of this object's own writes; others' are seen by looking
        self._driven = Driven(self._cancels_asked, CANCEL_LOOK_S, "jsonagent-store-cancels")

    # -- schema -------------------------------------------------------------------------------

    def _migrate(self, tables: set[str]) -> None:
        db = self._db
        if tables and MIGRATIONS_TABLE not in tables:
            shown = ", ".join(sorted(tables)[:5])
            raise ConfigError(f"{self.path}: not a jsonagent database (it holds other tables: "
                              f"{shown}); it was left as it is")
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")  # WAL + NORMAL: a killed process loses nothing
        db.execute("PRAGMA foreign_keys=ON")
        with self._tx():
            db.execute(f"CREATE TABLE IF NOT EXISTS {MIGRATIONS_TABLE} "
                       "(version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at REAL NOT NULL)")
            done = {r[0] for r in db.execute(f"SELECT version FROM {MIGRATIONS_TABLE}")}
            if done and max(done) > len(MIGRATIONS):
                raise ConfigError(f"{self.path}: made by a newer jsonagent (schema version "
                                  f"{max(done)}, this one knows {len(MIGRATIONS)})")
            for version, migration in enumerate(MIGRATIONS, start=1):
                if version not in done:
                    migration(db)
                    db.execute(f"INSERT INTO {MIGRATIONS_TABLE} VALUES (?, ?, ?)",
                               (version, migration.__name__, time.time()))

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        """One write transaction, taken up front so that concurrent writers queue."""
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def _read(self, sql: str, args: tuple = ()) -> list[dict[str, Any]]:
        with self._lock:
            cur = self._db.execute(sql, args)
            names = [d[0] for d in cur.description]
            return [dict(zip(names, row)) for row in cur.fetchall()]

    # -- sessions -------------------------------------------------------------------------------

    def open_session(self, name: str | None) -> str:
        now = time.time()
        with self._tx() as db:
            if name is not None:
                row = db.execute("SELECT id FROM sessions WHERE name = ? OR id = ?",
                                 (name, name)).fetchone()
                if row:
                    return row[0]
            sid = f"ses_{uuid.uuid4().hex[:16]}"
            db.execute("INSERT INTO sessions VALUES (?, ?, ?, ?)", (sid, name, now, now))
            return sid

    def find_session(self, name_or_id: str) -> SessionInfo | None:
        found = self._sessions("WHERE s.name = ? OR s.id = ?", (name_or_id, name_or_id))
        return found[0] if found else None

    def sessions(self) -> list[SessionInfo]:
        return self._sessions(SUB_SESSIONS_HIDDEN)

    def _sessions(self, where: str = "", args: tuple = ()) -> list[SessionInfo]:
        """Sessions with their run count and last run, from the indexed columns alone."""
        rows = self._read(f"""
            SELECT s.id, s.name, s.created_at, s.updated_at,
                   (SELECT COUNT(*) FROM runs WHERE session_id = s.id) AS runs,
                   l.id AS last_run, l.status, l.owner, l.heartbeat_at
            FROM sessions s LEFT JOIN runs l ON l.id = (
                SELECT id FROM runs WHERE session_id = s.id
                ORDER BY created_at DESC, rowid DESC LIMIT 1)
            {where} ORDER BY s.updated_at DESC""", args)
        return [session_info(r, r["status"] and self._live(r)) for r in rows]

    @staticmethod
    def _live(row: dict[str, Any]) -> str:
        """A run's status, where a running run whose process died is interrupted."""
        if row["status"] == RUNNING and not owner(row["owner"]).alive(row["heartbeat_at"]):
            return INTERRUPTED
        return row["status"]

    def delete_session(self, session_id: str) -> None:
        with self._tx() as db:
            for run_id, status, who, beat in db.execute(
                    "SELECT id, status, owner, heartbeat_at FROM runs WHERE session_id = ?",
                    (session_id,)).fetchall():
                if status == RUNNING and owner(who).alive(beat):
                    raise SessionBusy(f"run {run_id} of this session is running; stop it first")
            db.execute("DELETE FROM sessions WHERE id = ?", (session_id,))

    # -- runs -----------------------------------------------------------------------------------

    def start_run(self, session_id: str, build: Callable[[RunState | None], RunState],
                  wait_s: float = 5.0, queued: bool = False) -> RunState:
        def claim(db: sqlite3.Connection) -> RunState:
            rows = db.execute("SELECT id, status, owner, heartbeat_at, state FROM runs "
                              "WHERE session_id = ? ORDER BY created_at DESC, rowid DESC",
                              (session_id,)).fetchall()
            for run_id, status, who, beat, text in rows:
                if status == RUNNING:
                    self._check_gone(db, run_id, who, beat)
                elif status == QUEUED:
                    raise SessionBusy(f"this session's run {run_id} is queued; wait for it")
                elif status == NEEDS_HUMAN:
                    raise SessionBusy(waiting_message(run_id, text), waiting=run_id)
            last = RunState.model_validate_json(rows[0][4]) if rows else None
            state = build(last)
            now = time.time()
            db.execute("INSERT INTO runs (id, session_id, status, question, created_at, "
                       "updated_at, owner, heartbeat_at, state, served, parent_run_id, depth) "
                       "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                       (state.run_id, session_id, QUEUED if queued else state.status,
                        state.question, now, now, owner_json(self.me), now,
                        state.model_dump_json(), int(queued), state.parent_run_id, state.depth))
            db.execute("UPDATE sessions SET updated_at = ? WHERE id = ?", (now, session_id))
            return state

        state = self._retry(claim, wait_s)
        if queued:
            self.news.queued()
        return state

    def claim_run(self, run_id: str, wait_s: float = 5.0) -> RunState:
        def claim(db: sqlite3.Connection) -> RunState:
            row = db.execute("SELECT session_id, status, owner, heartbeat_at, state FROM runs "
                             "WHERE id = ?", (run_id,)).fetchone()
            if row is None:
                raise ConfigError(f"no run {run_id} in {self.path}")
            session_id, status, who, beat, text = row
            if status == RUNNING:
                self._check_gone(db, run_id, who, beat)
            elif status not in RESUMABLE:
                raise ConfigError(f"run {run_id} has ended ({status}); there is nothing to resume")
            newer = db.execute("SELECT id FROM runs WHERE session_id = ? AND created_at > "
                               "(SELECT created_at FROM runs WHERE id = ?) LIMIT 1",
                               (session_id, run_id)).fetchone()
            if newer:
                raise ConfigError(f"run {run_id} is not its session's last run ({newer[0]} came "
                                  "after it); resuming it would fork the conversation")
            self._take(db, run_id)
            return claimed(text, status)

        return self._retry(claim, wait_s)

    def _take(self, db: sqlite3.Connection, run_id: str) -> None:
        db.execute("UPDATE runs SET status = ?, owner = ?, heartbeat_at = ?, "
                   "cancel_requested = NULL WHERE id = ?",
                   (RUNNING, owner_json(self.me), time.time(), run_id))

    def next_run(self) -> RunInfo | None:
        # a look without the write lock first: an idle server looks twice a second
        if not any(r["status"] == QUEUED or not owner(r["owner"]).alive(r["heartbeat_at"])
                   for r in self._read("SELECT status, owner, heartbeat_at FROM runs WHERE "
                                       "served = 1 AND status IN (?, ?)", (RUNNING, QUEUED))):
            return None
        with self._tx() as db:
            rows = db.execute(
                "SELECT r.*, s.name FROM runs r JOIN sessions s ON s.id = r.session_id "
                "WHERE r.served = 1 AND r.status IN (?, ?) "
                "ORDER BY r.status = ?, r.created_at, r.rowid", (RUNNING, QUEUED, QUEUED))
            names = [d[0] for d in rows.description]
            for row in (dict(zip(names, r)) for r in rows.fetchall()):
                if row["status"] == RUNNING and owner(row["owner"]).alive(row["heartbeat_at"]):
                    continue  # driven by a live process
                self._take(db, row["id"])
                info = run_info(row, RUNNING)
                info.state = claimed(row["state"], row["status"])
                return info
        return None

    def drive(self, run_id: str, stop: Callable[[str], None]) -> Callable[[], None]:
        return self._driven.add(run_id, stop)

    def _cancels_asked(self, run_ids: list[str]) -> dict[str, str]:
        marks = ", ".join("?" * len(run_ids))
        rows = self._read(f"SELECT id, cancel_requested FROM runs WHERE id IN ({marks}) "
                          "AND cancel_requested IS NOT NULL", tuple(run_ids))
        return {r["id"]: r["cancel_requested"] for r in rows}

    def request_cancel(self, run_id: str, reason: str = Reason.CANCELLED) -> bool:
        with self._tx() as db:
            row = db.execute("SELECT owner, heartbeat_at FROM runs WHERE id = ? AND status = ?",
                             (run_id, RUNNING)).fetchone()
            if row is None or not owner(row[0]).alive(row[1]):
                return False
            db.execute("UPDATE runs SET cancel_requested = ? WHERE id = ?", (reason, run_id))
        self._driven.poke()
        return True

    def _check_gone(self, db: sqlite3.Connection, run_id: str, text: str | None,
                    beat: float | None) -> None:
        """A running run whose process is alive makes the caller wait; one whose process
        died is marked interrupted, so it can be resumed when someone asks."""
        who = owner(text)
        if who.alive(beat):
            raise Held(f"run {run_id} is running", f"pid {who.pid} on {who.host}")
        db.execute("UPDATE runs SET status = ? WHERE id = ?", (INTERRUPTED, run_id))

    def _retry(self, claim: Callable[[sqlite3.Connection], RunState], wait_s: float) -> RunState:
        deadline = time.monotonic() + wait_s
        while True:
            try:
                with self._tx() as db:
                    return claim(db)
            except Held as exc:
                if time.monotonic() >= deadline:
                    raise SessionBusy(f"session busy: {exc}", holder=exc.holder) from None
                time.sleep(0.05)

    def record(self, event: Any, state: RunState) -> None:
        """Events wait in memory until their run's next checkpoint, then go in one
        transaction with the state: a step costs one transaction, not three."""
        row = (event.run_id, event.seq, event.type, event.t, event.to_json())
        with self._lock:  # runs of a server share this store from several threads
            self._pending.setdefault(event.run_id, []).append(row)
            if event.type not in CHECKPOINTS:
                return
            if self._throttle.skip(event, state):  # with the next result, the step's last,
                self._throttle.later(event.run_id, lambda: self._flush(state))  # or soon
                return
            since = time.perf_counter()
            with self._tx() as db:
                self._checkpoint(db, state)
            self._throttle.wrote(event, state, since)
        self.news.events(event.run_id)

    def _flush(self, state: RunState) -> None:
        """What waits of a run still at a checkpoint (a result held back) goes in now."""
        with self._lock:
            if not (rows := self._pending.get(state.run_id)) or rows[-1][2] not in CHECKPOINTS:
                return  # written already, or mid-reply: its next checkpoint writes it
            with self._tx() as db:
                self._checkpoint(db, state)
        self.news.events(state.run_id)

    def _checkpoint(self, db: sqlite3.Connection, state: RunState) -> None:
        """The run's waiting events and its state (the lock is held)."""
        now = time.time()
        db.executemany("INSERT INTO events VALUES (?, ?, ?, ?, ?)",
                       self._pending.pop(state.run_id, []))
        db.execute("UPDATE runs SET state = ?, status = ?, updated_at = ?, heartbeat_at = ? "
                   "WHERE id = ?", (state.model_dump_json(), state.status, now, now, state.run_id))

    def _write(self, work: Callable[[Any], Any]) -> Any:
        with self._lock, self._tx() as db:
            return work(db)

    def release(self, run_id: str) -> None:
        """No owner and no heartbeat: the next look for work finds it orphaned."""
        with self._tx() as db:
            db.execute("UPDATE runs SET owner = NULL, heartbeat_at = NULL WHERE id = ? AND "
                       "status = ?", (run_id, RUNNING))
        self.news.queued()

    def load_run(self, run_id: str) -> RunInfo:
        rows = self._read("SELECT r.*, s.name FROM runs r JOIN sessions s ON s.id = r.session_id "
                          "WHERE r.id = ?", (run_id,))
        if not rows:
            raise ConfigError(f"no run {run_id} in {self.path}")
        return self._info(rows[0])

    def last_run(self, session_id: str) -> RunState | None:
        rows = self._read("SELECT state FROM runs WHERE session_id = ? "
                          "ORDER BY created_at DESC, rowid DESC LIMIT 1", (session_id,))
        return RunState.model_validate_json(rows[0]["state"]) if rows else None

    def runs(self, session_id: str | None = None, status: str | tuple[str, ...] | None = None,
             limit: int = 50, offset: int = 0, served: bool | None = None) -> list[RunInfo]:
        wanted = (status,) if isinstance(status, str) else tuple(status or ())
        where, args = [], []
        if session_id:
            where.append("r.session_id = ?")
            args.append(session_id)
        # an interrupted run may be stored as running (its process died): read those too
        stored = (*wanted, RUNNING) if INTERRUPTED in wanted else wanted
        if stored:
            where.append(f"r.status IN ({', '.join('?' * len(stored))})")
            args.extend(stored)
        if served is not None:
            where.append("r.served = ?")
            args.append(int(served))
        sql = ("SELECT r.*, s.name FROM runs r JOIN sessions s ON s.id = r.session_id"
               + (" WHERE " + " AND ".join(where) if where else "")
               + " ORDER BY r.created_at DESC, r.rowid DESC")
        if not wanted or INTERRUPTED not in wanted:
            sql += f" LIMIT {int(limit)} OFFSET {int(offset)}"
            return [self._info(r) for r in self._read(sql, tuple(args))]
        infos = [i for i in map(self._info, self._read(sql, tuple(args))) if i.status in wanted]
        return infos[offset:offset + limit]

    def sub_runs(self, run_id: str) -> list[RunInfo]:
        rows = self._read("SELECT r.*, s.name FROM runs r JOIN sessions s ON s.id = r.session_id "
                          "WHERE r.parent_run_id = ? ORDER BY r.created_at, r.rowid", (run_id,))
        return [self._info(r) for r in rows]

    def decide(self, run_id: str, decision: dict[str, Any]) -> bool:
        """Queue a waiting run again with a person's decision; False when it no longer
        waits (each decision is taken once)."""
        with self._tx() as db:
            cur = db.execute("UPDATE runs SET status = ?, decision = ?, updated_at = ? "
                             "WHERE id = ? AND status = ?",
                             (QUEUED, json.dumps(decision), time.time(), run_id, NEEDS_HUMAN))
            decided = cur.rowcount == 1
        if decided:
            self.news.queued()
        return decided

    def end_run(self, run_id: str, status: str, error: str, only_from: tuple[str, ...]) -> bool:
        """End a run no process is running (queued or waiting): its state says why, and a
        last run_end event closes its stream. False when its status is not in `only_from`."""
        with self._tx() as db:
            row = db.execute("SELECT status, state FROM runs WHERE id = ?", (run_id,)).fetchone()
            if row is None or row[0] not in only_from:
                return False
            state, end = ended(row[1], run_id, status, error)
            db.execute("INSERT INTO events VALUES (?, ?, ?, ?, ?)",
                       (run_id, end.seq, end.type, end.t, end.to_json()))
            db.execute("UPDATE runs SET state = ?, status = ?, updated_at = ?, decision = NULL "
                       "WHERE id = ?", (state.model_dump_json(), status, end.t, run_id))
        self.news.events(run_id)
        return True

    def _info(self, row: dict[str, Any]) -> RunInfo:
        return run_info(row, self._live(row))

    def events(self, run_id: str | None = None, session_id: str | None = None,
               after: int = 0) -> list[dict[str, Any]]:
        if run_id is not None:
            with self._lock:  # with the events still waiting for their checkpoint
                rows = self._read("SELECT data FROM events WHERE run_id = ? AND seq > ? "
                                  "ORDER BY seq", (run_id, after))
                rows += [{"data": r[4]} for r in self._pending.get(run_id, []) if r[1] > after]
        else:
            rows = self._read("SELECT e.data FROM events e JOIN runs r ON r.id = e.run_id "
                              "WHERE r.session_id = ? ORDER BY r.created_at, r.rowid, e.seq",
                              (session_id,))
        return [json.loads(r["data"]) for r in rows]

    def _items(self, sql: str, args: tuple) -> list[dict[str, Any]]:
        with self._tx() as db:
            cur = db.execute(sql, args)
            names = [d[0] for d in cur.description or ()]
            return [dict(zip(names, row)) for row in cur.fetchall()]

    def close(self) -> None:
        self._driven.close()
        with self._lock:
            self._db.close()
