"""Statements sent straight to the driver's cursor give what SQLAlchemy's own execution gives, on both databases."""

from __future__ import annotations

import gc
import weakref
from typing import Any

import pytest
from sqlalchemy import Connection, bindparam, event, insert, select, update
from sqlalchemy.exc import IntegrityError

from tarry.store import Store
from tarry.store.cursor import fetch_all, fetch_one, fetch_value, run
from tarry.store.deciding import _QUESTION
from tarry.store.journal import _CHAT_AT_ONCE, CHAT_VERSION
from tarry.store.tables import chats, messages, questions, tool_calls
from tests.store.test_store import park


async def test_rows_read_through_the_cursor_equal_sqlalchemy_s(store: Store) -> None:
    chat_id = await park(store)
    (approval, *_) = await store.pending_questions(chat_id)
    reads: list[tuple[Any, dict[str, Any]]] = [
        (CHAT_VERSION, {"chat_id": chat_id}),
        (select(chats).where(chats.c.id == bindparam("chat_id")), {"chat_id": chat_id}),
        (select(messages).where(messages.c.chat_id == bindparam("chat_id")), {"chat_id": chat_id}),
        (select(tool_calls).where(tool_calls.c.chat_id == bindparam("chat_id")), {"chat_id": chat_id}),
        (_QUESTION, {"question_id": approval.id}),
    ]
    if not store.db.is_sqlite:
        reads.append((_CHAT_AT_ONCE, {"chat_id": chat_id, "start": 0}))

    def both(connection: Connection) -> list[tuple[list[dict[str, Any]], list[dict[str, Any]]]]:
        return [
            (
                fetch_all(connection, statement, values),
                [dict(row) for row in connection.execute(statement, values).mappings()],
            )
            for statement, values in reads
        ]

    pairs = await store.db.run_read(both)
    for direct, through_sqlalchemy in pairs:
        assert direct == through_sqlalchemy
        assert direct, "each read found rows"
    if not store.db.is_sqlite:  # from the event loop, where textual SQL alone reads the columns' description
        from_the_loop = await store.db.run_direct(
            lambda connection: [fetch_all(connection, statement, values) for statement, values in reads], write=False
        )
        assert from_the_loop == [through_sqlalchemy for _, through_sqlalchemy in pairs]
    times = await store.db.run_read(lambda connection: fetch_one(connection, select(chats), {}))
    assert times is not None and times["created_at"].utcoffset() is not None, "times come back aware, in UTC"


async def test_writes_through_the_cursor_store_what_sqlalchemy_would(store: Store) -> None:
    chat_id = (await store.create_chat()).id
    calls = [{"id": "c1", "name": "pay", "arguments": {"to": "Bob", "amount": 5}}]
    row = {"chat_id": chat_id, "position": 0, "role": "assistant", "content": "", "tool_calls": calls, "usage": None}
    added = insert(messages).returning(messages.c.id, messages.c.tool_calls, messages.c.created_at)

    def write(connection: Connection) -> tuple[dict[str, Any] | None, dict[str, Any]]:
        from tarry.clock import utcnow

        values = {**row, "created_at": utcnow()}
        direct = fetch_one(connection, added, values)
        through_sqlalchemy = connection.execute(added, {**values, "position": 1}).mappings().one()
        return direct, dict(through_sqlalchemy)

    direct, through_sqlalchemy = await store.db.run_write(write)
    assert direct is not None
    assert direct["tool_calls"] == through_sqlalchemy["tool_calls"] == calls
    assert direct["created_at"] == through_sqlalchemy["created_at"], "one time, written and returned alike"
    stored_alike = select(messages.c.tool_calls, messages.c.usage.is_(None), messages.c.created_at).where(
        messages.c.chat_id == chat_id
    )
    stored = await store.db.run_read(lambda connection: list(connection.execute(stored_alike)))
    assert [tuple(found)[:2] for found in stored] == [(calls, True), (calls, True)], "JSON and a JSON None stored alike"
    assert stored[0][2] == direct["created_at"], "the time written is the time read back"
    bump = update(chats).where(chats.c.id == bindparam("chat_id")).values(version=chats.c.version + 1)
    assert await store.db.run_write(lambda connection: run(connection, bump, {"chat_id": chat_id})) == 1
    assert await store.db.run_read(lambda connection: fetch_value(connection, CHAT_VERSION, {"chat_id": chat_id})) == 1
    missing = {"chat_id": "no-such-chat"}
    assert await store.db.run_read(lambda connection: fetch_value(connection, CHAT_VERSION, missing)) is None


async def test_the_engine_s_listeners_hear_statements_sent_through_the_cursor(store: Store) -> None:
    chat_id = (await store.create_chat()).id
    heard: list[tuple[str, str]] = []
    event.listen(store.db.sync_engine, "before_cursor_execute", lambda _c, _k, sql, *_: heard.append(("before", sql)))
    event.listen(store.db.sync_engine, "after_cursor_execute", lambda _c, _k, sql, *_: heard.append(("after", sql)))
    assert await store.chat_version(chat_id) == 0
    assert [when for when, statement in heard if "tarry_chats.version" in statement] == ["before", "after"]


async def test_a_driver_error_through_the_cursor_is_sqlalchemy_s_and_rolls_the_transaction_back(store: Store) -> None:
    chat_id = (await store.create_chat()).id
    bump = update(chats).where(chats.c.id == bindparam("chat_id")).values(version=chats.c.version + 1)
    orphan = {"id": "q1", "chat_id": "no-such-chat", "number": 0, "kind": "approval", "prompt": "?"}

    def write(connection: Connection) -> None:
        run(connection, bump, {"chat_id": chat_id})
        run(connection, insert(questions), orphan)  # no such chat: the foreign key refuses it

    with pytest.raises(IntegrityError, match="tarry_questions"):
        await store.db.run_write(write)
    assert await store.chat_version(chat_id) == 0, "the bump before the error rolled back"


async def test_a_statement_built_for_one_call_is_freed_with_its_compiled_form(store: Store) -> None:
    chat_id = (await store.create_chat()).id

    def read_once(connection: Connection) -> weakref.ref[Any]:
        built = select(chats.c.version).where(chats.c.id == chat_id)
        assert fetch_value(connection, built, {}) == 0
        return weakref.ref(built)

    gone = await store.db.run_read(read_once)
    gc.collect()
    assert gone() is None, "the compiled form kept the statement alive"


async def test_listeners_see_a_connection_and_a_context_and_may_change_what_is_sent(store: Store) -> None:
    chat_id = (await store.create_chat()).id
    seen: list[tuple[str, str]] = []

    def before(conn: Any, cursor: Any, sql: str, parameters: Any, context: Any, many: bool) -> tuple[str, Any]:
        context.noted = conn.engine.url.get_backend_name()  # as OpenTelemetry's instrumentation does
        return sql + " /* tagged */", parameters

    def after(conn: Any, cursor: Any, sql: str, parameters: Any, context: Any, many: bool) -> None:
        seen.append((context.noted, sql))

    event.listen(store.db.sync_engine, "before_cursor_execute", before, retval=True)
    event.listen(store.db.sync_engine, "after_cursor_execute", after)
    assert await store.chat_version(chat_id) == 0
    backend = "sqlite" if store.db.is_sqlite else "postgresql"
    read = [(noted, sql.endswith("/* tagged */")) for noted, sql in seen if "tarry_chats" in sql]
    assert read == [(backend, True)], "the read was heard, and sent as the listener changed it"
