"""Server-Sent Events: the browser is told when what it shows has changed, in this process or any other."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable

from starlette.requests import Request

LOOK_EVERY = 0.5
"""Seconds between two looks at the database for changes."""
STREAM_FOR = 30.0
"""Seconds a stream lasts; the browser's EventSource then reconnects by itself (after ``retry``)."""
KEEP_ALIVE = 15.0
"""Seconds of quiet after which a comment line keeps proxies from closing the stream."""


async def changes(request: Request, fingerprint: Callable[[], Awaitable[str]]) -> AsyncIterator[str]:
    """An ``text/event-stream`` body: a ``change`` event each time ``fingerprint()`` differs from before.

    Other processes write to the same database, so the stream looks at it rather than at this
    process's own decisions. Each stream ends after ``STREAM_FOR`` seconds, so a server
    that shuts down is never held open by a browser tab.
    """
    yield "retry: 1000\n\n"
    last = await fingerprint()
    ends = time.monotonic() + STREAM_FOR
    quiet_since = time.monotonic()
    while time.monotonic() < ends and not await request.is_disconnected():
        await asyncio.sleep(LOOK_EVERY)
        now = await fingerprint()
        if now != last:
            last = now
            quiet_since = time.monotonic()
            yield f"event: change\ndata: {now}\n\n"
        elif time.monotonic() - quiet_since > KEEP_ALIVE:
            quiet_since = time.monotonic()
            yield ": still here\n\n"
