"""A call whose failure ``tarry mcp serve`` reported to its client is closed for good in the store.

A real server process, the official SDK's client without the elicitation capability: the
approval the call needs cannot be asked, so the client gets -32021. The call must not stay
behind as a pending approval that someone could approve later and run.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path

import pytest
from mcp.shared.exceptions import MCPError

from mcp import Client
from tarry.cli.exits import Exit
from tarry.mcp import legacy_tasks
from tarry.store import Store
from tests.cli.conftest import tarry
from tests.web.client import AUTH, Inbox

from .conftest import ServerProcess


def _runs(markers: Path) -> list[str]:
    return markers.read_text().splitlines() if markers.exists() else []


def _listed_by_the_inbox(database: str) -> tuple[list[object], str]:
    inbox = Inbox(database)
    with inbox.client:
        api = inbox.client.get("/api/questions", headers=AUTH)
        assert api.status_code == 200, api.text
        page = inbox.client.get("/", headers=AUTH)
        assert page.status_code == 200, page.text
    return api.json(), page.text


@pytest.mark.parametrize("database", ["sqlite", "postgresql"], indirect=True)
@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
async def test_a_call_refused_for_want_of_elicitation_is_closed_and_never_runs(
    start_server: Callable[..., ServerProcess], database: str, markers: Path, mode: str
) -> None:
    server = start_server()
    async with Client(server.url, mode=mode) as client:  # type: ignore[arg-type]
        with pytest.raises(MCPError) as refused:
            await client.call_tool("transfer", {"amount": 5, "to": "Ann"})
    assert refused.value.error.code == -32021

    async with Store(database) as store:
        assert list(await store.pending_questions()) == []
        [summary] = await store.list_chats()
        assert summary.open_calls == 0 and not summary.waiting
        [closed] = [event for event in await store.history() if event.kind == "approval"]
        assert closed.decision == "cancel" and closed.by is None  # nobody is said to have decided it
        assert not await store.approve(closed.question_id)  # too late: the call was closed
    questions, page = await asyncio.to_thread(_listed_by_the_inbox, database)
    assert questions == [] and "data-question=" not in page  # no card
    pending = await asyncio.to_thread(tarry, "pending", "--json", "--url", database)
    assert json.loads(pending.stdout) == []
    approved = await asyncio.to_thread(tarry, "approve", closed.question_id, "--url", database)
    assert approved.returncode == Exit.TOO_LATE and "cancel" in approved.stderr
    assert _runs(markers) == []


async def test_a_2025_task_whose_question_the_client_cannot_take_ends_failed_and_closed(
    start_server: Callable[..., ServerProcess], database: str, markers: Path
) -> None:
    server = start_server()
    async with Client(server.url, mode="legacy") as client:
        session = client.session
        created = await legacy_tasks.call_tool_as_task(
            session,
            session._dispatcher,
            "transfer",
            {"amount": 5, "to": "Ann"},
            ttl_ms=60_000,
        )
        with pytest.raises(MCPError) as refused:  # tasks/result answers with the task's error
            await legacy_tasks.task_result(session, created.task.task_id)
        assert refused.value.error.code == -32021
        assert (await legacy_tasks.get_task(session, created.task.task_id)).status == "failed"
    async with Store(database) as store:
        assert list(await store.pending_questions()) == []
        [closed] = [event for event in await store.history() if event.kind == "approval"]
        assert closed.decision == "cancel" and not await store.approve(closed.question_id)
    assert _runs(markers) == []
