"""Approving a chat's whole turn at once: every open question of its waiting calls in one transaction, or none."""

from __future__ import annotations

from sqlalchemy import Connection, select

from tarry.approvals import MayDecide
from tarry.errors import ChatNotFoundError, NotDecidableError
from tarry.principals import Channel, Principal
from tarry.questions import Question
from tarry.store.deciding import Attempt, Settled, decide_question
from tarry.store.tables import chats, questions, tool_calls

_OPEN_OF_CHAT = (
    select(questions.c.id, questions.c.kind, tool_calls.c.name)
    .join(tool_calls, questions.c.tool_call_id == tool_calls.c.id)
    .order_by(questions.c.id)  # the order every decision takes its questions' locks in
    .with_for_update(of=questions, key_share=True)
)
"""The undecided questions of a chat's open calls, locked in id order (parameter: the chat's id)."""


def approve_turn(
    connection: Connection, chat_id: str, by: Principal | None, channel: Channel, may_decide: MayDecide | None
) -> list[Settled]:
    """Approve every undecided question of the chat's open calls in this transaction, or raise and record nothing.

    The questions are locked in id order, then each is decided as ``decide_question`` decides one alone (the
    same rules, the same approval policy, its own row on the trail). The first that cannot be decided raises
    [`NotDecidableError`][tarry.errors.NotDecidableError] naming it and its tool, which rolls the whole
    transaction back (the trail's rows of the others too): with the refusal a single decision gets as its
    ``reason``, or none for a form, a link, or an approval this one would only count.
    A chat's own questions (a login before any call) are no call's and are left alone. Returns what each
    decision came to, in id order; an empty list when nothing waits. Raises
    [`ChatNotFoundError`][tarry.errors.ChatNotFoundError] for an unknown chat.
    """
    if connection.scalar(select(chats.c.id).where(chats.c.id == chat_id)) is None:
        raise ChatNotFoundError(f"No chat has the id {chat_id!r}")
    query = _OPEN_OF_CHAT.where(
        tool_calls.c.chat_id == chat_id, tool_calls.c.result_message_id.is_(None), questions.c.decision.is_(None)
    )
    found = connection.execute(query).all()
    for row in found:  # a form or a link anywhere in the turn stops it before any attempt
        if row.kind != "approval":
            stop = "it is a form to fill in" if row.kind == "form" else "it is a link to open"
            raise NotDecidableError(_stopped(chat_id, row.id, row.name, f"{stop}; decide it on its own"), row.id)
    settled: list[Settled] = []
    postgres = connection.dialect.name == "postgresql"
    for row in found:
        attempt = Attempt(row.id, "accept", Question.check_answer, None, by, channel)
        outcome = decide_question(connection, attempt, may_decide, postgres=postgres)
        settled.append(_decided(chat_id, row.id, row.name, outcome))
    return settled


def _decided(chat_id: str, question_id: str, tool: str, outcome: Settled) -> Settled:
    """``outcome`` when it decided its question; else the error that says why, naming the question."""
    if outcome.refusal is not None:
        why = _stopped(chat_id, question_id, tool, str(outcome.refusal))
        raise NotDecidableError(why, question_id, outcome.refusal) from outcome.refusal
    question = outcome.question
    if question is None:  # decided, or its call ended, by another process between the listing and this attempt
        why = "it was decided, or its call ended, meanwhile"
        raise NotDecidableError(_stopped(chat_id, question_id, tool, why), question_id)
    if question.decision is None:
        assert question.policy is not None
        why = (
            f"it needs {question.policy.count} people's approval, and this one would be "
            f"{len(question.votes)} of {question.policy.count}; approve it on its own to count it"
        )
        raise NotDecidableError(_stopped(chat_id, question_id, tool, why), question_id)
    return outcome


def _stopped(chat_id: str, question_id: str, tool: str, why: str) -> str:
    return f"Nothing approved in chat {chat_id}: question {question_id} ({tool}) cannot be approved: {why}"
