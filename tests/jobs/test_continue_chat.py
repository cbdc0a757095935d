"""``Agent`` and ``continue_chat`` in one process, on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import json
import logging
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import select, update

from tarry import Agent, Message, Task, Tool
from tarry.clock import utcnow
from tarry.jobs import continue_chat
from tarry.store import Store
from tarry.store.due import take_if_due
from tarry.store.tables import chats, tool_calls
from tarry.testing import ScriptedModel, advance_clock
from tests.jobs.tools import Quick, clerk, order_calls


async def chat_row(store: Store, chat_id: str) -> dict[str, object]:
    query = select(chats).where(chats.c.id == chat_id)
    return dict(await store.db.run_read(lambda connection: connection.execute(query).mappings().one()))


async def test_a_chat_made_from_an_agent_records_its_name_and_takes_its_definition(store: Store) -> None:
    agent = clerk()
    chat = await store.create_chat(agent=agent)
    assert (await chat_row(store, chat.id))["agent"] == "clerk"
    assert sorted(chat.tools) == sorted(tool.name for tool in agent.tools)
    assert chat.instructions == "You are a shop clerk."
    with pytest.raises(ValueError, match="name"):
        Agent("")
    with pytest.raises(TypeError, match="model"):
        Agent("x", model=42)  # type: ignore[arg-type]


async def test_continue_chat_carries_a_chat_through_approval_question_and_task(store: Store) -> None:
    agent = clerk()
    chat = await store.create_chat(agent=agent)
    # 3 s of build: long enough that it is still working at the first continue_chat on a loaded machine
    await chat.ask(json.dumps(order_calls("o1", seconds=3, poll=0.1)))
    approval, size = await store.pending_questions(chat.id)
    due = (await chat_row(store, chat.id))["next_check_at"]
    assert due is not None and due <= utcnow() + timedelta(seconds=0.1)  # the build task is checked soon

    next_check = await continue_chat(store, chat.id, [agent])
    assert next_check is not None and next_check - utcnow() <= timedelta(seconds=0.1)

    assert await store.approve(approval.id)
    assert await store.answer(size.id, "M")
    assert (await chat_row(store, chat.id))["next_check_at"] <= utcnow()  # a decision makes the chat due now
    deadline = asyncio.get_running_loop().time() + 10
    while next_check is not None:
        assert asyncio.get_running_loop().time() < deadline, "the chat never finished"
        await asyncio.sleep(max(0.0, (next_check - utcnow()).total_seconds()))
        next_check = await continue_chat(store, chat.id, [agent])
    done = await store.load_chat(chat.id)
    assert done.messages[-1].content == "Done after 3 results."
    results = sorted(message.content for message in done.messages if message.role == "tool")
    assert results[0].startswith("Sent 5 to o1") and "size M" in results[2] and "built after" in results[1]
    assert (await chat_row(store, chat.id))["next_check_at"] is None
    assert await continue_chat(store, chat.id, [agent]) is None  # as often as you like


async def test_a_chat_of_an_unknown_agent_is_left_untouched_and_logged(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    chat = await store.create_chat(agent=clerk())
    await chat.ask(json.dumps(order_calls("o2", seconds=0.1)))
    other = Agent("someone-else", model=lambda: ScriptedModel(["never"]))
    before = await chat_row(store, chat.id)
    with caplog.at_level(logging.WARNING, logger="tarry.jobs"):
        assert await continue_chat(store, chat.id, [other]) is None
    assert "does not serve" in caplog.text and "clerk" in caplog.text
    assert await chat_row(store, chat.id) == before
    assert len((await store.load_chat(chat.id)).messages) == 2


async def test_a_lapsed_question_is_closed_and_its_expiry_is_the_next_check(store: Store) -> None:
    def turn(messages: list[Message]) -> object:
        return [{"name": "quick", "arguments": {"ttl": 60}}] if messages[-1].role == "user" else "Lapsed, fine."

    agent = Agent("asker", model=lambda: ScriptedModel([turn] * 3), tools=[Quick()])
    chat = await store.create_chat(agent=agent)
    await chat.ask("go")
    (question,) = await store.pending_questions(chat.id)
    assert (await chat_row(store, chat.id))["next_check_at"] == question.expires_at
    assert await continue_chat(store, chat.id, [agent]) == question.expires_at
    advance_clock((question.expires_at - utcnow()).total_seconds() + 0.05)
    assert await continue_chat(store, chat.id, [agent]) is None
    done = await store.load_chat(chat.id)
    assert "lapsed" in done.messages[-2].content and done.messages[-1].content == "Lapsed, fine."


async def test_a_call_whose_process_died_is_looked_at_when_its_lease_runs_out_then_closed(
    store: Store, tmp_path: Path
) -> None:
    agent = clerk()
    chat = await store.create_chat(agent=agent)
    await chat.ask(json.dumps([{"name": "transfer", "arguments": {"to": "dead", "amount": 1}}]))
    (approval,) = await store.pending_questions(chat.id)
    assert await store.approve(approval.id)
    until = utcnow() + timedelta(seconds=30)
    claimed = update(tool_calls).where(tool_calls.c.chat_id == chat.id).values(claimed_by="dead", claimed_until=until)
    await store.db.run_write(lambda connection: connection.execute(claimed))  # a process claimed the call, then died
    assert await continue_chat(store, chat.id, [agent]) == until
    advance_clock((until - utcnow()).total_seconds() + 0.05)
    assert await continue_chat(store, chat.id, [agent]) is None
    done = await store.load_chat(chat.id)
    assert "interrupted" in done.messages[-2].content
    assert done.messages[-1].content == "Done after 1 results."


async def test_a_task_without_a_poll_interval_is_checked_after_the_default_not_at_once(store: Store) -> None:
    class Unhurried(Tool):
        """Works on, naming no poll interval."""

        def execute(self) -> Task:
            return Task(status_message="started")

        def resume(self, task: Task) -> Task:
            return Task(status_message="still going")

    agent = Agent("unhurried", model=lambda: ScriptedModel([lambda messages: [{"name": "unhurried"}]] * 3),
                  tools=[Unhurried()])  # fmt: skip
    chat = await store.create_chat(agent=agent)
    await chat.ask("Start")
    next_check = await continue_chat(store, chat.id, [agent], default_poll_interval=5.0)
    assert next_check is not None and next_check - utcnow() > timedelta(seconds=4)
    recorded = (await chat_row(store, chat.id))["next_check_at"]
    assert recorded is not None and recorded - utcnow() > timedelta(seconds=4), (
        "the worker would check it again at once"
    )


async def test_of_two_scheduled_runs_due_at_once_one_takes_the_chat(store: Store) -> None:
    agent = clerk()
    chat = await store.create_chat(agent=agent)
    await chat.ask(json.dumps(order_calls("o2", seconds=30, poll=0.1)))
    deadline = asyncio.get_running_loop().time() + 10
    while (await chat_row(store, chat.id))["next_check_at"] > utcnow():
        assert asyncio.get_running_loop().time() < deadline, "the chat never fell due"
        await asyncio.sleep(0.02)
    first, second = await asyncio.gather(take_if_due(store, chat.id), take_if_due(store, chat.id))
    assert [first is None, second is None].count(True) == 1
    assert await take_if_due(store, chat.id) is None  # taken: due again only after a lease
