"""tarry's MCP server in process, through the SDK's own client: tools, request state, task errors."""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest
from mcp.shared.exceptions import MCPError

from mcp import Client
from tarry import Task, Tool
from tarry.mcp.serving import RequestStateSigner, build_server
from tarry.store import Store
from tarry.testing import advance_clock

from .served_tools import TOOLS


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    async with Store(f"sqlite:///{tmp_path / 'served.db'}") as opened:
        await opened.setup()
        yield opened


async def _no_answer(context: object, params: object) -> types.ElicitResult:
    raise AssertionError("the test drives input rounds itself")


async def test_each_tool_is_listed_with_its_json_schema(store: Store) -> None:
    server, calls = build_server(TOOLS, store)
    async with Client(server, mode="legacy") as client:
        listed = {tool.name: tool for tool in (await client.list_tools()).tools}
    await calls.close()
    assert sorted(listed) == ["add", "build", "fail", "pick_colour", "transfer"]
    assert listed["add"].input_schema == TOOLS[0].parameters
    assert listed["add"].description == "Adds two integers."
    assert listed["build"].execution is not None and listed["build"].execution.task_support == "optional"


async def test_a_tampered_request_state_is_refused(store: Store) -> None:
    server, calls = build_server(TOOLS, store, request_state_key="k" * 32)
    async with Client(server, mode="2026-07-28", elicitation_callback=_no_answer) as client:
        asked = await client.session.call_tool("pick_colour", {"wall": "east"}, allow_input_required=True)
        assert isinstance(asked, types.InputRequiredResult) and asked.request_state
        [key] = asked.input_requests or {}
        answer = {key: types.ElicitResult(action="accept", content={"colour": "red", "coats": 1})}
        body, _, mac = asked.request_state.partition(".")
        forged = RequestStateSigner("x" * 32).seal("some-other-chat", tool="pick_colour")
        for tampered in (f"{body}x.{mac}", forged, f"{body}.{mac[:-2]}"):
            with pytest.raises(MCPError, match="requestState was not issued by this server"):
                await client.session.call_tool(
                    "pick_colour", {"wall": "east"}, input_responses=answer, request_state=tampered
                )
        with pytest.raises(MCPError, match="belongs to the tool 'pick_colour', not 'add'"):
            await client.session.call_tool(
                "add", {"a": 1, "b": 1}, input_responses=answer, request_state=asked.request_state
            )
        done = await client.session.call_tool(
            "pick_colour", {"wall": "east"}, input_responses=answer, request_state=asked.request_state
        )
    await calls.close()
    assert isinstance(done, types.CallToolResult)
    assert done.content[0].text == "east: 1 coat(s) of red"  # type: ignore[union-attr]


async def test_bad_calls_get_clear_errors(store: Store) -> None:
    server, calls = build_server(TOOLS, store)
    async with Client(server, mode="legacy") as client:
        with pytest.raises(MCPError, match="Unknown tool 'nope'; the tools are: add, build"):
            await client.call_tool("nope", {})
        wrong = await client.call_tool("add", {"a": "x", "b": 1})
        assert wrong.is_error and "a" in wrong.content[0].text  # type: ignore[union-attr]
        failed = await client.call_tool("fail", {})
        assert failed.is_error and "the disk is full" in failed.content[0].text  # type: ignore[union-attr]
        for method in ("tasks/get", "tasks/result", "tasks/cancel"):
            request = types.GetTaskRequest(params=types.GetTaskRequestParams(task_id="unknown"))
            request = request.model_copy(update={"method": method})
            with pytest.raises(MCPError, match="Task not found"):
                await client.session.send_request(request, types.GetTaskResult)  # type: ignore[arg-type]
    await calls.close()


class BackupDisk(Tool):
    """Backs up the disk (hours of work, so only ever an MCP task)."""

    task_required = True

    def execute(self) -> Task:
        return Task(status_message="copying")


async def test_a_task_required_tool_refuses_a_call_that_is_not_a_task(store: Store) -> None:
    server, calls = build_server([BackupDisk()], store)
    async with Client(server, mode="legacy") as client:
        [listed] = (await client.list_tools()).tools
        assert listed.execution is not None and listed.execution.task_support == "required"
        with pytest.raises(MCPError, match="runs only as a task") as legacy:
            await client.call_tool("backup_disk", {})
    async with Client(server, mode="2026-07-28") as client:
        with pytest.raises(MCPError, match="did not declare the tasks extension") as modern:
            await client.session.call_tool("backup_disk", {})
    await calls.close()
    assert legacy.value.error.code == -32601
    assert modern.value.error.code == -32021
    assert modern.value.error.data == {"requiredCapabilities": {"extensions": {"io.modelcontextprotocol/tasks": {}}}}


async def test_progress_goes_out_from_the_tasks_status_message(store: Store, tmp_path: Path) -> None:
    server, calls = build_server(TOOLS, store, poll_interval_ms=20)
    release = tmp_path / "release"
    said: list[str | None] = []

    async def progress(done: float, total: float | None, message: str | None) -> None:
        said.append(message)
        release.touch()  # the build finishes once its first progress went out

    async with Client(server, mode="2026-07-28") as client:
        result = await client.call_tool("build", {"release": str(release)}, progress_callback=progress)  # type: ignore[arg-type]
    await calls.close()
    assert result.content[0].text == f"built {release}"  # type: ignore[union-attr]
    assert said[0] == "building"


async def test_approval_is_asked_of_the_client_or_left_to_the_inbox(store: Store) -> None:
    answers: list[str] = []

    async def approve(context: object, params: types.ElicitRequestParams) -> types.ElicitResult:
        answers.append(params.message)
        return types.ElicitResult(action="accept", content={})

    server, calls = build_server(TOOLS, store)
    async with Client(server, mode="legacy", elicitation_callback=approve) as client:
        sent = await client.call_tool("transfer", {"amount": 5, "to": "Bob"})
    await calls.close()
    assert sent.content[0].text == "Sent 5 to Bob" and len(answers) == 1  # type: ignore[union-attr]

    server, calls = build_server(TOOLS, store, approvals="inbox", poll_interval_ms=20)
    async with Client(server, mode="2026-07-28", elicitation_callback=approve) as client:
        call = asyncio.ensure_future(client.call_tool("transfer", {"amount": 7, "to": "Ann"}))
        [question] = await _wait_for(store.pending_questions)
        assert question.kind == "approval" and not call.done()
        assert await store.approve(question.id)  # a person in the inbox, not the client
        sent = await asyncio.wait_for(call, 30)
    await calls.close()
    assert sent.content[0].text == "Sent 7 to Ann" and len(answers) == 1  # type: ignore[union-attr]


async def _wait_for(read: Callable[[], Awaitable[list[Any]]], within: float = 30.0) -> list[Any]:
    loop = asyncio.get_running_loop()
    end = loop.time() + within
    while not (found := await read()):
        assert loop.time() < end, f"nothing within {within} s"
        await asyncio.sleep(0.05)
    return found


async def test_a_task_is_answered_only_for_the_auth_context_that_created_it(store: Store) -> None:
    acting = contextvars.ContextVar[str | None]("acting", default=None)
    server, calls = build_server(TOOLS, store, owner=lambda ctx: acting.get(), list_tasks=True)
    chat = await store.create_chat(agent=calls.agent)
    task = await calls.tasks.create(chat.id, "build", ttl_ms=60_000, owner="alice")
    get = types.GetTaskRequest(params=types.GetTaskRequestParams(task_id=task.id))
    listing = types.ListTasksRequest(params=types.PaginatedRequestParams())
    async with Client(server, mode="legacy") as client:
        acting.set("bob")
        with pytest.raises(MCPError, match="Task not found"):
            await client.session.send_request(get, types.GetTaskResult)
        assert (await client.session.send_request(listing, types.ListTasksResult)).tasks == []
        acting.set("alice")
        seen = await client.session.send_request(get, types.GetTaskResult)
        listed = await client.session.send_request(listing, types.ListTasksResult)
    await calls.close()
    assert seen.task_id == task.id and seen.ttl == 60_000
    assert [found.task_id for found in listed.tasks] == [task.id]


async def test_a_task_whose_call_never_started_fails_once_the_lease_is_over(store: Store) -> None:
    server, calls = build_server(TOOLS, store)
    chat = await store.create_chat(agent=calls.agent)  # as if the process died before the call started
    task = await calls.tasks.create(chat.id, "build", ttl_ms=None)
    get = types.GetTaskRequest(params=types.GetTaskRequestParams(task_id=task.id))
    async with Client(server, mode="legacy") as client:
        assert (await client.session.send_request(get, types.GetTaskResult)).status == "working"
        advance_clock(store.lease + 1)
        failed = await client.session.send_request(get, types.GetTaskResult)
    await calls.close()
    assert failed.status == "failed" and "stopped before the call started" in (failed.status_message or "")
