"""tarry against a fastmcp-tasks 4.1.4 server: SEP-2663 tasks with a question during the task, from a chat
and from a plain SDK session on tarry.mcp.task_extension."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import mcp_types as types
import pytest
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp_helpers import SERVERS, http_server, wait_for_questions

from tarry import Chat
from tarry.mcp import MCPServer, McpTask, task_extension
from tarry.testing import ScriptedModel


async def test_sep2663_task_with_a_question() -> None:
    async with MCPServer(command=[sys.executable, str(SERVERS / "tasks_server.py")]) as server:
        assert server.modern
        model = ScriptedModel([[{"name": "survey", "arguments": {"topic": "tea"}}], "thanks"])
        chat = Chat(model=model, tools=[server])
        await chat.ask("survey")
        record = next(iter(chat.records.values()))
        assert isinstance(record.task, McpTask)
        assert record.task.kind == "task"
        loop = asyncio.get_running_loop()
        end = loop.time() + 30
        while not await chat.pending_questions():
            assert loop.time() < end, "no question came"
            await chat.complete()
            await asyncio.sleep(record.task.poll_interval or 0.2)
        (question,) = await wait_for_questions(chat)
        assert question.key
        assert await chat.answer(question, 4)
        while chat.waiting:
            assert loop.time() < end + 30, "the task did not finish"
            await chat.complete()
            if chat.waiting:
                await asyncio.sleep(record.task.poll_interval or 0.2)
        assert next(m.content for m in chat.messages if m.role == "tool") == "tea rated 4"


@asynccontextmanager
async def tasks_session() -> AsyncIterator[ClientSession]:
    """A 2026-07-28 SDK session that declares the tasks extension, to the server over streamable HTTP."""
    argv = [sys.executable, str(SERVERS / "tasks_server.py"), "--http", "{port}"]
    with http_server(argv, {"TASKS_POLL_MS": "50"}) as url:
        async with (
            streamable_http_client(url) as (read, write),
            ClientSession(read, write, **task_extension.session_options()) as session,
        ):
            await session.discover()
            yield session


async def task_until(session: ClientSession, task_id: str, status: str) -> task_extension.DetailedTask:
    """Poll ``tasks/get`` at the task's own interval until it is ``status`` (fails after 15 s)."""
    loop = asyncio.get_running_loop()
    end = loop.time() + 15
    while (task := await task_extension.get_task(session, task_id)).status != status:
        assert loop.time() < end, f"the task is {task.status}, not {status}"
        await asyncio.sleep((task.poll_interval_ms or 100) / 1000)
    return task


async def test_the_task_extension_helpers_answer_a_question_of_a_task() -> None:
    async with tasks_session() as session:
        assert session.protocol_version == "2026-07-28"
        created = await task_extension.call_tool(session, "survey", {"topic": "tea"})
        assert isinstance(created, task_extension.TaskCreated)
        assert created.poll_interval_ms == 50
        asking = await task_until(session, created.task_id, "input_required")
        [(key, request)] = (asking.input_requests or {}).items()
        assert request["params"]["message"] == "Rate tea from 1 to 5"
        await task_extension.update_task(session, created.task_id, {key: {"action": "accept", "content": {"stars": 4}}})
        done = await task_until(session, created.task_id, "completed")
    assert done.result is not None and done.result["content"][0]["text"] == "tea rated 4"


async def test_the_task_extension_helpers_cancel_a_task() -> None:
    async with tasks_session() as session:
        created = await task_extension.call_tool(session, "survey", {"topic": "coffee"})
        assert isinstance(created, task_extension.TaskCreated)
        await task_extension.cancel_task(session, created.task_id)
        cancelled = await task_until(session, created.task_id, "cancelled")
        assert cancelled.result is None
        with pytest.raises(MCPError) as unknown:
            await task_extension.get_task(session, "no-such-task")
    assert unknown.value.error.code == types.INVALID_PARAMS
