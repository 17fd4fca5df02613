"""One key per tool call, and what the call log keeps of each call.

The key is derived from the run id, the step and the call's index in the step (0 when a
step has one call), so a step done again after a takeover, a resume or a retry gets the
same key, and every other call another one. Parallel calls, the call log, HTTP's
`Idempotency-Key`, a command's `JSONAGENT_IDEMPOTENCY_KEY`, MCP's `_meta`, an A2A message's
`metadata` and a sub-run's identity all use this one key (`call_key`).

A tool declares what running a call twice does (`effects`):
- `idempotent`: nothing more than running it once (the built-in tools, HTTP GET, agents
  used as tools, which re-attach to their sub-run): a call cut short runs again;
- `once`: something a second run would do again (an email, a payment): a call cut short
  is not run again until a person says what happened;
- `unknown`: the default for your tools: a call cut short runs again with the same key,
  and the run's events say so.
"""

from __future__ import annotations

import hashlib
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Literal

Effects = Literal["idempotent", "once", "unknown"]
EFFECTS: tuple[str, ...] = ("idempotent", "once", "unknown")
IDEMPOTENT, ONCE, UNKNOWN = EFFECTS

KEY_ENV = "JSONAGENT_IDEMPOTENCY_KEY"
"""Where a command handler finds its call's key."""
KEY_HEADER = "Idempotency-Key"
"""The header an HTTP handler's request carries it in (as payment APIs read it)."""
KEY_META = "idempotency_key"
"""Its name in an MCP request's `_meta` and an A2A message's `metadata`."""

# A person's answer about a `once` call that started and has no recorded result. Each
# answer is accepted under its short name and the words the question offers.
HAPPENED, AGAIN, FAIL = "happened", "again", "fail"
RAN_AGAIN = "ran_again"
"""A call cut short whose effects let it run again with its key: it is, unasked."""
RUN_AGAIN = (RAN_AGAIN, AGAIN)
"""The actions after which a recovered call runs again."""
ONCE_ANSWERS = {HAPPENED: ("happened", "it happened"),
                AGAIN: ("again", "run it again", "run again"),
                FAIL: ("fail", "fail the step")}

# How a `once` call that began ended, in the run's record (`state.OnceCall.ended`), besides
# a person's answer (HAPPENED or FAIL; AGAIN runs it, which then ends one of these ways).
RETURNED, CALL_FAILED, CUT_SHORT = "returned", "failed", "cut_short"
"""Its result was recorded (it returned, or it failed); or the run stopped before it, and a
person is asked what became of it."""
UNDECIDED = (None, CUT_SHORT)
"""How a call ended when nobody knows whether its effect happened: running (or its process
died), or cut short with its question unanswered."""
ANSWERED = (HAPPENED, FAIL)
"""A person's word on it, which a result recorded later (a takeover reading the log) does
not replace."""


def call_key(run_id: str, step: int, index: int = 0) -> str:
    """The one key of a tool call: `RUN.STEP.INDEX`. Readable in a log or a payment
    API's dashboard, and unique since run ids are."""
    return f"{run_id}.{step}.{index}"


def call_index(key: str) -> int:
    """The index in its step of the call whose key this is."""
    return int(key.rsplit(".", 1)[1])


def sub_run_id(key: str) -> str:
    """The run id of the sub-run a call starts (an agent used as a tool, in-process or over
    A2A): derived from the call's key, so a step done again finds the sub-run it started
    instead of a second one."""
    return "run_" + hashlib.sha256(key.encode()).hexdigest()[:16]


def once_answer(text: str | None) -> str | None:
    """`happened`, `again` or `fail` for a person's answer, None when it is none of them."""
    said = " ".join((text or "").strip().lower().rstrip(".!").split())
    return next((kind for kind, words in ONCE_ANSWERS.items() if said in words), None)


def once_question(tool: str | None, args: Any, key: str | None) -> str:
    """What a person is asked about a `once` call cut short, on every front end."""
    import json

    return (f"The call of {tool} with {json.dumps(args or {}, ensure_ascii=False)} (key {key}) "
            "started before the run was interrupted, and its result was not recorded. Did it "
            "happen? Answer happened, again (run it again) or fail (fail the step).")


@dataclass
class Call:
    """One tool call as the call log keeps it: recorded before it runs, with its result
    once it ended."""

    key: str
    run_id: str
    step: int
    index: int
    tool: str
    args: dict[str, Any]
    effects: str = UNKNOWN
    started_at: float = 0.0
    ended_at: float | None = None
    result: Any = None
    """What the tool returned, as JSON data (the observation before any hook)."""
    error: bool = False

    @property
    def ended(self) -> bool:
        return self.ended_at is not None


_current: ContextVar[str | None] = ContextVar("jsonagent_call_key", default=None)


def current_key() -> str | None:
    """The key of the tool call running in this context: a handler that has no
    `RunContext` (a command, an HTTP request, an MCP call) reads it here."""
    return _current.get()


def keyed(values: dict[str, str], name: str) -> dict[str, str]:
    """`values` plus the running call's key under `name` (an env variable, a header)."""
    key = _current.get()
    return {**values, name: key} if key else values


def set_current(key: str | None) -> Any:
    return _current.set(key)


def reset_current(token: Any) -> None:
    _current.reset(token)
