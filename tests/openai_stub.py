"""A small OpenAI-compatible HTTP server on 127.0.0.1, standing in for a remote API."""

from __future__ import annotations

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def completion(text: str, prompt_tokens: int = 11, completion_tokens: int = 7, cached: int = 0):
    return {
        "id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": "stub",
        "choices": [{"index": 0, "finish_reason": "stop",
                     "message": {"role": "assistant", "content": text}}],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                  "total_tokens": prompt_tokens + completion_tokens,
                  "prompt_tokens_details": {"cached_tokens": cached}},
    }


class Chunks(list):
    """The chunks of a streamed reply, `delay` seconds apart; with `cut_after`, the
    connection drops after that many, mid-body, as a proxy or a crashed server leaves it.
    `framing` is how the body's end is told: "length" (a body promised longer than it gets,
    when it is cut), "chunked", or "close" (HTTP/1.0's: the connection's close is the end,
    so a cut shows no error). `done`: [DONE] comes after the chunks."""

    delay = 0.0
    cut_after: int | None = None
    framing = "length"
    done = True


def streamed(pieces: list[str], prompt_tokens: int = 11, completion_tokens: int = 7) -> Chunks:
    """A reply written in `pieces`, with the usage in a last chunk of its own (include_usage)."""
    base = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 0, "model": "stub"}
    out = Chunks({**base, "choices": [{"index": 0, "delta": {"content": p}, "finish_reason": None}]}
                 for p in pieces)
    out.append({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    out.append({**base, "choices": [], "usage": {
        "prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens}})
    return out


class OpenAIStub:
    """Answers POST /v1/chat/completions from a script of (status, body) pairs or a function."""

    def __init__(self, script=None):
        self.script = list(script or [])
        self.requests: list[dict] = []
        self.hung_up = threading.Event()
        """A client closed a streamed reply before its end."""
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))))
                stub.requests.append({"path": self.path, "body": body,
                                      "auth": self.headers.get("authorization")})
                status, payload, *extra = stub.next(body)
                headers = extra[0] if extra else {}  # (status, body, headers): a Retry-After
                if isinstance(payload, Chunks):  # a streamed reply: server-sent events
                    chunked = payload.framing == "chunked"
                    if chunked:
                        self.protocol_version = "HTTP/1.1"
                    self.send_response(status)
                    self.send_header("content-type", "text/event-stream")
                    if chunked:
                        self.send_header("transfer-encoding", "chunked")
                    elif payload.cut_after is not None and payload.framing == "length":
                        self.send_header("content-length", "1000000")
                    self.end_headers()

                    def write(data: bytes) -> None:
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data) if chunked else data)
                        self.wfile.flush()
                    try:
                        for i, chunk in enumerate(payload):
                            if i == payload.cut_after:
                                self.wfile.flush()
                                self.connection.shutdown(socket.SHUT_RDWR)
                                self.close_connection = True
                                return
                            data = chunk if isinstance(chunk, str) else json.dumps(chunk)
                            write(f"data: {data}\n\n".encode())  # a str: a line as it is
                            time.sleep(payload.delay)
                        if payload.done:
                            write(b"data: [DONE]\n\n")
                        if chunked:
                            self.wfile.write(b"0\r\n\r\n")
                        self.close_connection = True
                    except OSError:  # the client closed the stream
                        stub.hung_up.set()
                    return
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                for key, value in headers.items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        class Server(ThreadingHTTPServer):
            def handle_error(self, request, client_address):
                pass  # a client that timed out and hung up is what some tests are about

        self.server = Server(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def next(self, body):
        item = self.script.pop(0) if self.script else (500, {"error": {"message": "script empty"}})
        if callable(item):
            item = item(body)
        if isinstance(item, str):  # a reply's text, written as the request asks, as servers do
            item = (200, streamed([item]) if body.get("stream") else completion(item))
        return item

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


def error(status: int, message: str):
    return (status, {"error": {"message": message, "type": "invalid_request_error"}})


if __name__ == "__main__":  # used by the CLI tests: serve a script given as a JSON file
    import sys
    import time

    script = json.load(open(sys.argv[1]))
    with OpenAIStub([tuple(x) if isinstance(x, list) else x for x in script]) as s:
        print(s.url, flush=True)
        time.sleep(float(sys.argv[2]) if len(sys.argv) > 2 else 60)
