"""The call log, the same on either SQL store (as items.py is). Recording a call's start is
also a checkpoint of its run: each store writes that (`_checkpoint`, fenced by its claim on
PostgreSQL) in the same transaction (`_write`)."""

from __future__ import annotations

import json
import time
from typing import Any, Callable

from ..calls import Call
from .items import Items
from ..state import RunState
from .rows import CALL_COLUMNS, call_of, call_row


class CallLog(Items):
    def _checkpoint(self, db: Any, state: RunState) -> None:
        raise NotImplementedError

    def _write(self, work: Callable[[Any], Any]) -> Any:
        """`work(db)` in one write transaction."""
        raise NotImplementedError

    def call_started(self, call: Call, state: RunState) -> Call:
        p = self.MARK

        def work(db: Any) -> Call:
            self._checkpoint(db, state)
            db.execute(f"INSERT INTO calls ({CALL_COLUMNS}) VALUES ({', '.join([p] * 11)}) "
                       "ON CONFLICT (key) DO NOTHING", call_row(call))
            cur = db.execute(f"SELECT * FROM calls WHERE key = {p}", (call.key,))
            row = cur.fetchone()  # a dict on PostgreSQL, a tuple on SQLite
            return call_of(row if isinstance(row, dict) else
                           dict(zip([d[0] for d in cur.description], row)))

        return self._write(work)

    def calls_started(self, calls: list[Call], state: RunState) -> None:
        """The calls of a step that start together, in one transaction with one checkpoint:
        one a call would write the whole state N times for a step of N calls."""
        p = self.MARK

        def work(db: Any) -> None:
            self._checkpoint(db, state)
            for call in calls:
                db.execute(f"INSERT INTO calls ({CALL_COLUMNS}) VALUES "
                           f"({', '.join([p] * 11)}) ON CONFLICT (key) DO NOTHING",
                           call_row(call))

        self._write(work)

    def call_ended(self, key: str, result: Any, error: bool) -> None:
        """Not fenced: what a tool returned is true whoever drives the run now, and it spares
        the next driver running the call again. Only the first end counts."""
        p = self.MARK
        self._items(f"UPDATE calls SET ended_at = {p}, result = {p}, error = {p} WHERE key = {p} "
                    "AND ended_at IS NULL", (time.time(), json.dumps(result), error, key))

    def call(self, key: str) -> Call | None:
        rows = self._items(f"SELECT * FROM calls WHERE key = {self.MARK}", (key,))
        return call_of(rows[0]) if rows else None

    def calls(self, run_id: str) -> list[Call]:
        rows = self._items(f"SELECT * FROM calls WHERE run_id = {self.MARK} ORDER BY step, idx",
                           (run_id,))
        return [call_of(r) for r in rows]
