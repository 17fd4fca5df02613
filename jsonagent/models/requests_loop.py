"""The one event loop every OpenAIModel's requests run on, in a thread of its own: one for
the process, not one a model, which left a thread behind for every model ever built."""

from __future__ import annotations

import os
import threading

from ..cancel import quiet

_loop = None
_loop_lock = threading.Lock()


def _forget_loop() -> None:
    global _loop, _loop_lock
    # a forked child has the loop but not the thread that runs it, and the lock maybe held
    _loop, _loop_lock = None, threading.Lock()


os.register_at_fork(after_in_child=_forget_loop)


def requests_loop():
    """The loop, started on first use."""
    global _loop
    import asyncio

    with _loop_lock:
        if _loop is None:
            _loop = asyncio.new_event_loop()
            quiet(threading.Thread(target=_loop.run_forever, daemon=True,
                                   name="jsonagent openai requests")).start()
        return _loop


def started():
    """The loop if it was started, else None."""
    return _loop


def on_it() -> bool:
    """Whether this code runs on the loop itself, where waiting for it never ends."""
    import asyncio

    try:
        return _loop is not None and asyncio.get_running_loop() is _loop
    except RuntimeError:
        return False
