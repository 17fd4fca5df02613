"""Real HTTP servers on 127.0.0.1 that stand in for remote APIs in the tests.

    with FakeAPI({"/v1/x": lambda req: (200, {"ok": True})}) as api:
        api.url  -> "http://127.0.0.1:PORT"; api.requests -> what arrived

A route's function gets a Request and returns (status, body) or (status, body, headers);
a dict or list body is sent as JSON, bytes and str as they are, a Trickle a byte at a time.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable
from urllib.parse import parse_qs, urlsplit


class Trickle(bytes):
    """A body sent a byte at a time, `every` seconds apart, as a slowloris endpoint sends it:
    each read gets its byte in time, so only an overall deadline ends the wait."""

    def __new__(cls, data: bytes, every: float = 1.0):
        body = super().__new__(cls, data)
        body.every = every
        return body


@dataclass
class Request:
    method: str
    path: str
    """The raw path, still percent-encoded, without the query."""
    query: dict[str, str]
    headers: dict[str, str]
    body: Any = None
    extra: dict = field(default_factory=dict)


class FakeAPI:
    def __init__(self, routes: dict[str, Callable[[Request], tuple]], host: str = "127.0.0.1",
                 port: int = 0):
        self.routes = routes
        self.requests: list[Request] = []
        self.closed = threading.Event()
        api = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _any(self):
                parts = urlsplit(self.path)
                length = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    body = json.loads(raw) if raw else None
                except ValueError:
                    body = raw.decode("utf-8", "replace")
                req = Request(self.command, parts.path,
                              {k: v[0] for k, v in parse_qs(parts.query).items()},
                              {k.lower(): v for k, v in self.headers.items()}, body)
                api.requests.append(req)
                route = next((fn for prefix, fn in api.routes.items()
                              if parts.path.startswith(prefix)), None)
                out = route(req) if route else (404, {"error": "no route"})
                status, payload, headers = (out + ({},))[:3]
                if isinstance(payload, (dict, list)):
                    data = json.dumps(payload).encode()
                    headers = {"content-type": "application/json", **headers}
                else:
                    data = payload.encode() if isinstance(payload, str) else payload
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                if not isinstance(payload, Trickle):
                    self.wfile.write(data)
                    return
                for i in range(len(data)):
                    if api.closed.is_set():
                        return
                    self.wfile.write(data[i:i + 1])
                    time.sleep(payload.every)

            do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = _any

        class Server(ThreadingHTTPServer):
            def handle_error(self, request, client_address):
                pass  # a client that gave up (a timeout test) is not news

        self.server = Server((host, port), Handler)
        self.url = f"http://{host}:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> FakeAPI:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.closed.set()
        self.server.shutdown()
        self.server.server_close()
