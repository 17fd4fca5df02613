"""The PostgreSQL store's link to its database: a pool of connections, calls retried while
the database restarts (said once in the log, and once when it is back), and a listener for
the news other nodes send (`LISTEN`/`NOTIFY`).

Every error that reaches a person is one line naming where the database is, never the
password and never a traceback.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable, TypeVar

from ..errors import ConfigError, Held, SessionBusy, StoreDown
from .pg_schema import SCHEMA, migrate

log = logging.getLogger("jsonagent.store")
T = TypeVar("T")
CHANNEL = "jsonagent"
NOW = "EXTRACT(EPOCH FROM clock_timestamp())"
"""The database's clock: every node reads one clock, whatever its own says."""


def where(url: str) -> str:
    """`host:port/db` of a URL, for messages (no user, no password)."""
    from psycopg.conninfo import conninfo_to_dict

    try:
        parts = conninfo_to_dict(url)
    except Exception:
        return "an unreadable URL"
    host = parts.get("host") or "localhost"
    return f"{host}:{parts.get('port') or 5432}/{parts.get('dbname') or parts.get('user') or ''}"


def first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    line = text[0] if text else type(exc).__name__
    # psycopg says "connection failed: connection to server at ... failed: WHY"
    return line.rsplit("failed: ", 1)[-1] if "failed: " in line else line


class Link:
    def __init__(self, url: str, size: int):
        try:
            import psycopg
            from psycopg.rows import dict_row
            from psycopg_pool import ConnectionPool
        except ImportError:
            raise ConfigError("the PostgreSQL store needs psycopg: "
                              "pip install 'jsonagent[postgres]'") from None
        self.url, self.where = url, where(url)
        self._psycopg = psycopg
        self._lost, self._back_at = False, 0.0  # when it came back (monotonic)
        self._lock = threading.Lock()
        try:  # one plain connection first: a wrong URL or password says so, at once
            with psycopg.connect(url, autocommit=True, connect_timeout=5) as db:
                migrate(db, self.where)
        except psycopg.Error as exc:
            raise ConfigError(f"cannot use the PostgreSQL store at {self.where}: "
                              f"{first_line(exc)}") from None

        def configure(db: Any) -> None:
            db.execute(f"SET search_path TO {SCHEMA}")

        # the pool reconnects by itself after a restart; we say so once, not per attempt
        logging.getLogger("psycopg.pool").setLevel(logging.ERROR)
        # checked on the way out of the pool: after a restart, the old connections are
        # replaced quietly instead of failing one call each
        self.pool = ConnectionPool(url, min_size=1, max_size=size, open=True, timeout=5,
                                   kwargs={"autocommit": True, "row_factory": dict_row,
                                           "connect_timeout": 5},
                                   configure=configure, check=ConnectionPool.check_connection,
                                   name="jsonagent")

    def call(self, work: Callable[[Any], T], patience: float = 5.0) -> T:
        """`work(connection)`, in a transaction, again on a fresh connection while the
        database cannot be reached, for up to `patience` seconds."""
        from psycopg_pool import PoolTimeout

        deadline = time.monotonic() + patience
        while True:
            tried = time.monotonic()
            try:
                with self.pool.connection() as db, db.transaction():
                    result = work(db)
            except (self._psycopg.OperationalError, PoolTimeout) as exc:
                if tried > self._back_at:  # else a wait begun in the outage that just ended
                    self.lost(exc)
                if time.monotonic() >= deadline:
                    raise StoreDown(f"the PostgreSQL store at {self.where} cannot be reached "
                                    f"({first_line(exc)})") from None
                time.sleep(0.25)
                continue
            self.back()
            return result

    def claim(self, work: Callable[[Any], T], wait_s: float) -> T:
        """`work` until it stops raising Held (another live process has the run), for up
        to `wait_s` seconds; SessionBusy then."""
        deadline = time.monotonic() + wait_s
        while True:
            try:
                return self.call(work)
            except Held as exc:
                if time.monotonic() >= deadline:
                    raise SessionBusy(f"session busy: {exc}", holder=exc.holder) from None
                time.sleep(0.1)
            except self._psycopg.errors.UniqueViolation:  # the index saw another node's run
                raise SessionBusy("session busy: another node started a run of this session "
                                  "at the same moment") from None

    def lost(self, exc: BaseException) -> None:
        with self._lock:
            if self._lost:
                return
            self._lost = True
        log.warning("lost the PostgreSQL store at %s (%s); retrying", self.where,
                    first_line(exc))

    def back(self) -> None:
        if not self._lost:
            return
        with self._lock:
            if not self._lost:
                return
            self._lost, self._back_at = False, time.monotonic()
        log.warning("reconnected to the PostgreSQL store at %s", self.where)

    def close(self) -> None:
        self.pool.close()


class Listener:
    """One connection that LISTENs, on a thread of its own, and reconnects after a restart.
    Each notification's payload goes to `deliver`; after a reconnect, `deliver(None)` says
    that news may have been missed."""

    def __init__(self, link: Link, deliver: Callable[[str | None], None]):
        self.link, self.deliver = link, deliver
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="jsonagent-store-listen",
                                        daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        psycopg = self.link._psycopg
        missed = False
        while not self._stop.is_set():
            try:
                with psycopg.connect(self.link.url, autocommit=True, connect_timeout=5) as db:
                    db.execute(f"LISTEN {CHANNEL}")
                    if missed:
                        self.deliver(None)
                    while not self._stop.is_set():
                        for note in db.notifies(timeout=0.5):
                            self.deliver(note.payload)
            except psycopg.Error as exc:
                self.link.lost(exc)
                missed = True
                self._stop.wait(0.5)

    def close(self) -> None:
        self._stop.set()
