"""`jsonagent sandbox ...`: run code in the sandbox, or check how isolated it is on this machine.

A thin layer: build a Sandbox, call it, print. The library is imported inside the
commands so that `jsonagent --help` stays fast.
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
import warnings
from pathlib import Path
from typing import Optional

import typer

from .command import PlainCommand

app = typer.Typer(help="Run code in the sandbox, or check its isolation here.",
                  no_args_is_help=True)

EXIT_INCOMPLETE = 2
CLI_SETTINGS = {"memory": "--memory MB", "time": "--timeout SECONDS", "output": "--output-limit BYTES"}
"""What sets each limit here, as the notes about them name it."""


def _fail(message: str, code: int = 1) -> None:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)


@app.command(cls=PlainCommand)
def run(
    file: Optional[str] = typer.Argument(None, help="Python file to run; '-' or nothing reads stdin."),
    timeout: float = typer.Option(10.0, "--timeout", min=0.001, metavar="SECONDS", help="Seconds before the code is interrupted."),
    memory: int = typer.Option(1024, "--memory", min=64, metavar="MB", help="Memory limit in MB."),
    output_limit: int = typer.Option(65536, "--output-limit", min=0, metavar="BYTES", help="Bytes of stdout and of stderr kept; the rest is cut."),
    workdir: Optional[Path] = typer.Option(None, "--workdir", metavar="DIR", help="Work here (default: a new temp dir, kept only if files were written)."),
    strict: bool = typer.Option(False, "--strict", help="Refuse to run unless every protection is in force."),
) -> None:
    """Run one cell and print its ExecResult as JSON (files_changed are relative to `workdir`).
    A limit the code ran into is named in `note`, and on stderr."""
    from ..bundled import sandbox
    from ..errors import ConfigError, read_text
    from ..tools.core import limit_notes
    Sandbox, SandboxError = sandbox.Sandbox, sandbox.SandboxError

    if file in (None, "-"):
        code = sys.stdin.read()
    else:
        try:
            code = read_text(file, ConfigError, "code")
        except ConfigError as exc:
            _fail(str(exc))
    # Without --workdir, files the code writes land in a fresh temp dir that is kept only if used.
    keep = workdir if workdir is not None else Path(tempfile.mkdtemp(prefix="jsonagent-run-"))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the JSON says the same in `isolation_complete`
            with Sandbox(workdir=keep, timeout=timeout, memory_mb=memory, output_limit=output_limit,
                         require_isolation=strict) as sb:
                result = sb.run(code)
                payload = result.to_dict()
                notes = limit_notes(result, sb, CLI_SETTINGS)
                if notes:
                    payload["note"] = " ".join(notes)
                payload["workdir"] = str(sb.workdir)
                payload["isolation_complete"] = sb.isolation.complete
    except SandboxError as exc:
        if workdir is None:
            shutil.rmtree(keep, ignore_errors=True)
        _fail(str(exc))
    if workdir is None and not any(keep.iterdir()):
        shutil.rmtree(keep, ignore_errors=True)
        payload["workdir"] = None
    typer.echo(json.dumps(payload, indent=2, ensure_ascii=False))
    for line in notes:
        typer.echo(f"note: {line}", err=True)
    if not result.ok:
        raise typer.Exit(1)


@app.command(cls=PlainCommand)
def check(
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON."),
    strict: bool = typer.Option(False, "--strict", help=f"Exit {EXIT_INCOMPLETE} if any protection is missing."),
) -> None:
    """Start a sandbox, print which protections are in force here, and prove it runs code."""
    from ..bundled import sandbox
    Sandbox, SandboxError = sandbox.Sandbox, sandbox.SandboxError

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with Sandbox(timeout=10) as sb:
                report = sb.isolation
                probe = sb.run("print(6 * 7)")
    except SandboxError as exc:
        _fail(str(exc))
    if as_json:
        typer.echo(json.dumps({**report.to_dict(), "runs_code": probe.stdout == "42\n"}, indent=2))
    else:
        typer.echo(report.describe())
        typer.echo(f"{'runs code':<16}{'yes' if probe.stdout == '42' + chr(10) else 'NO: ' + str(probe.error)}")
        missing = report.missing()
        typer.echo("verdict         " + ("complete isolation" if not missing
                                          else "INCOMPLETE, missing: " + ", ".join(missing)))
    if strict and report.missing():
        raise typer.Exit(EXIT_INCOMPLETE)
