"""The HTTP server: the REST API under /v1, server-sent events, A2A and the page at /.

Thin: every route reads the store or asks the `Runner`; the runs themselves go on in the
runner's worker threads.
"""

from __future__ import annotations

import asyncio
import json
import secrets
from contextlib import asynccontextmanager
from importlib import resources
from typing import Any, Literal
from urllib.parse import urlsplit

from fastapi import FastAPI, Header, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException
from pydantic import BaseModel, ConfigDict, Field, model_validator

from .. import status as status_table
from ..status import (INTERRUPTED, NEEDS_HUMAN, RESULTS, RUNNING, SERVER_FINAL,
                      SERVER_STATUSES, server_status)
from ..errors import Conflict, SessionBusy, Unknown
from .runner import Runner, public_status

MAX_BODY = 1 << 20
"""Bytes a request body may hold."""
OPEN_PATHS = ("/", "/healthz", "/page/")
"""What answers without the token: the static page (it asks for the token) and the probe."""
STATUSES = SERVER_STATUSES
STORED = {**status_table.STORED, server_status(RUNNING): (RUNNING, INTERRUPTED)}
"""The store's statuses behind each of the server's: a server's run whose process died is
stored as running, and shown in_progress, since a restarted server takes it over."""


class RunIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    input: str = Field(min_length=1, max_length=200_000)
    """The task, in plain words."""
    session: str | None = Field(None, min_length=1, max_length=200)
    """Continue (or start) this named conversation."""
    max_steps: int | None = Field(None, ge=1, le=1000)


class RespondIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    answer: str | None = Field(None, max_length=200_000)
    """The answer to the run's question."""
    approve: bool | None = None
    """The decision on the run's pending call."""
    reason: str | None = Field(None, max_length=10_000)
    """Why the call is refused; the model reads it."""

    @model_validator(mode="after")
    def _one(self) -> RespondIn:
        if (self.answer is None) == (self.approve is None):
            raise ValueError('send either {"answer": "..."} or {"approve": true|false}')
        return self


def run_view(info: Any) -> dict[str, Any]:
    state = info.state
    status = public_status(info)
    return {
        "id": info.id, "session": info.session or info.session_id, "session_id": info.session_id,
        "status": status, "input": info.question,
        "created_at": info.created_at, "updated_at": info.updated_at,
        "steps": [{"index": s.index, "thought": s.thought, "tool": s.tool, "args": s.args,
                   "observation": s.observation, "error": s.error,
                   "seconds": round(s.model_s + s.tool_s, 4)} for s in state.steps],
        "answer": state.answer, "error": state.error, "usage": state.usage.model_dump(),
        "result_status": state.status if state.status in RESULTS else None,
        "required_action": state.pending.model_dump()
        if status == server_status(NEEDS_HUMAN) and state.pending else None,
    }


def session_view(info: Any) -> dict[str, Any]:
    return {"id": info.id, "name": info.name, "runs": info.runs, "last_run": info.last_run,
            "last_status": info.last_status, "created_at": info.created_at,
            "updated_at": info.updated_at}


def _error(status: int, message: str, **extra: Any) -> JSONResponse:
    return JSONResponse({"error": message, **extra}, status_code=status)


def create_app(runner: Runner, token: str | None = None, base_url: str = "http://127.0.0.1:8321",
               max_body: int = MAX_BODY, allowed_hosts: tuple[str, ...] = ()) -> FastAPI:
    """`base_url` is where clients reach this server (the A2A agent card names it);
    `allowed_hosts` are Host names a tokenless server answers besides the loopback ones."""
    store = runner.store

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        runner.start()
        try:
            yield
        finally:
            await asyncio.to_thread(runner.stop)

    app = FastAPI(title="jsonagent", version="1", lifespan=lifespan, docs_url=None,
                  redoc_url=None)
    app.state.runner = runner

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError):
        problems = []
        for e in exc.errors():
            if e["type"] == "json_invalid":
                problems.append(f"the body is not valid JSON ({e.get('ctx', {}).get('error', '')})")
                continue
            where = ".".join(str(p) for p in e["loc"][1:]) or e["loc"][0]
            problems.append(f"{where}: {e['msg']}")
        return _error(422, "; ".join(problems) or "invalid request")

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException):
        if exc.status_code == 400 and "parsing the body" in str(exc.detail):
            return _error(422, "the body is not valid JSON text (UTF-8)")
        message = "no such route" if exc.status_code == 404 else str(exc.detail)
        return _error(exc.status_code, message)

    @app.exception_handler(Unknown)
    async def _unknown(request: Request, exc: Unknown):
        return _error(404, str(exc))

    @app.exception_handler(Conflict)
    async def _conflict(request: Request, exc: Conflict):
        return _error(409, str(exc))

    @app.exception_handler(SessionBusy)
    async def _busy(request: Request, exc: SessionBusy):
        return _error(409, str(exc))

    @app.get("/healthz", include_in_schema=False)
    def healthz():
        return {"ok": True}

    @app.post("/v1/runs", status_code=201)
    def create_run(body: RunIn) -> dict[str, Any]:
        run_id = runner.submit(body.input, body.session, body.max_steps)
        return run_view(runner.get(run_id))

    @app.get("/v1/runs")
    def list_runs(status: Literal[STATUSES] | None = None,  # type: ignore[valid-type]
                  session: str | None = Query(None, max_length=200),
                  limit: int = Query(20, ge=1, le=200), offset: int = Query(0, ge=0)):
        session_id = None
        if session is not None:
            found = store.find_session(session)
            if found is None:
                return {"data": [], "limit": limit, "offset": offset, "has_more": False}
            session_id = found.id
        if status is None:
            infos = store.runs(session_id, limit=limit + 1, offset=offset)
        elif not {RUNNING, INTERRUPTED} & set(STORED[status]):  # the store pages it
            infos = store.runs(session_id, STORED[status], limit=limit + 1, offset=offset)
        else:  # whether a run was orphaned decides between in_progress and cancelled
            infos = [i for i in store.runs(session_id, STORED[status], limit=10 ** 9)
                     if public_status(i) == status][offset:offset + limit + 1]
        return {"data": [run_view(i) for i in infos[:limit]], "limit": limit, "offset": offset,
                "has_more": len(infos) > limit}

    @app.get("/v1/runs/{run_id}")
    def get_run(run_id: str) -> dict[str, Any]:
        return run_view(runner.get(run_id))

    @app.post("/v1/runs/{run_id}/respond", status_code=202)
    def respond(run_id: str, body: RespondIn) -> dict[str, Any]:
        try:
            runner.respond(run_id, body.answer, body.approve, body.reason)
        except ValueError as exc:
            return _error(422, str(exc))
        return run_view(runner.get(run_id))

    @app.post("/v1/runs/{run_id}/cancel", status_code=202)
    def cancel(run_id: str) -> dict[str, Any]:
        runner.cancel(run_id)
        return run_view(runner.get(run_id))

    @app.get("/v1/runs/{run_id}/events")
    async def events(run_id: str, request: Request,
                     last_event_id: str | None = Header(None, alias="Last-Event-ID")):
        from sse_starlette.sse import EventSourceResponse

        await asyncio.to_thread(runner.get, run_id)  # 404 before the stream starts
        try:
            after = max(0, int(last_event_id or 0))
        except ValueError:
            return _error(422, "Last-Event-ID: not an event number")
        return EventSourceResponse(_stream(run_id, after, request), ping=10)

    async def _stream(run_id: str, after: int, request: Request):
        """Every event after `after`, as it is recorded; the stream ends with the run (a pause
        is not an end)."""
        while not runner.stopping.is_set():
            batch = await asyncio.to_thread(store.events, run_id, None, after)
            for event in batch:
                after = event["seq"]
                yield {"id": str(event["seq"]), "event": event["type"],
                       "data": json.dumps(event, ensure_ascii=False)}
                if event["type"] == "run_end" and event["status"] != NEEDS_HUMAN:
                    return
            if not batch:
                info = await asyncio.to_thread(runner.get, run_id)
                if public_status(info) in SERVER_FINAL and not \
                        await asyncio.to_thread(store.events, run_id, None, after):
                    return
                if await request.is_disconnected():
                    return
                await asyncio.sleep(0.1)

    @app.get("/v1/sessions")
    def list_sessions(limit: int = Query(50, ge=1, le=500), offset: int = Query(0, ge=0)):
        rows = store.sessions()
        return {"data": [session_view(s) for s in rows[offset:offset + limit]],
                "limit": limit, "offset": offset, "has_more": len(rows) > offset + limit}

    @app.get("/v1/sessions/{name:path}")
    def get_session(name: str):
        info = store.find_session(name)
        if info is None:
            raise Unknown(f"no session {name}")
        return session_view(info) | {"data": [run_view(i) for i in store.runs(info.id, limit=200)]}

    @app.get("/", include_in_schema=False)
    def page():
        return Response(_asset("index.html"), media_type="text/html; charset=utf-8",
                        headers={"Content-Security-Policy": CSP})

    @app.get("/page/{name}", include_in_schema=False)
    def asset(name: str):
        if name not in ASSETS:
            raise Unknown(f"no file {name}")
        return Response(_asset(name), media_type=ASSETS[name])

    from .a2a import mount

    mount(app, runner, base_url)
    app.add_middleware(Guard, token=token, max_body=max_body, allowed_hosts=allowed_hosts)
    return app


ASSETS = {"app.js": "text/javascript; charset=utf-8", "style.css": "text/css; charset=utf-8"}
CSP = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; object-src 'none'"


def _asset(name: str) -> bytes:
    return resources.files("jsonagent.server").joinpath("page", name).read_bytes()


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
