"""MCP calls carried across real OS processes, on SQLite and PostgreSQL.

Each process starts its own stdio server (so state must survive a server restart: the
booking server's request-state key is fixed), or reaches one HTTP server they share.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from typing import Any

import pytest
from mcp_helpers import HERE, ROOT, SERVERS, booking_command, http_server

from tarry.store import Store
from tests.store.conftest import database_url  # noqa: F401  (the fixture: SQLite, then PostgreSQL)

BOOK = [{"name": "book", "arguments": {"restaurant": "Chez Nous"}}]


def start(*args: str, lease: float = 60) -> subprocess.Popen[str]:
    """``python tests/mcp/proc.py *args`` in a new process (its store's lease ``lease`` seconds)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TARRY_TEST_LEASE": str(lease)}
    return subprocess.Popen(
        [sys.executable, str(HERE / "proc.py"), *args],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def finish(process: subprocess.Popen[str], timeout: float = 120) -> tuple[dict[str, Any], str]:
    """The process's printed state and its log (stderr), once it exited with 0."""
    out, err = process.communicate(timeout=timeout)
    assert process.returncode == 0, err[-3000:]
    return json.loads(out.strip().splitlines()[-1]), err


def run(*args: str) -> tuple[dict[str, Any], str]:
    return finish(start(*args))


async def new_chat(url: str) -> str:
    async with Store(url) as store:
        await store.setup()
        return (await store.create_chat()).id


async def saved_task(url: str, chat_id: str) -> dict[str, Any]:
    """The saved pause state of the chat's one open call, read from the database."""
    async with Store(url) as store:
        (task,) = await store.pending_tasks(chat_id) or [None]
        if task is not None:
            return task.to_dict()["task"]
        (question, *_) = await store.pending_questions(chat_id)
        chat = await store.load_chat(chat_id)
        assert question.tool_call is not None
        record = chat.records[question.tool_call.id]
        assert record.task is not None
        return record.task.to_dict()["task"]


async def test_input_request_parks_in_one_process_is_answered_in_another_and_carried_on_in_a_third(
    database_url: str,  # noqa: F811
) -> None:
    url = database_url
    chat_id = await new_chat(url)
    server = json.dumps({"command": booking_command()})
    calls = json.dumps(BOOK)

    parked, log1 = run("ask", url, chat_id, server, calls, "Book Chez Nous")
    assert parked["waiting"] is True
    assert parked["tasks"] == [{"kind": "input", "status": "input_required", "task_id": None}]

    async with Store(url) as store:  # this process: list and answer from the database alone
        (size,) = await store.pending_questions(chat_id)
        assert size.source == "booking"
        assert size.kind == "form"
        assert size.key
        assert [field.name for field in size.fields] == ["size"]
        assert await store.answer(size.id, 4)

    second, log2 = run("carry", url, chat_id, server, calls)  # a third process retries: round two
    assert second["waiting"] is True
    saved = await saved_task(url, chat_id)
    request_state = saved["data"]["request_state"]
    assert isinstance(request_state, str)
    assert saved["data"]["round"] == 2

    async with Store(url) as store:
        (slot,) = await store.pending_questions(chat_id)
        assert [field.name for field in slot.fields] == ["time", "terrace"]
        assert await store.answer(slot.id, time="20:00", terrace=True)

    done, log3 = run("carry", url, chat_id, server, calls)  # its own server accepts the saved request state
    assert done == {"reply": "Done: Booked Chez Nous for 4 at 20:00 on the terrace", "waiting": False, "tasks": []}
    async with Store(url) as store:
        chat = await store.load_chat(chat_id)
        assert [message.role for message in chat.messages] == ["user", "assistant", "tool", "assistant"]
        assert await store.pending_questions(chat_id) == []
    for log in (log1, log2, log3):
        assert request_state not in log


async def test_pushed_question_is_answered_by_another_process_while_the_connection_waits(
    database_url: str,  # noqa: F811
) -> None:
    url = database_url
    chat_id = await new_chat(url)
    holder = start("ask", url, chat_id, json.dumps({"command": booking_command(), "protocol": "legacy"}),
                   json.dumps(BOOK), "Book Chez Nous")  # fmt: skip
    try:
        async with Store(url) as store:
            for _ in range(2):
                question = await _next_question(store, chat_id, holder)
                assert question.awaited is True
                assert question.source == "booking"
                if question.fields[0].name == "size":
                    assert await store.answer(question.id, 2)
                else:
                    assert await store.answer(question.id, time="18:00")
        done, _ = finish(holder)
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.communicate()
    assert done == {"reply": "Done: Booked Chez Nous for 2 at 18:00", "waiting": False, "tasks": []}


QUOTE = [{"name": "quote", "arguments": {"restaurant": "Chez Nous"}}]


async def test_a_pushed_question_answered_after_its_process_died_reaches_the_call_made_again(
    database_url: str,  # noqa: F811
) -> None:
    """A 2025-11-25 server pushes a question while an idempotent call of it runs, and the process holding the
    connection dies. Once its lease ran out, another process makes the call again; the server asks the same
    question and gets the answer a person gave meanwhile: asked once, answered once."""
    url = database_url
    chat_id = await new_chat(url)
    server = json.dumps({"command": booking_command(), "protocol": "legacy"})
    doomed = start("ask", url, chat_id, server, json.dumps(QUOTE), "Quote Chez Nous", lease=1)
    try:
        async with Store(url) as store:
            question = await _next_question(store, chat_id, doomed)
            doomed.kill()
            doomed.communicate()
            assert await store.answer(question.id, 4)
    finally:
        if doomed.poll() is None:
            doomed.kill()
            doomed.communicate()
    loop = asyncio.get_running_loop()
    end = loop.time() + 60
    while (done := finish(start("carry", url, chat_id, server, json.dumps(QUOTE), lease=1))[0])["waiting"]:
        assert loop.time() < end, "the call was never made again"  # the lease still held: the call waits
        await asyncio.sleep(0.2)
    assert done == {"reply": "Done: A table at Chez Nous for 4 costs 100 euros", "waiting": False, "tasks": []}
    async with Store(url) as store:
        (record,) = (await store.load_chat(chat_id)).records.values()
    assert [asked.id for asked in record.questions] == [question.id], "the question was asked again"


async def _next_question(store: Store, chat_id: str, process: subprocess.Popen[str], within: float = 60.0) -> Any:
    """The chat's first undecided question, polled from the database until one is there."""
    loop = asyncio.get_running_loop()
    end = loop.time() + within
    while True:
        found = await store.pending_questions(chat_id)
        if found:
            return found[0]
        assert process.poll() is None, process.communicate()[1][-3000:]
        assert loop.time() < end, "no question was saved in time"
        await asyncio.sleep(0.05)


@pytest.fixture
def tasks_url() -> Any:
    """The fastmcp-tasks server over streamable HTTP on 127.0.0.1 (one server the processes share)."""
    with http_server([sys.executable, str(SERVERS / "tasks_server.py"), "--http", "{port}"]) as url:
        yield url


async def test_a_servers_task_is_polled_on_from_other_processes(
    database_url: str,  # noqa: F811
    tasks_url: str,
) -> None:
    url = database_url
    chat_id = await new_chat(url)
    server = json.dumps({"url": tasks_url})
    calls = json.dumps([{"name": "survey", "arguments": {"topic": "tea"}}])

    started, _ = run("ask", url, chat_id, server, calls, "Survey tea")  # creates the task, then exits
    ((task,),) = (started["tasks"],)
    assert task["kind"] == "task"
    assert task["task_id"]
    saved = await saved_task(url, chat_id)
    assert saved["data"]["task_id"] == task["task_id"]
    assert saved["data"]["server"] == "tasks"
    assert saved["data"]["created_at"]
    assert "era" in saved["data"]

    polled, _ = run("poll", url, chat_id, server, calls, "60")  # a second process polls until the task asks
    assert polled["questions"] == 1
    async with Store(url) as store:
        (question,) = await store.pending_questions(chat_id)
        assert question.key  # the server's key for the request, unique over the task's life
        assert await store.answer(question.id, 5)

    done, _ = run("poll", url, chat_id, server, calls, "60")  # a third sends the answer and polls to the end
    assert done["reply"] == "Done: tea rated 5"
    assert done["waiting"] is False


async def test_a_legacy_task_parked_over_http_is_finished_by_another_process(
    database_url: str,  # noqa: F811
    shared_tasks_url: str,
) -> None:
    url = database_url
    chat_id = await new_chat(url)
    server = json.dumps({"url": shared_tasks_url})
    calls = json.dumps([{"name": "brew", "arguments": {"drink": "tea"}}])

    started, _ = run("ask", url, chat_id, server, calls, "Brew tea")  # a task-augmented call over HTTP, then exits
    ((task,),) = (started["tasks"],)
    assert task["kind"] == "task"
    saved = await saved_task(url, chat_id)
    assert saved["data"]["era"] == "2025-11-25"
    assert saved["data"]["task_id"] == task["task_id"]

    done, _ = run("poll", url, chat_id, server, calls, "60")  # another process, another session: polls to the end
    assert done["reply"] == "Done: tea is ready"
    assert done["waiting"] is False
