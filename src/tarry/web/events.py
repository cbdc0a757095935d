"""Server-Sent Events: the browser is told when what it shows has changed, in this process or any other.

A stream looks at the database when the store's wake-up signal ([`StoreChanges`][tarry.store.changes.StoreChanges])
says something changed, and otherwise every ``LOOK_EVERY`` seconds: one signal per process and event loop is
shared by every open stream, so an idle tab costs one look every few seconds instead of two a second.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable

from starlette.requests import Request

from tarry.store import Store
from tarry.store.changes import StoreChanges, wait_for

LOOK_EVERY = 2.0
"""Seconds after which a stream looks at the database though no wake came.

The signal is every commit on SQLite (whichever process made it), but on PostgreSQL only the ``NOTIFY``
of a wake (a decision, a cancellation): a chat that parks on a new question or takes a turn shows
within this time there."""
LOOK_AT_MOST = 0.25
"""Seconds a stream waits at least between two looks, so a burst of wakes costs each stream one look."""
STREAM_FOR = 30.0
"""Seconds a stream lasts; the browser's EventSource then reconnects by itself (after ``retry``)."""
KEEP_ALIVE = 15.0
"""Seconds of quiet after which a comment line keeps proxies from closing the stream."""


class LiveSignal:
    """The store's change signal for one app's event streams: one [`StoreChanges`][tarry.store.changes.StoreChanges]
    per event loop, started by the first stream on it and shared by every stream after."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._by_loop: dict[asyncio.AbstractEventLoop, StoreChanges] = {}

    def current(self) -> StoreChanges:
        """The signal of the running event loop (loops that ended are forgotten: their watches ended with them)."""
        loop = asyncio.get_running_loop()
        for ended in [known for known in self._by_loop if known.is_closed()]:
            del self._by_loop[ended]
        if loop not in self._by_loop:
            self._by_loop[loop] = StoreChanges(self.store)
        return self._by_loop[loop]

    async def close(self) -> None:
        """Stop the running loop's signal (at the app's shutdown)."""
        signal = self._by_loop.pop(asyncio.get_running_loop(), None)
        if signal is not None:
            await signal.close()


async def changes(
    request: Request, fingerprint: Callable[[], Awaitable[str]], signal: StoreChanges
) -> AsyncIterator[str]:
    """An ``text/event-stream`` body: a ``change`` event each time ``fingerprint()`` differs from before.

    Other processes write to the same database, so the stream looks at it rather than at this
    process's own decisions, when ``signal`` says the store changed or ``LOOK_EVERY`` seconds
    passed without a word. Each stream ends after ``STREAM_FOR`` seconds, so a server
    that shuts down is never held open by a browser tab.
    """
    yield "retry: 1000\n\n"
    changed = await signal.next()  # taken before the look, so a change during it is not missed
    last = await fingerprint()
    looked = time.monotonic()
    ends = looked + STREAM_FOR
    quiet_since = looked
    while time.monotonic() < ends and not await request.is_disconnected():
        await wait_for(changed, min(LOOK_EVERY, max(ends - time.monotonic(), 0.0)))
        since = time.monotonic() - looked
        if since < LOOK_AT_MOST:
            await asyncio.sleep(LOOK_AT_MOST - since)  # a pace, not a wait for anything
        changed = await signal.next()
        now = await fingerprint()
        looked = time.monotonic()
        if now != last:
            last = now
            quiet_since = looked
            yield f"event: change\ndata: {now}\n\n"
        elif looked - quiet_since > KEEP_ALIVE:
            quiet_since = looked
            yield ": still here\n\n"
