"""Tools: a spec plus the Python that runs it, and the @tool decorator that writes the spec."""

from __future__ import annotations

import functools
import inspect
import re
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, get_type_hints

from ..calls import UNKNOWN, Effects, reset_current, set_current
from ..cancel import CancelToken, run_coroutine
from .specs import ToolSpec


@dataclass
class RunContext:
    """What a tool may need from the run it is part of. Declare a parameter typed
    `RunContext` to receive it; it never appears in the tool's schema."""

    ask_human: Callable[[str], str] | None = None
    """Asks the person a question and returns the answer; None when nobody can answer."""
    sandbox_factory: Callable[[], Any] | None = None
    """Opens the run's code sandbox; the loop owns it and closes it at the end."""
    step: int = 0
    """1-based index of the step being run."""
    state: dict[str, Any] = field(default_factory=dict)
    """Scratch space shared by the tools of one run (or one chat session)."""
    cancel: CancelToken = field(default_factory=CancelToken)
    """The current run's cancel token: register how to stop slow work with
    `cancel.on_cancel(stop)`, or poll `cancelled`."""
    # What a tool that starts a sub-run (an agent used as a tool) needs of its parent run.
    run: Any = None
    """The run's `RunState` (its id, depth, budget and usage)."""
    store: Any = None
    """The run's `Store`, where its sub-runs are kept too; None when runs are not stored."""
    approve: Callable[[str, dict], Any] | None = None
    """Asks the person to approve a call; None when nobody can answer now."""
    emit: Callable[[Any], None] | None = None
    """Hands a sub-run's event to this run's records (the display, the transcript)."""
    handed_down: Any = None
    """`(pending, resume)`: what a sub-run of this run's last step waits for (its `path`
    names it) and the person's input (a `loop.Resume`), while that step's tool is called
    again to hand it down."""
    call_id: str | None = None
    """The key of the tool call being run (calls.py): the same when the step is done again
    after a crash, a takeover or a resume, different for every other call. Send it on to
    an API that deduplicates (a payment's `Idempotency-Key`)."""

    @property
    def idempotency_key(self) -> str | None:
        """`call_id`, under the name payment APIs give it."""
        return self.call_id

    @property
    def cancelled(self) -> bool:
        """The run was cancelled: a long tool should stop and return."""
        return self.cancel.cancelled

    def sandbox(self):
        # two code calls of one step (side by side) share one kernel, started once
        with self.state.setdefault("sandbox_lock", threading.Lock()):
            if "sandbox" not in self.state:
                if self.sandbox_factory is None:
                    from ..errors import ToolError

                    raise ToolError("no code sandbox is available in this run")
                self.state["sandbox"] = self.sandbox_factory()
        return self.state["sandbox"]

    def close(self) -> None:
        sb = self.state.pop("sandbox", None)
        if sb is not None:
            sb.close()


@dataclass
class Tool:
    spec: ToolSpec
    fn: Callable[..., Any] | None
    """Called with the validated arguments as keywords (plus `ctx` if it asks for one)."""
    ctx_param: str | None = None
    """Name of the parameter that receives the RunContext, if any."""
    final: bool = False
    """Calling this tool ends the run; its arguments are the answer."""

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def effects(self) -> str:
        """What running a call twice does: the spec's `effects`, else what the handler
        declares (the built-ins, HTTP GET and agents are idempotent), else unknown."""
        return self.spec.effects or getattr(self.fn, "effects", None) or UNKNOWN

    @property
    def stops_on_cancel(self) -> bool:
        """Its function stops by itself when the run is cancelled (our handlers do): it can
        run in the loop's thread. Any other waits in a helper thread (see cancel.py)."""
        return bool(getattr(self.fn, "stops_on_cancel", False))

    @functools.cached_property
    def is_async(self) -> bool:
        """Its function is a coroutine function: in a step of several calls, it runs on the
        step's event loop (cancel.py's `each`), not in a thread of its own."""
        return inspect.iscoroutinefunction(self.fn)

    def invoke(self, args: dict[str, Any], ctx: RunContext) -> Any:
        kwargs = dict(args)
        if self.ctx_param:
            kwargs[self.ctx_param] = ctx
        # in the call's own context (its thread's copy): a handler with no RunContext (a
        # command, an HTTP request, an MCP call) reads the key there
        token = set_current(ctx.call_id)
        try:
            if self.is_async:  # called alone: run to its end here
                return run_coroutine(self.fn(**kwargs))
            return self.fn(**kwargs)
        finally:
            reset_current(token)

    async def ainvoke(self, args: dict[str, Any], ctx: RunContext) -> Any:
        """`invoke` for an async tool, awaited on the caller's event loop."""
        kwargs = dict(args)
        if self.ctx_param:
            kwargs[self.ctx_param] = ctx
        token = set_current(ctx.call_id)
        try:
            return await self.fn(**kwargs)
        finally:
            reset_current(token)

    def __call__(self, *args, **kwargs):
        """A decorated function stays callable as plain Python."""
        return self.fn(*args, **kwargs)


def tool(fn: Callable | None = None, *, name: str | None = None,
         description: str | None = None, confirm: bool = False, repeatable: bool = False,
         max_calls: int | None = None, effects: Effects | None = None) -> Any:
    """Turn a typed function into a Tool; the schema comes from pydantic, the text from the docstring.

        @tool
        def add(a: int, b: int = 0) -> int:
            '''Add two numbers.

            Args:
                a: the first number
                b: the second one
            '''

    `confirm=True` makes every call wait for a person's approval; `repeatable=True` marks a
    tool that is called again on purpose (polling), which stall detection then leaves alone;
    `max_calls=N` allows N calls a run, and refuses the next with an observation saying so;
    `effects` says what running a call twice does ("idempotent", "once" or the default
    "unknown"), which decides a call cut short by a crash or a takeover (calls.py).
    """
    def wrap(f: Callable) -> Tool:
        return _make_tool(f, name=name, description=description, confirm=confirm,
                          repeatable=repeatable, max_calls=max_calls, effects=effects)

    return wrap(fn) if fn is not None else wrap


@functools.lru_cache(maxsize=512)
def context_param(fn: Callable) -> str | None:
    """The parameter annotated RunContext, which the run fills in rather than the model."""
    if not inspect.isroutine(fn) and not hasattr(fn, "__wrapped__"):
        fn = type(fn).__call__  # a callable object (an agent or a remote agent as a tool)
    try:
        hints = get_type_hints(fn)
    except Exception:  # unresolvable annotations: fall back to their text
        hints = {n: p.annotation for n, p in inspect.signature(fn).parameters.items()}
    return next((n for n, h in hints.items() if h is RunContext or h == "RunContext"), None)


def _make_tool(f: Callable, name: str | None, description: str | None, confirm: bool,
               repeatable: bool = False, max_calls: int | None = None,
               effects: Effects | None = None) -> Tool:
    from pydantic import Field, create_model

    hints = get_type_hints(f, include_extras=True)
    doc_summary, doc_params = _parse_docstring(inspect.getdoc(f) or "")
    fields: dict[str, Any] = {}
    ctx_param = context_param(f)
    for pname, param in inspect.signature(f).parameters.items():
        annotation = hints.get(pname, Any)
        if pname == ctx_param or param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        default = ... if param.default is param.empty else param.default
        fields[pname] = (annotation, Field(default, description=doc_params.get(pname)))
    args_model = create_model(f"{f.__name__}_args", **fields)
    schema = args_model.model_json_schema()
    schema.pop("title", None)
    for prop in schema.get("properties", {}).values():
        prop.pop("title", None)
    spec = ToolSpec.from_dict(
        {"name": name or f.__name__, "description": description or doc_summary,
         "parameters": schema, "confirm": confirm, "repeatable": repeatable,
         **({} if max_calls is None else {"max_calls": max_calls}),
         **({} if effects is None else {"effects": effects})},
        origin=f"{f.__module__}.{f.__qualname__}",
    )
    call = _converted(f, hints) if fields else f
    return Tool(spec=spec, fn=call, ctx_param=ctx_param)


def _converted(f: Callable, hints: dict[str, Any]) -> Callable:
    """`f` called with its arguments as pydantic's validate_call turns them into the annotated
    Python types (models, dates...), but called from Python, not from within pydantic: a
    cancelled run's tool may go on in a daemon thread until the process exits, and a thread
    that Python ends at exit inside pydantic's native (Rust) frames aborts the process."""
    from pydantic import validate_call

    sig = inspect.signature(f)
    sig = sig.replace(parameters=[p.replace(annotation=hints.get(n, p.annotation))
                                  for n, p in sig.parameters.items()],
                      return_annotation=inspect.Signature.empty)

    def arguments(*args: Any, **kwargs: Any) -> tuple[tuple, dict]:
        return args, kwargs

    arguments.__signature__ = sig  # type: ignore[attr-defined]
    arguments.__annotations__ = {n: h for n, h in hints.items() if n != "return"}
    arguments.__name__, arguments.__qualname__ = f.__name__, f.__qualname__  # errors name f
    convert = validate_call(arguments)

    if inspect.iscoroutinefunction(f):
        @functools.wraps(f)
        async def call_async(*args: Any, **kwargs: Any) -> Any:
            args, kwargs = convert(*args, **kwargs)
            return await f(*args, **kwargs)

        return call_async

    @functools.wraps(f)
    def call(*args: Any, **kwargs: Any) -> Any:
        args, kwargs = convert(*args, **kwargs)
        return f(*args, **kwargs)

    return call


_SECTION = re.compile(r"^(Args|Arguments|Parameters|Params):\s*$", re.I)
_GOOGLE_ARG = re.compile(r"^\s+(\*{0,2}\w+)(?:\s*\([^)]*\))?:\s*(.*)$")
_SPHINX_ARG = re.compile(r"^\s*:param\s+(?:[^:]*\s)?(\w+):\s*(.*)$")


def _parse_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """Summary paragraph plus per-parameter text, from Google- or Sphinx-style docstrings."""
    lines = doc.splitlines()
    summary: list[str] = []
    for line in lines:
        if not line.strip() or _SECTION.match(line) or _SPHINX_ARG.match(line):
            break
        summary.append(line.strip())
    params: dict[str, str] = {}
    in_args, current = False, None
    for line in lines:
        if m := _SPHINX_ARG.match(line):
            current = m.group(1)
            params[current] = m.group(2).strip()
        elif _SECTION.match(line):
            in_args, current = True, None
        elif in_args and (m := _GOOGLE_ARG.match(line)) and line.startswith(("    ", "\t")) \
                and not line.startswith(("        ", "\t\t")):
            current = m.group(1).lstrip("*")
            params[current] = m.group(2).strip()
        elif in_args and line.strip() and not line.startswith((" ", "\t")):
            in_args, current = False, None
        elif current and line.strip():
            params[current] = (params[current] + " " + line.strip()).strip()
        elif not line.strip():
            current = None
    return " ".join(summary), params
