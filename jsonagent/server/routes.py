"""The REST API under /v1: runs, their events as a stream, sessions. Each route reads the
store or asks the `Runner` the app holds (`app.state.runner`)."""

from __future__ import annotations

import asyncio
import json
from contextlib import nullcontext
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Header, Query, Request

from .. import status as status_table
from ..errors import Unknown
from ..session import NAME_MAX
from ..status import INTERRUPTED, NEEDS_HUMAN, RUNNING, SERVER_FINAL, SERVER_STATUSES, server_status
from .runner import Runner, public_status
from .shapes import RespondIn, RunIn, error, run_view, session_view, tree_view
from .live import until_either
from .wakeups import LOOK_ANYWAY_S, until_news

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
    run_id = runner.submit(body.input, body.session, body.max_steps, traceparent)
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
        runner.respond(run_id, body.answer, body.approve, body.reason)
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
    is not an end). Between looks it sleeps until the store says the run has news.

    With `deltas`, the reply being written comes too, as delta events without an id, so
    `Last-Event-ID` still counts stored events only; they come from this process (live.py)
    and are never read back from the store."""
    store = runner.store
    subs: dict[str, int] = {}
    with request.app.state.wakeups.follow(run_id) as news, \
            (runner.live.follow(run_id) if deltas else nullcontext()) as live:
        look = True
        while not runner.stopping.is_set():
            batch = []
            if look:  # stored events first: a delta is written after them
                news.clear()
                # its sub-runs' events first (they happen inside its step), marked with their
                # own run ids; without an id, as `Last-Event-ID` counts this run's events only
                for event in await asyncio.to_thread(_sub_events, store, run_id, subs):
                    yield {"event": event["type"],
                           "data": json.dumps(event, ensure_ascii=False)}
                batch = await asyncio.to_thread(store.events, run_id, None, after)
            for event in batch:
                after = event["seq"]
                yield {"id": str(event["seq"]), "event": event["type"],
                       "data": json.dumps(event, ensure_ascii=False)}
                if event["type"] == "run_end" and event["status"] != NEEDS_HUMAN:
                    return
            for delta in live.take() if live is not None else ():
                yield {"event": delta.type, "data": delta.to_json()}
            if look and not batch:
                info = await asyncio.to_thread(runner.get, run_id)
                if public_status(info) in SERVER_FINAL and not \
                        await asyncio.to_thread(store.events, run_id, None, after):
                    return
                if await request.is_disconnected():
                    return
            if live is None:
                await until_news(news)
            else:
                await until_either(news, live.ready, LOOK_ANYWAY_S)
            # a look at the store unless only a delta came (a timeout looks too)
            look = news.is_set() or live is None or not live.ready.is_set()


def _sub_events(store: Any, run_id: str, seen: dict[str, int]) -> list[dict[str, Any]]:
    """The new events of every run below `run_id`; `seen` keeps each one's last number."""
    events = []
    for sub in store.sub_runs(run_id):
        batch = store.events(sub.id, None, seen.get(sub.id, 0))
        if batch:
            seen[sub.id] = batch[-1]["seq"]
        events += batch + _sub_events(store, sub.id, seen)
    return events


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
