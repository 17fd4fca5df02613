"""Ctrl-C, held back while work that must not stop half done finishes: an event handed to
some records and not the others, rich's spinner half started.

A run installs one handler for its whole length (`ctrl_c_watched`); the blocks inside it
(`ctrl_c_held`) then only count themselves in and out. Swapping the handler for every
block went through the signal module's enums at about 15 µs a swap, twelve swaps a step.
Outside a run, a held block swaps the handler itself. Signals land in the main thread only,
so nothing here does anything in another thread.

Ctrl-C outside a held block does exactly what the handler from before would have done.
Inside one it waits for the block's end; a second one does not wait, since the block may
be stuck (a write to a database that hangs).
"""

from __future__ import annotations

import signal
import threading
from typing import Any

_holder: _Holder | None = None
"""The handler a run installed, while it is installed."""


class _Holder:
    def __init__(self, old: Any) -> None:
        self.old, self.depth, self.caught = old, 0, []
        self.thread = threading.get_ident()

    def __call__(self, signum: int, frame: Any) -> None:
        if self.depth == 0:
            _pass_on(self.old, signum, frame)
            return
        self.caught.append((signum, frame))
        if len(self.caught) > 1:
            raise KeyboardInterrupt

    def install(self) -> None:
        signal.signal(signal.SIGINT, self)

    def uninstall(self) -> None:
        # only its own thread can (a run's generator may be closed elsewhere, say by the
        # garbage collector; left in place at depth 0, the holder passes Ctrl-C on as before)
        if threading.get_ident() == self.thread and signal.getsignal(signal.SIGINT) is self:
            signal.signal(signal.SIGINT, _restorable(self.old))

    def release(self) -> None:
        """The last held block is done: a Ctrl-C it held goes on up now."""
        caught, self.caught = self.caught, []
        if len(caught) == 1:
            _pass_on(self.old, *caught[0])


def _restorable(old: Any) -> Any:
    return old if old is not None else signal.default_int_handler


def _pass_on(old: Any, signum: int, frame: Any) -> None:
    if callable(old):
        old(signum, frame)
    else:  # the default action, or a handler Python did not set: theirs to take
        signal.signal(signal.SIGINT, _restorable(old))
        signal.raise_signal(signal.SIGINT)


def _holdable() -> Any:
    """The handler to hold back, or None where Ctrl-C cannot land or is ignored."""
    if threading.current_thread() is not threading.main_thread():
        return None
    old = signal.getsignal(signal.SIGINT)
    return None if old is signal.SIG_IGN else (old, )


class ctrl_c_watched:
    """For a run's whole length: install the handler that `ctrl_c_held` counts on. A run
    inside another one in the same thread (an agent used as a tool) shares the outer's."""

    def __enter__(self) -> ctrl_c_watched:
        global _holder
        self.holder, self.before = None, _holder
        found = _holdable()
        if found is not None and not isinstance(found[0], _Holder):
            self.holder = _holder = _Holder(found[0])
            self.holder.install()
        return self

    def __exit__(self, *exc: Any) -> None:
        global _holder
        if self.holder is not None:
            _holder = self.before
            self.holder.uninstall()


class ctrl_c_held:
    """Within the block, Ctrl-C waits until the block is done, then goes on up as it would
    have (see the module's docstring)."""

    __slots__ = ("holder", "own")

    def __enter__(self) -> None:
        holder = _holder
        self.own = False
        if holder is not None and holder.thread == threading.get_ident():
            self.holder = holder
        else:
            found = _holdable()
            self.holder = _Holder(found[0]) if found is not None else None
            if self.holder is not None:
                self.own = True
                self.holder.install()
        if self.holder is not None:
            self.holder.depth += 1

    def __exit__(self, kind: Any, *exc: Any) -> bool:
        holder = self.holder
        if holder is None:
            return False
        holder.depth -= 1
        if self.own:
            holder.uninstall()
        if holder.depth == 0:
            holder.release()
        return False
