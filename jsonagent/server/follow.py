"""Following a run as it goes, for every stream the server has (the REST API's SSE, AG-UI):
its stored events as they are recorded, its sub-runs' events, and, when asked, the live
deltas of the reply being written. Each front end only says how it writes them."""

from __future__ import annotations

import asyncio
from contextlib import nullcontext
from typing import Any, AsyncIterator

from ..events import Delta
from ..status import NEEDS_HUMAN, SERVER_FINAL
from .live import in_order, until_either
from .runner import Runner, public_status
from .wakeups import LOOK_ANYWAY_S, Wakeups, until_news


async def follow(runner: Runner, wakeups: Wakeups, run_id: str, after: int, request: Any,
                 deltas: bool, subs: dict[str, int] | None = None, through_pauses: bool = True
                 ) -> AsyncIterator[tuple[bool, dict[str, Any] | Delta]]:
    """`(stored, event)` for every event after `after`, as it is recorded; a sub-run's come
    first (they happen inside its step) with `stored` False, as `Last-Event-ID` counts this
    run's events only; so do the deltas, which come from this process (live.py) and are
    never read back from the store. `subs`: each sub-run's last event already seen.

    It ends with the run; a pause ends it only when not `through_pauses`. Between looks it
    sleeps until the store says the run has news, or a delta came."""
    store = runner.store
    subs = {} if subs is None else subs
    with wakeups.follow(run_id) as news, \
            (runner.live.follow(run_id) if deltas else nullcontext()) as live:
        look = True
        while not runner.stopping.is_set():
            subs_batch, batch = [], []
            if look:
                news.clear()
                subs_batch = await asyncio.to_thread(sub_events, store, run_id, subs)
                batch = await asyncio.to_thread(store.events, run_id, None, after)
            read = [(False, e) for e in subs_batch] + [(True, e) for e in batch]
            # taken after the reads: every delta of a step just read is in hand by now
            for stored, event in in_order(read, live.take() if live is not None else ()):
                if not stored:
                    yield stored, event
                    continue
                after = event["seq"]
                yield True, event
                if event["type"] == "run_end" and (
                        event["status"] != NEEDS_HUMAN or not through_pauses):
                    return
            if look and not batch:
                info = await asyncio.to_thread(runner.get, run_id)
                if public_status(info) in SERVER_FINAL and not \
                        await asyncio.to_thread(store.events, run_id, None, after):
                    return
                if await request.is_disconnected():
                    return
            if live is None:
                await until_news(news)
            else:
                await until_either(news, live.ready, LOOK_ANYWAY_S)
            # a look at the store unless only a delta came (a timeout looks too)
            look = news.is_set() or live is None or not live.ready.is_set()


def sub_events(store: Any, run_id: str, seen: dict[str, int]) -> list[dict[str, Any]]:
    """The new events of every run below `run_id`; `seen` keeps each one's last number."""
    events = []
    for sub in store.sub_runs(run_id):
        batch = store.events(sub.id, None, seen.get(sub.id, 0))
        if batch:
            seen[sub.id] = batch[-1]["seq"]
        events += batch + sub_events(store, sub.id, seen)
    return events


def seen_so_far(store: Any, run_id: str, seen: dict[str, int] | None = None) -> dict[str, int]:
    """Every sub-run's last event now: a stream that picks a run up after a pause starts
    there, rather than telling its sub-runs' story again."""
    seen = {} if seen is None else seen
    for sub in store.sub_runs(run_id):
        seen[sub.id] = sub.state.seq if sub.state is not None else 0
        seen_so_far(store, sub.id, seen)
    return seen
