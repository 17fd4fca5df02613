"""What a run returns."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel

from .models import Usage

Status = Literal["completed", "max_steps", "needs_human", "failed", "interrupted"]


class StepRecord(BaseModel):
    index: int
    thought: str
    tool: str
    args: dict[str, Any]
    observation: Any = None
    error: bool = False
    """The tool failed; `observation` holds what the model was told."""
    repairs: list[str] = []
    model_s: float = 0.0
    """Time spent waiting for the model, re-asks included."""
    tool_s: float = 0.0


class Stats(BaseModel):
    model_calls: int = 0
    repairs: int = 0
    reasks: int = 0
    invalid_replies: int = 0


class RunResult(BaseModel):
    status: Status
    answer: Any = None
    steps: list[StepRecord] = []
    usage: Usage = Usage()
    stats: Stats = Stats()
    error: str | None = None
    """Why the run failed, in one line."""
    pending_question: str | None = None
    """The question waiting for a person, when status is needs_human."""
    json_mode: str | None = None
    """The JSON mode in force at the end, after any step-down."""

    @property
    def ok(self) -> bool:
        return self.status == "completed"
