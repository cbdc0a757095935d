"""PostgreSQL: approvals and declines by id that arrive while one is on its way go to the database together.

Each event loop sends one decision statement of each kind (approve, decline) at a time. What
arrives meanwhile waits, and goes in the next statement, all of it at once
(:func:`~tarry.store.deciding.decide_unread_together`): one round trip and one commit for many
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

from tarry.questions import Decision
from tarry.store.deciding import Attempt, Settled

MOST_TOGETHER = 64
"""Decisions in one statement at most; more wait for the next."""

SendAlone = Callable[[Attempt], Awaitable[Settled | None]]
"""Sends one decision's statement (:func:`~tarry.store.deciding.decide_unread`)."""
SendTogether = Callable[[Sequence[Attempt]], Awaitable[list[Settled | None]]]
"""Sends the statement of several (:func:`~tarry.store.deciding.decide_unread_together`)."""


@dataclass
class _Queue:
    """The decisions of one kind waiting on one event loop, and whether a statement of them is on its way."""

    waiting: list[tuple[Attempt, asyncio.Future[Settled | None]]] = field(default_factory=list)
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
        if queue.sender is None:
            # It starts on the loop's next turn: what else is asked on this turn goes with it.
            queue.sender = loop.create_task(self._send(queue))
            queue.sender.add_done_callback(_retrieved)
        return told

    async def _send(self, queue: _Queue) -> None:
        try:
            while queue.waiting:
                batch = _take(queue)
                try:
                    if len(batch) == 1:
                        results = [await self._alone(batch[0][0])]
                    else:
                        results = await self._together([attempt for attempt, _ in batch])
                except Exception as error:
                    for _, told in batch:
                        if not told.done():
                            told.set_exception(error)
                    continue
                except BaseException:  # cancelled: the event loop shuts down
                    for _, told in batch + queue.waiting:
                        told.cancel()
                    queue.waiting.clear()
                    raise
                for (_, told), result in zip(batch, results, strict=True):
                    if not told.done():
                        told.set_result(result)
        finally:
            queue.sender = None


def _take(queue: _Queue) -> list[tuple[Attempt, asyncio.Future[Settled | None]]]:
    """The next statement's decisions: the first waiting on each question, up to :data:`MOST_TOGETHER`; the others
    stay for a later one (two decisions of one question in one statement could not tell which was recorded)."""
    batch: list[tuple[Attempt, asyncio.Future[Settled | None]]] = []
    rest: list[tuple[Attempt, asyncio.Future[Settled | None]]] = []
    named: set[str] = set()
    for waiting in queue.waiting:
        if len(batch) < MOST_TOGETHER and waiting[0].question_id not in named:
            named.add(waiting[0].question_id)
            batch.append(waiting)
        else:
            rest.append(waiting)
    queue.waiting = rest
    return batch


def _retrieved(sender: asyncio.Future[None]) -> None:
    if not sender.cancelled():
        sender.exception()  # each caller was told; nothing is left to report
