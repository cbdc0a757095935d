"""With thousands of other chats stored, no step of a chat's life reads a whole table.

Every statement the store sends while a chat runs, waits, is answered, carried on and listed is
planned again by the database itself (PostgreSQL's ``EXPLAIN``, SQLite's ``EXPLAIN QUERY PLAN``),
and no plan may scan the chats, messages, calls or questions of every chat. A decision's statement, which
finds its question by id, looks it up by its key even in a cached generic plan, whatever waits.
"""

from __future__ import annotations

import json
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
from tests.store.test_store import plain_url
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


def whole_index_reads(plan: dict[str, Any], indexes: set[str]) -> list[str]:
    """The ones of ``indexes`` that a plan node reads from end to end (an index scan without an index condition)."""
    found = [plan["Index Name"]] if plan.get("Index Name") in indexes and "Index Cond" not in plan else []
    for child in plan.get("Plans", []):
        found += whole_index_reads(child, indexes)
    return found


def generic_plan(connection: psycopg.Connection[Any], statement: str, parameters: dict[str, Any]) -> dict[str, Any]:
    """PostgreSQL's generic plan of ``statement`` (psycopg's named parameters), as a prepared statement run often
    gets it: planned once for any values. ``connection`` binds values on the client (``EXECUTE`` takes no typeless
    parameter)."""
    names: list[str] = []

    def numbered(found: re.Match[str]) -> str:
        if found[1] not in names:
            names.append(found[1])
        return f"${names.index(found[1]) + 1}"

    prepared = re.sub(r"%\((\w+)\)s", numbered, statement).replace("%%", "%")
    connection.execute(f"PREPARE looked_at AS {prepared}")
    try:
        connection.execute("SET plan_cache_mode = force_generic_plan")
        values = ", ".join(["%s"] * len(names))
        ((plan,),) = connection.execute(
            f"EXPLAIN (FORMAT JSON) EXECUTE looked_at({values})", [parameters[name] for name in names]
        ).fetchall()
    finally:
        connection.execute("DEALLOCATE looked_at")
    return dict((json.loads(plan) if isinstance(plan, str) else plan)[0]["Plan"])


async def test_the_statements_of_a_decision_look_their_rows_up_by_key_in_a_cached_generic_plan(
    postgres_url: str,
) -> None:
    """psycopg prepares a statement it sends often, and PostgreSQL may then plan it once for every value. With
    the statistics of young tables, it rated reading all of a partial index (of undecided questions, of open
    calls) as cheap as looking a key up: each decision read an entry of every waiting question, and each save of
    a result one of every open call."""
    async with Store(postgres_url) as store:
        await store.setup()
        with psycopg.connect(plain_url(postgres_url), autocommit=True) as connection:  # statistics as young as now
            for table in ("tarry_questions", "tarry_tool_calls"):
                connection.execute(f"ALTER TABLE {table} SET (autovacuum_enabled = false)")
        parked = [await store.start_chat("Pay Bob 5", reactive_model(TRANSFER), all_tools()) for _ in range(40)]
        waiting = [question for chat in parked for question in await chat.pending_questions()]
        with statements_of(store) as sent:
            assert await store.approve(waiting[0].id) and await store.decline(waiting[1].id, "Not today")
            chat = await store.load_chat(parked[2].id, reactive_model(TRANSFER), all_tools())
            reply = await chat.complete(approve=[waiting[2]])
            assert await store.approve(waiting[3].id)
            elsewhere = await store.load_chat(parked[3].id, reactive_model(TRANSFER), all_tools())
            carried = await elsewhere.complete()
            assert reply is not None and carried is not None and carried.content == reply.content == "All done."
    kinds = [" ".join(statement.split()[:4]) for statement, _ in sent]
    assert kinds.count("WITH decided AS (UPDATE") == 4, kinds
    assert "UPDATE tarry_tool_calls SET claimed_by=%(owner)s::VARCHAR," in kinds and "WITH held AS (SELECT" in kinds
    with psycopg.connect(plain_url(postgres_url), autocommit=True, cursor_factory=psycopg.ClientCursor) as connection:
        for statement, parameters in sent:
            read = whole_index_reads(generic_plan(connection, statement, parameters), set(OPEN_ONLY.split("|")))
            assert read == [], f"{statement[:70]}… reads all of {read}"


async def test_a_later_page_of_what_waits_walks_the_undecided_questions_in_order_without_sorting(tmp_path: Any) -> None:
    url = f"sqlite:///{tmp_path / 'pages.db'}"
    async with Store(url) as store:
        await store.setup()
        await store.db.run_write(lambda connection: finished_chats(2_000, connection))
        for _ in range(12):
            chat = await store.create_chat(reactive_model(TRANSFER), all_tools())
            await chat.ask("Pay Bob 5")
        first = await store.pending_questions(limit=5)
        with statements_of(store) as sent:
            later = await store.pending_questions(limit=5, cursor=first.next_cursor)
    assert len(later) == 5 and not {question.id for question in later} & {question.id for question in first}
    with sqlite3.connect(tmp_path / "pages.db") as connection:
        ((statement, parameters),) = sent
        plan = [row[3] for row in connection.execute(f"EXPLAIN QUERY PLAN {statement}", parameters)]
    assert plan[0].startswith("SEARCH tarry_questions USING INDEX ix_tarry_questions_undecided"), plan
    assert not any("TEMP B-TREE" in step for step in plan), plan


def plan_nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """``plan`` and every node under it."""
    yield plan
    for child in plan.get("Plans", []):
        yield from plan_nodes(child)


async def test_the_listing_of_waiting_chats_reads_the_open_calls_once_and_no_call_by_its_key(
    database_url: str,
) -> None:
    """The listing counted the open calls twice (for the counts, and to find the waiting chats) and looked up the
    call of each undecided question by its key, twice too: at a million chats, 12 pages read for each waiting chat."""
    async with Store(database_url) as store:
        await store.setup()
        await store.db.run_write(lambda connection: finished_chats(2_000, connection))
        parked = []
        for _ in range(30):
            chat = await store.create_chat(reactive_model(TRANSFER), all_tools())
            await chat.ask("Pay Bob 5")
            parked.append(chat.id)
        with statements_of(store) as sent:
            listed = await store.list_chats(waiting=True)
    assert [summary.id for summary in listed] == parked
    assert all(summary.open_calls == summary.questions == 1 for summary in listed)
    ((statement, parameters),) = sent
    if database_url.startswith("sqlite"):
        with sqlite3.connect(database_url.removeprefix("sqlite:///")) as connection:
            plan = [row[3] for row in connection.execute(f"EXPLAIN QUERY PLAN {statement}", parameters)]
        assert len([step for step in plan if "tarry_tool_calls" in step]) == 1, plan
        return
    with psycopg.connect(database_url.replace("postgresql+psycopg://", "postgresql://")) as connection:
        ((found,),) = connection.execute(f"EXPLAIN (ANALYZE, FORMAT JSON) {statement}", parameters).fetchall()
    nodes = list(plan_nodes((json.loads(found) if isinstance(found, str) else found)[0]["Plan"]))
    calls = [node for node in nodes if node.get("Relation Name") == "tarry_tool_calls"]
    assert len(calls) == 1 and calls[0]["Actual Loops"] == 1, calls
    (read,) = [node for node in nodes if node.get("Relation Name") == "tarry_questions"]
    assert read.get("Index Name") == "ix_tarry_questions_undecided" and read["Actual Loops"] == 1, read
