"""Approving a chat's whole turn at once: every open question of its waiting calls in one transaction, or none."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import Connection, select

from tarry.approvals import MayDecide
from tarry.decisions import check_seen
from tarry.errors import ChatNotFoundError, NotDecidableError
from tarry.principals import Channel, Principal
from tarry.questions import Question
from tarry.store.deciding import Attempt, Settled, decide_question
from tarry.store.tables import chats, questions, tool_calls
from tarry.text import unstorable

_OPEN_OF_CHAT = (
    select(questions.c.id, questions.c.kind, tool_calls.c.name)
    .join(tool_calls, questions.c.tool_call_id == tool_calls.c.id)
    .order_by(questions.c.id)  # the order every decision takes its questions' locks in
    .with_for_update(of=questions, key_share=True)
)
"""The undecided questions of a chat's open calls, locked in id order (parameter: the chat's id)."""


def approve_turn(
    connection: Connection,
    chat_id: str,
    by: Principal | None,
    channel: Channel,
    may_decide: MayDecide | None,
    seen: Mapping[str, str] | None = None,
) -> list[Settled]:
    """Approve every undecided question of the chat's open calls in this transaction, or raise and record nothing.

    The questions are locked in id order, then each is decided as ``decide_question`` decides one alone (the
    same rules, the same approval policy, its own row on the trail). The first that cannot be decided raises
    [`NotDecidableError`][tarry.errors.NotDecidableError] naming it and its tool, which rolls the whole
    transaction back (the trail's rows of the others too): with the refusal a single decision gets as its
    ``reason``, or none for a form, a link, or an approval this one would only count.
    ``seen`` (question ids to the digests of the proposals shown) gives each question's decision its digest, for the
    rule ``changed`` to check; a question not in it (asked since) stops the turn, and an id in it that names no
    question of the chat raises ``ValueError``.
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
    if seen is not None:
        _check_shown(connection, chat_id, seen, found)
    settled: list[Settled] = []
    postgres = connection.dialect.name == "postgresql"
    for row in found:
        shown = None if seen is None else seen[row.id]
        attempt = Attempt(row.id, "accept", Question.check_answer, None, by, channel, seen=shown)
        outcome = decide_question(connection, attempt, may_decide, postgres=postgres)
        settled.append(_decided(chat_id, row.id, row.name, outcome))
    return settled


def shown_digests(seen: object) -> dict[str, str] | None:
    """``Store.approve_all``'s ``seen``, checked: question ids to digests, each as ``check_seen`` takes it."""
    if seen is None:
        return None
    if not isinstance(seen, Mapping):
        raise TypeError(f"seen maps each question's id to the digest shown, got {type(seen).__name__}")
    shown: dict[str, str] = {}
    for key, digest in seen.items():
        if not isinstance(key, str) or unstorable(key):
            raise ValueError(f"seen's keys are question ids, got {key!r}")
        checked = check_seen(digest)
        if checked is None:
            raise TypeError(f"seen gives question {key} no digest")
        shown[key] = checked
    return shown


def _check_shown(connection: Connection, chat_id: str, seen: Mapping[str, str], found: Sequence[Any]) -> None:
    """Raise unless ``seen`` names only questions of the chat and holds every question the turn would approve."""
    others = set(seen) - {row.id for row in found}  # decided meanwhile (fine), or no question of this chat
    if others:
        ours = set(connection.scalars(select(questions.c.id).where(questions.c.chat_id == chat_id)))
        strangers = sorted(others - ours)
        if strangers:
            raise ValueError(f"seen names questions that are not chat {chat_id}'s: {', '.join(strangers)}")
    for row in found:
        if row.id not in seen:
            why = "it was not among the questions you saw (asked since); look again"
            raise NotDecidableError(_stopped(chat_id, row.id, row.name, why), row.id)


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
