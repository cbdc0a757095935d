"""Recording an approval policy's follow-ups: reminders, escalations and declines on timeout, each once.

[`sweep`][tarry.store.follow_ups.sweep] takes one due question per transaction: on PostgreSQL it locks the question's
row with ``SKIP LOCKED`` (a question another sweep, or a decision, holds is left to it), on SQLite writes take turns.
Each follow-up is written by one function of its own, [`record_reminder`][tarry.store.follow_ups.record_reminder],
[`record_escalation`][tarry.store.follow_ups.record_escalation] and
[`record_timeout_decline`][tarry.store.follow_ups.record_timeout_decline], in the sweep's transaction: what it
records on the question and its row on the trail (channel ``policy``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, bindparam, select, update

from tarry.calls import TIMEOUT_NOTE
from tarry.follow_ups import FollowUp, due, next_at
from tarry.questions import Question
from tarry.store.audit import record_attempt
from tarry.store.deciding import LOCKED_QUESTION, Attempt, read_question, record_decision
from tarry.store.moment import NOW, lease_values
from tarry.store.tables import UNDECIDED_BY_KEY, questions


@dataclass(frozen=True)
class FollowedUp:
    """One follow-up a sweep recorded: what (``remind``, ``escalate`` or ``decline``), when, and the question as it
    left it (its ``reminded_at``, ``escalated_at`` and ``escalated_to``, or its decline)."""

    what: FollowUp
    at: datetime
    question: Question


_DUE = (
    select(questions.c.id)
    .where(questions.c.follow_up_at <= NOW, questions.c.decision.is_(None))
    .order_by(questions.c.follow_up_at)
    .limit(1)
)
"""The undecided question whose follow-up has been due longest (by the lease clock), through the partial index."""
_DUE_LOCKED = _DUE.with_for_update(key_share=True, skip_locked=True)
_SET_NEXT = (
    update(questions)
    .where(questions.c.id == bindparam("followed_question"))
    .values(follow_up_at=bindparam("next_follow_up", type_=questions.c.follow_up_at.type))
)


def any_due(connection: Connection) -> bool:
    """Whether a follow-up is due on some undecided question: a read, so that a sweep with nothing to do writes
    nothing (on SQLite it would take the database's write lock)."""
    return connection.execute(_DUE, lease_values()).first() is not None


def sweep_one(connection: Connection, *, postgres: bool) -> list[FollowedUp] | None:
    """Record every follow-up due on one question whose follow-up is due, in this transaction; ``None`` when no
    question's is (or each one's row is locked by another process)."""
    found = connection.execute(_DUE_LOCKED if postgres else _DUE, lease_values()).first()
    if found is None:
        return None
    row, question, _, closed = read_question(connection, LOCKED_QUESTION, found.id)
    now: datetime = row["now"]
    done: list[FollowedUp] = []
    for what in due(question, now):
        if closed:  # its call ended without a decision (cancelled, lapsed): nothing is left to follow up
            break
        if what == "remind":
            question = record_reminder(connection, question, now)
        elif what == "escalate":
            question = record_escalation(connection, question, now)
        else:
            question = record_timeout_decline(connection, question, row["tool_call_id"], now, postgres=postgres)
        done.append(FollowedUp(what, now, question))
    later = next_at(question)
    follow_up = later if later is not None and later > now and not closed else None
    connection.execute(_SET_NEXT, {"followed_question": question.id, "next_follow_up": follow_up})
    return done


def record_reminder(connection: Connection, question: Question, now: datetime) -> Question:
    """Record that the question was reminded (once: its ``reminded_at``) and put it on the trail; returns the question
    as it leaves it."""
    connection.execute(_MARK, {"followed_question": question.id, **_marks(question, reminded_at=now)})
    record_attempt(connection, question, "remind", "reminded", at=now, by=None, channel="policy")
    return replace(question, reminded_at=now)


def record_escalation(connection: Connection, question: Question, now: datetime) -> Question:
    """Record that the question escalated (once: its ``escalated_at``): from now on its policy's ``escalate_to`` may
    decide it too. Puts it on the trail, naming them; returns the question as it leaves it."""
    connection.execute(_MARK, {"followed_question": question.id, **_marks(question, escalated_at=now)})
    escalated = replace(question, escalated_at=now)
    detail = "escalated to " + ", ".join(escalated.escalated_to)
    record_attempt(connection, question, "escalate", "escalated", at=now, by=None, channel="policy", detail=detail)
    return escalated


def record_timeout_decline(
    connection: Connection, question: Question, call_row: int | None, now: datetime, *, postgres: bool
) -> Question:
    """Record the decline its policy makes of a question nobody decided in time (``on_timeout="decline"``): by
    nobody, through the channel ``policy``, with the note ``TIMEOUT_NOTE``. As any decision, it bumps the call's
    version, wakes the chat and goes on the trail. Returns the question as it leaves it."""
    attempt = Attempt(question.id, "decline", lambda _: None, TIMEOUT_NOTE, None, "policy")
    settled = record_decision(connection, question, attempt, call_row, now, postgres=postgres)
    assert settled.question is not None
    return settled.question


_MARK = (
    update(questions)
    .where(questions.c.id == bindparam("followed_question"), UNDECIDED_BY_KEY)
    .values(
        reminded_at=bindparam("mark_reminded", type_=questions.c.reminded_at.type),
        escalated_at=bindparam("mark_escalated", type_=questions.c.escalated_at.type),
    )
)


def _marks(question: Question, **now: Any) -> dict[str, Any]:
    """The parameters of ``_MARK``: the question's reminded and escalated times, with the one named in ``now`` set."""
    return {
        "mark_reminded": now.get("reminded_at", question.reminded_at),
        "mark_escalated": now.get("escalated_at", question.escalated_at),
    }
