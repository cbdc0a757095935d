"""A loaded chat reads back what another process wrote, and holds only what it could take in."""

from __future__ import annotations

import pytest
from sqlalchemy import text

from tarry.errors import CorruptStateError
from tarry.store import Store
from tests.store.test_store import park
from tests.store.tools import all_tools, reactive_model


async def rewrite_state(store: Store, chat_id: str, name: str, state: str) -> None:
    """Replace the saved state of the named call as another process's save would: new row and chat versions."""
    value = ":state" if store.db.is_sqlite else "CAST(:state AS json)"

    def write(connection) -> None:
        where = {"chat": chat_id, "name": name, "state": state}
        connection.execute(
            text(
                f"UPDATE tarry_tool_calls SET state = {value}, version = version + 1 "
                "WHERE chat_id = :chat AND name = :name"
            ),
            where,
        )
        connection.execute(text("UPDATE tarry_chats SET version = version + 1 WHERE id = :chat"), where)

    await store.db.run_write(write)


async def test_a_saved_state_that_cannot_be_loaded_is_named_at_every_read_and_changes_nothing(store: Store) -> None:
    chat_id = await park(store)
    chat = await store.load_chat(chat_id, reactive_model([]), all_tools())
    record = next(record for record in chat.records.values() if record.call.name == "slow_job")
    task, messages = record.task, list(chat.messages)
    assert task is not None
    await chat.pending_questions()  # the first look after the load takes the rows the load read

    await rewrite_state(store, chat_id, "slow_job", '{"task": {"status": "exploded"}}')
    for _attempt in range(2):  # not counted as read: the next look reads it again
        with pytest.raises(CorruptStateError, match=f"slow_job call {record.call.id}"):
            await chat.pending_questions()
    assert record.task is task and chat.messages == messages

    await rewrite_state(store, chat_id, "slow_job", '{"task": {"status": "working", "status_message": "half"}}')
    await chat.pending_questions()
    assert record.task is not task and record.task is not None and record.task.status_message == "half"
