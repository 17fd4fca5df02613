"""Deltas of the runs this process drives, handed to whoever follows them right now.

Deltas are live only (see events.Delta): the store never sees them, so a stream gets them
from here, beside the stored events it reads from the store. A run that may be followed
streams from its first call (the runner decides, per run); one that may not is streamed only
while someone follows it (`watched`), asked before each model call.

A follower that comes in mid-reply first gets what the reply has written so far, joined into
one delta of each kind, then the rest: `Live` keeps the pieces of the attempt being written,
until the runner says the reply is done (`written`).
"""

from __future__ import annotations

import asyncio
import math
import threading
from collections import deque
from contextlib import contextmanager
from dataclasses import replace
from typing import Any, Iterable, Iterator

from ..events import ArgsDelta, Delta, ThoughtDelta


class Follower:
    """One stream's inbox of deltas, on its event loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self.loop = loop
        self.ready = asyncio.Event()
        self._items: deque[Delta] = deque()

    def put(self, delta: Delta) -> None:  # any thread
        self.loop.call_soon_threadsafe(self._put, delta)

    def _put(self, delta: Delta) -> None:
        self._items.append(delta)
        self.ready.set()

    def take(self) -> list[Delta]:
        """What came since the last look, with the pieces of one text joined: a slow reader
        gets fewer, larger deltas, never more of them than the model wrote."""
        self.ready.clear()
        out: list[Delta] = []
        while self._items:
            delta = self._items.popleft()
            last = out[-1] if out else None
            if isinstance(delta, (ThoughtDelta, ArgsDelta)) and type(last) is type(delta) \
                    and (last.run_id, last.step, last.attempt) == \
                    (delta.run_id, delta.step, delta.attempt):
                out[-1] = replace(last, text=last.text + delta.text)
            else:
                out.append(delta)
        return out


class Live:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._followers: dict[str, set[Follower]] = {}
        self._so_far: dict[str, list[Delta]] = {}
        """The pieces of the reply each run is writing now (one attempt of one step)."""

    def watched(self, run_id: str) -> bool:
        return bool(self._followers.get(run_id))

    def publish(self, run_id: str, delta: Delta) -> None:
        """A delta of the run `run_id` drives (a sub-run's keeps its own ids)."""
        with self._lock:
            so_far = self._so_far.setdefault(run_id, [])
            if so_far and _attempt(so_far[-1]) != _attempt(delta):  # a new reply began
                so_far.clear()
            so_far.append(delta)
            followers = list(self._followers.get(run_id, ()))
        for follower in followers:
            follower.put(delta)

    def written(self, run_id: str) -> None:
        """The reply being written is done (its stored event says what it became): a
        follower that comes now gets nothing of it as a delta."""
        with self._lock:
            self._so_far.pop(run_id, None)

    @contextmanager
    def follow(self, run_id: str) -> Iterator[Follower]:
        follower = Follower(asyncio.get_running_loop())
        with self._lock:
            self._followers.setdefault(run_id, set()).add(follower)
            # under the lock, so that what was written comes before any piece that follows
            for delta in self._so_far.get(run_id, ()):
                follower.put(delta)
        try:
            yield follower
        finally:
            with self._lock:
                followers = self._followers.get(run_id, set())
                followers.discard(follower)
                if not followers:
                    self._followers.pop(run_id, None)


def in_order(events: Iterable[tuple[bool, dict[str, Any]]], deltas: Iterable[Delta]
             ) -> Iterator[tuple[bool, dict[str, Any] | Delta]]:
    """`(stored, event)` pairs just read from the store, and the deltas taken after reading
    them, in the order they happened. A reply's deltas are published before the stored event
    that says what it became (its step, or the re-ask that voids it), yet the last of them
    may reach this thread only after that event was read: each goes out before it."""
    held = list(deltas)
    for stored, event in events:
        bound = _settles(event)
        if bound is not None and held:
            run_id = event.get("run_id")
            due = [d.run_id == run_id and (d.step, d.attempt) < bound for d in held]
            for delta in (d for d, now in zip(held, due) if now):
                yield False, delta
            held = [d for d, now in zip(held, due) if not now]
        yield stored, event
    for delta in held:
        yield False, delta


def _settles(event: dict[str, Any]) -> tuple[int, float] | None:
    """The (step, attempt) whose deltas, and every earlier one's, this event settles."""
    if event["type"] == "step":
        return event["step"], math.inf
    if event["type"] == "reask":  # its attempt is the next one: the void one is below it
        return event["step"], event["attempt"]
    return None


def _attempt(delta: Delta) -> tuple[str, int, int]:
    return delta.run_id, delta.step, delta.attempt


async def until_either(news: asyncio.Event, ready: asyncio.Event, timeout: float) -> None:
    """Sleep until the store has news, a delta came, or `timeout` passed."""
    waits = [asyncio.ensure_future(news.wait()), asyncio.ensure_future(ready.wait())]
    try:
        await asyncio.wait(waits, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for wait in waits:
            wait.cancel()
