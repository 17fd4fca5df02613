"""A conversation: runs one after another on one history, kept in memory or in a store.

A session drives the loop's iterator and hands every event to the records (store, JSONL
transcript, your `on_event`). A run that pauses ends its iterator; resuming it builds the
state again from the store and goes on, in this process or another one.
"""

from __future__ import annotations

import inspect
import json
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Callable, Iterator

from . import events as ev
from .cancel import CancelToken
from .errors import ConfigError
from .loop import Loop, Resume
from .prompt import note
from .result import RunResult
from .state import MemoryState, Message, RunState, new_id
from .status import COMPLETED, NEEDS_HUMAN, RESUMABLE, RUNNING
from .store import SessionBusy

if TYPE_CHECKING:
    import asyncio

    from .agent import Agent
    from .store import Store


class Session:
    def __init__(self, agent: Agent, name: str | None = None, store: Store | None = None,
                 loop: asyncio.AbstractEventLoop | None = None):
        self.agent, self.name, self.store = agent, name, store
        self.id = store.open_session(name) if store is not None else new_id("ses")
        self.ctx = agent._context(loop)
        self.approve = bridge(agent.approve, loop)
        self._token = CancelToken()
        """The next (or current) run's: each run has its own, in its own copy of `ctx`."""
        self.last: RunState | None = None
        """The last run's state, as this process last saw it."""
        self._journal = agent._journal()

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        self.ctx.close()
        if self._journal is not None:
            self._journal.close()

    def cancel(self, reason: str = "cancelled") -> None:
        """Stop the run in progress now, from any thread: the loop stops waiting, and the
        tool or model call in flight is stopped (see cancel.py). A run not yet started
        stops before its first step."""
        self._token.cancel(reason)

    @property
    def pending(self):
        """What the conversation's last run waits for, if anything."""
        last = self.store.last_run(self.id) if self.store is not None else self.last
        return last.pending if last is not None and last.status == NEEDS_HUMAN else None

    # -- running ------------------------------------------------------------------------------

    def run(self, text: str) -> RunResult:
        """A new message; when the last run waits for an answer to a question, the answer."""
        last = self.store.last_run(self.id) if self.store is not None else self.last
        if last is not None and last.status == NEEDS_HUMAN:
            if last.pending.kind == "question":
                return self.resume(answer=text, run=last.run_id)
            raise ConfigError(f"run {last.run_id} waits for an approval of "
                              f"{last.pending.tool}: call resume(approve=True or False)")
        return drain(self.iter(text))

    def iter(self, text: str) -> Iterator[ev._Event]:
        """The events of a new run on this conversation, ending with a RunEnd."""
        def build(last: RunState | None) -> RunState:
            return self._new_state(text, last)

        if self.store is not None:
            state = self.store.start_run(self.id, build, self.agent.busy_wait_s)
        elif self.last is not None and self.last.status == NEEDS_HUMAN:
            raise SessionBusy(f"this session's run {self.last.run_id} waits for a person: "
                              "resume it first")
        else:
            state = build(self.last)
        return self._drive(state, None)

    def resume(self, answer: str | None = None, approve: bool | None = None,
               reason: str | None = None, run: str | RunState | None = None) -> RunResult:
        return drain(self.iter_resume(answer, approve, reason, run))

    def iter_resume(self, answer: str | None = None, approve: bool | None = None,
                    reason: str | None = None, run: str | RunState | None = None
                    ) -> Iterator[ev._Event]:
        """Go on with a paused or interrupted run (by default this session's last one)."""
        if isinstance(run, RunState):
            state = run.model_copy(deep=True)
        elif self.store is not None:
            run_id = run or (self.last.run_id if self.last else None)
            last = self.store.load_run(run_id).state if run_id else self.store.last_run(self.id)
            if last is None:
                raise ConfigError("nothing to resume: this session has no run")
            state = last
        elif self.last is not None and run in (None, self.last.run_id):
            state = self.last
        else:
            raise ConfigError(f"no run {run} here: resuming a run by its id needs a store")
        _check_input(state, answer, approve)
        if self.store is not None:
            state = self.store.claim_run(state.run_id, self.agent.busy_wait_s)
        if state.seq == 0:  # a queued run, or one that died before its first event: start it
            state.status = RUNNING
        return self._drive(state, Resume(answer=answer, approved=approve, reason=reason))

    def enqueue(self, text: str, **config: Any) -> RunState:
        """A new run stored as queued, for a worker to start with `iter_resume(run=id)`;
        `config` is recorded over the agent's settings (say, max_steps)."""
        def build(last: RunState | None) -> RunState:
            state = self._new_state(text, last)
            state.config.update(config)
            return state

        return self.store.start_run(self.id, build, 0, queued=True)

    # -- internals ----------------------------------------------------------------------------

    def _new_state(self, text: str, last: RunState | None) -> RunState:
        agent = self.agent
        history = _closed(last) if last is not None else []
        json_mode = last.json_mode if last is not None else \
            (agent.config.json_mode or getattr(agent.model, "default_json_mode", "object"))
        return RunState(
            run_id=new_id("run"), session_id=self.id, question=text,
            messages=[Message(role="system", content=agent.system_prompt), *history,
                      Message(role="user", content=text)],
            json_mode=json_mode, config=agent.config.model_dump(),
            toolset=agent.toolset.fingerprint(), tools=agent.toolset.names,
            model=getattr(agent.model, "name", "?"), origin=agent.origin,
            memory=last.memory if last is not None else MemoryState(),
            code_used=bool(last and last.code_used))

    def _drive(self, state: RunState, resume: Resume | None) -> Iterator[ev._Event]:
        agent = self.agent
        seek = getattr(agent.model, "seek", None)
        if seek is not None:  # a replayed script goes on where this run stopped
            seek(state.stats.model_calls)
        # the run's own context: the session's scratch state (its sandbox), the run's token
        ctx = replace(self.ctx, cancel=self._token)
        loop = Loop(agent.model, agent.toolset, agent.config, ctx, agent.style, agent.hooks,
                    self.approve, agent.output_type)
        self.last = state
        return self._records(loop.iterate(state, resume), state)

    def _records(self, events: Iterator[ev._Event], state: RunState) -> Iterator[ev._Event]:
        """Hand each event to the records, then to the caller. Ctrl-C that lands outside the
        loop (in a record or in your `on_event`) is handed to the loop, which ends the run
        cleanly. While the run goes on, `agent.cancel(run_id)` reaches it."""
        token = self._token
        self.agent.running[state.run_id] = token
        try:
            yield from self._recorded(events, state)
        finally:
            self.agent.running.pop(state.run_id, None)
            token.close()
            self._token = CancelToken()

    def _recorded(self, events: Iterator[ev._Event], state: RunState) -> Iterator[ev._Event]:
        interrupt: KeyboardInterrupt | None = None
        while True:
            try:
                event = events.throw(interrupt) if interrupt else next(events)
            except StopIteration:
                return
            interrupt = None
            try:
                self._record(event, state)
            except KeyboardInterrupt as exc:
                if isinstance(event, ev.RunEnd):
                    raise
                interrupt = exc
                continue
            yield event

    def _record(self, event: ev._Event, state: RunState) -> None:
        if self.store is not None:
            self.store.record(event, state)
        if self._journal is not None:
            self._journal.write(event)
        if self.agent.on_event is not None:
            self.agent.on_event(event)


def _closed(last: RunState) -> list[Message]:
    """The history after `last`: a run that stopped while a tool ran (a crash, a failure)
    ends on a call without a result; close it, so the model never sees one."""
    history = last.messages[1:]
    if last.status != COMPLETED and last.pending is None and history \
            and history[-1].role == "assistant":
        tool = json.loads(history[-1].content).get("tool_name", "")
        body = {"tool_name": tool, "response": {"error": note("interrupted")}}
        history = [*history, Message(role="observation", content=json.dumps(body))]
    return history


def _check_input(state: RunState, answer: str | None, approve: bool | None) -> None:
    """Refuse a resume that does not fit what the run waits for, before touching the run."""
    pending = state.pending
    if state.status not in RESUMABLE:
        raise ConfigError(f"run {state.run_id} has ended ({state.status}); nothing to resume")
    if pending is None:
        if answer is not None or approve is not None:
            raise ConfigError(f"run {state.run_id} waits for nothing; resume it without an "
                              "answer or a decision")
    elif pending.kind == "question" and answer is None:
        raise ConfigError(f"run {state.run_id} waits for an answer to {pending.question!r}")
    elif pending.kind == "approval" and approve is None:
        raise ConfigError(f"run {state.run_id} waits for an approval of {pending.tool}: "
                          "approve or deny it")


def bridge(callback: Callable | None, loop: asyncio.AbstractEventLoop | None):
    """A plain function the sync loop can call, whatever kind of callback the user gave."""
    if callback is None:
        return None
    return lambda *args: _wait(callback(*args), loop)


def drain(events: Iterator[ev._Event]) -> RunResult:
    end = None
    for end in events:
        pass
    return end.result


def _wait(value: Any, loop: asyncio.AbstractEventLoop | None) -> Any:
    if not inspect.isawaitable(value):
        return value
    import asyncio
    import concurrent.futures

    async def run():
        return await value

    if loop is not None:  # aiter: answer on the caller's own event loop
        return asyncio.run_coroutine_threadsafe(run(), loop).result()
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(run())
    with concurrent.futures.ThreadPoolExecutor(1) as pool:  # sync run() inside a running loop
        return pool.submit(asyncio.run, run()).result()
