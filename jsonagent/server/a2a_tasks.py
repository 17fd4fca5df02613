"""A2A tasks kept in the run store, so that every server sharing it knows every task: a task
started through one node is read, answered or cancelled through another. Tasks are a2a-sdk's
protobuf messages, kept as their JSON form.

A message may carry the key of the tool call that sends it (tools/a2a.py): the first such
message starts a task, and the same call done again goes to that task (`KeyedRequests`)."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from a2a.server.agent_execution.active_task import TERMINAL_TASK_STATES
from a2a.server.request_handlers import DefaultRequestHandlerV2
from a2a.server.tasks import TaskStore
from a2a.server.tasks.inmemory_task_store import _InMemoryTaskStoreImpl
from a2a.types import Message, Task
from a2a.utils.errors import UnsupportedOperationError
from a2a.utils.task import apply_history_length
from google.protobuf import json_format

from ..calls import KEY_META

if TYPE_CHECKING:
    from ..store import Store

TASK, RUN, KEY = "a2a_task", "a2a_run", "a2a_key"
"""Item kinds: a task by its owner and id; the run a task id stands for; the task a call's
key started (`CONTEXT/TASK`), by its owner and key."""


class StoredTasks(TaskStore):
    def __init__(self, store: Store):
        self.store = store
        self._scratch = _InMemoryTaskStoreImpl()  # only for its filters, in `list`

    @staticmethod
    def _key(task_id: str, context) -> str:
        from a2a.server.owner_resolver import resolve_user_scope

        return f"{resolve_user_scope(context)}/{task_id}"

    async def save(self, task: Task, context) -> None:
        await asyncio.to_thread(self.store.put_item, TASK, self._key(task.id, context),
                                json_format.MessageToJson(task))

    async def get(self, task_id: str, context) -> Task | None:
        text = await asyncio.to_thread(self.store.get_item, TASK, self._key(task_id, context))
        return None if text is None else json_format.Parse(text, Task())

    async def list(self, params, context):
        owner = self._key("", context)
        scratch = _InMemoryTaskStoreImpl(owner_resolver=self._scratch.owner_resolver)
        for text in await asyncio.to_thread(self.store.items, TASK):
            task = json_format.Parse(text, Task())
            if self._key(task.id, context) == owner + task.id:
                await scratch.save(task, context)
        return await scratch.list(params, context)

    async def delete(self, task_id: str, context) -> None:
        await asyncio.to_thread(self.store.delete_item, TASK, self._key(task_id, context))


def run_of(store: Store, task_id: str) -> str | None:
    return store.get_item(RUN, task_id)


def remember_run(store: Store, task_id: str, run_id: str) -> None:
    store.put_item(RUN, task_id, run_id)


def key_of(message: Message | None, context: Any) -> str | None:
    """The key of the tool call that sent `message`, in its owner's scope: a key names a
    task for the client that sent it only."""
    if message is None or KEY_META not in message.metadata or not message.metadata[KEY_META]:
        return None
    return StoredTasks._key(str(message.metadata[KEY_META]), context)


class KeyedRequests(DefaultRequestHandlerV2):
    """A message whose key started a task before is that call done again: it goes to that
    task. An ended task is returned as it stands; any other is followed again (the
    executor knows the message for a call's own, never an answer)."""

    async def _started(self, params: Any, context: Any) -> Task | None:
        """The task the message's key started, with the message aimed at it."""
        message = params.message
        key = key_of(message, context)
        if key is None or message.task_id:
            return None
        where = await asyncio.to_thread(self.task_store.store.get_item, KEY, key)
        task = None if where is None else \
            await self.task_store.get(where.partition("/")[2], context)
        if task is not None:
            message.context_id, message.task_id = task.context_id, task.id
        return task

    async def on_message_send(self, params: Any, context: Any) -> Message | Task:
        task = await self._started(params, context)
        if task is None or task.status.state not in TERMINAL_TASK_STATES:
            try:
                return await super().on_message_send(params, context)
            except UnsupportedOperationError:  # the SDK's word for a task that has ended
                if task is None:
                    raise
                task = await self.task_store.get(task.id, context)  # ended a moment ago
        return apply_history_length(task, params.configuration)

    async def on_message_send_stream(self, params: Any, context: Any):
        task = await self._started(params, context)
        if task is None or task.status.state not in TERMINAL_TASK_STATES:
            try:
                async for event in super().on_message_send_stream(params, context):
                    yield event
                return
            except UnsupportedOperationError:
                if task is None:
                    raise
                task = await self.task_store.get(task.id, context)
        yield apply_history_length(task, params.configuration)
