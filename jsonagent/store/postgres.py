"""The PostgreSQL store: the `Store` that several processes and machines share.

What SQLite does with one file and process ids, this does with the database:
- a session's runs are serialized by locking its row, and a unique index keeps one active
  run per session whatever a node does;
- a queued run is claimed by one worker across every node (`FOR UPDATE SKIP LOCKED`);
- a driven run has a heartbeat, on the database's clock; a run whose heartbeat stopped has
  lost its node, and another node takes it over from its checkpoint within `takeover_after`;
- each claim has a token (`claim`), and every write of a run checks it, so a node that lost
  a run (it was taken over while the node was cut off) can never write to it again, and a
  process never takes over its own (a second worker would share the first one's token);
- every event is written as it happens, with a NOTIFY, so that any node streams any run live.
"""

from __future__ import annotations

import json
import uuid
from typing import Any, Callable

from ..errors import ConfigError, Conflict, Held, SessionBusy
from ..state import RunState
from ..status import INTERRUPTED, NEEDS_HUMAN, QUEUED, RESUMABLE, RUNNING, Reason
from . import Owner, RunInfo, SessionInfo
from .driven import Driven
from .call_log import CallLog
from .news import News, Told
from .pg_link import CHANNEL, NOW, Link, Listener
from .rows import (CHECKPOINTS, SUB_SESSIONS_HIDDEN, claimed, ended, owner_json, run_info,
                   session_info, Throttle, waiting_message)

TAKEOVER_AFTER = 15.0
"""Seconds within which a run whose node died is taken over by another node."""


class PostgresStore(CallLog, Told):
    MARK = "%s"

    def __init__(self, url: str, takeover_after: float | None = None, pool_size: int = 16):
        self.link = Link(url, pool_size)
        self.path = self.where = self.link.where
        self.takeover_after = takeover_after or TAKEOVER_AFTER
        # a node beats for its runs ten times in that time (at most once a second), and a run
        # is stale after three quarters of it: with the quarter left, another node's next
        # look for work (LOOK_S) still falls within the promise
        beat = min(1.0, self.takeover_after / 10)
        self.stale_after = 0.75 * self.takeover_after
        self.me = Owner.me()
        self._claims: dict[str, str] = {}  # run id -> the token of this process's claim
        self._listener: Listener | None = None
        self.news = News(on_first=self._hear_others)
        self._driven = Driven(self._beat, beat, "jsonagent-store-beat")
        self._throttle = Throttle()

    def _stale(self, table: str = "") -> str:
        """SQL true for a running run whose driver stopped beating."""
        t = f"{table}." if table else ""
        return (f"({t}status = '{RUNNING}' AND ({t}heartbeat_at IS NULL OR {t}heartbeat_at < "
                f"{NOW} - {float(self.stale_after)}))")

    def _live(self, row: dict[str, Any]) -> str:
        return INTERRUPTED if row.get("stale") else row["status"]

    def _notify(self, db: Any, payload: str) -> None:
        db.execute("SELECT pg_notify(%s, %s)", (CHANNEL, payload))

    # -- sessions -------------------------------------------------------------------------------

    def open_session(self, name: str | None) -> str:
        def work(db: Any) -> str:
            if name is not None:
                row = db.execute("SELECT id FROM sessions WHERE name = %s OR id = %s",
                                 (name, name)).fetchone()
                if row:
                    return row["id"]
            sid = f"ses_{uuid.uuid4().hex[:16]}"
            inserted = db.execute(f"INSERT INTO sessions VALUES (%s, %s, {NOW}, {NOW}) "
                                  "ON CONFLICT (name) DO NOTHING RETURNING id", (sid, name))
            row = inserted.fetchone() or db.execute(  # another node made it just now
                "SELECT id FROM sessions WHERE name = %s", (name,)).fetchone()
            return row["id"]

        return self.link.call(work)

    def find_session(self, name_or_id: str) -> SessionInfo | None:
        found = self._sessions("WHERE s.name = %s OR s.id = %s", (name_or_id, name_or_id))
        return found[0] if found else None

    def sessions(self) -> list[SessionInfo]:
        return self._sessions(SUB_SESSIONS_HIDDEN)

    def _sessions(self, where: str = "", args: tuple = ()) -> list[SessionInfo]:
        rows = self.link.call(lambda db: db.execute(f"""
            SELECT s.id, s.name, s.created_at, s.updated_at,
                   (SELECT COUNT(*) FROM runs WHERE session_id = s.id) AS runs,
                   l.id AS last_run, l.status, {self._stale('l')} AS stale
            FROM sessions s LEFT JOIN runs l ON l.id = (
                SELECT id FROM runs WHERE session_id = s.id
                ORDER BY created_at DESC, n DESC LIMIT 1)
            {where} ORDER BY s.updated_at DESC""", args).fetchall())
        return [session_info(r, r["status"] and self._live(r)) for r in rows]

    def delete_session(self, session_id: str) -> None:
        def work(db: Any) -> None:
            row = db.execute(f"SELECT id FROM runs WHERE session_id = %s AND status = %s AND "
                             f"NOT {self._stale()} LIMIT 1", (session_id, RUNNING)).fetchone()
            if row:
                raise SessionBusy(f"run {row['id']} of this session is running; stop it first")
            db.execute("DELETE FROM sessions WHERE id = %s", (session_id,))

        self.link.call(work)

    # -- claiming runs ----------------------------------------------------------------------------

    def start_run(self, session_id: str, build: Callable[[RunState | None], RunState],
                  wait_s: float = 5.0, queued: bool = False) -> RunState:
        def claim(db: Any) -> RunState:
            db.execute("SELECT id FROM sessions WHERE id = %s FOR UPDATE", (session_id,))
            for row in db.execute(f"SELECT id, status, state, {self._stale()} AS stale "
                                  "FROM runs WHERE session_id = %s AND status IN (%s, %s, %s)",
                                  (session_id, RUNNING, QUEUED, NEEDS_HUMAN)).fetchall():
                if row["status"] == RUNNING:
                    self._check_gone(db, row)
                elif row["status"] == QUEUED:
                    raise SessionBusy(f"this session's run {row['id']} is queued; wait for it")
                else:
                    raise SessionBusy(waiting_message(row["id"], row["state"]),
                                      waiting=row["id"])
            last = db.execute("SELECT state FROM runs WHERE session_id = %s "
                              "ORDER BY created_at DESC, n DESC LIMIT 1", (session_id,)).fetchone()
            state = build(RunState.model_validate_json(last["state"]) if last else None)
            token = None if queued else uuid.uuid4().hex
            db.execute(f"INSERT INTO runs (id, session_id, status, question, created_at, "
                       f"updated_at, owner, heartbeat_at, claim, state, served, parent_run_id, "
                       f"depth) VALUES (%s, %s, %s, %s, {NOW}, {NOW}, %s, {NOW}, %s, %s, %s, %s, "
                       f"%s)",
                       (state.run_id, session_id, QUEUED if queued else state.status,
                        state.question, owner_json(self.me), token, state.model_dump_json(),
                        queued, state.parent_run_id, state.depth))
            db.execute(f"UPDATE sessions SET updated_at = {NOW} WHERE id = %s", (session_id,))
            if queued:
                self._notify(db, "q:")  # idle nodes look for work
            if token:
                self._claims[state.run_id] = token
            return state

        return self.link.claim(claim, wait_s)

    def claim_run(self, run_id: str, wait_s: float = 5.0) -> RunState:
        def claim(db: Any) -> RunState:
            row = db.execute(f"SELECT session_id, status, state, created_at, n, "
                             f"{self._stale()} AS stale FROM runs WHERE id = %s FOR UPDATE",
                             (run_id,)).fetchone()
            if row is None:
                raise ConfigError(f"no run {run_id} in the PostgreSQL store at {self.where}")
            if row["status"] == RUNNING:
                self._check_gone(db, row | {"id": run_id})
            elif row["status"] not in RESUMABLE:
                raise ConfigError(f"run {run_id} has ended ({row['status']}); there is nothing "
                                  "to resume")
            newer = db.execute("SELECT id FROM runs WHERE session_id = %s AND (created_at, n) > "
                               "(%s, %s) LIMIT 1",
                               (row["session_id"], row["created_at"], row["n"])).fetchone()
            if newer:
                raise ConfigError(f"run {run_id} is not its session's last run ({newer['id']} "
                                  "came after it); resuming it would fork the conversation")
            return self._take(db, run_id, row["state"], row["status"])

        return self.link.claim(claim, wait_s)

    def next_run(self) -> RunInfo | None:
        def claim(db: Any) -> RunInfo | None:
            row = db.execute(f"""
                SELECT r.*, s.name FROM runs r JOIN sessions s ON s.id = r.session_id
                WHERE r.served AND (r.status = %s OR {self._stale('r')}) AND r.id <> ALL(%s)
                ORDER BY r.status = %s, r.created_at, r.n LIMIT 1 FOR UPDATE OF r SKIP LOCKED""",
                (QUEUED, list(self._claims), QUEUED)).fetchone()
            if row is None:
                return None
            info = run_info(row, RUNNING)
            info.state = self._take(db, row["id"], row["state"], row["status"])
            return info

        return self.link.call(claim)

    def _take(self, db: Any, run_id: str, text: str, status: str) -> RunState:
        """The run is this process's from now on: a new claim token fences off whoever drove
        it before. Its events go on after the last one stored, even one written after the
        checkpoint by a node that died."""
        token = uuid.uuid4().hex
        top = db.execute(f"UPDATE runs SET status = %s, owner = %s, claim = %s, heartbeat_at = "
                         f"{NOW}, cancel_requested = NULL WHERE id = %s RETURNING "
                         "(SELECT MAX(seq) FROM events WHERE run_id = %s) AS seq",
                         (RUNNING, owner_json(self.me), token, run_id, run_id)).fetchone()["seq"]
        state = claimed(text, status)
        state.seq = max(state.seq, top or 0)
        self._claims[run_id] = token
        return state

    def _check_gone(self, db: Any, row: dict[str, Any]) -> None:
        if not row["stale"]:
            raise Held(f"run {row['id']} is running (its node still beats)")
        db.execute("UPDATE runs SET status = %s WHERE id = %s", (INTERRUPTED, row["id"]))

    def decide(self, run_id: str, decision: dict[str, Any]) -> bool:
        def work(db: Any) -> bool:
            done = db.execute(f"UPDATE runs SET status = %s, decision = %s, updated_at = {NOW} "
                              "WHERE id = %s AND status = %s",
                              (QUEUED, json.dumps(decision), run_id, NEEDS_HUMAN)).rowcount == 1
            if done:
                self._notify(db, "q:")
            return done

        return self.link.call(work)

    def end_run(self, run_id: str, status: str, error: str, only_from: tuple[str, ...]) -> bool:
        def work(db: Any) -> bool:
            row = db.execute(f"SELECT status, state, {self._stale()} AS stale FROM runs "
                             "WHERE id = %s FOR UPDATE", (run_id,)).fetchone()
            if row is None or row["status"] not in only_from:
                return False
            if row["status"] == RUNNING and not row["stale"]:
                return False  # its node beats: ask it (request_cancel)
            state, end = ended(row["state"], run_id, status, error)
            top = db.execute("SELECT MAX(seq) AS seq FROM events WHERE run_id = %s",
                             (run_id,)).fetchone()["seq"] or 0
            end.seq = state.seq = max(state.seq, top + 1)
            db.execute("INSERT INTO events VALUES (%s, %s, %s, %s, %s)",
                       (run_id, end.seq, end.type, end.t, end.to_json()))
            db.execute(f"UPDATE runs SET state = %s, status = %s, updated_at = {NOW}, "
                       "decision = NULL, claim = NULL WHERE id = %s",
                       (state.model_dump_json(), status, run_id))
            self._notify(db, f"e:{run_id}")
            return True

        return self.link.call(work)

    # -- driving --------------------------------------------------------------------------------

    def record(self, event: Any, state: RunState) -> None:
        """Every event is written at once (any node streams it); the state at a checkpoint,
        but some mid-step results only (rows.Throttle); each write checks this process's
        claim: a run taken over raises Conflict here."""
        row = (event.run_id, event.seq, event.type, event.t, event.to_json())

        def work(db: Any) -> None:
            self._throttle.write(event, state, lambda check: self._checkpoint(db, state, check))
            db.execute("INSERT INTO events VALUES (%s, %s, %s, %s, %s) "
                       "ON CONFLICT (run_id, seq) DO NOTHING", row)  # a retried write
            self._notify(db, f"e:{event.run_id}")

        self._write(work)

    def _checkpoint(self, db: Any, state: RunState, only_check: bool = False) -> None:
        """The state, if this process still holds the run's claim (a node that lost the run
        never writes to it, nor starts its tools); Conflict otherwise."""
        token = self._claims.get(state.run_id)
        fence = db.execute("SELECT 1 FROM runs WHERE id = %s AND claim = %s FOR SHARE", (
            state.run_id, token)) if only_check else db.execute(
            f"UPDATE runs SET state = %s, status = %s, updated_at = {NOW}, heartbeat_at = {NOW} "
            "WHERE id = %s AND claim = %s", (state.model_dump_json(), state.status,
                                            state.run_id, token))
        if fence.rowcount != 1:
            raise Conflict(f"run {state.run_id} was taken over by another node; this one "
                           "let it go")

    def _write(self, work: Callable[[Any], Any]) -> Any:
        # a run in flight waits out a database restart, up to the time a takeover takes
        return self.link.call(work, patience=self.takeover_after)

    def release(self, run_id: str) -> None:
        """No claim and no heartbeat: stale at once, and the nodes are told to look."""
        self._claims.pop(run_id, None)  # by owner: its driving may have ended here already

        def work(db: Any) -> None:
            db.execute("UPDATE runs SET heartbeat_at = NULL, claim = NULL WHERE id = %s AND "
                       "owner = %s AND status = %s", (run_id, owner_json(self.me), RUNNING))
            self._notify(db, "q:")
        self.link.call(work)

    def drive(self, run_id: str, stop: Callable[[str], None]) -> Callable[[], None]:
        release = self._driven.add(run_id, stop)

        def done() -> None:
            release()
            self._claims.pop(run_id, None)

        return done

    def _beat(self, run_ids: list[str]) -> dict[str, str]:
        """One statement a second for all the runs this process drives: their heartbeat, and
        what to stop (a cancel asked on another node; a run taken over)."""
        tokens = [self._claims.get(r, "") for r in run_ids]

        def work(db: Any) -> dict[str, str]:
            rows = db.execute(f"""
                UPDATE runs r SET heartbeat_at = {NOW}
                FROM unnest(%s::text[], %s::text[]) AS mine(id, claim)
                WHERE r.id = mine.id AND r.claim = mine.claim
                RETURNING r.id, r.cancel_requested""", (run_ids, tokens)).fetchall()
            return {r["id"]: r["cancel_requested"] for r in rows}

        beating = self.link.call(work, patience=0)
        stop = {r: Reason.TAKEN_OVER for r in run_ids if r not in beating}
        stop.update({r: why for r, why in beating.items() if why})
        return stop

    def request_cancel(self, run_id: str, reason: str = Reason.CANCELLED) -> bool:
        def work(db: Any) -> bool:
            asked = db.execute(f"UPDATE runs SET cancel_requested = %s WHERE id = %s AND "
                               f"status = %s AND NOT {self._stale()}",
                               (reason, run_id, RUNNING)).rowcount == 1
            if asked:
                self._notify(db, f"c:{run_id}")
            return asked

        asked = self.link.call(work)
        if asked:
            self._driven.poke()
        return asked

    def _hear_others(self) -> None:
        """One LISTEN connection a store object, opened with the first subscriber."""
        self._listener = Listener(self.link, self._deliver)

    def _deliver(self, payload: str | None) -> None:
        """News from any node: `e:RUN` new events, `q:` work queued, `c:RUN` a cancel asked;
        None after a reconnect, when news may have been missed."""
        kind, _, run_id = (payload or "").partition(":")
        if kind == "c" and run_id in self._claims:
            self._driven.poke()
        if kind in ("q", ""):
            self.news.queued()
        if kind in ("e", ""):
            self.news.events(run_id)

    # -- reading --------------------------------------------------------------------------------

    def _select(self, where: str, args: tuple, tail: str = "") -> list[dict[str, Any]]:
        return self.link.call(lambda db: db.execute(
            f"SELECT r.*, s.name, {self._stale('r')} AS stale FROM runs r "
            f"JOIN sessions s ON s.id = r.session_id {where} {tail}", args).fetchall())

    def load_run(self, run_id: str) -> RunInfo:
        rows = self._select("WHERE r.id = %s", (run_id,))
        if not rows:
            raise ConfigError(f"no run {run_id} in the PostgreSQL store at {self.where}")
        return run_info(rows[0], self._live(rows[0]))

    def last_run(self, session_id: str) -> RunState | None:
        rows = self._items("SELECT state FROM runs WHERE session_id = %s ORDER BY created_at "
                           "DESC, n DESC LIMIT 1", (session_id,))
        return RunState.model_validate_json(rows[0]["state"]) if rows else None

    def sub_runs(self, run_id: str) -> list[RunInfo]:
        rows = self._select("WHERE r.parent_run_id = %s", (run_id,), "ORDER BY r.created_at, r.n")
        return [run_info(r, self._live(r)) for r in rows]

    def runs(self, session_id: str | None = None, status: str | tuple[str, ...] | None = None,
             limit: int = 50, offset: int = 0, served: bool | None = None) -> list[RunInfo]:
        wanted = (status,) if isinstance(status, str) else tuple(status or ())
        where, args = [], []
        if session_id:
            where.append("r.session_id = %s")
            args.append(session_id)
        if wanted:  # an interrupted run may be stored as running (its node died)
            live = f"(CASE WHEN {self._stale('r')} THEN '{INTERRUPTED}' ELSE r.status END)"
            where.append(f"{live} = ANY(%s)")
            args.append(list(wanted))
        if served is not None:
            where.append("r.served = %s")
            args.append(served)
        rows = self._select("WHERE " + " AND ".join(where) if where else "", tuple(args),
                            f"ORDER BY r.created_at DESC, r.n DESC LIMIT {int(limit)} "
                            f"OFFSET {int(offset)}")
        return [run_info(r, self._live(r)) for r in rows]

    def events(self, run_id: str | None = None, session_id: str | None = None,
               after: int = 0) -> list[dict[str, Any]]:
        sql, args = ("SELECT data FROM events WHERE run_id = %s AND seq > %s ORDER BY seq",
                     (run_id, after)) if run_id is not None else (
            "SELECT e.data FROM events e JOIN runs r ON r.id = e.run_id WHERE "
            "r.session_id = %s ORDER BY r.created_at, r.n, e.seq", (session_id,))
        rows = self.link.call(lambda db: db.execute(sql, args).fetchall())
        return [json.loads(r["data"]) for r in rows]

    def _items(self, sql: str, args: tuple) -> list[dict[str, Any]]:
        def work(db: Any) -> list[dict[str, Any]]:
            cur = db.execute(sql, args)
            return cur.fetchall() if cur.description else []

        return self.link.call(work)

    def close(self) -> None:
        self._driven.close()
        if self._listener is not None:
            self._listener.close()
        self.link.close()
