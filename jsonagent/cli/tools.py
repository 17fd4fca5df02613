"""`jsonagent tools ...`: list, validate, check and call tools."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer

from ..errors import UserError
from .exits import EXIT, USAGE, fail, guarded
from .options import OutputChoice, interactive, json_arg

app = typer.Typer(help="List, validate, check and call tools.", no_args_is_help=True,
                  rich_markup_mode=None)

ToolsOpt = Annotated[Optional[list[Path]], typer.Option(
    "--tools", metavar="FILE",
    help="Tool spec file (repeatable). Default: the bundled core_function.json.")]
OutputOpt = Annotated[OutputChoice, typer.Option("--output", "-o", help="text or json.")]
NoInputOpt = Annotated[bool, typer.Option(
    "--no-input", help="Never prompt; a question for the human ends the call (exit 4).")]


@app.command("list")
@guarded
def tools_list(tools: ToolsOpt = None,
               output: OutputOpt = OutputChoice.text):
    """Show the tools a run would offer the model."""
    from ..tools.toolset import Toolset

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


@app.command("validate")
@guarded
def tools_validate(files: Annotated[list[Path], typer.Argument(help="Spec files to check.")]):
    """Check spec files against the meta-schema; one line per file."""
    from ..tools.specs import load_tools

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


@app.command("check")
@guarded
def tools_check(file: Annotated[Path, typer.Argument(help="Spec file.")],
                tool: Annotated[str, typer.Option("--tool", help="Tool name.")],
                args: Annotated[str, typer.Option("--args", help="Arguments as JSON.")]):
    """Validate arguments against one tool's schema; exit 1 if they do not fit."""
    from ..tools.specs import load_tools

    spec = {s.name: s for s in load_tools(file)}.get(tool)
    if spec is None:
        fail(f"{file}: no tool named {tool!r}", USAGE)
    errors = spec.validate_args(json_arg(args))
    for err in errors:
        typer.echo(f"invalid: {err}")
    if not errors:
        typer.echo(f"ok: arguments fit {tool}")
    raise typer.Exit(1 if errors else 0)


@app.command("call")
@guarded
def tools_call(name: Annotated[str, typer.Argument(help="Tool name.")],
               args: Annotated[str, typer.Option("--args", help="Arguments as JSON.")] = "{}",
               tools: ToolsOpt = None, no_input: NoInputOpt = False):
    """Call one tool directly, as the agent would, and print its result as JSON."""
    from ..agent import Agent
    from ..state import Pending
    from .display import Display

    agent = Agent(model=_NoModel(), tools=tools or None,
                  ask_human=Display().ask if interactive(no_input) else None)
    tool = agent.toolset.get(name)
    if tool is None:
        fail(f"no tool named {name!r}; have: {', '.join(agent.toolset.names)}", USAGE)
    values = json_arg(args)
    errors = tool.spec.validate_args(values)
    if errors:
        fail("; ".join(map(str, errors)), USAGE)
    with agent.session() as session:
        out = tool.invoke(values, session.ctx)
    if isinstance(out, Pending):
        fail(f"needs a human to answer: {out.question}", EXIT["needs_human"])
    typer.echo(json.dumps(out, indent=2, ensure_ascii=False, default=str))


class _NoModel:
    """`tools call` runs no model; this one says so if anything asks it."""

    name = "none"

    def complete(self, messages, response_format):
        raise UserError("no model is configured for `tools call`")
