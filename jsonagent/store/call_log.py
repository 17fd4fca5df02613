"""The call log's reads and its last write, the same on either SQL store (as items.py is).
Recording a call's start stays with each store: it is a checkpoint of the run, fenced by
the store's own claim."""

from __future__ import annotations

import json
import time
from typing import Any

from ..calls import Call
from .items import Items
from .rows import call_of


class CallLog(Items):
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
