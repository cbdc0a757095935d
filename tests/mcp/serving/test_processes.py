"""tarry's MCP server in real OS processes, used by tarry's own MCP client (``MCPServer``).

Every server process serves the same SQLite file: a task started through one is finished
through another, and a task whose process was killed is carried on by another, its tool
having run once.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from mcp_helpers import ROOT, wait_for_questions

from tarry import Chat, Message
from tarry.mcp import MCPServer, McpTask
from tarry.store import Store
from tarry.testing import ScriptedModel

from .conftest import TOOLS, ServerProcess


def _model(call: dict[str, Any]) -> ScriptedModel:
    def turn(messages: list[Message]) -> Any:
        return [call] if messages[-1].role == "user" else f"Done: {messages[-1].content}"

    return ScriptedModel([turn] * 4)


def _chat(url: str, call: dict[str, Any], protocol: str = "auto") -> Chat:
    server = MCPServer(url=url, name="builds", protocol=protocol)  # type: ignore[arg-type]
    return Chat(model=_model(call), tools=[server])


async def _until_done(chat: Chat, within: float = 60.0) -> Message | None:
    loop = asyncio.get_running_loop()
    end = loop.time() + within
    reply = await chat.complete()
    while chat.waiting:
        assert loop.time() < end, f"the chat still waits after {within} s: {await chat.pending_tasks()!r}"
        await asyncio.sleep(0.1)
        reply = await chat.complete()
    return reply


async def _until(condition: Callable[[], bool], within: float = 30.0) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + within
    while not condition():
        assert loop.time() < end, f"not true within {within} s"
        await asyncio.sleep(0.05)


def _runs(markers: Path, kind: str) -> list[str]:
    lines = markers.read_text().splitlines() if markers.exists() else []
    return [line for line in lines if line.startswith(f"{kind} ")]


async def test_a_call_that_finishes_at_once_answers_at_once(start_server: Callable[..., ServerProcess]) -> None:
    server = start_server()
    chat = _chat(server.url, {"name": "add", "arguments": {"a": 2, "b": 3}}, "2026-07-28")
    reply = await chat.ask("Add 2 and 3")
    assert reply is not None and reply.content == "Done: 5"
    assert not chat.waiting
    # A 2025-11-25 client asks for a task wherever a tool allows one: the task is done at once.
    chat = _chat(server.url, {"name": "add", "arguments": {"a": 2, "b": 3}}, "legacy")
    await chat.ask("Add 2 and 3")
    reply = await _until_done(chat)
    assert reply is not None and reply.content == "Done: 5"


@pytest.mark.parametrize("protocol", ["legacy", "2026-07-28"])
async def test_a_task_is_a_task_for_tarrys_client_and_finishes_through_another_process(
    start_server: Callable[..., ServerProcess], tmp_path: Path, markers: Path, protocol: str
) -> None:
    first, second = start_server(), start_server()
    release = tmp_path / "release"
    chat = _chat(first.url, {"name": "build", "arguments": {"release": str(release)}}, protocol)
    await chat.ask("Build it")
    [task] = await chat.pending_tasks()
    assert isinstance(task, McpTask) and task.status == "working" and task.task_id is not None
    # The client moves to the second process (a load balancer would): same chat, same task id.
    moved = Chat(model=chat.model, tools=[MCPServer(url=second.url, name="builds", protocol=protocol)])  # type: ignore[arg-type]
    moved.messages, moved.records = chat.messages, chat.records
    release.touch()
    reply = await _until_done(moved)
    assert reply is not None and reply.content == f"Done: built {release}"
    assert len(_runs(markers, "build")) == 1


@pytest.mark.parametrize("protocol", ["legacy", "2026-07-28"])
async def test_a_killed_server_process_leaves_its_task_to_another_and_the_tool_runs_once(
    start_server: Callable[..., ServerProcess], database: str, tmp_path: Path, markers: Path, protocol: str
) -> None:
    first = start_server(lease=1.0)
    release = tmp_path / "release"
    chat = _chat(first.url, {"name": "build", "arguments": {"release": str(release)}}, protocol)
    await chat.ask("Build it")
    async with Store(database) as store:  # the task is answered before its tool runs: wait until it ran
        await _until_async(lambda: _build_saved(store))
    first.kill()
    second = start_server(lease=1.0)
    moved = Chat(model=chat.model, tools=[MCPServer(url=second.url, name="builds", protocol=protocol)])  # type: ignore[arg-type]
    moved.messages, moved.records = chat.messages, chat.records
    release.touch()
    reply = await _until_done(moved)
    assert reply is not None and reply.content == f"Done: built {release}"
    assert len(_runs(markers, "build")) == 1


async def test_a_tools_question_reaches_tarrys_client_in_both_eras(start_server: Callable[..., ServerProcess]) -> None:
    server = start_server()
    for protocol in ("legacy", "2026-07-28"):
        chat = _chat(server.url, {"name": "pick_colour", "arguments": {"wall": "north"}}, protocol)
        await chat.ask("Paint the north wall")
        # 2025-11-25: the question arrives on tasks/result, which the running chat holds open meanwhile.
        running = asyncio.ensure_future(_until_done(chat))
        [question] = await wait_for_questions(chat)
        assert question.message == "Which colour?" and [field.name for field in question.fields] == ["colour", "coats"]
        assert await chat.answer(question, colour="blue", coats=2)
        reply = await asyncio.wait_for(running, 60)
        assert reply is not None and reply.content == "Done: north: 2 coat(s) of blue", protocol


async def test_several_questions_at_once_reach_tarrys_client_in_both_eras(
    start_server: Callable[..., ServerProcess],
) -> None:
    server = start_server()
    answers = {"Your name?": {"name": "Ann"}, "Go ahead?": {"go": True}}
    for protocol in ("legacy", "2026-07-28"):
        chat = _chat(server.url, {"name": "survey", "arguments": {}}, protocol)
        await chat.ask("Run the survey")
        running = asyncio.ensure_future(_until_done(chat))
        asked: list[str] = []
        while len(asked) < 2:  # 2026-07-28 asks both in one round; 2025-11-25 one elicitation after the other
            for question in await wait_for_questions(chat):
                assert await chat.answer(question, **answers[question.message])
                asked.append(question.message)
        reply = await asyncio.wait_for(running, 60)
        assert sorted(asked) == sorted(answers), protocol
        assert reply is not None and reply.content == 'Done: [{"name": "Ann"}, {"go": true}]', protocol


async def test_cancelling_a_task_reaches_the_running_tool(
    start_server: Callable[..., ServerProcess], tmp_path: Path, markers: Path
) -> None:
    server = start_server()
    release = tmp_path / "never"
    chat = _chat(server.url, {"name": "build", "arguments": {"release": str(release)}}, "legacy")
    await chat.ask("Build it")
    await _until(lambda: len(_runs(markers, "build")) == 1)
    await chat.cancel()
    await _until(lambda: _runs(markers, "cancel") == [f"cancel {release}"])
    assert not chat.waiting


async def test_stdio_serves_the_same_tools(database: str, markers: Path, tmp_path: Path) -> None:
    command = [sys.executable, "-m", "tarry.cli", "mcp", "serve", "--stdio", "--tools", TOOLS, "--url", database]
    env = {"PYTHONPATH": str(ROOT), "TARRY_TEST_MARKERS": str(markers)}
    server = MCPServer(command=command, env=env, cwd=ROOT, name="builds")
    chat = Chat(model=_model({"name": "add", "arguments": {"a": 4, "b": 5}}), tools=[server])
    await chat.ask("Add 4 and 5")
    reply = await _until_done(chat)  # a 2025-11-25 stdio connection makes even this call a task
    assert reply is not None and reply.content == "Done: 9"


async def test_tarry_worker_carries_a_served_call_on_when_no_server_process_is_left(
    start_server: Callable[..., ServerProcess],
    start_worker: Callable[[], Callable[[], None]],
    database: str,
    tmp_path: Path,
    markers: Path,
) -> None:
    first = start_server(lease=1.0)
    release = tmp_path / "release"
    chat = _chat(first.url, {"name": "build", "arguments": {"release": str(release)}}, "legacy")
    await chat.ask("Build it")
    async with Store(database) as store:
        await _until_async(lambda: _build_saved(store))
    first.kill()
    release.touch()
    stop_worker = start_worker()
    async with Store(database) as store:
        await _until_async(lambda: _finished(store), within=120)
    stop_worker()
    # Whichever server process the client reaches now reads the finished task.
    second = start_server()
    moved = Chat(model=chat.model, tools=[MCPServer(url=second.url, name="builds", protocol="legacy")])
    moved.messages, moved.records = chat.messages, chat.records
    reply = await _until_done(moved)
    assert reply is not None and reply.content == f"Done: built {release}"
    assert len(_runs(markers, "build")) == 1


async def _build_saved(store: Store) -> bool:
    return any(task.status_message in ("building", "still building") for task in await store.pending_tasks())


async def _finished(store: Store) -> bool:
    return any(summary.open_calls == 0 and summary.messages >= 3 for summary in await store.list_chats())


async def _until_async(condition: Callable[[], Any], within: float = 30.0) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + within
    while not await condition():
        assert loop.time() < end, f"not true within {within} s"
        await asyncio.sleep(0.1)
