"""With thousands of other chats stored, no step of a chat's life reads a whole table.

Every statement the store sends while a chat runs, waits, is answered, carried on and listed is
planned again by the database itself (PostgreSQL's ``EXPLAIN``, SQLite's ``EXPLAIN QUERY PLAN``),
and no plan may scan the chats, messages, calls or questions of every chat.
"""

from __future__ import annotations

import re
import sqlite3
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from sqlalchemy import Connection, event, insert, select, text

from tarry.clock import utcnow
from tarry.store import Store
from tarry.store.tables import chats, messages, questions, tool_calls
from tests.store.tools import all_tools, reactive_model

OTHER_CHATS = 5_000
BIG_TABLES = "tarry_chats|tarry_messages|tarry_tool_calls|tarry_questions"
OPEN_ONLY = "ix_tarry_tool_calls_open|ix_tarry_questions_undecided|ix_tarry_questions_own_undecided"
"""Partial indexes of the calls and questions that wait, whose size is what waits, not what was ever stored."""
TRANSFER = [{"name": "transfer_money", "arguments": {"to": "Bob", "amount": 5}}]


def finished_chats(count: int, connection: Connection) -> None:
    """``count`` chats shaped as tarry leaves them: a user message, an approved call and its result."""
    now, ids = utcnow(), [str(uuid.uuid4()) for _ in range(count)]
    connection.execute(insert(chats), [{"id": i, "settings": {}, "created_at": now, "message_count": 3} for i in ids])
    connection.execute(
        insert(messages),
        [{"chat_id": i, "position": p, "role": r, "content": "x", "created_at": now}
         for i in ids for p, r in ((0, "user"), (2, "tool"))],
    )  # fmt: skip
    results = select(messages.c.chat_id, messages.c.id).where(messages.c.position == 2)
    result_of = dict(connection.execute(results).all())
    connection.execute(
        insert(tool_calls),
        [{"chat_id": i, "message_position": 1, "call_id": f"c{i}", "name": "transfer_money", "arguments": {},
          "needs_approval": True, "version": 1, "result_message_id": result_of[i], "created_at": now} for i in ids],
    )  # fmt: skip
    call_of = dict(connection.execute(select(tool_calls.c.chat_id, tool_calls.c.id)).all())
    connection.execute(
        insert(questions),
        [{"id": str(uuid.uuid4()), "chat_id": i, "tool_call_id": call_of[i], "number": 0, "kind": "approval",
          "message": "Approve?", "asked_at": now, "decision": "accept", "answer": {}, "decided_at": now} for i in ids],
    )  # fmt: skip
    connection.execute(text("ANALYZE"))


@contextmanager
def statements_of(store: Store) -> Iterator[list[tuple[str, Any]]]:
    """Every statement ``store`` sends in the block, with its parameters, as the driver got them."""
    sent: list[tuple[str, Any]] = []

    def note(conn: Any, cursor: Any, statement: str, parameters: Any, *rest: Any) -> None:
        if not statement.startswith(("BEGIN", "COMMIT", "ROLLBACK", "PRAGMA", "SAVEPOINT", "RELEASE")):
            sent.append((statement, parameters))

    event.listen(store.db.sync_engine, "before_cursor_execute", note)
    try:
        yield sent
    finally:
        event.remove(store.db.sync_engine, "before_cursor_execute", note)


def whole_table_reads(database_url: str, sent: list[tuple[str, Any]]) -> list[str]:
    """The plans among those of ``sent`` that read one of the big tables from end to end, with their statements."""
    if database_url.startswith("sqlite"):
        with sqlite3.connect(database_url.removeprefix("sqlite:///")) as connection:
            plans = ["\n".join(row[3] for row in connection.execute(f"EXPLAIN QUERY PLAN {s}", p)) for s, p in sent]
        scan = re.compile(rf"^SCAN ({BIG_TABLES})\b(?! USING (COVERING )?INDEX ({OPEN_ONLY})\b)", re.MULTILINE)
    else:
        with psycopg.connect(database_url.replace("postgresql+psycopg://", "postgresql://")) as connection:
            plans = ["\n".join(row[0] for row in connection.execute(f"EXPLAIN {s}", p)) for s, p in sent]
        scan = re.compile(rf"Seq Scan on ({BIG_TABLES})\b")
    return [f"{statement}\n{plan}" for (statement, _), plan in zip(sent, plans, strict=True) if scan.search(plan)]


async def test_no_step_of_a_chat_reads_every_chat(database_url: str) -> None:
    async with Store(database_url) as store:
        await store.setup()
        await store.db.run_write(lambda connection: finished_chats(OTHER_CHATS, connection))
        with statements_of(store) as sent:
            started = await store.start_chat("Pay Bob 5", reactive_model(TRANSFER), all_tools())
            second = await store.create_chat(reactive_model(TRANSFER), all_tools())
            await second.ask("Pay Bob 5")
            third = await store.start_chat("Pay Bob 5", reactive_model(TRANSFER), all_tools())

            chat = await store.load_chat(started.id, reactive_model(TRANSFER), all_tools())
            (question,) = await chat.pending_questions()
            assert await chat.approve(question)
            assert (await chat.complete()) == chat.last_reply and chat.last_reply.content == "All done."

            page = await store.pending_questions(limit=1)
            later = await store.pending_questions(limit=1, cursor=page.next_cursor)
            assert {page[0].chat_id, later[0].chat_id} == {second.id, third.id}
            assert await store.approve(page[0].id) and await store.decline(later[0].id, note="no")
            assert (await store.question(page[0].id)).decision is not None
            assert [summary.id for summary in await store.list_chats(waiting=True)] == [second.id, third.id]
            assert (await store.chat_summary(second.id)).open_calls == 1
            assert len(await store.messages(second.id)) == 2
            assert await store.chat_version(second.id) > 0
            assert await store.waiting_tasks() == []
            assert len(await store.history(second.id)) == 1
            carried = await store.load_chat(second.id, reactive_model(TRANSFER), all_tools())
            assert (await carried.complete()) is not None and not carried.waiting
            assert await store.cancel(third.id)
        assert len(sent) > 20
        assert whole_table_reads(database_url, sent) == []
