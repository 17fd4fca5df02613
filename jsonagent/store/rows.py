"""What the SQL stores share: when a run is checkpointed, and the messages and values they
build from a run's row, so that SQLite and PostgreSQL say the same things."""

from __future__ import annotations

import json
import threading
import time
from typing import Any, Callable

from ..calls import Call
from ..state import RunState
from ..status import INTERRUPTED, QUEUED, RUNNING
from . import Owner, RunInfo, SessionInfo, resume_command

SUB_SESSIONS_HIDDEN = ("WHERE NOT EXISTS (SELECT 1 FROM runs c WHERE c.session_id = s.id "
                       "AND c.parent_run_id IS NOT NULL)")
"""The sessions people had: a sub-run's own session is shown with its tree, not listed."""

# Events after which the state is checkpointed: the points a run can be continued from. A
# step's model reply waits for its tool's result; after a crash in between, the run does
# that step again, model call included.
CHECKPOINTS = {"run_start", "run_resumed", "tool_result", "run_end"}


def mid_step(event: Any, state: RunState) -> bool:
    """A call's result while others of its step still run. Each call's start and end are in
    the call log already, which a run taken up again reads (calls.py): a store may write the
    state at only some of these, since writing the whole state at each of N results made a
    step of N calls cost N squared."""
    if event.type != "tool_result" or not state.steps:
        return False
    step = state.steps[-1]
    # from the last call: results come mostly in the order the calls started
    return step.index == event.step and not all(c.done for c in reversed(step.calls))



LATER_S = 0.5
"""A result a store held back (Throttle) is written within this, for whoever follows."""


class Throttle:
    """Which mid-step results (`mid_step`) a store writes the state at: the first, then one
    once ten times the last write's cost has passed, so writing the state takes a tenth of
    the step at most."""

    def __init__(self) -> None:
        self._last: dict[str, tuple[float, float]] = {}  # run id -> (written at, cost)
        self._timers: dict[str, threading.Timer] = {}

    def later(self, run_id: str, flush: Callable[[], None]) -> None:
        """`flush()` once within LATER_S: a result held back reaches followers (SSE, AG-UI)
        soon, however long the calls beside it run."""
        if run_id not in self._timers:
            timer = self._timers[run_id] = threading.Timer(LATER_S, self._fire, (run_id, flush))
            timer.daemon = True
            timer.start()

    def _fire(self, run_id: str, flush: Callable[[], None]) -> None:
        self._timers.pop(run_id, None)
        flush()

    def skip(self, event: Any, state: RunState) -> bool:
        last = self._last.get(event.run_id)
        return mid_step(event, state) and last is not None and \
            time.perf_counter() - last[0] < 10 * last[1]

    def wrote(self, event: Any, state: RunState, since: float) -> None:
        """A write of the state for `event` that began at `since` (perf_counter) ended."""
        if mid_step(event, state):
            self._last[event.run_id] = (time.perf_counter(), time.perf_counter() - since)
        else:
            self._last.pop(event.run_id, None)

    def write(self, event: Any, state: RunState, write: Callable[[bool], None]) -> None:
        """`write(only_check)`: the state at a checkpoint not skipped, else the claim only."""
        check = event.type not in CHECKPOINTS or self.skip(event, state)
        since = time.perf_counter()
        write(check)
        if not check:
            self.wrote(event, state, since)


CALL_COLUMNS = "key, run_id, step, idx, tool, args, effects, started_at, ended_at, result, error"


def call_row(call: Call) -> tuple:
    """A call's values for an INSERT of CALL_COLUMNS."""
    return (call.key, call.run_id, call.step, call.index, call.tool, json.dumps(call.args),
            call.effects, call.started_at, call.ended_at,
            None if call.result is None else json.dumps(call.result), call.error)


def call_of(row: dict[str, Any]) -> Call:
    return Call(key=row["key"], run_id=row["run_id"], step=row["step"], index=row["idx"],
                tool=row["tool"], args=json.loads(row["args"]), effects=row["effects"],
                started_at=row["started_at"], ended_at=row["ended_at"],
                result=None if row["result"] is None else json.loads(row["result"]),
                error=bool(row["error"]))


def owner(text: str | None) -> Owner:
    return Owner(**json.loads(text)) if text else Owner(0, "", 0.0)


def owner_json(who: Owner) -> str:
    return json.dumps(who.__dict__)


def claimed(text: str, status: str) -> RunState:
    """The state of a run just claimed from `status`: a queued run starts (or resumes with
    its decision); a running one whose process died is interrupted."""
    state = RunState.model_validate_json(text)
    if status != QUEUED:
        state.status = status if status != RUNNING else INTERRUPTED
    return state


def waiting_message(run_id: str, state_text: str) -> str:
    """Why a session whose run waits for a person refuses a new run, and what answers it."""
    pending = json.loads(state_text).get("pending") or {}
    if pending.get("kind") == "approval":
        what = f"an approval of {pending.get('tool')}"
    elif pending.get("kind") == "once":
        what = f"a person to say what became of a call of {pending.get('tool')}"
    else:
        what = f"an answer to {json.dumps(pending.get('question', ''), ensure_ascii=False)}"
    return f"this session's run {run_id} waits for {what}: answer it with " \
           f"`{resume_command(run_id, pending)}`"


def run_info(row: dict[str, Any], status: str) -> RunInfo:
    """A run from its row (with its session's `name`), shown with its live `status`."""
    state = RunState.model_validate_json(row["state"])
    state.status = status
    return RunInfo(id=row["id"], session_id=row["session_id"], session=row["name"],
                   status=status, question=row["question"], created_at=row["created_at"],
                   updated_at=row["updated_at"], state=state, served=bool(row["served"]),
                   orphaned=row["status"] != status,
                   decision=json.loads(row["decision"]) if row["decision"] else None,
                   parent_run_id=row["parent_run_id"], depth=row["depth"])


def session_info(row: dict[str, Any], last_status: str | None) -> SessionInfo:
    return SessionInfo(id=row["id"], name=row["name"], created_at=row["created_at"],
                       updated_at=row["updated_at"], runs=row["runs"], last_run=row["last_run"],
                       last_status=last_status)


def ended(state_text: str, run_id: str, status: str, error: str) -> tuple[RunState, Any]:
    """The state and the closing run_end event of a run ended where it sat (`end_run`)."""
    from ..events import RunEnd

    state = RunState.model_validate_json(state_text)
    state.status, state.error, state.pending = status, error, None
    state.seq += 1
    end = RunEnd(run_id=run_id, session_id=state.session_id, seq=state.seq, status=status,
                 parent_run_id=state.parent_run_id, depth=state.depth, error=error,
                 usage=state.usage, stats=state.stats.model_dump())
    return state, end
