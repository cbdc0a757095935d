"""Recording a decision on a question: one transaction under the question's row lock.

Every decision goes through :func:`decide_question`, whether it comes from a chat object
(``Chat.answer`` through the store's journal) or from the store by id (``Store.answer``), so
the checks, the row lock and what a decision changes live in one place, like ``claim_call``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sqlalchemy import Connection, select, update

from tarry.calls import check_decision
from tarry.clock import utcnow
from tarry.errors import UnknownQuestionError
from tarry.questions import Decision, Question
from tarry.store.rows import call_from_row, question_from_row
from tarry.store.schedule import wake
from tarry.store.tables import questions, tool_calls

AnswerOf = Callable[[Question], dict[str, Any] | None]
"""Checks an answer against the question as stored and returns the values to record (raises when invalid)."""

_LOCKED_QUESTION = (
    select(
        questions,
        tool_calls.c.call_id,
        tool_calls.c.name,
        tool_calls.c.arguments,
        tool_calls.c.claimed_by,
        tool_calls.c.claimed_until,
        tool_calls.c.result_message_id,
    )
    .join(tool_calls, questions.c.tool_call_id == tool_calls.c.id)
    .with_for_update(of=questions)
)


def decide_question(
    connection: Connection,
    question_id: str,
    decision: Decision,
    answer_of: AnswerOf,
    note: str | None,
    *,
    postgres: bool,
) -> Question | None:
    """Record a decision under the row lock, in DESIGN's order of checks; the decided question, or ``None``.

    Unknown id (:class:`UnknownQuestionError`), then the answer (``answer_of`` validates it
    against the question as stored), then decided already (``None``), then expired
    (:class:`QuestionExpiredError`), then declining a running call (:class:`ToolCallRunningError`).
    A recorded decision bumps the call's version (a process that read the call must read it
    again) and wakes the chat.
    """
    row = connection.execute(_LOCKED_QUESTION.where(questions.c.id == question_id)).mappings().one_or_none()
    if row is None:
        raise UnknownQuestionError(f"No question has the id {question_id!r}")
    question = question_from_row(row, call_from_row(row))
    answer = answer_of(question)  # an invalid answer raises here and nothing is written
    now = utcnow()
    running = row["claimed_by"] is not None and row["claimed_until"] is not None and row["claimed_until"] > now
    closed = row["result_message_id"] is not None
    if not check_decision(question, decision, running=running, closed=closed, now=now):
        return None
    result = connection.execute(
        update(questions)
        .where(questions.c.id == question.id, questions.c.decision.is_(None))
        .values(decision=decision, answer=answer, note=note, decided_at=now)
    )
    if result.rowcount != 1:
        return None
    connection.execute(
        update(tool_calls).where(tool_calls.c.id == row["tool_call_id"]).values(version=tool_calls.c.version + 1)
    )
    wake(connection, row["chat_id"], postgres=postgres)
    question.decision, question.answer, question.note, question.decided_at = decision, answer, note, now
    return question
