"""A2A tasks kept in the run store, so that every server sharing it knows every task: a task
started through one node is read, answered or cancelled through another. Tasks are a2a-sdk's
protobuf messages, kept as their JSON form."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from a2a.server.tasks import TaskStore
from a2a.server.tasks.inmemory_task_store import _InMemoryTaskStoreImpl
from a2a.types import Task
from google.protobuf import json_format

if TYPE_CHECKING:
    from ..store import Store

TASK, RUN = "a2a_task", "a2a_run"
"""Item kinds: a task by its owner and id; the run a task id stands for."""


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
