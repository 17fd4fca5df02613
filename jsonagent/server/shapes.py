"""What goes over the wire: the request bodies, and the views of runs and sessions."""

from __future__ import annotations

from typing import Any

from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, model_validator

from ..session import NAME_MAX
from ..status import NEEDS_HUMAN, RESULTS, server_status
from .runner import public_status


# strict: "5" is not a number and "yes" is not an approval, at this edge above all
EDGE = ConfigDict(extra="forbid", strict=True)


class RunIn(BaseModel):
    model_config = EDGE

    input: str = Field(min_length=1, max_length=200_000)
    """The task, in plain words."""
    session: str | None = Field(None, min_length=1, max_length=NAME_MAX)
    """Continue (or start) this named conversation."""
    max_steps: int | None = Field(None, ge=1, le=1000)
    stream: bool = False
    """The client will follow the run's deltas: its replies stream from the first call."""


class ItemIn(BaseModel):
    """A person's input for one item of several a run waits for."""

    model_config = EDGE

    answer: str | None = Field(None, max_length=200_000)
    approve: bool | None = None
    reason: str | None = Field(None, max_length=10_000)


class RespondIn(BaseModel):
    model_config = EDGE

    answer: str | None = Field(None, max_length=200_000)
    """The answer to the run's question; for a `once` call cut short, happened, again or
    fail."""
    approve: bool | None = None
    """The decision on the run's pending call."""
    reason: str | None = Field(None, max_length=10_000)
    """Why the call is refused (or what the person knows of a `once` call); the model
    reads it."""

    items: dict[str, ItemIn] | None = Field(None, max_length=64)
    """When the run waits for several items (`required_action.items`): each one's input by
    its id; an item left out takes `answer` or `approve` above."""

    @model_validator(mode="after")
    def _one(self) -> RespondIn:
        if self.answer is not None and self.approve is not None or \
                self.answer is None and self.approve is None and not self.items:
            raise ValueError('send either {"answer": "..."} or {"approve": true|false}, or '
                             '{"items": {"ID": {...}}} for a run that waits for several')
        return self

    def given_items(self) -> dict[str, dict] | None:
        return {k: v.model_dump() for k, v in self.items.items()} if self.items else None


def run_view(info: Any) -> dict[str, Any]:
    state = info.state
    status = public_status(info)
    return {
        "id": info.id, "session": info.session or info.session_id, "session_id": info.session_id,
        "status": status, "input": info.question,
        "created_at": info.created_at, "updated_at": info.updated_at,
        "steps": [_step(s) for s in state.steps],
        "answer": state.answer, "error": state.error, "error_kind": state.error_kind,
        "usage": state.usage.model_dump(),
        "result_status": state.status if state.status in RESULTS else None,
        "required_action": state.pending.model_dump()
        if status == server_status(NEEDS_HUMAN) and state.pending else None,
        "parent_run_id": info.parent_run_id, "depth": info.depth,
    }


def _step(s: Any) -> dict[str, Any]:
    """A step of one call with its fields; a step of several with the list of them."""
    calls = [{"tool": c.tool, "args": c.args, "observation": c.observation, "error": c.error}
             for c in s.calls]
    seconds = round(s.model_s + max(c.tool_s for c in s.calls), 4)
    if len(calls) > 1:
        return {"index": s.index, "thought": s.thought, "calls": calls, "seconds": seconds}
    return {"index": s.index, "thought": s.thought, **calls[0], "seconds": seconds}


def tree_view(store: Any, info: Any) -> dict[str, Any]:
    """A run with its sub-runs (agents used as tools), all the way down."""
    return {**run_view(info), "sub_runs": [tree_view(store, sub)
                                           for sub in store.sub_runs(info.id)]}


def session_view(info: Any) -> dict[str, Any]:
    return {"id": info.id, "name": info.name, "runs": info.runs, "last_run": info.last_run,
            "last_status": info.last_status, "created_at": info.created_at,
            "updated_at": info.updated_at}


def error(status: int, message: str, **extra: Any) -> JSONResponse:
    return JSONResponse({"error": message, **extra}, status_code=status)
