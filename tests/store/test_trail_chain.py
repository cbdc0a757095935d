"""A trail that shows tampering, on a SQLite file and on PostgreSQL: each row chained to the one before by a hash,
raw SQL that changes, removes or inserts a row found by ``Store.verify_trail``, and on PostgreSQL refused outright."""

from __future__ import annotations

import asyncio
import re
import uuid
from typing import Any
from urllib.parse import unquote

import pytest
from sqlalchemy import Connection, text
from sqlalchemy.exc import DBAPIError

from tarry.principals import Principal
from tarry.store import Store, TrailBreak
from tests.store.approvers import may_decide
from tests.store.test_accountable import payout_question
from tests.store.test_database_errors import migrate_to, on_database
from tests.store.test_decisions_together import parked

TRAIL = "tarry_decision_events"


async def busy_trail(store: Store) -> list[int]:
    """Decisions through each way tarry records one: together, alone, declined with a note, answered by a policy's
    count, refused, and lost; returns the trail's event ids."""
    approvals = [question for _, question in await parked(store, 5)]
    together = [store.approve(question.id, by=f"p{number}") for number, question in enumerate(approvals[:4])]
    assert await asyncio.gather(*together) == [True] * 4
    assert await store.decline(approvals[4].id, "nein — zu viel 💸", by=Principal("ann", "Ann Ärcher"))
    assert await store.approve(approvals[0].id, by="late") is False  # lost: on the trail all the same
    _, payout = await payout_question(store)
    assert await store.approve(payout, by=Principal("ann", "Ann Archer"), channel="web")  # one of two counted
    with pytest.raises(Exception, match="already approved"):
        await store.approve(payout, by="ann")  # refused by the policy
    assert await store.approve(payout, by="bob", channel="cli")
    return [event.id for event in await store.history()]


@pytest.fixture
async def finance(database_url: str) -> Store:
    async with Store(database_url, may_decide=may_decide) as opened:
        await opened.setup()
        yield opened  # type: ignore[misc]


async def test_every_row_tarry_writes_is_chained_and_the_trail_verifies(finance: Store) -> None:
    ids = await busy_trail(finance)
    events = await finance.history()
    assert len(events) == len(ids) >= 9
    assert sorted(event.seq for event in events) == list(range(1, len(events) + 1))  # type: ignore[type-var]
    assert all(re.fullmatch(r"[0-9a-f]{64}", event.hash or "") for event in events)
    assert len({event.hash for event in events}) == len(events)
    assert await finance.verify_trail() is None
    record = events[0].to_record()
    assert (record["seq"], record["hash"]) == (events[0].seq, events[0].hash) and record["id"] == events[0].id


def raw(url: str, statement: str, **values: Any) -> None:
    on_database(url, lambda connection: connection.execute(text(statement), values))


def as_owner_without_the_guard(url: str, statement: str, **values: Any) -> None:
    """``statement`` run by someone who may turn the trail's guard off (its table's owner), on PostgreSQL; as it is
    on SQLite, which has no guard."""

    def work(connection: Connection) -> None:
        postgres = connection.dialect.name == "postgresql"
        if postgres:
            connection.execute(text(f"ALTER TABLE {TRAIL} DISABLE TRIGGER tarry_trail_refuse"))
        connection.execute(text(statement), values)
        if postgres:
            connection.execute(text(f"ALTER TABLE {TRAIL} ENABLE TRIGGER tarry_trail_refuse"))

    on_database(url, work)


def refused_on_postgres(url: str, statement: str, **values: Any) -> None:
    if url.startswith("sqlite"):
        return
    with pytest.raises(DBAPIError, match=r"tarry's trail is append-only: (UPDATE|DELETE) of its rows is refused"):
        raw(url, statement, **values)


async def test_a_raw_update_is_refused_on_postgresql_and_found_by_verify(finance: Store, database_url: str) -> None:
    ids = await busy_trail(finance)
    changed = ids[3]
    change = f"UPDATE {TRAIL} SET note = 'approved after all' WHERE id = :id"
    refused_on_postgres(database_url, change, id=changed)
    assert await finance.verify_trail() is None, "a refused change leaves the trail as it was"
    as_owner_without_the_guard(database_url, change, id=changed)
    found = await finance.verify_trail()
    assert found is not None and (found.id, found.how) == (changed, "changed")
    assert f"event {changed}" in found.detail


async def test_a_raw_delete_is_refused_on_postgresql_and_found_by_verify(finance: Store, database_url: str) -> None:
    ids = await busy_trail(finance)
    events = {event.id: event for event in await finance.history()}
    gone = ids[2]
    remove = f"DELETE FROM {TRAIL} WHERE id = :id"
    refused_on_postgres(database_url, remove, id=gone)
    assert await finance.verify_trail() is None
    as_owner_without_the_guard(database_url, remove, id=gone)
    found = await finance.verify_trail()
    after = next(event for event in events.values() if event.seq == events[gone].seq + 1)  # type: ignore[operator]
    assert found == TrailBreak(
        after.id,
        after.seq,
        "removed",
        f"the chain's rows at place {events[gone].seq}, before event {after.id}, are gone",
    )


async def test_a_raw_insert_is_found_by_verify(finance: Store, database_url: str) -> None:
    await busy_trail(finance)
    forged = (
        f"INSERT INTO {TRAIL} (at, chat_id, question_id, kind, message, decision, outcome, channel, by_id) "
        "SELECT at, chat_id, question_id, kind, message, 'accept', 'decided', 'web', 'mallory' "
        f"FROM {TRAIL} WHERE outcome = 'refused'"
    )
    raw(database_url, forged)
    [event] = [event for event in await finance.history() if event.by is not None and event.by.id == "mallory"]
    assert (event.seq, event.hash) == (None, None)
    assert await finance.verify_trail() == TrailBreak(
        event.id, None, "inserted", f"event {event.id} is not in the chain: tarry did not write it"
    )


async def test_a_forged_row_placed_in_the_chain_is_found_as_not_matching_its_hash(
    finance: Store, database_url: str
) -> None:
    await busy_trail(finance)
    [last] = (await finance.history())[-1:]
    forged = (
        f"INSERT INTO {TRAIL} (at, chat_id, question_id, kind, message, decision, outcome, channel, seq, hash) "
        f"SELECT at, chat_id, question_id, kind, message, decision, outcome, channel, seq + 1, hash "
        f"FROM {TRAIL} WHERE id = :id"
    )
    raw(database_url, forged, id=last.id)
    assert await finance.approve((await payout_question(finance))[1], by="bob")  # tarry appends after it
    found = await finance.verify_trail()
    assert found is not None and (found.seq, found.how) == (last.seq + 1, "changed")  # type: ignore[operator]


async def test_an_upgraded_database_chains_the_rows_it_had_and_tarry_carries_the_chain_on(database_url: str) -> None:
    migrate_to(database_url, "0011")
    before = (
        f"INSERT INTO {TRAIL} (at, chat_id, question_id, call_id, tool, arguments, kind, message, decision, outcome, "
        "answer, note, by_id, by_name, channel, detail) VALUES "
        "(:at, 'c1', :question, 'call', 'transfer_money', :arguments, 'approval', 'Approve?', 'accept', :outcome, "
        ":answer, :note, 'ann', 'Ann Ärcher', 'web', NULL)"
    )
    for number, (outcome, note) in enumerate([("decided", None), ("lost", "zu spät — 🙂"), ("decided", "ok")]):
        raw(
            database_url,
            before,
            at=f"2026-01-0{number + 1} 10:00:00.12345{number}+00:00" if "postgres" in database_url else
            f"2026-01-0{number + 1} 10:00:00.12345{number}",
            question=f"q{number}",
            arguments='{"to": "Bob", "amount": 12.5}',
            outcome=outcome,
            answer="{}" if outcome == "decided" else None,
            note=note,
        )  # fmt: skip
    async with Store(database_url, may_decide=may_decide) as store:
        await store.setup()
        old = await store.history()
        assert [event.seq for event in old] == [1, 2, 3]
        assert await store.verify_trail() is None
        await busy_trail(store)
        assert await store.verify_trail() is None
        assert sorted(event.seq for event in await store.history())[-1] == len(await store.history())  # type: ignore[type-var]


async def test_db_check_names_a_missing_trigger_of_the_trail(postgres_url: str) -> None:
    async with Store(postgres_url) as store:
        await store.setup()
        await store.check()
        raw(postgres_url, f"DROP TRIGGER tarry_trail_refuse ON {TRAIL}")
        with pytest.raises(Exception, match="missing trigger tarry_trail_refuse"):
            await store.check()


async def test_an_application_role_with_insert_only_rights_on_the_trail_decides_but_cannot_rewrite_it(
    postgres_url: str,
) -> None:
    """The grants docs/approvals.md gives, in this test's own schema: tarry decides as the role; the role can
    neither change a row of the trail nor turn its guard off."""
    import psycopg
    from sqlalchemy.engine import make_url

    role = f"tarry_app_{uuid.uuid4().hex[:8]}"
    url = make_url(postgres_url)
    options = url.query["options"]
    schema = unquote(str(options)).removeprefix("-csearch_path=")
    owner_dsn = url.set(drivername="postgresql").render_as_string(hide_password=False)
    async with Store(postgres_url) as owner:
        await owner.setup()
    grants = [
        f"CREATE ROLE {role}",
        f"GRANT USAGE ON SCHEMA {schema} TO {role}",
        f"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA {schema} TO {role}",
        f"GRANT USAGE ON ALL SEQUENCES IN SCHEMA {schema} TO {role}",
        f"REVOKE UPDATE, DELETE, TRUNCATE ON {TRAIL} FROM {role}",
    ]
    with psycopg.connect(owner_dsn, autocommit=True) as admin:
        for grant in grants:
            admin.execute(grant)
    as_role = url.update_query_dict({"options": f"{options} -crole={role}"}).render_as_string(hide_password=False)
    try:
        async with Store(as_role, may_decide=may_decide) as store:
            await busy_trail(store)
            assert await store.verify_trail() is None
        for statement in (f"UPDATE {TRAIL} SET note = 'x'", f"DELETE FROM {TRAIL}"):
            with pytest.raises(DBAPIError, match="permission denied"):
                raw(as_role, statement)
        with pytest.raises(DBAPIError, match="must be owner"):
            raw(as_role, f"ALTER TABLE {TRAIL} DISABLE TRIGGER tarry_trail_refuse")
    finally:
        with psycopg.connect(owner_dsn, autocommit=True) as admin:
            admin.execute(f"DROP OWNED BY {role}")
            admin.execute(f"DROP ROLE {role}")
