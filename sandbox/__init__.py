"""A kernel-isolated, stateful Python interpreter for code written by a language model."""

from .errors import (
    IsolationUnavailable,
    IsolationWarning,
    SandboxClosed,
    SandboxError,
    SandboxStartError,
)
from .limits import Limits
from .result import ExecResult, IsolationReport
from .supervisor import Sandbox

__all__ = [
    "ExecResult",
    "IsolationReport",
    "IsolationUnavailable",
    "IsolationWarning",
    "Limits",
    "Sandbox",
    "SandboxClosed",
    "SandboxError",
    "SandboxStartError",
]
