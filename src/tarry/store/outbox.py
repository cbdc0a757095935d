"""The outbox: notices of what happened to questions, and their deliveries, read and written in SQL.

A notice of a question asked, decided or cancelled is written by migration 0017's trigger on the questions, in
the change's own transaction (or statement); a notice of an expiry by ``notice_expiries``. A notifier
(``tarry.jobs.notifier``) then, each in one transaction: expands pending notices into deliveries
(``expand_notices``), claims due deliveries under a lease (``claim_deliveries``: ``FOR UPDATE SKIP LOCKED`` on
PostgreSQL, so two workers never take the same one; a claim's attempt is counted as it is taken, so a worker that
dies mid-send spends it), and records how each attempt went (``settle_deliveries``): sent, due again after a
backoff, or failed for good with its last error. Nothing here deletes a delivery; pruning a chat removes its
notices and their deliveries with its questions.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal

from sqlalchemy import Connection, and_, bindparam, func, literal, or_, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.sql import Select

from tarry.errors import UnknownDeliveryError
from tarry.notices import NOTICE_EVENTS, Delivery, NoticeEvent
from tarry.principals import Principal
from tarry.questions import Question
from tarry.store.moment import NOW, UNTIL, lease_values
from tarry.store.rows import question_and_call_from_row
from tarry.store.tables import constant, deliveries, notices, questions, tool_calls

DeliveryState = Literal["pending", "sent", "failed"]
"""Where a delivery stands: to be tried (again), sent, or failed for good (its attempts ran out)."""
DELIVERY_STATES: tuple[DeliveryState, ...] = ("pending", "sent", "failed")


def delivery_id(notice_id: str, channel: str, recipient: str | None) -> str:
    """The delivery's id, the same on every attempt and in every process: derived from the notice, the channel and
    the recipient's id (none for an endpoint), so expanding a notice twice makes no second delivery."""
    key = "\n".join((notice_id, channel, recipient or ""))
    return "dlv_" + hashlib.sha256(key.encode()).hexdigest()[:32]


@dataclass(frozen=True)
class PlannedDelivery:
    """One delivery a notice is expanded into: the channel, whom it tells (``None``: an endpoint) and where."""

    channel: str
    recipient: Principal | None
    address: str | None


Planner = Callable[[NoticeEvent, Question], Iterable[PlannedDelivery]]
"""Turns a notice of an event on a question into its deliveries (the application's ``Routes`` and the channels)."""


@dataclass(frozen=True)
class DeliveryRecord:
    """One delivery as the store keeps it: what it tells, to whom, through what, and how its attempts went."""

    id: str
    """Stable across attempts (the webhook's ``webhook-id``)."""
    notice_id: str
    event: NoticeEvent
    question_id: str
    chat_id: str
    channel: str
    recipient: Principal | None
    address: str | None
    state: DeliveryState
    attempts: int
    """Attempts made (or under way) since it was made, or since it was last retried by hand."""
    next_attempt_at: datetime
    last_error: str | None
    sent_at: datetime | None
    created_at: datetime

    def to_dict(self) -> dict[str, Any]:
        """The delivery as the JSON API and ``tarry deliveries --json`` show it."""
        return {
            "id": self.id,
            "notice_id": self.notice_id,
            "event": self.event,
            "question_id": self.question_id,
            "chat_id": self.chat_id,
            "channel": self.channel,
            "recipient": None if self.recipient is None else self.recipient.to_dict(),
            "address": self.address,
            "state": self.state,
            "attempts": self.attempts,
            "next_attempt_at": self.next_attempt_at.isoformat(),
            "last_error": self.last_error,
            "sent_at": None if self.sent_at is None else self.sent_at.isoformat(),
            "created_at": self.created_at.isoformat(),
        }


@dataclass(frozen=True)
class Outcome:
    """How one attempt of a claimed delivery went: ``error`` is ``None`` when it was sent."""

    delivery_id: str
    attempt: int
    error: str | None


def _insert(connection: Connection, table: Any) -> Any:
    return (postgresql if connection.dialect.name == "postgresql" else sqlite).insert(table)


def _postgres(connection: Connection) -> bool:
    return connection.dialect.name == "postgresql"


_CLAIMABLE = and_(
    deliveries.c.state == constant("pending"),
    deliveries.c.next_attempt_at <= NOW,
    or_(deliveries.c.claimed_until.is_(None), deliveries.c.claimed_until < NOW),
)
"""Due, and held by nobody (or by a worker whose lease ran out: it died mid-send)."""


def _expired_unnoticed() -> Select[Any]:
    """The undecided questions whose time ran out that have no notice of it yet."""
    return select(questions.c.id).where(
        questions.c.decision.is_(None),
        questions.c.expires_at.is_not(None),
        questions.c.expires_at <= NOW,
        ~select(notices.c.id).where(notices.c.id == questions.c.id + literal(".expired")).exists(),
    )


def expiries_waiting(connection: Connection) -> bool:
    """Whether a question's time ran out with no notice of it yet (a read, before ``notice_expiries`` writes)."""
    return connection.scalar(_expired_unnoticed().limit(1), lease_values()) is not None


def work_waiting(connection: Connection, channels: Sequence[str]) -> bool:
    """Whether a notice waits to be expanded, or a delivery of ``channels`` is due and held by nobody (one read, the
    look of an idle notifier)."""
    expand = select(notices.c.id).where(notices.c.expanded_at.is_(None)).limit(1)
    send = select(deliveries.c.id).where(_CLAIMABLE, deliveries.c.channel.in_(list(channels))).limit(1)
    found = select(expand.exists().label("expand"), send.exists().label("send"))
    row = connection.execute(found, lease_values()).one()
    return bool(row.expand or row.send)


def earliest_due(connection: Connection, channels: Sequence[str]) -> datetime | None:
    """When the earliest pending delivery of ``channels`` held by nobody falls due, if any does."""
    query = select(func.min(deliveries.c.next_attempt_at)).where(
        deliveries.c.state == constant("pending"),
        deliveries.c.channel.in_(list(channels)),
        or_(deliveries.c.claimed_until.is_(None), deliveries.c.claimed_until < NOW),
    )
    found: datetime | None = connection.scalar(query, lease_values())
    return found


def notice_expiries(connection: Connection, limit: int = 500) -> int:
    """Write the notice of each undecided question whose time ran out and has none yet; returns how many.

    An expiry changes no row (a question is expired when its ``expires_at`` has passed), so this sweep writes its
    notice; the notice's id (``<question>.expired``) makes a second sweep, or another worker's, write none.
    """
    expired = select(
        (questions.c.id + literal(".expired")).label("id"),
        literal("expired").label("event"),
        questions.c.id.label("question_id"),
        questions.c.chat_id,
        questions.c.expires_at.label("noticed_at"),
    ).where(questions.c.id.in_(_expired_unnoticed().limit(limit).scalar_subquery()))
    statement = (
        _insert(connection, notices)
        .from_select(["id", "event", "question_id", "chat_id", "noticed_at"], expired)
        .on_conflict_do_nothing()
    )
    return int(connection.execute(statement, lease_values()).rowcount or 0)


def _question_rows(connection: Connection, ids: Iterable[str]) -> dict[str, Question]:
    """The questions of ``ids`` with their calls, by id."""
    wanted = sorted(set(ids))
    if not wanted:
        return {}
    query = (
        select(questions, *(tool_calls.c[name] for name in _CALL_COLUMNS), tool_calls.c.needs_approval)
        .outerjoin(tool_calls, questions.c.tool_call_id == tool_calls.c.id)
        .where(questions.c.id.in_(wanted))
    )
    return {row["id"]: question_and_call_from_row(row) for row in connection.execute(query).mappings()}


_CALL_COLUMNS = ("call_id", "name", "arguments", "claimed_by", "claimed_until", "result_message_id")


def expand_notices(connection: Connection, plan: Planner, now: datetime, limit: int = 200) -> int:
    """Expand up to ``limit`` pending notices, oldest first, into their deliveries, and mark them expanded, in this
    transaction; returns how many notices it expanded.

    On PostgreSQL the notices are taken ``FOR UPDATE SKIP LOCKED``, so two notifiers expand different ones; a
    delivery's id is derived from its notice, channel and recipient, so a notice expanded twice all the same makes
    its deliveries once. ``plan`` (the application's routes) runs inside the transaction.
    """
    pending: Select[Any] = (
        select(notices.c.id, notices.c.event, notices.c.question_id)
        .where(notices.c.expanded_at.is_(None))
        .order_by(notices.c.noticed_at)
        .limit(limit)
    )
    if _postgres(connection):
        pending = pending.with_for_update(skip_locked=True)
    taken = connection.execute(pending).all()
    if not taken:
        return 0
    asked = _question_rows(connection, (row.question_id for row in taken))
    rows: list[dict[str, Any]] = []
    for notice in taken:
        question = asked.get(notice.question_id)
        if question is None or notice.event not in NOTICE_EVENTS:
            continue
        for planned in plan(notice.event, question):
            rows.append(_delivery_row(notice.id, planned, now))
    if rows:
        connection.execute(_insert(connection, deliveries).on_conflict_do_nothing(), rows)
    connection.execute(update(notices).where(notices.c.id.in_([row.id for row in taken])).values(expanded_at=now))
    return len(taken)


def _delivery_row(notice_id: str, planned: PlannedDelivery, now: datetime) -> dict[str, Any]:
    recipient = planned.recipient
    return {
        "id": delivery_id(notice_id, planned.channel, None if recipient is None else recipient.id),
        "notice_id": notice_id,
        "channel": planned.channel,
        "recipient_id": None if recipient is None else recipient.id,
        "recipient_name": None if recipient is None else recipient.name,
        "address": planned.address,
        "state": "pending",
        "attempts": 0,
        "next_attempt_at": now,
        "created_at": now,
    }


_DIED = "its worker stopped during the last attempt, which was never recorded"


def claim_deliveries(
    connection: Connection,
    owner: str,
    lease: timedelta,
    channels: Sequence[str],
    limit: int = 100,
    max_attempts: int | None = None,
) -> list[Delivery]:
    """Claim up to ``limit`` due deliveries of ``channels`` for ``owner`` until the lease runs out, counting the
    attempt, and return them as [`Delivery`][tarry.notices.Delivery] values with their questions as they stand now.

    On PostgreSQL the rows are locked ``FOR UPDATE SKIP LOCKED`` (two workers never take one); on SQLite one writer
    at a time takes them. A worker that dies holding a claim has spent that attempt: the delivery is due again
    when the lease runs out; one whose ``max_attempts`` were all spent so (a delivery that kills its worker, say)
    is marked ``failed`` instead of claimed.
    """
    if max_attempts is not None:
        spent = (
            update(deliveries)
            .where(_CLAIMABLE, deliveries.c.channel.in_(list(channels)), deliveries.c.attempts >= max_attempts)
            .values(
                state="failed",
                claimed_by=None,
                claimed_until=None,
                last_error=func.coalesce(deliveries.c.last_error, literal(_DIED)),
            )
        )
        connection.execute(spent, lease_values())
    due = (
        select(deliveries.c.id)
        .where(_CLAIMABLE, deliveries.c.channel.in_(list(channels)))
        .order_by(deliveries.c.next_attempt_at)
        .limit(limit)
    )
    if _postgres(connection):
        due = due.with_for_update(skip_locked=True)
    claim = (
        update(deliveries)
        .where(deliveries.c.id.in_(due.scalar_subquery()))
        .values(
            claimed_by=bindparam("owner", type_=deliveries.c.claimed_by.type),
            claimed_until=UNTIL,
            attempts=deliveries.c.attempts + 1,
        )
        .returning(*deliveries.c)
    )
    claimed = connection.execute(claim, {"owner": owner, **lease_values(lease)}).mappings().all()
    if not claimed:
        return []
    events = {
        row.id: (row.event, row.question_id, row.noticed_at)
        for row in connection.execute(
            select(notices.c.id, notices.c.event, notices.c.question_id, notices.c.noticed_at).where(
                notices.c.id.in_([row["notice_id"] for row in claimed])
            )
        )
    }
    asked = _question_rows(connection, (question_id for _, question_id, _ in events.values()))
    found = []
    for row in claimed:
        event, question_id, noticed_at = events[row["notice_id"]]
        found.append(
            Delivery(
                id=row["id"],
                event=event,
                channel=row["channel"],
                question=asked[question_id],
                recipient=_recipient(row),
                address=row["address"],
                attempt=row["attempts"],
                noticed_at=noticed_at,
            )
        )
    return found


def _recipient(row: Any) -> Principal | None:
    return None if row["recipient_id"] is None else Principal(row["recipient_id"], row["recipient_name"])


def settle_deliveries(
    connection: Connection,
    owner: str,
    outcomes: Sequence[Outcome],
    now: datetime,
    *,
    max_attempts: int,
    backoff: Callable[[int], timedelta],
) -> None:
    """Record how each claimed attempt went, releasing ``owner``'s claim: sent; else due again after
    ``backoff(attempt)``, or ``failed`` with its last error once ``max_attempts`` are spent.

    An outcome of a claim ``owner`` no longer holds (its lease ran out and another worker took the delivery) is
    dropped: that worker records its own.
    """
    sent = [
        {"given_id": outcome.delivery_id, "owner": owner, "moment": now} for outcome in outcomes if not outcome.error
    ]
    if sent:
        connection.execute(_SENT, sent)
    failed = [
        {
            "given_id": outcome.delivery_id,
            "owner": owner,
            "error": outcome.error,
            "new_state": "failed" if outcome.attempt >= max_attempts else "pending",
            "retry_at": now + backoff(outcome.attempt),
        }
        for outcome in outcomes
        if outcome.error
    ]
    if failed:
        connection.execute(_FAILED, failed)


_HELD = (
    deliveries.c.id == bindparam("given_id"),
    deliveries.c.claimed_by == bindparam("owner", type_=deliveries.c.claimed_by.type),
    deliveries.c.state == constant("pending"),
)
_SENT = (
    update(deliveries)
    .where(*_HELD)
    .values(
        state="sent",
        sent_at=bindparam("moment", type_=deliveries.c.sent_at.type),
        claimed_by=None,
        claimed_until=None,
        last_error=None,
    )
)
_FAILED = (
    update(deliveries)
    .where(*_HELD)
    .values(
        state=bindparam("new_state", type_=deliveries.c.state.type),
        last_error=bindparam("error", type_=deliveries.c.last_error.type),
        next_attempt_at=bindparam("retry_at", type_=deliveries.c.next_attempt_at.type),
        claimed_by=None,
        claimed_until=None,
    )
)


def list_deliveries(
    connection: Connection, state: DeliveryState | None = None, question_id: str | None = None, limit: int = 100
) -> list[DeliveryRecord]:
    """The deliveries, newest first: all, or those in ``state``, or of one question."""
    query = (
        select(deliveries, notices.c.event, notices.c.question_id, notices.c.chat_id)
        .join(notices, notices.c.id == deliveries.c.notice_id)
        .order_by(deliveries.c.created_at.desc(), deliveries.c.id)
        .limit(limit)
    )
    if state is not None:
        query = query.where(deliveries.c.state == state)
    if question_id is not None:
        query = query.where(notices.c.question_id == question_id)
    return [_record(row) for row in connection.execute(query).mappings()]


def _record(row: Any) -> DeliveryRecord:
    return DeliveryRecord(
        id=row["id"],
        notice_id=row["notice_id"],
        event=row["event"],
        question_id=row["question_id"],
        chat_id=row["chat_id"],
        channel=row["channel"],
        recipient=_recipient(row),
        address=row["address"],
        state=row["state"],
        attempts=row["attempts"],
        next_attempt_at=row["next_attempt_at"],
        last_error=row["last_error"],
        sent_at=row["sent_at"],
        created_at=row["created_at"],
    )


def retry_delivery(connection: Connection, given_id: str, now: datetime) -> DeliveryRecord:
    """Make a delivery that failed (or waits for its next attempt) due now with a fresh count of attempts; a
    delivery already sent is left as it is. Raises [`UnknownDeliveryError`][tarry.errors.UnknownDeliveryError]
    for an id no delivery has."""
    connection.execute(
        update(deliveries)
        .where(deliveries.c.id == given_id, deliveries.c.state != constant("sent"))
        .values(state="pending", attempts=0, next_attempt_at=now)
    )
    found = delivery_by_id(connection, given_id)
    if found is None:
        raise UnknownDeliveryError(f"No delivery has the id {given_id!r}")
    return found


def delivery_by_id(connection: Connection, given_id: str) -> DeliveryRecord | None:
    """The delivery of ``given_id``, or ``None``."""
    query = (
        select(deliveries, notices.c.event, notices.c.question_id, notices.c.chat_id)
        .join(notices, notices.c.id == deliveries.c.notice_id)
        .where(deliveries.c.id == given_id)
    )
    row = connection.execute(query).mappings().first()
    return None if row is None else _record(row)


def count_pending_notices(connection: Connection) -> int:
    """How many notices wait to be expanded."""
    return int(connection.scalar(select(func.count()).where(notices.c.expanded_at.is_(None))) or 0)
