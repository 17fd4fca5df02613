"""Agent: wires a model, a toolset, a human and a sandbox into sessions. Sync core, thin async edge."""

from __future__ import annotations

import inspect
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Iterator

from .tools.core import NeedsHuman
from .config import AgentConfig
from .errors import ConfigError, SpecError
from .journal import Journal
from .loop import Session
from .models import Model, resolve_model
from .prompt import system_prompt
from .result import RunResult
from .tools.tool import RunContext
from .tools.toolset import Toolset, ToolLike

if TYPE_CHECKING:
    import asyncio

AskHuman = Callable[[str], "str | None | Awaitable[str | None]"]


class Agent:
    """A JSON tool-calling agent.

        agent = Agent(model="gpt-4o-mini", tools=[my_tool, "specs.json"], ask_human=input)
        result = agent.run("What is 2**100?")

    `tools=None` means the bundled core_function.json. An `ask_human` callback may be
    sync or async; returning None means nobody can answer, and the run stops with
    status needs_human.
    """

    def __init__(self, model: Model | str | None = None, tools: ToolLike = None, *,
                 ask_human: AskHuman | None = None, max_steps: int | None = None,
                 output_type: type | None = None, config: AgentConfig | None = None,
                 transcript: str | Path | None = None,
                 on_event: Callable[[Any], None] | None = None,
                 sandbox_factory: Callable[[], Any] | None = None):
        self.model = model if model is not None and not isinstance(model, str) \
            else resolve_model(model)
        self.config = (config or AgentConfig()).model_copy()
        if max_steps is not None:
            self.config.max_steps = max_steps
        self.toolset = Toolset.build(tools, output_type=output_type)
        missing = [t.spec.origin + f" ({t.name})" for t in self.toolset if t.fn is None]
        if missing:
            self.toolset.close()
            raise SpecError(f"no implementation for {', '.join(missing)}: add \"handler\": "
                            "\"module:function\" to the spec, or pass a @tool function")
        self.output_type = output_type
        self.ask_human = ask_human
        self.transcript = transcript
        self.on_event = on_event
        self.sandbox_factory = sandbox_factory or self._default_sandbox
        self.system_prompt = system_prompt(self.toolset)

    def close(self) -> None:
        """Shut down the tool sources the agent opened (MCP server processes)."""
        self.toolset.close()

    def __enter__(self) -> "Agent":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def run(self, question: str) -> RunResult:
        with self.session() as session:
            return session.run(question)

    async def arun(self, question: str) -> RunResult:
        import asyncio

        loop = asyncio.get_running_loop()
        with self.session(loop) as session:
            future = loop.run_in_executor(None, session.run, question)
            try:
                return await asyncio.shield(future)
            except asyncio.CancelledError:
                session.cancel.set()  # the worker stops at the next step boundary
                await asyncio.wait([future])
                raise

    @contextmanager
    def session(self, loop: asyncio.AbstractEventLoop | None = None) -> Iterator[Session]:
        """A multi-turn conversation: call `.run(text)` as often as you like."""
        journal = Journal(self.transcript) if self.transcript else None
        sinks = [s for s in (journal.write if journal else None, self.on_event) if s]
        ctx = RunContext(ask_human=_bridge(self.ask_human, loop),
                         sandbox_factory=self.sandbox_factory)
        try:
            yield Session(self.model, self.toolset, self.system_prompt, self.config, ctx,
                          sinks, self.output_type)
        finally:
            ctx.close()
            if journal:
                journal.close()

    def _default_sandbox(self):
        from sandbox import Sandbox
        from sandbox.errors import IsolationUnavailable

        try:
            return Sandbox(timeout=self.config.sandbox_timeout,
                           require_isolation=self.config.require_isolation)
        except IsolationUnavailable as exc:
            raise ConfigError(f"sandbox refused to start: {exc}") from None


def _bridge(ask: AskHuman | None, loop: asyncio.AbstractEventLoop | None):
    """A plain function the sync loop can call, whatever kind of callback the user gave."""
    if ask is None:
        return None

    def call(question: str) -> str:
        answer = ask(question)
        if inspect.isawaitable(answer):
            answer = _wait(answer, loop)
        if answer is None:
            raise NeedsHuman(question)
        return str(answer)

    return call


def _wait(awaitable: Awaitable, loop: asyncio.AbstractEventLoop | None) -> Any:
    import asyncio
    import concurrent.futures

    async def run():
        return await awaitable

    if loop is not None:  # arun: answer on the caller's own event loop
        return asyncio.run_coroutine_threadsafe(run(), loop).result()
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(run())
    with concurrent.futures.ThreadPoolExecutor(1) as pool:  # sync run() inside a running loop
        return pool.submit(asyncio.run, run()).result()
