"""Who a store tells what: the callbacks for a run's new events (`listen`) and for work to
claim (`on_queued`). A store shared by several processes hears the others' news too
(PostgreSQL's LISTEN connection, opened with the first subscriber)."""

from __future__ import annotations

import threading
from typing import Callable


class News:
    def __init__(self, on_first: Callable[[], None] | None = None):
        self._events: list[Callable[[str], None]] = []
        self._queued: list[Callable[[], None]] = []
        self._on_first = on_first
        self._lock = threading.Lock()

    def listen(self, callback: Callable[[str], None]) -> Callable[[], None]:
        return self._add(self._events, callback)

    def on_queued(self, callback: Callable[[], None]) -> Callable[[], None]:
        return self._add(self._queued, callback)

    def _add(self, listeners: list, callback: Callable) -> Callable[[], None]:
        with self._lock:
            listeners.append(callback)
            first, self._on_first = self._on_first, None
        if first is not None:
            first()
        return lambda: listeners.remove(callback) if callback in listeners else None

    def events(self, run_id: str) -> None:
        """New events of `run_id` can be read ("" when news may have been missed)."""
        for callback in list(self._events):
            callback(run_id)

    def queued(self) -> None:
        for callback in list(self._queued):
            callback()


class Told:
    """A store's subscriptions, on its `news` (the `Store` protocol's `listen` and
    `on_queued`)."""

    news: News

    def listen(self, callback: Callable[[str], None]) -> Callable[[], None]:
        return self.news.listen(callback)

    def on_queued(self, callback: Callable[[], None]) -> Callable[[], None]:
        return self.news.on_queued(callback)
