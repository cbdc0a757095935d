"""The audit trail: one append-only row per attempt to decide a question, and reading it back.

Rows are only ever inserted, in the transaction of the attempt they describe; nothing in tarry
updates them, and only a prune that is told not to keep the trail deletes the rows of the chats it
removes (``remove_trail``). An attempt that lost (another decision came first, the question had
expired, a policy refused it) is recorded too, with what stopped it.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from sqlalchemy import CTE, ColumnElement, Connection, Insert, Join, Select, bindparam, delete, insert, null, select

from tarry.principals import Channel, Principal
from tarry.questions import Decision, Question, QuestionKind
from tarry.store.tables import constant, decision_events, tool_calls
from tarry.store.text import read_text, stored_text

AttemptOutcome = Literal["decided", "counted", "lost", "expired", "refused", "running"]
"""What came of an attempt.

``decided``: the decision was recorded; ``counted``: an approval was counted and more people must
approve; ``lost``: another decision came first (or the call had ended); ``expired``: the
question's time ran out; ``refused``: its approval policy refused the person; ``running``: a
decline came while the call ran.
"""


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
    decision: Decision
    outcome: AttemptOutcome
    answer: dict[str, Any] | None
    note: str | None
    by: Principal | None
    channel: Channel
    detail: str | None

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


def record_attempt(
    connection: Connection,
    question: Question,
    decision: Decision,
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
    connection.execute(INSERT_EVENT, values)


def attempt_values(
    question: Question,
    decision: Decision,
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
    decision: Decision,
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


INSERT_EVENT = insert(decision_events)
"""Appends one row to the trail (built once)."""
INSERT_EVENT_BOUND = INSERT_EVENT.values(
    {column.name: bindparam(f"event_{column.name}", type_=column.type) for column in decision_events.c
     if column.name != "id"}
)  # fmt: skip
"""``INSERT_EVENT`` taking its values from parameters named ``event_<column>``, to run inside a larger statement."""


def insert_event_from(source: Any, taken: Mapping[str, ColumnElement[Any]] | None = None) -> Insert:
    """``INSERT_EVENT_BOUND`` writing one row for each row ``source`` (a CTE, or a join) returns: none when it
    returns none. ``taken``: the columns whose values come from ``source``'s rows instead of parameters."""
    taken = taken or {}
    columns = [column for column in decision_events.c if column.name != "id"]
    values = (taken.get(column.name, bindparam(f"event_{column.name}", type_=column.type)) for column in columns)
    return insert(decision_events).from_select([column.name for column in columns], select(*values).select_from(source))


def with_its_call(decided: CTE) -> Join:
    """``decided``, a CTE that returns whole question rows, joined with each question's call (none for a chat's own)."""
    return decided.outerjoin(tool_calls, tool_calls.c.id == decided.c.tool_call_id)


def insert_event_of_decided(decided: CTE, *, decisions_too: bool = False) -> Insert:
    """``insert_event_from`` for ``decided``, a CTE that returns whole question rows: the columns of the trail's
    row that describe the question (its chat, kind, message and call) come from the row and its call.

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
            "outcome": constant("decided"),
            "detail": null(),
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


def trail_of(connection: Connection, chat_ids: Collection[str]) -> list[DecisionEvent]:
    """The trail's events of the chats ``chat_ids`` names, oldest first."""
    query = select(decision_events).where(decision_events.c.chat_id.in_(list(chat_ids)))
    return _events(connection, query.order_by(decision_events.c.id))


def remove_trail(connection: Connection, chat_ids: Collection[str]) -> int:
    """Delete the trail's events of the chats ``chat_ids`` names (a prune that does not keep it); how many went."""
    return connection.execute(delete(decision_events).where(decision_events.c.chat_id.in_(list(chat_ids)))).rowcount


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
        )
        for row in connection.execute(query).mappings()
    ]
