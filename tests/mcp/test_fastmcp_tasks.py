"""tarry against a fastmcp-tasks 4.1.4 server: SEP-2663 tasks with a question during the task."""

from __future__ import annotations

import asyncio
import sys

from mcp_helpers import SERVERS, wait_for_questions

from tarry import Chat
from tarry.mcp import MCPServer, McpTask
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
