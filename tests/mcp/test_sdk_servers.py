"""tarry against MCP servers written with the official SDK: both eras, stdio and streamable HTTP."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import pytest
from mcp_helpers import booking_command, wait_for_questions

from tarry import Chat
from tarry.mcp import MCPServer, McpTask
from tarry.testing import ScriptedModel
from tests.deadline import finishes

ERAS = {"modern": "auto", "legacy": "legacy"}


@pytest.fixture(params=["stdio", "http"])
def transport(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def make_server(transport: str, era: str, request: pytest.FixtureRequest, **options: Any) -> MCPServer:
    if transport == "http":
        url = request.getfixturevalue("booking_url")
        return MCPServer(url=url, protocol=ERAS[era], **options)  # type: ignore[arg-type]
    return MCPServer(command=booking_command(), protocol=ERAS[era], **options)  # type: ignore[arg-type]


def calls(*items: tuple[str, dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"name": name, "arguments": arguments} for name, arguments in items]


def result_of(chat: Chat) -> Any:
    text = next(message.content for message in reversed(chat.messages) if message.role == "tool")
    try:
        return json.loads(text)
    except ValueError:
        return text


async def answer_booking(chat: Chat, running: asyncio.Task[Any] | None) -> asyncio.Task[Any] | None:
    """Answer the booking's two questions, wherever they come from; returns the task carrying the chat."""
    for _ in range(2):
        question = (await wait_for_questions(chat))[0]
        assert question.source == "booking"
        if question.fields[0].name == "size":
            assert question.fields[0].type == "integer"
            assert await chat.answer(question, 4)
        else:
            assert [field.name for field in question.fields] == ["time", "terrace"]
            assert await chat.answer(question, time="20:00", terrace=True)
        if running is None or running.done():
            if running is not None:
                await running
            running = asyncio.create_task(chat.complete())
    return running


@pytest.mark.parametrize("era", ["modern", "legacy"])
async def test_tools_questions_and_results(transport: str, era: str, request: pytest.FixtureRequest) -> None:
    async with make_server(transport, era, request) as server:
        assert server.modern is (era == "modern")
        model = ScriptedModel(
            [calls(("add", {"a": 2, "b": 3})), calls(("book", {"restaurant": "Chez Nous"})), "Booked."]
        )
        chat = Chat(model=model, tools=[server])
        running = asyncio.create_task(chat.ask("Add, then book"))
        running = await answer_booking(chat, running)
        assert running is not None
        reply = await running
        assert reply is not None
        assert reply.content == "Booked."
        tool_results = [message.content for message in chat.messages if message.role == "tool"]
        assert tool_results == ["5", "Booked Chez Nous for 4 at 20:00 on the terrace"]
        assert {tool.name for tool in model.requests[0].tools} >= {"add", "book", "fail", "hang"}


@pytest.mark.parametrize("era", ["modern", "legacy"])
async def test_decline_goes_to_the_server(era: str, request: pytest.FixtureRequest) -> None:
    async with make_server("stdio", era, request) as server:
        chat = Chat(model=ScriptedModel([calls(("book", {"restaurant": "Chez"})), "ok"]), tools=[server])
        running = asyncio.create_task(chat.ask("book"))
        size = (await wait_for_questions(chat))[0]
        await chat.answer(size, 2)
        if running.done():
            await running
            running = asyncio.create_task(chat.complete())
        slot = (await wait_for_questions(chat))[0]
        assert await chat.decline(slot, "no time fits")
        if running.done():
            await running
            running = asyncio.create_task(chat.complete())
        await running
        assert result_of(chat) == "No booking at Chez: the time question was declined"


async def test_modern_input_requests_are_saved_on_the_task() -> None:
    async with MCPServer(command=booking_command()) as server:
        chat = Chat(model=ScriptedModel([calls(("book", {"restaurant": "Chez"})), "ok"]), tools=[server])
        await chat.ask("book")
        record = next(iter(chat.records.values()))
        task = record.task
        assert isinstance(task, McpTask)
        assert task.kind == "input"
        assert task.input_required()
        state = task.to_dict()
        assert state["task"]["data"]["request_state"] is None or isinstance(state["task"]["data"]["request_state"], str)
        assert "request_state" not in repr(task)
        assert [question.key for question in task.questions] == [question.key for question in record.questions]


async def test_tampered_request_state_ends_the_call(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    async with MCPServer(command=booking_command()) as server:
        chat = Chat(model=ScriptedModel([calls(("book", {"restaurant": "Chez"})), "went on"]), tools=[server])
        await chat.ask("book")
        size = (await wait_for_questions(chat))[0]
        await chat.answer(size, 3)
        await chat.complete()  # the second round carries request state
        task = next(iter(chat.records.values())).task
        assert isinstance(task, McpTask)
        state = task.data["request_state"]
        assert isinstance(state, str)
        task.data["request_state"] = state[:-4] + ("AAAA" if not state.endswith("AAAA") else "BBBB")
        slot = (await wait_for_questions(chat))[0]
        await chat.answer(slot, time="18:00")
        reply = await chat.complete()
        assert reply is not None
        assert reply.content == "went on"
        assert "rejected the answers to the book call" in result_of(chat)["error"]
        assert state not in caplog.text


@pytest.mark.parametrize("rule", [True, ["delete_table"], "unsafe"])
async def test_approval_rules(rule: Any) -> None:
    async with MCPServer(command=booking_command(), requires_approval=rule) as server:
        chat = Chat(model=ScriptedModel([calls(("delete_table", {"table": 4}), ("add", {"a": 1, "b": 1})), "ok"]))
        chat.with_mcp(server, only=["delete_table", "add"])
        await chat.ask("go")
        approvals = await chat.pending_questions()
        names = [question.tool_call.name for question in approvals if question.tool_call]
        assert names == (["delete_table", "add"] if rule is True else ["delete_table"])
        for question in approvals:
            await chat.approve(question)
        await chat.complete()
        assert sorted(m.content for m in chat.messages if m.role == "tool") == ["2", "deleted 4"]


async def test_with_mcp_prefix_and_exclude() -> None:
    async with MCPServer(command=booking_command()) as server:
        model = ScriptedModel([calls(("b_add", {"a": 1, "b": 2})), "ok"])
        chat = Chat(model=model).with_mcp(server, exclude=["crash", "hang"], prefix="b_")
        await chat.ask("add")
        assert result_of(chat) == 3
        names = {tool.name for tool in model.requests[0].tools}
        assert "b_add" in names
        assert "b_crash" not in names


@pytest.mark.parametrize("era", ["modern", "legacy"])
async def test_faults_end_the_call_and_the_chat_goes_on(era: str, request: pytest.FixtureRequest) -> None:
    async with make_server("stdio", era, request, timeout=2) as server:
        model = ScriptedModel(
            [calls(("fail", {})), calls(("hang", {})), calls(("refuse", {})), calls(("crash", {})),
             calls(("add", {"a": 1, "b": 1})), "end"]
        )  # fmt: skip
        chat = Chat(model=model, tools=[server])
        reply = await chat.ask("go")
        assert reply is not None
        assert reply.content == "end"
        results = [
            json.loads(m.content) if m.content.startswith("{") else m.content for m in chat.messages if m.role == "tool"
        ]
        assert "the oven is on fire" in results[0]["error"]
        assert "did not answer the hang call within 2 seconds" in results[1]["error"]
        refused = "the MCP server 'booking' answered the refuse call with an error: Bad Request: the quota is used up"
        assert results[2] == {"error": refused}  # the server's error, not a crash
        assert "closed during the crash call" in results[3]["error"]
        assert results[4] == "2"  # a new connection after the crash


def test_auth_is_for_http_servers() -> None:
    with pytest.raises(ValueError, match="auth= is for servers reached over streamable HTTP"):
        MCPServer(command=booking_command(), auth=object())


@pytest.mark.parametrize("era", ["modern", "legacy"])
def test_an_answer_to_a_pattern_that_backtracks_exponentially_is_checked_at_once(era: str) -> None:
    # In a process of its own: a backtracking engine holds the GIL, so only a process can be timed out.
    printed = finishes(
        f"""
import asyncio, sys
sys.path.insert(0, "tests/mcp")
from mcp_helpers import booking_command, wait_for_questions
from tarry import Chat
from tarry.errors import InvalidAnswerError
from tarry.mcp import MCPServer
from tarry.testing import ScriptedModel

async def main():
    async with MCPServer(command=booking_command(), protocol={ERAS[era]!r}) as server:
        model = ScriptedModel([[{{"name": "label", "arguments": {{"restaurant": "Chez"}}}}], "ok"])
        chat = Chat(model=model, tools=[server])
        running = asyncio.create_task(chat.ask("label"))
        [asked] = await wait_for_questions(chat)
        try:
            await chat.answer(asked, "a" * 60 + "!")
        except InvalidAnswerError as error:
            print(error.errors["slug"])
        assert await chat.answer(asked, "tea for two")
        if running.done():
            await running
            running = asyncio.create_task(chat.complete())
        await running
        print(next(message.content for message in chat.messages if message.role == "tool"))

asyncio.run(main())
"""
    )
    refused, result = printed.splitlines()
    assert "does not match the pattern" in refused
    assert result == "Labelled Chez 'tea for two'"


@pytest.mark.parametrize("era", ["modern", "legacy"])
async def test_a_question_whose_pattern_cannot_be_checked_ends_the_call_saying_why(era: str) -> None:
    async with MCPServer(command=booking_command(), protocol=ERAS[era]) as server:  # type: ignore[arg-type]
        model = ScriptedModel([calls(("encode", {"restaurant": "Chez"})), "ok"])
        chat = Chat(model=model, tools=[server])
        await chat.ask("encode")
        assert not chat.waiting
        said = result_of(chat)["error"]
        assert "tarry cannot ask" in said and "lookahead" in said and "^(?=.*" in said
        if era == "legacy":  # the server got an error for its elicitation/create, and its call ended with it
            assert "answered the encode call with an error" in said
