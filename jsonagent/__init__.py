"""jsonagent: a model answers every turn with one JSON object; we validate it and run the tool."""

from .agent import Agent
from .config import AgentConfig
from .envelope import Step, parse_reply
from .errors import (ConfigError, JsonAgentError, ModelError, ResponseFormatRejected, RunError,
                     SpecError, ToolError, UserError)
from .journal import read_journal
from .models import Model, ModelReply, Usage
from .result import RunResult, StepRecord
from .specs import ArgError, ToolSpec, load_tools
from .tools import RunContext, Tool, tool
from .toolset import Toolset

__all__ = [
    "Agent", "AgentConfig", "ArgError", "ConfigError", "JsonAgentError", "Model", "ModelError",
    "ModelReply", "ResponseFormatRejected", "RunContext", "RunError", "RunResult", "SpecError",
    "Step", "StepRecord", "Tool", "ToolError", "ToolSpec", "Toolset", "Usage", "UserError",
    "load_tools", "parse_reply", "read_journal", "tool",
]
__version__ = "0.1.0"
