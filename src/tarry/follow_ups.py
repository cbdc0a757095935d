"""What an approval's policy does of itself while nobody decides: a reminder, an escalation, a decline on timeout.

Pure: [`due`][tarry.follow_ups.due] reads a question and the time and says which follow-ups are due now,
[`next_at`][tarry.follow_ups.next_at] when the next one will be. The store records them
([`Store.sweep_reminders`][tarry.store.Store.sweep_reminders]), each once.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from tarry.questions import Question

__all__ = ["FOLLOW_UPS", "FollowUp", "due", "next_at"]

FollowUp = Literal["remind", "escalate", "decline"]
"""``remind``: a reminder is recorded; ``escalate``: the policy's ``escalate_to`` may decide too from now on;
``decline``: nobody decided before the question's time to live ran out, and its policy declines then."""
FOLLOW_UPS: tuple[FollowUp, ...] = ("remind", "escalate", "decline")


def _moments(question: Question) -> dict[FollowUp, datetime]:
    """When each follow-up of the question's policy that has not happened yet is due (reminders and escalations due
    at or after the question expires never are)."""
    policy, asked, expires = question.policy, question.asked_at, question.expires_at
    if policy is None or asked is None or question.decision is not None:
        return {}
    moments: dict[FollowUp, datetime] = {}
    if policy.remind_after is not None and question.reminded_at is None:
        moments["remind"] = asked + policy.remind_after
    if policy.escalate_after is not None and question.escalated_at is None:
        moments["escalate"] = asked + policy.escalate_after
    if expires is not None:
        moments = {what: moment for what, moment in moments.items() if moment < expires}
        if policy.on_timeout == "decline":
            moments["decline"] = expires
    return moments


def due(question: Question, now: datetime) -> tuple[FollowUp, ...]:
    """The follow-ups due on ``question`` at ``now``, in the order of ``FOLLOW_UPS``: none once it is decided; only
    ``decline`` (when its policy says so) once it expired."""
    moments = _moments(question)
    if question.expired(now):
        return ("decline",) if "decline" in moments else ()
    return tuple(what for what in FOLLOW_UPS if what in moments and now >= moments[what])


def next_at(question: Question) -> datetime | None:
    """When the question's next follow-up is due, or ``None`` when none is left."""
    return min(_moments(question).values(), default=None)
