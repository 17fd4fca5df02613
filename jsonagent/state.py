"""A run as a value: everything needed to continue it, in one pydantic model.

The records a step adds (`Message`, `StepRecord`) are slotted dataclasses: the loop builds
them from validated values a few times a step, and pydantic checks them where they come in
from outside, when a stored `RunState` is read.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_serializer, model_validator

from .usage import Usage
from .status import RUNNING

Role = Literal["system", "user", "assistant", "observation"]
STATE_VERSION = 2
"""2: a step holds a list of calls (1 kept each call's fields on its step)."""

to_json = json.JSONEncoder(ensure_ascii=False).encode
"""How the history writes JSON: text as it is, not \\u-escaped. One encoder for the process:
`json.dumps` builds a new one on every call that passes an option."""


@dataclass(slots=True)
class Message:
    """One entry of the stored history, in no prompt style in particular.

    An assistant message holds a step as JSON: the reply as the model wrote it when that is
    the step exactly (an endpoint's prompt cache holds it), else `Step.to_json()`. An
    observation holds `{"tool_name": ..., "response": ..., "note"?: ...}` as JSON. A prompt
    style renders them for each request (`prompt.PromptStyle.render`).
    """

    role: Role
    content: str


class MemoryState(BaseModel):
    """What the context policy (`memory.Memory`) keeps between requests. It changes only
    when the context is compacted, so the requests in between share a byte-identical prefix,
    and a run resumed in another process sends the same context."""

    model_config = ConfigDict(defer_build=True)

    summary: str | None = None
    """The text shown in the slot right after the system prompt, standing for
    `messages[1:start]`; None while nothing has been compacted."""
    start: int = 1
    """Index of the first stored message the context shows as it is."""
    bare: int = 1
    """Steps stored before this index are shown without their thought."""
    tokens_per_char: float = 0.0
    """The estimate's calibration: prompt tokens the endpoint reported per character sent
    (0 until the first reply)."""




@dataclass(slots=True, kw_only=True)
class CallRecord:
    """One tool call of a step, and what became of it."""

    tool: str
    args: dict[str, Any]
    observation: Any = None
    error: bool = False
    """The tool failed or the call was refused; `observation` holds what the model was told."""
    tool_s: float = 0.0
    done: bool = False
    """Its observation is in: a step taken up again (after a pause or a crash) runs only the
    calls that are not done."""
    note: str | None = None
    """What the loop told the model beside the observation."""


def _first(name: str) -> property:
    def get(self: StepRecord) -> Any:
        return getattr(self.calls[0], name)

    def put(self: StepRecord, value: Any) -> None:
        setattr(self.calls[0], name, value)

    return property(get, put, doc=f"The first call's `{name}`: the step's only one, unless "
                    "the run makes several calls a step (`AgentConfig.parallel_calls`).")


@dataclass(slots=True, kw_only=True)
class StepRecord:
    index: int
    thought: str
    calls: list[CallRecord]
    """The step's tool calls, in the order the model wrote them: one, unless the run makes
    several a step."""
    repairs: list[str] = field(default_factory=list)
    model_s: float = 0.0
    """Time spent waiting for the model, re-asks included."""
    model: str | None = None
    """The model that wrote the step, when one of several could have (a fallback model)."""

    tool, args, observation, error, tool_s = map(_first, ("tool", "args", "observation",
                                                          "error", "tool_s"))


def flat_steps(steps: Any, in_flight: bool = False) -> Any:
    """Steps read in the public shape (`step_view`) or as a state of version 1 kept them,
    one call's fields on the step: as steps that hold their calls. Each is done, but the
    last one of a run `in_flight`."""
    if not isinstance(steps, list) or not steps or not isinstance(steps[0], dict):
        return steps  # the records themselves (a run's RunResult): nothing to read
    out = []
    for n, step in enumerate(steps):
        if isinstance(step, dict) and "calls" not in step:
            step = dict(step)
            call = {k: step.pop(k) for k in _CALL_FIELDS if k in step}
            call["done"] = not (in_flight and n == len(steps) - 1)
            step["calls"] = [call]
        out.append(step)
    return out


_CALL_FIELDS = ("tool", "args", "observation", "error", "tool_s")


def step_view(step: StepRecord) -> dict[str, Any]:
    """A step as the public JSON shows it (a RunResult, an export): a step of one call with
    that call's fields on it, as always; a step of several calls with the list of them."""
    head = {"index": step.index, "thought": step.thought}
    tail = {"repairs": step.repairs, "model_s": step.model_s, "model": step.model}
    if len(step.calls) == 1:
        c = step.calls[0]
        return {**head, "tool": c.tool, "args": c.args, "observation": c.observation,
                "error": c.error, **tail, "tool_s": c.tool_s}
    return {**head, "calls": [{"tool": c.tool, "args": c.args, "observation": c.observation,
                               "error": c.error, "tool_s": c.tool_s, "note": c.note}
                              for c in step.calls], **tail}


class Stats(BaseModel):
    model_config = ConfigDict(defer_build=True)
    model_calls: int = 0
    repairs: int = 0
    reasks: int = 0
    invalid_replies: int = 0
    grammar_reasks: int = 0
    """Of the invalid replies, those written without the schema's grammar (an endpoint where
    it is costly) that broke what it holds, and were asked for again under it."""
    answer_nudges: int = 0
    """Final answers sent back because they had numbers the run never saw (grounding.py)."""
    retries: int = 0
    """Model requests sent again after a failure that waiting may cure."""


class Pending(BaseModel):
    """What a paused run waits for: `{"kind": "question", "question": ...}`,
    `{"kind": "approval", "tool": ..., "args": ...}`, or `{"kind": "once", "tool": ...,
    "args": ..., "key": ...}`: a `once` call that started before a crash, a takeover, Ctrl-C
    or a cancel and has no recorded result, about which a person answers `happened`, `again`
    or `fail` (calls.py). It concerns the run's last step: one of its calls, or several (`items`)."""

    model_config = ConfigDict(frozen=True, defer_build=True)

    kind: Literal["question", "approval", "once"]
    question: str | None = None
    tool: str | None = None
    args: dict[str, Any] | None = None
    key: str | None = None
    """The call's key (a `once` call): what to look for in the API it called."""
    path: list[str] | None = None
    """When a sub-run waits (an agent used as a tool): the run ids from this run down to the
    waiting one; a remote A2A task is `a2a:CONTEXT/TASK`. None when this run itself waits."""
    id: str | None = None
    """Which call of its step this item is for (the call's key), in a step of several calls;
    None in a step of one."""
    items: list[Pending] | None = None
    """Every item, when the step waits for several (approvals, questions of its calls): the
    fields above are then the first item's. None when it waits for one."""

    @property
    def each(self) -> list[Pending]:
        """The items the run waits for: one, or several."""
        return self.items or [self]

    @model_serializer(mode="wrap")
    def _no_nulls(self, handler):  # one shape everywhere, nested or not
        return {k: v for k, v in handler(self).items() if v is not None}


class OnceCall(BaseModel):
    """A `once` call that began in the run, and how it ended: what a run tried again (a
    resume, an eval's `--retry-errors`) would do a second time."""

    model_config = ConfigDict(defer_build=True)

    key: str
    tool: str
    ended: str | None = None
    """One of calls.py's endings: RETURNED or CALL_FAILED (the tool's result, recorded);
    CUT_SHORT (the run stopped before its result: a person is asked what became of it); a
    person's answer, HAPPENED or FAIL (AGAIN runs it again); None while it runs, or when its
    process died."""


class RunState(BaseModel):
    """Everything needed to continue a run, in this process or another one.

    `messages` is the whole conversation the model sees (the session's earlier runs too);
    `steps` are this run's. The run is waiting for a tool's result when the last message is
    the assistant's step and nothing is pending: that step is the one in flight.
    """

    model_config = ConfigDict(defer_build=True)

    v: int = STATE_VERSION
    run_id: str
    session_id: str
    question: str
    status: str = RUNNING
    """running, or a RunResult status once it stopped (needs_human pauses it)."""
    messages: list[Message]
    steps: list[StepRecord] = []
    pending: Pending | None = None
    json_mode: str
    tool_calls: bool = False
    """The history goes in the native tool-call form (see prompt.py); False for a model
    without it, and from the first refusal on (a state stored before it: the plain form)."""
    usage: Usage = Field(default_factory=Usage)
    stats: Stats = Field(default_factory=Stats)
    answer: Any = None
    """The final answer, as JSON data."""
    error: str | None = None
    error_kind: str | None = None
    """How the model failed, when that ended the run (errors.MODEL_ERROR_KINDS)."""
    seq: int = 0
    """Number of the last event emitted."""
    config: dict[str, Any] = {}
    toolset: str = ""
    """Fingerprint of the tool specs the run was started with."""
    tools: list[str] = []
    model: str = ""
    server: dict[str, Any] | None = None
    """The model server found behind the endpoint and what that set (models/servers.py);
    None for a model that is not an endpoint's."""
    origin: dict[str, Any] = {}
    """How the front end built the agent (the CLI's options), so that it can be built again."""
    memory: MemoryState = Field(default_factory=MemoryState)
    """The context policy's layout: the summary slot and what it covers (see memory.py)."""
    code_used: bool = False
    """The code interpreter ran in this conversation: its variables die with the process."""
    traceparent: str | None = None
    """The caller's trace (a W3C traceparent: a request's header, a batch's span): the
    run's span is its child. None: the current context's, if any."""
    span: str | None = None
    """The run's last invoke_agent span, as a traceparent, when it was traced: a resumed
    run's span links to it, in this process or another."""
    parent_run_id: str | None = None
    """The run whose tool started this one (an agent used as a tool); None at the top."""
    depth: int = 0
    """0 for a top run, its parent's depth + 1 for a sub-run."""
    sub_steps: int = 0
    """Steps its sub-runs took, all the way down: they count against this run's max_steps."""
    once: list[OnceCall] = []
    """The `once` calls that began in this run, in the order they began (calls.py)."""

    @model_validator(mode="before")
    @classmethod
    def _read_v1(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("v", STATE_VERSION) < 2:
            messages = data.get("messages") or [{}]
            last = messages[-1]
            role = last.get("role") if isinstance(last, dict) else getattr(last, "role", None)
            data = {**data, "v": STATE_VERSION,
                    "steps": flat_steps(data.get("steps"), in_flight=role == "assistant")}
        return data

    @property
    def in_flight(self) -> bool:
        return self.pending is None and bool(self.messages) and self.messages[-1].role == "assistant"


def new_id(prefix: str) -> str:
    return f"{prefix}_{os.urandom(8).hex()}"
