"""Waiting on whichever of several asyncio events comes first: how the worker and the notifier sleep between rounds."""

from __future__ import annotations

import asyncio
import contextlib


async def first_of(events: tuple[asyncio.Event, ...], seconds: float) -> None:
    """Wait until one of ``events`` is set, or ``seconds`` pass; leaves no waiter behind."""
    waiters = [asyncio.ensure_future(event.wait()) for event in events]
    try:
        await asyncio.wait(waiters, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiter in waiters:
            waiter.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.gather(*waiters, return_exceptions=True)
