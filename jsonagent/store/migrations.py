"""The SQLite store's schema, as migrations: functions applied in order, each once, and
recorded in a table (as simonw/llm's migrations.py does)."""

from __future__ import annotations

import sqlite3
from typing import Callable

MIGRATIONS_TABLE = "_jsonagent_migrations"


def _m001_initial(db: sqlite3.Connection) -> None:
    _script(db, """
        CREATE TABLE sessions (
            id TEXT PRIMARY KEY,
            name TEXT UNIQUE,
            created_at REAL NOT NULL,
            updated_at REAL NOT NULL
        );
        CREATE TABLE runs (
            id TEXT PRIMARY KEY,
            session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
            status TEXT NOT NULL,
            question TEXT NOT NULL,
            created_at REAL NOT NULL,
            updated_at REAL NOT NULL,
            owner TEXT,
            heartbeat_at REAL,
            state TEXT NOT NULL
        );
        CREATE INDEX runs_by_session ON runs(session_id, created_at);
        CREATE INDEX runs_by_status ON runs(status, created_at);
        CREATE TABLE events (
            run_id TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
            seq INTEGER NOT NULL,
            type TEXT NOT NULL,
            t REAL NOT NULL,
            data TEXT NOT NULL,
            PRIMARY KEY (run_id, seq)
        );
    """)


def _script(db: sqlite3.Connection, sql: str) -> None:
    # not executescript(): it commits first, and a migration runs inside our transaction
    for statement in sql.split(";"):
        if statement.strip():
            db.execute(statement)


def _m002_served_runs(db: sqlite3.Connection) -> None:
    """Runs a server queued (it takes them over after a restart), and a person's decision
    waiting for a worker."""
    _script(db, """
        ALTER TABLE runs ADD COLUMN served INTEGER NOT NULL DEFAULT 0;
        ALTER TABLE runs ADD COLUMN decision TEXT
    """)


def _m003_cancels_and_items(db: sqlite3.Connection) -> None:
    """A cancel asked of a run another process drives; small documents of the front ends
    (A2A tasks)."""
    _script(db, """
        ALTER TABLE runs ADD COLUMN cancel_requested TEXT;
        CREATE TABLE items (
            kind TEXT NOT NULL,
            key TEXT NOT NULL,
            value TEXT NOT NULL,
            updated_at REAL NOT NULL,
            PRIMARY KEY (kind, key)
        )
    """)


def _m004_sub_runs(db: sqlite3.Connection) -> None:
    """A sub-run (an agent used as a tool) names the run whose tool started it, and its depth
    in the tree; a run's sub-runs are found by the index."""
    _script(db, """
        ALTER TABLE runs ADD COLUMN parent_run_id TEXT;
        ALTER TABLE runs ADD COLUMN depth INTEGER NOT NULL DEFAULT 0;
        CREATE INDEX runs_by_parent ON runs(parent_run_id, created_at)
    """)


def _m005_call_log(db: sqlite3.Connection) -> None:
    """The call log: each tool call recorded before it runs (its key, tool and arguments)
    and its result once it ended (calls.py); PostgreSQL's _m003."""
    _script(db, CALLS_TABLE)


CALLS_TABLE = """
    CREATE TABLE calls (
        key TEXT PRIMARY KEY,
        run_id TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
        step INTEGER NOT NULL,
        idx INTEGER NOT NULL,
        tool TEXT NOT NULL,
        args TEXT NOT NULL,
        effects TEXT NOT NULL,
        started_at DOUBLE PRECISION NOT NULL,
        ended_at DOUBLE PRECISION,
        result TEXT,
        error BOOLEAN NOT NULL DEFAULT FALSE
    );
    CREATE INDEX calls_by_run ON calls(run_id, step, idx)
"""
"""The same table in both stores (SQLite reads DOUBLE PRECISION as REAL)."""


# Applied in order, each once, recorded in MIGRATIONS_TABLE. Only ever append to this list.
MIGRATIONS: list[Callable[[sqlite3.Connection], None]] = [
    _m001_initial, _m002_served_runs, _m003_cancels_and_items, _m004_sub_runs, _m005_call_log]
