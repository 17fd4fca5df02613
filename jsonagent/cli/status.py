"""A one-line status on stderr (loading a model, a cached prompt), only when stderr is a terminal."""

from __future__ import annotations

import sys
from collections.abc import Callable


def terminal_status(stream=None) -> Callable[[str | None], None] | None:
    """A callback that shows a message in place, and erases it on None; None when not a terminal."""
    stream = stream or sys.stderr
    if not stream.isatty():
        return None

    def show(message: str | None) -> None:
        stream.write("\r\x1b[K" + (message or ""))
        stream.flush()

    return show
