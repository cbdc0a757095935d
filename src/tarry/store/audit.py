"""The audit trail: one append-only row per attempt to decide a question, and reading it back.

Rows are only ever inserted, in the transaction of the attempt they describe; nothing in tarry
updates or deletes them. An attempt that lost (another decision came first, the question had
expired, a policy refused it) is recorded too, with what stopped it. Each row is chained by a hash
to the one before it in its lane, one of several chains chosen by the row's chat
(``tarry.store.chain``), so ``verify_trail`` finds a row changed, removed or inserted by anything
but tarry.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from sqlalchemy import (
    CTE,
    ColumnElement,
    Connection,
    Insert,
    Join,
    RowMapping,
    Select,
    Text,
    bindparam,
    cast,
    func,
    insert,
    null,
    or_,
    select,
)

from tarry.principals import Channel, Principal
from tarry.questions import Decision, Question, QuestionKind
from tarry.store.chain import APPEND, FIELDS, GENESIS, JSON_FIELDS, content_of, lane_of, row_hash, time_text
from tarry.store.tables import constant, decision_events, tool_calls
from tarry.store.text import read_text, stored_text

AttemptOutcome = Literal["decided", "counted", "lost", "expired", "refused", "running", "reminded", "escalated"]
"""What came of an attempt.

``decided``: the decision was recorded; ``counted``: an approval was counted and more people must
approve; ``lost``: another decision came first (or the call had ended); ``expired``: the
question's time ran out; ``refused``: its approval policy refused the person; ``running``: a
decline came while the call ran; ``reminded`` and ``escalated``: the question's approval policy reminded or escalated
it (``TrailAction`` ``remind`` and ``escalate``, channel ``policy``).
"""
TrailAction = Decision | Literal["remind", "escalate"]
"""What an event of the trail tried: a decision, or one of an approval policy's follow-ups (``remind``,
``escalate``; a decline on timeout is a ``decline``)."""


@dataclass(frozen=True)
class DecisionEvent:
    """One attempt to decide a question, as the audit trail keeps it.

    The question as it was shown (``message``, the call's ``tool`` and ``arguments``), the
    ``decision`` tried, its ``outcome``, the ``answer`` values (secret fields redacted) or the
    decline ``note``, who (``by``; ``None``: no identity given), through what (``channel``),
    when (``at``), and for a lost attempt what stopped it (``detail``).
    """

    id: int
    at: datetime
    chat_id: str
    question_id: str
    kind: QuestionKind
    message: str
    call_id: str | None
    tool: str | None
    arguments: dict[str, Any] | None
    decision: TrailAction
    outcome: AttemptOutcome
    answer: dict[str, Any] | None
    note: str | None
    by: Principal | None
    channel: Channel
    detail: str | None
    lane: int | None = None
    """Which of the trail's hash chains the event is in, by its chat (``None``: a row tarry did not write)."""
    seq: int | None = None
    """The event's place in its lane (``None``: a row tarry did not write)."""
    hash: str | None = None
    """The SHA-256 of the event's content and of the hash of the event before it in its lane, in hex."""

    def to_dict(self) -> dict[str, Any]:
        """The event as JSON-safe data (the time as ISO 8601 text)."""
        return {
            "id": self.id,
            "at": self.at.isoformat(),
            "chat_id": self.chat_id,
            "question_id": self.question_id,
            "kind": self.kind,
            "message": self.message,
            "call_id": self.call_id,
            "tool": self.tool,
            "arguments": self.arguments,
            "decision": self.decision,
            "outcome": self.outcome,
            "answer": self.answer,
            "note": self.note,
            "by": None if self.by is None else self.by.to_dict(),
            "channel": self.channel,
            "detail": self.detail,
        }

    def to_record(self) -> dict[str, Any]:
        """``to_dict`` with the event's place in the trail's hash chains (``lane``, ``seq``) and its ``hash``: a line
        of the trail's export to a log system."""
        return {**self.to_dict(), "lane": self.lane, "seq": self.seq, "hash": self.hash}


TrailDamage = Literal["changed", "removed", "inserted"]
"""How the trail was tampered with at a row: ``changed`` (the row's content, or its place, no longer matches its
hash), ``removed`` (rows before it in its lane are gone) or ``inserted`` (a row tarry did not write)."""


@dataclass(frozen=True)
class TrailBreak:
    """The first place where the trail is not as tarry wrote it: the event's ``id``, its ``lane`` and place in the
    lane (``seq``; both ``None`` for a row outside the chains), ``how`` it was tampered with and a sentence saying
    so (``detail``)."""

    id: int
    lane: int | None
    seq: int | None
    how: TrailDamage
    detail: str

    def to_dict(self) -> dict[str, Any]:
        """The break as JSON-safe data."""
        return {"id": self.id, "lane": self.lane, "seq": self.seq, "how": self.how, "detail": self.detail}


def record_attempt(
    connection: Connection,
    question: Question,
    decision: TrailAction,
    outcome: AttemptOutcome,
    *,
    at: datetime,
    by: Principal | None,
    channel: Channel,
    answer: dict[str, Any] | None = None,
    note: str | None = None,
    detail: str | None = None,
) -> None:
    """Append one attempt on ``question`` to the trail; secret answer fields are redacted here."""
    values = attempt_values(
        question, decision, outcome, at=at, by=by, channel=channel, answer=answer, note=note, detail=detail
    )
    append_event(connection, values)


def append_event(connection: Connection, values: Mapping[str, Any]) -> None:
    """Append one row (its columns but the id and the chain's) to the trail, chained after the last one of its lane.

    On PostgreSQL the table's trigger chains it (``APPEND`` asks it to); on SQLite, whose writes
    take turns, its lane, place and hash are computed here from the lane's last row.
    """
    if connection.dialect.name != "sqlite":
        connection.execute(INSERT_EVENT, {**values, "seq": APPEND})
        return
    lane = lane_of(values["chat_id"])
    last = connection.execute(_LAST_LINK, {"of_lane": lane}).first()
    seq, previous = (1, GENESIS) if last is None else (last.seq + 1, last.hash)
    link = {"lane": lane, "seq": seq, "hash": row_hash(lane, seq, previous, content_of(values))}
    connection.execute(INSERT_EVENT, {**values, **link})


_LAST_LINK = (
    select(decision_events.c.seq, decision_events.c.hash)
    .where(decision_events.c.lane == bindparam("of_lane"), decision_events.c.seq > constant(APPEND))
    .order_by(decision_events.c.seq.desc())
    .limit(1)
)


def attempt_values(
    question: Question,
    decision: TrailAction,
    outcome: AttemptOutcome,
    *,
    at: datetime,
    by: Principal | None,
    channel: Channel,
    answer: dict[str, Any] | None,
    note: str | None,
    detail: str | None = None,
) -> dict[str, Any]:
    """The columns of the trail's row for one attempt on ``question`` (secret answer fields redacted)."""
    call = question.tool_call
    return {
        "chat_id": question.chat_id,
        "question_id": question.id,
        "call_id": None if call is None else call.id,
        "tool": None if call is None else call.name,
        "arguments": None if call is None else dict(call.arguments),
        "kind": question.kind,
        "message": stored_text(question.message),
        **attempt_columns(
            decision, outcome, at=at, by=by, channel=channel, answer=question.redact(answer), note=note, detail=detail
        ),
    }


def attempt_columns(
    decision: TrailAction,
    outcome: AttemptOutcome,
    *,
    at: datetime,
    by: Principal | None,
    channel: Channel,
    answer: dict[str, Any] | None,
    note: str | None,
    detail: str | None = None,
) -> dict[str, Any]:
    """The columns of the trail's row that the attempt gives, not the question (``answer`` as it is recorded)."""
    return {
        "at": at,
        "decision": decision,
        "outcome": outcome,
        "answer": answer,
        "note": note,
        "by_id": None if by is None else by.id,
        "by_name": None if by is None else by.name,
        "channel": channel,
        "detail": detail,
    }


TRAIL_TABLE = decision_events.name
"""The name of the trail's table."""
INSERT_EVENT = insert(decision_events)
"""Appends one row to the trail (built once): ``append_event`` gives it the chain's columns."""
_CHAINED: dict[str, ColumnElement[Any]] = {"seq": constant(APPEND)}
"""The chain's columns of a row a PostgreSQL statement appends: its trigger fills them in (the hash too)."""
_CONTENT = [column for column in decision_events.c if column.name not in ("id", "lane", "seq", "hash")]
INSERT_EVENT_BOUND = INSERT_EVENT.values(
    {**{column.name: bindparam(f"event_{column.name}", type_=column.type) for column in _CONTENT}, **_CHAINED}
)
"""PostgreSQL: ``INSERT_EVENT`` taking its values from parameters named ``event_<column>``, to run inside a larger
statement."""


def insert_event_from(source: Any, taken: Mapping[str, ColumnElement[Any]] | None = None) -> Insert:
    """PostgreSQL: ``INSERT_EVENT_BOUND`` writing one row for each row ``source`` (a CTE, or a join) returns: none
    when it returns none. ``taken``: the columns whose values come from ``source``'s rows instead of parameters.

    Rows of several chats go in ordered by lane: the trigger locks each row's lane until the
    commit, so two statements that append to the same lanes take their locks in one order and
    cannot deadlock.
    """
    taken = {**(taken or {}), **_CHAINED}
    columns = [*_CONTENT, decision_events.c.seq]
    values = (taken.get(column.name, bindparam(f"event_{column.name}", type_=column.type)) for column in columns)
    rows = select(*values).select_from(source)
    if "chat_id" in taken:
        rows = rows.order_by(func.tarry_trail_lane(taken["chat_id"]))
    return insert(decision_events).from_select([column.name for column in columns], rows)


def with_its_call(decided: CTE) -> Join:
    """``decided``, a CTE that returns whole question rows, joined with each question's call (none for a chat's own)."""
    return decided.outerjoin(tool_calls, tool_calls.c.id == decided.c.tool_call_id)


def insert_event_of_decided(decided: CTE, *, decisions_too: bool = False) -> Insert:
    """``insert_event_from`` for ``decided``, a CTE that returns whole question rows: the columns of the trail's
    row that describe the question (its chat, kind, message and call) come from the row and its call, and the
    outcome is ``decided``.

    ``decisions_too``: so do the ones that describe the decision each row records (when, what, the
    answer, the note, who, through what), for a statement that decides several questions.
    """
    of_the_question: dict[str, ColumnElement[Any]] = {
        "chat_id": decided.c.chat_id,
        "question_id": decided.c.id,
        "call_id": tool_calls.c.call_id,
        "tool": tool_calls.c.name,
        "arguments": tool_calls.c.arguments,
        "kind": decided.c.kind,
        "message": decided.c.message,
        "outcome": constant("decided"),
        "detail": null(),
    }
    if decisions_too:
        of_the_question |= {
            "at": decided.c.decided_at,
            "decision": decided.c.decision,
            "answer": decided.c.answer,
            "note": decided.c.note,
            "by_id": decided.c.decided_by,
            "by_name": decided.c.decided_by_name,
            "channel": decided.c.channel,
        }
    return insert_event_from(with_its_call(decided), of_the_question)


TRAIL = decision_events.name
"""The trail's table, by name."""


def read_history(
    connection: Connection,
    chat_id: str | None,
    question_id: str | None,
    after: int | None,
    limit: int | None,
) -> list[DecisionEvent]:
    """The trail's events, oldest first, of one chat or question when named, after event id ``after``."""
    query = select(decision_events).order_by(decision_events.c.id)
    if chat_id is not None:
        query = query.where(decision_events.c.chat_id == chat_id)
    if question_id is not None:
        query = query.where(decision_events.c.question_id == question_id)
    if after is not None:
        query = query.where(decision_events.c.id > after)
    if limit is not None:
        query = query.limit(limit)
    return _events(connection, query)


def _events(connection: Connection, query: Select[Any]) -> list[DecisionEvent]:
    return [
        DecisionEvent(
            id=row["id"],
            at=row["at"],
            chat_id=row["chat_id"],
            question_id=row["question_id"],
            kind=row["kind"],
            message=read_text(row["message"]),
            call_id=row["call_id"],
            tool=row["tool"],
            arguments=row["arguments"],
            decision=row["decision"],
            outcome=row["outcome"],
            answer=row["answer"],
            note=row["note"],
            by=None if row["by_id"] is None else Principal(row["by_id"], row["by_name"]),
            channel=row["channel"],
            detail=row["detail"],
            lane=row["lane"],
            seq=row["seq"],
            hash=row["hash"],
        )
        for row in connection.execute(query).mappings()
    ]


def verify_trail(connection: Connection) -> TrailBreak | None:
    """The first place where the trail is not as tarry wrote it, or ``None`` when every row is.

    Walks each lane by place, checking that its places run 1, 2, 3... with no gap (a gap: rows
    removed), that each row is in its chat's lane and that its hash is that of its content and of
    the hash before it in the lane (a mismatch: the row was changed, or one was put in its place),
    then looks for rows outside the chains (inserted by anything but tarry). Of the breaks found,
    the one at the oldest event is returned. The newest rows of a lane removed leave no trace here:
    keep the last hashes elsewhere (``tarry history --jsonl`` to a log system) to tell; on
    PostgreSQL the trail's trigger refuses to remove any row.
    """
    found: list[TrailBreak] = []
    lane: int | None = None
    expected, previous = 1, GENESIS
    for row in connection.execute(_CHAIN).mappings():
        if row["lane"] != lane:
            lane, expected, previous = row["lane"], 1, GENESIS
        elif expected == 0:  # this lane broke already: its first break is the one to tell
            continue
        broken = _link_break(row, expected, previous)
        if broken is not None:
            found.append(broken)
            expected = 0
        else:
            expected, previous = row["seq"] + 1, row["hash"]
    outside = connection.scalar(_OUTSIDE)
    if outside is not None:
        found.append(
            TrailBreak(outside, None, None, "inserted", f"event {outside} is not in the chain: tarry did not write it")
        )
    return min(found, key=lambda broken: broken.id, default=None)


def _link_break(row: RowMapping, expected: int, previous: str) -> TrailBreak | None:
    """What is wrong with ``row`` where its lane's walk expects place ``expected`` after the hash ``previous``."""
    event, lane, seq = row["id"], row["lane"], row["seq"]
    if seq != expected:
        gone = f"place {expected}" if seq == expected + 1 else f"places {expected} to {seq - 1}"
        return TrailBreak(event, lane, seq, "removed", f"lane {lane}'s rows at {gone}, before event {event}, are gone")
    content = {name: row[name] for name in FIELDS}
    content["at"] = time_text(row["at"])
    if lane != lane_of(row["chat_id"]) or row_hash(lane, seq, previous, content) != row["hash"]:
        where = f"lane {lane}, place {seq}"
        detail = f"event {event} ({where}) does not match its hash: changed, or not the row tarry wrote there"
        return TrailBreak(event, lane, seq, "changed", detail)
    return None


_CHAIN = (
    select(
        decision_events.c.id,
        decision_events.c.lane,
        decision_events.c.seq,
        decision_events.c.hash,
        *(
            cast(decision_events.c[name], Text).label(name) if name in JSON_FIELDS else decision_events.c[name]
            for name in FIELDS
        ),
    )
    .where(decision_events.c.lane.is_not(None), decision_events.c.seq > constant(APPEND))
    .order_by(decision_events.c.lane, decision_events.c.seq)
)
"""The chains' rows, each lane in order, JSON fields as the text the database keeps."""
_OUTSIDE = (
    select(decision_events.c.id)
    .where(
        or_(
            decision_events.c.lane.is_(None),
            decision_events.c.seq.is_(None),
            decision_events.c.seq <= constant(APPEND),
            decision_events.c.hash.is_(None),
        )
    )
    .order_by(decision_events.c.id)
    .limit(1)
)
"""The oldest row outside the chains: one tarry did not write."""
