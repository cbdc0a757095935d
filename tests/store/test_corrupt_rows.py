"""One tampered row of an open call: left out of the listings, logged, reported, and named when its chat loads."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from sqlalchemy import select, text

from tarry.errors import CorruptStateError
from tarry.store import Store
from tarry.store.tables import tool_calls
from tests.store.test_store import PAY_AND_PAINT, park
from tests.store.tools import all_tools, reactive_model

Tampering = tuple[str, str, str, str, str]
# The table and column tampered with, on which call, the value written, and what is said about it.
TAMPERINGS: dict[str, Tampering] = {
    "arguments that are not an object": (
        "tarry_tool_calls",
        "arguments",
        "transfer_money",
        '["Bob", 5]',
        "its arguments are a JSON array, not an object",
    ),
    "a question with a bad schema": (
        "tarry_questions",
        "requested_schema",
        "pick_colour",
        '{"type": "object", "properties": {"colour": {"type": "colour"}}}',
        "Field 'colour': type must be one of",
    ),
    "a task status not in the list": (
        "tarry_tool_calls",
        "state",
        "slow_job",
        '{"task": {"status": "exploded"}}',
        "Unknown task status 'exploded'",
    ),
}
NOT_JSON: Tampering = (  # only SQLite can hold it: a PostgreSQL json column refuses text that is not JSON
    "tarry_tool_calls",
    "arguments",
    "transfer_money",
    '{"to": "Bob", "amount": ',
    "the arguments column holds text that is not JSON",
)


async def tamper(store: Store, chat_id: str, name: str, table: str, column: str, value: str) -> str:
    """Write ``value`` as raw text into ``column`` of the named call's row (or its questions); returns the call id."""
    json_value = ":value" if store.db.is_sqlite else "CAST(:value AS json)"
    row_filter = "id = :row" if table == "tarry_tool_calls" else "tool_call_id = :row"
    find = select(tool_calls.c.id, tool_calls.c.call_id).where(
        tool_calls.c.chat_id == chat_id, tool_calls.c.name == name
    )

    def write(connection) -> str:
        row = connection.execute(find).one()
        connection.execute(text(f"UPDATE {table} SET {column} = {json_value} WHERE {row_filter}"), {
            "value": value, "row": row.id
        })  # fmt: skip
        return str(row.call_id)

    return await store.db.run_write(write)


async def listed(store: Store) -> set[tuple[str, str]]:
    """(chat id, tool name) of every pending question and task."""
    asked = {(question.chat_id, question.tool_call.name) for question in await store.pending_questions()}
    working = {(waiting.chat_id, waiting.task.tool_call.name) for waiting in await store.waiting_tasks()}
    return asked | working


@pytest.mark.parametrize("tampering", list(TAMPERINGS))
async def test_a_tampered_call_is_left_out_logged_reported_and_named(
    store: Store, tampering: str, caplog: pytest.LogCaptureFixture
) -> None:
    await check_left_out_logged_reported_and_named(store, TAMPERINGS[tampering], caplog)


async def test_arguments_that_are_not_json_are_no_raw_decode_error(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async with Store(f"sqlite:///{tmp_path / 'tarry.db'}") as store:
        await store.setup()
        await check_left_out_logged_reported_and_named(store, NOT_JSON, caplog)


async def check_left_out_logged_reported_and_named(
    store: Store, tampering: Tampering, caplog: pytest.LogCaptureFixture
) -> None:
    """Two parked chats; one call of one is tampered with; everything else goes on working."""
    table, column, name, value, said = tampering
    broken, healthy = await park(store), await park(store)
    every = {(chat, call["name"]) for chat in (broken, healthy) for call in PAY_AND_PAINT}
    assert await listed(store) == every
    call_id = await tamper(store, broken, name, table, column, value)

    with caplog.at_level(logging.WARNING, logger="tarry.store"):
        assert await listed(store) == every - {(broken, name)}
        assert await listed(store) == every - {(broken, name)}
    warnings = [record.getMessage() for record in caplog.records if record.levelno == logging.WARNING]
    assert len(warnings) == 1, "each corrupt call is logged once per store"
    assert broken in warnings[0] and call_id in warnings[0] and said in warnings[0]

    (problem,) = await store.problems()
    assert (problem.chat_id, problem.call_id) == (broken, call_id)
    assert name in problem.detail and said in problem.detail

    with pytest.raises(CorruptStateError, match=f"{name} call {call_id}") as raised:
        await store.load_chat(broken, reactive_model(PAY_AND_PAINT), all_tools())
    assert (raised.value.chat_id, raised.value.call_id) == (broken, call_id)

    chat = await store.load_chat(healthy, reactive_model(PAY_AND_PAINT), all_tools())
    approval, colour = await store.pending_questions(healthy)
    assert await store.approve(approval.id) and await store.answer(colour.id, colour="red")
    await chat.complete()
    reply = await chat.complete()
    assert reply is not None and reply.content == "All done."
    assert await listed(store) == every - {(healthy, call["name"]) for call in PAY_AND_PAINT} - {(broken, name)}


async def test_answering_a_tampered_question_names_its_call(store: Store) -> None:
    chat_id = await park(store)
    table, column, name, value, _ = TAMPERINGS["a question with a bad schema"]
    (_, colour) = await store.pending_questions(chat_id)
    call_id = await tamper(store, chat_id, name, table, column, value)
    for attempt in (store.question(colour.id), store.answer(colour.id, colour="red")):
        with pytest.raises(CorruptStateError, match=f"Question {colour.id} of the pick_colour call {call_id}"):
            await attempt


@pytest.mark.parametrize(
    ("column", "value"), [("arguments", '["Bob", 5]'), ("extra", '["not", "an", "object"]'), ("votes", '{"odd": 1}')]
)
async def test_approving_or_declining_a_tampered_approval_by_id_writes_nothing(
    store: Store, column: str, value: str
) -> None:
    chat_id = await park(store)
    (approval, _) = await store.pending_questions(chat_id)
    table = "tarry_tool_calls" if column == "arguments" else "tarry_questions"
    call_id = await tamper(store, chat_id, "transfer_money", table, column, value)
    for attempt in (store.approve(approval.id), store.decline(approval.id, "no")):
        with pytest.raises(CorruptStateError, match=f"transfer_money call {call_id}"):
            await attempt
    assert await store.history(chat_id) == [], "an attempt on a question that cannot be read is recorded"
    undecided = text("SELECT decision FROM tarry_questions WHERE id = :id")
    assert await store.db.run_read(lambda c: c.execute(undecided, {"id": approval.id}).scalar()) is None


async def test_a_store_without_corrupt_records_has_no_problems(store: Store) -> None:
    await park(store)
    assert await store.problems() == []
