"""Agent: wires a model, a toolset, hooks, a store and a person into runs.

Every front end drives the same iterator (`iter`); `run` drains it. A sync core with a thin
async edge (`aiter`, `arun`).
"""

from __future__ import annotations

from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, AsyncIterator, Awaitable, Callable, Iterator

from .config import AgentConfig
from .deps import RunDeps
from .errors import ConfigError, SpecError
from .hooks import Hooks
from .models import Model, capabilities, resolve_model
from .models.fallback import fallback
from .prompt import prompt_style
from .tools.toolset import Toolset, ToolLike

if TYPE_CHECKING:
    import asyncio

    from .events import Event
    from .result import RunResult
    from .session import Session
    from .state import RunState
    from .store import Store

AskHuman = Callable[[str], "str | None | Awaitable[str | None]"]
Approve = Callable[[str, dict], "bool | None | Awaitable[bool | None]"]


class Agent:
    """A JSON tool-calling agent.

        agent = Agent(model="gpt-4o-mini", tools=[my_tool, "specs.json"], ask_human=input)
        result = agent.run("What is 2**100?")

    `tools=None` means the bundled core_function.json. `ask_human(question)` and
    `approve(tool, args)` may be sync or async; returning None means nobody can answer now,
    and the run pauses with status needs_human until `resume` is called. Runs are stored
    when a `store` is given or a run names a `session`.

    `model` may be a list: the first answers, and the next takes a request over when the first
    fails in a way retrying does not cure (see models/fallback.py; `config.retry` says how).

    `deltas=True` streams every run's replies: `on_event` then also gets the live delta
    events (`events.ThoughtDelta`, `ToolNameKnown`, `ArgsDelta`) as the model writes; `iter`
    and `aiter` take `deltas=` per run.
    """

    def __init__(self, model: Model | str | list[Model | str] | None = None, tools: ToolLike = None, *,
                 ask_human: AskHuman | None = None, approve: Approve | None = None,
                 hooks: list[Any] | None = None, store: Store | str | Path | None = None,
                 max_steps: int | None = None, output_type: type | None = None,
                 config: AgentConfig | None = None, transcript: str | Path | None = None,
                 on_event: Callable[[Any], None] | None = None, deltas: bool = False,
                 sandbox_factory: Callable[[], Any] | None = None,
                 origin: dict[str, Any] | None = None):
        # the defaults need no validating, and validating is what makes pydantic scan every
        # installed package for plugins (~25 ms): the usual Agent() builds no validator
        config = (config or AgentConfig.model_construct()).model_copy()
        models = list(model) if isinstance(model, (list, tuple)) else [model]
        # several models are one (models/fallback.py), and so is one reached over the network:
        # it retries what waiting may cure
        model = fallback([m if m is not None and not isinstance(m, str)
                          else resolve_model(m, reply_tokens=config.reply_tokens) for m in models],
                         config.retry)
        caps = capabilities(model)
        if max_steps is not None:
            config.max_steps = max_steps
        if config.observation_role is None:
            config = config.model_copy(update={"observation_role": caps.observation_role})
        if config.tool_calls is None:
            config = config.model_copy(update={"tool_calls": caps.tool_calls})
        if config.check_answers is None:  # a script's replies cannot answer a nudge
            config = config.model_copy(update={"check_answers": not caps.writes_ahead})
        invalid = config.retry.fallback_on_invalid
        if invalid is not None and invalid > config.max_reasks:  # would never hand over
            raise ConfigError(f"fallback on {invalid} invalid replies would never happen: a "
                              f"step fails after {config.max_reasks} re-asks (max_reasks), so "
                              f"give at most {config.max_reasks}")
        if config.limits.cost is not None:  # else never reached: refused now, not found out
            from .pricing import known_or_refused

            known_or_refused(model, config.limits.cost)
        toolset = Toolset.build(tools, output_type=output_type)
        missing = [t.spec.origin + f" ({t.name})" for t in toolset if t.fn is None]
        if missing:
            toolset.close()
            raise SpecError(f"no implementation for {', '.join(missing)}: add \"handler\": "
                            "\"module:function\" to the spec, or pass a @tool function")
        style = prompt_style(config.prompt_style, config.parallel_calls)
        self.deps = RunDeps(
            model=model, caps=caps, toolset=toolset, config=config, style=style,
            system_prompt=style.system(toolset), hooks=Hooks([*caps.hooks, *(hooks or [])]),
            output_type=output_type, ask_human=ask_human, approve=approve, on_event=on_event,
            deltas=deltas,
            transcript=transcript, origin=origin or {},
            sandbox_factory=sandbox_factory or partial(_default_sandbox, config))
        """What every run needs, frozen (see deps.py)."""
        self._store, self._own_store = store, False
        self.last_state: RunState | None = None

    # what a run needs, to read; the callbacks may be swapped between runs
    model = property(lambda self: self.deps.model)
    toolset = property(lambda self: self.deps.toolset)
    config = property(lambda self: self.deps.config)
    hooks = property(lambda self: self.deps.hooks)
    system_prompt = property(lambda self: self.deps.system_prompt)
    output_type = property(lambda self: self.deps.output_type)

    @property
    def on_event(self) -> Callable[[Any], None] | None:
        return self.deps.on_event

    @on_event.setter
    def on_event(self, fn: Callable[[Any], None] | None) -> None:
        self.deps = replace(self.deps, on_event=fn)

    @property
    def transcript(self) -> str | Path | None:
        return self.deps.transcript

    @transcript.setter
    def transcript(self, path: str | Path | None) -> None:
        self.deps = replace(self.deps, transcript=path)

    def as_tool(self, name: str, description: str | None = None, input: type | None = None):
        """This agent as a tool of another: its arguments (`{"task": string}`, or the fields of
        the pydantic model `input`) become this agent's question, and its answer (typed, with
        an `output_type`) the observation. Each call is a sub-run of the calling run: stored
        with it, paused and resumed with it, within its step budget and depth limit."""
        from .delegate import agent_tool

        return agent_tool(self, name, description, input)

    def close(self) -> None:
        """Shut down the tool sources the agent opened (MCP server processes), and the store
        it opened itself."""
        self.deps.toolset.close()
        if self._own_store and self._store is not None:
            self._store.close()
            self._store, self._own_store = None, False

    def __enter__(self) -> "Agent":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- runs ---------------------------------------------------------------------------------

    def run(self, question: str, *, session: str | None = None) -> RunResult:
        """Run one task to its end or its pause, and return what became of it."""
        from .bridge import drain

        return drain(self.iter(question, session=session))

    def iter(self, question: str, *, session: str | None = None,
             deltas: bool | None = None) -> Iterator[Event]:
        """The run as typed events, ending with a RunEnd that carries the RunResult. With
        `deltas=True`, the live delta events of each reply come among them (never stored)."""
        s = self.session(session)
        try:
            yield from s.iter(question, deltas=deltas)
        finally:
            self.last_state = s.last
            s.close()

    def cancel(self, run_id: str | None = None) -> bool:
        """Cancel a run of this agent in progress (every one when `run_id` is None), from any
        thread. It ends `interrupted` within about a second, whatever its tool is doing;
        False when no such run is in progress here."""
        running = self.deps.running
        tokens = list(running.values()) if run_id is None else \
            [t for t in [running.get(run_id)] if t is not None]
        for token in tokens:
            token.cancel()
        return bool(tokens)

    def resume(self, run: str | RunState, *, answer: str | None = None,
               approve: bool | None = None, reason: str | None = None,
               items: dict[str, dict] | None = None) -> RunResult:
        """Go on with a paused (or interrupted) run: `answer` a question, or `approve` a call
        (False denies it, with an optional `reason` the model reads). A run that waits for
        several items (`pending.items`: the calls of a step of several) takes each one's
        `{"answer"|"approve", "reason"}` in `items`, by its id; the others apply to the rest."""
        from .bridge import drain

        return drain(self.iter_resume(run, answer=answer, approve=approve, reason=reason,
                                      items=items))

    def iter_resume(self, run: str | RunState, *, answer: str | None = None,
                    approve: bool | None = None, reason: str | None = None,
                    deltas: bool | None = None,
                    items: dict[str, dict] | None = None) -> Iterator[Event]:
        if isinstance(run, str):
            store = self.store_or_default()
            session_id = store.load_run(run).session_id
        else:
            store, session_id = self.store, run.session_id
        s = self._open(session_id, store)
        try:
            yield from s.iter_resume(answer, approve, reason, run, deltas=deltas, items=items)
        finally:
            self.last_state = s.last
            s.close()

    async def arun(self, question: str, *, session: str | None = None) -> RunResult:
        """`run`, awaited; cancelling the task cancels the run."""
        end = None
        async for end in self.aiter(question, session=session):
            pass
        return end.result

    async def aiter(self, question: str, *, session: str | None = None,
                    deltas: bool | None = None) -> AsyncIterator[Event]:
        """`iter` for asyncio: the run goes on in a thread of its own; async callbacks are
        awaited on your event loop. Cancelling the task cancels the run, whatever its tool
        is doing, and returns once the run's thread has ended: nothing runs on."""
        import asyncio
        import threading

        loop = asyncio.get_running_loop()
        queue: asyncio.Queue = asyncio.Queue()
        done = object()
        s = self.session(session, loop=loop)

        def work() -> None:
            try:
                for event in s.iter(question, deltas=deltas):
                    loop.call_soon_threadsafe(queue.put_nowait, event)
            except BaseException as exc:  # handed to the awaiting side
                loop.call_soon_threadsafe(queue.put_nowait, exc)
            loop.call_soon_threadsafe(queue.put_nowait, done)

        thread = threading.Thread(target=work, name="jsonagent-run", daemon=True)
        thread.start()
        try:
            while (item := await queue.get()) is not done:
                if isinstance(item, BaseException):
                    raise item
                yield item
        except BaseException:  # cancelled, or the caller stopped iterating
            s.cancel()
            while thread.is_alive():
                await asyncio.sleep(0.01)
            raise
        finally:
            self.last_state = s.last
            s.close()

    # -- sessions and state -------------------------------------------------------------------

    def session(self, name: str | None = None, *,
                loop: asyncio.AbstractEventLoop | None = None) -> Session:
        """A conversation: call `.run(text)` as often as you like. A named session is stored
        (in the agent's store, or `$JSONAGENT_HOME/jsonagent.db`) and goes on across processes."""
        store = self.store_or_default() if name is not None else self.store
        return self._open(name, store, loop)

    def _open(self, name: str | None, store: Store | None,
              loop: asyncio.AbstractEventLoop | None = None) -> Session:
        # the run's machinery (session, loop, events, journal) loads with the first run, not Agent()
        from .session import Session

        return Session(self.deps, name, store, loop)

    @property
    def store(self) -> Store | None:
        if self._store is not None and not hasattr(self._store, "record"):
            from .store import open_store

            self._store, self._own_store = open_store(self._store), True
        return self._store

    def store_or_default(self) -> Store:
        if self.store is None:
            from .store import open_store

            self._store, self._own_store = open_store(), True
        return self._store

    def save_state(self) -> str:
        """The last run's state as JSON, to keep in a store of your own."""
        if self.last_state is None:
            raise ConfigError("no run to save yet")
        return self.last_state.model_dump_json()

    @staticmethod
    def load_state(text: str) -> RunState:
        """A state saved by `save_state`; pass it to `resume`."""
        from .state import RunState

        return RunState.model_validate_json(text)


def _default_sandbox(config: AgentConfig):
    from .bundled import sandbox
    Sandbox, IsolationUnavailable = sandbox.Sandbox, sandbox.IsolationUnavailable

    try:
        return Sandbox(timeout=config.sandbox_timeout, memory_mb=config.sandbox_memory_mb,
                       output_limit=config.sandbox_output_bytes,
                       require_isolation=config.require_isolation)
    except IsolationUnavailable as exc:
        raise ConfigError(f"sandbox refused to start: {exc}") from None
