"""A kernel-isolated, stateful Python interpreter for code written by a language model."""

from sandbox.errors import (
    IsolationUnavailable,
    IsolationWarning,
    SandboxClosed,
    SandboxError,
    SandboxStartError,
)
from sandbox.limits import Limits
from sandbox.result import ExecResult, IsolationReport
from sandbox.supervisor import Sandbox

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
