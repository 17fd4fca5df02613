"""Exit codes, and the guard that turns known errors into one line and a code."""

from __future__ import annotations

import functools
import os

import typer

from ..errors import JsonAgentError, SessionBusy, UserError
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
        except BrokenPipeError:  # `| head`: the reader has all it wanted, a normal end
            _quiet_stdout()
            raise typer.Exit(0) from None
        except SessionBusy as exc:  # a run waits for a person: the user has to answer it
            if debug["on"]:
                raise
            fail(str(exc), USAGE if exc.waiting else 1)
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


def _quiet_stdout() -> None:
    """Nothing more can reach the closed pipe; point stdout elsewhere so that Python's own
    flush at exit does not complain about it either."""
    import sys

    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError):
        pass


def fail(message: str, code: int):
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)
