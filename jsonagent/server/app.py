"""The HTTP server: the REST API under /v1 (routes.py), server-sent events, A2A, AG-UI at
/ag-ui (agui.py) and the page at /, behind the guard (guard.py).

Thin: every route reads the store or asks the `Runner`; the runs themselves go on in the
runner's worker threads.
"""

from __future__ import annotations

import asyncio
import logging
from contextlib import asynccontextmanager
from importlib import resources

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from ..errors import Conflict, SessionBusy, StoreDown, Unknown
from .guard import Guard, json_problem
from .routes import router
from .runner import Runner
from .shapes import error as _error
from .wakeups import Wakeups

log = logging.getLogger("jsonagent.server")

MAX_BODY = 1 << 20
"""Bytes a request body may hold."""


def create_app(runner: Runner, token: str | None = None, base_url: str = "http://127.0.0.1:8321",
               max_body: int = MAX_BODY, allowed_hosts: tuple[str, ...] = ()) -> FastAPI:
    """`base_url` is where clients reach this server (the A2A agent card names it);
    `allowed_hosts` are Host names a tokenless server answers besides the loopback ones."""
    @asynccontextmanager
    async def lifespan(app: FastAPI):
        app.state.wakeups = Wakeups(runner.store, asyncio.get_running_loop())
        runner.start()
        try:
            yield
        finally:
            app.state.wakeups.stop()
            await asyncio.to_thread(runner.stop)

    app = FastAPI(title="jsonagent", version="1", lifespan=lifespan, docs_url=None,
                  redoc_url=None)
    app.state.runner = runner

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError):
        problems = []
        for e in exc.errors():
            if e["type"] == "json_invalid":
                problems.append(json_problem(e.get("ctx", {}).get("error", "")))
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

    @app.exception_handler(StoreDown)
    async def _down(request: Request, exc: StoreDown):
        return _error(503, str(exc))

    @app.exception_handler(SessionBusy)
    async def _busy(request: Request, exc: SessionBusy):
        if exc.waiting:  # over HTTP, the answer goes to the API, not to `jsonagent resume`
            return _error(409, f"this session's run {exc.waiting} waits for a person: answer "
                               f"it with POST /v1/runs/{exc.waiting}/respond")
        log.warning("%s %s: 409, %s", request.method, request.url.path, exc)  # its holder too
        return _error(409, exc.public)

    @app.get("/healthz", include_in_schema=False)
    def healthz():
        return {"ok": True}

    app.include_router(router)

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
    from .agui import mount as mount_agui

    mount(app, runner, base_url, token)
    mount_agui(app, runner)
    app.add_middleware(Guard, token=token, max_body=max_body, allowed_hosts=allowed_hosts)
    return app


ASSETS = {"app.js": "text/javascript; charset=utf-8", "style.css": "text/css; charset=utf-8"}
CSP = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; object-src 'none'"


def _asset(name: str) -> bytes:
    return resources.files("jsonagent.server").joinpath("page", name).read_bytes()
