"""The agent over Agent2Agent, on a2a-sdk's server components: its request handler, task
store and routes, with our executor mapping run events onto task status updates.

An A2A task is one of our runs, and its context is one of our sessions (`a2a-CONTEXT`). A
question or an approval puts the task in INPUT_REQUIRED; the client's next message on the
task is the answer (for an approval: yes or no, and anything else is the reason to deny).
Tasks are kept in the run store (a2a_tasks.py), so any server sharing it serves any task.

A message that carries a tool call's key (another jsonagent's A2A tool sends it) starts a
run whose id is derived from the key, as an in-process sub-run's is (calls.py). The same
call done again, after its caller crashed or was taken over, gets that task and run back:
its answer, its question, or the run followed on; never a second run.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import TYPE_CHECKING, Any

from a2a.helpers import new_task, new_text_part
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import TaskUpdater
from a2a.types import (AgentCapabilities, AgentCard, AgentInterface, AgentSkill,
                       HTTPAuthSecurityScheme, SecurityRequirement, SecurityScheme, StringList,
                       TaskState)

from ..calls import once_question, sub_run_id
from ..errors import Conflict, SessionBusy, Unknown
from ..status import COMPLETED, INTERRUPTED, NEEDS_HUMAN, QUEUED, RUNNING, Reason
from ..events import ThoughtDelta
from .a2a_tasks import KEY, KeyedRequests, StoredTasks, key_of, remember_run, run_of
from .live import in_order, until_either
from .wakeups import LOOK_ANYWAY_S

if TYPE_CHECKING:
    from fastapi import FastAPI

    from .runner import Runner

RPC_PATH = "/a2a"
PARTIAL_EVERY_S = 0.25
"""How often, at most, a task is told the thought written so far."""
YES = {"yes", "y", "approve", "approved", "ok", "allow", "true"}


def approval_question(pending: Any) -> str:
    return (f"May I call {pending.tool} with {json.dumps(pending.args or {}, ensure_ascii=False)}? "
            "Answer yes or no (anything else is the reason to refuse).")


def decision(pending: Any, text: str) -> dict[str, Any]:
    """A person's message as the answer to what the run waits for: for several items, a
    line each, in their order."""
    if pending is not None and pending.items:
        lines = [line.strip() for line in text.splitlines() if line.strip()]
        if len(lines) != len(pending.items):
            raise ValueError(f"the run waits for {len(pending.items)} answers: give each on a "
                             "line of its own, in the order asked")
        return {"items": {item.id: decision(item, line)
                          for item, line in zip(pending.items, lines)}}
    if pending is not None and pending.kind == "approval":
        yes = text.strip().lower().rstrip(".!") in YES
        return {"approve": yes, "reason": None if yes else text}
    return {"answer": text}


def asked(pending: Any) -> str:
    """What a person is asked for what the run waits for; several items, numbered."""
    said = [item.question if item.kind == "question" else
            once_question(item.tool, item.args, item.key) if item.kind == "once" else
            approval_question(item) for item in pending.each]
    if len(said) == 1:
        return said[0]
    return "\n".join(f"{n}. {text}" for n, text in enumerate(said, 1)) + \
        "\nAnswer each on a line of its own, in this order."


class RunExecutor(AgentExecutor):
    def __init__(self, runner: Runner, app_state: Any):
        self.runner, self.app_state = runner, app_state
        """The app's state: its `wakeups` exist once the app has started."""

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        updater = TaskUpdater(event_queue, context.task_id, context.context_id)
        if context.current_task is None:
            await event_queue.enqueue_event(new_task(
                context.task_id, context.context_id, TaskState.TASK_STATE_SUBMITTED,
                history=[context.message] if context.message else None))
        try:
            run_id, after = await asyncio.to_thread(self._run_for, context)
        except (Conflict, SessionBusy, ValueError) as exc:
            said = exc.public if isinstance(exc, SessionBusy) else str(exc)  # no pid, no host
            await updater.failed(updater.new_agent_message([new_text_part(said)]))
            return
        await asyncio.to_thread(remember_run, self.runner.store, context.task_id, run_id)
        if after is None:  # a call done again finds its run waiting for a person, or ended
            info = await asyncio.to_thread(self.runner.get, run_id)
            await self._end(run_id, {"status": info.status, "answer": info.state.answer,
                                     "error": info.state.error}, updater)
            return
        await updater.start_work()
        await self._follow(run_id, after, updater)

    def _run_for(self, context: RequestContext) -> tuple[str, int | None]:
        """The run a message goes to, and the event after which to follow it: None when that
        run stands still (it waits for a person, or has ended)."""
        text = context.get_user_input()
        session = f"a2a-{context.context_id}"
        key = key_of(context.message, context.call_context)
        if key is not None:  # a tool call's message: sent for the first time, or again
            here = f"{context.context_id}/{context.task_id}"
            first = self.runner.store.add_item(KEY, key, here) == here
            run_id = sub_run_id(key)  # the same on every node, for every sending
            try:
                info = self.runner.get(run_id)
            except Unknown:  # not started; unless first, the same message starts it now
                return (self._submit(context, text, session, run_id) if first else run_id), 0
            return run_id, info.state.seq if info.status in (QUEUED, RUNNING) else None
        # a message on the task, or a new one in a context whose run waits (say, the task
        # was lost with a restart of the server): either way it is that run's answer
        run_id = run_of(self.runner.store, context.task_id) or self._waiting_run(session)
        if run_id is None:
            return self._submit(context, text, session), 0
        info = self.runner.get(run_id)
        self.runner.respond(run_id, **decision(info.state.pending, text))
        return run_id, info.state.seq

    def _submit(self, context: RequestContext, text: str, session: str,
                run_id: str | None = None) -> str:
        headers = context.call_context.state.get("headers", {}) \
            if context.call_context is not None else {}
        return self.runner.submit(text, session, None, headers.get("traceparent"),
                                  run_id=run_id)

    def _waiting_run(self, session: str) -> str | None:
        info = self.runner.store.find_session(session)
        return info.last_run if info is not None and info.last_status == NEEDS_HUMAN else None

    async def _follow(self, run_id: str, after: int, updater: TaskUpdater) -> None:
        """Map the run's events onto the task until it ends or waits for a person. While a
        step is written, its thought so far goes out as a working status, at most every
        PARTIAL_EVERY_S; the step's own status then carries the whole thought."""
        store = self.runner.store
        writing: dict[tuple[str, int, int], str] = {}
        sent = 0.0
        with self.app_state.wakeups.follow(run_id) as news, \
                self.runner.live.follow(run_id) as live:
            look = True
            while not self.runner.stopping.is_set():
                batch = []
                if look:
                    news.clear()
                    batch = await asyncio.to_thread(store.events, run_id, None, after)
                # deltas taken after the read: each comes before the step that settles it
                for stored, event in in_order([(True, e) for e in batch], live.take()):
                    if isinstance(event, ThoughtDelta):
                        key = (event.run_id, event.step, event.attempt)
                        writing[key] = writing.get(key, "") + event.text
                        if time.monotonic() - sent >= PARTIAL_EVERY_S:
                            # each status goes into the task's history: not per token
                            sent = time.monotonic()
                            message = updater.new_agent_message([new_text_part(writing[key])])
                            await updater.update_status(TaskState.TASK_STATE_WORKING, message)
                    if not stored:  # a delta: only the thought's pieces are shown
                        continue
                    after = event["seq"]
                    if event["type"] == "step":
                        line = f"{event['thought']} → {event['tool']} {json.dumps(event['args'])}"
                        message = updater.new_agent_message([new_text_part(line)])
                        await updater.update_status(TaskState.TASK_STATE_WORKING, message)
                    elif event["type"] == "run_end":
                        await self._end(run_id, event, updater)
                        return
                await until_either(news, live.ready, LOOK_ANYWAY_S)
                look = news.is_set() or not live.ready.is_set()

    async def _end(self, run_id: str, event: dict, updater: TaskUpdater) -> None:
        def say(text: str):
            return updater.new_agent_message([new_text_part(text)])

        status = event["status"]
        if status == COMPLETED:
            answer = event["answer"]
            await updater.complete(say(answer if isinstance(answer, str) else json.dumps(answer)))
        elif status == NEEDS_HUMAN:
            info = await asyncio.to_thread(self.runner.get, run_id)
            await updater.requires_input(say(asked(info.state.pending)))
        elif status == INTERRUPTED:
            await updater.cancel(say(event.get("error") or Reason.CANCELLED))
        else:  # max_steps, stalled, limit_reached, failed, expired
            await updater.failed(say(f"{status}: {event.get('error') or ''}".rstrip(": ")))

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        run_id = await asyncio.to_thread(run_of, self.runner.store, context.task_id)
        if run_id is not None:
            try:
                await asyncio.to_thread(self.runner.cancel, run_id)
            except (Conflict, Unknown):
                pass
        updater = TaskUpdater(event_queue, context.task_id, context.context_id)
        await updater.cancel(updater.new_agent_message([new_text_part(Reason.CANCELLED)]))


def agent_card(runner: Runner, base_url: str, token: str | None = None) -> AgentCard:
    """The card is served without the token (discovery needs it): with a token, it declares
    the bearer scheme and does not name the tools."""
    tools = [t.name for t in runner.front.toolset]
    with_tools = "" if token else ": " + ", ".join(tools)
    secured = {} if not token else {
        "security_schemes": {"bearer": SecurityScheme(http_auth_security_scheme=HTTPAuthSecurityScheme(
            scheme="bearer", description="Authorization: Bearer TOKEN"))},
        "security_requirements": [SecurityRequirement(schemes={"bearer": StringList()})]}
    return AgentCard(**secured,
        name="jsonagent", version="1",
        description="A JSON tool-calling agent. It may ask you a question or ask before a "
                    "tool runs; answer with your next message on the task.",
        supported_interfaces=[AgentInterface(url=base_url + RPC_PATH, protocol_binding="JSONRPC",
                                             protocol_version="1.0")],
        capabilities=AgentCapabilities(streaming=True),
        default_input_modes=["text/plain"], default_output_modes=["text/plain"],
        skills=[AgentSkill(id="agent", name="Answer with tools",
                           description="Answers a task step by step with its tools"
                                       + with_tools, tags=["tools"])])


class _ClientMistakes(logging.Filter):
    """a2a-sdk logs a client's malformed request with a traceback, as if it were ours: it
    answers the client with a JSON-RPC error, and one line in our log is enough."""

    MISTAKES = ("Failed to validate base JSON-RPC request", "Failed to parse request params")

    def filter(self, record: logging.LogRecord) -> bool:
        if record.getMessage() in self.MISTAKES:
            record.exc_info = record.exc_text = None
            record.levelno, record.levelname = logging.WARNING, "WARNING"
        return True


def mount(app: FastAPI, runner: Runner, base_url: str, token: str | None = None) -> None:
    dispatcher = logging.getLogger("a2a.server.routes.jsonrpc_dispatcher")
    if not any(isinstance(f, _ClientMistakes) for f in dispatcher.filters):
        dispatcher.addFilter(_ClientMistakes())
    card = agent_card(runner, base_url, token)
    handler = KeyedRequests(agent_executor=RunExecutor(runner, app.state),
                            task_store=StoredTasks(runner.store), agent_card=card)
    for route in [*create_agent_card_routes(card), *create_jsonrpc_routes(handler, RPC_PATH)]:
        app.router.routes.append(route)
