"""Telling people what happened to a question: the events, one delivery of one, and what sends it.

When a question is asked, reminded, escalated, decided, expired or cancelled, the store writes a notice of
the event in the same transaction as the change. A worker later turns each notice into deliveries (one per
recipient and channel, chosen by the application's [`Routes`][tarry.notices.Routes]) and hands each to the
[`Sender`][tarry.notices.Sender] of its channel, again until it succeeds or its attempts run out. Delivery is
at least once: a receiver drops a repeat by the delivery's ``id``, which stays the same on every attempt.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Literal, Protocol

from tarry.principals import Principal
from tarry.questions import Question

__all__ = ["NOTICE_EVENTS", "Delivery", "NoticeEvent", "Routes", "Sender", "goes_to_endpoint", "takes"]

NoticeEvent = Literal["asked", "reminded", "escalated", "counted", "decided", "expired", "cancelled"]
"""What happened to a question that people are told of (``counted``: an approval was counted toward a policy that
needs more, migration 0020)."""
NOTICE_EVENTS: tuple[NoticeEvent, ...] = (
    "asked",
    "reminded",
    "escalated",
    "counted",
    "decided",
    "expired",
    "cancelled",
)


@dataclass(frozen=True)
class Delivery:
    """One notice of one event on one question, for one recipient through one channel."""

    id: str
    """Stable across attempts: a receiver that saw this id before drops the repeat."""
    event: NoticeEvent
    """What happened to the question."""
    channel: str
    """The channel that carries it, by its sender's name: ``"webhook"``, ``"email"``, ``"slack"``, or your own."""
    question: Question
    """The question as it stands when the delivery is made (a notice of its asking may find it decided)."""
    recipient: Principal | None
    """Whom it tells; ``None`` for a channel that goes to an endpoint rather than a person (a webhook)."""
    address: str | None
    """Where the channel reaches the recipient (an email address, a Slack user or channel id), when it needs one."""
    attempt: int
    """1 for the first try, counting up with each retry."""
    noticed_at: datetime
    """When the event was recorded."""


class Sender(Protocol):
    """Delivers notices through one channel; raising asks for another attempt later."""

    @property
    def channel(self) -> str:
        """The channel's name, as deliveries name it."""
        ...

    async def send(self, delivery: Delivery) -> None:
        """Deliver ``delivery``, or raise to have it tried again after a backoff."""
        ...


class Routes(Protocol):
    """The application's say on who hears of a question, and where each person is reached."""

    def recipients(self, question: Question) -> Iterable[Principal]:
        """The people to tell about ``question`` (its ``policy.by`` and ``chat_id`` are on it)."""
        ...

    def address(self, principal: Principal, channel: str) -> str | None:
        """Where ``channel`` reaches ``principal``; ``None`` when it does not."""
        ...


def goes_to_endpoint(sender: Sender) -> bool:
    """Whether ``sender`` delivers to one endpoint (a webhook's URL) rather than to people: such a sender gets one
    delivery of each notice, with no recipient or address, whatever the routes say. A sender says so with an
    ``endpoint`` attribute that is true; one without it reaches the people the routes name, each at the address
    the routes give for its channel (none: not told through it)."""
    return bool(getattr(sender, "endpoint", False))


def takes(sender: Sender, event: NoticeEvent) -> bool:
    """Whether ``sender`` is given notices of ``event``: a sender names the events it takes with an ``events``
    attribute (an email sender leaves out ``counted``); one without it takes every event."""
    events = getattr(sender, "events", None)
    return events is None or event in events
