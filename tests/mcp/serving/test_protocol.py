"""tarry's MCP server in process, through the SDK's own client: tools, request state, task errors."""

from __future__ import annotations

import asyncio
import contextvars
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest
from mcp.client.extension import ClientExtension
from mcp.shared.exceptions import MCPError

from mcp import Client
from tarry import Task, Tool
from tarry.mcp import ProtocolError, legacy_tasks, task_extension
from tarry.mcp_server import RequestStateSigner, build_server
from tarry.store import Store
from tarry.testing import advance_clock

from .served_tools import TOOLS, Survey


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
    assert sorted(listed) == ["add", "build", "echo", "fail", "pick_colour", "sign_up", "survey", "transfer"]
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
    """Backs up the disk (hours of work, so only ever an MCP task: served with task_required)."""

    def execute(self) -> Task:
        return Task(status_message="copying")


def test_how_a_tool_is_served_as_a_task_is_the_servers_to_say(store: Store) -> None:
    with pytest.raises(ValueError, match="No tool served is named 'backup'; the tools are: backup_disk"):
        build_server([BackupDisk()], store, task_required=["backup"])
    with pytest.raises(ValueError, match="No tool served is named 'welcome'"):
        build_server([BackupDisk()], store, ask_before_task=["welcome"])
    with pytest.raises(TypeError, match="the string 'backup_disk'"):
        build_server([BackupDisk()], store, task_required="backup_disk")
    with pytest.raises(TypeError, match=r"serve\(\.\.\., task_required=\['archive'\]\)"):

        class Archive(Tool):
            """Archives the disk."""

            task_required = True

            def execute(self) -> str:
                return "archived"


async def test_a_task_required_tool_refuses_a_call_that_is_not_a_task(store: Store) -> None:
    server, calls = build_server([BackupDisk()], store, task_required=["backup_disk"])
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


class Welcome(Tool):
    """Asks for a name in the call itself, then welcomes the person as a task (served with ask_before_task)."""

    def execute(self) -> Task:
        asking = self.ask("Your name?", name=str)
        assert asking.question is not None
        return asking.with_question(replace(asking.question, key="name"))

    def resume(self, task: Task) -> str:
        assert task.answer is not None
        return f"Welcome, {task.answer['name']}"


class Refused(Tool):
    """Fails the request with a protocol error: at once, or (``later``) after starting as a task."""

    def execute(self, later: bool = False) -> Task:
        if later:
            return Task(status_message="asking the backend", poll_interval=0.01)
        raise ProtocolError(-32010, "The backend refused the request", {"retry": False})

    def resume(self, task: Task, later: bool = False) -> Task:
        raise ProtocolError(-32010, "The backend refused the request", {"retry": False})


class _Tasks(ClientExtension):
    """The SEP-2663 tasks extension, declared so that ``tools/call`` may answer with a task."""

    identifier = task_extension.EXTENSION

    def claims(self) -> Sequence[Any]:
        return task_extension.claims()[task_extension.EXTENSION]


def _accept(**content: Any) -> types.ElicitResult:
    return types.ElicitResult(action="accept", content=content)


async def _task_until(session: Any, task_id: str, status: str, within: float = 30.0) -> Any:
    loop = asyncio.get_running_loop()
    end = loop.time() + within
    while (seen := await task_extension.get_task(session, task_id)).status != status:
        assert loop.time() < end, f"task {task_id} is {seen.status}, not {status}, after {within} s"
        await asyncio.sleep(0.02)
    return seen


async def test_several_questions_are_asked_in_one_round_and_each_answer_is_recorded_once(store: Store) -> None:
    server, calls = build_server([Survey()], store)
    async with Client(server, mode="2026-07-28", elicitation_callback=_no_answer) as client:
        first = await client.session.call_tool("survey", {}, allow_input_required=True)
        assert isinstance(first, types.InputRequiredResult) and first.request_state
        assert sorted(first.input_requests or {}) == ["go", "name"]
        assert {request.method for request in (first.input_requests or {}).values()} == {"elicitation/create"}
        second = await client.session.call_tool(
            "survey",
            {},
            input_responses={"name": _accept(name="Ann")},
            request_state=first.request_state,
            allow_input_required=True,
        )
        assert isinstance(second, types.InputRequiredResult) and second.request_state
        assert sorted(second.input_requests or {}) == ["go"]  # the answered question is not asked again
        answers = {"name": _accept(name="Bob"), "go": _accept(go=True)}  # "name" is answered already: ignored
        done = await client.session.call_tool("survey", {}, input_responses=answers, request_state=second.request_state)
    await calls.close()
    assert isinstance(done, types.CallToolResult) and not done.is_error
    assert json.loads(done.content[0].text) == [{"name": "Ann"}, {"go": True}]  # type: ignore[union-attr]


async def test_a_round_with_a_refused_answer_records_none_of_its_answers(store: Store) -> None:
    server, calls = build_server([Survey()], store)
    async with Client(server, mode="2026-07-28", elicitation_callback=_no_answer) as client:
        asked = await client.session.call_tool("survey", {}, allow_input_required=True)
        assert isinstance(asked, types.InputRequiredResult)
        bad = {"name": _accept(name="Ann"), "go": _accept(go="perhaps")}
        with pytest.raises(MCPError, match="The answer to 'Go ahead\\?' was refused: Invalid answer: go") as refused:
            await client.session.call_tool("survey", {}, input_responses=bad, request_state=asked.request_state)
        assert refused.value.error.code == -32602
        good = {"name": _accept(name="Cy"), "go": _accept(go=False)}
        done = await client.session.call_tool("survey", {}, input_responses=good, request_state=asked.request_state)
    await calls.close()
    assert isinstance(done, types.CallToolResult)
    assert json.loads(done.content[0].text) == [{"name": "Cy"}, {"go": False}]  # type: ignore[union-attr]


async def test_several_questions_reach_a_2025_client_as_elicitations_in_turn(store: Store) -> None:
    asked: list[str] = []

    async def person(context: object, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.append(params.message)
        return _accept(name="Dee") if params.message == "Your name?" else _accept(go=True)

    server, calls = build_server([Survey()], store, poll_interval_ms=20)
    async with Client(server, mode="legacy", elicitation_callback=person) as client:
        done = await client.call_tool("survey", {})
    await calls.close()
    assert asked == ["Your name?", "Go ahead?"]
    assert json.loads(done.content[0].text) == [{"name": "Dee"}, {"go": True}]  # type: ignore[union-attr]


async def test_a_task_answers_a_subset_of_its_questions_and_waits_for_the_rest(store: Store) -> None:
    server, calls = build_server([Survey()], store, poll_interval_ms=20)
    async with Client(server, mode="2026-07-28", extensions=[_Tasks()]) as client:
        created = await client.session.call_tool("survey", {}, allow_claimed=True)
        assert isinstance(created, task_extension.TaskCreated)
        seen = await _task_until(client.session, created.task_id, "input_required")
        assert sorted(seen.input_requests or {}) == ["go", "name"]
        await task_extension.update_task(
            client.session, created.task_id, {"go": {"action": "accept", "content": {"go": True}}}
        )
        seen = await task_extension.get_task(client.session, created.task_id)
        assert seen.status == "input_required" and sorted(seen.input_requests or {}) == ["name"]
        name = {"action": "accept", "content": {"name": "Eve"}}
        await task_extension.update_task(client.session, created.task_id, {"name": name})
        done = await _task_until(client.session, created.task_id, "completed")
    await calls.close()
    assert done.result is not None
    assert json.loads(done.result["content"][0]["text"]) == [{"name": "Eve"}, {"go": True}]


async def test_ask_before_task_asks_in_the_call_and_becomes_a_task_once_answered(store: Store) -> None:
    server, calls = build_server([Welcome()], store, poll_interval_ms=20, ask_before_task=["welcome"])
    async with Client(server, mode="2026-07-28", extensions=[_Tasks()], elicitation_callback=_no_answer) as client:
        asked = await client.session.call_tool("welcome", {}, allow_input_required=True, allow_claimed=True)
        assert isinstance(asked, types.InputRequiredResult) and list(asked.input_requests or {}) == ["name"]
        created = await client.session.call_tool(
            "welcome",
            {},
            input_responses={"name": _accept(name="Flo")},
            request_state=asked.request_state,
            allow_input_required=True,
            allow_claimed=True,
        )
        assert isinstance(created, task_extension.TaskCreated)
        done = await _task_until(client.session, created.task_id, "completed")
    await calls.close()
    assert done.result is not None and done.result["content"][0]["text"] == "Welcome, Flo"


async def test_a_protocol_error_fails_the_call_with_its_json_rpc_error(store: Store) -> None:
    server, calls = build_server([Refused()], store, poll_interval_ms=20)
    async with Client(server, mode="legacy") as client:
        with pytest.raises(MCPError, match="The backend refused the request") as at_once:
            await client.call_tool("refused", {})
        task = await calls.start_task("refused", {"later": True}, ttl_ms=60_000, owner=None)
        with pytest.raises(MCPError, match="The backend refused the request") as legacy_task:
            await legacy_tasks.task_result(client.session, task.id)
        assert (await legacy_tasks.get_task(client.session, task.id)).status == "failed"
    async with Client(server, mode="2026-07-28", extensions=[_Tasks()]) as client:
        created = await client.session.call_tool("refused", {"later": True}, allow_claimed=True)
        assert isinstance(created, task_extension.TaskCreated)
        failed = await _task_until(client.session, created.task_id, "failed")
    await calls.close()
    error = {"code": -32010, "message": "The backend refused the request", "data": {"retry": False}}
    for raised in (at_once.value, legacy_task.value):
        assert (raised.error.code, raised.error.data) == (-32010, {"retry": False})
    assert failed.error == error and failed.result is None


async def test_a_2026_task_whose_call_never_started_fails_with_an_error_object(store: Store) -> None:
    server, calls = build_server(TOOLS, store)
    chat = await store.create_chat(agent=calls.agent)  # as if the process died before the call started
    task = await calls.tasks.create(chat.id, "build", ttl_ms=None)
    async with Client(server, mode="2026-07-28", extensions=[_Tasks()]) as client:
        assert (await task_extension.get_task(client.session, task.id)).status == "working"
        advance_clock(store.lease + 1)
        failed = await task_extension.get_task(client.session, task.id)
    await calls.close()
    assert failed.status == "failed" and failed.result is None
    assert failed.error is not None and failed.error["code"] == -32603
    assert "stopped before the call started" in failed.error["message"]


def test_a_protocol_error_is_a_json_rpc_error_object() -> None:
    raised = ProtocolError(-32010, "refused", {"retry": False})
    assert raised.details == {"protocol_error": {"code": -32010, "message": "refused", "data": {"retry": False}}}
    with pytest.raises(ValueError, match="JSON-RPC error code is an integer, got True"):
        ProtocolError(True, "refused")
