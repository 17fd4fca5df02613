"""The options every agent command shares (`run`, `chat`, ...), defined once.

Each is an `Annotated` alias below; a command declares them as ordinary keyword parameters
and gathers them into one `RunOptions` with `RunOptions.of(ctx)`. `RunOptions` holds plain
data, so it can also travel to another process.
"""

from __future__ import annotations

import json
import sys
from enum import Enum
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from pydantic import BaseModel

from ..config import REPLY_TOKENS
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
    a2a: list[str] = []
    no_core_tools: bool = False
    model: str | None = None
    fallback: list[str] = []
    retries: int = 3
    fallback_on_invalid: int | None = None
    base_url: str | None = None
    api_key: str | None = None
    max_steps: int = 10
    parallel_calls: int = 1
    max_context_tokens: int | None = None
    reply_tokens: int = REPLY_TOKENS
    temperature: float | None = None
    json_mode: str | None = None
    prompt_style: str = "json"
    sandbox: str = "auto"
    confirm_code: bool = False
    no_kv_cache: bool = False
    otel: bool = False
    check_answers: bool | None = None
    limit: list[str] = []
    """Usage limits as NAME=VALUE (`--limit`), read by `usage_limits`."""
    given: set[str] = set()
    """The options set on the command line (the rest are defaults)."""

    @classmethod
    def of(cls, ctx: typer.Context) -> RunOptions:
        """The shared options as the command line of `ctx` set them. A command that lacks
        one of them fails here (KeyError), not by running with a silent default."""
        names = [name for name in cls.model_fields if name != "given"]
        values = {name: ctx.params[name] for name in names}
        values = {k: (v.value if isinstance(v, Enum) else v) for k, v in values.items()}
        for key in ("tools", "mcp", "mcp_config", "a2a", "fallback", "limit"):
            values[key] = list(values[key] or [])
        sources = {name: ctx.get_parameter_source(name) for name in names}
        given = {name for name, source in sources.items()
                 if source is not None and source.name != "DEFAULT"}
        return cls(**values, given=given)

    def build_agent(self, ask_human=None, approve=None, on_event=None,
                    transcript: Path | None = None, store=None, on_status=None,
                    deltas: bool = False):
        """`on_status(text | None)` is told what slow thing happens now (a local model
        loading), and None when it is over; with `deltas`, `on_event` gets each reply as
        it is written."""
        from ..agent import Agent
        from ..config import AgentConfig
        from ..models import resolve_model

        if self.otel:
            from .. import tracing

            tracing.switch_on()
        config = AgentConfig(**self.settings())
        # --model, then each --fallback, at --base-url unless it names its own (NAME@URL)
        models = [resolve_model(spec, base_url=self.base_url, api_key=self.api_key,
                                kv_cache=not self.no_kv_cache, on_status=on_status,
                                temperature=self.temperature, reply_tokens=config.reply_tokens)
                  for spec in [self.model, *self.fallback]]
        return Agent(model=models, tools=self.tool_sources(), ask_human=ask_human, approve=approve,
                     config=config, transcript=transcript, on_event=on_event, store=store,
                     origin=self.recorded(), deltas=deltas)

    def settings(self) -> dict[str, Any]:
        """The AgentConfig fields these options set."""
        from ..config import RetryConfig
        from ..tools.core import CODE_TOOL

        return dict(max_steps=self.max_steps, parallel_calls=self.parallel_calls,
                    json_mode=self.json_mode,
                    prompt_style=self.prompt_style, max_context_tokens=self.max_context_tokens,
                    reply_tokens=self.reply_tokens,
                    require_isolation=self.sandbox == "strict",
                    confirm=[CODE_TOOL] if self.confirm_code else [],
                    check_answers=self.check_answers,
                    retry=RetryConfig(retries=self.retries,
                                      fallback_on_invalid=self.fallback_on_invalid),
                    limits=usage_limits(self.limit))

    def recorded(self) -> dict[str, Any]:
        """What a stored run keeps of these options, so `resume` can build the agent again:
        never the API key, and tool files and scripts as absolute paths (resumed from any
        directory)."""
        from ..models import anchored

        # --otel is where this process sends its traces, not part of the agent: not kept
        data = self.model_dump(mode="json", exclude={"api_key", "given", "otel"})
        if self.model:
            data["model"] = anchored(self.model, ".")
        data["fallback"] = [anchored(f, ".") for f in self.fallback]
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
        """The built-ins (unless --no-core-tools), then --tools, then the MCP servers, then
        the remote A2A agents."""
        return tool_sources(self.tools, self.mcp, self.mcp_config, self.mcp_prefix,
                            self.no_core_tools, self.a2a)


def usage_limits(given: list[str]):
    """`--limit NAME=VALUE`s as a config.UsageLimits; a bad one is a usage error (exit 2)."""
    from ..config import UsageLimits
    from ..errors import ConfigError

    names = [n for n in UsageLimits.model_fields]
    values: dict[str, str] = {}
    for item in given:
        name, eq, value = item.partition("=")
        name = name.strip().replace("-", "_")
        if not eq or name not in names:
            raise ConfigError(f"--limit {item}: expected NAME=VALUE, NAME one of "
                              f"{', '.join(names)}")
        values[name] = value.strip().lstrip("$")
    try:
        return UsageLimits.model_validate(values)
    except ValueError as exc:
        first = exc.errors()[0]
        raise ConfigError(f"--limit {first['loc'][0]}={values[first['loc'][0]]}: "
                          f"{first['msg']}") from None


def tool_sources(tools: list[Path], mcp: list[str], mcp_config: list[Path],
                 mcp_prefix: bool = False, no_core_tools: bool = False,
                 a2a: list[str] | None = None) -> list:
    from ..tools.a2a import A2AAgent
    from ..tools.mcp import MCPServer, load_config
    from ..tools.toolset import core_tools

    servers = [MCPServer(target) for target in mcp]
    for path in mcp_config:
        servers += load_config(path)
    if mcp_prefix:  # each server's tools as NAME_tool, NAME being its config name or command
        for server in servers:
            server.prefix = _slug(server.name) + "_"
    remote = [A2AAgent(url) for url in a2a or []]
    return [*([] if no_core_tools else core_tools()), *tools, *servers, *remote]


def _slug(name: str) -> str:
    """A server's short name: its host for a URL, else the stem of the last word of its
    command ("python3 tools/server.py" -> "server"). A config entry keeps its own name."""
    import re
    from urllib.parse import urlsplit

    word = urlsplit(name).hostname or name if "://" in name else \
        Path(name.split()[-1]).name.split(".")[0]
    return re.sub(r"[^A-Za-z0-9_-]+", "_", word)[:24] or "mcp"


# The shared run options, each defined once. A command declares them as keyword parameters,
# after its own (the help lists them in this order), with the defaults RunOptions has, and
# gathers them with RunOptions.of(ctx); the help snapshots pin the defaults of every command.
ToolsOpt = Annotated[Optional[list[Path]], typer.Option(
    "--tools", metavar="PATH",
    help="Tool spec file or directory of them (repeatable); adds to the built-ins.")]
McpOpt = Annotated[Optional[list[str]], typer.Option(
    "--mcp", metavar="CMD|URL",
    help="MCP server (repeatable): a command line started over stdio, or a "
         "streamable-HTTP URL.")]
McpConfigOpt = Annotated[Optional[list[Path]], typer.Option(
    "--mcp-config", metavar="FILE",
    help='MCP servers from a {"mcpServers": {...}} file, as other MCP clients use.')]
McpPrefixOpt = Annotated[bool, typer.Option(
    "--mcp-prefix", help="Name each MCP tool SERVER_tool, so two servers never collide.")]
A2aOpt = Annotated[Optional[list[str]], typer.Option(
    "--a2a", metavar="URL",
    help="A remote agent over A2A, as one more tool (repeatable): its card names and "
         "describes it.")]
NoCoreToolsOpt = Annotated[bool, typer.Option(
    "--no-core-tools", help="Leave out the built-in tools (the task-complete tool stays).")]
ModelOpt = Annotated[Optional[str], typer.Option(
    "--model", "-m", metavar="NAME",
    help="A model at the endpoint (or openai:NAME), local, local:NAME, local:PATH.gguf "
         "or scripted:FILE.json. Default: $JSONAGENT_MODEL.")]
FallbackOpt = Annotated[Optional[list[str]], typer.Option(
    "--fallback", metavar="NAME",
    help="A model that takes a request over when the one before it fails for good or runs "
         "out of retries (repeatable, in order). Takes what --model takes, at --base-url "
         "unless given as NAME@URL.")]
RetriesOpt = Annotated[int, typer.Option(
    "--retries", min=0, metavar="N",
    help="Tries again of a request that was rate limited, overloaded or timed out, with "
         "backoff (the endpoint's Retry-After when given), before the next model.")]
FallbackOnInvalidOpt = Annotated[Optional[int], typer.Option(
    "--fallback-on-invalid", min=1, metavar="N",
    help="Hand over to the next --fallback after N replies in a row that could not be "
         "repaired.")]
BaseUrlOpt = Annotated[Optional[str], typer.Option(
    "--base-url", metavar="URL", help="OpenAI-compatible endpoint. Default: $OPENAI_BASE_URL.")]
ApiKeyOpt = Annotated[Optional[str], typer.Option(
    "--api-key", metavar="KEY", help="API key. Default: $OPENAI_API_KEY.")]
MaxStepsOpt = Annotated[int, typer.Option(
    "--max-steps", min=1, metavar="N", help="Tool calls allowed.")]
ParallelCallsOpt = Annotated[int, typer.Option(
    "--parallel-calls", min=1, metavar="N",
    help="Tool calls one step may make, run side by side (1: one a step).")]
MaxContextTokensOpt = Annotated[Optional[int], typer.Option(
    "--max-context-tokens", min=256, metavar="N",
    help="Context budget: most tokens one request may carry; older turns are summarised "
         "to stay under it. Default: the model's window (local models), else none.")]
ReplyTokensOpt = Annotated[int, typer.Option(
    "--reply-tokens", min=16, metavar="N",
    help="Most tokens one reply may have (the max_tokens of each request); a reply cut "
         "there is asked for again, and nothing in it runs.")]
TemperatureOpt = Annotated[Optional[float], typer.Option(
    "--temperature", min=0.0, metavar="T",
    help="Sampling temperature. Default: 0, which makes runs repeatable (endpoints too).")]
JsonModeOpt = Annotated[Optional[JsonModeChoice], typer.Option(
    "--json-mode",
    help="How JSON is forced. Default: the model's own (object for endpoints).")]
PromptStyleOpt = Annotated[PromptStyleChoice, typer.Option(
    "--prompt-style",
    help="json: one JSON step per reply. react: Thought/Action/Action Input text, for "
         "models trained on ReAct.")]
SandboxOpt = Annotated[SandboxChoice, typer.Option(
    "--sandbox", help="strict: refuse to run code unless every isolation is in force.")]
ConfirmCodeOpt = Annotated[bool, typer.Option(
    "--confirm-code", help="Ask before each run of the code interpreter.")]
NoKvCacheOpt = Annotated[bool, typer.Option(
    "--no-kv-cache",
    help="Local models: evaluate the system prompt again instead of loading it from "
         "$JSONAGENT_HOME/kv/.")]
LimitOpt = Annotated[Optional[list[str]], typer.Option(
    "--limit", metavar="NAME=VALUE",
    help="A usage limit for each run (repeatable): requests, tool_calls, input_tokens, "
         "output_tokens, total_tokens or cost (US dollars). Reaching one ends the run "
         "limit_reached; the model is told what is left from warn_at (0.8) of it on.")]
OtelOpt = Annotated[bool, typer.Option(
    "--otel",
    help="Send OpenTelemetry traces and metrics over OTLP/HTTP (to "
         "$OTEL_EXPORTER_OTLP_ENDPOINT, default http://localhost:4318); needs the otel extra.")]
CheckAnswersOpt = Annotated[Optional[bool], typer.Option(
    "--check-answers/--no-check-answers",
    help="Look for each number of the final answer in what the question, the tools and the "
         "person said; one found nowhere is sent back once to be computed or confirmed. "
         "Default: on (off for scripted models).")]


StoreOpt = Annotated[Optional[str], typer.Option(
    "--store", envvar="JSONAGENT_STORE", show_envvar=True, metavar="URL|FILE",
    help="Where runs are kept: postgresql://USER:PASSWORD@HOST/DB, shared by several servers "
         "and machines, or a SQLite file. Default: $JSONAGENT_HOME/jsonagent.db.")]


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


# -- many runs: batch and eval --------------------------------------------------------------

class BackendChoice(str, Enum):
    local = "local"
    ray = "ray"


WorkersOpt = Annotated[Optional[int], typer.Option(
    "--workers", "-w", min=1, metavar="N",
    help="Worker processes (local; default 1), or tasks in flight (ray; default the cluster's "
         "CPUs).")]
BackendOpt = Annotated[BackendChoice, typer.Option("--backend")]
RayAddressOpt = Annotated[Optional[str], typer.Option(
    "--ray-address", metavar="ADDR", help="Ray cluster to use. Default: start a local Ray.")]
TaskTimeoutOpt = Annotated[Optional[float], typer.Option(
    "--task-timeout", min=0.001, metavar="SECONDS",
    help="Give up on a task after this long; it is recorded as failed.")]
