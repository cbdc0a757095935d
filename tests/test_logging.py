"""What tarry logs for an operator: each record names its chat, call and question in ``extra=`` fields,
and no answer value, secret or token reaches a log."""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tarry import Agent, Field, Task, Tool, tool
from tarry.jobs import continue_chat
from tarry.store import Store
from tarry.testing import ScriptedModel, advance_clock

SECRET = "hunter2-do-not-log"


def replying(name: str, arguments: dict[str, object], final: str = "Done.") -> ScriptedModel:
    def turn(messages: list) -> object:
        return [{"name": name, "arguments": arguments}] if messages[-1].role == "user" else final

    return ScriptedModel([turn] * 5)


class Login(Tool):
    """Logs in once a person types the password."""

    def execute(self, user: str) -> Task:
        return self.ask(f"Password for {user}?", password=Field(description="The password"))

    def resume(self, task: Task, user: str) -> str:
        return f"Logged in as {user}."


class Backup(Tool):
    """Backs up, finishing on the second check."""

    def execute(self) -> Task:
        return Task(data={"checks": 0})

    def resume(self, task: Task) -> str | Task:
        return "Backed up." if task.data["checks"] >= 1 else Task(data={"checks": 1})


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    async with Store(f"sqlite:///{tmp_path / 'chats.db'}") as opened:
        await opened.setup()
        yield opened


def records(caplog: pytest.LogCaptureFixture, start: str) -> list[logging.LogRecord]:
    return [record for record in caplog.records if record.getMessage().startswith(start)]


def fields(record: logging.LogRecord) -> dict[str, object]:
    return {name: getattr(record, name, None) for name in ("chat_id", "call_id", "question_id")}


def assert_nothing_secret(caplog: pytest.LogCaptureFixture) -> None:
    for record in caplog.records:
        assert SECRET not in record.getMessage()
        assert SECRET not in json.dumps(vars(record), default=str)


async def test_a_parked_chat_and_a_decision_are_logged_with_their_ids_but_not_the_answer(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="tarry")
    chat = await store.create_chat(replying("login", {"user": "ada"}), [Login()])
    await chat.ask("Log me in")
    [question] = await store.pending_questions(chat.id)
    call_id = question.tool_call.id if question.tool_call else None

    [parked] = records(caplog, f"Chat {chat.id} parked")
    assert parked.name == "tarry" and parked.levelno == logging.INFO
    assert fields(parked) == {"chat_id": chat.id, "call_id": None, "question_id": None}
    [claimed] = records(caplog, "Claimed the login call")
    assert claimed.levelno == logging.DEBUG
    assert fields(claimed) == {"chat_id": chat.id, "call_id": call_id, "question_id": None}

    assert await store.answer(question.id, SECRET)
    [decided] = records(caplog, "Recorded accept on question")
    assert decided.name == "tarry.store" and decided.levelno == logging.INFO
    assert fields(decided) == {"chat_id": chat.id, "call_id": call_id, "question_id": question.id}

    await chat.complete()
    assert chat.messages[-2].content == "Logged in as ada."
    assert_nothing_secret(caplog)


async def test_each_check_of_a_task_is_logged(store: Store, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="tarry")
    chat = await store.create_chat(replying("backup", {}), [Backup()])
    await chat.ask("Back up")
    await chat.complete()
    await chat.complete()
    checks = records(caplog, "Checked the task of the backup call")
    assert [record.getMessage().rsplit(": ", 1)[1] for record in checks] == ["it still waits", "it finished"]
    call_id = chat.messages[1].tool_calls[0].id
    assert {tuple(fields(record).values()) for record in checks} == {(chat.id, call_id, None)}


async def test_a_reclaimed_call_is_logged_as_closed_interrupted_and_the_first_process_as_having_lost_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="tarry")
    url = f"sqlite:///{tmp_path / 'chats.db'}"
    entered, release = threading.Event(), threading.Event()

    @tool
    def pay(amount: int) -> str:
        """Pays, slowly."""
        entered.set()
        release.wait(10)
        return "paid"

    async with Store(url, lease=60) as first:
        await first.setup()
        chat = await first.create_chat(replying("pay", {"amount": 5}), [pay])
        asking = asyncio.create_task(chat.ask("Pay"))
        await asyncio.to_thread(entered.wait, 10)
        advance_clock(61)  # the first process's lease runs out while its tool runs
        async with Store(url, lease=60) as second:
            again = await second.load_chat(chat.id, replying("pay", {"amount": 5}), [pay])
            await again.complete()
        release.set()
        await asking
    call_id = chat.messages[1].tool_calls[0].id
    ids = (chat.id, call_id, None)
    [reclaimed] = records(caplog, f"Reclaimed the pay call {call_id}")
    [interrupted] = records(caplog, f"Closed the pay call {call_id} as interrupted")
    [lost] = records(caplog, f"Lost the claim on the pay call {call_id}")
    for record in (reclaimed, interrupted, lost):
        assert record.levelno == logging.WARNING and tuple(fields(record).values()) == ids


async def test_a_workers_step_is_logged_with_its_chat(store: Store, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="tarry")
    agent = Agent("keeper", model=lambda: replying("backup", {}), tools=[Backup()])
    chat = await store.create_chat(agent=agent)
    await chat.ask("Back up")
    next_check = await continue_chat(store, chat.id, [agent])
    assert next_check is not None
    assert await continue_chat(store, chat.id, [agent]) is None
    steps = records(caplog, f"Carried chat {chat.id} on: ")
    assert [step.getMessage() for step in steps] == [
        f"Carried chat {chat.id} on: waits; next check {next_check.isoformat()}",
        f"Carried chat {chat.id} on: done; next check none",
    ]
    for step in steps:
        assert step.name == "tarry.jobs" and step.levelno == logging.INFO
        assert fields(step) == {"chat_id": chat.id, "call_id": None, "question_id": None}
