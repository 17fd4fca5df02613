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
        ├── ModelError            the model failed; `kind` names how (see MODEL_ERROR_KINDS)
        │   ├── RateLimited              429, with `retry_after` when the endpoint gives one
        │   ├── QuotaExceeded            429 for a spent quota or an unpaid bill: waiting won't do
        │   ├── ModelUnavailable         5xx (a 503 with `retry_after` when it gives one), or
    │   │                            the connection refused or reset
        │   ├── ModelTimeout             no answer in time
        │   ├── ContextWindowExceeded    the request is longer than the model's window
        │   ├── ContentFiltered          the provider's filter refused the request or reply
        │   ├── AuthenticationFailed     401 or 403: the key, or its access to the model
        │   └── BadRequest               any other 4xx
        │       ├── ResponseFormatRejected   the endpoint refused our response_format
        │       └── ToolCallsRejected        the endpoint refused the native tool-call form
        ├── TryAgain              a model asks for the same request again, after a wait or
        │                         from the next model (models/fallback.py; request.py obliges)
        ├── ToolError             raised by a tool to send a clean message back to the model
        ├── HookError             a hook raised: the run ends failed, naming the hook
        ├── LimitReached          a usage limit: the run ends limit_reached, naming it
        ├── SessionBusy           the session has a run going, queued or waiting for a person
        └── Conflict              the run is not in a state that allows this (HTTP 409)

    Cancelled (a BaseException, like KeyboardInterrupt: no `except Exception` swallows it)
                                  the run was cancelled while it waited (cancel.py)

Four never leave the package: `Held` (a run another live process holds: the stores wait and
try again, then raise SessionBusy), `MissingRef` (a spec's dangling $ref: the spec
loader raises a SpecError naming the file), `SchemaRefused` (a schema past its bounds, or
one whose $ref points outside it: its loader says whose schema, as a SpecError, a
ConfigError or an EvalError) and `TryAgain` (the request sends it again,
summary requests included; a fallback model called outside a run waits and tries itself).

Invalid replies are not exceptions: `envelope.parse_reply` returns a `ReplyProblem`,
whose text is what the model reads on the re-ask. The sandbox package has its own tree
(`sandbox.errors`); the agent turns a sandbox that refuses to start into a ConfigError.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

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
    """The model failed. `model` and `endpoint` say which, when the backend knows; `kind`
    names the failure the same way everywhere (a run's `error_kind`, the server's JSON)."""

    kind = "model_error"

    def __init__(self, message: str, *, model: str | None = None, endpoint: str | None = None,
                 retry_after: float | None = None):
        super().__init__(message)
        self.model, self.endpoint = model, endpoint
        self.retry_after = retry_after
        """Seconds the endpoint asked us to wait (its Retry-After, on a 429 or a 503), when
        it said."""


class RateLimited(ModelError):
    kind = "rate_limited"


class QuotaExceeded(ModelError):
    kind = "quota"


class ModelUnavailable(ModelError):
    kind = "unavailable"


class ModelTimeout(ModelError):
    kind = "timeout"
    past_deadline = False
    """The request's whole deadline passed, not one read's timeout: the endpoint sends, too
    slowly (OpenAIModel's `deadline`). Asked again, the same model would hold the run as
    long again, so a fallback moves on to the next model instead."""


class ContextWindowExceeded(ModelError):
    kind = "context_window"


class ContentFiltered(ModelError):
    kind = "content_filter"


class AuthenticationFailed(ModelError):
    kind = "authentication"


class BadRequest(ModelError):
    kind = "bad_request"


class ResponseFormatRejected(BadRequest):
    pass


class ToolCallsRejected(BadRequest):
    """The endpoint refused steps as `tool_calls` and results as `tool` messages: the loop
    steps the run down to plain messages, as it steps down a refused JSON mode."""


class TryAgain(RunError):
    """The model asks for the same request again: after `wait_s` seconds (a retry), or at once
    rebuilt for `fallback`, the model that takes it over (models/fallback.py). The request
    (request.py) says so in the event stream, waits on the run's cancel token and sends it
    again, so that a cancel ends a backoff at once. `str()` is why, for a person."""

    def __init__(self, message: str, *, cause: ModelError | None = None, wait_s: float = 0.0,
                 retry: int = 0, model: str | None = None, fallback: str | None = None,
                 takes_over: Any = None):
        super().__init__(message)
        self.cause, self.wait_s, self.retry = cause, wait_s, retry
        self.model, self.fallback = model, fallback
        """`model` failed; `fallback` answers from now on (None: `model` is tried again)."""
        self.takes_over = takes_over
        """With `fallback`: its `models.Capabilities`, what the request is rebuilt for."""

    @property
    def kind(self) -> str:
        """The failure's kind (see MODEL_ERROR_KINDS), or invalid_replies."""
        return self.cause.kind if self.cause is not None else "invalid_replies"


class ToolError(RunError):
    """Raise inside a tool: the message becomes the observation, without a traceback."""


class LimitReached(RunError):
    """The next model request or tool call would pass one of the run's usage limits
    (limits.py); the loop ends the run `limit_reached` with this message as its error."""

    def __init__(self, message: str, limit: str):
        super().__init__(message)
        self.limit = limit


class HookError(RunError):
    pass


class SessionBusy(RunError):
    """Another run of this session is going, queued, or waiting for a person (then
    `waiting` names that run, so that each front end can say how to answer it)."""

    def __init__(self, message: str, waiting: str | None = None, holder: str | None = None):
        super().__init__(f"{message} ({holder})" if holder else message)
        self.waiting = waiting
        self.public = message
        """The message without `holder` (the pid and host of the process that holds the
        run): what a server tells its clients, who have no business knowing them."""


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


MAX_FILE_BYTES = 256 << 20
"""The largest file read whole (a spec, a dataset, a task or results file, a script)."""


def read_text(path, error: type[JsonAgentError], what: str = "",
              limit: int = MAX_FILE_BYTES) -> str:
    """A UTF-8 file's text, or `error` with one line naming the file and what went wrong
    (`what`: what the file is for, as in "cannot read tool specs"). The one home of reading
    a file someone named: only a regular file of `limit` bytes at most is read, since
    /dev/zero as a tools path or a results file read until the process was killed."""
    import os
    import stat

    doing = f"cannot read{' ' + what if what else ''}"
    try:
        # O_NONBLOCK: opening a named pipe would wait for a writer; a regular file ignores it
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):  # before fdopen, which refuses a directory but keeps its fd
            os.close(fd)
            raise error(f"{path}: {doing}: " + ("is a directory" if stat.S_ISDIR(mode) else
                                                "not a regular file (a device, a pipe or a "
                                                "socket)"))
        with os.fdopen(fd, "rb") as f:
            data = f.read(limit + 1)
    except OSError as exc:
        raise error(f"{path}: {doing}: {exc.strerror or exc}") from None
    if len(data) > limit:
        raise error(f"{path}: {doing}: larger than {limit:,} bytes")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise error(f"{path}: not UTF-8 text (byte {exc.start})") from None
    return text.replace("\r\n", "\n").replace("\r", "\n")  # as text mode reads it


def write_text(path, text: str, error: type[JsonAgentError], what: str = "") -> None:
    """Write `text` to `path`, or `error` in one line (a full disk, /dev/full, no right)."""
    try:
        Path(path).write_text(text, encoding="utf-8")
    except OSError as exc:
        raise error(f"{path}: cannot write{' ' + what if what else ''}: "
                    f"{exc.strerror or exc}") from None


MODEL_ERROR_KINDS = {cls.kind: cls for cls in (
    ModelError, RateLimited, QuotaExceeded, ModelUnavailable, ModelTimeout, ContextWindowExceeded,
    ContentFiltered, AuthenticationFailed, BadRequest)}
"""Every kind of model failure, by the name runs and the server give it."""
TRANSIENT = (RateLimited, ModelUnavailable, ModelTimeout)
"""Model failures that waiting may cure: an eval counts a case that ended on one as an
error of its infrastructure, never as a failed case."""
TRANSIENT_KINDS = frozenset(cls.kind for cls in TRANSIENT)


_CONTEXT_WORDS = ("context window", "context length", "context_length", "maximum context",
                  "too many tokens", "prompt is too long", "exceed context")
_QUOTA_WORDS = ("quota", "billing", "insufficient_funds", "credit balance")
_FILTER_WORDS = ("content_filter", "content filter", "content management policy",
                 "content policy", "safety system")


def model_error_for(status: int, message: str, *, retry_after: float | None = None,
                    model: str | None = None, endpoint: str | None = None) -> ModelError:
    """The typed error for an HTTP status and the server's own words: the one mapping, for
    the openai SDK's errors and any plain HTTP endpoint alike."""
    words, where = message.lower(), {"model": model, "endpoint": endpoint}
    if status == 429:
        if any(w in words for w in _QUOTA_WORDS):  # OpenAI's insufficient_quota is a 429 too
            return QuotaExceeded(message, **where)
        return RateLimited(message, retry_after=retry_after, **where)
    if status in (401, 403):
        return AuthenticationFailed(message, **where)
    if status == 408:
        return ModelTimeout(message, **where)
    if status >= 500:
        if any(w in words for w in _CONTEXT_WORDS):  # llama.cpp's server answers 500 to it
            return ContextWindowExceeded(message, **where)
        # a 503's Retry-After says when the server expects to be back (RFC 9110, 10.2.3)
        return ModelUnavailable(message, retry_after=retry_after, **where)
    if any(w in words for w in _CONTEXT_WORDS):
        return ContextWindowExceeded(message, **where)
    if any(w in words for w in _FILTER_WORDS):
        return ContentFiltered(message, **where)
    return BadRequest(message, **where)


def retry_after_s(headers) -> float | None:
    """Seconds from a Retry-After header (seconds or an HTTP date) or retry-after-ms."""
    if headers is None:
        return None
    millis = headers.get("retry-after-ms")
    try:
        if millis is not None:
            return max(0.0, float(millis) / 1000)
        value = headers.get("retry-after")
        if value is None:
            return None
        try:
            return max(0.0, float(value))
        except ValueError:
            import email.utils
            import time

            when = email.utils.parsedate_to_datetime(value)
            if when.tzinfo is None:  # an HTTP date is in GMT, whether it says so or not
                from datetime import timezone

                when = when.replace(tzinfo=timezone.utc)
            return max(0.0, when.timestamp() - time.time())
    except (TypeError, ValueError, OverflowError):
        return None


class Held(Exception):
    """The run or session is another live process's for now (never leaves the stores).
    `holder` says which process, for SessionBusy."""

    def __init__(self, message: str, holder: str | None = None):
        super().__init__(message)
        self.holder = holder


class MissingRef(Exception):
    """args[0]: the JSON pointer of a spec's dangling $ref (never leaves the spec loader)."""


class SchemaRefused(Exception):
    """args: the JSON pointer into the schema and what is wrong there (schema.check_bounds)."""
