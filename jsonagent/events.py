"""What a run emits, as it happens: typed events, one stream for every consumer.

The CLI display, the JSONL transcript (`journal`) and the store all read this one stream.
Every event carries its run, its session, a sequence number within the run (resuming goes
on counting) and the schema version `v`.

Events are slotted dataclasses, not pydantic models: a step makes three of them, building one
costs a third of validating it (1 µs against 3), and nothing needs checking, since the loop
builds them from values it already validated. pydantic writes them (`to_json`) and reads them
back (`reader()`), with the same classes.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from functools import cache
from typing import Annotated, Any, Literal, Union

from pydantic import Field, TypeAdapter

from .usage import Usage
from .state import Pending

SCHEMA_VERSION = 1


def jsonable(obj: Any) -> Any:
    """Plain JSON data for anything a tool or an answer may be: models, dataclasses, objects."""
    def fallback(o: Any) -> Any:
        if hasattr(o, "model_dump"):
            return o.model_dump(mode="json")
        if hasattr(o, "to_dict"):
            return o.to_dict()
        if hasattr(o, "__dataclass_fields__"):
            import dataclasses

            return dataclasses.asdict(o)
        if isinstance(o, (set, frozenset, tuple)):
            return list(o)
        return str(o)

    if obj is None or isinstance(obj, (str, int, float, bool)):
        return obj
    return json.loads(json.dumps(obj, ensure_ascii=False, default=fallback))


_slotted = dataclass(slots=True, kw_only=True)


@_slotted
class Event:
    v: int = SCHEMA_VERSION
    """The events' schema version."""
    run_id: str = ""
    """The run it belongs to."""
    session_id: str = ""
    """The session (conversation) the run belongs to."""
    seq: int = 0
    """1, 2, 3... within a run; a resumed run goes on from its last number."""
    t: float = field(default_factory=time.time)
    """Unix time the event happened."""
    parent_run_id: str | None = None
    """The run this event's run is a sub-run of (an agent used as a tool); None at the top."""
    depth: int = 0
    """How deep its run is in the tree of runs: 0 at the top."""

    def to_json(self) -> str:
        return _adapter(type(self)).dump_json(self).decode()


@cache
def _adapter(cls: type) -> TypeAdapter:
    return TypeAdapter(cls)


@_slotted
class RunStart(Event):
    type: Literal["run_start"] = "run_start"
    question: str
    model: str
    json_mode: str
    config: dict[str, Any]
    toolset: str
    """Fingerprint of the tool specs the model was shown."""
    tools: list[str]
    server: dict[str, Any] | None = None
    """The model server found behind the endpoint and what that set (models/servers.py)."""


@_slotted
class RunResumed(Event):
    type: Literal["run_resumed"] = "run_resumed"
    answer: str | None = None
    """The person's answer to the pending question."""
    approved: bool | None = None
    """The decision on the pending approval."""
    reason: str | None = None
    note: str | None = None
    """What the model was told about the pause (a restarted code interpreter)."""
    items: dict[str, Any] | None = None
    """Each item's input by its id (`answer`, `approve`, `reason`), when the run waited for
    several."""


@_slotted
class ModelCall(Event):
    type: Literal["model_reply"] = "model_reply"
    step: int
    attempt: int
    raw: str
    """The reply exactly as it came, valid or not."""
    usage: Usage
    latency_s: float
    json_mode: str
    finish_reason: str | None = None
    """stop, or length when the reply reached its token cap; None for a stream that stopped
    without its end, and in transcripts written before it was recorded."""
    sampling: dict[str, Any] | None = None
    """The sampling settings the request carried, as the backend sent them (None: the
    backend does not say, or a transcript written before they were recorded)."""
    model: str | None = None
    """The model that answered, when one of several could have (a fallback model); None:
    the run's model."""


@_slotted
class Reask(Event):
    type: Literal["reask"] = "reask"
    step: int
    attempt: int
    stage: str
    problem: str


@_slotted
class ModelRetry(Event):
    """A model request failed for now and goes again after `wait_s` (a rate limit, an
    overload, a timeout), or at once once the context is summarised (a window exceeded)."""

    type: Literal["model_retry"] = "model_retry"
    step: int
    attempt: int
    kind: str
    """How it failed (errors.MODEL_ERROR_KINDS)."""
    model: str
    wait_s: float
    error: str
    """The failure, as the endpoint said it."""
    said: str
    """What a person is told: "rate limited, retrying in 4 s"."""
    restart: bool = False
    """Part of the reply had been shown as it was written (its deltas): that is void, and
    the reply is written again from its start."""


@_slotted
class ModelFallback(Event):
    """The next model of a fallback list takes the request over; it answers from now on."""

    type: Literal["model_fallback"] = "model_fallback"
    step: int
    attempt: int
    kind: str
    """Why: a kind of model failure, or invalid_replies (fallback_on_invalid)."""
    model: str
    """The model that failed."""
    fallback: str
    """The model that takes over."""
    error: str
    restart: bool = False
    """As in ModelRetry: what was shown of the reply is void."""


@_slotted
class JsonModeChange(Event):
    type: Literal["json_mode"] = "json_mode"
    old: str
    new: str
    reason: str


@_slotted
class StepTaken(Event):
    type: Literal["step"] = "step"
    step: int
    thought: str
    tool: str
    args: dict[str, Any]
    """The step's call; in a step of several calls, its first (`calls` lists them all)."""
    repairs: list[str]
    calls: list[dict[str, Any]] | None = None
    """A step of several calls: each `{"tool": ..., "args": ...}`, in order; each then has a
    ToolCall when it starts. None for a step of one call, whose call this event is."""


@_slotted
class ToolCall(Event):
    """A call of a step of several starts; the calls that run together start together."""

    type: Literal["tool_call"] = "tool_call"
    step: int
    call: int
    """Its index in the step."""
    tool: str
    args: dict[str, Any]
    key: str
    """The call's key (calls.py)."""


@_slotted
class Approval(Event):
    type: Literal["approval"] = "approval"
    step: int
    tool: str
    approved: bool
    reason: str | None = None
    call: int = 0
    """Which call of its step: its index, 0 in a step of one call."""


@_slotted
class ToolResult(Event):
    type: Literal["tool_result"] = "tool_result"
    step: int
    tool: str
    observation: Any
    error: bool
    duration_s: float
    note: str | None = None
    """What the loop added for the model beside the observation."""
    call: int = 0
    """Which call of its step: its index, 0 in a step of one call."""


@_slotted
class CallRecovered(Event):
    """A step's tool call had started before the run was resumed or taken over: what was
    done with it instead of asking the model for the step again (calls.py)."""

    type: Literal["call_recovered"] = "call_recovered"
    step: int
    tool: str
    key: str
    effects: str
    action: str
    """`result_used` (it had ended: never run again), `ran_again` (with the same key),
    `asked` (a `once` call: a person says what happened), or the person's answer:
    `happened`, `again`, `fail`."""
    call: int = 0
    """Which call of its step: its index, 0 in a step of one call."""


@_slotted
class SummaryCall(Event):
    """One request that condensed older messages for the context (memory.py)."""

    type: Literal["summary"] = "summary"
    step: int
    model: str
    messages: int
    """Stored messages it condensed."""
    text: str | None = None
    """The summary, or None when the call failed."""
    error: str | None = None
    usage: Usage
    latency_s: float


@_slotted
class ContextChange(Event):
    """The context was compacted to stay under the budget; the stored history is untouched."""

    type: Literal["context"] = "context"
    step: int
    action: Literal["thoughts", "summarised", "dropped"]
    """thoughts: older steps shown without their thought; summarised: older turns replaced
    by the summary; dropped: older turns left out, because summarising failed."""
    covered: int
    """Stored messages (after the system prompt) the context no longer shows as they are."""
    tokens_before: int
    tokens_after: int
    budget: int
    counting: str
    """exact or estimate."""
    reason: str | None = None


@_slotted
class RunEnd(Event):
    """The last event of a run, or of one stretch of it when it pauses (needs_human)."""

    type: Literal["run_end"] = "run_end"
    status: str
    answer: Any = None
    error: str | None = None
    error_kind: str | None = None
    """How the model failed, when that ended the run (see RunResult)."""
    pending: Pending | None = None
    usage: Usage
    stats: dict[str, int]
    result: Annotated[Any, Field(exclude=True)] = field(default=None, repr=False, compare=False)
    """The RunResult, in memory only (the fields above are its record)."""


@_slotted
class Delta:
    """A piece of the reply the model is writing now, for those watching live.

    Deltas are live only: never stored nor written to a transcript, and without a sequence
    number (`Last-Event-ID` counts stored events only). They are built only for a run that
    someone streams. What the reply turns out to be is said by the stored event that follows:
    a `step` (its `repairs` say when its thought differs from what was shown) or a `reask`
    (what was shown for that attempt is void).
    """

    run_id: str = ""
    session_id: str = ""
    step: int = 0
    attempt: int = 0
    """0 for the first try at the step; a re-ask writes the step again with attempt + 1."""
    t: float = field(default_factory=time.time)

    def to_json(self) -> str:
        return _adapter(type(self)).dump_json(self).decode()


@_slotted
class ThoughtDelta(Delta):
    type: Literal["thought_delta"] = "thought_delta"
    text: str
    """The next characters of the thought: the pieces of one attempt add up to its thought."""


@_slotted
class ToolNameKnown(Delta):
    type: Literal["tool_name"] = "tool_name"
    name: str
    """The tool name as written (the step may correct its case)."""


@_slotted
class ArgsDelta(Delta):
    type: Literal["args_delta"] = "args_delta"
    text: str
    """The next characters of `args_list` as raw JSON text."""


DELTAS = {"thought": ThoughtDelta, "tool": ToolNameKnown, "args": ArgsDelta}
"""The event of each kind of delta the partial reader (partial.py) finds."""


AnyEvent = Annotated[Union[RunStart, RunResumed, ModelCall, ModelRetry, ModelFallback, Reask,
                           JsonModeChange, StepTaken, ToolCall,
                           Approval, ToolResult, CallRecovered, SummaryCall, ContextChange,
                           RunEnd],
                     Field(discriminator="type")]


@cache
def reader() -> TypeAdapter:
    """Reads an event's JSON back into its class; built on first use (about 25 ms), since
    only reading a transcript needs it."""
    return TypeAdapter(AnyEvent)
