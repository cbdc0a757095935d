"""tarry against @modelcontextprotocol/server-everything (2025-11-25) over stdio and streamable HTTP.

Legacy tasks and questions.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from mcp_helpers import wait_for_questions

from tarry import Chat
from tarry.mcp import MCPServer, McpTask
from tarry.testing import ScriptedModel


async def carry_until_done(chat: Chat, *, within: float = 60.0) -> None:
    """complete() until no call waits, honouring the tasks' poll intervals (fails after ``within`` seconds)."""
    loop = asyncio.get_running_loop()
    end = loop.time() + within
    while chat.waiting:
        assert loop.time() < end, "the task did not finish in time"
        await chat.complete()
        tasks = await chat.pending_tasks()
        if tasks:
            await asyncio.sleep(min(task.poll_interval or 0.5 for task in tasks))


async def test_legacy_task_with_a_question_during_input_required(everything: dict[str, Any]) -> None:
    async with MCPServer(**everything) as server:
        assert server.protocol_version == "2025-11-25"
        model = ScriptedModel(
            [[{"name": "simulate-research-query", "arguments": {"topic": "python", "ambiguous": True}}], "done"]
        )
        chat = Chat(model=model, tools=[server])
        await chat.ask("research")
        (task,) = await chat.pending_tasks()
        assert isinstance(task, McpTask)
        assert task.kind == "task"
        assert task.task_id
        assert task.expires_at is not None
        assert task.poll_interval == 1.0
        carrying = asyncio.create_task(carry_until_done(chat))
        question = (await wait_for_questions(chat, within=60))[0]
        assert question.awaited is True
        choice = question.fields[0]
        value = next(iter(choice.choices)) if choice.choices else "snake"
        assert await chat.answer(question, **{choice.name or "value": value})
        await carrying
        result = next(message.content for message in chat.messages if message.role == "tool")
        assert "python" in result.lower()
        assert chat.last_reply is not None
        assert chat.last_reply.content == "done"


async def test_cancel_sends_tasks_cancel(everything: dict[str, Any]) -> None:
    async with MCPServer(**everything) as server:
        model = ScriptedModel([[{"name": "simulate-research-query", "arguments": {"topic": "rust"}}]])
        chat = Chat(model=model, tools=[server])
        await chat.ask("research")
        (task,) = await chat.pending_tasks()
        await chat.cancel()
        assert task.cancelled()
        assert "cancelled" in chat.messages[-1].content
        assert task.task_id is not None
        assert (await server.connection.legacy_get(task.task_id)).status == "cancelled"


async def test_task_augmented_elicitation_is_received_as_a_task(everything: dict[str, Any]) -> None:
    async with MCPServer(**everything) as server:
        model = ScriptedModel([[{"name": "trigger-elicitation-request-async", "arguments": {}}], "done"])
        chat = Chat(model=model, tools=[server])
        running = asyncio.create_task(chat.ask("ask me"))
        question = (await wait_for_questions(chat, within=30))[0]
        values = {
            field.name: field.default if field.default is not None else _value(field)
            for field in question.fields
            if field.required and field.name
        }
        assert await chat.answer(question, **values)
        await running
        result = next(message.content for message in chat.messages if message.role == "tool")
        assert "COMPLETED" in result


def _value(field: object) -> object:
    kind = getattr(field, "type", "string")
    choices = getattr(field, "choices", None)
    if choices:
        return [next(iter(choices))] if kind == "array" else next(iter(choices))
    return {"string": "Ada", "integer": 3, "number": 2.5, "boolean": True}.get(kind, "x")


def test_over_http_it_listens_on_loopback_only(everything_http: str) -> None:
    port = urlsplit(everything_http).port
    assert port is not None
    listening = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            address, hex_port = local.rsplit(":", 1)
            if state == "0A" and int(hex_port, 16) == port:  # 0A: LISTEN
                listening.add(address)
    assert listening == {"0100007F"}, listening  # 127.0.0.1 only, no wildcard (IPv4 or IPv6)
