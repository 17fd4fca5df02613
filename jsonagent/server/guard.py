"""The door: a bearer token, a loopback Host without one, and a cap on body size."""

from __future__ import annotations

import json
import secrets
from typing import Any
from urllib.parse import urlsplit

OPEN_PATHS = ("/", "/healthz", "/.well-known/agent-card.json")
OPEN_PREFIX = "/page/"
"""What answers without the token: the static page (it asks for the token), the probe, and
the A2A agent card (discovery needs it; with a token it names no tool)."""
RPC_PATH = "/a2a"
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "::1")
UNSAFE_METHODS = ("POST", "PUT", "PATCH", "DELETE")


class Guard:
    """Bearer token on every route but the page and the probe, and a cap on body size
    (counted as the body arrives, whatever Content-Length says).

    Without a token, only a loopback Host (or an `allowed_hosts` name) is served, and a
    request that changes something must not come from a foreign page (Origin): a web page
    could otherwise reach a server on 127.0.0.1 by DNS rebinding and drive it."""

    def __init__(self, app: Any, token: str | None, max_body: int,
                 allowed_hosts: tuple[str, ...] = ()):
        self.app, self.token, self.max_body = app, token, max_body
        self.hosts = {*LOOPBACK_NAMES, *(h.lower() for h in allowed_hosts)}

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        path = scope["path"]
        headers = dict(scope["headers"])
        if not self.token:
            refused = self._foreign(headers, scope["method"])
            if refused:
                return await _send(send, 403, refused)
        if self.token and not (path in OPEN_PATHS or path.startswith(OPEN_PREFIX)):
            # the scheme is case-insensitive (RFC 7235): "bearer TOKEN" is as good
            scheme, _, given = headers.get(b"authorization", b"").decode("latin-1").partition(" ")
            if scheme.lower() != "bearer" or \
                    not secrets.compare_digest(given.strip().encode(), self.token.encode()):
                return await _send(send, 401, "missing or wrong bearer token",
                                   [(b"www-authenticate", b"Bearer")])
        try:
            declared = int(headers.get(b"content-length", b"0"))
        except ValueError:
            return await _send(send, 400, "bad Content-Length")
        if declared > self.max_body:
            return await _send(send, 413, f"body over {self.max_body} bytes")
        if scope["method"] in ("GET", "HEAD", "OPTIONS"):
            return await self.app(scope, receive, send)
        # bodies are small: read the whole body first, counting, whatever the headers said
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            if size > self.max_body:
                return await _send(send, 413, f"body over {self.max_body} bytes")
            if not message.get("more_body"):
                break
        body = b"".join(chunks)
        refused = _bad_body(headers, body)
        if refused:
            status, why = refused
            if path == RPC_PATH:  # a JSON-RPC client reads a JSON-RPC error
                return await _send_json(send, 400, {"jsonrpc": "2.0", "id": None, "error": {
                    "code": -32700, "message": f"Parse error: {why}"}})
            return await _send(send, status, why)
        sent = False

        async def replay():
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


    def _foreign(self, headers: dict, method: str) -> str | None:
        """Why a tokenless server refuses this request, or None."""
        host = headers.get(b"host", b"").decode("latin-1").strip()
        if _hostname(host) not in self.hosts:
            return (f"Host {host or '(none)'} is not this server's: without a token, only "
                    "127.0.0.1, localhost and [::1] are served (add names with "
                    "--allowed-host, or set --token)")
        origin = headers.get(b"origin")
        if origin is None or method not in UNSAFE_METHODS:
            return None
        origin = origin.decode("latin-1").strip()
        parts = urlsplit(origin)
        same = parts.netloc.lower() == host.lower()
        if not same and (parts.hostname or "").lower() not in self.hosts - set(LOOPBACK_NAMES):
            return (f"requests from the page at {origin} are refused: without a token, only "
                    "this server's own page may change anything (or set --token)")
        return None


NESTING = 200
"""Levels a request body's JSON may nest: as deep as pydantic's parser reads it."""
TOO_DEEP = f"the body is nested too deeply to read: more than {NESTING} levels"


def json_problem(reason: str) -> str:
    """pydantic's reason a body is no JSON, in one line. Past its recursion limit the body
    is valid JSON, only nested too deep: saying "not valid JSON" would send the client
    hunting for a syntax error that is not there."""
    return TOO_DEEP if "recursion limit" in reason else f"the body is not valid JSON ({reason})"


def _hostname(host: str) -> str:
    """The name in a Host header, without its port; IPv6 without its brackets."""
    if host.startswith("["):
        return host[1:].split("]", 1)[0].lower()
    return host.rsplit(":", 1)[0].lower() if host.count(":") == 1 else host.lower()


def _bad_body(headers: dict, body: bytes) -> tuple[int, str] | None:
    """The status and the reason to refuse a request body before a route parses it."""
    if not body:
        return None
    kind = headers.get(b"content-type", b"").decode("latin-1").split(";")[0].strip().lower()
    if kind != "application/json":
        return 415, (f"the body must be JSON, sent with Content-Type: application/json "
                     f"(this one came as {kind or 'no type'})")
    try:
        json.loads(body)
    except RecursionError:  # Python's own limit, about a thousand levels
        return 422, TOO_DEEP
    except ValueError:
        return None  # not JSON at all: the route says so, in its own words
    return None


async def _send(send, status: int, message: str, headers: list | None = None) -> None:
    await _send_json(send, status, {"error": message}, headers)


async def _send_json(send, status: int, payload: dict, headers: list | None = None) -> None:
    body = json.dumps(payload).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(body)).encode()), *(headers or [])]})
    await send({"type": "http.response.body", "body": body})
