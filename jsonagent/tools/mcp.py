"""MCP servers as tool sources, with the official `mcp` SDK.

    MCPServer("python server.py")            a stdio server: a command we start and stop
    MCPServer("http://127.0.0.1:8000/mcp")   a streamable-HTTP server: a URL we connect to

The SDK is async and the loop is sync: each server gets one event-loop thread, and every
await on it is bounded (start-up and each call), since the SDK's own waits can be endless.
The stdio transport starts the server in its own process group and kills the group when the
connection closes; `close()` closes it, the Toolset calls `close()`, and an atexit hook
closes whatever is still open when the interpreter exits, so no server outlives us.

This module is the client. What a tool's result becomes for the model is in mcp_result.py,
and the "mcpServers" config file is parsed in mcp_config.py.
"""

from __future__ import annotations

import atexit
import os
import shlex
import tempfile
import threading
import weakref
from pathlib import Path
from typing import Any

from ..calls import KEY_META, Effects, current_key
from ..cancel import quiet, watching
from ..errors import ConfigError, SpecError, ToolError
from .mcp_config import config_entries
from .mcp_result import observation
from .processes import kill_pgid
from .specs import ToolSpec

START_TIMEOUT = 30.0
CALL_TIMEOUT = 60.0
_CLOSE_TIMEOUT = 10.0  # the SDK's own shutdown: 2 s for stdin, 2 s after SIGTERM, then SIGKILL
_OPEN: "weakref.WeakSet[MCPServer]" = weakref.WeakSet()


class MCPServer:
    """One MCP server whose tools join a run's toolset.

    `target` is a URL (streamable HTTP), a command line string, or an argv list (stdio).
    `env` is added to an allowlisted environment: the agent's API keys never reach the server.
    `prefix` namespaces its tool names ("gh_" makes "search" into "gh_search").
    Timeouts default to $JSONAGENT_MCP_START_TIMEOUT (30 s) and $JSONAGENT_MCP_CALL_TIMEOUT (60 s).
    """

    def __init__(self, target: str | list[str], *, name: str | None = None,
                 env: dict[str, str] | None = None, headers: dict[str, str] | None = None,
                 prefix: str = "", cwd: str | Path | None = None,
                 start_timeout: float | None = None, call_timeout: float | None = None,
                 effects: Effects | None = None):
        if isinstance(target, str) and target.startswith(("http://", "https://")):
            self.url: str | None = target
            self.argv: list[str] = []
        else:
            self.url = None
            self.argv = shlex.split(target) if isinstance(target, str) else list(target)
            if not self.argv:
                raise ConfigError("an MCP server needs a command or a URL")
        self.name = name or self.url or _short_name(self.argv)
        self.env = dict(env or {})
        self.headers = dict(headers or {})
        self.prefix = prefix
        self.cwd = cwd
        self.effects = effects
        """What running a call of its tools twice does (calls.py); None: unknown."""
        self.start_timeout = start_timeout or _seconds("JSONAGENT_MCP_START_TIMEOUT", START_TIMEOUT)
        self.call_timeout = call_timeout or _seconds("JSONAGENT_MCP_CALL_TIMEOUT", CALL_TIMEOUT)
        self.pid: int | None = None
        """The stdio server's process id, once started."""
        self._loop = None
        self._thread: threading.Thread | None = None
        self._client = None
        self._stop = None
        self._done = None
        self._tools: list[Any] = []
        self._stderr = None
        self._lock = threading.RLock()

    def __repr__(self) -> str:
        return f"MCPServer({self.name!r})"

    @property
    def is_open(self) -> bool:
        return self._thread is not None

    @property
    def origin(self) -> str:
        return f"mcp:{self.name}"

    def open(self) -> list[Any]:
        """Start or connect, list the tools, and return them as Tools; idempotent."""
        with self._lock:
            if self._thread is None:
                self._start()
        return self._tools

    def _start(self) -> None:
        import asyncio
        import concurrent.futures

        try:
            import mcp  # noqa: F401
        except ImportError:
            raise ConfigError("MCP servers need the mcp package: pip install 'jsonagent[mcp]'") \
                from None
        ready: concurrent.futures.Future = concurrent.futures.Future()
        self._loop = asyncio.new_event_loop()
        self._thread = quiet(threading.Thread(target=self._loop.run_forever, daemon=True,
                                              name=f"mcp {self.name}"))
        self._thread.start()
        _OPEN.add(self)
        self._done = asyncio.run_coroutine_threadsafe(self._serve(ready), self._loop)
        try:
            listed = ready.result(timeout=self.start_timeout + _CLOSE_TIMEOUT)
        except concurrent.futures.TimeoutError:
            self.close()
            raise ConfigError(f"MCP server {self.name}: no answer within "
                              f"{self.start_timeout:g} s of starting") from None
        except BaseException as exc:
            self.close()
            if isinstance(exc, (ConfigError, KeyboardInterrupt, SystemExit)):
                raise
            raise ConfigError(f"MCP server {self.name}: {_describe(exc)}"
                              f"{self._stderr_tail()}") from None
        try:  # a tool whose schema is refused (a remote $ref, a loop) refuses the server
            self._tools = [self._tool(t) for t in listed]
        except SpecError:
            self.close()
            raise

    async def _serve(self, ready) -> None:
        """Holds the connection open in one task (the SDK's cancel scopes need that) until
        close() sets the stop event. The start-up runs under a deadline, lifted once the
        tools are listed."""
        import asyncio
        import math

        import anyio
        from mcp import Client

        self._stop = asyncio.Event()
        try:
            with anyio.CancelScope(deadline=anyio.current_time() + self.start_timeout) as scope:
                async with Client(self._transport(), mode="legacy") as client:
                    tools, cursor = [], None
                    while True:
                        page = await client.list_tools(cursor=cursor)
                        tools.extend(page.tools)
                        cursor = page.next_cursor
                        if not cursor:
                            break
                    scope.deadline = math.inf
                    self._client = client
                    ready.set_result(tools)
                    try:
                        await self._stop.wait()
                    finally:
                        self._client = None
            if scope.cancelled_caught and not ready.done():
                ready.set_exception(ConfigError(
                    f"MCP server {self.name}: no answer within {self.start_timeout:g} s of "
                    f"starting{self._stderr_tail()}"))
        except BaseException as exc:
            if not ready.done():
                ready.set_exception(exc)
            elif not isinstance(exc, Exception):
                raise
        finally:
            if not ready.done():
                ready.set_exception(ConfigError(f"MCP server {self.name}: closed while starting"))

    def _transport(self):
        if self.url is not None:
            from mcp.client.streamable_http import streamable_http_client
            from mcp.shared._httpx_utils import create_mcp_http_client
            import httpx2

            http = create_mcp_http_client(headers=self.headers or None, timeout=httpx2.Timeout(
                self.start_timeout, read=max(self.call_timeout, self.start_timeout)))
            return _OwnedHttp(streamable_http_client(self.url, http_client=http), http)
        from mcp import StdioServerParameters
        from mcp.client.stdio import stdio_client

        from .handlers import base_env

        self._stderr = tempfile.TemporaryFile()
        params = StdioServerParameters(command=self.argv[0], args=self.argv[1:],
                                       env=base_env(self.env),
                                       cwd=str(self.cwd) if self.cwd else None)
        return _Pid(stdio_client(params, errlog=self._stderr), self)

    def _tool(self, listed) -> Any:
        from .tool import Tool

        spec = ToolSpec.from_dict({"name": self.prefix + listed.name,
                                   "description": listed.description or "",
                                   "parameters": listed.input_schema or {"type": "object"},
                                   **({"returns": listed.output_schema}
                                      if listed.output_schema else {}),
                                   **({"effects": self.effects} if self.effects else {})},
                                  origin=self.origin)
        return Tool(spec=spec, fn=_Call(self, listed.name))

    def call(self, name: str, args: dict[str, Any]) -> Any:
        """Call a tool by its name on the server; the observation, or a ToolError."""
        import asyncio
        import concurrent.futures

        if self._loop is None or self._client is None or self._done is None or self._done.done():
            raise ToolError(f"MCP server {self.name} is not running{self._stderr_tail()}")

        # read here, in the tool call's context: the coroutine runs in the client's loop
        key = current_key()
        meta = {KEY_META: key} if key else None

        async def call():
            import anyio

            with anyio.fail_after(self.call_timeout):
                return await self._client.call_tool(name, args, meta=meta)

        future = asyncio.run_coroutine_threadsafe(call(), self._loop)
        try:
            # a cancel of the run cancels the request (the SDK tells the server so); the
            # server and its connection stay up for the next call
            with watching(future.cancel):
                result = future.result(timeout=self.call_timeout + 1)
        except (TimeoutError, concurrent.futures.TimeoutError):
            future.cancel()
            raise ToolError(f"MCP server {self.name}: {name} got no answer within "
                            f"{self.call_timeout:g} s") from None
        except BaseException as exc:
            if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                future.cancel()
                raise
            why = self._exited() or _describe(exc)
            if why == "Connection closed":
                why = "the server closed the connection (it exited or crashed)"
            raise ToolError(f"MCP server {self.name}: {name} failed: {why}"
                            f"{self._stderr_tail()}") from None
        return observation(result, self.name, name)

    def _exited(self) -> str | None:
        """'the server process exited' once the stdio server is gone (or a zombie)."""
        if self.pid is None:
            return None
        try:
            state = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            return "the server process exited" if Path("/proc/self").exists() else None
        return "the server process exited" if state == "Z" else None

    def _stderr_tail(self) -> str:
        if self._stderr is None:
            return ""
        try:
            self._stderr.seek(0)
            lines = [ln for ln in self._stderr.read().decode("utf-8", "replace").splitlines()
                     if ln.strip()]
        except (OSError, ValueError):
            return ""
        return f" (its stderr: {lines[-1].strip()[:200]})" if lines else ""

    def close(self) -> None:
        """Disconnect and, for a stdio server, stop its process group. Safe to call twice."""
        with self._lock:
            loop, thread, self._thread = self._loop, self._thread, None
        if loop is None or thread is None:
            return
        _OPEN.discard(self)
        if self._stop is not None:
            loop.call_soon_threadsafe(self._stop.set)
        if self._done is not None:
            try:
                self._done.result(timeout=_CLOSE_TIMEOUT)
            except BaseException:
                self._done.cancel()
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=_CLOSE_TIMEOUT)
        kill_pgid(self.pid)  # last resort: the SDK's shutdown left the server alive
        if not thread.is_alive():
            loop.close()
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None
        self._loop = None

    def __enter__(self) -> MCPServer:
        self.open()
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class _Call:
    """The function behind one MCP tool; `source` tells the toolset where it comes from."""

    stops_on_cancel = True  # a cancel cancels the request (see MCPServer.call)

    def __init__(self, server: MCPServer, name: str):
        self.server, self.name, self.source = server, name, server.origin

    def __call__(self, **args: Any) -> Any:
        return self.server.call(self.name, args)


class _Pid:
    """Wraps the stdio transport to learn the server's pid (for orphan checks and crash text)."""

    def __init__(self, inner, server: MCPServer):
        self.inner, self.server = inner, server

    async def __aenter__(self):
        streams = await self.inner.__aenter__()
        # stdio_client keeps the process in its frame; the SDK offers no handle to it.
        frame = getattr(self.inner, "gen", None)
        process = frame.ag_frame.f_locals.get("process") if frame is not None and \
            frame.ag_frame is not None else None
        self.server.pid = getattr(process, "pid", None)
        return streams

    async def __aexit__(self, *exc):
        return await self.inner.__aexit__(*exc)


class _OwnedHttp:
    """The streamable-HTTP transport plus the httpx client it uses, closed together."""

    def __init__(self, inner, http):
        self.inner, self.http = inner, http

    async def __aenter__(self):
        await self.http.__aenter__()
        return await self.inner.__aenter__()

    async def __aexit__(self, *exc):
        try:
            return await self.inner.__aexit__(*exc)
        finally:
            await self.http.__aexit__(None, None, None)


def _short_name(argv: list[str]) -> str:
    """'python3 server.py' for 'python3 /long/path/server.py --flag x': for messages."""
    first = next((a for a in argv[1:] if not a.startswith("-")), None)
    return " ".join(Path(a).name for a in [argv[0]] + ([first] if first else []))


def _seconds(var: str, default: float) -> float:
    text = os.environ.get(var)
    if not text:
        return default
    try:
        value = float(text)
    except ValueError:
        value = 0
    if value <= 0:
        raise ConfigError(f"{var}={text!r}: give a number of seconds above 0")
    return value


def _describe(exc: BaseException) -> str:
    if hasattr(exc, "exceptions"):  # an ExceptionGroup from the SDK's task groups
        return "; ".join(_describe(e) for e in exc.exceptions)
    if isinstance(exc, FileNotFoundError):
        return f"command not found: {exc.filename or exc}"
    text = str(exc) or type(exc).__name__
    return " ".join(text.split())[:300]


def load_config(path: str | Path, **options: Any) -> list[MCPServer]:
    """The {"mcpServers": {NAME: {command, args, env} or {url, headers}}} file other MCP
    clients use; `${env:NAME}` in env and headers reads our environment."""
    return [MCPServer(target, **keywords, **options) for target, keywords in config_entries(path)]


@atexit.register
def _close_open() -> None:
    for server in list(_OPEN):
        try:
            server.close()
        except Exception:
            pass
