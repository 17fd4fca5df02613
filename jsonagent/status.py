"""The run statuses, spelled once, and every mapping derived from them.

| status (`RunResult`, the store) | server     | A2A task state | exit code |
| ------------------------------- | ---------- | -------------- | --------- |
| queued                          | queued          | SUBMITTED      | –   |
| running                         | in_progress     | WORKING        | –   |
| needs_human                     | requires_action | INPUT_REQUIRED | 4   |
| completed                       | completed       | COMPLETED      | 0   |
| max_steps                       | incomplete      | FAILED         | 3   |
| stalled                         | incomplete      | FAILED         | 5   |
| limit_reached                   | incomplete      | FAILED         | 8   |
| failed                          | failed          | FAILED         | 1   |
| failed, because the model did   | failed          | FAILED         | 6, 7 |
| interrupted                     | cancelled       | CANCELED       | 130 |
| expired                         | expired         | FAILED         | –   |

A run whose process died while `running` is shown `interrupted` (`in_progress` on the server
that owns it, which takes it over). A run stopped inside a `once` call (Ctrl-C, a cancel, a
client gone) is `needs_human`, not `interrupted`: its pending asks whether the call happened,
and its `error` says what stopped it. New statuses are added here and nowhere else, and so are
the reasons a run stops short (`Reason`): a cancel's reason, a run's `error`, what the store
records for a run ended where it sat.
"""

from __future__ import annotations

from typing import Literal, NamedTuple

Status = Literal["queued", "running", "needs_human", "completed", "max_steps", "stalled",
                 "failed", "interrupted", "expired", "limit_reached"]
Result = Literal["completed", "max_steps", "stalled", "needs_human", "failed", "interrupted",
                 "limit_reached"]
"""What a run's iterator can end on (`RunResult.status`)."""

QUEUED: Status = "queued"
RUNNING: Status = "running"
NEEDS_HUMAN: Status = "needs_human"
COMPLETED: Status = "completed"
MAX_STEPS: Status = "max_steps"
STALLED: Status = "stalled"
FAILED: Status = "failed"
INTERRUPTED: Status = "interrupted"
EXPIRED: Status = "expired"
LIMIT_REACHED: Status = "limit_reached"
"""A usage limit (config.UsageLimits) ended the run; its `error` names the limit."""


class Row(NamedTuple):
    server: str
    a2a: str
    exit_code: int | None


TABLE: dict[str, Row] = {
    QUEUED: Row("queued", "TASK_STATE_SUBMITTED", None),
    RUNNING: Row("in_progress", "TASK_STATE_WORKING", None),
    NEEDS_HUMAN: Row("requires_action", "TASK_STATE_INPUT_REQUIRED", 4),
    COMPLETED: Row("completed", "TASK_STATE_COMPLETED", 0),
    MAX_STEPS: Row("incomplete", "TASK_STATE_FAILED", 3),
    STALLED: Row("incomplete", "TASK_STATE_FAILED", 5),
    FAILED: Row("failed", "TASK_STATE_FAILED", 1),
    INTERRUPTED: Row("cancelled", "TASK_STATE_CANCELED", 130),
    EXPIRED: Row("expired", "TASK_STATE_FAILED", None),
    LIMIT_REACHED: Row("incomplete", "TASK_STATE_FAILED", 8),
}

ENDED = frozenset({COMPLETED, MAX_STEPS, STALLED, FAILED, EXPIRED, LIMIT_REACHED})
"""Nothing more happens to such a run."""
RESULTS = frozenset({COMPLETED, MAX_STEPS, STALLED, NEEDS_HUMAN, FAILED, INTERRUPTED,
                     LIMIT_REACHED})
"""What a run's iterator can end on (`RunResult.status`)."""
RESUMABLE = frozenset({NEEDS_HUMAN, INTERRUPTED, RUNNING, QUEUED})
"""What `resume` takes: a pause, an interruption, a run whose process died, a queued run."""
ACTIVE = frozenset({RUNNING, NEEDS_HUMAN})
"""What holds its session: one active run per session."""

SERVER_STATUSES = tuple(dict.fromkeys(row.server for row in TABLE.values()))
SERVER_FINAL = frozenset({"completed", "incomplete", "failed", "cancelled", "expired"})
STORED: dict[str, tuple[str, ...]] = {
    public: tuple(s for s, row in TABLE.items() if row.server == public)
    for public in SERVER_STATUSES}
"""The statuses behind each of the server's (an orphaned `running` run is stored as such)."""


def server_status(status: str) -> str:
    return TABLE[status].server


MODEL_FAILED_LATER, MODEL_FAILED = 6, 7
"""The CLI's exit code for a run that failed because the model did: 6 when trying again
later may help (rate limited, unavailable, timed out), 7 when it will not (authentication,
a bad request, the context window, a content filter)."""


def exit_code(status: str, error_kind: str | None = None) -> int:
    if status == FAILED and error_kind is not None:
        from .errors import TRANSIENT_KINDS

        return MODEL_FAILED_LATER if error_kind in TRANSIENT_KINDS else MODEL_FAILED
    code = TABLE[status].exit_code
    return 1 if code is None else code


class Reason:
    """Why a run stopped short, spelled once. The plain ones are a cancel's reason as it was
    given (`CancelToken.cancel(Reason.CANCELLED)`); the ones with figures are built here."""

    CANCELLED = "cancelled"
    """Someone stopped it: `agent.cancel`, the server's or A2A's cancel, its parent's cancel."""
    BY_USER = "interrupted by the user"
    """Ctrl-C in the process that drives it."""
    ABANDONED = "abandoned"
    """Whoever read its events stopped reading them."""
    TAKEN_OVER = "taken over by another node"
    """Its node lost its claim (cut off from the database past the takeover time)."""

    @staticmethod
    def timed_out(seconds: float) -> str:
        """A batch task past its `--task-timeout`."""
        return f"timed out after {seconds:g} s"

    @staticmethod
    def unanswered(seconds: float) -> str:
        """A served run that waited for a person past `--expire-after` (expired)."""
        return f"no answer within {seconds:g} s"

    @staticmethod
    def max_steps(limit: int, final: str) -> str:
        return f"stopped after {limit} steps without calling {final}"

    @staticmethod
    def replies_cut(reply_tokens: int) -> str:
        """Every try of a step was cut at the token cap: what sets the cap, and how to raise it."""
        return (f"each was cut off at the token limit, reply_tokens ({reply_tokens}); raise it "
                "with --reply-tokens N or AgentConfig(reply_tokens=N) (a model built by hand "
                "takes its own max_tokens)")

    @staticmethod
    def limit_reached(name: str, limit: str, used: str, what: str) -> str:
        """A usage limit (config.UsageLimits), by its name and as a person reads it: "limit
        tool_calls=3 reached: 3 used, and the model asked for another"."""
        return f"limit {name}={limit} reached: {used} used, and {what}"

    @staticmethod
    def stalled(kind: str, count: int, call: str) -> str:
        return f"the model repeated itself (the same {kind} {count} times): {call}"
