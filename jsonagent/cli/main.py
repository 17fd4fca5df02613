"""The `jsonagent` command. Each command builds the pieces, calls the library, prints,
and maps known errors to exit codes; the work itself lives in the library."""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from . import models as cli_models, sandbox as cli_sandbox, tools as cli_tools
from .batch import batch
from .exits import EXIT, debug, guarded
from .options import OutputChoice, RunOptions, interactive, run_options, text_arg

app = typer.Typer(help="A JSON tool-calling agent: one validated JSON object per step.",
                  no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False,
                  rich_markup_mode=None)  # plain help: rich costs ~90 ms per start
app.add_typer(cli_tools.app, name="tools")
app.add_typer(cli_sandbox.app, name="sandbox")
app.add_typer(cli_models.app, name="models")
app.command()(batch)

NoInputOpt = Annotated[bool, typer.Option(
    "--no-input", help="Never prompt; a question for the human ends the run (exit 4).")]
TranscriptOpt = Annotated[Optional[Path], typer.Option(
    "--transcript", metavar="PATH", help="Append every event to this JSONL file as it happens.")]
OutputOpt = Annotated[OutputChoice, typer.Option("--output", "-o", help="text or json.")]


def _print_version(value: bool):
    if value:
        from .. import __version__

        typer.echo(__version__)
        raise typer.Exit(0)


@app.callback()
def _root(debug_flag: Annotated[bool, typer.Option("--debug", help="Show tracebacks.")] = False,
          version: Annotated[bool, typer.Option("--version", is_eager=True, callback=_print_version,
                                                help="Print the version.")] = False):
    if debug_flag:
        debug["on"] = True
    logging.basicConfig(level=logging.DEBUG if debug["on"] else logging.WARNING,
                        format="%(levelname)s: %(message)s", stream=sys.stderr)


@app.command()
@guarded
@run_options
def run(question: Annotated[str, typer.Argument(metavar="QUESTION", help="The task, in plain words.")],
        no_input: NoInputOpt = False, transcript: TranscriptOpt = None,
        output: OutputOpt = OutputChoice.text, *, opts: RunOptions):
    """Run one task and print the answer; the steps are shown live on stderr."""
    from .display import Display

    display = Display(quiet=output is OutputChoice.json)
    agent = opts.build_agent(ask_human=display.ask if interactive(no_input) else None,
                             on_event=display.event, transcript=transcript)
    result = agent.run(text_arg(question))
    if output is OutputChoice.json:
        typer.echo(result.model_dump_json(indent=2))
    else:
        display.result(result)
    raise typer.Exit(EXIT[result.status])


@app.command()
@guarded
@run_options
def chat(no_input: NoInputOpt = False, transcript: TranscriptOpt = None, *, opts: RunOptions):
    """A multi-turn conversation; variables in the code interpreter persist. Ctrl-D ends it."""
    from .display import Display

    display = Display()
    agent = opts.build_agent(ask_human=display.ask if interactive(no_input) else None,
                             on_event=display.event, transcript=transcript)
    code = 0
    with agent.session() as session:
        while True:
            try:
                text = display.read(display.user_prompt(session.pending))
            except EOFError:
                break
            except KeyboardInterrupt:
                code = EXIT["interrupted"]
                break
            if text.strip() in ("exit", "quit", ":q"):
                break
            if text.strip():
                result = session.run(text_arg(text))
                display.result(result)
                if result.status == "interrupted":
                    code = EXIT["interrupted"]
                    break
    raise typer.Exit(code)


def main() -> None:
    # --debug is honoured wherever it stands, not only before the command.
    if "--debug" in sys.argv[2:]:
        debug["on"] = True
        sys.argv.remove("--debug")
    app()
