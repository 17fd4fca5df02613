"""The agent loop: an iterator of events that advances a `RunState`.

It orchestrates only: parsing lives in envelope, tools in tools/, the record in the
consumers of its events (journal, store, display). A run ends because of its data: the
task-complete tool was called, the steps ran out, or a step waits for a person
(a RunEnd whose status is needs_human, after which the state says what it waits for).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterator

from . import events as ev
from . import grounding, stall
from .calling import Calling
from .calls import once_answer
from .deps import RunDeps
from .envelope import Parsed, ReplyProblem, parse_reply
from .errors import Cancelled, JsonAgentError, LimitReached, StoreDown, UserError
from .hooks import ToolCall, Veto
from .limits import Limits
from .notes import note
from .request import THOUGHT_CUT, Requester
from .result import RunResult
from .state import Message, Pending, RunState, StepRecord, to_json
from .status import (COMPLETED, FAILED, INTERRUPTED, LIMIT_REACHED, MAX_STEPS, NEEDS_HUMAN,
                     RUNNING, STALLED, Reason)
from .tools.tool import RunContext

Generator = Iterator[ev.Event]

HEAD = 400
"""Characters of a cut-off reply that its re-ask shows the model: enough to see what went
wrong, where the whole of it (thousands of tokens of one clause) could fill the context."""


@dataclass(frozen=True)
class Resume:
    """The input that lets a paused run go on."""

    answer: str | None = None
    approved: bool | None = None
    reason: str | None = None


class Loop:
    def __init__(self, deps: RunDeps, ctx: RunContext,
                 approve: Callable[[str, dict], bool | None] | None,
                 watched: Callable[[], bool] | None = None):
        self.toolset, self.config = deps.toolset, deps.config
        self.style, self.hooks, self.output_type = deps.style, deps.hooks, deps.output_type
        self.ctx, self.approve = ctx, approve
        self.cancel = ctx.cancel
        """Slow calls are waited on through it, so a cancel ends the wait at once."""
        self.confirm = {t.name for t in self.toolset if t.spec.confirm} | set(self.config.confirm)
        self._reply_note: str | None = None
        self._answered: str | None = None
        """The model that wrote the last valid reply, when one of several could have."""
        self.limits = Limits(deps.config, deps.toolset)
        """Checked before each model request (by the requester) and each tool call."""
        self.requests = Requester(deps, self.cancel, watched, self.limits)
        self.calling = Calling(deps.toolset, ctx)

    def iterate(self, state: RunState, resume: Resume | None = None) -> Generator:
        """Events until the run ends or pauses; the last one is always a RunEnd."""
        self.s = state
        self.requests.start(state)
        try:
            if state.seq == 0:
                yield self._event(ev.RunStart(
                    question=state.question, model=state.model, json_mode=state.json_mode,
                    config=state.config, toolset=state.toolset, tools=state.tools,
                    server=state.server))
            else:
                yield from self._resume(resume or Resume())
            yield from self._steps()
        except KeyboardInterrupt:
            yield from self._interrupted(Reason.BY_USER, "tool_interrupted")
        except Cancelled:
            yield from self._interrupted(self.cancel.reason or Reason.CANCELLED, "tool_cancelled")
        except LimitReached as exc:
            yield from self._cut_short(LIMIT_REACHED, str(exc),
                                       note("limit_reached", what=exc.limit))
        except StoreDown:  # not the run's failure: it goes on from its checkpoint when the
            raise          # database is back (a server's node, or another, takes it over)
        except JsonAgentError as exc:
            yield self._end(FAILED, error=str(exc), error_kind=getattr(exc, "kind", None))
        except Exception as exc:  # a bug: record the end, then let it surface
            yield self._end(FAILED, error=f"internal error: {type(exc).__name__}: {exc}")
            raise

    def _steps(self) -> Generator:
        s = self.s
        while s.status == RUNNING:
            if s.in_flight:  # resumed after a crash or an approval: run its tool now
                yield from self._act(s.steps[-1])
                continue
            if len(s.steps) + s.sub_steps >= self.config.max_steps:  # sub-runs' steps count
                yield self._end(MAX_STEPS, error=Reason.max_steps(self.config.max_steps,
                                                                  self.toolset.final.name))
                return
            self.cancel.check()
            t0 = time.perf_counter()
            index = len(s.steps) + 1
            parsed = yield from self._next_step(index)
            if isinstance(parsed, ReplyProblem):
                yield self._end(FAILED, error=f"no valid reply after "
                                f"{self.config.max_reasks + 1} tries: {parsed.message}")
                return
            step = parsed.step
            s.steps.append(StepRecord(index=index, thought=step.thought, tool=step.tool_name,
                                      args=step.args_list, repairs=parsed.repairs,
                                      model_s=time.perf_counter() - t0, model=self._answered))
            # the reply as written when it is the step exactly: an endpoint's cache holds it
            s.messages.append(Message(role="assistant", content=parsed.raw or step.to_json()))
            self.calling.fresh = index  # taken just now: no call of it can be in the log
            self._reply_note = parsed.note  # what the model's reply made us ignore
            yield self._event(ev.StepTaken(step=index, thought=step.thought, tool=step.tool_name,
                                           args=step.args_list, repairs=parsed.repairs))

    def _next_step(self, index: int) -> Iterator[ev.Event]:
        """Ask the model; re-ask with the precise problem until valid or out of budget.
        Failed attempts never enter the history. Returns a Parsed or the last ReplyProblem."""
        extra: list[Message] = []
        warned = self._warned_tool()
        for attempt in range(self.config.max_reasks + 1):
            reply = yield from self._numbered(
                self.requests.ask(self.s, extra, index, attempt, warned))
            if reply.usage.counting == THOUGHT_CUT:
                parsed = ReplyProblem("envelope", note("thought_too_long",
                                                       cap=self.config.thought_max_chars))
            else:
                parsed = parse_reply(reply.text, self.toolset, cut=reply.cut)
            if parsed.repairs:
                self.s.stats.repairs += len(parsed.repairs)
            if isinstance(parsed, Parsed):
                self._answered = reply.model  # which model wrote it, when several could have
                return parsed
            self.s.stats.invalid_replies += 1
            if attempt < self.config.max_reasks:
                self.s.stats.reasks += 1
                yield self._event(ev.Reask(step=index, attempt=attempt + 1, stage=parsed.stage,
                                           problem=parsed.message))
                extra += [Message(role="assistant", content=_head(reply)),
                          Message(role="user", content=self.style.reask(parsed, self.toolset))]
        return parsed

    def _numbered(self, events: Iterator[ev.Event]) -> Iterator[ev.Event]:
        """Pass on a part's events as this run's (live deltas go unnumbered); return what
        the part returns."""
        while True:
            try:
                event = next(events)
            except StopIteration as stop:
                return stop.value
            yield event if isinstance(event, ev.Delta) else self._event(event)

    def _act(self, record: StepRecord, decision: tuple[bool, str | None] | None = None,
             note_: str | None = None, once: Resume | None = None) -> Generator:
        """Run the step's tool, or end the run: a final answer, or a pause for a person."""
        tool = self.toolset.get(record.tool)
        if tool is None:  # resumed with tools that no longer have it
            raise UserError(f"the run's step {record.index} calls {record.tool!r}, which this "
                            f"agent does not have")
        if tool.final:
            answer = self._answer(record)
            if answer is not None:
                yield self._end(COMPLETED, answer=answer[0])
            else:
                yield self._tool_result(record)
            return
        # a sub-run's pause handed down calls its tool again, which re-attaches to it
        recorded = self.calling.recorded(self.s, record) if self.ctx.handed_down is None else None
        if recorded is not None:  # it started before a crash or a takeover
            yield from self._recovered(record, recorded, once or Resume(), note_)
            return
        refused = self.limits.check(self.s, tool=record.tool)  # or LimitReached: the run ends
        if refused is not None:  # past the tool's own limit: the run goes on without it
            record.observation, record.error = {"error": refused}, True
            yield self._tool_result(record, note_)
            return
        if record.tool in self.confirm and decision is None and self.ctx.handed_down is None:
            verdict = self.approve(record.tool, record.args) if self.approve else None
            if verdict is None:
                yield self._pause(Pending(kind="approval", tool=record.tool, args=record.args))
                return
            decision = (bool(verdict), None)
        if decision is not None:
            yield self._event(ev.Approval(step=record.index, tool=record.tool,
                                          approved=decision[0], reason=decision[1]))
            if not decision[0]:
                reason = f": {decision[1]}" if decision[1] else ""
                record.observation, record.error = {"error": note("denied", reason=reason)}, True
                yield self._tool_result(record, note_)
                return
        call = self.hooks.before_tool(self.s, ToolCall(record.tool, record.args))
        t0 = time.perf_counter()
        if isinstance(call, Veto):
            record.observation, record.error = {"error": call.message}, True
        else:
            out, record.error = self.calling.invoke(self.s, record, call)
            if isinstance(out, Pending):  # nobody could answer: pause until someone does
                yield self._pause(out)
                return
            record.observation = ev.jsonable(self.hooks.after_tool(self.s, call, out))
        record.tool_s = time.perf_counter() - t0
        yield from self._observed(record, tool.spec.repeatable, note_)

    def _recovered(self, record: StepRecord, recorded: Any, once: Resume,
                   note_: str | None) -> Generator:
        """The step's call as the log recorded it, never the model's step asked again: its
        result, or what its effects say (calling.recover), and the events say which."""
        out, record.error, action = self.calling.recover(self.s, record, recorded,
                                                         once_answer(once.answer), once.reason)
        yield self._event(ev.CallRecovered(step=record.index, tool=recorded.tool,
                                           key=recorded.key, effects=recorded.effects,
                                           action=action))
        if isinstance(out, Pending):  # a `once` call: a person says what happened
            yield self._pause(out)
            return
        call = ToolCall(record.tool, record.args)
        record.observation = ev.jsonable(self.hooks.after_tool(self.s, call, out))
        tool = self.toolset.get(record.tool)
        yield from self._observed(record, tool is not None and tool.spec.repeatable, note_)

    def _observed(self, record: StepRecord, repeatable: bool, note_: str | None) -> Generator:
        """Record a tool's result. A model that repeats itself `stall_after` times is told so
        plainly; once more and the run ends stalled (one mechanism, see stall.py)."""
        verdict = None if repeatable else stall.check(self.s.steps, self.config.stall_after)
        notes = [note_, self._reply_note]
        self._reply_note = None
        if verdict is not None and verdict.action == "warn":
            notes.append(note(f"stall_{verdict.kind}", count=verdict.count,
                              final=self.toolset.final.name))
        yield self._tool_result(record, " ".join(filter(None, notes)) or None)
        if verdict is not None and verdict.action == "stop":
            call = f"{record.tool} {json.dumps(record.args, ensure_ascii=False)}"
            yield self._end(STALLED, error=Reason.stalled(verdict.kind, verdict.count, call),
                            repeated={"tool": record.tool, "args": record.args})

    def _warned_tool(self) -> str | None:
        """The tool whose call the model was just warned it repeats. In schema mode the next
        step's grammar leaves it out: on the 1.5B model that broke 7 of 7 loops, and the
        words alone none (bench/stall_mask.py). Derived from the history, so a resumed run
        sees it too."""
        steps = self.s.steps
        if not steps:
            return None
        tool = self.toolset.get(steps[-1].tool)
        if tool is None or tool.final or tool.spec.repeatable:
            return None
        verdict = stall.check(steps, self.config.stall_after)
        return tool.name if verdict is not None and verdict.action == "warn" else None

    def _tool_result(self, record: StepRecord, note_: str | None = None,
                     warn: bool = True) -> ev.ToolResult:
        left = self.limits.left(self.s, record.tool) if warn else None  # near a usage limit
        if left is not None:
            note_ = f"{note_} {left}" if note_ else left
        self._observe(record.tool, record.observation, note_)
        return self._event(ev.ToolResult(step=record.index, tool=record.tool,
                                         observation=record.observation, error=record.error,
                                         duration_s=round(record.tool_s, 4), note=note_))

    def _answer(self, record: StepRecord) -> tuple[Any] | None:
        """The final answer, or None after telling the model why it does not validate, or
        which of its numbers nothing in the run shows (once; see grounding.py)."""
        if self.output_type is None:
            args = record.args
            answer = (args["output"] if set(args) == {"output"} else args,)
        else:
            from pydantic import TypeAdapter, ValidationError

            try:
                answer = (TypeAdapter(self.output_type).validate_python(record.args),)
            except ValidationError as exc:
                problem = "; ".join(f"/{'/'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
                record.observation, record.error = {"error": note("answer_rejected", problem=problem)}, True
                return None
        if self.config.check_answers:
            record.observation = grounding.nudge(self.s, record, record.tool, self.toolset.names)
            if record.observation is not None:
                record.error, self.s.stats.answer_nudges = True, self.s.stats.answer_nudges + 1
                return None
        return answer

    def _observe(self, tool_name: str, response: Any, note_: str | None = None) -> None:
        """The whole result goes into the history; memory cuts it in the context if need be."""
        body = {"tool_name": tool_name, "response": response}
        if note_:
            body["note"] = note_
        self.s.messages.append(Message(role="observation", content=to_json(body)))

    def _resume(self, resume: Resume) -> Generator:
        s = self.s
        restarted = note("restarted") if s.code_used and "sandbox" not in self.ctx.state else None
        pending, s.pending, s.status = s.pending, None, RUNNING
        yield self._event(ev.RunResumed(answer=resume.answer, approved=resume.approved,
                                        reason=resume.reason, note=restarted))
        if pending is None:  # an interrupted run goes on
            if restarted and not s.in_flight:
                s.messages.append(Message(role="user", content=restarted))
            elif restarted:
                yield from self._act(s.steps[-1], note_=restarted)
            return
        record = s.steps[-1]
        if pending.path:  # a sub-run waits: its step's tool goes on and hands the input down
            self.ctx.handed_down = (pending, resume)
            try:
                yield from self._act(record, note_=restarted)
            finally:
                self.ctx.handed_down = None
        elif pending.kind == "question":
            record.observation = resume.answer
            self.calling.ended(s, record, resume.answer, False)
            yield self._tool_result(record, restarted)
        elif pending.kind == "once":
            yield from self._act(record, note_=restarted, once=resume)
        else:
            yield from self._act(record, decision=(bool(resume.approved), resume.reason),
                                 note_=restarted)

    def _interrupted(self, why: str, note_key: str) -> Generator:
        """Ctrl-C or a cancel: the tool call in flight gets an observation, so the history
        stays whole and the session can go on."""
        self.cancel.cancel(why)  # stops whatever the run still has going
        yield from self._cut_short(INTERRUPTED, why, note(note_key))

    def _cut_short(self, status: str, why: str, told: str) -> Generator:
        """End the run before its time; a step in flight gets `told` as its observation."""
        s = self.s
        if s.in_flight and s.status == RUNNING:
            record = s.steps[-1]
            record.observation, record.error = {"error": told}, True
            yield self._tool_result(record, warn=False)
        yield self._end(status, error=why)

    def _pause(self, pending: Pending) -> ev.RunEnd:
        self.s.pending = pending
        return self._end(NEEDS_HUMAN)

    def _end(self, status: str, answer: Any = None, error: str | None = None,
             repeated: dict | None = None, error_kind: str | None = None) -> ev.RunEnd:
        s = self.s
        s.status, s.answer, s.error, s.error_kind = status, ev.jsonable(answer), error, error_kind
        # copies: the run's own totals count on in place if it is resumed
        usage, stats = s.usage.model_copy(), s.stats.model_copy()
        result = RunResult(status=status, answer=answer, steps=list(s.steps), usage=usage,
                           stats=stats, error=error, error_kind=error_kind, pending=s.pending,
                           json_mode=s.json_mode, repeated=repeated,
                           run_id=s.run_id, session_id=s.session_id)
        try:
            self.hooks.call("on_end", s, result)
        except JsonAgentError as exc:
            s.status, s.error, s.error_kind, s.pending = FAILED, str(exc), None, None
            result = result.model_copy(update={"status": FAILED, "error": str(exc),
                                               "error_kind": None, "pending": None})
        return self._event(ev.RunEnd(status=s.status, answer=s.answer, error=s.error,
                                     error_kind=s.error_kind,
                                     pending=s.pending, usage=usage,
                                     stats=stats.model_dump(), result=result))

    def _event(self, event: ev.Event) -> Any:
        s = self.s
        s.seq += 1
        event.run_id, event.session_id, event.seq = s.run_id, s.session_id, s.seq
        event.parent_run_id, event.depth = s.parent_run_id, s.depth
        return event


def _head(reply) -> str:
    text = reply.text
    if not reply.cut or len(text) <= HEAD:
        return text
    return note("cut", head=text[:HEAD], more=len(text) - HEAD)
