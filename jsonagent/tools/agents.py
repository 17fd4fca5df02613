"""Spec handlers that run an agent: `{"agent": "module:agent_object"}` (an Agent in this
process, by its `as_tool`) and `{"a2a": URL}` (a remote agent, see a2a.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from ..errors import SpecError
from .a2a import A2AAgent
from .handlers import import_ref
from .specs import ToolSpec

KINDS = ("agent", "a2a")


def is_agent_handler(handler: Any) -> bool:
    return isinstance(handler, dict) and any(k in handler for k in KINDS)


def bind_agent(spec: ToolSpec, base: Path | None = None) -> Callable[..., Any]:
    handler = spec.handler
    if "a2a" in handler:
        remote = A2AAgent(handler["a2a"], name=spec.name, headers=handler.get("headers"),
                          timeout=handler.get("timeout"))
        [tool] = remote.open()
        return tool.fn
    ref = handler["agent"]
    obj = import_ref(spec, ref, base)
    if not hasattr(obj, "as_tool"):  # the tools layer does not import the agent's
        raise SpecError(f"{spec.origin} ({spec.name}): handler {ref!r} is not an Agent")
    return obj.as_tool(spec.name, spec.description).fn
