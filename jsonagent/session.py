"""A conversation: runs one after another on one history, kept in memory or in a store.

A session drives the loop's iterator and hands every event to the records (store, JSONL
transcript, your `on_event`). A run that pauses ends its iterator; resuming it builds the
state again from the store and goes on, in this process or another one.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Callable, Iterator

from . import events as ev
from . import tracing
from .bridge import bridge, drain
from .calls import UNDECIDED, call_key, once_answer
from .cancel import CancelToken, on_caller
from .ctrlc import ctrl_c_held, ctrl_c_watched
from .journal import Journal
from .errors import ConfigError, SessionBusy
from .acting import Resume, unfit
from .loop import Loop
from .notes import note
from .result import RunResult
from .state import MemoryState, Message, RunState, new_id
from .status import COMPLETED, NEEDS_HUMAN, RESUMABLE, RUNNING, Reason
from .tools.tool import RunContext
from .usage import Usage

if TYPE_CHECKING:
    import asyncio

    from .deps import RunDeps
    from .store import Store


Watched = bool | Callable[[], bool] | None
"""Whether a run's replies are streamed: always, or as a function says before each call;
None takes the agent's setting."""

NAME_MAX = 200
"""The longest session name, on every surface (the REST API's bodies say the same)."""


class Session:
    def __init__(self, deps: RunDeps, name: str | None = None, store: Store | None = None,
                 loop: asyncio.AbstractEventLoop | None = None, parent: RunContext | None = None):
        if name is not None and not 0 < len(name) <= NAME_MAX:
            raise ConfigError(f"a session's name has 1 to {NAME_MAX} characters "
                              f"(this one has {len(name)})")
        self.deps, self.name, self.store = deps, name, store
        self.id = store.open_session(name) if store is not None else new_id("ses")
        ask = bridge(deps.ask_human, loop)
        self.parent = parent
        """The context of the run whose tool runs this session's runs (a sub-run's): its
        person answers here when this agent has none, and its records see these events."""
        self.ctx = RunContext(ask_human=(lambda q: on_caller(ask, q)) if ask else
                              (parent.ask_human if parent else None),
                              sandbox_factory=deps.sandbox_factory)
        """The session's context: its scratch state (the sandbox) outlives a run."""
        approve = bridge(deps.approve, loop)
        # asked on the thread that waits for the call, as the person is (calls run side by side)
        self.approve = (lambda tool, args: on_caller(approve, tool, args)) if approve else \
            (parent.approve if parent else None)
        self._token = CancelToken()
        """The next (or current) run's: each run has its own, in its own copy of `ctx`."""
        self.last: RunState | None = None
        """The last run's state, as this process last saw it."""
        self._used: dict[str, Usage] = {}
        """What each run this object drove used, by run id (a resumed run's whole total)."""
        self._journal = Journal(deps.transcript) if deps.transcript else None
        self._spans = tracing.builder(deps.toolset, deps.caps.name)
        """Tracing's consumer, None when tracing is off (then nothing imports OpenTelemetry)."""
        self._recording = any((self._spans, store, self._journal, deps.on_event, parent))
        """Some record takes the events (else handing them on costs a step nothing)."""

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        self.ctx.close()
        if self._spans is not None:
            self._spans.close()
        if self._journal is not None:
            self._journal.close()

    def cancel(self, reason: str = Reason.CANCELLED) -> None:
        """Stop the run in progress now, from any thread: the loop stops waiting, and the
        tool or model call in flight is stopped (see cancel.py). A run not yet started
        stops before its first step."""
        self._token.cancel(reason)

    @property
    def pending(self):
        """What the conversation's last run waits for, if anything."""
        last = self.store.last_run(self.id) if self.store is not None else self.last
        return last.pending if last is not None and last.status == NEEDS_HUMAN else None

    @property
    def usage(self) -> Usage:
        """What the session's runs used in all: tokens, and the cost (None when a run's is
        unknown). A stored session counts every run the store has of it, from any process."""
        if self.store is not None:
            infos = self.store.runs(self.id, limit=1 << 30)
            used = [(i.state or self.store.load_run(i.id).state).usage for i in infos]
        else:
            used = list(self._used.values())
        total = Usage()
        for usage in used:
            total.add(usage)
        return total

    # -- running ------------------------------------------------------------------------------

    def run(self, text: str) -> RunResult:
        """A new message; when the last run waits for an answer to a question, the answer."""
        last = self.store.last_run(self.id) if self.store is not None else self.last
        if last is not None and last.status == NEEDS_HUMAN:
            if last.pending.kind in ("question", "once") and not last.pending.items:
                return self.resume(answer=text, run=last.run_id)
            if last.pending.items:
                raise ConfigError(f"run {last.run_id} waits for {len(last.pending.items)} "
                                  "items: call resume(items={ID: {\"approve\" or \"answer\": "
                                  "...}}) with each one's id")
            raise ConfigError(f"run {last.run_id} waits for an approval of "
                              f"{last.pending.tool}: call resume(approve=True or False)")
        return drain(self.iter(text))

    def iter(self, text: str, *, deltas: Watched = None,
             run_id: str | None = None) -> Iterator[ev.Event]:
        """The events of a new run on this conversation, ending with a RunEnd. With `deltas`
        (True, or a function asked before each model call), the reply is streamed and its
        live delta events come among the others, to the caller and to `on_event`. `run_id`:
        the new run's id (a sub-run's, derived from its parent's call key), else a new one."""
        def build(last: RunState | None) -> RunState:
            return self._new_state(text, last, run_id)

        if self.store is not None:
            state = self.store.start_run(self.id, build, self.deps.busy_wait_s)
        elif self.last is not None and self.last.status == NEEDS_HUMAN:
            raise SessionBusy(f"this session's run {self.last.run_id} waits for a person: "
                              "resume it first")
        else:
            state = build(self.last)
        return self._drive(state, None, deltas)

    def resume(self, answer: str | None = None, approve: bool | None = None,
               reason: str | None = None, run: str | RunState | None = None, *,
               items: dict[str, dict] | None = None) -> RunResult:
        return drain(self.iter_resume(answer, approve, reason, run, items=items))

    def iter_resume(self, answer: str | None = None, approve: bool | None = None,
                    reason: str | None = None, run: str | RunState | None = None, *,
                    deltas: Watched = None,
                    items: dict[str, dict] | None = None) -> Iterator[ev.Event]:
        """Go on with a paused or interrupted run (by default this session's last one).
        `items`: when it waits for several items (the calls of a step of several), each
        one's `answer`, `approve` and `reason` by its id; one left out takes the others."""
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
        _check_input(state, Resume.given(answer, approve, reason, items))
        if self.store is not None:
            state = self.store.claim_run(state.run_id, self.deps.busy_wait_s)
        return self.iter_claimed(state, answer, approve, reason, deltas=deltas, items=items)

    def iter_claimed(self, state: RunState, answer: str | None = None,
                     approve: bool | None = None, reason: str | None = None, *,
                     deltas: Watched = None,
                     items: dict[str, dict] | None = None) -> Iterator[ev.Event]:
        """Go on with a run this process has claimed from the store already (a server's
        worker takes its runs with `Store.next_run`)."""
        if state.seq == 0:  # a queued run, or one that died before its first event: start it
            state.status = RUNNING
        return self._drive(state, Resume.given(answer, approve, reason, items), deltas)

    def enqueue(self, text: str, *, traceparent: str | None = None, run_id: str | None = None,
                **config: Any) -> RunState:
        """A new run stored as queued, for a worker to start with `iter_resume(run=id)`;
        `config` is recorded over the agent's settings (say, max_steps); `traceparent`, the
        caller's trace (a request's header), is the parent of the run's span; `run_id`, as
        in `iter`."""
        def build(last: RunState | None) -> RunState:
            state = self._new_state(text, last, run_id)
            state.config.update(config)
            state.traceparent = traceparent or state.traceparent
            return state

        return self.store.start_run(self.id, build, 0, queued=True)

    # -- internals ----------------------------------------------------------------------------

    def _new_state(self, text: str, last: RunState | None,
                   run_id: str | None = None) -> RunState:
        deps = self.deps
        history = _closed(last) if last is not None else []
        json_mode = last.json_mode if last is not None else \
            (deps.config.json_mode or deps.caps.default_json_mode)
        return RunState(
            run_id=run_id or new_id("run"), session_id=self.id, question=text,
            messages=[Message(role="system", content=deps.system_prompt), *history,
                      Message(role="user", content=text)],
            json_mode=json_mode, config=deps.config.model_dump(),
            tool_calls=last.tool_calls if last is not None else bool(deps.config.tool_calls),
            toolset=deps.toolset.fingerprint(), tools=deps.toolset.names,
            model=deps.caps.name, server=deps.caps.server, origin=deps.origin,
            memory=last.memory if last is not None else MemoryState(),
            code_used=bool(last and last.code_used), traceparent=tracing.inherited(),
            **({"parent_run_id": self.parent.run.run_id, "depth": self.parent.run.depth + 1}
               if self.parent is not None else {}))

    def _drive(self, state: RunState, resume: Resume | None,
               deltas: Watched = None) -> Iterator[ev.Event]:
        deps = self.deps
        # the run's own context: the session's scratch state (its sandbox), the run's token
        ctx = replace(self.ctx, cancel=self._token, run=state, store=self.store,
                      approve=self.approve, emit=self._pass_on)
        deltas = deps.deltas if deltas is None else deltas
        watched = deltas if callable(deltas) else (lambda: True) if deltas else None
        loop = Loop(deps, ctx, self.approve, watched)
        self.last = state
        return self._records(loop.iterate(state, resume), state)

    def _records(self, events: Iterator[ev.Event], state: RunState) -> Iterator[ev.Event]:
        """Hand each event to the records, then to the caller. Ctrl-C that lands outside the
        loop (in a record, in your `on_event`, or between two events) is handed to the loop,
        which ends the run cleanly. While the run goes on, `agent.cancel(run_id)` reaches it."""
        token = self._token
        self.deps.running[state.run_id] = token
        # another process (a server node) may ask the store to stop this run
        release = self.store.drive(state.run_id, token.cancel) if self.store is not None \
            else None
        try:
            with ctrl_c_watched():  # once for the run: a held block then costs next to nothing
                yield from self._recorded(events, state)
        finally:
            if release is not None:
                release()
            self.deps.running.pop(state.run_id, None)
            self._used[state.run_id] = state.usage.model_copy()
            token.close()
            self._token = CancelToken()

    def _recorded(self, events: Iterator[ev.Event], state: RunState) -> Iterator[ev.Event]:
        interrupt: KeyboardInterrupt | None = None
        while True:
            try:
                event = events.throw(interrupt) if interrupt else next(events)
            except StopIteration:
                return
            except KeyboardInterrupt as exc:  # landed here, between two events
                if interrupt is not None:  # the loop let it through: the run had ended
                    raise
                interrupt = exc
                continue
            interrupt = None
            try:
                if isinstance(event, ev.Delta):  # live only: no record keeps it
                    if self.deps.on_event is not None:
                        self.deps.on_event(event)
                else:
                    self._hand_to_records(event, state)
                yield event
            except KeyboardInterrupt as exc:  # in a record, or the caller's (drain hands it on)
                if isinstance(event, ev.RunEnd):
                    raise
                interrupt = exc

    def _hand_to_records(self, event: ev.Event, state: RunState) -> None:
        if not self._recording:
            return
        # Ctrl-C waits until every record has the event: between two, the store would keep
        # a step that the transcript lacks, or the transcript a result without its call
        with ctrl_c_held():
            if self._spans is not None:  # first: it notes the run's span in the state it stores
                self._spans.write(event, state)
            if self.store is not None:
                self.store.record(event, state)
            self._pass_on(event)

    def _pass_on(self, event: ev.Event) -> None:
        """The records beside the store, which a sub-run's events reach too (its own
        session stores them, under its own run id), then the parent run's."""
        if self._journal is not None:
            self._journal.write(event)
        if self.deps.on_event is not None:
            self.deps.on_event(event)
        if self.parent is not None and self.parent.emit is not None:
            # on the thread that waits for the call: sub-runs side by side reach the display
            # and the journal one event at a time
            on_caller(self.parent.emit, event)


def _closed(last: RunState) -> list[Message]:
    """The history after `last`: a run that stopped while a tool ran (a crash, a failure)
    ends on a step without its results; close it, so the model never sees one."""
    history = last.messages[1:]
    if last.status != COMPLETED and last.pending is None and history \
            and history[-1].role == "assistant":
        step = json.loads(history[-1].content)
        # a `once` call with no result (its question abandoned, its run cancelled as it
        # waited): told only that it was cut short, the model would make it again under a
        # new key
        unknown = {o.key for o in last.once if o.ended in UNDECIDED}
        index = last.steps[-1].index if last.steps else 0
        for i, call in enumerate(step.get("calls") or [step]):
            key = call_key(last.run_id, index, i)
            told = note("once_unknown", key=key) if key in unknown else note("tool_interrupted")
            body = {"tool_name": call.get("tool_name", ""), "response": {"error": told}}
            history = [*history, Message(role="observation", content=json.dumps(body))]
    return history


def _check_input(state: RunState, given: Resume) -> None:
    """Refuse a resume that does not fit what the run waits for, before touching the run."""
    pending = state.pending
    answer, approve = (given.of(pending).answer, given.of(pending).approved) if pending \
        else (given.answer, given.approved)
    if state.status not in RESUMABLE:
        raise ConfigError(f"run {state.run_id} has ended ({state.status}); nothing to resume")
    if pending is None:
        if answer is not None or approve is not None or given.items:
            raise ConfigError(f"run {state.run_id} waits for nothing; resume it without an "
                              "answer or a decision")
    elif pending.items and (problem := unfit(pending, given)) is not None:
        raise ConfigError(f"run {state.run_id} waits for {len(pending.items)} items, and "
                          f"{problem}: give each item's answer or decision by its id")
    elif pending.items:
        return
    elif pending.kind == "question" and answer is None:
        raise ConfigError(f"run {state.run_id} waits for an answer to {pending.question!r}")
    elif pending.kind == "approval" and approve is None:
        raise ConfigError(f"run {state.run_id} waits for an approval of {pending.tool}: "
                          "approve or deny it")
    elif pending.kind == "once" and once_answer(answer) is None:
        raise ConfigError(f"run {state.run_id} waits for a person to say what became of a "
                          f"call of {pending.tool} (key {pending.key}): answer happened, "
                          "again or fail")
