"""What a run returns."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, PlainSerializer

from .usage import Usage
from .state import OnceCall, Pending, Stats, StepRecord, flat_steps, step_view
from .status import COMPLETED
from .status import Result as Status

__all__ = ["RunResult", "Stats", "Status", "StepRecord"]


class RunResult(BaseModel):
    model_config = ConfigDict(defer_build=True)

    status: Status
    answer: Any = None
    steps: Annotated[list[StepRecord], BeforeValidator(flat_steps),
                     PlainSerializer(lambda steps: [step_view(s) for s in steps])] = []
    """This run's steps (a resumed run's too, from its start); as JSON, a step of one call
    has that call's fields, and a step of several the list of them (`state.step_view`)."""
    usage: Usage = Field(default_factory=Usage)
    stats: Stats = Field(default_factory=Stats)
    error: str | None = None
    """Why the run failed, in one line."""
    error_kind: str | None = None
    """How the model failed, when that ended the run: rate_limited, quota, unavailable,
    timeout, context_window, content_filter, authentication, bad_request or model_error
    (see errors.py). None for a run that failed for any other reason."""
    pending: Pending | None = None
    """What the run waits for when status is needs_human: a question or an approval."""
    repeated: dict[str, Any] | None = None
    """The call the model kept repeating when status is stalled: {"tool": ..., "args": ...}."""
    json_mode: str | None = None
    """The JSON mode in force at the end, after any step-down."""
    once: list[OnceCall] = []
    """The `once` calls that began (key, tool) and how each ended: what running the task
    again would repeat."""
    run_id: str = ""
    session_id: str = ""

    @property
    def ok(self) -> bool:
        return self.status == COMPLETED

    @property
    def pending_question(self) -> str | None:
        return self.pending.question if self.pending and self.pending.kind == "question" else None
