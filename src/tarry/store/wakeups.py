"""Being woken when another process records something: LISTEN/NOTIFY on PostgreSQL, ``data_version`` on SQLite."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sqlite3
import threading
from typing import Any

from tarry.store.schedule import WAKE_CHANNEL
from tarry.store.store import Store

logger = logging.getLogger("tarry.store")


SQLITE_LOOK = 0.02
"""Seconds between two looks at a SQLite file's ``data_version``."""


class Wakeups:
    """Sets ``event`` when a process (this one or another) wakes a chat: the store's wake-up signal.

    On PostgreSQL a wake's ``NOTIFY`` does it (a decision, a cancellation). On SQLite a thread looks at the file's
    ``PRAGMA data_version`` every ``SQLITE_LOOK`` seconds, which changes whenever another
    connection commits: a cheap look that takes no lock, so any commit (an answer recorded by a
    web request, a chat that parked) wakes the waiter within a few tens of milliseconds.
    """

    def __init__(self, store: Store) -> None:
        self.store = store
        self.event = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._watching: threading.Event | None = None

    async def start(self) -> None:
        """Start listening (PostgreSQL) or watching the file (SQLite)."""
        if not self.store.db.is_sqlite:
            self._task = asyncio.create_task(self._listen())
        else:
            self._watching = threading.Event()
            loop = asyncio.get_running_loop()
            watcher = threading.Thread(
                target=self._watch, args=(str(self.store.db.url.database), loop, self._watching),
                name="tarry-wakeups", daemon=True,
            )  # fmt: skip
            watcher.start()

    def _watch(self, path: str, loop: asyncio.AbstractEventLoop, watching: threading.Event) -> None:
        connection = sqlite3.connect(path, timeout=30)
        try:
            last = connection.execute("PRAGMA data_version").fetchone()[0]
            # A loop that ended without stopping the watch (an app whose shutdown never ran) ends it too.
            while not watching.wait(SQLITE_LOOK) and not loop.is_closed():
                version = connection.execute("PRAGMA data_version").fetchone()[0]
                if version != last:
                    last = version
                    try:
                        loop.call_soon_threadsafe(self.event.set)
                    except RuntimeError:  # the loop closed since it was looked at
                        return
        except Exception:
            logger.exception("Watching the SQLite file failed; whoever waits for wakes polls instead")
        finally:
            connection.close()

    async def stop(self) -> None:
        """Stop listening."""
        if self._watching is not None:
            self._watching.set()
            self._watching = None
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _listen(self) -> None:
        import psycopg

        url = self.store.db.url.set(drivername="postgresql").render_as_string(hide_password=False)
        while True:
            try:
                connection: Any = await psycopg.AsyncConnection.connect(url, autocommit=True)
                async with connection:
                    await connection.execute(f"LISTEN {WAKE_CHANNEL}")
                    async for _ in connection.notifies():
                        self.event.set()
            except asyncio.CancelledError:
                raise
            except Exception:
                logger.exception("Listening for wakes failed; whoever waits polls meanwhile, and it listens again soon")
                self.event.set()
                await asyncio.sleep(1.0)
