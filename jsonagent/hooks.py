"""Hooks: code of yours that runs at fixed points of every run.

A hook is any object with some of these methods; each receives the `RunState`:

    before_model(state)                      before each model request
    after_model(state, reply)                after each reply (a ModelReply), valid or not
    before_tool(state, call) -> ToolCall | Veto | None
                                             replace the call, or refuse it with a message
                                             that the model reads as the observation
    after_tool(state, call, observation) -> observation | None
                                             rewrite what the model is told
    on_end(state, result)                    when the run stops (a pause included)

A hook that raises ends the run `failed`, with a one-line error naming the hook.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .errors import HookError


@dataclass(frozen=True)
class ToolCall:
    tool: str
    args: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Veto:
    """Returned by `before_tool`: the call does not run, and the model reads `message`."""

    message: str


class Hooks:
    def __init__(self, hooks: list[Any] | None):
        self.hooks = list(hooks or [])

    def call(self, method: str, *args: Any) -> list[Any]:
        """Every hook's return value, in order; a hook's exception becomes a HookError."""
        out = []
        for hook in self.hooks:
            fn = getattr(hook, method, None)
            if fn is None:
                continue
            try:
                out.append(fn(*args))
            except Exception as exc:
                name = getattr(hook, "__name__", type(hook).__name__)
                raise HookError(f"hook {name}.{method} failed: {type(exc).__name__}: {exc}") from exc
        return out

    def before_tool(self, state: Any, call: ToolCall) -> ToolCall | Veto:
        for hook in self.hooks:
            if not hasattr(hook, "before_tool"):
                continue
            [out] = Hooks([hook]).call("before_tool", state, call)
            if isinstance(out, Veto):
                return out
            if isinstance(out, ToolCall):
                call = out
            elif out is not None:
                raise HookError(f"hook {type(hook).__name__}.before_tool returned "
                                f"{type(out).__name__}; expected a ToolCall, a Veto or None")
        return call

    def after_tool(self, state: Any, call: ToolCall, observation: Any) -> Any:
        for hook in self.hooks:
            if hasattr(hook, "after_tool"):
                [out] = Hooks([hook]).call("after_tool", state, call, observation)
                if out is not None:
                    observation = out
        return observation
