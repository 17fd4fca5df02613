"""The REST API under /v1: runs, their events as a stream, sessions. Each route reads the
store or asks the `Runner` the app holds (`app.state.runner`)."""

from __future__ import annotations

import asyncio
import json
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Header, Query, Request

from .. import status as status_table
from ..errors import Unknown
from ..events import Delta
from ..session import NAME_MAX
from ..status import INTERRUPTED, RUNNING, SERVER_STATUSES, server_status
from .runner import Runner, public_status
from .shapes import RespondIn, RunIn, error, run_view, session_view, tree_view
from .follow import follow

STORED = {**status_table.STORED, server_status(RUNNING): (RUNNING, INTERRUPTED)}
"""The store's statuses behind each of the server's: a server's run whose process died is
stored as running, and shown in_progress, since a restarted server takes it over."""


MAX_OFFSET = 10 ** 9
MAX_SEQ = 2 ** 53 - 1
"""Numbers a request may carry: well inside what SQLite and JSON readers hold."""


def _runner(request: Request) -> Runner:
    return request.app.state.runner


Runs = Annotated[Runner, Depends(_runner)]
router = APIRouter(prefix="/v1")


@router.post("/runs", status_code=201)
def create_run(body: RunIn, runner: Runs,
               traceparent: Annotated[str | None, Header(include_in_schema=False)] = None
               ) -> dict[str, Any]:
    run_id = runner.submit(body.input, body.session, body.max_steps, traceparent,
                           body.stream)
    return run_view(runner.get(run_id))


@router.get("/runs")
def list_runs(runner: Runs,
              status: Literal[SERVER_STATUSES] | None = None,  # type: ignore[valid-type]
              session: str | None = Query(None, max_length=NAME_MAX),
              limit: int = Query(20, ge=1, le=200), offset: int = Query(0, ge=0, le=MAX_OFFSET)):
    store, session_id = runner.store, None
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


@router.get("/runs/{run_id}")
def get_run(run_id: str, runner: Runs) -> dict[str, Any]:
    return tree_view(runner.store, runner.get(run_id))


@router.post("/runs/{run_id}/respond", status_code=202)
def respond(run_id: str, body: RespondIn, runner: Runs) -> dict[str, Any]:
    try:
        runner.respond(run_id, body.answer, body.approve, body.reason, body.given_items())
    except ValueError as exc:
        return error(422, str(exc))
    return run_view(runner.get(run_id))


@router.post("/runs/{run_id}/cancel", status_code=202)
def cancel(run_id: str, runner: Runs) -> dict[str, Any]:
    runner.cancel(run_id)
    return run_view(runner.get(run_id))


@router.get("/runs/{run_id}/events")
async def events(run_id: str, request: Request, runner: Runs,
                 last_event_id: str | None = Header(None, alias="Last-Event-ID"),
                 deltas: bool = False):
    from sse_starlette.sse import EventSourceResponse

    await asyncio.to_thread(runner.get, run_id)  # 404 before the stream starts
    try:
        after = int(last_event_id or 0)
    except ValueError:
        after = -1
    if not 0 <= after <= MAX_SEQ:
        return error(422, f"Last-Event-ID: an event number from 0 to {MAX_SEQ}")
    stream = _stream(runner, run_id, after, request, deltas)
    return EventSourceResponse(stream, ping=10)


async def _stream(runner: Runner, run_id: str, after: int, request: Request, deltas: bool):
    """Every event after `after`, as it is recorded; the stream ends with the run (a pause
    is not an end). With `deltas`, the reply being written comes too, as delta events
    without an id, so `Last-Event-ID` still counts stored events only; a sub-run's events
    come without an id too, marked with their own run ids (follow.py)."""
    async for stored, event in follow(runner, request.app.state.wakeups, run_id, after,
                                      request, deltas):
        if isinstance(event, Delta):
            yield {"event": event.type, "data": event.to_json()}
        elif stored:
            yield {"id": str(event["seq"]), "event": event["type"],
                   "data": json.dumps(event, ensure_ascii=False)}
        else:
            yield {"event": event["type"], "data": json.dumps(event, ensure_ascii=False)}


@router.get("/sessions")
def list_sessions(runner: Runs, limit: int = Query(50, ge=1, le=500),
                  offset: int = Query(0, ge=0, le=MAX_OFFSET)):
    rows = runner.store.sessions()
    return {"data": [session_view(s) for s in rows[offset:offset + limit]],
            "limit": limit, "offset": offset, "has_more": len(rows) > offset + limit}


@router.get("/sessions/{name:path}")
def get_session(name: str, runner: Runs):
    info = runner.store.find_session(name)
    if info is None:
        raise Unknown(f"no session {name}")
    runs = runner.store.runs(info.id, limit=200)
    return session_view(info) | {"data": [run_view(i) for i in runs]}
