"""Being woken when a decision or a cancellation is recorded: LISTEN/NOTIFY on PostgreSQL."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from tarry.store import Store
from tarry.store.schedule import WAKE_CHANNEL

logger = logging.getLogger("tarry.jobs")


class Wakeups:
    """Sets :attr:`event` whenever another process wakes a chat. On SQLite it never fires: the worker polls."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.event = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Start listening (PostgreSQL only)."""
        if not self.store.db.is_sqlite:
            self._task = asyncio.create_task(self._listen())

    async def stop(self) -> None:
        """Stop listening."""
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
                logger.exception("Listening for wakes failed; the worker polls meanwhile and listens again soon")
                self.event.set()
                await asyncio.sleep(1.0)
