"""The edge between the sync loop and the callbacks and front ends around it."""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Any, Callable, Generator

if TYPE_CHECKING:
    import asyncio

    from .events import Event
    from .result import RunResult


def bridge(callback: Callable | None, loop: asyncio.AbstractEventLoop | None):
    """A plain function the sync loop can call, whatever kind of callback the user gave."""
    if callback is None:
        return None
    return lambda *args: _wait(callback(*args), loop)


def drain(events: Generator[Event, None, None]) -> RunResult:
    """The result a run's events end on. A Ctrl-C that lands here, between two events, is
    the run's to end it cleanly, as one that lands inside it: a chat whose turn was
    interrupted goes on. When the run lets it through (it had ended), it goes on up."""
    end = interrupt = None
    while True:
        try:
            end = events.throw(interrupt) if interrupt else next(events)
        except StopIteration:
            return end.result
        except KeyboardInterrupt as exc:
            if interrupt is not None:
                raise
            interrupt = exc
            continue
        interrupt = None


def _wait(value: Any, loop: asyncio.AbstractEventLoop | None) -> Any:
    if not inspect.isawaitable(value):
        return value
    import asyncio
    import concurrent.futures

    async def run():
        return await value

    if loop is not None:  # aiter: answer on the caller's own event loop
        return asyncio.run_coroutine_threadsafe(run(), loop).result()
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(run())
    with concurrent.futures.ThreadPoolExecutor(1) as pool:  # sync run() inside a running loop
        return pool.submit(asyncio.run, run()).result()
