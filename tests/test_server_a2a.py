"""The agent over A2A, driven by a2a-sdk's own client against a real `jsonagent serve`."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from test_server import ASK, DONE, TIME, serve  # noqa: F401  (the fixture)
from jsonagent.testing import step

pytest.importorskip("a2a")
from a2a.client import ClientConfig, create_client  # noqa: E402
from a2a.helpers import get_message_text, new_text_message  # noqa: E402
from a2a.types import (CancelTaskRequest, GetTaskRequest, Role, SendMessageRequest,  # noqa: E402
                       TaskState)


async def client_for(server, streaming: bool):
    http = httpx.AsyncClient(timeout=20, headers={"Authorization": f"Bearer {server.token}"})
    client = await create_client(server.url, ClientConfig(streaming=streaming, httpx_client=http),
                                 resolver_http_kwargs={"headers": http.headers})
    return client, http


async def send(client, text: str, task=None) -> tuple[list, object]:
    """Every response to one message, and the task as it stands after it."""
    message = new_text_message(text, role=Role.ROLE_USER,
                               task_id=task.id if task else None,
                               context_id=task.context_id if task else None)
    seen = []
    async for response in client.send_message(SendMessageRequest(message=message)):
        seen.append(response)
    task_id = next(r.task.id if r.HasField("task") else r.status_update.task_id for r in seen)
    return seen, await client.get_task(GetTaskRequest(id=task_id))


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 60))


def test_a2a_stream_asks_then_completes_with_the_answer(serve):
    server = serve([TIME, ASK, DONE], token="a2a-token")

    async def flow():
        card = httpx.get(server.url + "/.well-known/agent-card.json",
                         headers={"Authorization": "Bearer a2a-token"}, timeout=10).json()
        assert card["name"] == "jsonagent" and card["capabilities"]["streaming"]
        client, http = await client_for(server, streaming=True)
        try:
            seen, task = await send(client, "What is the weather?")
            states = [r.status_update.status.state for r in seen if r.HasField("status_update")]
            assert TaskState.TASK_STATE_WORKING in states
            assert task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
            assert get_message_text(task.status.message) == "Which city?"
            seen, task = await send(client, "Oslo", task)
            assert task.status.state == TaskState.TASK_STATE_COMPLETED
            assert get_message_text(task.status.message) == "42"
        finally:
            await http.aclose()

    run(flow())
    runs = httpx.get(server.url + "/v1/runs", headers={"Authorization": "Bearer a2a-token"}).json()
    assert runs["data"][0]["status"] == "completed"
    assert runs["data"][0]["steps"][1]["observation"] == "Oslo"


def test_a2a_answer_in_the_same_context_after_a_restart(serve):
    server = serve([ASK, DONE], token="r")

    async def ask():
        client, http = await client_for(server, streaming=True)
        try:
            _, task = await send(client, "weather?")
            assert task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
            return task.context_id
        finally:
            await http.aclose()

    async def answer(context_id: str):
        client, http = await client_for(server, streaming=True)
        try:  # the task died with the server; its context (our session) did not
            message = new_text_message("Oslo", role=Role.ROLE_USER, context_id=context_id)
            seen = [r async for r in client.send_message(SendMessageRequest(message=message))]
            final = [r.status_update.status for r in seen if r.HasField("status_update")][-1]
            assert final.state == TaskState.TASK_STATE_COMPLETED
            assert get_message_text(final.message) == "42"
        finally:
            await http.aclose()

    context_id = run(ask())
    server.kill()  # kill -9
    server.start()
    run(answer(context_id))


def test_a2a_send_approval_denied_and_cancel(serve):
    server = serve([step("delete_file", {"path": "a.txt"}, "clean"), DONE], token="t")

    async def flow():
        client, http = await client_for(server, streaming=False)
        try:
            _, task = await send(client, "clean up")
            assert task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
            assert "delete_file" in get_message_text(task.status.message)
            _, task = await send(client, "no, keep it", task)
            assert task.status.state == TaskState.TASK_STATE_COMPLETED
            _, other = await send(client, "clean again")
            assert other.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
            cancelled = await client.cancel_task(CancelTaskRequest(id=other.id))
            assert cancelled.status.state == TaskState.TASK_STATE_CANCELED
        finally:
            await http.aclose()

    run(flow())
    runs = httpx.get(server.url + "/v1/runs", headers={"Authorization": "Bearer t"}).json()["data"]
    assert [r["status"] for r in runs] == ["cancelled", "completed"]
    assert "no, keep it" in str(runs[1]["steps"][0]["observation"])


def test_a_message_sent_again_with_its_calls_key_gets_its_task_back_never_a_second_run(serve):
    """The key another jsonagent's A2A tool sends (tools/a2a.py): the same key is the same
    task and run, waiting or ended, and the message sent again is never taken as an answer;
    another key is another task and run."""
    server = serve([ASK, DONE], token="k")

    async def keyed(client, text: str, key: str):
        message = new_text_message(text, role=Role.ROLE_USER)
        message.message_id = key
        message.metadata.update({"idempotency_key": key})
        seen = [r async for r in client.send_message(SendMessageRequest(message=message))]
        task_id = next(r.task.id if r.HasField("task") else r.status_update.task_id
                       for r in seen)
        return await client.get_task(GetTaskRequest(id=task_id))

    async def flow():
        client, http = await client_for(server, streaming=True)
        polling, http2 = await client_for(server, streaming=False)
        try:
            first = await keyed(client, "What is the weather?", "run_a.1.0")
            assert first.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
            again = await keyed(polling, "What is the weather?", "run_a.1.0")
            assert again.id == first.id and again.context_id == first.context_id
            assert again.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
            assert get_message_text(again.status.message) == "Which city?"
            _, done = await send(client, "Oslo", first)
            assert done.status.state == TaskState.TASK_STATE_COMPLETED
            for c in (client, polling):  # ended: the task as it stands, streaming or not
                after = await keyed(c, "What is the weather?", "run_a.1.0")
                assert after.id == first.id
                assert after.status.state == TaskState.TASK_STATE_COMPLETED
                assert get_message_text(after.status.message) == "42"
            other = await keyed(client, "What is the weather?", "run_a.2.0")
            assert other.id != first.id
            assert other.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
        finally:
            await http.aclose()
            await http2.aclose()

    run(flow())
    runs = httpx.get(server.url + "/v1/runs", headers={"Authorization": "Bearer k"}).json()["data"]
    assert [r["status"] for r in runs] == ["requires_action", "completed"]
    assert runs[1]["steps"][0]["observation"] == "Oslo"  # the message sent again was no answer
