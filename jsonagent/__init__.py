"""jsonagent: a model answers every turn with one JSON object; we validate it and run the tool.

Names load on first use, so `import jsonagent` costs almost nothing.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_EXPORTS = {
    "A2AAgent": "tools.a2a",
    "Agent": "agent",
    "AgentConfig": "config",
    "CancelToken": "cancel",
    "Cancelled": "errors",
    "ArgError": "tools.specs",
    "ConfigError": "errors",
    "JsonAgentError": "errors",
    "LimitReached": "errors",
    "Model": "models",
    "Pending": "state",
    "ModelError": "errors",
    "ModelReply": "models",
    "ResponseFormatRejected": "errors",
    "RunContext": "tools.tool",
    "RunError": "errors",
    "RunResult": "result",
    "RunState": "state",
    "Session": "session",
    "SessionBusy": "errors",
    "SpecError": "errors",
    "Step": "reply",
    "StepRecord": "result",
    "Store": "store",
    "Tool": "tools.tool",
    "ToolCall": "hooks",
    "ToolError": "errors",
    "ToolSpec": "tools.specs",
    "Toolset": "tools.toolset",
    "Usage": "models",
    "UsageLimits": "config",
    "UserError": "errors",
    "Veto": "hooks",
    "core_tools": "tools.toolset",
    "load_tools": "tools.specs",
    "open_store": "store",
    "parse_reply": "envelope",
    "read_journal": "journal",
    "tool": "tools.tool",
}
__all__ = list(_EXPORTS)
__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        value = getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'jsonagent' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


if TYPE_CHECKING:  # for type checkers and IDEs; never executed
    from .agent import Agent
    from .tools.a2a import A2AAgent
    from .cancel import CancelToken
    from .config import AgentConfig, UsageLimits
    from .envelope import parse_reply
    from .errors import (Cancelled, ConfigError, JsonAgentError, LimitReached, ModelError,
                         ResponseFormatRejected, RunError, SessionBusy, SpecError, ToolError,
                         UserError)
    from .hooks import ToolCall, Veto
    from .session import Session
    from .state import Pending, RunState
    from .store import Store, open_store
    from .journal import read_journal
    from .models import Model, ModelReply, Usage
    from .reply import Step
    from .result import RunResult, StepRecord
    from .tools.specs import ArgError, ToolSpec, load_tools
    from .tools.tool import RunContext, Tool, tool
    from .tools.toolset import Toolset, core_tools
