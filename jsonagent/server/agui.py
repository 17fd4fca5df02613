"""AG-UI (the Agent–User Interaction protocol, 1.0): `POST /ag-ui` takes a `RunAgentInput`
and answers with an SSE stream of AG-UI events, one more front end of a run's event stream.

The thread is the session and the run is the run. A run is queued and driven like any
other (runner.py), on any node; this request follows it (follow.py) and says what happens in
AG-UI's words (agui_events.py). A pause ends the AG-UI run with the interrupt outcome, one
interrupt for the pending, whose id names the pause; the next input's `resume` entry answers
it, and the same jsonagent run goes on. A frontend tool's call ends it with success and the
call in `pendingToolCallIds`; the tool message of the next input is its result.

Mount it in an application of your own with `mount(app, runner)`; run the runner's workers
(`runner.start()`) in the application's lifespan, and put `guard.Guard` in front as
`create_app` does.
"""

from __future__ import annotations

import asyncio
import logging
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Any

from ag_ui.core import (RunAgentInput, RunErrorEvent, RunFinishedCancelledOutcome,
                        RunFinishedEvent, RunStartedEvent, StateSnapshotEvent)
from ag_ui.encoder import EventEncoder
from fastapi import FastAPI, Request
from fastapi.responses import StreamingResponse
from pydantic import ValidationError

from ..calls import ONCE_ANSWERS, call_index, call_key, once_question
from ..errors import ConfigError, Conflict, Unknown
from ..events import Delta
from ..session import NAME_MAX
from ..status import COMPLETED, INTERRUPTED, NEEDS_HUMAN, SERVER_FINAL, server_status
from ..tools.schema import validator
from .agui_events import Translator, attempts, shown, text_of
from .follow import follow, seen_so_far
from .frontend_tools import is_frontend
from .guard import json_problem
from .runner import Runner, public_status
from .shapes import error
from .wakeups import Wakeups

log = logging.getLogger("jsonagent.server")

PATH = "/ag-ui"
MESSAGE_KEY = "agui_message"
"""Where a run's config records the id of the AG-UI message that started it: the same
input sent again (a reconnect) follows that run instead of starting another."""

RECONNECT_S = 2.0
"""Seconds a client that dropped its stream has to send the input again (`_abandoned`)."""

SCHEMAS = {
    "approval": {"type": "object", "properties": {"approved": {"type": "boolean"},
                                                  "reason": {"type": "string"}},
                 "required": ["approved"], "additionalProperties": False},
    "question": {"type": "object", "properties": {"answer": {"type": "string"}},
                 "required": ["answer"], "additionalProperties": False},
    # a `once` call the run stopped inside: did its effect happen? (calls.py's answers)
    "once": {"type": "object", "properties": {
        "answer": {"enum": list(ONCE_ANSWERS), "description": "happened: it went through; "
                   "again: run it again, with its key; fail: fail the step"},
        "reason": {"type": "string"}},
        "required": ["answer"], "additionalProperties": False},
}
"""What a resume entry's payload holds, per pending kind (each interrupt's responseSchema)."""


def mount(app: FastAPI, runner: Runner, path: str = PATH) -> None:
    async def run_agent(request: Request):
        return await _run_agent(request, runner)

    app.add_api_route(path, run_agent, methods=["POST"], include_in_schema=False)


@dataclass
class Plan:
    """What this input asks for: a run to follow from `after`, or an error said in the
    stream (the run is left as it was)."""

    run_id: str | None = None
    after: int = 0
    subs: dict[str, int] = field(default_factory=dict)
    problem: str | None = None


async def _run_agent(request: Request, runner: Runner):
    try:
        body = RunAgentInput.model_validate_json(await request.body())
    except ValidationError as exc:
        return error(422, "RunAgentInput: " + _problems(exc))
    if not 0 < len(body.thread_id) <= NAME_MAX:
        return error(422, f"RunAgentInput: threadId has 1 to {NAME_MAX} characters")
    if not body.resume and _new_message(body) is None:
        # a tool message alone answers a call of the thread's run: a new thread has none
        if await asyncio.to_thread(_last, runner, body.thread_id) is None:
            said = "its tool message answers no call (the thread has no run)" \
                if _tool_results(body) else "nothing to run"
            return error(422, f"RunAgentInput: {said}: send a user message")
    try:  # SessionBusy is the app's 409, before any event
        plan = await asyncio.to_thread(_plan, runner, body)
    except Unknown:
        raise
    except ConfigError as exc:  # the client's tools: a bad schema, a name the agent has
        return error(422, f"RunAgentInput: {exc}")
    wakeups = getattr(request.app.state, "wakeups", None) or \
        Wakeups(runner.store, asyncio.get_running_loop())
    encoder = EventEncoder(accept=request.headers.get("accept"))
    stream = _stream(runner, wakeups, request, body.thread_id, plan)
    return StreamingResponse((encoder.encode(e) async for e in stream),
                             media_type=encoder.get_content_type(),
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})


def _problems(exc: ValidationError) -> str:
    out = []
    for e in exc.errors()[:4]:
        if e["type"] == "json_invalid":
            out.append(json_problem(e.get("ctx", {}).get("error", "")))
            continue
        where = ".".join(str(p) for p in e["loc"]) or "body"
        out.append(f"{where}: {e['msg']}")
    return "; ".join(out)


# -- what the input asks for (in a worker thread: it reads and writes the store) ----------------

def _plan(runner: Runner, body: RunAgentInput) -> Plan:
    thread = body.thread_id
    last = _last(runner, thread)
    waiting = last if last is not None and public_status(last) == server_status(NEEDS_HUMAN) \
        else None
    if body.resume:
        if last is None:
            return Plan(problem=f"no thread {thread}: nothing there waits to be resumed")
        return _resume(runner, body, last, waiting)
    results = _tool_results(body)
    if waiting is not None and is_frontend(waiting.state.pending):
        pending_call = _waiting_call(runner, waiting)
        if pending_call in results:
            return _answer(runner, waiting, {"answer": results[pending_call]})
    message = _new_message(body)
    if last is not None and (message is None
                             or last.state.config.get(MESSAGE_KEY) == message[0]):
        # the same input again, or none: follow the thread's last run (a reconnect); an
        # interrupt it still waits on is offered again, one answered already never is
        if public_status(last) in SERVER_FINAL and message is None:
            return Plan(problem=f"thread {thread} has no run to go on with: send a message")
        return Plan(run_id=last.id, after=last.state.seq - 1 if waiting is not None
                    else _stretch(runner, last.id))
    if waiting is not None:
        return Plan(problem=f"thread {thread} waits for interrupt {interrupt_id(waiting)}: "
                            "answer it with a resume entry first")
    tools = [t.model_dump(mode="json", exclude_none=True) for t in body.tools or []]
    text = message[1] + _context(body)
    run_id = runner.submit(text, thread, stream=True, client_tools=tools or None,
                           recorded={MESSAGE_KEY: message[0]})
    return Plan(run_id=run_id)


def _resume(runner: Runner, body: RunAgentInput, last: Any, waiting: Any) -> Plan:
    """Each resume entry answers one open interrupt (one a pending item): a pending of one
    item as before, each item of several by its own interrupt's id."""
    open_ids = _interrupt_ids(waiting) if waiting is not None else {}
    entries = body.resume or []
    for entry in entries:
        if entry.interrupt_id not in open_ids:
            state = "it was answered already, or never was" if not open_ids else \
                f"the open one{'s are' if len(open_ids) > 1 else ' is'} {', '.join(open_ids)}"
            return Plan(problem=f"interrupt {entry.interrupt_id} is not open on thread "
                                f"{body.thread_id} ({state})")
    if any(entry.status != "resolved" for entry in entries):  # the person abandoned it
        try:
            runner.cancel(waiting.id)
        except Conflict as exc:
            return Plan(problem=str(exc))
        return Plan(run_id=waiting.id, after=waiting.state.seq)
    left = [iid for iid in open_ids if iid not in {entry.interrupt_id for entry in entries}]
    if left:  # said in AG-UI's words: the REST API's items are no concern of this client
        return Plan(problem=f"interrupt{'s' if len(left) > 1 else ''} {', '.join(left)} "
                            f"{'are' if len(left) > 1 else 'is'} open too: send one resume "
                            "entry for each open interrupt, all in one input")
    decisions = {}
    for entry in entries:
        item = open_ids[entry.interrupt_id]
        problem = _invalid(entry.payload, SCHEMAS[item.kind])
        if problem is not None:
            return Plan(problem=f"interrupt {entry.interrupt_id}: the payload {problem}")
        payload = entry.payload
        decisions[item.id] = {"answer": payload["answer"]} if item.kind == "question" else \
            {"answer": payload["answer"], "reason": payload.get("reason")} \
            if item.kind == "once" else \
            {"approve": payload["approved"], "reason": payload.get("reason")}
    if not waiting.state.pending.items:
        return _answer(runner, waiting, decisions[waiting.state.pending.id])
    return _answer(runner, waiting, {"items": decisions})


def _answer(runner: Runner, waiting: Any, decision: dict[str, Any]) -> Plan:
    try:
        runner.respond(waiting.id, decision.get("answer"), decision.get("approve"),
                       decision.get("reason"), decision.get("items"))
    except (Conflict, ValueError) as exc:
        return Plan(problem=str(exc))
    # the run goes on after its pause; its sub-runs' stories so far are told already
    return Plan(run_id=waiting.id, after=waiting.state.seq,
                subs=seen_so_far(runner.store, waiting.id))


def _stretch(runner: Runner, run_id: str) -> int:
    """Where the run's current stretch began: after its last pause, whose AG-UI run ended
    with that pause (a reconnect tells this stretch, not the answered ones again)."""
    pauses = [e["seq"] for e in runner.store.events(run_id)
              if e["type"] == "run_end" and e["status"] == NEEDS_HUMAN]
    return pauses[-1] if pauses else 0


def _invalid(payload: Any, schema: dict[str, Any]) -> str | None:
    import jsonschema

    exc = jsonschema.exceptions.best_match(validator(schema).iter_errors(payload))
    if exc is None:
        return None
    where = "/".join(map(str, exc.absolute_path))
    return f"does not fit its responseSchema{' at /' + where if where else ''}: {exc.message}"


def _last(runner: Runner, thread: str) -> Any:
    session = runner.store.find_session(thread)
    state = runner.store.last_run(session.id) if session is not None else None
    return runner.get(state.run_id) if state is not None else None


def _new_message(body: RunAgentInput) -> tuple[str, str] | None:
    """The input's last message when it is the user's: `(id, text)`. The client sends the
    whole thread each time; what came before it the session has already."""
    if not body.messages or body.messages[-1].role != "user":
        return None
    message = body.messages[-1]
    content = message.content
    if not isinstance(content, str):
        content = "\n".join(getattr(p, "text", "") or "" for p in content)
    return (message.id, content) if content.strip() else None


def _tool_results(body: RunAgentInput) -> dict[str, str]:
    return {m.tool_call_id: text_of(m.content) for m in body.messages if m.role == "tool"}


def _context(body: RunAgentInput) -> str:
    if not body.context:
        return ""
    return "\n\nContext:\n" + "\n".join(f"- {c.description}: {c.value}" for c in body.context)


# -- interrupts -------------------------------------------------------------------------------

def interrupt_id(info: Any) -> str:
    """The pause's id: its run and the number of the event that paused it. Stable while
    the run waits; a later pause of the same run has another."""
    return f"{info.id}.{info.state.seq}"


def _waiting_call(runner: Runner, info: Any) -> str:
    """The id of the call the pending concerns, in the run that waits (a sub-run's, down
    its path)."""
    pending = info.state.pending
    path = pending.path or []
    waiting = info
    if path and not path[-1].startswith("a2a:"):
        waiting = runner.get(path[-1])
    mine = pending.id is not None and pending.id.startswith(f"{waiting.id}.")
    return shown(runner.store, call_key(waiting.id, len(waiting.state.steps),
                                        call_index(pending.id) if mine else 0))


def _interrupt_ids(info: Any) -> dict[str, Any]:
    """The open interrupts of a waiting run, one a pending item, by their ids: the pause's
    id for one item; for several, with the index of each one's call."""
    pending = info.state.pending
    if not pending.items:
        return {interrupt_id(info): pending}
    return {f"{interrupt_id(info)}.{call_index(item.id)}": item for item in pending.items}


def _interrupts(runner: Runner, info: Any) -> list[dict[str, Any]]:
    out, read = [], {}
    for iid, pending in _interrupt_ids(info).items():
        item: dict[str, Any] = {"id": iid, "reason": pending.kind,
                                "responseSchema": SCHEMAS[pending.kind],
                                "metadata": {"pending": pending.model_dump(mode="json")}}
        if pending.kind in ("approval", "once"):
            item["toolCallId"] = shown(runner.store, pending.id, read) if pending.id else \
                _waiting_call(runner, info)
            item["message"] = once_question(pending.tool, pending.args, pending.key) \
                if pending.kind == "once" else \
                f"Allow {pending.tool} with {text_of(pending.args or {})}?"
        else:
            item["message"] = pending.question or ""
        out.append(item)
    return out


def snapshot(info: Any) -> dict[str, Any]:
    """The run's public state, as AG-UI's STATE_SNAPSHOT carries it."""
    state = info.state
    status = public_status(info)
    return {"run_id": info.id, "status": status, "step": len(state.steps),
            "usage": state.usage.model_dump(mode="json"),
            "pending": state.pending.model_dump(mode="json")
            if status == server_status(NEEDS_HUMAN) and state.pending else None}


# -- the stream -------------------------------------------------------------------------------

async def _stream(runner: Runner, wakeups: Wakeups, request: Request, thread: str, plan: Plan):
    if plan.problem is not None:
        yield RunErrorEvent(message=plan.problem, code="invalid_resume")
        return
    run_id = plan.run_id
    info = await asyncio.to_thread(runner.get, run_id)
    yield RunStartedEvent(thread_id=thread, run_id=run_id)
    yield StateSnapshotEvent(snapshot=snapshot(info))
    # a stream that starts mid-run names the calls of a step re-asked before as the first did
    seen = attempts(await asyncio.to_thread(runner.store.events, run_id, None, 0)) \
        if plan.after else {}
    translator = Translator(run_id, runner.front.deps.toolset.final.name, seen)
    ended = None
    events = follow(runner, wakeups, run_id, plan.after, request, deltas=True, subs=plan.subs,
                    through_pauses=False)
    try:
        async with aclosing(events):  # closed here, not when collected: it follows no more
            async for stored, event in events:
                if isinstance(event, Delta):
                    out = translator.delta(event)
                else:
                    out = translator.event(event)
                    if stored and event["type"] == "run_end":
                        ended = event
                for e in out:
                    yield e
    finally:
        if ended is None and not runner.stopping.is_set():
            _abandoned(runner, run_id)
    if ended is None:  # the node is stopping: the stream ends, the run goes on elsewhere
        return
    for e in translator.close():
        yield e
    async for e in _finish(runner, thread, run_id, ended):
        yield e


async def _finish(runner: Runner, thread: str, run_id: str, end: dict[str, Any]):
    status = end["status"]
    if status == COMPLETED:
        yield RunFinishedEvent(thread_id=thread, run_id=run_id, result=end.get("answer"),
                               outcome={"type": "success"})
    elif status == NEEDS_HUMAN:
        info = await asyncio.to_thread(runner.get, run_id)
        if info.status != NEEDS_HUMAN:  # answered meanwhile, by another client
            yield RunErrorEvent(message=f"run {run_id} has gone on since it paused: send "
                                        "the input again to follow it", code="moved_on")
            return
        yield StateSnapshotEvent(snapshot=snapshot(info))
        if is_frontend(info.state.pending):
            call = await asyncio.to_thread(_waiting_call, runner, info)
            yield RunFinishedEvent(thread_id=thread, run_id=run_id, outcome={
                "type": "success", "pendingToolCallIds": [call]})
        else:
            items = await asyncio.to_thread(_interrupts, runner, info)
            yield RunFinishedEvent(thread_id=thread, run_id=run_id,
                                   outcome={"type": "interrupt", "interrupts": items})
    elif status == INTERRUPTED:
        yield RunFinishedEvent(thread_id=thread, run_id=run_id, outcome=RunFinishedCancelledOutcome())
    else:  # failed, stalled, out of steps or limits, expired
        yield RunErrorEvent(message=end.get("error") or f"the run ended {status}", code=status)


def _abandoned(runner: Runner, run_id: str) -> None:
    """The client went away mid-run: its run is cancelled, unless it waits for a person
    (an answer may come from anywhere), or another stream follows it by then: the same input
    again (a reconnect, before or within RECONNECT_S after this one dropped) follows the same
    run, which goes on for it. Not awaited: the request is being torn down."""
    def cancel() -> None:
        if runner.live.watched(run_id):
            return
        try:
            info = runner.get(run_id)
            if public_status(info) not in SERVER_FINAL and info.status != NEEDS_HUMAN:
                runner.cancel(run_id)
        except Exception as exc:  # it ended meanwhile, or the store is down: nothing to do
            log.info("run %s: not cancelled after the client left: %s", run_id, exc)

    loop = asyncio.get_running_loop()
    loop.call_later(RECONNECT_S, loop.run_in_executor, None, cancel)

