"""Waiting for what happens after a response (Slack's follow-ups run once Slack has its answer)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable


async def until(condition: Callable[[], bool | Awaitable[bool]], what: str, *, seconds: float = 20) -> None:
    """Wait, polling, until ``condition()`` holds; fail naming ``what`` after ``seconds``."""
    deadline = time.monotonic() + seconds
    while True:
        held = condition()
        if not isinstance(held, bool):
            held = await held
        if held:
            return
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.02)
