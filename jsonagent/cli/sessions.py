"""`jsonagent sessions ...`: the stored conversations and their runs."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Annotated, Optional

import typer

from ..errors import ConfigError, write_text
from ..state import step_view
from ..status import COMPLETED, INTERRUPTED, NEEDS_HUMAN
from .command import PlainCommand
from .exits import fail, guarded
from .options import OutputChoice, StoreOpt
from .printable import printable

app = typer.Typer(help="Stored conversations: list, show, export and delete them.",
                  no_args_is_help=True, rich_markup_mode=None)

NameArg = Annotated[str, typer.Argument(metavar="NAME", help="A session's name or id.")]
OutputOpt = Annotated[OutputChoice, typer.Option("--output", "-o", help="text or json.")]


def _store(where: str | None):
    from ..store import open_store

    return open_store(where)


def _session(store, name: str):
    info = store.find_session(name)
    if info is None:
        fail(f"no session {name!r} in {store.path}", 2)
    return info


def _when(t: float) -> str:
    return datetime.fromtimestamp(t).strftime("%Y-%m-%d %H:%M")


@app.command("list", cls=PlainCommand)
@guarded
def list_sessions(output: OutputOpt = OutputChoice.text, store: StoreOpt = None):
    """Every session, newest first: name, runs, last status."""
    sessions = _store(store).sessions()
    if output is OutputChoice.json:
        typer.echo(json.dumps([{"id": s.id, "name": s.name, "runs": s.runs,
                                "last_run": s.last_run, "last_status": s.last_status,
                                "created_at": s.created_at, "updated_at": s.updated_at}
                               for s in sessions], indent=2))
        return
    for s in sessions:
        # a session's name may be a client's threadId: shown, never obeyed
        name = printable(s.name or s.id)
        typer.echo(f"{name:<28} {s.runs:>3} run{'' if s.runs == 1 else 's'}  "
                   f"{s.last_status or '-':<12} {_when(s.updated_at)}")


@app.command("show", cls=PlainCommand)
@guarded
def show(name: NameArg, output: OutputOpt = OutputChoice.text, store: StoreOpt = None):
    """A session's runs: question, status, steps and answer, or what a paused run waits for."""
    store = _store(store)
    info = _session(store, name)
    runs = list(reversed(store.runs(session_id=info.id, limit=10_000)))
    if output is OutputChoice.json:
        typer.echo(json.dumps({"id": info.id, "name": info.name,
                               "runs": [_run_json(store, r) for r in runs]},
                              indent=2, ensure_ascii=False))
        return
    typer.echo(f"session {printable(info.name or info.id)} ({info.id}), {len(runs)} run(s)")
    for r in runs:
        _show_run(store, r, "")


def _run_json(store, r) -> dict:
    return {"id": r.id, "status": r.status, "question": r.question, "created_at": r.created_at,
            "answer": r.state.answer, "error": r.state.error,
            "pending": r.state.pending.model_dump() if r.state.pending else None,
            "steps": [step_view(s) for s in r.state.steps],
            "sub_runs": [_run_json(store, sub) for sub in store.sub_runs(r.id)]}


def _show_run(store, r, pad: str) -> None:
    """A run, then its sub-runs (agents used as tools) indented under it."""
    from ..store import resume_command

    st = r.state
    typer.echo(f"\n{pad}{r.id}  {r.status}  {_when(r.created_at)}")
    typer.echo(f"{pad}  {'task' if pad else 'you'}: {printable(r.question, lines=True)}")
    for step in st.steps:
        for call in step.calls:
            typer.echo(f"{pad}  {step.index}. {printable(call.tool)} "  # the model's words
                       f"{printable(json.dumps(call.args, ensure_ascii=False)[:100])}")
    if r.status == COMPLETED:
        answer = st.answer if isinstance(st.answer, str) else json.dumps(st.answer)
        typer.echo(f"{pad}  answer: {printable(answer, lines=True)}")
    elif r.status == NEEDS_HUMAN and st.pending and not pad:
        typer.echo(f"{pad}  waits: {resume_command(r.id, st.pending.model_dump())}")
    elif r.status == INTERRUPTED and not pad:
        typer.echo(f"{pad}  go on: jsonagent resume {r.id}")
    elif st.error:
        typer.echo(f"{pad}  error: {printable(st.error, lines=True)}")
    for sub in store.sub_runs(r.id):
        _show_run(store, sub, pad + "  │ ")


@app.command("export", cls=PlainCommand)
@guarded
def export(name: NameArg, out: Annotated[Optional[Path], typer.Option(
        "--out", metavar="FILE", help="Write here instead of stdout.")] = None,
           output: OutputOpt = OutputChoice.json, store: StoreOpt = None):
    """The session's events as JSONL, in order (the same lines as a --transcript file)."""
    store = _store(store)
    info = _session(store, name)
    lines = "".join(json.dumps(e, ensure_ascii=False) + "\n"
                    for e in store.events(session_id=info.id))
    if out is None:
        typer.echo(lines, nl=False)
    else:
        write_text(out, lines, ConfigError, "the events")


@app.command("delete", cls=PlainCommand)
@guarded
def delete(name: NameArg, output: OutputOpt = OutputChoice.text, store: StoreOpt = None):
    """Delete a session with its runs and events."""
    store = _store(store)
    info = _session(store, name)
    store.delete_session(info.id)
    if output is OutputChoice.json:
        typer.echo(json.dumps({"deleted": info.id, "name": info.name}))
    else:
        typer.echo(f"deleted session {printable(info.name or info.id)} ({info.runs} run(s))")
