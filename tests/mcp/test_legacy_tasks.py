"""The 2025-11-25 task adapter (tarry.mcp.legacy_tasks) on a plain SDK session, against server-everything."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import datetime
from typing import Any

import mcp_types as types
import pytest
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.shared.exceptions import MCPError
from mcp.shared.jsonrpc_dispatcher import JSONRPCDispatcher

from tarry.mcp import legacy_tasks
from tarry.mcp.receiver import RELATED_TASK

Connection = tuple[ClientSession, JSONRPCDispatcher[Any]]


@asynccontextmanager
async def connect(everything_command: list[str]) -> AsyncIterator[Connection]:
    """An initialised SDK session to server-everything over stdio, and its dispatcher (one task enters and exits)."""
    parameters = StdioServerParameters(command=everything_command[0], args=everything_command[1:])
    async with stdio_client(parameters) as (read, write):
        dispatcher: JSONRPCDispatcher[Any] = JSONRPCDispatcher(read, write)
        async with ClientSession(dispatcher=dispatcher) as session:
            await session.initialize()
            yield session, dispatcher


def moment(text: str | None) -> datetime:
    assert text is not None
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


async def test_create_get_and_the_blocking_result(everything_command: list[str]) -> None:
    async with connect(everything_command) as connection:
        session, dispatcher = connection
        created = await legacy_tasks.call_tool_as_task(
            session, dispatcher, "simulate-research-query", {"topic": "owls"}, ttl_ms=60_000
        )
        assert isinstance(created, types.CreateTaskResult)
        task = created.task
        assert task.task_id
        assert task.status == "working"
        assert isinstance(task.ttl, int)
        assert task.poll_interval == 1000
        assert moment(task.created_at).tzinfo is not None

        got = await legacy_tasks.get_task(session, task.task_id)
        assert got.task_id == task.task_id
        assert got.status in ("working", "completed")
        assert got.created_at == task.created_at

        payload = await legacy_tasks.task_result(session, task.task_id)  # blocks until the research is done
        assert payload["_meta"][RELATED_TASK] == {"taskId": task.task_id}
        assert not payload.get("isError")
        assert "Research Report: owls" in payload["content"][0]["text"]

        done = await legacy_tasks.get_task(session, task.task_id)
        assert done.status == "completed"
        assert moment(done.last_updated_at) > moment(done.created_at)


async def test_cancel_a_working_task_then_a_terminal_one(everything_command: list[str]) -> None:
    async with connect(everything_command) as connection:
        session, dispatcher = connection
        created = await legacy_tasks.call_tool_as_task(session, dispatcher, "simulate-research-query", {"topic": "x"})
        cancelled = await legacy_tasks.cancel_task(session, created.task.task_id)
        assert isinstance(cancelled, types.CancelTaskResult)
        assert cancelled.status == "cancelled"
        assert (await legacy_tasks.get_task(session, created.task.task_id)).status == "cancelled"
        with pytest.raises(MCPError) as raised:
            await legacy_tasks.cancel_task(session, created.task.task_id)
        assert raised.value.error.code == types.INVALID_PARAMS


@pytest.mark.parametrize("verb", ["get_task", "task_result", "cancel_task"])
async def test_unknown_task_ids_are_invalid_params(everything_command: list[str], verb: str) -> None:
    async with connect(everything_command) as connection:
        session, _ = connection
        with pytest.raises(MCPError) as raised:
            await asyncio.wait_for(getattr(legacy_tasks, verb)(session, "no-such-task"), 30)
        assert raised.value.error.code == types.INVALID_PARAMS
