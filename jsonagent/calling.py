"""The piece of a step around its tool: calling the tool with its key, in the run's
context, where a failure becomes what the model reads next instead of our crash; and the
call log (calls.py), through the store.

Before a tool runs, the store records the call with the run's checkpoint; when it returns,
its result. A step whose call was recorded before (the run was resumed, or taken over by
another node) is never asked of the model again: `recover` decides its recorded call."""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any, Callable, Iterator

from . import events as ev
from .calls import (AGAIN, ANSWERED, CALL_FAILED, CUT_SHORT, FAIL, HAPPENED, ONCE, RAN_AGAIN,
                    RETURNED, Call, call_key)
from .errors import ToolError, UserError
from .hooks import ToolCall
from .notes import note
from .state import OnceCall, Pending, RunState, StepRecord
from .tools.core import CODE_TOOL
from .tools.tool import RunContext, Tool
from .tools.toolset import Toolset


class Calling:
    def __init__(self, toolset: Toolset, ctx: RunContext):
        self.toolset, self.ctx = toolset, ctx
        self.store = ctx.store
        """Where the call log is kept; None for a run that is not stored (no log)."""
        self.fresh = 0
        """The step this process just took from the model: no call of it can be recorded."""
        self.begun: dict[str, Pending] = {}
        """The `once` calls started here that have no result yet, by key: what a person is
        asked about if the run stops inside one (`uncertain`)."""

    def recorded(self, state: RunState, record: StepRecord, i: int,
                 asked: Pending | None = None) -> Call | None:
        """The call log's record of the step's call `i`, when it may have started before.
        `asked`: the question the run paused on about it, which is the record of a run that
        has no log (not stored, resumed in its process)."""
        key = call_key(state.run_id, record.index, i)
        if self.store is not None and record.index != self.fresh:
            return self.store.call(key)
        if asked is not None and asked.kind == ONCE and asked.key == key:
            return Call(key, state.run_id, record.index, i, asked.tool or "", asked.args or {},
                        ONCE)
        return None

    def uncertain(self, state: RunState, record: StepRecord, i: int) -> Pending | None:
        """The question about the step's call `i` when it is a `once` call that began here
        and has no result: the run stops inside it (Ctrl-C, a cancel, a client gone), and
        nobody knows whether its effect happened. Never answered by running it again unasked."""
        asked = self.begun.get(call_key(state.run_id, record.index, i))
        if asked is not None:
            _mark(state, asked.key, asked.tool, CUT_SHORT)
        return asked

    def invoke(self, state: RunState, record: StepRecord, i: int, call: ToolCall,
               handed: Any = None) -> tuple[Any, bool]:
        """The tool's result (or a Pending) and whether it failed, the call run here. `handed`:
        what a sub-run of this call waits for and the person's input (`RunContext.handed_down`)."""
        tool = self.toolset.get(call.tool)
        if tool is None:
            return {"error": f"unknown tool {call.tool!r}"}, True
        ctx = self._started(state, record, i, call, tool, self.ctx)
        ctx.handed_down = handed
        try:
            wait = ctx.cancel.call_here if tool.stops_on_cancel else ctx.cancel.call
            out, failed = wait(_run, tool, call.args, ctx)
        finally:
            ctx.handed_down = None
        return self._finished(state, record, i, out, failed)

    def each(self, state: RunState, record: StepRecord,
             calls: list[tuple[int, ToolCall, Any]]) -> Iterator[tuple[int, Any, bool, float]]:
        """The calls `(index, call, handed)` of a step of several, run side by side (async
        tools on one event loop, the others each in a thread: cancel.py); yields `(index,
        result or Pending, failed, seconds)` as each ends. Each has its own context: its
        key, and what a sub-run of it waits for."""
        works, started = [], []
        for i, call, handed in calls:
            tool = self.toolset.get(call.tool)
            if tool is None:  # a hook sent it to a tool this agent does not have
                works.append(lambda name=call.tool: (({"error": f"unknown tool {name!r}"},
                                                      True), 0.0))
                continue
            ctx = self._started(state, record, i, call, tool,
                                replace(self.ctx, handed_down=handed), started)
            works.append(_timed(tool, call.args, ctx))
        if self.store is not None and started:  # in the log, all of them, before any runs
            self.store.calls_started(started, state)
        running = self.ctx.cancel.each(works)
        try:
            for n, ok, value in running:
                if not ok:
                    raise value  # a cancel, Ctrl-C, a developer's mistake: the run ends on it
                (out, failed), seconds = value
                i = calls[n][0]
                yield (i, *self._finished(state, record, i, out, failed), seconds)
        finally:
            running.close()  # the run ends on an error: the calls still running are stopped

    def _started(self, state: RunState, record: StepRecord, i: int, call: ToolCall,
                 tool: Tool, ctx: RunContext, batch: list[Call] | None = None) -> RunContext:
        """Before the call runs: its key in its context, and its start in the log, with the
        run's checkpoint (or in `batch`, which the caller logs with one)."""
        ctx.step, ctx.call_id = len(state.steps), call_key(state.run_id, record.index, i)
        if tool.effects == ONCE:  # in the run's record before it runs (the checkpoint's too)
            _mark(state, ctx.call_id, call.tool, None)
            self.begun[ctx.call_id] = Pending(kind="once", tool=call.tool, args=call.args,
                                              key=ctx.call_id)
        logged = Call(ctx.call_id, state.run_id, record.index, i, call.tool, call.args,
                      tool.effects, time.time())
        if batch is not None:
            batch.append(logged)
        elif self.store is not None:
            self.store.call_started(logged, state)
        if call.tool == CODE_TOOL:
            state.code_used = True
        return ctx

    def _finished(self, state: RunState, record: StepRecord, i: int, out: Any,
                  failed: bool) -> tuple[Any, bool]:
        if isinstance(out, Pending):  # a person will answer for it (`ended`)
            return out, False
        out = ev.jsonable(out)
        self.ended(state, record, i, out, failed)
        return out, failed

    def ended(self, state: RunState, record: StepRecord, i: int, out: Any, failed: bool,
              how: str | None = None) -> None:
        """The call's result, in the log for good (a person's answer to its question too,
        `how`: the answer)."""
        key = call_key(state.run_id, record.index, i)
        if self.store is not None:
            self.store.call_ended(key, out, failed)
        if self.begun.pop(key, None) is not None or how is not None:
            _mark(state, key, record.calls[i].tool, how or (CALL_FAILED if failed else RETURNED))

    def recover(self, state: RunState, record: StepRecord, i: int, recorded: Call,
                answer: str | None = None, reason: str | None = None) -> tuple[Any, bool, str]:
        """What the step's recorded call `i` gives now, whatever the model would say: its
        result if it ended; else, by its effects, a Pending for a person (`once`), or the
        call to run again with the same key (the action says so: `RUN_AGAIN`). `answer` is a
        person's about a `once` call. Returns the result (or a Pending), whether it failed,
        and the action (`CallRecovered.action`)."""
        call = record.calls[i]
        call.tool, call.args = recorded.tool, recorded.args  # the key stays with them
        if recorded.ended:
            if recorded.effects == ONCE:  # a person's answer, recorded as its result, stays
                _mark(state, recorded.key, recorded.tool,
                      CALL_FAILED if recorded.error else RETURNED, keep=ANSWERED)
            return recorded.result, recorded.error, "result_used"
        if recorded.effects == ONCE and answer not in (HAPPENED, AGAIN, FAIL):
            _mark(state, recorded.key, recorded.tool, CUT_SHORT)
            return Pending(kind="once", tool=recorded.tool, args=recorded.args,
                           key=recorded.key), False, "asked"
        why = f" ({reason})" if reason else ""
        if answer == HAPPENED:
            out, failed = {"note": note("once_happened", reason=why)}, False
        elif answer == FAIL:
            out, failed = {"error": note("once_failed", reason=why)}, True
        else:  # the caller runs it again, with its key (calls.RUN_AGAIN)
            return None, False, answer or RAN_AGAIN
        self.ended(state, record, i, out, failed, how=answer)
        return out, failed, answer


def _mark(state: RunState, key: str, tool: str | None, how: str | None,
          keep: tuple[str | None, ...] = ()) -> None:
    """How the `once` call `key` ended, in the run's record (`RunState.once`), unless the
    record says already one of the endings `keep`."""
    for entry in state.once:
        if entry.key == key:
            if entry.ended not in keep:
                entry.ended = how
            return
    state.once.append(OnceCall(key=key, tool=tool or "", ended=how))


def _run(tool: Tool, args: dict[str, Any], ctx: RunContext) -> tuple[Any, bool]:
    """The tool's result and whether it failed: a failure is what the model reads next."""
    try:
        return tool.invoke(args, ctx), False
    except (Exception, SystemExit) as exc:
        return _failed(exc)


def _failed(exc: BaseException) -> tuple[Any, bool]:
    """A tool's failure as what the model reads next; a developer's mistake (a UserError,
    say a refused sandbox) ends the run instead."""
    if isinstance(exc, UserError):
        raise exc
    if isinstance(exc, ToolError):
        return {"error": str(exc)}, True
    return {"error": f"{type(exc).__name__}: {exc}"}, True  # a tool's bug, not our crash


def _timed(tool: Tool, args: dict[str, Any], ctx: RunContext) -> Callable[[], Any]:
    """The work of one call of `each`, with how long it took: an async tool's is a coroutine
    function (it runs on the step's event loop)."""
    if tool.is_async:
        async def awaited() -> tuple[tuple[Any, bool], float]:
            t0 = time.perf_counter()
            try:
                out = await tool.ainvoke(args, ctx), False
            except (Exception, SystemExit) as exc:
                out = _failed(exc)
            return out, time.perf_counter() - t0
        return awaited

    def work() -> tuple[tuple[Any, bool], float]:
        t0 = time.perf_counter()
        return _run(tool, args, ctx), time.perf_counter() - t0
    return work
