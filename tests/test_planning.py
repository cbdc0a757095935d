"""``plan``: which calls a round carries on, and which tools it lacks, computed from the call records alone."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from tarry import Question, Verdict
from tarry.calls import CallRecord, CallState
from tarry.messages import Message, ToolCall
from tarry.planning import plan
from tarry.questions import Decision
from tarry.tasks import Task

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def record(call_id: str, name: str, *questions: Question, task: Task | None = None) -> CallRecord:
    return CallRecord(ToolCall(id=call_id, name=name, arguments={}), questions=list(questions), task=task)


def approval(decision: Decision | None = None, expires_at: datetime | None = None) -> Question:
    verdict = None if decision is None else Verdict(decision, NOW)
    return Question(id="q1", kind="approval", message="Approve?", verdict=verdict, expires_at=expires_at)


def test_the_calls_that_run_or_close_are_planned_in_order_and_the_others_are_not() -> None:
    fresh = record("c1", "pay")
    waiting = record("c2", "pay", approval())
    declined = record("c3", "pay", approval(decision="decline"))
    approved = record("c4", "pay", approval(decision="accept"))
    done = record("c5", "pay")
    done.result = Message("tool", "paid", tool_call_id="c5")

    planned = plan([fresh, waiting, declined, approved, done], {"pay"}, NOW)

    assert [step.record for step in planned.steps] == [fresh, declined, approved]
    assert [step.standing.state for step in planned.steps] == [CallState.RUNS, CallState.CLOSES, CallState.RUNS]
    assert planned.missing == ()
    assert planned.claims


def test_a_call_that_paused_and_would_now_run_a_tool_the_chat_lacks_is_missing() -> None:
    approved = record("c1", "pay", approval(decision="accept"))
    declined = record("c2", "refund", approval(decision="decline"))
    never_paused = record("c3", "ship")

    planned = plan([approved, declined, never_paused], set(), NOW)

    # The call that never paused closes as an unknown tool; the declined one closes without its tool.
    assert planned.missing == ("pay",)
    assert len(planned.steps) == 3
    assert not planned.claims


def test_a_task_already_checked_in_this_round_waits_on_work() -> None:
    paused = record("c1", "build", task=Task())

    assert [step.record for step in plan([paused], {"build"}, NOW).steps] == [paused]
    assert plan([paused], {"build"}, NOW, ran={"c1"}).steps == ()


def test_an_approval_that_lapses_closes_its_call_at_the_moment_planned() -> None:
    lapsing = record("c1", "pay", approval(expires_at=NOW + timedelta(minutes=1)))

    assert plan([lapsing], {"pay"}, NOW).steps == ()
    later = plan([lapsing], {"pay"}, NOW + timedelta(minutes=2))
    assert [step.standing.state for step in later.steps] == [CallState.CLOSES]
    assert later.steps[0].standing.reason == "Nobody approved the pay call in time; the approval lapsed."
