"""A database that refuses writes for a moment (read-only after a failover, full) right after a tool ran.

The result is saved once the fault passes, the tool ran once, and the process's later writes succeed:
a connection that answered read-only or full is replaced, not kept.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
import pytest
from sqlalchemy import event

from tarry import tool
from tarry.errors import StoreReadOnlyError
from tarry.store import Store
from tests.store.test_failures import pay_model

REFUSE = """
CREATE TABLE tarry_test_refusing (pid integer NOT NULL);
CREATE SEQUENCE tarry_test_refusals;
CREATE FUNCTION tarry_test_refuse() RETURNS trigger AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM tarry_test_refusing WHERE pid IN (0, pg_backend_pid())) THEN
        PERFORM nextval('tarry_test_refusals');  -- a sequence counts even in a rolled-back transaction
        RAISE EXCEPTION 'refused for a moment' USING ERRCODE = '{code}';
    END IF;
    RETURN NEW;
END $$ LANGUAGE plpgsql;
CREATE TRIGGER tarry_test_refuse_messages BEFORE INSERT OR UPDATE ON tarry_messages
    FOR EACH ROW EXECUTE FUNCTION tarry_test_refuse();
CREATE TRIGGER tarry_test_refuse_calls BEFORE INSERT OR UPDATE ON tarry_tool_calls
    FOR EACH ROW EXECUTE FUNCTION tarry_test_refuse();
CREATE TRIGGER tarry_test_refuse_chats BEFORE INSERT OR UPDATE ON tarry_chats
    FOR EACH ROW EXECUTE FUNCTION tarry_test_refuse();
"""
"""Rows of ``tarry_test_refusing`` make writes fail: pid 0, every session's; another, that session's only."""
PASSED = """
DELETE FROM tarry_test_refusing;
INSERT INTO tarry_test_refusing
    SELECT pid FROM pg_stat_activity
    WHERE datname = current_database() AND pid <> pg_backend_pid() AND application_name <> 'tarry-test-fault';
"""
"""The fault passes for new sessions; those open now stay on the old server, which still refuses (as a
connection to a primary that failover demoted stays read-only)."""


def plain(url: str) -> str:
    return url.replace("postgresql+psycopg://", "postgresql://")


def refusals(url: str) -> int:
    with psycopg.connect(plain(url), application_name="tarry-test-fault") as connection:
        row = connection.execute("SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM tarry_test_refusals")
        found = row.fetchone()
    assert found is not None
    return int(found[0])


def when(condition: Callable[[], bool], then: Callable[[], None]) -> threading.Thread:
    """Run ``then`` on a thread of its own once ``condition`` holds (or after 60 s, so a failing test ends)."""

    def wait() -> None:
        deadline = time.monotonic() + 60
        while not condition() and time.monotonic() < deadline:
            time.sleep(0.02)
        then()

    thread = threading.Thread(target=wait, daemon=True)
    thread.start()
    return thread


@pytest.mark.parametrize("code", ["25006", "53100"], ids=["read-only", "disk-full"])
async def test_a_result_saved_while_postgresql_refuses_writes_is_saved_once_the_fault_passes(
    postgres_url: str, code: str
) -> None:
    runs: list[int] = []
    passed: list[threading.Thread] = []

    def fault_passes() -> None:
        with psycopg.connect(plain(postgres_url), application_name="tarry-test-fault") as connection:
            connection.execute(PASSED)

    @tool
    def pay(amount: int) -> str:
        """Pays; not safe to run twice. The first time, the database refuses writes right after."""
        runs.append(amount)
        if len(runs) == 1:
            with psycopg.connect(plain(postgres_url), autocommit=True, application_name="tarry-test-fault") as fault:
                fault.execute("INSERT INTO tarry_test_refusing VALUES (0)")
            passed.append(when(lambda: refusals(postgres_url) >= 2, fault_passes))
        return "paid"

    async with Store(postgres_url, lease=5) as store:
        await store.setup()
        with psycopg.connect(plain(postgres_url), autocommit=True) as connection:
            connection.execute(REFUSE.replace("{code}", code))
        chat = await store.create_chat(pay_model(), [pay])
        reply = await chat.ask("Pay")  # before: StoreReadOnlyError or StoreFullError, the payment's result lost
        assert reply is not None and reply.content == "Done."
        assert [message.content for message in chat.messages if message.role == "tool"] == ["paid"]
        assert runs == [5]
        passed[0].join(60)
        assert refusals(postgres_url) >= 2, "no save was refused: the test tested nothing"
        # The sessions open when the fault passed still refuse: the store's later writes go through new ones.
        again = await store.create_chat(pay_model("Paid again."), [pay])
        reply = await again.ask("Pay again")
        assert reply is not None and reply.content == "Paid again."
        assert runs == [5, 5]
    async with Store(postgres_url) as other:
        loaded = await other.load_chat(chat.id, pay_model(), [pay])
        assert [message.content for message in loaded.messages] == ["Pay", "", "paid", "Done."]


class Refusals(logging.Handler):
    """Counts the saves the store logs as refused and tried again."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        if "refused to save" in record.getMessage():
            self.count += 1


@contextmanager
def counting_refusals() -> Iterator[Refusals]:
    handler = Refusals()
    logger = logging.getLogger("tarry.store")
    logger.addHandler(handler)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)


SQLITE_FAULTS = {
    # A connection that may not write answers as a read-only file does (SQLITE_READONLY).
    "read-only": ("PRAGMA query_only = 1", "PRAGMA query_only = 0"),
    # A database that may not grow past its size answers as on a full disk (SQLITE_FULL).
    "disk-full": ("PRAGMA max_page_count = 1", "PRAGMA max_page_count = 1073741823"),
}


@pytest.mark.parametrize("fault", list(SQLITE_FAULTS))
async def test_a_result_saved_while_sqlite_refuses_writes_is_saved_once_the_fault_passes(
    tmp_path: Path, fault: str
) -> None:
    start, stop = SQLITE_FAULTS[fault]
    opened: list[sqlite3.Connection] = []
    refusing = threading.Event()
    runs: list[int] = []
    result = "paid " + "x" * 20_000  # more than the pages the database has room for

    def on_connect(dbapi_connection: Any, _record: Any) -> None:
        opened.append(dbapi_connection)
        if refusing.is_set():
            dbapi_connection.execute(start)

    def each(pragma: str) -> None:
        for connection in opened:
            with contextlib.suppress(sqlite3.ProgrammingError):  # closed since: nothing to do
                connection.execute(pragma)

    def fault_passes() -> None:
        refusing.clear()
        each(stop)

    with counting_refusals() as refused:

        @tool
        def pay(amount: int) -> str:
            """Pays; not safe to run twice. The first time, the database refuses writes right after."""
            runs.append(amount)
            if len(runs) == 1:
                refusing.set()
                each(start)
                when(lambda: refused.count >= 2, fault_passes)
            return result

        async with Store(f"sqlite:///{tmp_path / 'faults.db'}", lease=5) as store:
            event.listen(store.db.sync_engine, "connect", on_connect)
            await store.setup()
            chat = await store.create_chat(pay_model(), [pay])
            reply = await chat.ask("Pay")  # before: StoreReadOnlyError or StoreFullError, the result lost
            assert reply is not None and reply.content == "Done."
            assert [message.content for message in chat.messages if message.role == "tool"] == [result]
            assert runs == [5]
            assert refused.count >= 2, "no save was refused: the test tested nothing"
            again = await store.create_chat(pay_model("Paid again."), [pay])
            reply = await again.ask("Pay again")
            assert reply is not None and reply.content == "Paid again."
            assert runs == [5, 5]


@contextmanager
def read_only_folder(folder: Path) -> Iterator[Path]:
    """``folder`` seen through a path that cannot be written: a read-only bind mount (as root, whom permissions
    do not stop), else the folder without write permission."""
    if os.geteuid() != 0:
        folder.chmod(0o555)
        try:
            yield folder
        finally:
            folder.chmod(0o755)
        return
    view = folder.parent / f"{folder.name}-read-only"
    view.mkdir()
    subprocess.run(["mount", "--bind", str(folder), str(view)], check=True)
    try:
        subprocess.run(["mount", "-o", "remount,ro,bind", str(view)], check=True)
        yield view
    finally:
        subprocess.run(["umount", str(view)], check=True)


async def test_a_sqlite_file_on_a_read_only_file_system_is_a_read_only_error(tmp_path: Path) -> None:
    folder = tmp_path / "data"
    folder.mkdir()
    async with Store(f"sqlite:///{folder / 'chats.db'}") as store:
        await store.setup()
    with read_only_folder(folder) as view:
        async with Store(f"sqlite:///{view / 'chats.db'}") as store:
            with pytest.raises(StoreReadOnlyError, match="refuses to be written"):  # was StoreUnavailableError
                await store.pending_questions()
