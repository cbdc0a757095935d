"""``call_state``: where a tool call stands, computed from its record alone."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tarry import Question, Verdict
from tarry.calls import CallRecord, CallState, call_state
from tarry.messages import Message, ToolCall
from tarry.questions import Decision
from tarry.tasks import Task

NOW = datetime(2026, 1, 1, tzinfo=UTC)
LATER = NOW + timedelta(minutes=5)
EARLIER = NOW - timedelta(minutes=5)


def record(*questions: Question, task: Task | None = None, result: Message | None = None) -> CallRecord:
    return CallRecord(
        ToolCall(id="c1", name="pay", arguments={}),
        needs_approval=any(question.kind == "approval" for question in questions),
        questions=list(questions),
        task=task,
        result=result,
    )


def verdict(decision: Decision | None, note: str | None, answer: dict[str, Any] | None) -> Verdict | None:
    return None if decision is None else Verdict(decision, EARLIER, answer=answer, note=note)


def approval(
    decision: Decision | None = None, note: str | None = None, answer: dict[str, Any] | None = None, **given: Any
) -> Question:
    return Question(id="q1", kind="approval", message="Approve?", verdict=verdict(decision, note, answer), **given)


def form(
    decision: Decision | None = None, note: str | None = None, answer: dict[str, Any] | None = None, **given: Any
) -> Question:
    return Question(id="q2", kind="form", message="Which?", verdict=verdict(decision, note, answer), **given)


def waiting_on(*questions: Question, expires_at: datetime | None = None) -> Task:
    class Expiring(Task):
        @property
        def expires_at(self) -> datetime | None:
            return expires_at

    return Expiring().with_question(*questions)


@pytest.mark.parametrize(
    ("given", "state"),
    [
        (record(), CallState.RUNS),
        (record(result=Message("tool", "done", tool_call_id="c1")), CallState.CLOSED),
        (record(approval()), CallState.WAITS_ON_APPROVAL),
        (record(approval(expires_at=LATER)), CallState.WAITS_ON_APPROVAL),
        (record(approval(decision="accept")), CallState.RUNS),
        (record(approval(decision="decline")), CallState.CLOSES),
        (record(approval(decision="cancel")), CallState.CLOSES),
        (record(approval(expires_at=EARLIER)), CallState.CLOSES),
        (record(task=waiting_on()), CallState.RUNS),
        (record(task=waiting_on(form())), CallState.WAITS_ON_QUESTION),
        (record(task=waiting_on(form(decision="accept"))), CallState.RUNS),
        (record(task=waiting_on(form(decision="decline"))), CallState.CLOSES),
        (record(task=waiting_on(form(expires_at=EARLIER))), CallState.CLOSES),
        (record(task=waiting_on(form(source="server"))), CallState.WAITS_ON_QUESTION),
        (record(task=waiting_on(form(source="server", decision="decline"))), CallState.RUNS),
        (record(task=waiting_on(expires_at=EARLIER)), CallState.CLOSES),
        (record(approval(decision="accept"), task=waiting_on(form())), CallState.WAITS_ON_QUESTION),
    ],
)
def test_each_record_has_one_state(given: CallRecord, state: CallState) -> None:
    assert call_state(given, NOW).state is state


def test_a_call_whose_tool_ran_this_round_waits_on_work_instead_of_running_again() -> None:
    assert call_state(record(), NOW, checked=True).state is CallState.WAITS_ON_WORK
    assert call_state(record(task=waiting_on()), NOW, checked=True).state is CallState.WAITS_ON_WORK
    assert call_state(record(task=waiting_on(form())), NOW, checked=True).state is CallState.WAITS_ON_QUESTION


def test_a_closing_call_says_why_and_keeps_the_decline_note() -> None:
    declined = call_state(record(approval(decision="decline", note="too much")), NOW)
    assert (declined.reason, declined.note) == ("The user declined the pay call.", "too much")
    lapsed = call_state(record(approval(expires_at=EARLIER)), NOW)
    assert lapsed.reason == "Nobody approved the pay call in time; the approval lapsed."
    expired = call_state(record(task=waiting_on(expires_at=EARLIER)), NOW)
    assert expired.reason == "The pay task expired before it finished."


def test_call_state_changes_nothing() -> None:
    task = waiting_on(form(decision="accept", answer={"choice": "a"}))
    given = record(approval(decision="accept"), task=task)
    before = (list(given.questions), given.task, task.answer)
    call_state(given, NOW)
    assert (list(given.questions), given.task, task.answer) == before
