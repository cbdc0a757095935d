"""Carrying chats on with Celery, on RabbitMQ or Redis (``pip install 'tarry[celery]'``).

``register(app, agents)`` adds the ``tarry.continue_chat`` task to a Celery app: it runs
[`continue_chat`][tarry.jobs.continue_chat] and, while the chat's tasks still work, sends itself again
with ``countdown`` set to the next check. ``enqueue_on_decisions(store, app)`` makes every
decision and cancellation recorded through ``store`` enqueue the chat's task. The task is
acknowledged late and rejected when its worker dies, so a killed worker's chat is delivered
again; the claims of the store keep every tool call to one run. With ``check_batch`` (the default), it also adds
``tarry.check_tasks``, which each worker sends when chats fall due: it checks the working tasks of up to
``check_batch`` due chats in one batch, as the embedded worker does (``tarry.jobs.checks``), and sends
``tarry.continue_chat`` for the due chats that need a full step. ``register_notifier(app, senders)`` adds the
``tarry.deliver_notices`` task, a round of notifications' delivery, which each worker sends as soon as the outbox
holds work (woken by the store as the embedded worker is) and Celery beat every second besides.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Sequence
from datetime import datetime
from functools import partial
from typing import Any

try:
    from celery import Celery
except ImportError:  # pragma: no cover - depends on the installation
    raise ImportError("tarry.jobs.celery needs Celery: pip install 'tarry[celery]'") from None

from tarry.clock import utcnow
from tarry.jobs.carry import Agents, agents_by_name, continue_chat
from tarry.jobs.checks import run_batch, take_due
from tarry.jobs.events import first_of
from tarry.jobs.notifier import Notifier
from tarry.notices import Routes, Sender
from tarry.questions import Question
from tarry.running import run_sync
from tarry.store import Store
from tarry.store.due import earliest_due, overdue, take_if_due, wake_abandoned
from tarry.store.outbox import work_waiting
from tarry.store.schedule import DEFAULT_POLL_INTERVAL
from tarry.store.wakeups import Wakeups

logger = logging.getLogger("tarry.jobs")
TASK_NAME = "tarry.continue_chat"
"""The name of the Celery task that carries a chat on."""
CHECK_TASK_NAME = "tarry.check_tasks"
"""The name of the Celery task that checks the working tasks of due chats in one batch."""
CHECKS_AT_ONCE = 64
"""How many task checks of its batch one ``tarry.check_tasks`` runs at once."""
LONGEST_WAIT = 1.0
"""Seconds between two looks of a worker for due chats, at most."""


def register(
    app: Celery,
    agents: Agents,
    *,
    url: str | None = None,
    lease: float = 60.0,
    default_poll_interval: float = DEFAULT_POLL_INTERVAL,
    sweep_interval: float | None = 10.0,
    check_batch: int = 256,
    check_every: float = 0.05,
) -> Any:
    """Register the ``tarry.continue_chat`` task (and ``tarry.check_tasks``) on ``app`` for ``agents``; returns the
    first.

    Each worker thread opens its own [`Store`][tarry.store.Store] on ``url`` (default:
    ``TARRY_DATABASE_URL``) on its own event loop, kept between tasks. Every ``sweep_interval``
    seconds each worker records the reminders, escalations and declines on timeout that approval policies made due
    ([`Store.sweep_reminders`][tarry.store.Store.sweep_reminders]; a decline enqueues its chat).

    With ``check_batch`` (the default, 256), a chat's next check is not a message of its own: each worker looks for
    due chats when the first falls due (every second at least, and at most every ``check_every`` seconds) and then
    sends ``tarry.check_tasks``, which takes up to ``check_batch`` due chats, checks the tasks of those that only
    wait on working tasks in one batch (``CHECKS_AT_ONCE`` at once, saved in waves; ``tarry.jobs.checks``) and
    sends ``tarry.continue_chat`` for the others; it sends itself again at once when it took a full batch. Due
    chats are taken with ``FOR UPDATE SKIP LOCKED`` and pushed a lease ahead, and their calls claimed, so a killed
    worker's chats fall due again once its lease runs out. With ``check_batch=0`` each chat has a chain of
    scheduled ``tarry.continue_chat`` messages instead, and the sweep also enqueues the chats overdue by more than
    a lease (a message lost with a killed worker, or a chat parked without an enqueue).
    """
    if isinstance(check_batch, bool) or not isinstance(check_batch, int) or check_batch < 0:
        raise ValueError(f"check_batch must be an int of 0 or more, got {check_batch!r}")
    served = agents_by_name(agents)
    local = threading.local()

    def store() -> Store:
        if getattr(local, "store", None) is None:
            local.store = Store(url, lease=lease)
        opened: Store = local.store
        return opened

    @app.task(name=TASK_NAME, bind=True, acks_late=True, reject_on_worker_lost=True, ignore_result=True)  # type: ignore[untyped-decorator]
    def continue_chat_task(self: Any, chat_id: str, *, scheduled: bool = False) -> str | None:
        """Carry the chat on; send this task again, ``scheduled``, at the chat's next check.

        A scheduled message runs only if the chat is still due then and this message takes it,
        so each chat has one chain of scheduled checks however many enqueues started one.
        """

        async def run() -> datetime | None:
            schedule = None
            if scheduled:
                schedule = await take_if_due(store(), chat_id)
                if schedule is None:
                    return None
            return await continue_chat(
                store(), chat_id, served, default_poll_interval=default_poll_interval, schedule=schedule
            )

        next_check = run_sync(run(), verb="tarry.jobs.continue_chat")
        if next_check is None or check_batch:  # batched: the workers' looks for due chats find it then
            return None if next_check is None else next_check.isoformat()
        countdown = max(0.0, (next_check - utcnow()).total_seconds())
        self.apply_async((chat_id,), {"scheduled": True}, countdown=countdown)
        return next_check.isoformat()

    @app.task(name=CHECK_TASK_NAME, bind=True, acks_late=True, reject_on_worker_lost=True, ignore_result=True)  # type: ignore[untyped-decorator]
    def check_tasks(self: Any) -> int:
        """Take due chats, check the tasks of those that only wait on working tasks in one batch, and send
        ``tarry.continue_chat`` for the others; returns how many tasks it checked."""
        batch = run_sync(take_due(store(), served, (), check_batch, batching=True), verb="tarry.jobs.checks.take_due")
        for chat_id in sorted(batch.full_steps):
            enqueue(app, chat_id)
        if len(batch.picked) == check_batch:  # more may be due: another worker thread takes them meanwhile
            self.apply_async()
        if batch.checks:
            limit = asyncio.Semaphore(CHECKS_AT_ONCE)
            run_sync(run_batch(store(), served, batch, limit, default_poll_interval), verb="tarry.jobs.checks")
        return len(batch.checks)

    if check_batch:
        _look_for_due_in_workers(app, served, lambda: Store(url, lease=lease), check_every, sweep_interval)
    elif sweep_interval is not None:
        _sweep_in_workers(app, served, store, sweep_interval, lease)
    return continue_chat_task


def _sweep_in_workers(app: Celery, served: dict[str, Any], store: Any, interval: float, grace: float) -> None:
    """In each worker, every ``interval`` seconds, enqueue chats overdue by more than ``grace`` (a message lost) and
    record approval policies' follow-ups."""
    from celery.signals import worker_ready, worker_shutting_down

    stopping = threading.Event()

    def sweep_forever() -> None:
        while not stopping.wait(interval):
            try:
                for chat_id in run_sync(overdue(store(), served, grace), verb="tarry.store.due.overdue"):
                    enqueue(app, chat_id)
            except Exception:
                logger.exception("Looking for overdue chats failed")
            run_sync(_follow_up(app, store()), verb="tarry.store.Store.sweep_reminders")

    def start(**_: Any) -> None:
        threading.Thread(target=sweep_forever, name="tarry-sweep", daemon=True).start()

    def stop(**_: Any) -> None:
        stopping.set()

    worker_ready.connect(start, weak=False)
    worker_shutting_down.connect(stop, weak=False)


async def _follow_up(app: Celery, store: Store) -> None:
    """Record the follow-ups approval policies made due; a decline on timeout enqueues its chat, which carries on."""
    try:
        followed = await store.sweep_reminders()
        for chat_id in {item.question.chat_id for item in followed if item.what == "decline"} - {None}:
            await asyncio.to_thread(enqueue, app, str(chat_id))
    except Exception:
        logger.exception("Recording approval policies' follow-ups failed")


def _look_for_due_in_workers(
    app: Celery, served: dict[str, Any], store: Callable[[], Store], every: float, follow_ups: float | None
) -> None:
    """In each worker, send ``tarry.check_tasks`` when a chat falls due (at most every ``every`` seconds while some
    stay due; a look every ``LONGEST_WAIT`` seconds at least). Before a look, every ``follow_ups`` seconds, record
    approval policies' follow-ups, and every half lease make due the chats whose calls or turn a dead process held,
    as the embedded worker does (so a decline on timeout comes before the lapse)."""
    from celery.signals import worker_ready, worker_shutting_down

    stopping = threading.Event()

    async def look() -> None:
        last_follow_up = last_wake = float("-inf")
        async with store() as watched:
            while not stopping.is_set():
                if follow_ups is not None and time.monotonic() - last_follow_up >= follow_ups:
                    last_follow_up = time.monotonic()
                    await _follow_up(app, watched)
                try:
                    if time.monotonic() - last_wake > watched.lease / 2:  # calls or turns a dead process held
                        last_wake = time.monotonic()
                        await wake_abandoned(watched, served)
                    earliest = await earliest_due(watched, served, ())
                    wait = LONGEST_WAIT if earliest is None else (earliest - utcnow()).total_seconds()
                    if wait <= 0:
                        await asyncio.to_thread(app.send_task, CHECK_TASK_NAME)
                        wait = every
                except Exception:
                    logger.exception("Looking for due chats failed")
                    wait = LONGEST_WAIT
                await asyncio.sleep(min(wait, LONGEST_WAIT))

    def start(**_: Any) -> None:
        threading.Thread(target=asyncio.run, args=(look(),), name="tarry-due-look", daemon=True).start()

    def stop(**_: Any) -> None:
        stopping.set()

    worker_ready.connect(start, weak=False)
    worker_shutting_down.connect(stop, weak=False)


def enqueue(app: Celery, chat_id: str, countdown: float | None = None) -> None:
    """Send ``tarry.continue_chat`` for ``chat_id`` (after ``countdown`` seconds) through ``app``'s broker."""
    app.send_task(TASK_NAME, (chat_id,), countdown=countdown)


def enqueue_on_decisions(store: Store, app: Celery) -> None:
    """Make every decision and cancellation recorded through ``store`` enqueue its chat's task."""

    async def on_decision(question: Question) -> None:
        if question.chat_id is not None:
            await asyncio.to_thread(enqueue, app, question.chat_id)

    async def on_cancel(chat_id: str) -> None:
        await asyncio.to_thread(enqueue, app, chat_id)

    store.decision_hooks.append(on_decision)
    store.cancel_hooks.append(on_cancel)


NOTIFY_TASK_NAME = "tarry.deliver_notices"
"""The name of the Celery task that does one round of a [`Notifier`][tarry.jobs.notifier.Notifier]."""


def register_notifier(
    app: Celery,
    senders: Callable[[], Sequence[Sender]],
    routes: Routes | None = None,
    *,
    url: str | None = None,
    every: float | None = 1.0,
    watch: float | None = 0.025,
    lease: float = 60.0,
    **options: Any,
) -> Any:
    """Register the ``tarry.deliver_notices`` task on ``app``: one round of a [`Notifier`][tarry.jobs.notifier.Notifier]
    (expiries noticed, notices expanded, due deliveries sent), repeated while a round finds a full batch; returns the
    task. With ``every`` (seconds) Celery beat sends it that often (run ``celery beat`` beside the workers). With
    ``watch`` (seconds) each worker looks at the outbox that often and whenever the store wakes it (as the embedded
    worker's notifier does), and sends the task as soon as a notice or a due delivery waits, so a notice goes out
    within tens of milliseconds rather than at beat's next tick; beat still notices expiries and covers a worker
    that stopped watching.

    Each worker thread makes its own store on ``url`` (default: ``TARRY_DATABASE_URL``) and its own senders with
    ``senders()`` (an HTTP client belongs to one event loop); ``options`` go to the ``Notifier``. Two workers running
    the task at once share the work: each delivery is claimed by one.
    """
    local = threading.local()
    begun = threading.Event()  # a delivery task began in this worker: what waits after it is the watch's to send

    def notifier() -> Notifier:
        if getattr(local, "notifier", None) is None:
            local.notifier = Notifier(Store(url, lease=lease), senders(), routes, **options)
        made: Notifier = local.notifier
        return made

    @app.task(name=NOTIFY_TASK_NAME, ignore_result=True)  # type: ignore[untyped-decorator]
    def deliver_notices() -> int:
        """One round of the notifier, and more while each finds a full batch; returns the deliveries claimed."""
        begun.set()

        async def rounds() -> int:
            claimed = total = await notifier().deliver()
            while claimed >= notifier().batch:
                claimed = await notifier().deliver()
                total += claimed
            return total

        done: int = run_sync(rounds(), verb="tarry.jobs.notifier.Notifier.deliver")
        return done

    if every is not None:
        app.conf.beat_schedule = {
            **(app.conf.beat_schedule or {}),
            NOTIFY_TASK_NAME: {"task": NOTIFY_TASK_NAME, "schedule": every},
        }
    if watch is not None:
        _watch_in_workers(app, lambda: Store(url, lease=lease), senders, watch, begun)
    return deliver_notices


KICK_AGAIN = 1.0
"""Seconds after which a worker sends ``tarry.deliver_notices`` again for work that still waits (its first was lost
or is queued behind others)."""


def _watch_in_workers(
    app: Celery,
    store: Callable[[], Store],
    senders: Callable[[], Sequence[Sender]],
    every: float,
    begun: threading.Event,
) -> None:
    """In each worker, look at the outbox every ``every`` seconds and on the store's wake-ups; send the delivery task
    once when work waits; again when a delivery task began in this worker since (``begun``: work waiting now may
    have come after it took its batch); and every ``KICK_AGAIN`` seconds while work still waits (the task sent was
    lost, taken by another worker, or is queued behind others)."""
    from celery.signals import worker_ready, worker_shutting_down

    stopping = threading.Event()

    async def watch() -> None:
        made = senders()
        channels = tuple(sender.channel for sender in made)
        for sender in made:  # only their channels' names are wanted here
            close = getattr(sender, "aclose", None)
            if close is not None:
                await close()
        async with store() as watched:
            wakeups = Wakeups(watched)
            await wakeups.start()
            kicked_at: float | None = None
            try:
                while not stopping.is_set():
                    wakeups.event.clear()
                    if begun.is_set():
                        begun.clear()
                        kicked_at = None
                    try:
                        waiting = await watched.db.run_read(partial(work_waiting, channels=channels))
                        if not waiting:
                            kicked_at = None
                        elif kicked_at is None or time.monotonic() - kicked_at > KICK_AGAIN:
                            await asyncio.to_thread(app.send_task, NOTIFY_TASK_NAME)
                            kicked_at = time.monotonic()
                    except Exception:
                        logger.exception("Looking at the outbox failed")
                    await first_of((wakeups.event,), every)
            finally:
                await wakeups.stop()

    def start(**_: Any) -> None:
        threading.Thread(target=asyncio.run, args=(watch(),), name="tarry-outbox-watch", daemon=True).start()

    def stop(**_: Any) -> None:
        stopping.set()

    worker_ready.connect(start, weak=False)
    worker_shutting_down.connect(stop, weak=False)
