"""A plain SDK client on tarry's task helpers (tarry.mcp.legacy_tasks, tarry.mcp.task_extension) against
``tarry mcp serve`` in its own process, and the examples of docs/mcp-server.md run as files against it."""

from __future__ import annotations

import ast
import asyncio
import inspect
import re
import shlex
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest
from mcp.client.session import ClientSession, ElicitationFnT
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp.shared.jsonrpc_dispatcher import JSONRPCDispatcher
from mcp_helpers import ROOT, free_port, wait_for_port

from tarry.mcp import legacy_tasks, task_extension

from .conftest import ServerProcess

PAGE = ROOT / "docs" / "mcp-server.md"
BLOCK = re.compile(r"^```(python|sh)\n(.*?)^```$", re.MULTILINE | re.DOTALL)
FILE_NAME = re.compile(r"# (\w+\.py)\n")


async def until(check: Callable[[], Awaitable[Any]], what: str, within: float = 15.0) -> Any:
    """Ask ``check`` again until it gives something true (polled, with a deadline); that value."""
    loop = asyncio.get_running_loop()
    end = loop.time() + within
    while not (value := await check()):
        assert loop.time() < end, f"{what}: not within {within} s"
        await asyncio.sleep(0.05)
    return value


def runs(markers: Path) -> list[str]:
    return markers.read_text().splitlines() if markers.exists() else []


@asynccontextmanager
async def legacy(
    url: str, person: ElicitationFnT | None = None
) -> AsyncIterator[tuple[ClientSession, JSONRPCDispatcher[Any]]]:
    """A 2025-11-25 session on a dispatcher the test keeps, answering elicitations with ``person``."""
    async with streamable_http_client(url) as (read, write):
        dispatcher: JSONRPCDispatcher[Any] = JSONRPCDispatcher(read, write)
        async with ClientSession(dispatcher=dispatcher, elicitation_callback=person) as session:
            await session.initialize()
            yield session, dispatcher


@asynccontextmanager
async def modern(url: str, *, extension: bool = True) -> AsyncIterator[ClientSession]:
    """A 2026-07-28 session that takes input requests, declaring the tasks extension unless told not to."""
    async with streamable_http_client(url) as (read, write):
        options: dict[str, Any] = dict(task_extension.session_options()) if extension else {}
        async with ClientSession(read, write, elicitation_callback=_in_band, **options) as session:
            await session.discover()
            yield session


async def _in_band(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
    raise AssertionError("a 2026-07-28 question comes as an input request, never as a request of its own")


# 2025-11-25: tarry.mcp.legacy_tasks


async def test_a_2025_task_asks_its_question_on_tasks_result_and_completes(
    start_server: Callable[..., ServerProcess],
) -> None:
    asked: list[str] = []

    async def person(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.append(params.message)
        return types.ElicitResult(action="accept", content={"colour": "red", "coats": 2})

    server = start_server()
    async with legacy(server.url, person) as (session, dispatcher):
        created = await legacy_tasks.call_tool_as_task(
            session, dispatcher, "pick_colour", {"wall": "east"}, ttl_ms=60_000
        )
        assert isinstance(created, types.CreateTaskResult)
        task_id = created.task.task_id
        assert created.task.ttl == 60_000
        waiting = await until(
            lambda: _status_is(legacy_tasks.get_task(session, task_id), "input_required"), "the task asking"
        )
        assert waiting.task_id == task_id and asked == []  # asked only once tasks/result is sent
        result = await legacy_tasks.task_result(session, task_id)
        assert asked == ["Which colour?"]
        assert result["content"][0]["text"] == "east: 2 coat(s) of red"
        assert not result.get("isError")
        assert (await legacy_tasks.get_task(session, task_id)).status == "completed"


async def test_a_2025_task_waits_on_an_approval_then_runs_the_tool_once(
    start_server: Callable[..., ServerProcess], markers: Path
) -> None:
    async def approver(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        return types.ElicitResult(action="accept")

    server = start_server()
    async with legacy(server.url, approver) as (session, dispatcher):
        created = await legacy_tasks.call_tool_as_task(session, dispatcher, "transfer", {"amount": 5, "to": "Ann"})
        assert runs(markers) == []  # nothing moves before the approval
        result = await legacy_tasks.task_result(session, created.task.task_id)
        assert result["content"][0]["text"] == "Sent 5 to Ann"
        assert (await legacy_tasks.get_task(session, created.task.task_id)).status == "completed"
    assert runs(markers) == ["transfer Ann:5"]


async def test_a_cancelled_2025_task_reaches_the_tool_and_stays_cancelled(
    start_server: Callable[..., ServerProcess], markers: Path, tmp_path: Path
) -> None:
    release = tmp_path / "release"  # never made: the build would run until cancelled
    server = start_server()
    async with legacy(server.url) as (session, dispatcher):
        created = await legacy_tasks.call_tool_as_task(session, dispatcher, "build", {"release": str(release)})
        task_id = created.task.task_id
        assert (await legacy_tasks.get_task(session, task_id)).status == "working"
        cancelled = await legacy_tasks.cancel_task(session, task_id)
        assert isinstance(cancelled, types.CancelTaskResult) and cancelled.status == "cancelled"
        assert (await legacy_tasks.get_task(session, task_id)).status == "cancelled"
        with pytest.raises(MCPError) as again:
            await legacy_tasks.cancel_task(session, task_id)
        assert again.value.error.code == types.INVALID_PARAMS
    await until(lambda: _true(f"cancel {release}" in runs(markers)), "the tool's Task.cancel()")


# 2026-07-28: tarry.mcp.task_extension


async def test_a_2026_task_lists_its_input_request_and_completes_once_updated(
    start_server: Callable[..., ServerProcess],
) -> None:
    server = start_server()
    async with modern(server.url) as session:
        created = await task_extension.call_tool(session, "pick_colour", {"wall": "east"})
        assert isinstance(created, task_extension.TaskCreated)
        waiting = await until(
            lambda: _status_is(task_extension.get_task(session, created.task_id), "input_required"), "a question"
        )
        [(key, request)] = (waiting.input_requests or {}).items()
        assert request["method"] == "elicitation/create" and request["params"]["message"] == "Which colour?"
        answer = types.ElicitResult(action="accept", content={"colour": "blue", "coats": 3})
        await task_extension.update_task(session, created.task_id, {key: answer})
        done = await until(
            lambda: _status_is(task_extension.get_task(session, created.task_id), "completed"), "the result"
        )
        assert done.result is not None and done.result["content"][0]["text"] == "east: 3 coat(s) of blue"
        assert done.input_requests is None and done.error is None
        at_once = await task_extension.call_tool(session, "add", {"a": 2, "b": 3})  # no wait: no task
        assert isinstance(at_once, types.CallToolResult)
        assert at_once.content[0].text == "5"  # type: ignore[union-attr]


async def test_a_cancelled_2026_task_reaches_the_tool(
    start_server: Callable[..., ServerProcess], markers: Path, tmp_path: Path
) -> None:
    release = tmp_path / "release"
    server = start_server()
    async with modern(server.url) as session:
        created = await task_extension.call_tool(session, "build", {"release": str(release)})
        assert isinstance(created, task_extension.TaskCreated) and created.status == "working"
        await task_extension.cancel_task(session, created.task_id)
        await until(lambda: _status_is(task_extension.get_task(session, created.task_id), "cancelled"), "cancelled")
    await until(lambda: _true(f"cancel {release}" in runs(markers)), "the tool's Task.cancel()")


async def test_call_tool_answers_input_requests_in_the_call_without_the_extension(
    start_server: Callable[..., ServerProcess],
) -> None:
    server = start_server()
    async with modern(server.url, extension=False) as session:
        asked = await task_extension.call_tool(session, "pick_colour", {"wall": "west"})
        assert isinstance(asked, types.InputRequiredResult) and asked.request_state
        [key] = asked.input_requests or {}
        answers = {key: {"action": "accept", "content": {"colour": "red"}}}  # the JSON form
        done = await task_extension.call_tool(
            session, "pick_colour", {"wall": "west"}, input_responses=answers, request_state=asked.request_state
        )
    assert isinstance(done, types.CallToolResult) and not done.is_error
    assert done.content[0].text == "west: 1 coat(s) of red"  # type: ignore[union-attr]


async def _status_is(asking: Awaitable[Any], status: str) -> Any:
    task = await asking
    return task if task.status == status else None


async def _true(value: bool) -> bool:
    return value


# The page's examples: the tools and clients run as files, the in-process example as test_docs.py runs a page


def blocks() -> list[tuple[str, str]]:
    return [(match.group(1), match.group(2)) for match in BLOCK.finditer(PAGE.read_text(encoding="utf-8"))]


async def test_the_in_process_examples_of_the_page_run() -> None:
    namespace: dict[str, object] = {"__name__": "docs_mcp_server"}
    examples = [code for kind, code in blocks() if kind == "python" and not FILE_NAME.match(code)]
    assert examples
    for code in examples:
        result = eval(compile(code, str(PAGE), "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT), namespace)
        if inspect.iscoroutine(result):
            await result


def test_the_client_examples_run_against_tarry_mcp_serve(tmp_path: Path) -> None:
    files = {match.group(1): code for kind, code in blocks() if (match := FILE_NAME.match(code))}
    assert sorted(files) == ["client_2025.py", "client_2026.py", "paint.py"]
    (tmp_path / "paint.py").write_text(files["paint.py"])
    [command] = [
        line.split("#")[0]
        for kind, code in blocks()
        if kind == "sh"
        for line in code.splitlines()
        if "--tools paint:TOOLS" in line
    ]
    port = free_port()
    argv = [sys.executable, "-m", "tarry.cli", *shlex.split(command)[1:], "--port", str(port)]
    with open(tmp_path / "server.log", "wb") as log:
        server = subprocess.Popen(argv, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=log)
        try:
            wait_for_port(port, server)
            for name in ("client_2025.py", "client_2026.py"):
                code = files[name].replace("http://127.0.0.1:8000/mcp", f"http://127.0.0.1:{port}/mcp")
                (tmp_path / name).write_text(code)
                done = subprocess.run(
                    [sys.executable, name], cwd=tmp_path, capture_output=True, text=True, timeout=60, check=False
                )
                assert done.returncode == 0, f"{name}: {done.stderr[-2000:]}"
                expected = [line.split("# ", 1)[1] for line in code.splitlines() if "print(" in line]
                assert done.stdout.splitlines() == expected, name
        finally:
            server.terminate()
            server.wait(10)
