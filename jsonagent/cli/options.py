"""The options every agent command shares (`run`, `chat`, ...), defined once.

`@run_options` adds them to a command's signature and hands the command one `RunOptions`
value instead; `RunOptions` holds plain data, so it can also travel to another process.
"""

from __future__ import annotations

import functools
import inspect
import json
import sys
from enum import Enum
from pathlib import Path
from typing import Annotated, Any, Optional, get_type_hints

import typer
from pydantic import BaseModel

from .exits import USAGE, fail


class JsonModeChoice(str, Enum):
    schema = "schema"
    object = "object"
    prompt = "prompt"


class PromptStyleChoice(str, Enum):
    json = "json"
    react = "react"


class SandboxChoice(str, Enum):
    auto = "auto"
    strict = "strict"


class OutputChoice(str, Enum):
    text = "text"
    json = "json"


class RunOptions(BaseModel):
    """What a command needs to build an agent: plain values only."""

    tools: list[Path] = []
    mcp: list[str] = []
    mcp_config: list[Path] = []
    mcp_prefix: bool = False
    no_core_tools: bool = False
    model: str | None = None
    base_url: str | None = None
    api_key: str | None = None
    max_steps: int = 10
    max_context_tokens: int | None = None
    json_mode: str | None = None
    prompt_style: str = "json"
    sandbox: str = "auto"
    confirm_code: bool = False
    no_kv_cache: bool = False
    given: set[str] = set()
    """The options set on the command line (the rest are defaults)."""

    def build_agent(self, ask_human=None, approve=None, on_event=None,
                    transcript: Path | None = None, store=None, on_status=None):
        """`on_status(text | None)` is told what slow thing happens now (a local model
        loading), and None when it is over."""
        from ..agent import Agent
        from ..config import AgentConfig
        from ..models import resolve_model
        from ..tools.core import CODE_TOOL

        config = AgentConfig(max_steps=self.max_steps, json_mode=self.json_mode,
                             prompt_style=self.prompt_style,
                             max_context_tokens=self.max_context_tokens,
                             require_isolation=self.sandbox == "strict",
                             confirm=[CODE_TOOL] if self.confirm_code else [])
        model = resolve_model(self.model, base_url=self.base_url, api_key=self.api_key,
                              kv_cache=not self.no_kv_cache, on_status=on_status)
        return Agent(model=model, tools=self.tool_sources(), ask_human=ask_human, approve=approve,
                     config=config, transcript=transcript, on_event=on_event, store=store,
                     origin=self.recorded())

    def recorded(self) -> dict[str, Any]:
        """What a stored run keeps of these options, so `resume` can build the agent again:
        never the API key, and tool files as absolute paths."""
        data = self.model_dump(mode="json", exclude={"api_key", "given"})
        data["tools"] = [str(Path(t).resolve()) for t in self.tools]
        data["mcp_config"] = [str(Path(t).resolve()) for t in self.mcp_config]
        return data

    def over(self, recorded: dict[str, Any]) -> RunOptions:
        """The recorded options, with those given on this command line on top."""
        base = RunOptions.model_validate({k: v for k, v in recorded.items()
                                          if k in RunOptions.model_fields})
        return base.model_copy(update={k: getattr(self, k) for k in self.given} | {
            "api_key": self.api_key, "given": self.given})

    def tool_sources(self) -> list:
        """The built-ins (unless --no-core-tools), then --tools, then the MCP servers."""
        return tool_sources(self.tools, self.mcp, self.mcp_config, self.mcp_prefix,
                            self.no_core_tools)


def tool_sources(tools: list[Path], mcp: list[str], mcp_config: list[Path],
                 mcp_prefix: bool = False, no_core_tools: bool = False) -> list:
    from ..tools.mcp import MCPServer, load_config
    from ..tools.toolset import core_tools

    servers = [MCPServer(target) for target in mcp]
    for path in mcp_config:
        servers += load_config(path)
    if mcp_prefix:  # each server's tools as NAME_tool, NAME being its config name or command
        for server in servers:
            server.prefix = _slug(server.name) + "_"
    return [*([] if no_core_tools else core_tools()), *tools, *servers]


def _slug(name: str) -> str:
    """A server's short name: its host for a URL, else the stem of the last word of its
    command ("python3 tools/server.py" -> "server"). A config entry keeps its own name."""
    import re
    from urllib.parse import urlsplit

    word = urlsplit(name).hostname or name if "://" in name else \
        Path(name.split()[-1]).name.split(".")[0]
    return re.sub(r"[^A-Za-z0-9_-]+", "_", word)[:24] or "mcp"


# name -> (annotation, default); each becomes a keyword parameter of the command.
_SHARED: dict[str, tuple[Any, Any]] = {
    "tools": (Annotated[Optional[list[Path]], typer.Option(
        "--tools", metavar="PATH",
        help="Tool spec file or directory of them (repeatable); adds to the built-ins.")], None),
    "mcp": (Annotated[Optional[list[str]], typer.Option(
        "--mcp", metavar="CMD|URL",
        help="MCP server (repeatable): a command line started over stdio, or a "
             "streamable-HTTP URL.")], None),
    "mcp_config": (Annotated[Optional[list[Path]], typer.Option(
        "--mcp-config", metavar="FILE",
        help='MCP servers from a {"mcpServers": {...}} file, as other MCP clients use.')], None),
    "mcp_prefix": (Annotated[bool, typer.Option(
        "--mcp-prefix", help="Name each MCP tool SERVER_tool, so two servers never collide.")],
        False),
    "no_core_tools": (Annotated[bool, typer.Option(
        "--no-core-tools", help="Leave out the built-in tools (the task-complete tool stays).")],
        False),
    "model": (Annotated[Optional[str], typer.Option(
        "--model", "-m", metavar="NAME",
        help="A model at the endpoint (or openai:NAME), local, local:NAME, local:PATH.gguf "
             "or scripted:FILE.json. Default: $JSONAGENT_MODEL.")], None),
    "base_url": (Annotated[Optional[str], typer.Option(
        "--base-url", metavar="URL",
        help="OpenAI-compatible endpoint. Default: $OPENAI_BASE_URL.")], None),
    "api_key": (Annotated[Optional[str], typer.Option(
        "--api-key", metavar="KEY", help="API key. Default: $OPENAI_API_KEY.")], None),
    "max_steps": (Annotated[int, typer.Option(
        "--max-steps", min=1, metavar="N", help="Tool calls allowed.")], 10),
    "max_context_tokens": (Annotated[Optional[int], typer.Option(
        "--max-context-tokens", min=256, metavar="N",
        help="Context budget: most tokens one request may carry; older turns are summarised "
             "to stay under it. Default: the model's window (local models), else none.")], None),
    "json_mode": (Annotated[Optional[JsonModeChoice], typer.Option(
        "--json-mode",
        help="How JSON is forced. Default: the model's own (object for endpoints).")], None),
    "prompt_style": (Annotated[PromptStyleChoice, typer.Option(
        "--prompt-style",
        help="json: one JSON step per reply. react: Thought/Action/Action Input text, for "
             "models trained on ReAct.")], PromptStyleChoice.json),
    "sandbox": (Annotated[SandboxChoice, typer.Option(
        "--sandbox", help="strict: refuse to run code unless every isolation is in force.")],
        SandboxChoice.auto),
    "confirm_code": (Annotated[bool, typer.Option(
        "--confirm-code", help="Ask before each run of the code interpreter.")], False),
    "no_kv_cache": (Annotated[bool, typer.Option(
        "--no-kv-cache",
        help="Local models: evaluate the system prompt again instead of loading it from "
             "$JSONAGENT_HOME/kv/.")], False),
}


def run_options(fn):
    """Add the shared options to `fn`'s signature; `fn` receives them as `opts: RunOptions`."""
    sig = inspect.signature(fn)
    hints = get_type_hints(fn, include_extras=True)  # typer needs objects, not strings
    own = [p.replace(annotation=hints.get(p.name, p.annotation))
           for p in sig.parameters.values() if p.name != "opts"]
    shared = [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, annotation=ann, default=dflt)
              for name, (ann, dflt) in _SHARED.items()]
    # typer fills a parameter typed Context in: it tells which options were given
    shared.append(inspect.Parameter("_click_ctx", inspect.Parameter.KEYWORD_ONLY,
                                    annotation=typer.Context))

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        values = {name: kwargs.pop(name) for name in _SHARED}
        values = {k: (v.value if isinstance(v, Enum) else v) for k, v in values.items()}
        for key in ("tools", "mcp", "mcp_config"):
            values[key] = values[key] or []
        given = _given(kwargs.pop("_click_ctx", None))
        return fn(*args, opts=RunOptions(**values, given=given), **kwargs)

    positional = [p for p in own if p.kind is not inspect.Parameter.KEYWORD_ONLY]
    keyword = [p for p in own if p.kind is inspect.Parameter.KEYWORD_ONLY]
    params = positional + keyword + shared
    wrapper.__signature__ = sig.replace(parameters=params)
    wrapper.__annotations__ = {p.name: p.annotation for p in params}
    return wrapper


def _given(ctx: typer.Context | None) -> set[str]:
    if ctx is None:
        return set()
    sources = {name: ctx.get_parameter_source(name) for name in _SHARED}
    return {name for name, source in sources.items()
            if source is not None and source.name != "DEFAULT"}


def text_arg(text: str) -> str:
    """Bytes that were not UTF-8 arrive as lone surrogates; make them visible, not fatal."""
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def json_arg(text: str, flag: str = "--args") -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        fail(f"{flag} is not valid JSON: {exc.msg} at column {exc.colno}", USAGE)


def interactive(no_input: bool) -> bool:
    return not no_input and sys.stdin.isatty()
