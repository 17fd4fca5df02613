"""A step's tool calls: each one decided (its recorded call, a limit, an approval, a hook),
run, and observed; then the step's observations go into the history, in the order of its
calls, with what the loop tells the model beside them.

The loop hands the step in flight to `Acting.act`, which yields the run's events (numbered
by the loop's `number`) and returns what ends or pauses the run, if anything: a `Stop` (the
final answer, a stall) or the `Pending` a person must answer.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, replace
from typing import Any, Callable, Iterator

from . import events as ev
from . import grounding, stall
from .calling import Calling
from .calls import RUN_AGAIN, call_key, once_answer
from .deps import RunDeps
from .errors import UserError
from .hooks import ToolCall, Veto
from .limits import Limits
from .notes import note
from .state import Message, Pending, RunState, StepRecord, to_json
from .status import COMPLETED, STALLED, Reason
from .tools.tool import RunContext


@dataclass(frozen=True)
class Resume:
    """The input that lets a paused run go on."""

    answer: str | None = None
    approved: bool | None = None
    reason: str | None = None
    items: dict[str, Resume] | None = None
    """The input for each item by its id, when the run waits for several (`Pending.items`);
    an item without one takes the input above."""

    def of(self, item: Pending) -> Resume:
        """The input for one item of what the run waits for. A sub-run's item (its `path`)
        takes every item's input down with it: the sub-run's own items are named there."""
        if not self.items or item.id not in self.items:
            return self
        mine = self.items[item.id]
        return replace(mine, items=self.items) if item.path else mine

    @classmethod
    def given(cls, answer: str | None = None, approve: bool | None = None,
              reason: str | None = None, items: dict[str, dict] | None = None) -> Resume:
        """From a front end's values; `items` maps an item's id to its `answer`, `approve`
        and `reason`, as the server's API takes them."""
        each = {key: cls(answer=v.get("answer"), approved=v.get("approve"),
                         reason=v.get("reason")) for key, v in (items or {}).items()}
        return cls(answer=answer, approved=approve, reason=reason, items=each or None)

    def given_items(self) -> dict[str, dict] | None:
        """`items` as a front end gives them (see `given`)."""
        return {k: {"answer": v.answer, "approve": v.approved, "reason": v.reason}
                for k, v in self.items.items()} if self.items else None


def unfit(pending: Pending, resume: Resume) -> str | None:
    """What the input lacks for what the run waits for, naming the item when there are
    several; None when it fits every item."""
    known = {i for item in pending.each for i in (item.id, *(n.id for n in item.items or ()))}
    stray = sorted(set(resume.items or ()) - known)
    if stray:
        return f"it has no item {stray[0]} (the ids are {', '.join(sorted(filter(None, known)))})"
    for item in pending.each:
        given = resume.of(item)
        which = f"item {item.id}: " if pending.items else ""
        if item.kind == "question" and given.answer is None:
            return f"{which}an answer to {item.question!r}"
        if item.kind == "approval" and given.approved is None:
            return f"{which}an approval of {item.tool} (approve or deny it)"
        if item.kind == "once" and once_answer(given.answer) is None:
            return (f"{which}what became of a call of {item.tool} (key {item.key}): happened, "
                    "again or fail")
    return None


@dataclass(frozen=True)
class Stop:
    """What ends the run once its step is acted on."""

    status: str
    answer: Any = None
    error: str | None = None
    repeated: dict | None = None


Waited = dict[int, tuple[Pending, Resume]]
"""What the calls of a paused step waited for, by the call's index, and the person's input."""
_NO_INPUT = Resume()


class Acting:
    def __init__(self, deps: RunDeps, ctx: RunContext, limits: Limits, calling: Calling,
                 approve: Callable[[str, dict], bool | None] | None,
                 number: Callable[[ev.Event], Any]):
        self.toolset, self.config, self.hooks = deps.toolset, deps.config, deps.hooks
        self.number = number
        """Makes an event the run's (its ids and sequence number): the loop's."""
        self.output_type = deps.output_type
        self.ctx, self.limits, self.calling, self.approve = ctx, limits, calling, approve
        self.confirm = {t.name for t in self.toolset if t.spec.confirm} | set(self.config.confirm)
        self.reply_note: str | None = None
        """What the model's reply made us ignore: said with the step's observations."""
        self.checked: tuple[int, stall.Verdict | None] | None = None
        """Stall detection's verdict on the last step it judged (by the number of steps):
        the next request's mask reads it rather than judge the same history again."""

    def act(self, s: RunState, record: StepRecord, waited: Waited | None = None,
            note_: str | None = None) -> Iterator[ev.Event]:
        """Run the step's calls that are not done; return a Stop, a Pending or None."""
        calls = record.calls
        first = self.toolset.get(calls[0].tool)
        for call in calls if first is None or len(calls) > 1 else ():
            if self.toolset.get(call.tool) is None:  # resumed with tools that no longer have it
                raise UserError(f"the run's step {record.index} calls {call.tool!r}, which "
                                f"this agent does not have")
        if first.final:  # alone in its step (envelope.py)
            answer = self._answer(s, record)
            if answer is not None:
                return Stop(COMPLETED, answer=answer[0])
            yield self._result(s, record, 0, notes=False)
            return None
        self._note, self._observed, self._stop, self._following = note_, set(), None, {}
        if len(calls) == 1 and not calls[0].done:  # the usual step: one call, none beside it
            got = yield from self._one(s, record, 0, waited.get(0) if waited else None, False)
            return got if got is not None else self._stop
        if all(c.done for c in calls):  # every result was in: only the history lacks them
            self._close(s, record)
            return None
        return (yield from self._several(s, record, waited or {}))

    def _several(self, s: RunState, record: StepRecord, waited: Waited) -> Iterator[ev.Event]:
        """A step of several calls: each decided in turn, then those that run, all at once; a
        call the step makes twice runs once. Returns a Pending with an item for each call
        that waits for a person, or None."""
        calls = record.calls
        waiting: list[tuple[int, Pending]] = []
        runs: list[tuple[int, ToolCall, Any]] = []
        firsts: dict[str, int] = {}
        for i, call in enumerate(calls):
            same = firsts.setdefault(json.dumps([call.tool, call.args], sort_keys=True), i)
            if call.done:
                continue
            if same != i:  # the same call as an earlier one of the step: it runs once
                if calls[same].done:
                    yield self._copied(s, record, same, i)
                else:
                    self._following.setdefault(same, []).append(i)
                continue
            got = yield from self._one(s, record, i, waited.get(i), True)
            if isinstance(got, Pending):
                waiting.append((i, got))
            elif got is not None:
                runs.append(got)
        if runs:
            waiting += yield from self._side_by_side(s, record, runs)
        if waiting:
            return self._pending(s, record, sorted(waiting, key=lambda w: w[0]))
        return self._stop

    def cut_short(self, s: RunState, told: str, ask: bool = False) -> Iterator[ev.Event]:
        """The calls in flight get `told` as their observation, so the history stays whole.
        With `ask`, a `once` call that began and has no result stays in flight instead: told
        it failed, the model would call it again under a new key (a payment twice). Returns
        the Pending that asks a person what became of such calls, or None."""
        record = s.steps[-1]
        waiting: list[tuple[int, Pending]] = []
        for i, call in enumerate(record.calls):
            if call.done:
                continue
            asked = self.calling.uncertain(s, record, i) if ask else None
            if asked is not None:
                waiting.append((i, asked))
                continue
            call.observation, call.error = {"error": told}, True
            yield self._result(s, record, i, warn=False, notes=False)
        return self._pending(s, record, waiting) if waiting else None

    def _one(self, s: RunState, record: StepRecord, i: int,
             waited: tuple[Pending, Resume] | None, several: bool) -> Iterator[ev.Event]:
        """Decide call `i` and run it; returns the Pending it waits for, None once done, or
        in a step of `several` calls, what runs beside the others: `(i, call, handed)`."""
        call = record.calls[i]
        given, handed, decision = _NO_INPUT, None, None
        if waited is not None:
            pending, given = waited
            if pending.path:  # a sub-run's pause handed down: its tool, called again, re-attaches
                handed = waited
            elif pending.kind == "question":
                call.observation = given.answer
                self.calling.ended(s, record, i, given.answer, False)
                yield from self._done(s, record, i)
                return None
            elif pending.kind == "approval":
                decision = (bool(given.approved), given.reason)
        recorded = self.calling.recorded(s, record, i, waited and waited[0]) \
            if handed is None else None
        if recorded is not None:  # it started before a crash or a takeover
            return (yield from self._recovered(s, record, i, recorded, given, several))
        refused = self.limits.check(s, tool=call.tool, call=i)  # or LimitReached: the run ends
        if refused is not None:  # past the tool's own limit: the run goes on without it
            call.observation, call.error = {"error": refused}, True
            yield from self._done(s, record, i)
            return None
        if call.tool in self.confirm and decision is None and handed is None:
            verdict = self.approve(call.tool, call.args) if self.approve else None
            if verdict is None:
                return Pending(kind="approval", tool=call.tool, args=call.args)
            decision = (bool(verdict), None)
        if decision is not None:
            yield self.number(ev.Approval(step=record.index, tool=call.tool,
                                          approved=decision[0], reason=decision[1], call=i))
            if not decision[0]:
                reason = f": {decision[1]}" if decision[1] else ""
                call.observation, call.error = {"error": note("denied", reason=reason)}, True
                yield from self._done(s, record, i)
                return None
        hooked = self.hooks.before_tool(s, ToolCall(call.tool, call.args))
        t0 = time.perf_counter()
        if isinstance(hooked, Veto):
            call.observation, call.error = {"error": hooked.message}, True
        elif several:
            return i, hooked, handed
        else:
            out, call.error = self.calling.invoke(s, record, i, hooked, handed)
            if isinstance(out, Pending):  # nobody could answer: pause until someone does
                return out
            call.observation = ev.jsonable(self.hooks.after_tool(s, hooked, out))
        call.tool_s = time.perf_counter() - t0
        self._observed.add(i)
        yield from self._done(s, record, i)
        return None

    def _recovered(self, s: RunState, record: StepRecord, i: int, recorded: Any,
                   given: Resume, several: bool) -> Iterator[ev.Event]:
        """The call as the log recorded it, never the model's step asked again: its result,
        or what its effects say (calling.recover), and the events say which. A call run
        again runs beside the step's others, as in `_one`."""
        call = record.calls[i]
        out, call.error, action = self.calling.recover(s, record, i, recorded,
                                                       once_answer(given.answer), given.reason)
        yield self.number(ev.CallRecovered(step=record.index, tool=recorded.tool,
                                           key=recorded.key, effects=recorded.effects,
                                           action=action, call=i))
        again = ToolCall(recorded.tool, recorded.args)
        if action in RUN_AGAIN and several:
            return i, again, None
        t0 = time.perf_counter()
        if action in RUN_AGAIN:
            out, call.error = self.calling.invoke(s, record, i, again)
            call.tool_s = time.perf_counter() - t0
        if isinstance(out, Pending):  # a `once` call: a person says what happened
            return out
        call.observation = ev.jsonable(self.hooks.after_tool(s, again, out))
        self._observed.add(i)
        yield from self._done(s, record, i)
        return None

    def _side_by_side(self, s: RunState, record: StepRecord,
                      runs: list[tuple[int, ToolCall, Any]]) -> Iterator[ev.Event]:
        """The step's calls that run, all at once; each result is recorded as it comes
        (calling.py) and said in a ToolResult of its own. Returns what they wait for: the
        questions nobody could answer now, asked once the other calls have finished."""
        for i, _, _ in runs:
            call = record.calls[i]
            yield self.number(ev.ToolCall(step=record.index, call=i, tool=call.tool,
                                          args=call.args, key=call_key(s.run_id, record.index, i)))
        hooked = {i: h for i, h, _ in runs}
        waiting: list[tuple[int, Pending]] = []
        for i, out, failed, seconds in self.calling.each(s, record, runs):
            call = record.calls[i]
            call.tool_s = seconds
            if isinstance(out, Pending):
                waiting.append((i, out))
                continue
            call.error = failed
            call.observation = ev.jsonable(self.hooks.after_tool(s, hooked[i], out))
            self._observed.add(i)
            yield from self._done(s, record, i)
        return waiting

    def _done(self, s: RunState, record: StepRecord, i: int) -> list[ev.ToolResult]:
        """Call `i`'s result, then that of each later call of the step that was the same."""
        done = [self._result(s, record, i)]
        if self._following:
            done += [self._copied(s, record, i, later) for later in self._following.pop(i, ())]
        return done

    def _copied(self, s: RunState, record: StepRecord, first: int, later: int) -> ev.ToolResult:
        call, done = record.calls[later], record.calls[first]
        call.observation, call.error = done.observation, done.error
        return self._result(s, record, later, told=note("call_repeated_in_step", first=first + 1))

    def _result(self, s: RunState, record: StepRecord, i: int, warn: bool = True,
                notes: bool = True, told: str | None = None) -> ev.ToolResult:
        """Call `i` is done. The one that completes the step brings the step's notes and puts
        its observations in the history, in the order of the calls."""
        calls = record.calls
        call = calls[i]
        call.done = True
        # from the last call: results come mostly in the order the calls started, so the
        # look stops at once (from the first, a step of N calls cost N squared)
        closes = len(calls) == 1 or all(c.done for c in reversed(calls))
        said = [told, *self._step_notes(s, record)] if closes and notes else [told]
        if warn:  # near a usage limit
            said.append(self.limits.left(s, call.tool))
        call.note = " ".join(filter(None, said)) or None
        if closes:
            self._close(s, record)
        return self.number(ev.ToolResult(step=record.index, tool=call.tool,
                                         observation=call.observation, error=call.error,
                                         duration_s=round(call.tool_s, 4), note=call.note,
                                         call=i))

    def _step_notes(self, s: RunState, record: StepRecord) -> list[str | None]:
        """What the model is told with the step's last result: what the loop said, what its
        reply made us ignore, and stall detection's warning (or the stop, in `_stop`)."""
        said, self.reply_note = [self._note, self.reply_note], None
        get, verdict = self.toolset.get, None
        for n in self._observed:  # unless every call that ran is made again on purpose
            if not get(record.calls[n].tool).spec.repeatable:
                verdict = stall.check(s.steps, self.config.stall_after)
                self.checked = (len(s.steps), verdict)
                break
        if verdict is not None and verdict.action == "warn":
            said.append(note(f"stall_{verdict.kind}", count=verdict.count,
                             final=self.toolset.final.name))
        elif verdict is not None:
            ran = [c for n, c in enumerate(record.calls) if n in self._observed]
            shown = "; ".join(f"{c.tool} {json.dumps(c.args, ensure_ascii=False)}" for c in ran)
            self._stop = Stop(STALLED, error=Reason.stalled(verdict.kind, verdict.count, shown),
                              repeated={"tool": ran[0].tool, "args": ran[0].args})
        return said

    @staticmethod
    def _close(s: RunState, record: StepRecord) -> None:
        """The step's observations into the history, in the order of its calls."""
        if grounding.held_back(record):
            # in its reply's place: a model shown the answer it gave, then the nudge, gave it
            # again word for word (the 1.5B model, 5 nudges of 7); without it, 0 of 8
            s.messages[-1] = Message(role="user", content=record.calls[0].observation["error"])
            return
        for c in record.calls:
            body = {"tool_name": c.tool, "response": c.observation}
            if c.note:
                body["note"] = c.note
            s.messages.append(Message(role="observation", content=to_json(body)))

    def _pending(self, s: RunState, record: StepRecord,
                 waiting: list[tuple[int, Pending]]) -> Pending:
        """What the step waits for: one item, as always; in a step of several calls, each
        item says which call it is for (its `id`, the call's key)."""
        if len(record.calls) == 1:
            return waiting[0][1]
        items = [p.model_copy(update={"id": call_key(s.run_id, record.index, i)})
                 for i, p in waiting]
        return items[0] if len(items) == 1 else items[0].model_copy(update={"items": items})

    def _answer(self, s: RunState, record: StepRecord) -> tuple[Any] | None:
        """The final answer, or None after telling the model why it does not validate, or
        which of its numbers nothing in the run shows (once; see grounding.py)."""
        call = record.calls[0]
        if self.output_type is None:
            args = call.args
            answer = (args["output"] if set(args) == {"output"} else args,)
        else:
            from pydantic import TypeAdapter, ValidationError

            try:
                answer = (TypeAdapter(self.output_type).validate_python(call.args),)
            except ValidationError as exc:
                problem = "; ".join(f"/{'/'.join(map(str, e['loc']))}: {e['msg']}"
                                    for e in exc.errors())
                call.observation, call.error = {"error": note("answer_rejected",
                                                              problem=problem)}, True
                return None
        if self.config.check_answers:
            call.observation = grounding.nudge(s, record, call.tool, self.toolset.names)
            if call.observation is not None:
                call.error, s.stats.answer_nudges = True, s.stats.answer_nudges + 1
                return None
        return answer
