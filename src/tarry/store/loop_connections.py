"""PostgreSQL: the statements of a step sent right from the event loop, on psycopg's asyncio connections.

A step's statements each commit by themselves (``tarry.store.one_statement``) and go straight
to the driver's cursor (``tarry.store.cursor``). Sent from a worker thread, each would cost a
hop to the thread and back, and two thread wake-ups, about 200 µs on a 2-core machine; sent from
the loop on psycopg's asyncio connection, none. The work is the same plain function of a
connection: it runs in a greenlet (SQLAlchemy's ``greenlet_spawn``), and each statement waits for
the server without blocking the loop. Each loop keeps its own connections, up to
``CONNECTIONS_PER_LOOP`` at once, opened with the same settings as the engine's.

A statement, once sent, runs to its end even when its caller is cancelled, as on a thread:
psycopg would otherwise cancel it on the server, and a caller could not know whether it committed.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from sqlalchemy import Engine
from sqlalchemy.util import greenlet_spawn

from tarry.store.cursor import LoopConnection

T = TypeVar("T")
CONNECTIONS_PER_LOOP = 10
"""Statements one event loop has under way at once per store; more wait for one of them to end."""


@dataclass
class _Kept:
    """An open connection of a loop, and the generation it was opened in."""

    driver: Any
    generation: int


@dataclass
class _Loop:
    """What one event loop keeps: its idle connections, and a slot for each statement under way."""

    slots: asyncio.Semaphore
    idle: list[_Kept] = field(default_factory=list)


class LoopConnections:
    """Connections to one PostgreSQL database kept per event loop, on psycopg's asyncio driver."""

    def __init__(self, engine: Engine, connect: Callable[[], Awaitable[Any]]) -> None:
        self._engine = engine
        self._connect = connect
        self._loops: dict[asyncio.AbstractEventLoop, _Loop] = {}
        self._under_way: set[asyncio.Future[Any]] = set()
        self._generation = 0
        self._closed = False
        self._lock = threading.Lock()
        """Guards the loops and their idle lists: a store's verbs may run on several threads' loops."""

    def forget(self) -> None:
        """Open new connections from now on (one of them broke: the server may have ended the others too)."""
        self._generation += 1

    async def run(self, work: Callable[[LoopConnection], T]) -> T:
        """Run ``work`` on one of this loop's connections, each statement committing by itself.

        Waiting for a free slot or a connection can be cancelled, and then nothing is sent; once
        ``work`` starts, it goes on to its end if the caller is cancelled.
        """
        loop = self._loop()
        await loop.slots.acquire()
        try:
            kept = await self._take(loop)
        except BaseException:
            loop.slots.release()
            raise
        # Not asyncio.shield: the task hands its outcome to ``told`` itself, which wakes the caller one loop
        # turn sooner; a cancelled caller cancels only ``told``.
        told: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        running = asyncio.ensure_future(self._run(work, loop, kept, told))
        self._under_way.add(running)
        running.add_done_callback(self._ended)
        return await told

    def _ended(self, running: asyncio.Future[Any]) -> None:
        self._under_way.discard(running)
        if not running.cancelled():
            running.exception()  # retrieved: giving the connection back may have failed, with nobody told

    async def _run(
        self, work: Callable[[LoopConnection], T], loop: _Loop, kept: _Kept, told: asyncio.Future[T]
    ) -> None:
        try:
            result = await greenlet_spawn(work, LoopConnection(kept.driver, self._engine))
        except Exception as error:
            if not told.done():
                told.set_exception(error)
        except BaseException:  # cancelled: the event loop shuts down
            told.cancel()
            raise
        else:
            if not told.done():
                told.set_result(result)
        finally:
            await self._give_back(loop, kept)
            loop.slots.release()

    def _loop(self) -> _Loop:
        running = asyncio.get_running_loop()
        found = self._loops.get(running)
        if found is not None:
            return found
        with self._lock:  # other threads' loops come and go too
            ended = [self._loops.pop(other) for other in list(self._loops) if other.is_closed()]
            found = self._loops.setdefault(running, _Loop(asyncio.Semaphore(CONNECTIONS_PER_LOOP)))
        for gone in ended:  # nothing can use them: close them without their loop
            for kept in gone.idle:
                kept.driver.pgconn.finish()
        return found

    async def _take(self, loop: _Loop) -> _Kept:
        while True:
            with self._lock:
                kept = loop.idle.pop() if loop.idle else None
            if kept is None:
                break
            if kept.generation == self._generation and not kept.driver.closed:
                return kept
            await _close(kept)
        generation = self._generation
        return _Kept(await self._connect(), generation)

    async def _give_back(self, loop: _Loop, kept: _Kept) -> None:
        usable = kept.generation == self._generation and not kept.driver.closed and not kept.driver.broken
        with self._lock:
            if usable and not self._closed:
                loop.idle.append(kept)
                return
        await _close(kept)

    async def close(self) -> None:
        """Close every kept connection, once the statements under way on this loop have ended.

        Other loops' connections under way close as their statements end.
        """
        here = asyncio.get_running_loop()
        with self._lock:
            self._closed = True
            loops, self._loops = self._loops, {}
            idle = [(loop, kept) for loop, kept_there in loops.items() for kept in kept_there.idle]
            for kept_there in loops.values():
                kept_there.idle.clear()
        mine = [running for running in self._under_way if running.get_loop() is here]
        if mine:
            await asyncio.wait(mine)
        for loop, kept in idle:
            if loop is here:
                await _close(kept)
            else:  # another loop's, idle: close the socket without that loop
                kept.driver.pgconn.finish()


async def _close(kept: _Kept) -> None:
    with contextlib.suppress(Exception):  # a broken connection may fail to close; it is gone either way
        await kept.driver.close()
