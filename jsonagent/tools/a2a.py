"""A remote agent as a tool, over Agent2Agent, with a2a-sdk's client.

    A2AAgent("http://127.0.0.1:8000")            in tools=[...], or --a2a URL, or
    {"handler": {"a2a": "http://..."}}           in a spec

Its agent card names and describes the tool (its skills too). Each call sends the task as a
message and follows the remote task (streaming when the card says it can) to its end. A
remote INPUT_REQUIRED becomes this run's pending question, with `a2a:CONTEXT/TASK` at the end
of its `path`; the answer goes back to that task. A cancel of the run cancels the remote task.
Every wait is bounded: an unreachable server, a timeout or a server that dies mid-task is a
one-line error for the model, never a hang.

The call's key (calls.py) goes with the message that starts the remote task: as its message
id, in its `metadata` (`idempotency_key`) and in that request's `Idempotency-Key` header. A
`jsonagent serve` peer answers a message whose key started a task already from that task (its
answer, its question, or the task followed on to its end), so a step done again after a
crash, a takeover or a resume re-attaches to the remote run it started and never starts a
second one. A peer that is not jsonagent ignores the metadata and may start a second task:
so the call's effects stay unknown (run again with the same key, and the events say so).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
from typing import Any

from ..calls import KEY_HEADER, KEY_META
from ..cancel import run_coroutine
from ..errors import ConfigError, ToolError
from ..notes import note
from ..state import Pending
from .specs import ToolSpec
from .tool import RunContext, Tool

CARD_PATH = "/.well-known/agent-card.json"
CARD_TIMEOUT = 10.0
CALL_TIMEOUT = 300.0
PREFIX = "a2a:"
_DONE = {"TASK_STATE_COMPLETED"}
_ASKS = {"TASK_STATE_INPUT_REQUIRED", "TASK_STATE_AUTH_REQUIRED"}
_ENDED = {"TASK_STATE_FAILED", "TASK_STATE_CANCELED", "TASK_STATE_REJECTED"}


class A2AAgent:
    """A remote A2A agent whose one tool joins a run's toolset.

    `headers` may hold `${env:NAME}` secrets, resolved when the tool is loaded. `name`
    overrides the card's. `timeout` bounds each call (default $JSONAGENT_A2A_TIMEOUT, 300 s).
    """

    def __init__(self, url: str, *, name: str | None = None,
                 headers: dict[str, str] | None = None, timeout: float | None = None):
        if not url.startswith(("http://", "https://")):
            raise ConfigError(f"an A2A agent is a URL (http:// or https://), not {url!r}")
        self.url = url.rstrip("/")
        self.name = name
        self.headers = dict(headers or {})
        self.timeout = timeout or _seconds("JSONAGENT_A2A_TIMEOUT", CALL_TIMEOUT)
        self.streaming = False
        self._tool: Any = None

    def __repr__(self) -> str:
        return f"A2AAgent({self.url!r})"

    @property
    def origin(self) -> str:
        return PREFIX + self.url

    def open(self) -> list[Any]:
        """Read the agent card and return its tool; idempotent."""
        if self._tool is None:
            self._tool = self._read_card()
        return [self._tool]

    def close(self) -> None:
        """Nothing stays open between calls."""

    def _read_card(self) -> Any:
        import httpx

        from .handlers import resolve_secrets

        self.headers = {k: resolve_secrets(v, f"A2A agent {self.url}")
                        for k, v in self.headers.items()}
        where = self.url + CARD_PATH
        try:
            r = httpx.get(where, headers=self.headers, timeout=min(self.timeout, CARD_TIMEOUT))
            r.raise_for_status()
            card = r.json()
        except httpx.HTTPStatusError as exc:
            raise ConfigError(f"A2A agent {self.url}: its card answered "
                              f"{exc.response.status_code}") from None
        except (httpx.HTTPError, ValueError) as exc:
            raise ConfigError(f"A2A agent {self.url}: cannot read its card at {where}: "
                              f"{type(exc).__name__}: {exc}".rstrip(": ")) from None
        self.streaming = bool((card.get("capabilities") or {}).get("streaming"))
        name = self.name or re.sub(r"[^A-Za-z0-9_-]+", "_", card.get("name") or "")[:64] or "agent"
        skills = [f"{s.get('name', '')}: {s.get('description', '')}".strip(": ")
                  for s in card.get("skills") or []]
        text = " ".join(filter(None, [card.get("description", ""),
                                      *(["Skills: " + "; ".join(skills) + "."] if skills else [])]))
        spec = ToolSpec.from_dict(
            {"name": name, "description": text or f"The remote agent at {self.url}.",
             "parameters": {"type": "object", "required": ["task"], "properties": {
                 "task": {"type": "string", "description": note("agent_task")}}}},
            origin=self.origin)
        return Tool(spec=spec, fn=A2ACall(self), ctx_param="ctx")

    # -- calls --------------------------------------------------------------------------------

    def send(self, text: str, task: tuple[str, str] | None = None,
             key: str | None = None) -> tuple[str, str, str, str]:
        """Send `text` (on the task `(context_id, task_id)` when given, else with the call's
        `key`, which names the task it starts) and follow the task to its end or its
        question: `(state, text, context_id, task_id)`."""
        try:
            return run_coroutine(asyncio.wait_for(self._send(text, task, key), self.timeout))
        except (TimeoutError, asyncio.TimeoutError):
            raise ToolError(f"A2A agent {self.url}: no answer within {self.timeout:g} s") from None
        except ToolError:
            raise
        except Exception as exc:  # the transport's failures, whatever the SDK wraps them in
            raise ToolError(f"A2A agent {self.url}: {_describe(exc)}") from None

    async def _send(self, text: str, task: tuple[str, str] | None,
                    key: str | None) -> tuple[str, str, str, str]:
        import httpx
        from a2a.client import ClientCallContext, ClientConfig, create_client
        from a2a.helpers import new_text_message
        from a2a.types import CancelTaskRequest, GetTaskRequest, Role, SendMessageRequest

        async with httpx.AsyncClient(timeout=self.timeout, headers=self.headers) as http:
            client = await create_client(
                self.url, ClientConfig(streaming=self.streaming, httpx_client=http),
                resolver_http_kwargs={"headers": self.headers})
            message = new_text_message(text, role=Role.ROLE_USER,
                                       context_id=task[0] if task else None,
                                       task_id=task[1] if task else None)
            keyed = None
            if key is not None:  # the same message when the step is done again
                message.message_id = key
                message.metadata.update({KEY_META: key})
                keyed = ClientCallContext(service_parameters={KEY_HEADER: key})
            task_id = task[1] if task else None
            try:
                async for r in client.send_message(SendMessageRequest(message=message),
                                                   context=keyed):
                    task_id = task_id or (r.task.id if r.HasField("task") else
                                          r.status_update.task_id if r.HasField("status_update")
                                          else None)
                if task_id is None:
                    raise ToolError(f"A2A agent {self.url}: it answered without a task")
                got = await client.get_task(GetTaskRequest(id=task_id))
            except asyncio.CancelledError:  # our run was cancelled: so is the remote task
                if task_id is not None:
                    try:
                        await asyncio.wait_for(
                            client.cancel_task(CancelTaskRequest(id=task_id)), 5)
                    except Exception:
                        pass
                raise
        return _outcome(got)


def _outcome(task: Any) -> tuple[str, str, str, str]:
    from a2a.helpers import get_message_text
    from a2a.types import TaskState

    state = TaskState.Name(task.status.state)
    text = get_message_text(task.status.message) if task.status.HasField("message") else ""
    if state in _DONE and not text:
        text = "\n".join(get_message_text(a) for a in task.artifacts) if task.artifacts else ""
    return state, text, task.context_id, task.id


class A2ACall:
    """The function behind a remote agent's tool."""

    stops_on_cancel = True  # a cancel cancels the request's task, then the remote task

    def __init__(self, agent: A2AAgent):
        self.agent, self.source = agent, agent.origin

    def __call__(self, ctx: RunContext = None, **args: Any) -> Any:  # type: ignore[assignment]
        task = key = None
        if ctx is not None and ctx.handed_down is not None:
            pending, resume = ctx.handed_down
            context_id, _, task_id = pending.path[1][len(PREFIX):].partition("/")
            task, text = (context_id, task_id), _reply(resume)
        else:
            text = str(args["task"]) if set(args) == {"task"} else json.dumps(args)
            key = ctx.call_id if ctx is not None else None
        state, said, context_id, task_id = self.agent.send(text, task, key)
        if state in _DONE:
            return _parsed(said)
        if state in _ASKS:
            here = [ctx.run.run_id] if ctx is not None and ctx.run is not None else []
            return Pending(kind="question", question=said or "(the remote agent needs input)",
                           path=[*here, f"{PREFIX}{context_id}/{task_id}"])
        raise ToolError(f"A2A agent {self.agent.url}: its task ended "
                        f"{state.removeprefix('TASK_STATE_').lower()}"
                        + (f": {said}" if said else ""))


def _reply(resume: Any) -> str:
    """The person's input as the next message on the remote task."""
    if resume.answer is not None:
        return resume.answer
    return "yes" if resume.approved else (resume.reason or "no")


def _parsed(text: str) -> Any:
    """A remote answer that is JSON is kept as data; any other is its text."""
    try:
        return json.loads(text)
    except ValueError:
        return text


def _describe(exc: BaseException) -> str:
    """One line for a failure deep in the SDK or httpx: the innermost cause says the most."""
    while exc.__cause__ is not None or exc.__context__ is not None:
        inner = exc.__cause__ or exc.__context__
        if str(inner) == "" and str(exc) != "":
            break
        exc = inner
    text = str(exc).splitlines()[0] if str(exc) else ""
    return f"{type(exc).__name__}: {text}".rstrip(": ")


def _seconds(var: str, default: float) -> float:
    try:
        value = float(os.environ.get(var, default))
    except ValueError:
        raise ConfigError(f"${var} must be a number of seconds") from None
    return value if value > 0 else default
