"""The door: a bearer token, a loopback Host without one, and a cap on body size."""

from __future__ import annotations

import json
import secrets
from typing import Any
from urllib.parse import urlsplit

OPEN_PATHS = ("/", "/healthz", "/page/")
"""What answers without the token: the static page (it asks for the token) and the probe."""
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
        if self.token and not (path in OPEN_PATHS[:2] or path.startswith(OPEN_PATHS[2])):
            given = headers.get(b"authorization", b"").decode("latin-1")
            if not secrets.compare_digest(given.encode(), f"Bearer {self.token}".encode()):
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


def _hostname(host: str) -> str:
    """The name in a Host header, without its port; IPv6 without its brackets."""
    if host.startswith("["):
        return host[1:].split("]", 1)[0].lower()
    return host.rsplit(":", 1)[0].lower() if host.count(":") == 1 else host.lower()


async def _send(send, status: int, message: str, headers: list | None = None) -> None:
    body = json.dumps({"error": message}).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(body)).encode()), *(headers or [])]})
    await send({"type": "http.response.body", "body": body})
