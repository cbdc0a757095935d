"""The embedded worker: finds due chats in the database itself and carries them on."""

from __future__ import annotations

import asyncio
import logging
import signal
import time
from collections import OrderedDict

from tarry.chat import Chat
from tarry.clock import utcnow
from tarry.jobs.carry import Agents, agents_by_name, continue_chat
from tarry.jobs.checks import Batch, run_batch, take_due
from tarry.jobs.events import first_of
from tarry.jobs.notifier import Notifier
from tarry.store import Store
from tarry.store.due import ChatSchedule, earliest_due, give_back, wake_abandoned
from tarry.store.schedule import DEFAULT_POLL_INTERVAL
from tarry.store.wakeups import Wakeups

logger = logging.getLogger("tarry.jobs")
CACHED_CHATS = 1024
"""How many chat objects a worker keeps between checks (the least recently used go first)."""
CHECKS_AT_ONCE = 64
"""How many task checks of its batches a worker runs at once."""
BATCHES_AT_ONCE = 4
"""How many batches of task checks a worker has in progress at once."""


class LRU(OrderedDict[str, Chat]):
    """A mapping that forgets its least recently stored entries beyond ``size``."""

    def __init__(self, size: int) -> None:
        super().__init__()
        self.size = size

    def __setitem__(self, key: str, value: Chat) -> None:
        super().__setitem__(key, value)
        self.move_to_end(key)
        while len(self) > self.size:
            self.popitem(last=False)


class Worker:
    """Carries on every due chat of ``agents`` in ``store``, until [`stop`][tarry.jobs.Worker.stop].

    A chat is due when a task should be checked (its ``poll_interval``), a question or task
    expires, a decision or cancellation was recorded, or a process that held one of its calls
    died (its lease ran out). Due chats are taken with ``FOR UPDATE SKIP LOCKED`` on PostgreSQL
    and by one writer at a time on SQLite, so several workers share the work; each chat taken
    is pushed a lease ahead, so a chat whose worker dies falls due again.

    A decision wakes the worker at once: LISTEN/NOTIFY on PostgreSQL, a look at the file's
    ``data_version`` every 20 ms on SQLite. Besides, it looks every ``poll_interval`` seconds
    (default 1 on SQLite, 5 on PostgreSQL), as a safety net.
    ``concurrency`` bounds how many chats it carries on at once with a full step. A due chat that waits on working
    tasks and nothing else takes no full step: the worker takes up to ``check_batch`` such chats at a time, claims
    their calls in one statement, checks their tasks (``CHECKS_AT_ONCE`` at once) and saves every task that still
    works, with its chat's next check, in one transaction (``tarry.jobs.checks``); a check that changes something
    makes its chat due for a full step at once. ``check_batch=0`` gives every due chat a full step. With a ``notifier``
    ([`Notifier`][tarry.jobs.notifier.Notifier]) it also delivers the store's notices, alongside.
    [`stop`][tarry.jobs.Worker.stop] (and SIGTERM with ``handle_signals=True``) lets every step in progress
    finish, then [`run`][tarry.jobs.Worker.run] returns.

    At most once every ``poll_interval`` it also records the reminders, escalations and declines on timeout that
    approval policies made due ([`Store.sweep_reminders`][tarry.store.Store.sweep_reminders]); a decline wakes its
    chat, which it then carries on.
    """

    def __init__(
        self,
        store: Store,
        agents: Agents,
        *,
        concurrency: int = 16,
        check_batch: int = 256,
        poll_interval: float | None = None,
        default_poll_interval: float = DEFAULT_POLL_INTERVAL,
        notifier: Notifier | None = None,
    ) -> None:
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
            raise ValueError(f"concurrency must be a positive int, got {concurrency!r}")
        self.store = store
        self.agents = agents_by_name(agents)
        if not self.agents:
            raise ValueError("A worker needs at least one agent to serve")
        self.concurrency = concurrency
        if isinstance(check_batch, bool) or not isinstance(check_batch, int) or check_batch < 0:
            raise ValueError(f"check_batch must be an int of 0 or more, got {check_batch!r}")
        self.check_batch = check_batch
        self.poll_interval = poll_interval if poll_interval is not None else 1.0 if store.db.is_sqlite else 5.0
        self.default_poll_interval = default_poll_interval
        self.notifier = notifier
        """Delivers the store's notices while the worker runs (``None``: this worker sends none)."""
        self.steps = 0
        """How many times this worker carried a chat on."""
        self._running: dict[str, asyncio.Task[None]] = {}
        self._batches: dict[asyncio.Task[None], Batch] = {}
        self._check_slots = asyncio.Semaphore(CHECKS_AT_ONCE)
        self.checks = 0
        """How many tasks this worker checked in batches."""
        self._chats: LRU = LRU(CACHED_CHATS)
        self._stopping = asyncio.Event()
        self._slot_freed = asyncio.Event()

    def stop(self) -> None:
        """Take no new chats; [`run`][tarry.jobs.Worker.run] returns once the steps in progress are finished."""
        if not self._stopping.is_set():
            logger.info("Stopping: finishing %d step(s) in progress", len(self._running))
        self._stopping.set()

    async def run(self, *, handle_signals: bool = False) -> None:
        """Carry due chats on until [`stop`][tarry.jobs.Worker.stop]; with ``handle_signals``, SIGTERM and SIGINT stop
        it."""
        loop = asyncio.get_running_loop()
        if handle_signals:
            for number in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(number, self.stop)
        wakeups = Wakeups(self.store)
        await wakeups.start()
        last_sweep = last_follow_up = float("-inf")
        notifying = None if self.notifier is None else asyncio.create_task(self.notifier.run())
        try:
            while not self._stopping.is_set():
                try:
                    if time.monotonic() - last_sweep > self.store.lease / 2:
                        last_sweep = time.monotonic()
                        await wake_abandoned(self.store, self.agents)
                    if time.monotonic() - last_follow_up >= self.poll_interval:
                        last_follow_up = time.monotonic()
                        await self.store.sweep_reminders()
                    wakeups.event.clear()
                    self._slot_freed.clear()
                    timeout = await self._take_due()
                except Exception:
                    logger.exception("Looking for due chats failed; trying again in a second")
                    timeout = 1.0
                await first_of((self._stopping, wakeups.event, self._slot_freed), timeout)
        finally:
            if notifying is not None and self.notifier is not None:
                self.notifier.stop()
                await asyncio.gather(notifying, return_exceptions=True)
            if self._running or self._batches:
                await asyncio.gather(*self._running.values(), *self._batches, return_exceptions=True)
            await wakeups.stop()
            if handle_signals:
                for number in (signal.SIGTERM, signal.SIGINT):
                    loop.remove_signal_handler(number)

    async def _take_due(self) -> float:
        """Start the due chats there is room for; return how long to wait before looking again."""
        free = max(self.concurrency - len(self._running), 0)
        batching = self.check_batch > 0 and len(self._batches) < BATCHES_AT_ONCE
        limit = free + (self.check_batch if batching else 0)
        batch = await take_due(self.store, self.agents, self._busy(), limit, batching=batching)
        picked, full, checking = batch.picked, sorted(batch.full_steps), bool(batch.checks)
        if checking:
            self._start_batch(batch)
        for chat_id in full[:free]:
            self._running[chat_id] = asyncio.create_task(self._carry(chat_id, picked[chat_id]))
        if len(full) > free:  # no room for their full steps: a finished step wakes the loop
            await give_back(self.store, {chat_id: picked[chat_id].version for chat_id in full[free:]})
            return self.poll_interval
        if limit == 0 or len(picked) == limit:  # full: a finished step or batch wakes the loop
            return 0.0 if checking and len(self._batches) < BATCHES_AT_ONCE else self.poll_interval
        earliest = await earliest_due(self.store, self.agents, self._busy())
        if earliest is None:
            return self.poll_interval
        return min(self.poll_interval, max(0.0, (earliest - utcnow()).total_seconds()))

    def _busy(self) -> list[str]:
        """The chats this worker carries on now: in a full step, or in a batch of checks."""
        return [*self._running, *(chat_id for batch in self._batches.values() for chat_id in batch.checking)]

    def _start_batch(self, batch: Batch) -> None:
        async def check() -> None:
            try:
                slots, every = self._check_slots, self.default_poll_interval
                await run_batch(self.store, self.agents, batch, slots, every, on_leave=self._slot_freed.set)
                self.checks += len(batch.checks)
            except Exception:
                logger.exception("Checking a batch of %d task(s) failed; they fall due again", len(batch.checks))
            finally:
                del self._batches[running]
                self._slot_freed.set()

        running = asyncio.create_task(check())
        self._batches[running] = batch

    async def _carry(self, chat_id: str, schedule: ChatSchedule) -> None:
        try:
            await continue_chat(
                self.store,
                chat_id,
                self.agents,
                default_poll_interval=self.default_poll_interval,
                cache=self._chats,
                schedule=schedule,
            )
            self.steps += 1
        except Exception:
            logger.exception(
                "Carrying chat %s on failed; it falls due again after the lease", chat_id, extra={"chat_id": chat_id}
            )
        finally:
            del self._running[chat_id]
            self._slot_freed.set()
