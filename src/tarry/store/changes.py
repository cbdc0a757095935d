"""Being told, in any process, that the store changed: whichever process changed it.

One [`Wakeups`][tarry.store.wakeups.Wakeups] per ``StoreChanges`` feeds every waiter that shares it (an MCP
server's listening streams, all the open pages of one inbox), so many waiters cost one ``LISTEN`` connection or
one watching thread, not one look at the database each.
"""

from __future__ import annotations

import asyncio
import contextlib

from tarry.store.store import Store
from tarry.store.wakeups import Wakeups


class StoreChanges:
    """Tells this process's waiters that the store changed, whichever process changed it.

    Its one ``Wakeups`` (started by the first waiter) feeds
    every waiter that shares it: each round is an ``asyncio.Event``, set and replaced on every wake.
    """

    def __init__(self, store: Store) -> None:
        self.store = store
        self._round = asyncio.Event()
        self._wakeups: Wakeups | None = None
        self._pump: asyncio.Task[None] | None = None

    async def next(self) -> asyncio.Event:
        """The event the next change of the store sets."""
        if self._wakeups is None:
            self._wakeups = Wakeups(self.store)
            await self._wakeups.start()
            self._pump = asyncio.create_task(self._forward(self._wakeups))
        return self._round

    async def _forward(self, wakeups: Wakeups) -> None:
        while True:
            await wakeups.event.wait()
            wakeups.event.clear()
            done, self._round = self._round, asyncio.Event()
            done.set()

    async def close(self) -> None:
        """Stop watching the store."""
        if self._pump is not None:
            self._pump.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._pump
            self._pump = None
        if self._wakeups is not None:
            await self._wakeups.stop()
            self._wakeups = None


async def wait_for(event: asyncio.Event, seconds: float) -> None:
    """Wait until ``event`` is set, or ``seconds`` passed."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(event.wait(), timeout=seconds)
