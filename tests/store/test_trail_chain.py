"""A trail that shows tampering, on a SQLite file and on PostgreSQL: each row chained by a hash to the one before it
in its lane (one of several chains, by its chat), raw SQL that changes, removes or inserts a row found by
``Store.verify_trail``, and on PostgreSQL refused outright; processes deciding at once each append to their lanes."""

from __future__ import annotations

import asyncio
import json
import re
import time
import uuid
from collections import defaultdict
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pytest
from sqlalchemy import Connection, text
from sqlalchemy.exc import DBAPIError

from tarry.principals import Principal
from tarry.store import DecisionEvent, Store, TrailBreak
from tarry.store.chain import LANES, lane_of
from tests.store.approvers import may_decide
from tests.store.test_accountable import payout_question
from tests.store.test_database_errors import migrate_to, on_database
from tests.store.test_decisions_together import decisions_sent, parked
from tests.store.test_processes import finish, start

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


def by_lane(events: list[DecisionEvent]) -> dict[int | None, list[DecisionEvent]]:
    """The events of each lane, in their places."""
    lanes: dict[int | None, list[DecisionEvent]] = defaultdict(list)
    for event in sorted(events, key=lambda event: (event.lane or 0, event.seq or 0)):
        lanes[event.lane].append(event)
    return lanes


def assert_chained(events: list[DecisionEvent]) -> None:
    """Every event in its chat's lane, each lane's places 1, 2, 3... and every hash another."""
    assert all(event.lane == lane_of(event.chat_id) for event in events)
    for lane in by_lane(events).values():
        assert [event.seq for event in lane] == list(range(1, len(lane) + 1))
    assert all(re.fullmatch(r"[0-9a-f]{64}", event.hash or "") for event in events)
    assert len({event.hash for event in events}) == len(events)


def test_a_chat_s_lane_is_a_stable_function_of_its_id() -> None:
    assert lane_of("") == lane_of(None) == 0
    assert lane_of("c1") == 16 == lane_of("c1")  # the first byte of sha256("c1"), 0xd0, modulo 64
    assert len({lane_of(str(uuid.uuid4())) for _ in range(2000)}) == LANES


@pytest.fixture
async def finance(database_url: str) -> Store:
    async with Store(database_url, may_decide=may_decide) as opened:
        await opened.setup()
        yield opened  # type: ignore[misc]


async def test_every_row_tarry_writes_is_chained_and_the_trail_verifies(finance: Store) -> None:
    ids = await busy_trail(finance)
    events = await finance.history()
    assert len(events) == len(ids) >= 9
    assert_chained(events)
    assert len(by_lane(events)) >= 3, "six chats, in lanes of their own but by a rare chance"
    assert await finance.verify_trail() is None
    record = events[0].to_record()
    assert (record["lane"], record["seq"], record["hash"]) == (events[0].lane, events[0].seq, events[0].hash)
    assert record["id"] == events[0].id


async def test_one_statement_deciding_several_chats_appends_their_rows_in_lane_order(postgres_url: str) -> None:
    """The trigger locks each row's lane until the commit: two statements that each decide questions of several
    chats take those locks in one order (the lanes'), so they cannot deadlock."""
    async with Store(postgres_url) as store:
        await store.setup()
        waiting = await parked(store, 12)
        with decisions_sent(store) as sent:
            assert await asyncio.gather(*(store.approve(approval.id) for _, approval in waiting)) == [True] * 12
        assert sent == [12], "asked on one turn of the event loop, sent in one statement"
        events = await store.history()  # in the order they went in
        assert len(events) == 12 and len({event.lane for event in events}) >= 4
        assert [event.lane for event in events] == sorted(event.lane or 0 for event in events)
        assert_chained(events)
        assert await store.verify_trail() is None


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
    assert f"event {changed} (lane {found.lane}, place {found.seq}) does not match its hash" in found.detail


async def test_a_raw_delete_is_refused_on_postgresql_and_found_by_verify(finance: Store, database_url: str) -> None:
    await busy_trail(finance)
    [lane] = [lane for lane in by_lane(await finance.history()).values() if len(lane) >= 3][:1]  # the payout's
    gone, after = lane[0], lane[1]
    remove = f"DELETE FROM {TRAIL} WHERE id = :id"
    refused_on_postgres(database_url, remove, id=gone.id)
    assert await finance.verify_trail() is None
    as_owner_without_the_guard(database_url, remove, id=gone.id)
    assert await finance.verify_trail() == TrailBreak(
        after.id, after.lane, 2, "removed", f"lane {after.lane}'s rows at place 1, before event {after.id}, are gone"
    )


async def test_removing_a_lane_s_newest_row_is_refused_on_postgresql_and_beyond_what_the_chain_shows(
    finance: Store, database_url: str
) -> None:
    """The documented limit: nothing comes after a lane's newest row to show it gone; on PostgreSQL the guard
    refuses it, and the exported hashes (``tarry history --jsonl``) tell it elsewhere."""
    await busy_trail(finance)
    newest = max(await finance.history(), key=lambda event: event.id)
    remove = f"DELETE FROM {TRAIL} WHERE id = :id"
    refused_on_postgres(database_url, remove, id=newest.id)
    as_owner_without_the_guard(database_url, remove, id=newest.id)
    assert await finance.verify_trail() is None
    assert newest.hash not in {event.hash for event in await finance.history()}


async def test_a_raw_insert_is_found_by_verify(finance: Store, database_url: str) -> None:
    await busy_trail(finance)
    forged = (
        f"INSERT INTO {TRAIL} (at, chat_id, question_id, kind, message, decision, outcome, channel, by_id) "
        "SELECT at, chat_id, question_id, kind, message, 'accept', 'decided', 'web', 'mallory' "
        f"FROM {TRAIL} WHERE outcome = 'refused'"
    )
    raw(database_url, forged)
    [event] = [event for event in await finance.history() if event.by is not None and event.by.id == "mallory"]
    assert (event.lane, event.seq, event.hash) == (None, None, None)
    assert await finance.verify_trail() == TrailBreak(
        event.id, None, None, "inserted", f"event {event.id} is not in the chain: tarry did not write it"
    )


async def test_a_forged_row_placed_in_the_chain_is_found_as_not_matching_its_hash(
    finance: Store, database_url: str
) -> None:
    await busy_trail(finance)
    [last] = (await finance.history())[-1:]
    forged = (
        f"INSERT INTO {TRAIL} (at, chat_id, question_id, kind, message, decision, outcome, channel, lane, seq, hash) "
        f"SELECT at, chat_id, question_id, kind, message, 'decline', outcome, channel, lane, seq + 1, hash "
        f"FROM {TRAIL} WHERE id = :id"
    )
    raw(database_url, forged, id=last.id)
    assert await finance.approve((await payout_question(finance))[1], by="bob")  # tarry appends after it
    found = await finance.verify_trail()
    assert found is not None and (found.lane, found.seq, found.how) == (last.lane, last.seq + 1, "changed")  # type: ignore[operator]


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
        assert [(event.lane, event.seq) for event in old] == [
            (lane_of("c1"), 1),
            (lane_of("c1"), 2),
            (lane_of("c1"), 3),
        ]
        assert await store.verify_trail() is None
        await busy_trail(store)
        assert await store.verify_trail() is None
        assert_chained(await store.history())


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
    """The grants the approvals page gives ("A trail that shows tampering"), in this test's own schema: tarry decides
    as the role; the role can neither change a row of the trail nor turn its guard off."""
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


async def test_processes_deciding_in_different_chats_at_once_each_land_on_an_intact_trail(
    database_url: str, tmp_path: Path
) -> None:
    """Two OS processes decide the questions of their own chats at once (on PostgreSQL the trigger appends each row
    under its lane's lock only): every decision lands, each with its row, and every lane verifies."""
    async with Store(database_url) as store:
        await store.setup()
        questions = [question for _, question in await parked(store, 40)]
    halves = [questions[0::2], questions[1::2]]
    start_file = tmp_path / "go"
    processes = []
    for number, half in enumerate(halves):
        ids_file = tmp_path / f"ids{number}.json"
        ids_file.write_text(json.dumps([question.id for question in half]))
        processes.append(start("decide", database_url, str(ids_file), str(number), str(start_file), markers=tmp_path))
    time.sleep(0.5)  # let the processes import and connect; correctness does not depend on it
    start_file.touch()
    won = [json.loads(finish(process)) for process in processes]
    assert [set(part) for part in won] == [{question.id for question in half} for half in halves]
    async with Store(database_url) as store:
        events = await store.history()
        assert sorted(event.question_id for event in events) == sorted(question.id for question in questions)
        assert_chained(events)
        assert await store.verify_trail() is None
