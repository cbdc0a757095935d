"""Faults and URL questions: each call ends with a result saying what happened, the chat goes on, logs stay clean."""

from __future__ import annotations

import asyncio
import json
import logging
import sys
from typing import Any

import pytest
from mcp_helpers import SERVERS, booking_command, wait_for_questions
from sqlalchemy import text

from tarry import Chat
from tarry.mcp import MCPServer, McpTask
from tarry.store import Store
from tarry.testing import ScriptedModel
from tests.store.conftest import database_url  # noqa: F401  (the fixture: SQLite, then PostgreSQL)


def tool_results(chat: Chat) -> dict[str, Any]:
    """Each call's result by tool name (JSON decoded when it is JSON)."""
    names = {record.call.id: record.call.name for record in chat.records.values()}
    results: dict[str, Any] = {}
    for message in chat.messages:
        if message.role == "tool":
            try:
                value = json.loads(message.content)
            except ValueError:
                value = message.content
            results[names[message.tool_call_id or ""]] = value
    return results


async def complete_until_done(chat: Chat, *, within: float = 60.0) -> None:
    """``complete()`` until no call waits, at the tasks' poll intervals (fails after ``within`` seconds)."""
    loop = asyncio.get_running_loop()
    end = loop.time() + within
    while chat.waiting:
        assert loop.time() < end, "the chat still waits"
        await chat.complete()
        tasks = await chat.pending_tasks()
        if tasks:
            await asyncio.sleep(min(task.poll_interval or 0.2 for task in tasks))


async def test_a_malformed_result_ends_the_call(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    async with MCPServer(command=booking_command()) as server:
        assert server.modern
        model = ScriptedModel([[{"name": "garbled", "arguments": {}}, {"name": "add", "arguments": {"a": 2, "b": 2}}],
                               [{"name": "add", "arguments": {"a": 1, "b": 2}}], "went on"])  # fmt: skip
        chat = Chat(model=model, tools=[server])
        reply = await chat.ask("go")
        assert reply is not None
        assert reply.content == "went on"
        results = [message.content for message in chat.messages if message.role == "tool"]
        assert json.loads(results[0]) == {
            "error": "the MCP server 'booking' sent a malformed result for the garbled call."
        }
        assert results[1:] == ["4", "3"]  # the other call of the turn, and the next turn's call
        assert not chat.waiting
    assert "malformed result" in caplog.text
    assert "secret-token-3141" not in caplog.text


async def test_a_forgotten_legacy_task_ends_the_call(
    everything_command: list[str], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    server = MCPServer(command=everything_command)
    model = ScriptedModel(
        [[{"name": "simulate-research-query", "arguments": {"topic": "owls"}},
          {"name": "get-sum", "arguments": {"a": 1, "b": 2}}], "went on"]
    )  # fmt: skip
    chat = Chat(model=model, tools=[server])
    try:
        await chat.ask("research")
        (task,) = await chat.pending_tasks()
        assert isinstance(task, McpTask)
        assert task.task_id
        await server.close()  # the stdio server goes, and its tasks with it; the next use starts a new one
        await complete_until_done(chat)
    finally:
        await server.close()
    results = tool_results(chat)
    assert "no longer knows the task of the simulate-research-query call" in results["simulate-research-query"]["error"]
    assert "3" in str(results["get-sum"])
    assert chat.last_reply is not None
    assert chat.last_reply.content == "went on"
    assert task.task_id not in caplog.text


async def test_a_forgotten_sep2663_task_ends_the_call(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    server = MCPServer(command=[sys.executable, str(SERVERS / "tasks_server.py")])
    model = ScriptedModel([[{"name": "survey", "arguments": {"topic": "tea"}}], "went on"])
    chat = Chat(model=model, tools=[server])
    try:
        await chat.ask("survey")
        (task,) = await chat.pending_tasks()
        assert isinstance(task, McpTask)
        assert task.task_id
        await server.close()
        await complete_until_done(chat)
    finally:
        await server.close()
    error = tool_results(chat)["survey"]["error"]
    assert "no longer knows the task of the survey call" in error
    assert chat.last_reply is not None
    assert chat.last_reply.content == "went on"
    assert task.task_id not in caplog.text


URL = "https://example.com/authorize?session=secret-url-token-2718"


@pytest.mark.parametrize(("decide", "said"), [("accept", "completed the URL elicitation"), ("decline", "declined")])
async def test_url_elicitation(
    everything_command: list[str], caplog: pytest.LogCaptureFixture, decide: str, said: str
) -> None:
    caplog.set_level(logging.DEBUG)
    async with MCPServer(command=everything_command) as server:
        model = ScriptedModel([[{"name": "trigger-url-elicitation", "arguments": {"url": URL}}], "went on"])
        chat = Chat(model=model, tools=[server])
        running = asyncio.create_task(chat.ask("sign in"))
        (question,) = await wait_for_questions(chat)
        assert question.kind == "url"
        assert question.url == URL
        assert question.fields == ()
        assert question.source == server.name
        if decide == "accept":
            assert await chat.answer(question)  # the person consents to open the URL
        else:
            assert await chat.decline(question, "not now")
        reply = await asyncio.wait_for(running, 60)
        assert reply is not None
        assert reply.content == "went on"
        assert said in tool_results(chat)["trigger-url-elicitation"]
    assert "secret-url-token-2718" not in caplog.text


async def test_a_pushed_question_nobody_answers_in_time_is_cancelled() -> None:
    async with MCPServer(command=booking_command(), protocol="legacy", question_ttl=1) as server:
        model = ScriptedModel([[{"name": "book", "arguments": {"restaurant": "Chez"}}], "went on"])
        chat = Chat(model=model, tools=[server])
        reply = await asyncio.wait_for(chat.ask("book"), 60)  # the clock of the request stands while it waits
        assert reply is not None
        assert reply.content == "went on"
        (question,) = next(iter(chat.records.values())).questions
        assert question.decision is None
        assert question.expires_at is not None
        assert "elicitation was cancel" in tool_results(chat)["book"]["error"]  # the server got "cancel"


@pytest.mark.parametrize("decide", ["accept", "decline"])
async def test_url_elicitation_required_is_a_url_question_then_a_retry(
    everything: dict[str, Any], caplog: pytest.LogCaptureFixture, decide: str
) -> None:
    caplog.set_level(logging.DEBUG)
    async with MCPServer(**everything) as server:
        arguments = {"url": URL, "errorPath": True}
        model = ScriptedModel([[{"name": "trigger-url-elicitation", "arguments": arguments}], "went on"])
        chat = Chat(model=model, tools=[server])
        await chat.ask("sign in")  # the server answers -32042: the call parks on a URL question
        (consent,) = await chat.pending_questions()
        assert consent.kind == "url"
        assert consent.url == "https://modelcontextprotocol.io"
        assert consent.source == server.name
        (task,) = [record.task for record in chat.records.values() if record.task is not None]
        assert isinstance(task, McpTask)
        assert task.kind == "consent"
        if decide == "decline":
            assert await chat.decline(consent)
            reply = await chat.complete()
            assert reply is not None
            assert reply.content == "went on"
            assert "did not visit it" in tool_results(chat)["trigger-url-elicitation"]["error"]
            return
        assert await chat.answer(consent)  # the person visited it: the call is retried
        running = asyncio.create_task(chat.complete())
        (question,) = await wait_for_questions(chat)  # the retried call asks its own URL question
        assert question.id != consent.id
        assert question.url == URL
        assert await chat.answer(question)
        reply = await asyncio.wait_for(running, 60)
        assert reply is not None
        assert reply.content == "went on"
        assert "completed the URL elicitation" in tool_results(chat)["trigger-url-elicitation"]
    tarry_logs = "\n".join(record.getMessage() for record in caplog.records if record.name.startswith("tarry"))
    assert "secret-url-token-2718" not in tarry_logs  # (the SDK itself logs HTTP messages at DEBUG)


async def test_a_pushed_question_whose_call_another_process_took_over_is_cancelled(
    database_url: str,  # noqa: F811
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The server asks through a call whose lease ran out; another process takes the call over and closes it as
    interrupted. No answer can come through this process now: the server is told "cancel", and the process
    says so, with no traceback of a failed handler."""
    async with (
        Store(database_url, poll_interval=0.05) as store,
        Store(database_url) as other,
        MCPServer(command=booking_command(), protocol="legacy") as server,
    ):
        await store.setup()
        model = ScriptedModel([[{"name": "book", "arguments": {"restaurant": "Chez"}}], "went on"])
        chat = await store.create_chat(model, [server])
        asking = asyncio.create_task(chat.ask("book"))
        async with asyncio.timeout(60):
            while not await other.pending_questions(chat.id):
                await asyncio.sleep(0.05)
        await other.db.run_write(
            lambda connection: connection.execute(
                text("UPDATE tarry_tool_calls SET claimed_until = :past WHERE chat_id = :chat"),
                {"past": "2000-01-01 00:00:00+00:00", "chat": chat.id},
            )
        )
        elsewhere = await other.load_chat(chat.id, ScriptedModel(["taken over"]), [server])
        assert await asyncio.wait_for(elsewhere.complete(), 60) is not None
        assert "interrupted" in str(tool_results(elsewhere)["book"])
        await asyncio.wait_for(asking, 60)
    assert "'booking' asked through is another process's now; cancelled" in caplog.text
    assert not [record for record in caplog.records if record.levelname == "ERROR"], caplog.text
