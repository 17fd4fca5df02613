"""The transcript: append-only JSONL, one event a line, flushed as it happens.

It is read back through the same models it was written with (`read_journal`).
"""

from __future__ import annotations

from pathlib import Path
from typing import IO

from .errors import ConfigError
from .events import AnyEvent, Event, reader


class Journal:
    def __init__(self, path: str | Path):
        self.path = Path(path)
        try:  # fail before the run, not halfway through it
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._file: IO[str] | None = self.path.open("a", encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"cannot write transcript {self.path}: {exc.strerror or exc}") from None

    def write(self, event: Event) -> None:
        if self._file is not None:
            self._file.write(event.to_json() + "\n")
            self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


def read_journal(path: str | Path) -> list[AnyEvent]:
    """Every event in a transcript; a torn last line (a crash mid-write) is skipped."""
    events = []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        if line.strip():
            try:
                events.append(reader().validate_json(line))
            except ValueError:
                continue
    return events
