"""A real MCP server for the tests, written with the SDK.

    python demo_server.py [--http PORT] [--hang-at-start] [--pid-file FILE]

Tools: add, echo, forecast (structured output), picture (an image), getenv, meta (the
request's `_meta`), fail (reports an error), crash (the process dies mid-call) and sleep
(never answers in time).
"""

import argparse
import asyncio
import os
import sys
from contextlib import asynccontextmanager

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.utilities.types import Image
from pydantic import BaseModel

parser = argparse.ArgumentParser()
parser.add_argument("--http", type=int, default=0)
parser.add_argument("--hang-at-start", action="store_true")
parser.add_argument("--pid-file")
opts = parser.parse_args()

if opts.pid_file:
    with open(opts.pid_file, "w") as f:
        f.write(str(os.getpid()))


@asynccontextmanager
async def lifespan(server):
    if opts.hang_at_start:
        await asyncio.sleep(3600)  # never answers initialize
    yield {}


server = MCPServer("demo", lifespan=lifespan)


@server.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@server.tool()
def echo(text: str) -> str:
    """Say the text back."""
    return text


class Forecast(BaseModel):
    city: str
    celsius: float


@server.tool()
def forecast(city: str) -> Forecast:
    """Tomorrow's temperature in a city."""
    return Forecast(city=city, celsius=21.5)


@server.tool()
def picture() -> Image:
    """A one-pixel PNG."""
    return Image(data=b"\x89PNG\r\n\x1a\n" + b"\0" * 16, format="png")


@server.tool()
def fail(reason: str) -> str:
    """Always fails, as a tool failure the server saw coming."""
    raise ToolError(f"cannot do that: {reason}")


@server.tool()
def crash() -> str:
    """Kills the server process in the middle of the call."""
    sys.stderr.write("demo server: crashing on purpose\n")
    sys.stderr.flush()
    os._exit(3)


@server.tool()
def getenv(name: str) -> str:
    """One variable of the server's environment, or "" when it is not set."""
    return os.environ.get(name, "")


@server.tool()
def meta(ctx: Context) -> dict:
    """The `_meta` this request carried, as the server received it."""
    return dict(ctx.request_context.meta or {})


@server.tool()
async def sleep(seconds: float) -> str:
    """Sleeps, longer than any test waits."""
    if opts.pid_file:
        open(opts.pid_file + ".sleeping", "w").close()
    end = asyncio.get_running_loop().time() + seconds
    try:  # until the time is up, or the test releases it
        while asyncio.get_running_loop().time() < end and not (
                opts.pid_file and os.path.exists(opts.pid_file + ".release")):
            await asyncio.sleep(0.02)
    except asyncio.CancelledError:  # the client sent notifications/cancelled
        if opts.pid_file:
            open(opts.pid_file + ".cancelled", "w").close()
        raise
    return "woke up"


if opts.http:
    server.run("streamable-http", host="127.0.0.1", port=opts.http)
else:
    server.run()
