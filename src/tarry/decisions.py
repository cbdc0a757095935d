"""Decisions on a chat's questions: the question a caller names, and recording a decision through the journal."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from tarry.calls import CallRecord
from tarry.clock import utcnow
from tarry.errors import InvalidAnswerError, NotRespondableError, UnknownQuestionError
from tarry.journal import Journal
from tarry.principals import Channel, Principal, check_channel, principal_of
from tarry.questions import Decision, Question
from tarry.text import unstorable


@dataclass(frozen=True)
class Approvals:
    """The questions ``complete()`` or ``stream()`` approve before carrying the chat on, by whom, through what."""

    questions: list[Question | str]
    by: Principal | None
    channel: Channel

    @classmethod
    def of(
        cls, verb: str, approve: Iterable[Question | str], by: str | Principal | None, channel: Channel | None
    ) -> Approvals:
        """Check a verb's ``approve``, ``by`` and ``channel`` (``"code"`` unless given)."""
        if isinstance(approve, str | Question):
            raise TypeError(f"{verb}(approve=...) takes a list of questions (or their ids), not one question")
        questions = list(approve)
        if not questions and (by is not None or channel is not None):
            raise TypeError(f"{verb}() takes by= and channel= only with approve=: they say who approves")
        return cls(questions, principal_of(by), check_channel("code" if channel is None else channel))


def check_seen(seen: object) -> str | None:
    """``seen`` as a decision takes it: the digest of the arguments the decider saw
    ([`Question.proposal_digest`][tarry.Question.proposal_digest]), 64 hexadecimal digits, or ``None``.

    Raises ``TypeError`` for one that is not text, ``ValueError`` for text that is no such digest.
    """
    if seen is None:
        return None
    if not isinstance(seen, str):
        raise TypeError(f"seen is the digest of the arguments shown (text), got {type(seen).__name__}")
    if len(seen) != 64 or any(char not in "0123456789abcdef" for char in seen):
        raise ValueError(f"seen is a proposal's digest (64 lowercase hexadecimal digits), got {seen!r}")
    return seen


def question_id(question: Question | str) -> str:
    """The id of ``question``, a [`Question`][tarry.Question] or its id."""
    wanted = question.id if isinstance(question, Question) else question
    if not isinstance(wanted, str):
        raise UnknownQuestionError(f"A question is a Question or its id, got {question!r}")
    return wanted


def find_question(wanted: str, chat_questions: Iterable[Question], records: Iterable[CallRecord]) -> Question | None:
    """The question with id ``wanted`` among the chat's own questions, then its calls' questions."""
    for candidate in chat_questions:
        if candidate.id == wanted:
            return candidate
    for record in records:
        for candidate in record.questions:
            if candidate.id == wanted:
                return candidate
    return None


async def record_decision(
    journal: Journal,
    question: Question,
    record: CallRecord | None,
    decision: Decision,
    answer: dict[str, Any] | None,
    note: str | None,
    by: Principal | None,
    channel: Channel,
    *,
    carries_on: bool = False,
    seen: str | None = None,
) -> Question | None:
    """Record a decision on ``question`` (asked by the call of ``record``, ``None`` for the chat's own) through
    ``journal``; the question as the decision left it (decided, or with one more approval counted), held in
    ``record`` in place of ``question``, or ``None`` when another decision came first.

    ``carries_on``: the chat carries the call on next, so when this decision frees it (see ``frees``),
    the journal may start the call along with the decision (``carry_on`` of ``Journal.decide``). ``seen``: the
    digest of the arguments the decider saw (``seen`` of ``Journal.decide``).
    """
    running, closed = (record.running, not record.open) if record is not None else (False, False)
    carry_on = carries_on and record is not None and frees(record, question)
    decided = await journal.decide(
        question, decision, answer, note, by, channel, running=running, closed=closed, carry_on=carry_on, seen=seen
    )
    if decided is None or record is None:
        return decided
    return record.take(decided)


def frees(record: CallRecord, question: Question) -> bool:
    """Whether a decision on ``question`` leaves the call of ``record``, which has not run yet, waiting on nothing
    else."""
    pending = [waiting.id for waiting in record.pending_questions(utcnow())]
    return record.task is None and not record.running and record.open and pending == [question.id]


def given_result(value: Any) -> dict[str, Any]:
    """The answer a ``respond`` records: ``{"result": value}``, once ``value`` is a JSON value a database can hold.

    ``value`` is kept as JSON reads it back (a tuple becomes a list). Raises
    [`InvalidAnswerError`][tarry.errors.InvalidAnswerError] under ``"result"`` for anything else: a value JSON has
    no form for (a set, a date, NaN), or text holding NUL characters or a lone surrogate.
    """
    try:
        value = json.loads(json.dumps(value, allow_nan=False))
    except (TypeError, ValueError, RecursionError) as error:
        problem = f"must be a JSON value (text, a number, a list, an object...): {error}"
        raise InvalidAnswerError({"result": problem}) from None
    held = _unstorable_in(value)
    if held is not None:
        raise InvalidAnswerError({"result": f"a result given in a tool's place cannot hold {held}"})
    return {"result": value}


def _unstorable_in(value: Any) -> str | None:
    """What in a JSON value's text (its keys too) a database cannot hold, or ``None``."""
    if isinstance(value, str):
        return unstorable(value)
    items: Iterable[Any] = ()
    if isinstance(value, dict):
        items = [*value, *value.values()]
    elif isinstance(value, list):
        items = value
    return next((held for held in map(_unstorable_in, items) if held is not None), None)


def check_respondable(question: Question, *, call_approval: bool) -> None:
    """Raise [`NotRespondableError`][tarry.errors.NotRespondableError] unless a person may give the result of
    ``question``'s call in place of running its tool: ``question`` is the approval its call waits on before it runs
    (``call_approval``: the chat's record, or the store's row, says it is that call's own approval).

    A static check of what the question is; whether it is still open is for the rules to say.
    """
    call = question.tool_call
    if call is None:
        reason = "it is a question of the chat itself, which no tool call waits on"
    elif question.awaited:
        reason = f"it was asked by the running code of the {call.name} tool, which reads its answer"
    elif question.kind != "approval":
        reason = f"it is a {'form' if question.kind == 'form' else 'link'} question of the {call.name} call: answer it"
    elif not call_approval:
        reason = f"it was asked by the task of the {call.name} call, which has run already"
    else:
        return
    raise NotRespondableError(
        f"Cannot give a result in place of question {question.id}: {reason}. Only the approval a call waits on "
        "before it runs takes its result instead of running the tool."
    )


def is_call_approval(record: CallRecord | None, question: Question) -> bool:
    """Whether ``question`` is the approval the call of ``record`` was asked to wait on before it runs."""
    approval = None if record is None else record.approval
    return record is not None and record.needs_approval and approval is not None and approval.id == question.id
