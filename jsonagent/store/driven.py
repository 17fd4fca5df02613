"""The runs a store object's process drives, and the one thread that looks after them: it
keeps their heartbeat, and stops a run another process asked to cancel or has taken over.

The thread starts with the first run and ends with the last, so a process that drives
nothing has none.
"""

from __future__ import annotations

import logging
import threading
from typing import Callable

log = logging.getLogger("jsonagent.store")

Tick = Callable[[list[str]], dict[str, str]]
"""Given the driven run ids, beat for them and return those to stop, with the reason."""


class Driven:
    def __init__(self, tick: Tick, period: float, name: str):
        self._tick, self.period, self._name = tick, period, name
        self._stops: dict[str, Callable[[str], None]] = {}
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None

    def add(self, run_id: str, stop: Callable[[str], None]) -> Callable[[], None]:
        with self._lock:
            self._stops[run_id] = stop
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._loop, name=self._name, daemon=True)
                self._thread.start()

        def release() -> None:
            with self._lock:
                if self._stops.get(run_id) is stop:
                    del self._stops[run_id]

        return release

    def ids(self) -> list[str]:
        with self._lock:
            return list(self._stops)

    def poke(self) -> None:
        """Look now rather than at the next period (a cancel was just asked for)."""
        self._wake.set()

    def close(self) -> None:
        with self._lock:
            self._stops.clear()
        self._wake.set()

    def _loop(self) -> None:
        while True:
            self._wake.wait(self.period)
            self._wake.clear()
            with self._lock:
                if not self._stops:
                    self._thread = None
                    return
                ids = list(self._stops)
            try:
                stopping = self._tick(ids)
            except Exception as exc:  # the store says what failed, once; the runs go on
                log.debug("looking after driven runs failed: %s", exc)
                continue
            for run_id, reason in stopping.items():
                with self._lock:
                    stop = self._stops.pop(run_id, None)
                if stop is not None:
                    stop(reason)
