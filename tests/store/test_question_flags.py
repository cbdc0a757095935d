"""A stored question keeps its typed flags (``awaited``, ``after``, ``messages_said``) in its ``extra`` JSON column
under the keys tarry always wrote there: a question reads back as it was written, and rows an earlier tarry wrote read
back with their flags (real SQLite files and PostgreSQL)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, insert, select

from tarry.clock import utcnow
from tarry.messages import ToolCall
from tarry.questions import Field, Question
from tarry.store import Store
from tarry.store.rows import question_values
from tarry.store.tables import chats, questions, tool_calls


def _chat_and_call(connection: Connection) -> int:
    """A chat with one call; the call's row id."""
    now = utcnow()
    connection.execute(
        insert(chats).values(id="chat-1", settings={}, created_at=now, version=0, message_count=2, schedule_version=0)
    )
    return int(
        connection.execute(
            insert(tool_calls)
            .values(
                chat_id="chat-1", message_position=1, call_id="call-1", name="lookup", arguments={"name": "Ada"},
                needs_approval=False, version=0, created_at=now,
            )
            .returning(tool_calls.c.id)
        ).scalar_one()
    )  # fmt: skip


def _extra_of(store: Store, question_id: str) -> Any:
    query = select(questions.c.extra).where(questions.c.id == question_id)
    with store.db.sync_engine.connect() as connection:
        return connection.execute(query).scalar_one()


async def test_a_stored_question_reads_back_its_flags_and_keeps_them_under_the_keys_of_old(store: Store) -> None:
    call = ToolCall("call-1", "lookup", {"name": "Ada"})
    asked = Question(
        "q-2", "form", "Account?", fields=(Field(name="account"),), tool_call=call, chat_id="chat-1",
        asked_at=utcnow(), extra={"mode": "form"}, awaited=True, after="q-1",
    )  # fmt: skip
    own = Question(
        "q-3", "url", "Log in", url="http://as/authorize", chat_id="chat-1", asked_at=utcnow(), messages_said=0
    )
    plain = Question("q-4", "approval", "Go?", tool_call=call, chat_id="chat-1", asked_at=utcnow())

    def write(connection: Connection) -> None:
        row_id = _chat_and_call(connection)
        for number, (question, call_row) in enumerate(((asked, row_id), (own, None), (plain, row_id))):
            values = {"chat_id": "chat-1", "tool_call_id": call_row, "number": number, **question_values(question)}
            connection.execute(insert(questions).values(values))

    await store.db.run_write(write)
    read = await store.question("q-2")
    assert (read.awaited, read.after, read.messages_said, read.extra) == (True, "q-1", None, {"mode": "form"})
    read = await store.question("q-3")
    assert (read.awaited, read.after, read.messages_said, read.extra) == (False, None, 0, {})
    read = await store.question("q-4")
    assert (read.awaited, read.after, read.messages_said, read.extra) == (False, None, None, {})
    extra = _extra_of(store, "q-2")
    assert list(extra.items()) == [("mode", "form"), ("awaited", True), ("after", "q-1")]
    assert _extra_of(store, "q-3") == {"messages": 0}
    assert _extra_of(store, "q-4") is None


async def test_rows_an_earlier_tarry_wrote_read_back_their_flags_and_odd_values_verbatim(store: Store) -> None:
    written = {
        "old-awaited": {"mode": "form", "awaited": True, "after": "old-first"},
        "old-own": {"messages": 4},
        "odd": {"awaited": "true", "after": 7, "messages": True, "elicitation_id": "e-1"},
        "false": {"awaited": False, "after": None},
    }

    def write(connection: Connection) -> None:
        row_id = _chat_and_call(connection)
        for number, (question_id, extra) in enumerate(written.items()):
            connection.execute(
                insert(questions).values(
                    id=question_id, chat_id="chat-1", tool_call_id=row_id, number=number, kind="approval",
                    message="Go?", asked_at=utcnow(), extra=extra,
                )
            )  # fmt: skip

    await store.db.run_write(write)
    flags = {}
    for question_id, extra in written.items():
        read = await store.question(question_id)
        flags[question_id] = (read.awaited, read.after, read.messages_said, read.extra)
        assert question_values(read)["extra"] == extra, "writing the question again writes the same JSON"
    assert flags == {
        "old-awaited": (True, "old-first", None, {"mode": "form"}),
        "old-own": (False, None, 4, {}),
        "odd": (False, None, None, {"awaited": "true", "after": 7, "messages": True, "elicitation_id": "e-1"}),
        "false": (False, None, None, {"awaited": False, "after": None}),
    }
