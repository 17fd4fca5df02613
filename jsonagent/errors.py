"""Every exception jsonagent raises on purpose.

    JsonAgentError
    ├── UserError                 the developer's mistake: fix the code or config and rerun
    │   ├── SpecError             a tool spec is malformed (names file, index, tool, pointer)
    │   ├── ConfigError           a bad flag, missing key, unknown model, unreadable file
    │   │   └── Unknown           no such run (HTTP 404)
    │   ├── BatchError            a batch cannot start: a bad task or results file, no Ray
    │   ├── EvalError             an eval cannot start: a bad dataset (names file, line, field)
    │   └── Unreadable            a spec file `tools lint` cannot read or parse (exit 2)
    └── RunError                  something failed while a run was going
        ├── ModelError            the model endpoint failed after its retries
        │   ├── ResponseFormatRejected   the endpoint refused our response_format (4xx)
        │   └── ToolCallsRejected        the endpoint refused the native tool-call form (4xx)
        ├── ToolError             raised by a tool to send a clean message back to the model
        ├── HookError             a hook raised: the run ends failed, naming the hook
        ├── SessionBusy           the session has a run going, queued or waiting for a person
        └── Conflict              the run is not in a state that allows this (HTTP 409)

    Cancelled (a BaseException, like KeyboardInterrupt: no `except Exception` swallows it)
                                  the run was cancelled while it waited (cancel.py)

Invalid replies are not exceptions: `envelope.parse_reply` returns a `ReplyProblem`,
whose text is what the model reads on the re-ask. The sandbox package has its own tree
(`sandbox.errors`); the agent turns a sandbox that refuses to start into a ConfigError.
"""

from __future__ import annotations

from pathlib import Path

class JsonAgentError(Exception):
    """Base class; `str(err)` is always a single line fit to show a person."""


class UserError(JsonAgentError):
    pass


class SpecError(UserError):
    pass


class ConfigError(UserError):
    pass


class BatchError(UserError):
    """A task or results file that cannot be used; nothing has run."""


class EvalError(UserError):
    """A dataset, evaluator or results file that cannot be used; nothing has run."""


class RunError(JsonAgentError):
    pass


class ModelError(RunError):
    pass


class ResponseFormatRejected(ModelError):
    pass


class ToolCallsRejected(ModelError):
    """The endpoint refused steps as `tool_calls` and results as `tool` messages: the loop
    steps the run down to plain messages, as it steps down a refused JSON mode."""


class ToolError(RunError):
    """Raise inside a tool: the message becomes the observation, without a traceback."""


class HookError(RunError):
    pass


class SessionBusy(RunError):
    """Another run of this session is going, queued, or waiting for a person (then
    `waiting` names that run, so that each front end can say how to answer it)."""

    def __init__(self, message: str, waiting: str | None = None):
        super().__init__(message)
        self.waiting = waiting


class Conflict(RunError):
    """The run is not in a state that allows this (HTTP 409)."""


class StoreDown(RunError):
    """The store shared by several processes cannot be reached (its database is down); the
    message names where it is."""


class Unknown(ConfigError):
    """No such run (HTTP 404)."""


class Unreadable(UserError):
    """A file that cannot be read or parsed at all (`tools lint` exits 2 for it)."""


class Cancelled(BaseException):
    """The run's cancel token was set while the loop waited for a model or a tool."""


def read_text(path, error: type[JsonAgentError], what: str = "") -> str:
    """A UTF-8 file's text, or `error` with one line naming the file and what went wrong
    (`what`: what the file is for, as in "cannot read tool specs")."""
    try:
        return Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise error(f"{path}: not UTF-8 text (byte {exc.start})") from None
    except OSError as exc:
        raise error(f"{path}: cannot read{' ' + what if what else ''}: {exc.strerror or exc}") from None
