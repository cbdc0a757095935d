"""Database errors are typed and say what to do: no schema, an old or newer one, full, read-only, damaged."""

from __future__ import annotations

import asyncio
import random
import sqlite3
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from alembic import command
from alembic.config import Config
from sqlalchemy import create_engine, event, text
from sqlalchemy.engine import make_url

from tarry.errors import (
    StoreCorruptError,
    StoreFullError,
    StoreReadOnlyError,
    StoreSchemaError,
    StoreUnavailableError,
)
from tarry.store import Store
from tarry.store.engine import POSTGRES_THREADS, database_url
from tarry.store.schema import HEAD, MIGRATIONS, known_revisions
from tests.store.conftest import POSTGRES_URL, _postgres_schema_url
from tests.store.test_store import park
from tests.store.tools import TransferMoney, reactive_model

FUTURE = "9999_from_a_newer_tarry"


def on_database(url: str, work: Callable[[Any], None]) -> None:
    """Run ``work`` on a plain synchronous connection to ``url``, in one transaction: tarry's code stays out of it."""
    engine = create_engine(database_url(url))
    try:
        with engine.begin() as connection:
            work(connection)
    finally:
        engine.dispose()


def migrate_to(url: str, revision: str) -> None:
    """Migrate the database at ``url`` to ``revision`` only, as an older tarry left it."""

    def upgrade(connection: Any) -> None:
        config = Config()
        config.set_main_option("script_location", str(MIGRATIONS))
        config.attributes["connection"] = connection
        command.upgrade(config, revision)

    on_database(url, upgrade)


def sql(url: str, statement: str) -> None:
    on_database(url, lambda connection: connection.execute(text(statement)))


def test_head_is_the_newest_migration() -> None:
    assert known_revisions()[0] == HEAD


async def test_a_store_never_set_up_says_to_run_tarry_db_upgrade(database_url: str) -> None:
    async with Store(database_url) as store:
        for use in (store.pending_questions(), store.create_chat(), store.load_chat("some-chat"), store.check()):
            with pytest.raises(StoreSchemaError, match=r"no tarry tables: create them with `tarry db upgrade`") as out:
                await use
            assert "tarry_chats" not in str(out.value) and "SELECT" not in str(out.value)
        await store.setup()
        assert await store.pending_questions() == []


async def test_an_old_schema_is_refused_until_it_is_migrated(database_url: str) -> None:
    migrate_to(database_url, "0002")
    async with Store(database_url) as store:
        with pytest.raises(StoreSchemaError, match=rf"at revision 0002, and this tarry needs {HEAD}: migrate it with"):
            await store.create_chat()
        await store.setup()
        chat_id = await park(store, [{"name": "transfer_money", "arguments": {"to": "Bob", "amount": 5}}])
        assert [question.chat_id for question in await store.pending_questions()] == [chat_id]


async def test_a_schema_newer_than_this_tarry_is_refused_and_never_migrated(database_url: str) -> None:
    async with Store(database_url) as store:
        await store.setup()
    sql(database_url, f"UPDATE alembic_version SET version_num = '{FUTURE}'")
    async with Store(database_url) as store:
        for use in (store.pending_questions(), store.setup()):
            with pytest.raises(StoreSchemaError, match=rf"revision '{FUTURE}', which this tarry does not know") as out:
                await use
            assert "pip install -U tarry" in str(out.value)
    found: list[str] = []
    on_database(database_url, lambda connection: found.append(connection.scalar(text("SELECT * FROM alembic_version"))))
    assert found == [FUTURE]


async def test_the_schema_revision_is_read_once_per_store(database_url: str) -> None:
    async with Store(database_url) as store:
        await store.setup()
    async with Store(database_url) as store:
        statements: list[str] = []
        event.listen(store.db.sync_engine, "before_cursor_execute", lambda *args: statements.append(args[2]))
        for _ in range(3):
            await store.pending_questions()
            await store.create_chat()
        assert sum("version_num" in statement for statement in statements) == 1


async def test_a_column_changed_by_hand_is_a_schema_error_not_sql(store: Store, database_url: str) -> None:
    chat_id = (await store.create_chat()).id
    sql(database_url, "ALTER TABLE tarry_chats DROP COLUMN version")
    for use in (store.create_chat(), store.load_chat(chat_id)):
        with pytest.raises(StoreSchemaError, match=r"lacks a table or column this tarry uses \(.*version") as out:
            await use
        assert "tarry db upgrade" in str(out.value)
        assert "SELECT" not in str(out.value) and "INSERT" not in str(out.value) and "LINE 1" not in str(out.value)


def read_only(url: str) -> str:
    """The same database, opened so that every write is refused."""
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        return f"sqlite:///file:{parsed.database}?mode=ro&uri=true"
    options = f"{parsed.query.get('options', '')} -cdefault_transaction_read_only=on"
    return parsed.update_query_dict({"options": options}).render_as_string(hide_password=False)


async def test_a_read_only_database_lists_and_refuses_answers_clearly(database_url: str) -> None:
    async with Store(database_url) as store:
        await store.setup()
        chat_id = await park(store, [{"name": "transfer_money", "arguments": {"to": "Bob", "amount": 5}}])
    async with Store(read_only(database_url)) as reader:
        (approval,) = await reader.pending_questions()
        with pytest.raises(StoreReadOnlyError, match=r"refuses to be written .* Give this process write access"):
            await reader.approve(approval.id)
    async with Store(database_url) as store:
        assert [question.chat_id for question in await store.pending_questions()] == [chat_id]


def no_new_pages(dbapi_connection: sqlite3.Connection, _record: object) -> None:
    """Make a SQLite file as full as a full disk: it may not grow past its current size (SQLITE_FULL)."""
    pages = dbapi_connection.execute("PRAGMA page_count").fetchone()[0]
    dbapi_connection.execute(f"PRAGMA max_page_count = {pages}")


async def test_a_full_sqlite_database_says_to_free_space_and_saves_nothing_of_the_step(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'tarry.db'}"
    async with Store(url) as store:
        await store.setup()
        chat_id = (await store.create_chat()).id
    async with Store(url) as full:
        event.listen(full.db.sync_engine, "connect", no_new_pages)
        chat = await full.load_chat(chat_id, reactive_model([]), [TransferMoney()])
        with pytest.raises(StoreFullError, match=r"is full \(database or disk is full\)\. Free space on the disk"):
            await chat.ask("Pay Bob 5. " * 20_000)
        assert await full.pending_questions() == []  # reading goes on
    async with Store(url) as store:
        assert (await store.load_chat(chat_id)).messages == []


async def test_a_file_that_is_not_a_database_says_to_restore_a_backup(tmp_path: Path) -> None:
    path = tmp_path / "tarry.db"
    path.write_bytes(b"Not SQLite at all, perhaps a half-copied backup. " * 100)
    async with Store(f"sqlite:///{path}") as store:
        for use in (store.pending_questions(), store.setup()):
            with pytest.raises(StoreCorruptError, match=r"not a database \(file is not a database\)\. Restore it from"):
                await use


async def test_a_damaged_sqlite_file_says_to_restore_a_backup(tmp_path: Path) -> None:
    path = tmp_path / "tarry.db"
    async with Store(f"sqlite:///{path}") as store:
        await store.setup()
        for _ in range(3):
            await park(store, [{"name": "transfer_money", "arguments": {"to": "Bob", "amount": 5}}])
    with sqlite3.connect(path) as connection:
        connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        page = connection.execute("PRAGMA page_size").fetchone()[0]
    data, noise = bytearray(path.read_bytes()), random.Random(10)
    for start in range(2 * page, len(data), page):  # every page's header but the first (the schema's) page
        data[start : start + 64] = noise.randbytes(64)
    path.write_bytes(data)
    async with Store(f"sqlite:///{path}") as store:
        with pytest.raises(StoreCorruptError, match=r"damaged or not a database \(.*malformed\)\. Restore it from"):
            await store.pending_questions()


@pytest.fixture
def postgres_url() -> Iterator[str]:
    """A PostgreSQL schema of its own, whose connections carry an application name only this test uses."""
    for url in _postgres_schema_url():
        yield f"{url}&application_name=tarry_test_{uuid.uuid4().hex[:12]}"


def end_connections(url: str) -> None:
    """End every server connection of ``url``'s application, as an administrator or a failover would."""
    application = make_url(url).query["application_name"]
    assert POSTGRES_URL is not None
    activity = "FROM pg_stat_activity WHERE application_name = %s"
    with psycopg.connect(POSTGRES_URL.replace("postgresql+psycopg://", "postgresql://"), autocommit=True) as connection:
        ended = connection.execute(f"SELECT count(pg_terminate_backend(pid)) {activity}", (application,)).fetchone()
        assert ended is not None and ended[0] >= 1
        deadline = time.monotonic() + 10
        while connection.execute(f"SELECT count(*) {activity}", (application,)).fetchone() != (0,):
            assert time.monotonic() < deadline, "the server did not end the connections"
            time.sleep(0.02)


async def test_a_connection_the_server_ended_is_a_clear_error_and_the_next_call_reconnects(postgres_url: str) -> None:
    async with Store(postgres_url) as store:
        await store.setup()
        chat_id = await park(store, [{"name": "transfer_money", "arguments": {"to": "Bob", "amount": 5}}])
        # Every worker thread opens its connection, so the next transaction finds one the server ended:
        everyone = threading.Barrier(POSTGRES_THREADS, timeout=10)
        await asyncio.gather(*(store.db.run_read(lambda _: everyone.wait()) for _ in range(POSTGRES_THREADS)))
        end_connections(postgres_url)
        with pytest.raises(
            StoreUnavailableError, match=r"The connection to the database at .* broke \(.*\)\. Try again"
        ):
            await store.pending_questions()
        (approval,) = await store.pending_questions()
        assert approval.chat_id == chat_id
        # The same for a statement sent from the event loop, on the connection the loop keeps:
        version = await store.chat_version(chat_id)
        end_connections(postgres_url)
        with pytest.raises(StoreUnavailableError, match=r"The connection to the database at .* broke"):
            await store.chat_version(chat_id)
        assert await store.chat_version(chat_id) == version
