"""The record a chat keeps of each tool call: its approval, its pause, its questions and its result."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from enum import Enum
from typing import Any

from tarry.clock import utcnow
from tarry.decision_rules import Facts, first_stop
from tarry.messages import Message, ToolCall
from tarry.questions import Decision, Question
from tarry.tasks import Task


class Claim(Enum):
    """What a process got when it asked to run a call."""

    GRANTED = "granted"
    """The call is ours to run."""
    RECLAIMED = "reclaimed"
    """The call is ours, but an earlier process's lease ran out while it ran the call."""
    BUSY = "busy"
    """Another process (or task) runs the call right now."""
    STALE = "stale"
    """The call changed since this process last read it: read the chat again, then look again."""

    @property
    def held(self) -> bool:
        """Whether the call is this process's to run now (granted or reclaimed)."""
        return self in (Claim.GRANTED, Claim.RECLAIMED)


@dataclass(frozen=True)
class Outcome:
    """What running a call came to: a result message that ends it, or a task (and new questions) to wait on."""

    result: Message | None = None
    task: Task | None = None
    questions: tuple[Question, ...] = ()


@dataclass(eq=False)
class CallRecord:
    """Everything the chat knows about one tool call besides the transcript."""

    call: ToolCall
    needs_approval: bool = False
    questions: list[Question] = field(default_factory=list)
    task: Task | None = None
    result: Message | None = None
    running: bool = False
    """True while this process runs the call's tool code."""

    @property
    def open(self) -> bool:
        """True while the call has no result."""
        return self.result is None

    @property
    def approval(self) -> Question | None:
        """The call's approval question, when it needs one: the latest, when a person changed the call's arguments
        and its policy asked again."""
        return next((question for question in reversed(self.questions) if question.kind == "approval"), None)

    @property
    def waiting_question(self) -> Question | None:
        """The question the call's task waits on, when it waits on one."""
        return None if self.task is None else self.task.question

    def own(self, question: Question) -> Question:
        """``question``, one of the call's, asked by this record's own call object (with what the provider attached
        to it)."""
        if question.tool_call is None or question.tool_call is self.call:
            return question
        return replace(question, tool_call=self.call)

    def take(self, question: Question) -> Question:
        """Hold ``question``, the call's question with its id as recorded now, in place of the one held before (in
        the call's task's questions too); returns it as held (``own``)."""
        question = self.own(question)
        self.questions = [question if held.id == question.id else held for held in self.questions]
        if self.task is not None:
            self.task.questions = [question if held.id == question.id else held for held in self.task.questions]
        return question

    def pending_questions(self, now: datetime) -> list[Question]:
        """The call's questions nobody decided yet and whose time has not run out."""
        if not self.open:
            return []
        return [question for question in self.questions if question.is_open(now)]


class CallState(Enum):
    """Where a tool call stands, as ``call_state`` computes it from its record."""

    WAITS_ON_APPROVAL = "waits on approval"
    """A person has not approved the call yet."""
    WAITS_ON_QUESTION = "waits on a question"
    """The call's task asked a question nobody has answered yet."""
    WAITS_ON_WORK = "waits on work"
    """The call's task runs elsewhere, or was already checked in this round."""
    RUNS = "runs"
    """Carrying the call on runs tool code: its first run, or resuming its task."""
    CLOSES = "closes"
    """The call ends and no tool code runs: with an error result (declined, cancelled, lapsed or expired), or with
    the result a person gave in place of running the tool (its approval answered with ``respond``)."""
    CLOSED = "closed"
    """The call has its result."""


@dataclass(frozen=True)
class Standing:
    """A call's ``CallState``, with the words of its error result when it ``CLOSES`` (or the result a person gave)."""

    state: CallState
    reason: str | None = None
    """Why the call closes, as the model reads it."""
    note: str | None = None
    """The note a person gave when declining it."""
    given: dict[str, Any] | None = None
    """The answer of an approval a person answered with the call's result (``{"result": value}``): the call closes
    with that result, not an error."""


def call_state(record: CallRecord, now: datetime, *, checked: bool = False) -> Standing:
    """Where the call of ``record`` stands at ``now``; ``checked`` when its tool code already ran in this round.

    Pure: it reads the record, its questions and its task, and changes nothing.
    """
    call = record.call
    if not record.open:
        return Standing(CallState.CLOSED)
    approval = record.approval
    if approval is not None and approval.decision != "accept":
        return _question_standing(call, approval, now, CallState.WAITS_ON_APPROVAL)
    task = record.task
    if task is None:
        return Standing(CallState.WAITS_ON_WORK if checked else CallState.RUNS)
    if task.expires_at is not None and now >= task.expires_at:
        return Standing(CallState.CLOSES, f"The {call.name} task expired before it finished.")
    for question in task.questions:
        if question.source is None and question.decision != "accept":
            return _question_standing(call, question, now, CallState.WAITS_ON_QUESTION)
    if any(question.is_open(now) for question in task.questions):
        return Standing(CallState.WAITS_ON_QUESTION)
    return Standing(CallState.WAITS_ON_WORK if checked else CallState.RUNS)


def _question_standing(call: ToolCall, question: Question, now: datetime, waiting: CallState) -> Standing:
    if question.decision == "decline":
        if question.channel == "policy":
            return _declined_on_timeout(call, question.note, waiting)
        return Standing(CallState.CLOSES, f"The user declined the {call.name} call.", question.note)
    if question.decision == "cancel":
        return Standing(CallState.CLOSES, f"The {call.name} call was cancelled.")
    if question.decision == "respond":
        given = question.answer if question.answer is not None else {"result": None}
        reason = f"A person gave this result in place of running the {call.name} tool; the tool did not run."
        return Standing(CallState.CLOSES, reason, given=given)
    if question.expired(now):
        if question.policy is not None and question.policy.on_timeout == "decline":
            return _declined_on_timeout(call, TIMEOUT_NOTE, waiting)
        if waiting is CallState.WAITS_ON_APPROVAL:
            return Standing(CallState.CLOSES, f"Nobody approved the {call.name} call in time; the approval lapsed.")
        return Standing(CallState.CLOSES, f"Nobody answered the question of the {call.name} call in time; it lapsed.")
    return Standing(waiting)


TIMEOUT_NOTE = "Nobody decided in time."
"""The note of the decline a question's policy records when nobody decided in time (``on_timeout="decline"``)."""


def _declined_on_timeout(call: ToolCall, note: str | None, waiting: CallState) -> Standing:
    """The call closes as declined: nobody decided (or answered) in time, and its question's policy declines then."""
    if waiting is CallState.WAITS_ON_APPROVAL:
        reason = f"Nobody decided on the {call.name} call in time; its policy declined it."
    else:
        reason = f"Nobody answered the question of the {call.name} call in time; its policy declined it."
    return Standing(CallState.CLOSES, reason, note)


def check_decision(
    question: Question, decision: Decision, *, running: bool, closed: bool, now: datetime, seen: str | None = None
) -> bool:
    """Whether a decision may be recorded on ``question`` now, by [`RULES`][tarry.decision_rules.RULES] in order.

    Returns ``False`` when another decision came first, or when the question's call has
    already ended (an old question is never answered anew); raises
    [`QuestionExpiredError`][tarry.errors.QuestionExpiredError] when the question lapsed, and
    [`ToolCallRunningError`][tarry.errors.ToolCallRunningError] for declining a question whose call runs right now,
    and [`ProposalChangedError`][tarry.errors.ProposalChangedError] when ``seen`` (a digest of arguments) is not the
    digest of the arguments the question proposes now.
    ``True`` leaves the question's approval policy, if any, to [`judge`][tarry.approvals.judge].
    """
    facts = Facts(question, decision, running=running, closed=closed, now=now, seen=seen)
    rule = first_stop(facts)
    if rule is None or rule.outcome == "judged":
        return True
    if rule.error is not None:
        raise rule.error(facts)
    return False


def mint(question: Question, call: ToolCall | None, chat_id: str) -> Question:
    """``question`` as asked now in chat ``chat_id`` by ``call`` (``None``: by the chat itself): with a new id, its
    times and its asker."""
    now = utcnow()
    expires_at = question.expires_at if question.ttl is None else now + timedelta(seconds=question.ttl)
    return replace(question, id=str(uuid.uuid4()), asked_at=now, tool_call=call, chat_id=chat_id, expires_at=expires_at)
