"""A time limit on a request to a server that stands still while a person answers a question."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

T = TypeVar("T")


class Deadline:
    """``seconds`` of server time for one request; ``pause`` stops the clock while a person answers."""

    def __init__(self, seconds: float | None) -> None:
        self.left = seconds
        self._paused = 0
        self._changed = asyncio.Event()

    def pause(self) -> None:
        """Stop the clock (calls nest)."""
        self._paused += 1
        self._changed.set()

    def resume(self) -> None:
        """Start the clock again once every pause ended."""
        self._paused -= 1
        self._changed.set()

    async def run(self, work: Awaitable[T]) -> T:
        """Await ``work``; raise ``TimeoutError`` (cancelling it) when the clock runs out."""
        job = asyncio.ensure_future(work)
        loop = asyncio.get_running_loop()
        try:
            while True:
                self._changed.clear()
                changed = asyncio.ensure_future(self._changed.wait())
                counting = self.left is not None and not self._paused
                started = loop.time()
                try:
                    done, _ = await asyncio.wait(
                        {job, changed}, timeout=self.left if counting else None, return_when=asyncio.FIRST_COMPLETED
                    )
                finally:
                    changed.cancel()
                if counting and self.left is not None:
                    self.left -= loop.time() - started
                if job in done:
                    return job.result()
                if counting and self.left is not None and self.left <= 0:
                    raise TimeoutError
        finally:
            if not job.done():
                job.cancel()
                await asyncio.gather(job, return_exceptions=True)
