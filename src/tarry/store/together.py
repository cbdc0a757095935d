"""PostgreSQL: approvals and declines by id that arrive while one is on its way go to the database together.

Each event loop sends one decision statement of each kind (approve, decline) at a time. What
arrives meanwhile waits, and goes in the next statement, all of it at once
(``decide_unread_together``): one round trip and one commit for many
decisions, where each alone costs the server a commit and the client a round trip. A decision
that arrives while none is on its way is sent on the loop's next turn, with those asked on the
same turn (``asyncio.gather`` of several); nothing waits for company longer than that.

Each decision is still its own: it is recorded exactly once or not at all, on the trail with its
own decider, and an attempt the statement cannot decide (decided already, expired, a policy)
comes back for the locked path, as when sent alone.
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from functools import partial

from sqlalchemy.exc import DBAPIError

from tarry.errors import StoreConflictError
from tarry.questions import Decision
from tarry.store.deciding import Attempt, Settled

MOST_TOGETHER = 64
"""Decisions in one statement at most; more wait for the next."""

SendAlone = Callable[[Attempt], Awaitable[Settled | None]]
"""Sends one decision's statement (``decide_unread``)."""
SendTogether = Callable[[Sequence[Attempt]], Awaitable[Sequence[Settled | Exception | None]]]
"""Sends the statement of several (``decide_unread_together``)."""


Waiting = tuple[Attempt, "asyncio.Future[Settled | None]"]
"""A decision waiting to be sent, and the future its caller waits on."""


@dataclass
class _Queue:
    """The decisions of one kind on one event loop that wait to be sent, and the task sending them."""

    waiting: list[Waiting] = field(default_factory=list)
    sender: asyncio.Task[None] | None = None
    """The task that sends them, while there is one (held here: the event loop keeps only weak references)."""


class DecisionsTogether:
    """Sends the decisions by id of each event loop, those that wait together (see the module's docstring)."""

    def __init__(self, alone: SendAlone, together: SendTogether) -> None:
        self._alone = alone
        self._together = together
        self._loops: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[Decision, _Queue]] = (
            weakref.WeakKeyDictionary()
        )
        self._lock = threading.Lock()
        """Guards ``_loops``: a store's verbs may run on several threads' loops."""

    def decide(self, attempt: Attempt) -> asyncio.Future[Settled | None]:
        """What the attempt came to once its statement ends (``None``: nothing written for it; decide it alone).

        The statement goes on if the caller stops waiting for the future.
        """
        loop = asyncio.get_running_loop()
        with self._lock:
            queue = self._loops.setdefault(loop, {}).setdefault(attempt.decision, _Queue())
        told: asyncio.Future[Settled | None] = loop.create_future()
        queue.waiting.append((attempt, told))
        if queue.sender is None or queue.sender.done():
            # It starts on the loop's next turn: what else is asked on this turn goes with it.
            queue.sender = loop.create_task(self._send(queue))
            queue.sender.add_done_callback(partial(_ended, queue))
        return told

    async def _send(self, queue: _Queue) -> None:
        while queue.waiting:
            batch = _take(queue)
            try:
                results = await self._sent([attempt for attempt, _ in batch])
            except Exception as error:
                results = [error] * len(batch)
            except BaseException:  # cancelled: the event loop shuts down
                for _, told in batch:
                    told.cancel()
                raise
            for (_, told), result in zip(batch, results, strict=True):
                if told.done():
                    continue
                if isinstance(result, BaseException):
                    told.set_exception(result)
                else:
                    told.set_result(result)

    async def _sent(self, attempts: list[Attempt]) -> Sequence[Settled | Exception | None]:
        """What each attempt came to, or the error its statement raised.

        A statement of several that the database refused (a deadlock, a value it does not take: an
        error with the server's SQLSTATE) saved nothing: each attempt is then sent again alone, so that
        one attempt's trouble is its own. Any other error may have come after the commit (a
        connection that failed, rows that did not decode), and is every attempt's.
        """
        if len(attempts) == 1:
            return [await self._alone(attempts[0])]
        try:
            return await self._together(attempts)
        except StoreConflictError:
            pass
        except DBAPIError as error:
            if getattr(error.orig, "sqlstate", None) is None:
                raise
        alone: list[Settled | Exception | None] = []
        for attempt in attempts:
            try:
                alone.append(await self._alone(attempt))
            except Exception as error:
                alone.append(error)
        return alone


def _take(queue: _Queue) -> list[Waiting]:
    """The next statement's decisions, in the order of their questions' ids (the order every statement locks them
    in): the first waiting on each question, up to ``MOST_TOGETHER``; the others stay for a later one (two
    decisions of one question in one statement could not tell which was recorded)."""
    batch: list[Waiting] = []
    rest: list[Waiting] = []
    named: set[str] = set()
    for waiting in queue.waiting:
        if len(batch) < MOST_TOGETHER and waiting[0].question_id not in named:
            named.add(waiting[0].question_id)
            batch.append(waiting)
        else:
            rest.append(waiting)
    queue.waiting = rest
    return sorted(batch, key=lambda waiting: waiting[0].question_id)


def _ended(queue: _Queue, sender: asyncio.Task[None]) -> None:
    """Once the sender ends: if it was cancelled (the event loop shuts down), perhaps before it started, or failed,
    those still waiting are told so, unless another sender has taken them on."""
    error = None if sender.cancelled() else sender.exception()
    if queue.sender is not sender:
        return
    queue.sender = None
    left, queue.waiting = queue.waiting, []
    for _, told in left:
        if told.done():
            continue
        if error is None:
            told.cancel()
        else:
            told.set_exception(error)
