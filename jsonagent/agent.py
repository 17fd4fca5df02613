"""Agent: wires a model, a toolset, hooks, a store and a person into runs.

Every front end drives the same iterator (`iter`); `run` drains it. A sync core with a thin
async edge (`aiter`, `arun`).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, AsyncIterator, Awaitable, Callable, Iterator

from .cancel import CancelToken, on_caller
from .config import AgentConfig
from .errors import ConfigError, SpecError
from .hooks import Hooks
from .journal import Journal
from .models import Model, resolve_model
from .prompt import prompt_style
from .result import RunResult
from .session import Session, bridge, drain
from .state import RunState
from .tools.tool import RunContext
from .tools.toolset import Toolset, ToolLike

if TYPE_CHECKING:
    import asyncio

    from .events import _Event
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
    """

    def __init__(self, model: Model | str | None = None, tools: ToolLike = None, *,
                 ask_human: AskHuman | None = None, approve: Approve | None = None,
                 hooks: list[Any] | None = None, store: Store | str | Path | None = None,
                 max_steps: int | None = None, output_type: type | None = None,
                 config: AgentConfig | None = None, transcript: str | Path | None = None,
                 on_event: Callable[[Any], None] | None = None,
                 sandbox_factory: Callable[[], Any] | None = None,
                 origin: dict[str, Any] | None = None):
        self.model = model if model is not None and not isinstance(model, str) \
            else resolve_model(model)
        self.config = (config or AgentConfig()).model_copy()
        if max_steps is not None:
            self.config.max_steps = max_steps
        if self.config.observation_role is None:
            self.config.observation_role = getattr(self.model, "observation_role", "user")
        self.toolset = Toolset.build(tools, output_type=output_type)
        missing = [t.spec.origin + f" ({t.name})" for t in self.toolset if t.fn is None]
        if missing:
            self.toolset.close()
            raise SpecError(f"no implementation for {', '.join(missing)}: add \"handler\": "
                            "\"module:function\" to the spec, or pass a @tool function")
        self.output_type = output_type
        self.ask_human, self.approve = ask_human, approve
        self.hooks = Hooks(hooks)
        self._store = store
        self.transcript = transcript
        self.on_event = on_event
        self.sandbox_factory = sandbox_factory or self._default_sandbox
        self.origin = origin or {}
        """How a front end built this agent (the CLI's options), recorded with each run."""
        self.style = prompt_style(self.config.prompt_style)
        self.system_prompt = self.style.system(self.toolset)
        self.busy_wait_s = 5.0
        """How long a run waits for a busy session before giving up."""
        self.last_state: RunState | None = None
        self.running: dict[str, CancelToken] = {}
        """The cancel token of each of this agent's runs in progress, by run id."""

    def close(self) -> None:
        """Shut down the tool sources the agent opened (MCP server processes)."""
        self.toolset.close()

    def __enter__(self) -> "Agent":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- runs ---------------------------------------------------------------------------------

    def run(self, question: str, *, session: str | None = None) -> RunResult:
        return drain(self.iter(question, session=session))

    def iter(self, question: str, *, session: str | None = None) -> Iterator[_Event]:
        """The run as typed events, ending with a RunEnd that carries the RunResult."""
        s = self.session(session)
        try:
            yield from s.iter(question)
        finally:
            self.last_state = s.last
            s.close()

    def cancel(self, run_id: str | None = None) -> bool:
        """Cancel a run of this agent in progress (every one when `run_id` is None), from any
        thread. It ends `interrupted` within about a second, whatever its tool is doing;
        False when no such run is in progress here."""
        tokens = list(self.running.values()) if run_id is None else \
            [t for t in [self.running.get(run_id)] if t is not None]
        for token in tokens:
            token.cancel()
        return bool(tokens)

    def resume(self, run: str | RunState, *, answer: str | None = None,
               approve: bool | None = None, reason: str | None = None) -> RunResult:
        """Go on with a paused (or interrupted) run: `answer` a question, or `approve` a call
        (False denies it, with an optional `reason` the model reads)."""
        return drain(self.iter_resume(run, answer=answer, approve=approve, reason=reason))

    def iter_resume(self, run: str | RunState, *, answer: str | None = None,
                    approve: bool | None = None, reason: str | None = None) -> Iterator[_Event]:
        if isinstance(run, RunState):
            store, session_id = self.store, run.session_id
        else:
            store = self.store_or_default()
            session_id = store.load_run(run).session_id
        s = Session(self, session_id, store)
        try:
            yield from s.iter_resume(answer, approve, reason, run)
        finally:
            self.last_state = s.last
            s.close()

    async def arun(self, question: str, *, session: str | None = None) -> RunResult:
        end = None
        async for end in self.aiter(question, session=session):
            pass
        return end.result

    async def aiter(self, question: str, *, session: str | None = None) -> AsyncIterator[_Event]:
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
                for event in s.iter(question):
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
        return Session(self, name, store, loop)

    @property
    def store(self) -> Store | None:
        if self._store is not None and not hasattr(self._store, "record"):
            from .store import open_store

            self._store = open_store(self._store)
        return self._store

    def store_or_default(self) -> Store:
        if self.store is None:
            from .store import open_store

            self._store = open_store()
        return self._store

    def save_state(self) -> str:
        """The last run's state as JSON, to keep in a store of your own."""
        if self.last_state is None:
            raise ConfigError("no run to save yet")
        return self.last_state.model_dump_json()

    @staticmethod
    def load_state(text: str) -> RunState:
        """A state saved by `save_state`; pass it to `resume`."""
        return RunState.model_validate_json(text)

    # -- wiring -------------------------------------------------------------------------------

    def _context(self, loop: asyncio.AbstractEventLoop | None = None) -> RunContext:
        ask = bridge(self.ask_human, loop)
        return RunContext(ask_human=(lambda q: on_caller(ask, q)) if ask is not None else None,
                          sandbox_factory=self.sandbox_factory)

    def _journal(self) -> Journal | None:
        return Journal(self.transcript) if self.transcript else None

    def _default_sandbox(self):
        from sandbox import Sandbox
        from sandbox.errors import IsolationUnavailable

        try:
            return Sandbox(timeout=self.config.sandbox_timeout,
                           require_isolation=self.config.require_isolation)
        except IsolationUnavailable as exc:
            raise ConfigError(f"sandbox refused to start: {exc}") from None
