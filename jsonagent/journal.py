"""The transcript: append-only JSONL, one event a line, flushed as it happens.

It is read back through the same models it was written with (`read_journal`).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import IO, Annotated, Any, Literal, Union

from pydantic import BaseModel, Field, TypeAdapter

from .errors import ConfigError
from .models import Usage


def jsonable(obj: Any) -> Any:
    """Plain JSON data for anything a tool or an answer may be: models, dataclasses, objects."""
    def fallback(o: Any) -> Any:
        if hasattr(o, "model_dump"):
            return o.model_dump(mode="json")
        if hasattr(o, "to_dict"):
            return o.to_dict()
        if isinstance(o, (set, frozenset, tuple)):
            return list(o)
        return str(o)

    if obj is None or isinstance(obj, (str, int, float, bool)):
        return obj
    return json.loads(json.dumps(obj, ensure_ascii=False, default=fallback))


class _Event(BaseModel):
    t: float = Field(default_factory=time.time)
    """Unix time the event was written."""


class RunStart(_Event):
    type: Literal["run_start"] = "run_start"
    question: str
    model: str
    json_mode: str
    config: dict[str, Any]
    toolset: str
    """Fingerprint of the tool specs the model was shown."""
    tools: list[str]


class ModelCall(_Event):
    type: Literal["model_reply"] = "model_reply"
    step: int
    attempt: int
    raw: str
    """The reply exactly as it came, valid or not."""
    usage: Usage
    latency_s: float
    json_mode: str


class Reask(_Event):
    type: Literal["reask"] = "reask"
    step: int
    attempt: int
    stage: str
    problem: str


class JsonModeChange(_Event):
    type: Literal["json_mode"] = "json_mode"
    old: str
    new: str
    reason: str


class StepTaken(_Event):
    type: Literal["step"] = "step"
    step: int
    thought: str
    tool: str
    args: dict[str, Any]
    repairs: list[str]


class ToolResult(_Event):
    type: Literal["tool_result"] = "tool_result"
    step: int
    tool: str
    observation: Any
    error: bool
    duration_s: float
    note: str | None = None
    """What the loop added for the model beside the observation (a repeated call)."""


class RunEnd(_Event):
    type: Literal["run_end"] = "run_end"
    status: str
    answer: Any = None
    error: str | None = None
    pending_question: str | None = None
    usage: Usage
    stats: dict[str, int]


Event = Annotated[Union[RunStart, ModelCall, Reask, JsonModeChange, StepTaken, ToolResult, RunEnd],
                  Field(discriminator="type")]
_EVENT = TypeAdapter(Event)


class Journal:
    def __init__(self, path: str | Path):
        self.path = Path(path)
        try:  # fail before the run, not halfway through it
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._file: IO[str] | None = self.path.open("a", encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"cannot write transcript {self.path}: {exc.strerror or exc}") from None

    def write(self, event: _Event) -> None:
        if self._file is not None:
            self._file.write(event.model_dump_json() + "\n")
            self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


def read_journal(path: str | Path) -> list[Event]:
    """Every event in a transcript; a torn last line (a crash mid-write) is skipped."""
    events = []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        if line.strip():
            try:
                events.append(_EVENT.validate_json(line))
            except ValueError:
                continue
    return events
