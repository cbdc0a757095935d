"""Checking on a server's task honours its poll interval: a resume before it passed sends no tasks/get.

The proof is black-box: the server is stopped after the task was created. A ``tasks/get``
would open a new connection (and find the task forgotten); before the interval passed,
``complete()`` opens none and the call still waits; after it, the check happens.
"""

from __future__ import annotations

import asyncio
import json
import sys
from datetime import UTC, datetime, timedelta

from mcp_helpers import SERVERS

from tarry import Chat
from tarry.mcp import MCPServer, McpTask
from tarry.mcp.flow import due
from tarry.testing import ScriptedModel


async def test_no_tasks_get_before_the_poll_interval() -> None:
    # A 5 s interval: room for stopping the stdio server (about 2 s) before the early complete().
    server = MCPServer(command=[sys.executable, str(SERVERS / "tasks_server.py")], env={"TASKS_POLL_MS": "5000"})
    chat = Chat(model=ScriptedModel([[{"name": "survey", "arguments": {"topic": "tea"}}], "went on"]), tools=[server])
    try:
        await chat.ask("start")
        (task,) = await chat.pending_tasks()
        assert isinstance(task, McpTask)
        assert task.poll_interval is not None
        assert task.poll_interval == 5.0
        assert task.data["checked_at"]
        await server.close()

        await chat.complete()  # well within the interval: nothing is sent
        assert server.protocol_version is None, "a connection was opened: something was sent"
        assert chat.waiting
        (still,) = await chat.pending_tasks()
        assert still.task_id == task.task_id

        loop = asyncio.get_running_loop()
        end = loop.time() + 30
        while chat.waiting:  # once the interval passed, the check goes out (and finds the task forgotten)
            assert loop.time() < end, "the task was never checked"
            await asyncio.sleep(task.poll_interval)
            await chat.complete()
        assert server.protocol_version is not None
        result = json.loads(next(message.content for message in chat.messages if message.role == "tool"))
        assert "no longer knows the task" in result["error"]
    finally:
        await server.close()


def test_due_after_the_poll_interval_since_the_last_check() -> None:
    checked = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
    task = McpTask(poll_interval=2.0, data={"kind": "task", "checked_at": checked.isoformat()})
    assert not due(task, checked)
    assert not due(task, checked + timedelta(seconds=1.999))
    assert due(task, checked + timedelta(seconds=2))
    assert due(McpTask(poll_interval=None, data=task.data), checked), "no interval: always due"
    assert due(McpTask(poll_interval=2.0, data={"kind": "task"}), checked), "never checked: due"
    assert due(McpTask(poll_interval=2.0, data={"checked_at": "yesterday"}), checked)
