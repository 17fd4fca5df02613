"""A run's events in AG-UI's words: what `Translator` turns jsonagent's stored events and
live deltas into, in the order AG-UI's client verifies.

Per step (`STEP_STARTED "step N"` ... `STEP_FINISHED`): the thought as one reasoning message,
then the tool call: `TOOL_CALL_START` as soon as its name is known, `TOOL_CALL_ARGS` as its
arguments are written, `TOOL_CALL_END` once the step is stored, `TOOL_CALL_RESULT` with the
observation. Every message and call is closed before the next opens, so no client ever sees
arguments after an end or a call inside an open message. A reply that was not streamed
(nobody on this node wrote it live) comes whole from its stored step, in the same order.

The task-complete tool is no tool call to the client: its answer is the run's assistant text
message. A sub-run (an agent used as a tool) is a subagent nested under its parent's call,
its steps marked with its run id.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any, NamedTuple

from ag_ui.core import (BaseEvent, ReasoningEndEvent, ReasoningMessageContentEvent,
                        ReasoningMessageEndEvent, ReasoningMessageStartEvent, ReasoningStartEvent,
                        StepFinishedEvent, StepStartedEvent, SubagentFinishedEvent,
                        SubagentStartedEvent, TextMessageContentEvent, TextMessageEndEvent,
                        TextMessageStartEvent, ToolCallArgsEvent, ToolCallEndEvent,
                        ToolCallResultEvent, ToolCallStartEvent)

from ..calls import call_key
from ..events import ArgsDelta, Delta, ThoughtDelta, ToolNameKnown
from ..status import COMPLETED, NEEDS_HUMAN


def call_id(run_id: str, step: int, index: int = 0, attempt: int = 0, restarts: int = 0) -> str:
    """One id per tool call: its key (the run, the step, the call's index in the step,
    calls.py), the attempt at the step's reply when a re-ask wrote it again, and the requests
    sent again from the reply's start (a model retry or fallback that restarts it), so that a
    void call and the one written after it are two calls to the client (one id, and the
    client would append the new arguments to the void ones). The same call has the same id
    in every stream, on every node."""
    key = call_key(run_id, step, index)
    key = key if not attempt else f"{key}.r{attempt}"
    return key if not restarts else f"{key}s{restarts}"


def shown(store: Any, key: str, read: dict[str, dict] | None = None) -> str:
    """The id the client was shown for the call of `key`: with its step's attempt and
    restarts, from its run's stored events. `read`: what was read of each run so far (a
    pending of many items reads its run once)."""
    run_id, step, index = key.rsplit(".", 2)
    read = {} if read is None else read
    if run_id not in read:
        read[run_id] = attempts(store.events(run_id))
    seen = read[run_id].get((run_id, int(step)), Seen())
    return call_id(run_id, int(step), int(index), seen.attempt, seen.restarts)


class Seen(NamedTuple):
    """How often a step's reply was written again: its attempt (re-asks), and the requests
    that restarted it (`restart`: what was shown of it is void), the last at event `last`."""

    attempt: int = 0
    restarts: int = 0
    last: int = -1


def seen_in(seen: Seen, e: dict[str, Any]) -> Seen | None:
    """`seen` after stored event `e`, or None when `e` changes nothing (or was counted
    already: a stream seeded from the stored events reads some of them again)."""
    if e["type"] == "reask" and e["attempt"] > seen.attempt:
        return seen._replace(attempt=e["attempt"])
    if e["type"] in ("model_retry", "model_fallback") and e.get("restart") \
            and e.get("seq", math.inf) > seen.last:
        return seen._replace(restarts=seen.restarts + 1, last=e.get("seq", seen.last))
    return None


def attempts(events: list[dict[str, Any]]) -> dict[tuple[str, int], Seen]:
    """Each step's latest attempt and restarts, by (run, step), from a run's stored events:
    what a stream that starts after them needs to name the step's calls."""
    out: dict[tuple[str, int], Seen] = {}
    for e in events:
        if e["type"] in ("reask", "model_retry", "model_fallback"):
            key = (e["run_id"], e["step"])
            out[key] = seen_in(out.get(key, Seen()), e) or out.get(key, Seen())
    return out


def text_of(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


@dataclass
class Lane:
    """What is open in one run's part of the stream: the top run's, or a sub-run's."""

    sub: str | None
    """The subagent run id its events carry; None for the top run."""
    step: int | None = None
    reasoning: str | None = None
    call: str | None = None
    args_shown: bool = False
    """Some of the open call's arguments went out live: else they go out whole at its end."""
    final: int | None = None
    """The step whose tool is the task-complete one: no call is shown for it."""
    stored: int = 0
    """The last step stored: a late delta of it (written before the step, read after) is
    dropped."""
    thought_shown: int | None = None
    tool: str | None = None
    """The tool of the last call shown: a sub-run started now is that call's."""
    left: int = 0
    """Results of the step still to come (a step of several calls): then it finishes."""


class Translator:
    def __init__(self, run_id: str, final_tool: str,
                 seen: dict[tuple[str, int], Seen] | None = None):
        self.run_id, self.final_tool = run_id, final_tool.lower()
        self.lanes: dict[str, Lane] = {}
        self.attempts = dict(seen or {})
        """Each step's attempt and restarts being shown, by (run, step) (`attempts`): a delta
        of a later attempt voids what was shown before it, as the re-ask it follows will say."""
        self._thoughts = 0
        """Thoughts shown: each reasoning message has its own id, a re-asked step's too."""

    # -- in ---------------------------------------------------------------------------------

    def delta(self, d: Delta) -> list[BaseEvent]:
        lane, out = self._lane(d.run_id, None)
        if d.step <= lane.stored:
            return out
        seen = self.attempts.get((d.run_id, d.step), Seen())
        if d.attempt > seen.attempt:
            # a re-ask writes the reply again; its stored event may come later than this
            out += self._void(lane, {"problem": "re-asked"})
            self.attempts[(d.run_id, d.step)] = seen._replace(attempt=d.attempt)
        if isinstance(d, ThoughtDelta):
            if d.text and lane.call is None:
                out += self._open_step(lane, d.step) + self._open_thought(lane, d.run_id, d.step)
                out.append(ReasoningMessageContentEvent(message_id=lane.reasoning, delta=d.text,
                                                        **self._mark(lane)))
                lane.thought_shown = d.step
        elif isinstance(d, ToolNameKnown):
            out += self._open_step(lane, d.step) + self._close_thought(lane)
            if d.name.lower() == self.final_tool:
                lane.final = d.step
            elif lane.call is None:
                out += self._start_call(lane, d.run_id, d.step, d.name)
        elif isinstance(d, ArgsDelta) and lane.call is not None and d.text:
            lane.args_shown = True
            out.append(ToolCallArgsEvent(tool_call_id=lane.call, delta=d.text, **self._mark(lane)))
        return out

    def event(self, e: dict[str, Any]) -> list[BaseEvent]:
        lane, out = self._lane(e["run_id"], e)
        kind = e["type"]
        if kind == "step":
            out += self._step(lane, e)
        elif kind in ("reask", "model_retry", "model_fallback"):
            key = (e["run_id"], e["step"])
            seen = seen_in(self.attempts.get(key, Seen()), e)
            if seen is not None:  # not yet voided: the calls written next have new ids
                out += self._void(lane, e)
                self.attempts[key] = seen
        elif kind == "tool_result":
            out += self._result(lane, e)
        elif kind == "run_end" and lane.sub is not None:
            out += self.close(lane)
            outcome = {"type": "suspended"} if e["status"] == NEEDS_HUMAN else None
            out.append(SubagentFinishedEvent(
                subagent_run_id=lane.sub, result=e.get("answer"),
                **({"outcome": outcome} if outcome else {})))
            del self.lanes[e["run_id"]]
        elif kind == "run_end":
            out += self.close(lane)
            if e["status"] == COMPLETED:
                out += self.answer(e.get("answer"))
        return out

    # -- out --------------------------------------------------------------------------------

    def answer(self, value: Any) -> list[BaseEvent]:
        """The final answer, as the assistant's text message."""
        mid = f"{self.run_id}.answer"
        return [TextMessageStartEvent(message_id=mid, role="assistant"),
                TextMessageContentEvent(message_id=mid, delta=text_of(value) or " "),
                TextMessageEndEvent(message_id=mid)]

    def close(self, lane: Lane | None = None) -> list[BaseEvent]:
        """Close what is open (in `lane`, or everywhere, sub-runs first), as the client
        wants before a run finishes."""
        if lane is None:
            out: list[BaseEvent] = []
            for key, sub in [(k, v) for k, v in self.lanes.items() if v.sub is not None]:
                out += self.close(sub) + [SubagentFinishedEvent(
                    subagent_run_id=sub.sub, outcome={"type": "suspended"})]
                del self.lanes[key]
            top = self.lanes.get(self.run_id)
            return out + (self.close(top) if top else [])
        out = self._close_thought(lane)
        if lane.call is not None:
            out.append(ToolCallEndEvent(tool_call_id=lane.call, **self._mark(lane)))
            lane.call = None
        return out + self._close_step(lane)

    # -- steps ------------------------------------------------------------------------------

    def _step(self, lane: Lane, e: dict[str, Any]) -> list[BaseEvent]:
        """A step stored: what was not shown live is shown whole, and its call closes."""
        run_id, index = e["run_id"], e["step"]
        out = self._open_step(lane, index)
        if lane.thought_shown != index and e.get("thought"):
            out += self._open_thought(lane, run_id, index)
            out.append(ReasoningMessageContentEvent(message_id=lane.reasoning,
                                                    delta=e["thought"], **self._mark(lane)))
        out += self._close_thought(lane)
        lane.stored = index
        if e["tool"].lower() == self.final_tool:
            lane.final = index
            return out
        lane.left = len(e.get("calls") or [None])
        if e.get("calls"):  # several calls (never streamed: each comes whole)
            for n, call in enumerate(e["calls"]):
                out += self._start_call(lane, run_id, index, call["tool"], n)
                out += [ToolCallArgsEvent(tool_call_id=lane.call, delta=text_of(call["args"]),
                                          **self._mark(lane)),
                        ToolCallEndEvent(tool_call_id=lane.call, **self._mark(lane))]
            lane.call = None
            return out
        if lane.call != self._id(run_id, index):  # not streamed: the call comes whole
            out += self._start_call(lane, run_id, index, e["tool"])
        if not lane.args_shown:  # its name came live, its arguments did not (a late reader)
            out.append(ToolCallArgsEvent(tool_call_id=lane.call, delta=text_of(e["args"]),
                                         **self._mark(lane)))
        out.append(ToolCallEndEvent(tool_call_id=lane.call, **self._mark(lane)))
        lane.call = None
        return out

    def _result(self, lane: Lane, e: dict[str, Any]) -> list[BaseEvent]:
        run_id, index = e["run_id"], e["step"]
        out = self._open_step(lane, index)
        call = self._id(run_id, index, e.get("call", 0))
        if lane.final == index:  # an answer sent back (it did not validate): a call after all
            out += self._start_call(lane, run_id, index, e["tool"])
            out.append(ToolCallEndEvent(tool_call_id=call, **self._mark(lane)))
            lane.call, lane.final = None, None
        out.append(ToolCallResultEvent(message_id=f"{call}.result", tool_call_id=call,
                                       content=text_of(e["observation"]), role="tool",
                                       **self._mark(lane)))
        lane.left -= 1
        return out + (self._close_step(lane) if lane.left <= 0 else [])

    def _void(self, lane: Lane, e: dict[str, Any]) -> list[BaseEvent]:
        """What was shown of this attempt is void (a re-ask, or a request sent again): its
        call, if one was shown, ends with a result that says so."""
        out = self._close_thought(lane)
        lane.thought_shown = None
        if lane.call is not None:
            call, lane.call = lane.call, None
            said = e.get("problem") or e.get("said") or e.get("error") or "written again"
            out += [ToolCallEndEvent(tool_call_id=call, **self._mark(lane)),
                    ToolCallResultEvent(message_id=f"{call}.{e.get('seq', 0)}.void",
                                        tool_call_id=call,
                                        content=f"not run: the reply was void ({said})",
                                        role="tool", **self._mark(lane))]
        lane.final = None
        return out

    # -- opening and closing ----------------------------------------------------------------

    def _lane(self, run_id: str, e: dict[str, Any] | None) -> tuple[Lane, list[BaseEvent]]:
        lane = self.lanes.get(run_id)
        if lane is not None:
            return lane, []
        if run_id == self.run_id:
            lane = self.lanes[run_id] = Lane(sub=None)
            return lane, []
        # a sub-run seen for the first time: a subagent under its parent's current call
        lane = self.lanes[run_id] = Lane(sub=run_id)
        parent = self.lanes.get((e or {}).get("parent_run_id") or self.run_id)
        started = SubagentStartedEvent(
            subagent_run_id=run_id, name=(parent.tool if parent and parent.tool else "agent"),
            **({"parent_subagent_run_id": parent.sub} if parent and parent.sub else {}),
            **({"parent_tool_call_id": self._id(e["parent_run_id"], parent.step)}
               if parent and e and e.get("parent_run_id") and parent.step else {}))
        return lane, [started]

    def _id(self, run_id: str, index: int, n: int = 0) -> str:
        seen = self.attempts.get((run_id, index), Seen())
        return call_id(run_id, index, n, seen.attempt, seen.restarts)

    def _mark(self, lane: Lane) -> dict[str, Any]:
        return {"subagent_run_id": lane.sub} if lane.sub else {}

    def _open_step(self, lane: Lane, index: int) -> list[BaseEvent]:
        if lane.step == index:
            return []
        out = self.close(lane) if lane.step is not None else []
        lane.step, lane.thought_shown = index, None
        return out + [StepStartedEvent(step_name=f"step {index}", **self._mark(lane))]

    def _close_step(self, lane: Lane) -> list[BaseEvent]:
        if lane.step is None:
            return []
        index, lane.step = lane.step, None
        return [StepFinishedEvent(step_name=f"step {index}", **self._mark(lane))]

    def _open_thought(self, lane: Lane, run_id: str, index: int) -> list[BaseEvent]:
        if lane.reasoning is not None:
            return []
        self._thoughts += 1
        lane.reasoning = mid = f"{run_id}.{index}.thought{self._thoughts}"
        return [ReasoningStartEvent(message_id=mid, **self._mark(lane)),
                ReasoningMessageStartEvent(message_id=mid, role="reasoning", **self._mark(lane))]

    def _close_thought(self, lane: Lane) -> list[BaseEvent]:
        if lane.reasoning is None:
            return []
        mid, lane.reasoning = lane.reasoning, None
        return [ReasoningMessageEndEvent(message_id=mid, **self._mark(lane)),
                ReasoningEndEvent(message_id=mid, **self._mark(lane))]

    def _start_call(self, lane: Lane, run_id: str, index: int, name: str,
                    n: int = 0) -> list[BaseEvent]:
        lane.call, lane.tool, lane.args_shown = self._id(run_id, index, n), name, False
        return [ToolCallStartEvent(tool_call_id=lane.call, tool_call_name=name,
                                   **self._mark(lane))]
