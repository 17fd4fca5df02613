"""The PostgreSQL store's schema, as migrations applied in order, each once, and recorded,
as SQLite's are (migrations.py). The tables live in a schema of their own (`jsonagent`), so a
database shared with an application keeps its own `sessions` or `runs`.

Several nodes may start at once: an advisory lock lets one of them migrate while the others
wait, then find the work done.
"""

from __future__ import annotations

from typing import Any, Callable

from ..status import NEEDS_HUMAN, QUEUED, RUNNING

SCHEMA = "jsonagent"
MIGRATIONS_TABLE = "_jsonagent_migrations"
_LOCK = 0x6A736F6E  # any constant shared by every jsonagent node


def _m001_initial(db: Any) -> None:
    active = ", ".join(f"'{s}'" for s in (QUEUED, RUNNING, NEEDS_HUMAN))
    for statement in f"""
        CREATE TABLE sessions (
            id TEXT PRIMARY KEY,
            name TEXT UNIQUE,
            created_at DOUBLE PRECISION NOT NULL,
            updated_at DOUBLE PRECISION NOT NULL
        );
        CREATE TABLE runs (
            n BIGSERIAL UNIQUE,
            id TEXT PRIMARY KEY,
            session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
            status TEXT NOT NULL,
            question TEXT NOT NULL,
            created_at DOUBLE PRECISION NOT NULL,
            updated_at DOUBLE PRECISION NOT NULL,
            owner TEXT,
            heartbeat_at DOUBLE PRECISION,
            claim TEXT,
            state TEXT NOT NULL,
            served BOOLEAN NOT NULL DEFAULT FALSE,
            decision TEXT,
            cancel_requested TEXT
        );
        CREATE INDEX runs_by_session ON runs(session_id, created_at);
        CREATE INDEX runs_by_status ON runs(status, created_at);
        CREATE UNIQUE INDEX one_active_run_per_session ON runs(session_id)
            WHERE status IN ({active});
        CREATE TABLE events (
            run_id TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
            seq BIGINT NOT NULL,
            type TEXT NOT NULL,
            t DOUBLE PRECISION NOT NULL,
            data TEXT NOT NULL,
            PRIMARY KEY (run_id, seq)
        );
        CREATE TABLE items (
            kind TEXT NOT NULL,
            key TEXT NOT NULL,
            value TEXT NOT NULL,
            updated_at DOUBLE PRECISION NOT NULL,
            PRIMARY KEY (kind, key)
        )""".split(";"):
        db.execute(statement)


def _m002_sub_runs(db: Any) -> None:
    """A sub-run (an agent used as a tool) names the run whose tool started it, and its depth
    in the tree; a run's sub-runs are found by the index (SQLite's _m004)."""
    for statement in """
        ALTER TABLE runs ADD COLUMN parent_run_id TEXT;
        ALTER TABLE runs ADD COLUMN depth INTEGER NOT NULL DEFAULT 0;
        CREATE INDEX runs_by_parent ON runs(parent_run_id, created_at)""".split(";"):
        db.execute(statement)


def _m003_call_log(db: Any) -> None:
    """The call log (calls.py), the same table as SQLite's _m005."""
    from .migrations import CALLS_TABLE

    for statement in CALLS_TABLE.split(";"):
        db.execute(statement)


# Applied in order, each once, recorded in MIGRATIONS_TABLE. Only ever append to this list.
MIGRATIONS: list[Callable[[Any], None]] = [_m001_initial, _m002_sub_runs, _m003_call_log]


def migrate(db: Any, where: str) -> None:
    """Bring the schema up to date on `db`, a connection in autocommit mode."""
    from ..errors import ConfigError

    with db.transaction():
        db.execute("SELECT pg_advisory_xact_lock(%s)", (_LOCK,))
        db.execute(f"CREATE SCHEMA IF NOT EXISTS {SCHEMA}")
        db.execute(f"SET LOCAL search_path TO {SCHEMA}")
        db.execute(f"CREATE TABLE IF NOT EXISTS {MIGRATIONS_TABLE} (version INTEGER PRIMARY "
                   "KEY, name TEXT NOT NULL, applied_at DOUBLE PRECISION NOT NULL)")
        done = {r[0] for r in db.execute(f"SELECT version FROM {MIGRATIONS_TABLE}")}
        if done and max(done) > len(MIGRATIONS):
            raise ConfigError(f"the PostgreSQL store at {where} was made by a newer jsonagent "
                              f"(schema version {max(done)}, this one knows {len(MIGRATIONS)})")
        for version, migration in enumerate(MIGRATIONS, start=1):
            if version not in done:
                migration(db)
                db.execute(f"INSERT INTO {MIGRATIONS_TABLE} VALUES (%s, %s, "
                           "EXTRACT(EPOCH FROM clock_timestamp()))", (version, migration.__name__))
