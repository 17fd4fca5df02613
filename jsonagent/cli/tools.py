"""`jsonagent tools ...`: list, validate, check, call, lint, scaffold and export tools."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer

from ..errors import UserError
from ..status import NEEDS_HUMAN
from .command import PlainCommand
from .exits import EXIT, USAGE, fail, guarded
from .options import A2aOpt, OutputChoice, interactive, json_arg

app = typer.Typer(help="List, validate, check, call, lint, scaffold and export tools.",
                  no_args_is_help=True, rich_markup_mode=None)

ToolsOpt = Annotated[Optional[list[Path]], typer.Option(
    "--tools", metavar="PATH",
    help="Tool spec file or directory (repeatable); adds to the built-ins.")]
McpOpt = Annotated[Optional[list[str]], typer.Option(
    "--mcp", metavar="CMD|URL", help="MCP server: a command line (stdio) or a URL (repeatable).")]
McpConfigOpt = Annotated[Optional[list[Path]], typer.Option(
    "--mcp-config", metavar="FILE", help='MCP servers from a {"mcpServers": {...}} file.')]
McpPrefixOpt = Annotated[bool, typer.Option(
    "--mcp-prefix", help="Name each MCP tool SERVER_tool.")]
NoCoreOpt = Annotated[bool, typer.Option("--no-core-tools", help="Leave out the built-ins.")]
ArgsOpt = Annotated[str, typer.Option("--args", metavar="JSON", help="Arguments as JSON.")]
OutputOpt = Annotated[OutputChoice, typer.Option("--output", "-o", help="text or json.")]
NoInputOpt = Annotated[bool, typer.Option(
    "--no-input", help="Never prompt; a question for the human ends the call (exit 4).")]


@app.command("list", cls=PlainCommand)
@guarded
def tools_list(tools: ToolsOpt = None, mcp: McpOpt = None, mcp_config: McpConfigOpt = None,
               mcp_prefix: McpPrefixOpt = False, a2a: A2aOpt = None,
               no_core_tools: NoCoreOpt = False,
               output: OutputOpt = OutputChoice.text):
    """Show the tools a run would offer the model."""
    with _toolset(tools, mcp, mcp_config, mcp_prefix, no_core_tools, a2a) as toolset:
        described = [t.spec.describe() for t in toolset]
    if output is OutputChoice.json:
        typer.echo(json.dumps(described, indent=2, ensure_ascii=False))
        return
    for t in toolset:
        params = t.spec.parameters.get("properties", {})
        required = set(t.spec.parameters.get("required", []))
        sig = ", ".join(f"{n}{'' if n in required else '?'}: {p.get('type', 'any')}"
                        for n, p in params.items())
        typer.echo(f"{t.name}({sig})\n    {t.spec.description}")


@app.command("validate", cls=PlainCommand)
@guarded
def tools_validate(files: Annotated[list[Path], typer.Argument(
                       help="Spec files or directories to check.")],
                   no_import: Annotated[bool, typer.Option(
                       "--no-import", help="Do not import Python handlers.")] = False):
    """Check spec files: the meta-schema, and that Python handlers import.

    One line per file. Secrets (${env:NAME}) need not be set."""
    from ..tools.handlers import check
    from ..tools.specs import load_tools
    from ..tools.toolset import spec_files

    bad = 0
    for path in [f for given in files for f in (spec_files(given) if given.is_dir() else [given])]:
        try:
            specs = load_tools(path)
            for spec in specs if not no_import else []:
                check(spec, path.resolve().parent)
        except UserError as exc:
            bad += 1
            typer.echo(f"error: {exc}", err=True)
        else:
            typer.echo(f"ok: {path}: {len(specs)} tool(s): {', '.join(s.name for s in specs)}")
    raise typer.Exit(USAGE if bad else 0)


@app.command("check", cls=PlainCommand)
@guarded
def tools_check(file: Annotated[Optional[Path], typer.Argument(
                    help="Spec file (or use --tools / --mcp).")] = None,
                tool: Annotated[str, typer.Option("--tool", metavar="NAME",
                                                  help="Tool name.")] = "",
                args: ArgsOpt = "{}",
                tools: ToolsOpt = None, mcp: McpOpt = None, mcp_config: McpConfigOpt = None,
                mcp_prefix: McpPrefixOpt = False):
    """Validate arguments against one tool's schema; exit 1 if they do not fit."""
    from ..tools.specs import load_tools

    if not tool:
        fail("--tool NAME is required", USAGE)
    if file is not None and not (tools or mcp or mcp_config):
        specs = {s.name: s for s in load_tools(file)}
        where = str(file)
    else:
        with _toolset([*([file] if file else []), *(tools or [])], mcp, mcp_config,
                      mcp_prefix, False) as toolset:
            specs = {t.name: t.spec for t in toolset}
        where = "the tools given"
    spec = specs.get(tool)
    if spec is None:
        fail(f"{where}: no tool named {tool!r}; have: {', '.join(specs)}", USAGE)
    errors = spec.validate_args(json_arg(args))
    for err in errors:
        typer.echo(f"invalid: {err}")
    if not errors:
        typer.echo(f"ok: arguments fit {tool}")
    raise typer.Exit(1 if errors else 0)


@app.command("call", cls=PlainCommand)
@guarded
def tools_call(name: Annotated[str, typer.Argument(help="Tool name.")],
               args: ArgsOpt = "{}",
               tools: ToolsOpt = None, mcp: McpOpt = None, mcp_config: McpConfigOpt = None,
               mcp_prefix: McpPrefixOpt = False, a2a: A2aOpt = None,
               no_core_tools: NoCoreOpt = False,
               no_input: NoInputOpt = False):
    """Call one tool directly, as the agent would, and print its result as JSON."""
    from ..agent import Agent
    from ..errors import ToolError
    from ..state import Pending
    from .display import Display
    from .options import tool_sources

    values = json_arg(args)
    with Agent(model=_NoModel(), tools=tool_sources(tools or [], mcp or [], mcp_config or [],
                                                    mcp_prefix, no_core_tools, a2a),
               ask_human=Display().ask if interactive(no_input) else None) as agent:
        tool = agent.toolset.get(name)
        if tool is None:
            fail(f"no tool named {name!r}; have: {', '.join(agent.toolset.names)}", USAGE)
        errors = tool.spec.validate_args(values)
        if errors:
            fail("; ".join(map(str, errors)), USAGE)
        with agent.session() as session:
            try:
                out = tool.invoke(values, session.ctx)
            except ToolError as exc:
                fail(f"{name}: {exc}", 1)
        if isinstance(out, Pending):
            fail(f"needs a human to answer: {out.question}", EXIT[NEEDS_HUMAN])
    typer.echo(json.dumps(out, indent=2, ensure_ascii=False, default=str))


@app.command("lint", cls=PlainCommand)
@guarded
def tools_lint(paths: Annotated[list[Path], typer.Argument(help="Spec files or directories.")],
               strict: Annotated[bool, typer.Option(
                   "--strict", help="Check every spec for OpenAI strict mode, not only those "
                                    "that say \"strict\": true.")] = False):
    """Report what specs get wrong even when they load; exit 1 on any finding."""
    from ..errors import Unreadable
    from ..tools.lint import lint_file, spec_paths

    findings = unreadable = 0
    files = spec_paths(paths)
    for path in files:
        try:
            found = lint_file(path, strict=strict)
        except Unreadable as exc:
            unreadable += 1
            typer.echo(f"error: {exc}", err=True)
            continue
        findings += len(found)
        for line in found:
            typer.echo(line)
    if unreadable:
        raise typer.Exit(USAGE)
    if not findings:
        typer.echo(f"ok: {len(files)} file(s), no findings")
    raise typer.Exit(1 if findings else 0)


@app.command("scaffold", cls=PlainCommand)
@guarded
def tools_scaffold(spec: Annotated[Path, typer.Argument(help="Spec file.")],
                   out: Annotated[Path, typer.Option("--out", metavar="FILE",
                                                     help="Python module to write.")],
                   force: Annotated[bool, typer.Option(
                       "--force", help="Overwrite the --out file.")] = False):
    """Write a typed Python stub whose signatures match the spec's schemas."""
    from ..tools.scaffold import stub
    from ..tools.specs import load_tools

    if out.exists() and not force:
        fail(f"{out} exists; add --force to overwrite it", USAGE)
    text = stub(load_tools(spec), out.stem)
    try:
        out.write_text(text, encoding="utf-8")
    except OSError as exc:
        fail(f"{out}: cannot write: {exc.strerror or exc}", USAGE)
    typer.echo(f"wrote {out}")


@app.command("export", cls=PlainCommand)
@guarded
def tools_export(ref: Annotated[str, typer.Argument(help="module:function of a @tool.")]):
    """Print the JSON spec of a @tool function (a module in the current directory works)."""
    import sys

    from ..tools.scaffold import export

    if "" not in sys.path and "." not in sys.path:
        sys.path.append(".")
    typer.echo(json.dumps(export(ref), indent=2, ensure_ascii=False))


def _toolset(tools, mcp, mcp_config, mcp_prefix, no_core_tools, a2a=None):
    from ..tools.toolset import Toolset
    from .options import tool_sources

    return Toolset.build(tool_sources(tools or [], mcp or [], mcp_config or [], mcp_prefix,
                                      no_core_tools, a2a))


class _NoModel:
    """`tools call` runs no model; this one says so if anything asks it."""

    name = "none"

    def complete(self, messages, response_format, *, stop=None):
        raise UserError("no model is configured for `tools call`")
