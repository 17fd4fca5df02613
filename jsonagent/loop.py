"""The agent loop: an iterator of events that advances a `RunState`.

It orchestrates only: parsing lives in envelope, tools in tools/, the record in the
consumers of its events (journal, store, display). A run ends because of its data: the
task-complete tool was called, the steps ran out, or a step waits for a person
(a RunEnd whose status is needs_human, after which the state says what it waits for).
"""

from __future__ import annotations

import time
from typing import Any, Callable, Iterator

from . import events as ev
from . import stall
from .acting import Acting, Resume, Waited
from .calling import Calling
from .calls import call_index
from .deps import RunDeps
from .envelope import Parsed, ReplyProblem, parse_reply
from .errors import Cancelled, JsonAgentError, LimitReached, StoreDown
from .limits import Limits
from .notes import note
from .request import THOUGHT_CUT, Requester
from .result import RunResult
from .state import Message, Pending, RunState, StepRecord
from .status import (FAILED, INTERRUPTED, LIMIT_REACHED, MAX_STEPS, NEEDS_HUMAN, RUNNING,
                     Reason)
from .tools.tool import RunContext

__all__ = ["Loop", "Resume"]

Generator = Iterator[ev.Event]

HEAD = 400
"""Characters of a cut-off reply that its re-ask shows the model: enough to see what went
wrong, where the whole of it (thousands of tokens of one clause) could fill the context."""


class Loop:
    def __init__(self, deps: RunDeps, ctx: RunContext,
                 approve: Callable[[str, dict], bool | None] | None,
                 watched: Callable[[], bool] | None = None):
        self.toolset, self.config = deps.toolset, deps.config
        self.style, self.hooks, self.output_type = deps.style, deps.hooks, deps.output_type
        self.ctx = ctx
        self.cancel = ctx.cancel
        """Slow calls are waited on through it, so a cancel ends the wait at once."""
        self._answered: str | None = None
        """The model that wrote the last valid reply, when one of several could have."""
        self.limits = Limits(deps.config, deps.toolset)
        """Checked before each model request (by the requester) and each tool call."""
        self.requests = Requester(deps, self.cancel, watched, self.limits)
        self.calling = Calling(deps.toolset, ctx)
        self.acting = Acting(deps, ctx, self.limits, self.calling, approve, self._event)

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
            yield from self._failed(str(exc), getattr(exc, "kind", None))
        except Exception as exc:  # a bug: record the end, then let it surface
            yield from self._failed(f"internal error: {type(exc).__name__}: {exc}")
            raise

    def _steps(self) -> Generator:
        s = self.s
        while s.status == RUNNING:
            if s.in_flight:  # taken, or taken up again after a crash: act on it now
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
            calls = parsed.calls
            s.steps.append(StepRecord(index=index, thought=parsed.thought, calls=calls,
                                      repairs=parsed.repairs, model_s=time.perf_counter() - t0,
                                      model=self._answered))
            # the reply as written when it is the step exactly: an endpoint's cache holds it
            s.messages.append(Message(role="assistant", content=parsed.raw or
                                      parsed.to_json(self.config.parallel_calls > 1)))
            self.calling.fresh = index  # taken just now: no call of it can be in the log
            self.acting.reply_note = parsed.note  # what the model's reply made us ignore
            several = [{"tool": c.tool, "args": c.args} for c in calls] if len(calls) > 1 \
                else None
            yield self._event(ev.StepTaken(step=index, thought=parsed.thought,
                                           tool=calls[0].tool, args=calls[0].args,
                                           repairs=parsed.repairs, calls=several))

    def _next_step(self, index: int) -> Iterator[ev.Event]:
        """Ask the model; re-ask with the precise problem until valid or out of budget.
        Failed attempts never enter the history. Returns a Parsed or the last ReplyProblem."""
        extra: list[Message] = []
        warned = self._warned_tool()
        every_try_cut = True  # each reply so far was cut at its token cap: the cap is why
        for attempt in range(self.config.max_reasks + 1):
            reply = yield from self._numbered(
                self.requests.ask(self.s, extra, index, attempt, warned))
            if reply.usage.counting == THOUGHT_CUT:
                parsed = ReplyProblem("envelope", note("thought_too_long",
                                                       cap=self.config.thought_max_chars))
            else:
                parsed = parse_reply(reply.text, self.toolset, cut=reply.cut,
                                     most=self.config.parallel_calls, unended=reply.unended)
            if parsed.repairs:
                self.s.stats.repairs += len(parsed.repairs)
            if isinstance(parsed, Parsed):
                self._answered = reply.model  # which model wrote it, when several could have
                return parsed
            self.s.stats.invalid_replies += 1
            every_try_cut = every_try_cut and reply.cut and parsed.stage == "cut"
            if attempt < self.config.max_reasks:
                self.s.stats.reasks += 1
                yield self._event(ev.Reask(step=index, attempt=attempt + 1, stage=parsed.stage,
                                           problem=parsed.message))
                if self.requests.rules_out(parsed.stage, reply.cut or reply.unended):
                    self.s.stats.grammar_reasks += 1
                else:
                    extra += [Message(role="assistant", content=_head(reply)),
                              Message(role="user", content=self.style.reask(parsed, self.toolset))]
        if every_try_cut:
            return ReplyProblem("cut", Reason.replies_cut(self.config.reply_tokens))
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

    def _act(self, record: StepRecord, waited: Waited | None = None,
             note_: str | None = None) -> Generator:
        """Act on the step's calls (acting.py), then end the run or pause it if that says so."""
        outcome = yield from self.acting.act(self.s, record, waited, note_)
        if isinstance(outcome, Pending):
            yield self._pause(outcome)
        elif outcome is not None:
            yield self._end(outcome.status, answer=outcome.answer, error=outcome.error,
                            repeated=outcome.repeated)

    def _warned_tool(self) -> str | None:
        """The tool whose call the model was just warned it repeats. In schema mode the next
        step's grammar leaves it out: on the 1.5B model that broke 7 of 7 loops, and the
        words alone none (bench/stall_mask.py). Derived from the history, so a resumed run
        sees it too. A step of several calls is masked only when they all call one tool."""
        steps = self.s.steps
        if not steps:
            return None
        calls = steps[-1].calls
        if len(calls) > 1 and any(c.tool != calls[0].tool for c in calls):
            return None
        tool = self.toolset.get(calls[0].tool)
        if tool is None or tool.final or tool.spec.repeatable:
            return None
        checked = self.acting.checked
        verdict = checked[1] if checked is not None and checked[0] == len(steps) \
            else stall.check(steps, self.config.stall_after)
        return tool.name if verdict is not None and verdict.action == "warn" else None

    def _resume(self, resume: Resume) -> Generator:
        s = self.s
        restarted = note("restarted") if s.code_used and "sandbox" not in self.ctx.state else None
        pending, s.pending, s.status = s.pending, None, RUNNING
        yield self._event(ev.RunResumed(answer=resume.answer, approved=resume.approved,
                                        reason=resume.reason, note=restarted,
                                        items=resume.given_items()))
        if pending is None:  # an interrupted run goes on
            if restarted and not s.in_flight:
                s.messages.append(Message(role="user", content=restarted))
            elif restarted:
                yield from self._act(s.steps[-1], note_=restarted)
            return
        record = s.steps[-1]
        waited = {_call_of(item, record, s.run_id): (item, resume.of(item))
                  for item in pending.each}
        yield from self._act(record, waited, note_=restarted)

    def _interrupted(self, why: str, note_key: str) -> Generator:
        """Ctrl-C or a cancel: the tool call in flight gets an observation, so the history
        stays whole and the session can go on; but a run stopped inside a `once` call waits
        for a person to say whether it happened, as after a crash (`why` kept as its error)."""
        self.cancel.cancel(why)  # stops whatever the run still has going
        yield from self._cut_short(INTERRUPTED, why, note(note_key), ask=True)

    def _failed(self, why: str, kind: str | None = None) -> Generator:
        """The run ends failed; but an error that left a step of several calls (a hook of one
        that ended first, say) stopped a `once` call beside it mid-call, and that call waits
        for a person to say whether it happened (`why` kept as the run's error)."""
        s = self.s
        if s.in_flight and s.status == RUNNING and self.calling.begun:
            self.cancel.cancel(why)  # whatever the step still has going stops
            yield from self._cut_short(FAILED, why, note("tool_run_failed"), ask=True)
        else:
            yield self._end(FAILED, error=why, error_kind=kind)

    def _cut_short(self, status: str, why: str, told: str, ask: bool = False) -> Generator:
        """End the run before its time; a step in flight gets `told` as its observation."""
        s = self.s
        asked = None
        if s.in_flight and s.status == RUNNING:
            asked = yield from self.acting.cut_short(s, told, ask)
        yield self._end(status, error=why) if asked is None else self._pause(asked, why)

    def _pause(self, pending: Pending, why: str | None = None) -> ev.RunEnd:
        self.s.pending = pending
        return self._end(NEEDS_HUMAN, error=why)

    def _end(self, status: str, answer: Any = None, error: str | None = None,
             repeated: dict | None = None, error_kind: str | None = None) -> ev.RunEnd:
        s = self.s
        s.status, s.answer, s.error, s.error_kind = status, ev.jsonable(answer), error, error_kind
        # copies: the run's own totals count on in place if it is resumed
        usage, stats = s.usage.model_copy(), s.stats.model_copy()
        result = RunResult(status=status, answer=answer, steps=list(s.steps), usage=usage,
                           stats=stats, error=error, error_kind=error_kind, pending=s.pending,
                           json_mode=s.json_mode, repeated=repeated,
                           once=[o.model_copy() for o in s.once],
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


def _call_of(item: Pending, record: StepRecord, run_id: str) -> int:
    """The index of the call a pending item is for: named by its key in a step of several
    calls; else the one call of the step that is not done (a sub-run's items, named by the
    keys of the sub-run's calls, are all for the call that started it)."""
    if item.id is not None and item.id.startswith(f"{run_id}."):
        return call_index(item.id)
    return next(i for i, c in enumerate(record.calls) if not c.done)


def _head(reply) -> str:
    text = reply.text
    if not (reply.cut or reply.unended) or len(text) <= HEAD:
        return text
    return note("cut", head=text[:HEAD], more=len(text) - HEAD)
