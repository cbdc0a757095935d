"""PostgreSQL: the statements of a step sent from the event loop, on connections each loop keeps."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import psycopg
import pytest
from sqlalchemy import TextClause, text

from tarry.store import Store
from tarry.store.cursor import fetch_value
from tests.store.test_store import (
    connections_named,
    named,
    park,
    plain_url,
    until_no_connections_named,
    waiting_for_a_lock,
)

LOCK = text("SELECT pg_advisory_xact_lock(7)")


async def test_a_store_closed_while_a_statement_waits_on_the_loop_closes_its_connection_once_it_ends(
    postgres_url: str,
) -> None:
    url, name = named(postgres_url)
    store = Store(url)
    await store.setup()
    with psycopg.connect(plain_url(postgres_url)) as other:  # holds a lock the store's statement waits for
        other.execute("SELECT pg_advisory_xact_lock(7)")
        waiting = asyncio.create_task(store.db.run_direct(lambda c: fetch_value(c, LOCK, {}), write=False))
        await waiting_for_a_lock(plain_url(postgres_url), "SELECT pg_advisory_xact_lock")
        closing = asyncio.create_task(store.close())
        await asyncio.sleep(0)
        closing.cancel()
        with pytest.raises(asyncio.CancelledError):
            await closing
        assert not waiting.done(), "the statement still waits for the lock"
        assert await connections_named(postgres_url, name) >= 1
        other.commit()
    await waiting  # it ran to its end
    await until_no_connections_named(postgres_url, name, "the loop's connection stayed open after its statement ended")


async def test_each_event_loop_keeps_its_own_connections_and_close_ends_them_all(postgres_url: str) -> None:
    url, name = named(postgres_url)
    async with Store(url) as store:
        await store.setup()
        chat_id = await park(store, [{"name": "transfer_money", "arguments": {"to": "Bob", "amount": 5}}])
        here = await store.chat_version(chat_id)
        read_elsewhere: list[int] = []
        elsewhere = threading.Thread(target=lambda: read_elsewhere.append(store.chat_version_sync(chat_id)))
        elsewhere.start()  # the thread's own event loop (the _sync verbs'), which stays open after the call
        await asyncio.to_thread(elsewhere.join, 10)
        assert read_elsewhere == [here]
        assert await connections_named(postgres_url, name) >= 2, "one connection for each loop"
    await until_no_connections_named(postgres_url, name, "a loop's connection stayed open after the store closed")


async def test_a_loop_runs_at_most_ten_statements_at_once_and_the_rest_wait_their_turn(postgres_url: str) -> None:
    async with Store(postgres_url) as store:
        await store.setup()
        pid_once_locked = text("SELECT pg_backend_pid() AS pid, pg_advisory_xact_lock(7) AS locked")
        with psycopg.connect(plain_url(postgres_url)) as other:
            waiting = await ten_waiting(store, other, postgres_url, 12, pid_once_locked)
            other.commit()
        pids = await asyncio.gather(*waiting)
    assert len(set(pids)) == 10, "ten connections, the last two statements on two of them once free"


async def ten_waiting(
    store: Store, other: psycopg.Connection[Any], url: str, count: int, locking: TextClause
) -> list[asyncio.Task[Any]]:
    """``count`` statements ``locking`` sent from the loop while ``other`` holds the lock, once ten of them (all
    the loop runs at once) wait for it on the server."""
    other.execute("SELECT pg_advisory_xact_lock(7)")
    waiting = [
        asyncio.create_task(store.db.run_direct(lambda c: fetch_value(c, locking, {}), write=False))
        for _ in range(count)
    ]
    await waiting_for_a_lock_count(plain_url(url), 10)
    return waiting


async def waiting_for_a_lock_count(url: str, count: int) -> None:
    """Returns once ``count`` statements wait for the advisory lock on the server ``url`` names."""
    waits = (
        "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%pg_advisory_xact_lock%'"
    )
    deadline = time.monotonic() + 10
    with psycopg.connect(url, autocommit=True) as watcher:
        while watcher.execute(waits).fetchone() != (count,):
            assert time.monotonic() < deadline, f"never {count} statements waited for the lock"
            await asyncio.sleep(0.01)


async def test_a_call_cancelled_while_it_waits_for_a_free_connection_sends_nothing(postgres_url: str) -> None:
    async with Store(postgres_url) as store:
        await store.setup()
        with psycopg.connect(plain_url(postgres_url)) as other:
            busy = await ten_waiting(store, other, postgres_url, 10, LOCK)
            creating = asyncio.create_task(store.create_chat())
            for _ in range(20):  # let it run as far as it can: to the wait for a free connection
                await asyncio.sleep(0)
            creating.cancel()
            with pytest.raises(asyncio.CancelledError):
                await creating
            other.commit()
        await asyncio.gather(*busy)
        assert await store.list_chats() == [], "the cancelled call created no chat"
