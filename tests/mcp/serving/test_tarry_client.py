"""tarry's MCP client (``MCPServer`` as a chat's tool source) against ``tarry mcp serve`` in other OS processes.

Both transports (stdio, streamable HTTP) and both eras (2025-11-25 tasks and elicitations,
2026-07-28 input requests). The client's chat is kept in a store of its own, the server's calls
in the server's: the chat parks on what a served tool waits for, another process answers it
through the client's store (``python -m tarry.cli approve|answer``), or carries the chat on, or
cancels it (tests/mcp/proc.py), and the chat carries on.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from mcp_helpers import ROOT

from tarry import Chat, Message, Question
from tarry.mcp import MCPServer, McpTask
from tarry.store import Store
from tarry.testing import ScriptedModel

from .conftest import KEY, TOOLS, ServerProcess

WITHIN = 120.0
"""Seconds a step may take on a busy machine before the test gives up."""


def _pythonpath() -> str:
    """The checkout's code first, for the processes the tests start."""
    return os.pathsep.join([str(ROOT / "src"), str(ROOT), os.environ.get("PYTHONPATH", "")])


ALL = ["stdio-legacy", "stdio-2026-07-28", "http-legacy", "http-2026-07-28"]


@pytest.fixture
def served(
    request: pytest.FixtureRequest, start_server: Callable[..., ServerProcess], database: str, markers: Path
) -> dict[str, Any]:
    """How the client reaches tarry's server (``parametrize("served", ["TRANSPORT-ERA"], indirect=True)``):
    ``MCPServer`` options, as the test processes take them (JSON)."""
    transport, _, era = request.param.partition("-")
    if transport == "http":
        return {"url": start_server(lease=2.0).url, "name": "served", "protocol": era}
    command = [sys.executable, "-m", "tarry.cli", "mcp", "serve", "--stdio", "--tools", TOOLS, "--url", database]
    env = {"PYTHONPATH": _pythonpath(), "TARRY_TEST_MARKERS": str(markers), "TARRY_MCP_STATE_KEY": KEY}
    return {"command": [*command, "--lease", "2"], "env": env, "cwd": str(ROOT), "name": "served", "protocol": era}


def _model(calls: list[dict[str, Any]]) -> ScriptedModel:
    """Makes ``calls`` after the user's message; once every result is in, replies with them all, in call order."""

    def turn(messages: list[Message]) -> Any:
        if messages[-1].role == "user":
            return calls
        results = {message.tool_call_id: message.content for message in messages if message.role == "tool"}
        made = next(message for message in reversed(messages) if message.tool_calls)
        return "Done: " + " | ".join(results[call.id] for call in made.tool_calls)

    return ScriptedModel([turn] * 20)


async def _process(*argv: str) -> str:
    """Run ``argv`` (a Python module or script and its arguments) in a new process; its output once it exited 0."""
    env = {**os.environ, "PYTHONPATH": _pythonpath()}
    process = await asyncio.create_subprocess_exec(
        sys.executable, *argv, cwd=ROOT, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await asyncio.wait_for(process.communicate(), WITHIN)
    assert process.returncode == 0, err.decode()[-3000:]
    return out.decode()


async def _decide_elsewhere(question: Question, client_url: str) -> None:
    """The person answers ``question`` with ``tarry`` in another process, on the client's store."""
    if question.kind == "form" and not question.fields:  # tarry's server asks its approvals so
        await _process("-m", "tarry.cli", "approve", question.id, "--url", client_url)
    elif question.kind == "form":
        fields = ["--field", "colour=blue", "--field", "coats=2"]
        await _process("-m", "tarry.cli", "answer", question.id, *fields, "--url", client_url)
    else:
        await _process("-m", "tarry.cli", "answer", question.id, "--url", client_url)


async def _until_done(chat: Chat) -> Message | None:
    """``complete()`` until the chat waits no more (a 2025-11-25 pushed question holds one open meanwhile)."""
    loop = asyncio.get_running_loop()
    end = loop.time() + WITHIN
    reply = await chat.complete()
    while chat.waiting:
        assert loop.time() < end, f"the chat still waits after {WITHIN} s"
        await asyncio.sleep(0.1)
        reply = await chat.complete()
    return reply


async def _until(condition: Callable[[], bool]) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + WITHIN
    while not condition():
        assert loop.time() < end, f"not true within {WITHIN} s"
        await asyncio.sleep(0.1)


def _runs(markers: Path) -> list[str]:
    return markers.read_text().splitlines() if markers.exists() else []


@pytest.mark.parametrize("served", ALL, indirect=True)
async def test_an_approval_a_form_and_a_url_are_answered_from_another_process(
    served: dict[str, Any], database: str, markers: Path, tmp_path: Path
) -> None:
    client_url = f"sqlite:///{tmp_path / 'client.db'}"
    calls = [
        {"name": "transfer", "arguments": {"amount": 5, "to": "Ann"}},
        {"name": "pick_colour", "arguments": {"wall": "north"}},
        {"name": "sign_up", "arguments": {"plan": "pro"}},
    ]
    async with Store(client_url) as store:
        await store.setup()
        server = MCPServer(**served)
        try:
            chat = await store.create_chat(_model(calls), [server])
            await chat.ask("Run the three errands")
            assert chat.waiting and _runs(markers) == []
            carrying = asyncio.ensure_future(_until_done(chat))
            decided: list[Question] = []
            loop = asyncio.get_running_loop()
            end = loop.time() + WITHIN
            while len(decided) < len(calls):  # each shows up in the client's store when the server asks it
                assert not carrying.done() and loop.time() < end, "the questions were not all asked"
                for question in await store.pending_questions(chat.id):
                    if question.id not in {known.id for known in decided}:
                        await _decide_elsewhere(question, client_url)
                        decided.append(question)
                await asyncio.sleep(0.1)
            reply = await asyncio.wait_for(carrying, WITHIN)
        finally:
            await server.close()
        assert reply is not None
        assert reply.content == "Done: Sent 5 to Ann | north: 2 coat(s) of blue | signed up for pro"
        assert sorted(question.kind for question in decided) == ["form", "form", "url"]
        trail = await store.history(chat.id)
        assert sorted((event.decision, event.channel) for event in trail) == [("accept", "cli")] * 3
        assert all(event.by is not None for event in trail)  # the person who typed the command
    assert sorted(_runs(markers)) == ["sign_up pro", "transfer Ann:5"]  # each ran once
    async with Store(database) as served_store:
        served_trail = await served_store.history()
    assert sorted((event.kind, event.decision, event.channel) for event in served_trail) == [
        ("approval", "accept", "mcp"),
        ("form", "accept", "mcp"),
        ("url", "accept", "mcp"),
    ]


@pytest.mark.parametrize("served", ["stdio-2026-07-28", "http-legacy"], indirect=True)  # each transport, each era
async def test_a_task_finishes_and_another_is_cancelled_through_other_processes(
    served: dict[str, Any], markers: Path, tmp_path: Path
) -> None:
    client_url = f"sqlite:///{tmp_path / 'client.db'}"
    release, never = tmp_path / "release", tmp_path / "never"
    build = [{"name": "build", "arguments": {"release": str(release)}}]
    build_never = [{"name": "build", "arguments": {"release": str(never)}}]
    async with Store(client_url) as store:
        await store.setup()
        server = MCPServer(**served)
        try:
            chat = await store.create_chat(_model(build), [server])
            await chat.ask("Build the release")
            [task] = await chat.pending_tasks()
            assert isinstance(task, McpTask) and task.task_id is not None
            doomed = await store.create_chat(_model(build_never), [server])
            await doomed.ask("Build what never comes")
            assert doomed.waiting
        finally:
            await server.close()  # this process lets go: others carry the chats on
    await _until(lambda: f"build {never}" in _runs(markers) and f"build {release}" in _runs(markers))
    release.touch()
    options, script = json.dumps(served), str(ROOT / "tests" / "mcp" / "proc.py")
    finished = json.loads(await _process(script, "poll", client_url, chat.id, options, json.dumps(build), "90"))
    assert finished["reply"] == f"Done: built {release}" and not finished["waiting"]
    cancelled = json.loads(await _process(script, "cancel", client_url, doomed.id, options, json.dumps(build_never)))
    assert not cancelled["waiting"]
    await _until(lambda: f"cancel {never}" in _runs(markers))  # the cancellation reached the tool in the server
    assert _runs(markers).count(f"build {release}") == 1


@pytest.mark.parametrize("era", ["legacy", "2026-07-28"])
async def test_an_approval_left_to_the_servers_inbox_is_given_there_and_the_clients_chat_carries_on(
    start_server: Callable[..., ServerProcess], database: str, markers: Path, tmp_path: Path, era: str
) -> None:
    """With ``--approvals inbox`` the client sees a working task; a person approves in the server's store."""
    server = MCPServer(url=start_server(approvals="inbox").url, name="served", protocol=era)  # type: ignore[arg-type]
    client_url = f"sqlite:///{tmp_path / 'client.db'}"
    async with Store(client_url) as store, Store(database) as served_store:
        await store.setup()
        try:
            chat = await store.create_chat(
                _model([{"name": "transfer", "arguments": {"amount": 7, "to": "Bo"}}]), [server]
            )
            await chat.ask("Pay Bo")
            assert await chat.pending_questions() == []  # nothing for the client to answer
            [task] = await chat.pending_tasks()  # the call waits on the server's side, as work
            assert isinstance(task, McpTask) and task.status == "working"
            loop = asyncio.get_running_loop()
            end = loop.time() + WITHIN
            while not (asked := await served_store.pending_questions()):
                assert loop.time() < end, "the server's inbox never listed the approval"
                await asyncio.sleep(0.1)
            await _process("-m", "tarry.cli", "approve", asked[0].id, "--url", database)
            reply = await _until_done(chat)
        finally:
            await server.close()
        assert reply is not None and reply.content == "Done: Sent 7 to Bo"
        [approved] = await served_store.history()
        assert (approved.decision, approved.channel) == ("accept", "cli") and approved.by is not None
        assert await store.history(chat.id) == []  # the client decided nothing
    assert _runs(markers) == ["transfer Bo:7"]


async def test_a_stdio_server_slower_to_start_than_the_sdks_discover_timeout_is_asked_again(
    database: str, markers: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The SDK gives ``server/discover`` 10 s, less than a server process may take on a busy machine:
    a 2026-07-28 client asks again, within its own ``timeout``. The SDK's limit is made short here."""
    import mcp.client.session

    monkeypatch.setattr(mcp.client.session, "DISCOVER_TIMEOUT_SECONDS", 0.2)
    command = [sys.executable, "-m", "tarry.cli", "mcp", "serve", "--stdio", "--tools", TOOLS, "--url", database]
    env = {"PYTHONPATH": _pythonpath(), "TARRY_TEST_MARKERS": str(markers)}
    server = MCPServer(command=command, env=env, cwd=ROOT, name="served", protocol="2026-07-28")
    try:
        assert "transfer" in {tool.name for tool in await server.list_tools()}
    finally:
        await server.close()
    silent = MCPServer(command=[sys.executable, "-c", "import time; time.sleep(60)"], protocol="2026-07-28", timeout=2)
    try:
        with pytest.raises(ConnectionError, match="MCPError: Request 'server/discover' timed out"):
            await silent.list_tools()
    finally:
        await silent.close()
