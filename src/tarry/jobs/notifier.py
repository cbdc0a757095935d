"""The notifier: turns the outbox's notices into deliveries and sends them, at least once each.

Each round: the notices of questions whose time ran out are written (the other events' notices were written by
the changes themselves); pending notices are expanded into deliveries, one per channel and recipient; due
deliveries are claimed under a lease, sent, each through its channel's sender, all at once, and how each went is
recorded in one transaction. A delivery whose sender raised is tried again after a backoff that doubles with each
attempt, and is kept as ``failed`` with its last error when its attempts run out. A worker killed mid-send leaves
its claims to run out: they are sent again, under the same delivery id, by whichever worker comes next.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable, Iterator, Sequence
from datetime import timedelta
from functools import partial

from sqlalchemy import Connection

from tarry.clock import utcnow
from tarry.jobs.events import first_of
from tarry.notices import Delivery, NoticeEvent, Routes, Sender, goes_to_endpoint, takes
from tarry.principals import Principal
from tarry.questions import Question
from tarry.store import Store
from tarry.store.outbox import (
    Outcome,
    PlannedDelivery,
    claim_deliveries,
    earliest_due,
    expand_notices,
    expiries_waiting,
    notice_expiries,
    settle_deliveries,
    work_waiting,
)
from tarry.store.wakeups import Wakeups

logger = logging.getLogger("tarry.notify")
SETTLE_EVERY = 0.02
"""Seconds between two transactions that record how the attempts of a round went, while its sends go on."""


class Notifier:
    """Delivers the notices of ``store`` through ``senders``, to the people ``routes`` names.

    A sender that goes to an endpoint (a [`WebhookSender`][tarry.jobs.webhook.WebhookSender]) gets every notice,
    with no recipient; any other reaches each of ``routes.recipients(question)`` at ``routes.address(person,
    channel)``, when that gives an address. Each channel's name must be distinct.

    ``max_attempts`` attempts per delivery at most; after a failed one, the next is due ``backoff`` seconds later,
    doubling with each attempt, at most ``max_backoff``. ``batch`` deliveries are claimed (and sent at once, at most
    ``concurrency`` together) per round, each under a claim of ``lease`` seconds (default: the store's lease), which
    should be longer than a send can take. [`run`][tarry.jobs.notifier.Notifier.run] rounds until stopped, woken
    by the store's wake-ups and looking at least every ``poll_interval`` seconds (a question asked on PostgreSQL
    wakes nobody); [`deliver`][tarry.jobs.notifier.Notifier.deliver] does one round.
    """

    def __init__(
        self,
        store: Store,
        senders: Sequence[Sender],
        routes: Routes | None = None,
        *,
        max_attempts: int = 8,
        backoff: float = 10.0,
        max_backoff: float = 3600.0,
        batch: int = 200,
        concurrency: int = 16,
        lease: float | None = None,
        poll_interval: float = 0.025,
        expiry_interval: float = 1.0,
    ) -> None:
        self.store = store
        self.senders = {sender.channel: sender for sender in senders}
        if len(self.senders) != len(senders):
            raise ValueError("Each sender of a notifier needs a channel name of its own")
        if not senders:
            raise ValueError("A notifier needs at least one sender")
        for name, value in (("max_attempts", max_attempts), ("batch", batch), ("concurrency", concurrency)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        self.routes = routes
        self.max_attempts = max_attempts
        self.backoff = timedelta(seconds=backoff)
        self.max_backoff = timedelta(seconds=max_backoff)
        self.batch = batch
        self.lease = timedelta(seconds=store.lease if lease is None else lease)
        self.poll_interval = poll_interval
        self.expiry_interval = expiry_interval
        self.sent = 0
        """Deliveries this notifier sent."""
        self.failed_attempts = 0
        """Attempts of this notifier whose sender raised."""
        self._limit = asyncio.Semaphore(concurrency)
        self._last_sweep = float("-inf")
        self._stopping = asyncio.Event()

    def retry_after(self, attempt: int) -> timedelta:
        """How long after failed attempt number ``attempt`` (from 1) the next is due."""
        grown: timedelta = self.backoff * 2 ** min(attempt - 1, 40)
        return min(self.max_backoff, grown)

    def stop(self) -> None:
        """Start no new round; [`run`][tarry.jobs.notifier.Notifier.run] returns once the current one ends."""
        self._stopping.set()

    async def run(self) -> None:
        """Deliver until [`stop`][tarry.jobs.notifier.Notifier.stop]; a round that fails is logged and tried again."""
        wakeups = Wakeups(self.store)
        await wakeups.start()
        try:
            while not self._stopping.is_set():
                wakeups.event.clear()
                try:
                    if await self.deliver() >= self.batch:
                        continue  # more may be due at once
                    timeout = await self._until_due()
                except Exception:
                    logger.exception("Delivering notices failed; trying again in a second")
                    timeout = 1.0
                await first_of((self._stopping, wakeups.event), timeout)
        finally:
            await wakeups.stop()

    async def deliver(self) -> int:
        """One round: write the notices of expiries (at most every ``expiry_interval`` seconds), expand pending
        notices, then claim, send and settle the due deliveries; returns how many were claimed."""
        db = self.store.db
        if time.monotonic() - self._last_sweep >= self.expiry_interval:
            self._last_sweep = time.monotonic()
            if await db.run_read(expiries_waiting):
                await db.run_write(notice_expiries)
        channels = tuple(self.senders)
        if not await db.run_read(partial(work_waiting, channels=channels)):
            return 0

        def expand_then_claim(connection: Connection) -> list[Delivery]:
            expand_notices(connection, self._plan, utcnow(), self.batch)
            return claim_deliveries(
                connection, self.store.owner, self.lease, channels, self.batch, max_attempts=self.max_attempts
            )

        claimed = await db.run_write(expand_then_claim)
        sending = {asyncio.ensure_future(self._send(delivery)) for delivery in claimed}
        while sending:  # settled as they are sent, those sent within SETTLE_EVERY of each other in one transaction
            finished, sending = await asyncio.wait(sending, timeout=SETTLE_EVERY)
            if not finished:
                continue
            settle = partial(
                settle_deliveries,
                owner=self.store.owner,
                outcomes=[task.result() for task in finished],
                now=utcnow(),
                max_attempts=self.max_attempts,
                backoff=self.retry_after,
            )
            await db.run_write(settle)
        return len(claimed)

    async def _send(self, delivery: Delivery) -> Outcome:
        async with self._limit:
            try:
                await self.senders[delivery.channel].send(delivery)
            except Exception as error:
                self.failed_attempts += 1
                logger.warning(
                    "Delivery %s (%s, attempt %d) failed: %s", delivery.id, delivery.channel, delivery.attempt, error
                )
                return Outcome(delivery.id, delivery.attempt, f"{type(error).__name__}: {error}"[:2000])
        self.sent += 1
        return Outcome(delivery.id, delivery.attempt, None)

    def _plan(self, event: NoticeEvent, question: Question) -> Iterator[PlannedDelivery]:
        people = _distinct(self.routes.recipients(question)) if self.routes is not None else []
        for channel, sender in self.senders.items():
            if not takes(sender, event):
                continue
            if goes_to_endpoint(sender):
                yield PlannedDelivery(channel, None, None)
                continue
            for person in people:
                assert self.routes is not None
                address = self.routes.address(person, channel)
                if address is not None:
                    yield PlannedDelivery(channel, person, address)

    async def _until_due(self) -> float:
        """Seconds until the next delivery is due, at most ``poll_interval``."""
        earliest = await self.store.db.run_read(partial(earliest_due, channels=tuple(self.senders)))
        if earliest is None:
            return self.poll_interval
        return min(self.poll_interval, max(0.0, (earliest - utcnow()).total_seconds()))


def _distinct(people: Iterable[Principal]) -> list[Principal]:
    """``people`` without repeats (by id), in order."""
    found: dict[str, Principal] = {}
    for person in people:
        found.setdefault(person.id, person)
    return list(found.values())
