"""An agent used as a tool: each call is a sub-run of the calling run, in the same store.

The sub-run is an ordinary run with a `parent_run_id` and a depth. Its events go to its own
records and on to the parent's (the display, the transcript); its usage and steps count in
the parent's. A question or an approval inside it pauses it, and the calling step returns a
`Pending` whose `path` names it, so the whole tree pauses; resuming the top run calls the
step's tool again with the input (`ctx.handed_down`), and it goes down the same way.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import threading
from dataclasses import replace
from typing import Any, Iterator

from .calls import IDEMPOTENT, sub_run_id
from .errors import ConfigError, ToolError
from .notes import note
from .session import Session
from .state import OnceCall, Pending, RunState
from .status import COMPLETED, INTERRUPTED, NEEDS_HUMAN, RESUMABLE
from .tools.specs import ToolSpec
from .tools.tool import RunContext, Tool
from .usage import Usage

_COUNTING = threading.Lock()
_HOLDING: contextvars.ContextVar[frozenset] = contextvars.ContextVar("jsonagent_agents_held",
                                                                    default=frozenset())
"""The agents whose sub-run this thread's work belongs to (their locks are held)."""
SUB_RUNS = "sub_runs"
"""Where, in a session's scratch state, paused sub-runs wait when no store keeps them."""


def agent_tool(agent: Any, name: str, description: str | None = None,
               input: type | None = None) -> Tool:
    """`Agent.as_tool`: the tool's arguments (`{"task": ...}`, or a pydantic model's fields)
    become the sub-agent's question; its answer is the observation."""
    if input is None:
        params = {"type": "object", "properties": {"task": {"type": "string",
                  "description": note("agent_task")}}, "required": ["task"]}
    else:
        from pydantic import TypeAdapter

        params = TypeAdapter(input).json_schema()
        params.pop("title", None)
    spec = ToolSpec.from_dict({"name": name, "parameters": params,
                               "description": description or note("agent_description", agent=name)},
                              origin=f"agent:{name}")
    return Tool(spec=spec, fn=AgentCall(agent, name, input is not None), ctx_param="ctx")


class AgentCall:
    """The function behind an agent used as a tool."""

    stops_on_cancel = True  # the parent's cancel cancels the sub-run, which then ends
    effects = IDEMPOTENT  # a call done again re-attaches to the sub-run it started

    def __init__(self, agent: Any, name: str, structured: bool = False):
        self.agent, self.name, self.structured = agent, name, structured
        self.source = f"agent:{name}"
        # one sub-run of this agent at a time: a server's workers share it (and its model,
        # which need not be thread-safe); an agent that calls itself holds it already, in
        # whichever thread its calls run (`_HOLDING`, which each call's thread inherits)
        self._lock = threading.Lock()

    def __call__(self, ctx: RunContext = None, **args: Any) -> Any:  # type: ignore[assignment]
        if ctx is None or ctx.run is None:  # called as plain Python, outside a run
            result = self.agent.run(self._question(args))
            if result.status != COMPLETED:
                raise ToolError(note("subrun_ended", tool=self.name, status=result.status,
                                     error=result.error or ""))
            return result.answer
        if ctx.handed_down is not None:
            pending, resume = ctx.handed_down
            return self._resume(ctx, pending.path[1], resume)
        parent: RunState = ctx.run
        limit = parent.config.get("max_depth", 3)
        if parent.depth >= limit:
            raise ToolError(note("subrun_too_deep", tool=self.name, limit=limit))
        # the sub-run's id is derived from the call's key: a step done again after a crash
        # or a takeover finds the sub-run it started, and never starts a second one (and its
        # spans find the call's, of calls side by side)
        run_id = sub_run_id(ctx.call_id) if ctx.call_id else None
        started = self._started(ctx.store, run_id) if run_id and ctx.store is not None else None
        if started is not None:
            return self._reattach(ctx, started)
        left = _left(parent)
        if left <= 0:
            raise ToolError(note("subrun_no_budget", tool=self.name))
        session = Session(self._deps(left), None, ctx.store, parent=ctx)
        return self._drive(ctx, session, session.iter(self._question(args), run_id=run_id),
                           None)

    @staticmethod
    def _started(store: Any, run_id: str) -> Any:
        try:
            return store.load_run(run_id)
        except ConfigError:  # not started yet
            return None

    def _reattach(self, ctx: RunContext, info: Any) -> Any:
        """The sub-run this call started before: its answer, its pause, or the run itself
        going on from its own checkpoint (its own call log decides its own calls)."""
        state = info.state
        _once(ctx.run, state.once)  # as are the once calls it lists
        if info.status == COMPLETED:
            _count(ctx.run, state, None)  # the parent's count died with its process
            return state.answer
        if info.status == NEEDS_HUMAN:
            return self._paused(ctx, state)
        if info.status in RESUMABLE:
            session = Session(self._deps(len(state.steps) + state.sub_steps + _left(ctx.run)),
                              info.session_id, ctx.store, parent=ctx)
            return self._drive(ctx, session, session.iter_resume(run=info.id), None)
        raise ToolError(note("subrun_ended", tool=self.name, status=info.status,
                             error=state.error or ""))

    def _resume(self, ctx: RunContext, run_id: str, resume: Any) -> Any:
        if ctx.store is not None:
            info = ctx.store.load_run(run_id)
            run: str | RunState = run_id
            before, session_id = info.state, info.session_id
        else:
            before = run = ctx.state.get(SUB_RUNS, {}).pop(run_id)
            session_id = None
        done = len(before.steps) + before.sub_steps
        session = Session(self._deps(done + _left(ctx.run)), session_id, ctx.store, parent=ctx)
        events = session.iter_resume(resume.answer, resume.approved, resume.reason, run,
                                     items=resume.given_items())
        return self._drive(ctx, session, events, before)

    def _deps(self, left: int):
        deps = self.agent.deps
        steps = max(1, min(deps.config.max_steps, left))
        return replace(deps, config=deps.config.model_copy(update={"max_steps": steps}))

    def _question(self, args: dict[str, Any]) -> str:
        if not self.structured and set(args) == {"task"}:
            return str(args["task"])
        return json.dumps(args, ensure_ascii=False)

    def _drive(self, ctx: RunContext, session: Session, events: Iterator[Any],
               before: RunState | None) -> Any:
        """Run the sub-run to its end or its pause; its records see every event."""
        stop = ctx.cancel.on_cancel(session.cancel)
        end = None
        held = _HOLDING.get()
        try:
            with contextlib.nullcontext() if self in held else self._lock:
                reset = _HOLDING.set(held | {self})
                try:
                    for end in events:
                        pass
                finally:
                    _HOLDING.reset(reset)
        finally:
            stop()
            session.close()
        state = session.last
        _count(ctx.run, state, before)
        result = end.result
        _once(ctx.run, result.once)
        if result.status == COMPLETED:
            return result.answer
        if result.status == NEEDS_HUMAN:
            if ctx.store is None:
                ctx.state.setdefault(SUB_RUNS, {})[state.run_id] = state
            return self._paused(ctx, state)
        if result.status == INTERRUPTED:
            ctx.cancel.check()
        raise ToolError(note("subrun_ended", tool=self.name, status=result.status,
                             error=result.error or ""))


    @staticmethod
    def _paused(ctx: RunContext, sub: RunState) -> Pending:
        """The sub-run's pending, as the parent's: the same items, each with the path down
        to the run it waits in (so none is taken for one of the parent's own calls)."""
        def down(p: Pending) -> Pending:
            return p.model_copy(update={"path": [ctx.run.run_id, *(p.path or [sub.run_id])]})

        p = sub.pending
        return down(p).model_copy(update={"items": [down(i) for i in p.items]}) if p.items \
            else down(p)


def _left(parent: RunState) -> int:
    """Steps the tree's budget leaves for a sub-run of `parent`'s current step."""
    return parent.config.get("max_steps", 10) - len(parent.steps) - parent.sub_steps


def _once(parent: RunState, once: list[OnceCall]) -> None:
    """A sub-run's `once` calls, in its parent's record (`RunState.once`): a task tried
    again from the top (`eval --retry-errors`) would make them again too, under new keys.
    One the parent lists already (the sub-run stopped before) takes how it ended since."""
    with _COUNTING:  # sub-runs of one step (side by side) end in threads of their own
        known = {o.key: o for o in parent.once}
        for o in once:
            if o.key in known:
                known[o.key].ended = o.ended
            else:
                parent.once.append(o.model_copy())


def _count(parent: RunState, sub: RunState, before: RunState | None) -> None:
    """A sub-run's steps and usage, since it last stopped, count in its parent's."""
    done = len(before.steps) + before.sub_steps if before is not None else 0
    was = before.usage if before is not None else Usage()
    with _COUNTING:  # sub-runs of one step (side by side) end in threads of their own
        parent.sub_steps += len(sub.steps) + sub.sub_steps - done
        parent.usage.add(Usage(
            prompt_tokens=sub.usage.prompt_tokens - was.prompt_tokens,
            completion_tokens=sub.usage.completion_tokens - was.completion_tokens,
            cached_tokens=sub.usage.cached_tokens - was.cached_tokens))
