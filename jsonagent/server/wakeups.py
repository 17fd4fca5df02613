"""Streams that sleep until their run has news: the store says when it recorded a run's
events, and each waiting stream of that run wakes. A stream still looks now and then, for
what another process wrote to a shared store."""

from __future__ import annotations

import asyncio
from contextlib import contextmanager
from typing import Iterator

LOOK_ANYWAY_S = 1.0


class Wakeups:
    def __init__(self, store, loop: asyncio.AbstractEventLoop):
        self.loop = loop
        self.waiting: dict[str, set[asyncio.Event]] = {}
        self.stop = store.listen(self._recorded)

    def _recorded(self, run_id: str) -> None:  # any thread
        if run_id in self.waiting:
            self.loop.call_soon_threadsafe(self._wake, run_id)

    def _wake(self, run_id: str) -> None:
        for event in self.waiting.get(run_id, ()):
            event.set()

    @contextmanager
    def follow(self, run_id: str) -> Iterator[asyncio.Event]:
        """An event set whenever the run has news; clear it before each look, so that news
        that comes while looking is not missed."""
        event = asyncio.Event()
        self.waiting.setdefault(run_id, set()).add(event)
        try:
            yield event
        finally:
            events = self.waiting.get(run_id, set())
            events.discard(event)
            if not events:
                self.waiting.pop(run_id, None)


async def until_news(event: asyncio.Event, timeout: float = LOOK_ANYWAY_S) -> None:
    try:
        await asyncio.wait_for(event.wait(), timeout)
    except asyncio.TimeoutError:
        pass
