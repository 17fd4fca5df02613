"""Exit codes, and the guard that turns known errors into one line and a code."""

from __future__ import annotations

import functools
import os

import typer

from ..errors import JsonAgentError, UserError
from ..status import INTERRUPTED, RESULTS, exit_code

EXIT = {status: exit_code(status) for status in RESULTS}
USAGE = 2

debug = {"on": bool(os.environ.get("JSONAGENT_DEBUG"))}


def guarded(fn):
    """Known errors become one line and an exit code; tracebacks only with --debug."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except typer.Exit:
            raise
        except KeyboardInterrupt:
            fail("interrupted", EXIT[INTERRUPTED])
        except JsonAgentError as exc:
            if debug["on"]:
                raise
            fail(str(exc), USAGE if isinstance(exc, UserError) else 1)
        except Exception as exc:
            if debug["on"]:
                raise
            fail(f"internal error: {type(exc).__name__}: {exc} (rerun with --debug for the "
                 "traceback)", 1)
    return wrapper


def fail(message: str, code: int):
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)
