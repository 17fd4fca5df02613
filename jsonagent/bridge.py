"""The edge between the sync loop and the callbacks and front ends around it."""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Any, Callable, Iterator

if TYPE_CHECKING:
    import asyncio

    from .events import Event
    from .result import RunResult


def bridge(callback: Callable | None, loop: asyncio.AbstractEventLoop | None):
    """A plain function the sync loop can call, whatever kind of callback the user gave."""
    if callback is None:
        return None
    return lambda *args: _wait(callback(*args), loop)


def drain(events: Iterator[Event]) -> RunResult:
    end = None
    for end in events:
        pass
    return end.result


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
