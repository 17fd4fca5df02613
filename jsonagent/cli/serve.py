"""`jsonagent serve`: the agent over HTTP (REST, server-sent events, A2A, a page at /)."""

from __future__ import annotations

import ipaddress
import os
from typing import Annotated, Optional

import typer

from .exits import USAGE, fail, guarded
from ..config import REPLY_TOKENS
from .options import (A2aOpt, ApiKeyOpt, BaseUrlOpt, CheckAnswersOpt, ConfirmCodeOpt,
                      FallbackOnInvalidOpt, FallbackOpt, JsonModeOpt, LimitOpt,
                      MaxContextTokensOpt, MaxStepsOpt, McpConfigOpt, McpOpt, McpPrefixOpt,
                      ModelOpt, NoCoreToolsOpt, NoKvCacheOpt, OtelOpt, ParallelCallsOpt,
                      PromptStyleChoice, PromptStyleOpt, ReplyTokensOpt, RetriesOpt,
                      RunOptions, SandboxChoice, SandboxOpt, StoreOpt, TemperatureOpt,
                      ToolsOpt)
NEEDS = ("fastapi", "uvicorn", "sse_starlette", "a2a")


@guarded
def serve(ctx: typer.Context,
          host: Annotated[str, typer.Option("--host", metavar="HOST", help="Address to bind.")] = "127.0.0.1",
          port: Annotated[int, typer.Option("--port", min=0, max=65535, metavar="PORT",
                                                      help="Port to listen on.")] = 8321,
          workers: Annotated[int, typer.Option(
              "--workers", min=1, max=256, metavar="N",
              help="Runs that execute at once; the rest queue.")] = 4,
          token: Annotated[Optional[str], typer.Option(
              "--token", envvar="JSONAGENT_SERVER_TOKEN", show_envvar=True, metavar="TOKEN",
              help="Bearer token every API and A2A call must carry.")] = None,
          expire_after: Annotated[float, typer.Option(
              "--expire-after", min=1, metavar="SECONDS",
              help="A run waiting this long for a person becomes expired.")] = 86400.0,
          store: StoreOpt = None,
          node_id: Annotated[Optional[str], typer.Option(
              "--node-id", envvar="JSONAGENT_NODE_ID", show_envvar=True, metavar="ID",
              help="This server's name among the nodes sharing a store (default: one made up "
                   "once and kept in $JSONAGENT_HOME).")] = None,
          drain_timeout: Annotated[float, typer.Option(
              "--drain-timeout", min=0, max=3600, metavar="SECONDS",
              help="On SIGTERM, wait this long for the runs' current tool calls, then hand the "
                   "runs over to the other nodes (a second SIGTERM hands them over at once).")
          ] = 10.0,
          takeover_after: Annotated[float, typer.Option(
              "--takeover-after", min=1, max=3600, metavar="SECONDS",
              help="With a shared store (PostgreSQL), a run whose node died is taken over by "
                   "another node within this many seconds.")] = 15.0,
          allowed_host: Annotated[Optional[list[str]], typer.Option(
              "--allowed-host", metavar="NAME",
              help="A Host name to answer without a token, besides 127.0.0.1, localhost "
                   "and [::1] (repeatable).")] = None,
          # the shared run options; RunOptions.of(ctx) gathers them
          tools: ToolsOpt = None, mcp: McpOpt = None, mcp_config: McpConfigOpt = None,
          mcp_prefix: McpPrefixOpt = False, a2a: A2aOpt = None,
          no_core_tools: NoCoreToolsOpt = False,
          model: ModelOpt = None, base_url: BaseUrlOpt = None, api_key: ApiKeyOpt = None,
          fallback: FallbackOpt = None, retries: RetriesOpt = 3,
          fallback_on_invalid: FallbackOnInvalidOpt = None,
          max_steps: MaxStepsOpt = 10, max_context_tokens: MaxContextTokensOpt = None,
          reply_tokens: ReplyTokensOpt = REPLY_TOKENS,
          parallel_calls: ParallelCallsOpt = 1,
          temperature: TemperatureOpt = None,
          json_mode: JsonModeOpt = None, prompt_style: PromptStyleOpt = PromptStyleChoice.json,
          sandbox: SandboxOpt = SandboxChoice.auto, confirm_code: ConfirmCodeOpt = False,
          no_kv_cache: NoKvCacheOpt = False, otel: OtelOpt = False,
          check_answers: CheckAnswersOpt = None,
          limit: LimitOpt = None):
    """Serve the agent: REST under /v1, A2A, and a web page at /.

    Runs are kept in the same store as the CLI's sessions; a restart takes them over."""
    import importlib.util

    missing = [m for m in NEEDS if importlib.util.find_spec(m) is None]
    if missing:
        fail(f"serving needs {', '.join(missing)}: pip install 'jsonagent[serve]'", USAGE)
    if not _loopback(host) and not token:
        fail(f"--host {host} is reachable from other machines: set --token (or "
             "JSONAGENT_SERVER_TOKEN) first", USAGE)
    import uvicorn

    from ..server.app import create_app
    from ..server.runner import Runner
    from ..store import NODE_ENV, open_store

    _check_port(host, port)
    if node_id is not None:
        if not node_id.strip() or len(node_id) > 100:
            fail("--node-id takes 1 to 100 characters", USAGE)
        os.environ[NODE_ENV] = node_id  # owners name it; so do the processes this one starts
    kept = open_store(store, takeover_after=takeover_after)
    opts = RunOptions.of(ctx)
    opts.build_agent()  # bad options fail here, before the port is taken
    runner = Runner(lambda: opts.build_agent(store=kept), kept, workers, expire_after,
                    drain_timeout)
    app = create_app(runner, token=token, base_url=f"http://{_url_host(host)}:{port}",
                     allowed_hosts=tuple(allowed_host or ()))
    config = uvicorn.Config(app, host=host, port=port, log_level="warning",
                            timeout_graceful_shutdown=5, lifespan="on")
    typer.echo(f"jsonagent serving on http://{_url_host(host)}:{port}/ (model "
               f"{runner.front.deps.caps.name}, {workers} workers, node {kept.me.node}, "
               f"store {kept.path})", err=True)
    server = _server_class(runner)(config)
    server.run()
    kept.close()
    raise typer.Exit(0)


def _server_class(runner):
    import uvicorn

    class Server(uvicorn.Server):
        def handle_exit(self, sig, frame):
            # streams (SSE, A2A) end at once instead of holding the graceful shutdown open
            # (they are not cancels: clients follow the runs again on another node); the
            # workers finish their current tool call; a second signal hands the runs over now
            if runner.stopping.is_set():
                runner.hurry.set()
            runner.stopping.set()
            super().handle_exit(sig, frame)
            # uvicorn raises the signal again once it stopped; stopping is our normal end (0)
            self._captured_signals.clear()

    return Server


def _check_port(host: str, port: int) -> None:
    """A taken port or an unknown address is a bad option: say so in one line (exit 2)."""
    import socket

    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        with socket.socket(infos[0][0], socket.SOCK_STREAM) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(infos[0][4])
    except OSError as exc:
        fail(f"cannot listen on {host}:{port}: {exc.strerror or exc}", USAGE)


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


__all__ = ["serve"]
