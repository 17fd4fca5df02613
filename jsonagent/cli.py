"""The `jsonagent` command. Each command builds the pieces, calls the library, prints,
and maps known errors to exit codes; the work itself lives in the library."""

from __future__ import annotations

import functools
import json
import logging
import os
import sys
from enum import Enum
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from . import cli_models, cli_sandbox
from .errors import JsonAgentError, UserError

EXIT = {"completed": 0, "failed": 1, "max_steps": 3, "needs_human": 4, "interrupted": 130}
USAGE = 2

app = typer.Typer(help="A JSON tool-calling agent: one validated JSON object per step.",
                  no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False,
                  rich_markup_mode=None)  # plain help: rich costs ~90 ms per start
tools_app = typer.Typer(help="List, validate, check and call tools.", no_args_is_help=True,
                        rich_markup_mode=None)
app.add_typer(tools_app, name="tools")
app.add_typer(cli_sandbox.app, name="sandbox")
app.add_typer(cli_models.app, name="models")

_debug = {"on": bool(os.environ.get("JSONAGENT_DEBUG"))}


class JsonModeChoice(str, Enum):
    schema = "schema"
    object = "object"
    prompt = "prompt"


class OutputChoice(str, Enum):
    text = "text"
    json = "json"


class SandboxChoice(str, Enum):
    auto = "auto"
    strict = "strict"


ToolsOpt = Annotated[Optional[list[Path]], typer.Option(
    "--tools", help="Tool spec file (repeatable). Default: the bundled core_function.json.")]
ModelOpt = Annotated[Optional[str], typer.Option(
    "--model", "-m", help="Model name at the endpoint, 'local[:PATH.gguf]' or "
    "'scripted:FILE.json'. Default: $JSONAGENT_MODEL.")]
BaseUrlOpt = Annotated[Optional[str], typer.Option(
    "--base-url", help="OpenAI-compatible endpoint. Default: $OPENAI_BASE_URL.")]
ApiKeyOpt = Annotated[Optional[str], typer.Option(
    "--api-key", help="API key. Default: $OPENAI_API_KEY.")]
MaxStepsOpt = Annotated[int, typer.Option("--max-steps", min=1, help="Tool calls allowed.")]
JsonModeOpt = Annotated[Optional[JsonModeChoice], typer.Option(
    "--json-mode", help="How JSON is forced. Default: the model's own (object for endpoints).")]
NoInputOpt = Annotated[bool, typer.Option(
    "--no-input", help="Never prompt; a question for the human ends the run (exit 4).")]
TranscriptOpt = Annotated[Optional[Path], typer.Option(
    "--transcript", help="Append every event to this JSONL file as it happens.")]
SandboxOpt = Annotated[SandboxChoice, typer.Option(
    "--sandbox", help="strict: refuse to run code unless every isolation is in force.")]
OutputOpt = Annotated[OutputChoice, typer.Option("--output", "-o", help="text or json.")]


def guarded(fn):
    """Known errors become one line and an exit code; tracebacks only with --debug."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except typer.Exit:
            raise
        except KeyboardInterrupt:
            _fail("interrupted", 130)
        except JsonAgentError as exc:
            if _debug["on"]:
                raise
            _fail(str(exc), USAGE if isinstance(exc, UserError) else 1)
        except Exception as exc:
            if _debug["on"]:
                raise
            _fail(f"internal error: {type(exc).__name__}: {exc} (rerun with --debug for the "
                  "traceback)", 1)
    return wrapper


def _fail(message: str, code: int):
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)


def _print_version(value: bool):
    if value:
        from . import __version__

        typer.echo(__version__)
        raise typer.Exit(0)


@app.callback()
def _root(debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks.")] = False,
          version: Annotated[bool, typer.Option("--version", is_eager=True, callback=_print_version,
                                                help="Print the version.")] = False):
    if debug:
        _debug["on"] = True
    logging.basicConfig(level=logging.DEBUG if _debug["on"] else logging.WARNING,
                        format="%(levelname)s: %(message)s", stream=sys.stderr)


@app.command()
@guarded
def run(question: Annotated[str, typer.Argument(help="The task, in plain words.")],
        tools: ToolsOpt = None, model: ModelOpt = None, base_url: BaseUrlOpt = None,
        api_key: ApiKeyOpt = None, max_steps: MaxStepsOpt = 10,
        json_mode: JsonModeOpt = None, no_input: NoInputOpt = False,
        transcript: TranscriptOpt = None, sandbox: SandboxOpt = SandboxChoice.auto,
        output: OutputOpt = OutputChoice.text):
    """Run one task and print the answer; the steps are shown live on stderr."""
    from .display import Display

    display = Display(quiet=output is OutputChoice.json)
    agent = _agent(tools, model, base_url, api_key, max_steps, json_mode, no_input,
                   transcript, sandbox, display)
    result = agent.run(_text(question))
    if output is OutputChoice.json:
        typer.echo(result.model_dump_json(indent=2))
    else:
        display.result(result)
    raise typer.Exit(EXIT[result.status])


@app.command()
@guarded
def chat(tools: ToolsOpt = None, model: ModelOpt = None, base_url: BaseUrlOpt = None,
         api_key: ApiKeyOpt = None, max_steps: MaxStepsOpt = 10,
         json_mode: JsonModeOpt = None, no_input: NoInputOpt = False,
         transcript: TranscriptOpt = None, sandbox: SandboxOpt = SandboxChoice.auto):
    """A multi-turn conversation; variables in the code interpreter persist. Ctrl-D ends it."""
    from .display import Display

    display = Display()
    agent = _agent(tools, model, base_url, api_key, max_steps, json_mode, no_input,
                   transcript, sandbox, display)
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
                result = session.run(_text(text))
                display.result(result)
                if result.status == "interrupted":
                    code = EXIT["interrupted"]
                    break
    raise typer.Exit(code)


def _agent(tools, model, base_url, api_key, max_steps, json_mode, no_input, transcript,
           sandbox, display):
    from .agent import Agent
    from .config import AgentConfig
    from .models import resolve_model

    interactive = not no_input and sys.stdin.isatty()
    config = AgentConfig(max_steps=max_steps, json_mode=json_mode.value if json_mode else None,
                         require_isolation=sandbox is SandboxChoice.strict)
    return Agent(model=resolve_model(model, base_url=base_url, api_key=api_key),
                 tools=tools or None, ask_human=display.ask if interactive else None,
                 config=config, transcript=transcript, on_event=display.event)


@tools_app.command("list")
@guarded
def tools_list(tools: ToolsOpt = None,
               output: OutputOpt = OutputChoice.text):
    """Show the tools a run would offer the model."""
    from .toolset import Toolset

    toolset = Toolset.build(tools or None)
    if output is OutputChoice.json:
        typer.echo(json.dumps([t.spec.describe() for t in toolset], indent=2, ensure_ascii=False))
        return
    for t in toolset:
        params = t.spec.parameters.get("properties", {})
        required = set(t.spec.parameters.get("required", []))
        sig = ", ".join(f"{n}{'' if n in required else '?'}: {p.get('type', 'any')}"
                        for n, p in params.items())
        typer.echo(f"{t.name}({sig})\n    {t.spec.description}")


@tools_app.command("validate")
@guarded
def tools_validate(files: Annotated[list[Path], typer.Argument(help="Spec files to check.")]):
    """Check spec files against the meta-schema; one line per file."""
    from .specs import load_tools

    bad = 0
    for path in files:
        try:
            specs = load_tools(path)
        except UserError as exc:
            bad += 1
            typer.echo(f"error: {exc}", err=True)
        else:
            typer.echo(f"ok: {path}: {len(specs)} tool(s): {', '.join(s.name for s in specs)}")
    raise typer.Exit(USAGE if bad else 0)


@tools_app.command("check")
@guarded
def tools_check(file: Annotated[Path, typer.Argument(help="Spec file.")],
                tool: Annotated[str, typer.Option("--tool", help="Tool name.")],
                args: Annotated[str, typer.Option("--args", help="Arguments as JSON.")]):
    """Validate arguments against one tool's schema; exit 1 if they do not fit."""
    from .specs import load_tools

    spec = {s.name: s for s in load_tools(file)}.get(tool)
    if spec is None:
        _fail(f"{file}: no tool named {tool!r}", USAGE)
    errors = spec.validate_args(_json_arg(args))
    for err in errors:
        typer.echo(f"invalid: {err}")
    if not errors:
        typer.echo(f"ok: arguments fit {tool}")
    raise typer.Exit(1 if errors else 0)


@tools_app.command("call")
@guarded
def tools_call(name: Annotated[str, typer.Argument(help="Tool name.")],
               args: Annotated[str, typer.Option("--args", help="Arguments as JSON.")] = "{}",
               tools: ToolsOpt = None, no_input: NoInputOpt = False):
    """Call one tool directly, as the agent would, and print its result as JSON."""
    from .agent import Agent
    from .builtins import NeedsHuman
    from .display import Display

    agent = Agent(model=_NoModel(), tools=tools or None,
                  ask_human=Display().ask if not no_input and sys.stdin.isatty() else None)
    tool = agent.toolset.get(name)
    if tool is None:
        _fail(f"no tool named {name!r}; have: {', '.join(agent.toolset.names)}", USAGE)
    values = _json_arg(args)
    errors = tool.spec.validate_args(values)
    if errors:
        _fail("; ".join(map(str, errors)), USAGE)
    with agent.session() as session:
        try:
            out = tool.invoke(values, session.ctx)
        except NeedsHuman as nh:
            _fail(f"needs a human to answer: {nh.question}", EXIT["needs_human"])
    typer.echo(json.dumps(out, indent=2, ensure_ascii=False, default=str))


class _NoModel:
    """`tools call` runs no model; this one says so if anything asks it."""

    name = "none"

    def complete(self, messages, response_format):
        raise UserError("no model is configured for `tools call`")


def _text(text: str) -> str:
    """Bytes that were not UTF-8 arrive as lone surrogates; make them visible, not fatal."""
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def _json_arg(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        _fail(f"--args is not valid JSON: {exc.msg} at column {exc.colno}", USAGE)


def main() -> None:
    # --debug is honoured wherever it stands, not only before the command.
    if "--debug" in sys.argv[2:]:
        _debug["on"] = True
        sys.argv.remove("--debug")
    app()
