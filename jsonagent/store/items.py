"""The front ends' small documents (A2A tasks), kept beside the runs by either SQL store:
one table, `items(kind, key, value, updated_at)`, written the same way on both."""

from __future__ import annotations

import time
from typing import Any


class Items:
    MARK = "?"
    """The store's parameter placeholder."""

    def _items(self, sql: str, args: tuple) -> list[dict[str, Any]]:
        """Run one statement in a transaction; its rows."""
        raise NotImplementedError

    def put_item(self, kind: str, key: str, value: str) -> None:
        p = self.MARK
        self._items(f"INSERT INTO items VALUES ({p}, {p}, {p}, {p}) ON CONFLICT (kind, key) "
                    "DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at",
                    (kind, key, value, time.time()))

    def add_item(self, kind: str, key: str, value: str) -> str:
        p = self.MARK
        self._items(f"INSERT INTO items VALUES ({p}, {p}, {p}, {p}) ON CONFLICT (kind, key) "
                    "DO NOTHING", (kind, key, value, time.time()))
        # two statements, each atomic: the insert decides, the read says who won
        return self.get_item(kind, key) or value

    def get_item(self, kind: str, key: str) -> str | None:
        p = self.MARK
        rows = self._items(f"SELECT value FROM items WHERE kind = {p} AND key = {p}", (kind, key))
        return rows[0]["value"] if rows else None

    def items(self, kind: str) -> list[str]:
        rows = self._items(f"SELECT value FROM items WHERE kind = {self.MARK} "
                           "ORDER BY updated_at", (kind,))
        return [r["value"] for r in rows]

    def delete_item(self, kind: str, key: str) -> None:
        p = self.MARK
        self._items(f"DELETE FROM items WHERE kind = {p} AND key = {p}", (kind, key))
