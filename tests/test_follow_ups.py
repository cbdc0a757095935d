"""An approval policy's follow-ups, as data: what ``Approval`` accepts, and which follow-up is due when."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from tarry import Approval, Principal, Question
from tarry.approvals import refusal
from tarry.follow_ups import due, next_at

ASKED = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
POLICY = Approval(
    by="finance", remind_after=timedelta(minutes=10), escalate_after=timedelta(hours=1), escalate_to=("boss",)
)


def question(policy: Approval = POLICY, ttl: timedelta | None = timedelta(hours=4)) -> Question:
    expires = None if ttl is None else ASKED + ttl
    return Question("q", "approval", "Refund?", policy=policy, asked_at=ASKED, expires_at=expires)


@pytest.mark.parametrize("implicit", ["approve", "accept"])
def test_approving_on_timeout_is_refused(implicit: str) -> None:
    with pytest.raises(ValueError, match="an approval is never implicit"):
        Approval(on_timeout=implicit)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("arguments", "error", "words"),
    [
        ({"on_timeout": "ignore"}, ValueError, "on_timeout must be 'expire' or 'decline'"),
        ({"remind_after": timedelta(0)}, ValueError, "remind_after must be a positive span"),
        ({"remind_after": -5}, ValueError, "remind_after must be a positive span"),
        ({"remind_after": "10m"}, TypeError, "remind_after must be a timedelta"),
        ({"escalate_to": ("boss",)}, ValueError, "escalate_after and escalate_to go together"),
        ({"escalate_after": timedelta(hours=1)}, ValueError, "escalate_after and escalate_to go together"),
        ({"escalate_after": 60, "escalate_to": "boss"}, TypeError, "got the str 'boss'"),
        ({"escalate_after": 60, "escalate_to": ("boss", "")}, ValueError, "non-empty principal ids"),
    ],
)
def test_bad_follow_ups_are_refused_naming_what_is_wrong(
    arguments: dict[str, object], error: type[Exception], words: str
) -> None:
    with pytest.raises(error, match=words):
        Approval(**arguments)  # type: ignore[arg-type]


def test_a_policy_with_follow_ups_reads_back_as_written() -> None:
    policy = replace(POLICY, on_timeout="decline", escalate_to=["boss", "cfo"])  # type: ignore[arg-type]
    assert policy.escalate_to == ("boss", "cfo")
    assert Approval.from_dict(policy.to_dict()) == policy
    assert Approval(remind_after=90).remind_after == timedelta(seconds=90)
    assert Approval().to_dict() == {"count": 1, "by": None}  # a policy without follow-ups is stored as before


def test_each_follow_up_falls_due_in_turn_and_never_after_the_question_expired() -> None:
    asked = question()
    assert (due(asked, ASKED + timedelta(minutes=9)), next_at(asked)) == ((), ASKED + timedelta(minutes=10))
    assert due(asked, ASKED + timedelta(minutes=10)) == ("remind",)
    assert due(asked, ASKED + timedelta(hours=2)) == ("remind", "escalate")
    reminded = replace(asked, reminded_at=ASKED + timedelta(minutes=10))
    assert next_at(reminded) == ASKED + timedelta(hours=1)
    assert due(reminded, ASKED + timedelta(hours=4)) == ()  # expired: no reminder, and by default no decline
    strict = question(replace(POLICY, on_timeout="decline"))
    assert due(strict, ASKED + timedelta(hours=4)) == ("decline",)
    short = question(ttl=timedelta(minutes=5))  # it expires before any follow-up would come
    assert next_at(short) is None


def test_escalation_admits_its_principals_only_once_the_question_escalated() -> None:
    boss, asked = Principal("boss"), question()
    assert "needs 'finance'" in str(refusal(asked, "accept", boss, lambda principal, _: principal.id == "ann"))
    escalated = replace(asked, escalated_at=ASKED + timedelta(hours=1))
    assert escalated.escalated_to == ("boss",)
    assert refusal(escalated, "accept", boss, None) is None
    assert refusal(escalated, "decline", boss, None) is None
    assert refusal(escalated, "accept", Principal("boss", verified=False), None) is not None
    assert refusal(escalated, "accept", Principal("eve"), None) is not None


@pytest.mark.parametrize(
    ("policy", "error", "match"),
    [
        (Approval(count=2), ValueError, "takes one answer"),
        (Approval(grant_suffices=True), ValueError, "takes one answer"),
        ({"remind_after": 60}, TypeError, "policy must be an Approval"),
    ],
)
def test_a_tools_question_takes_a_policy_that_one_answer_settles(policy: object, error: type, match: str) -> None:
    from tarry.tools import ask

    with pytest.raises(error, match=match):
        ask("Which time?", time=str, policy=policy)  # type: ignore[arg-type]


def test_a_tools_question_is_followed_up_as_an_approval_is() -> None:
    from tarry.approvals import standing
    from tarry.tools import ask

    asked = replace(ask("Which time?", time=str, ttl=4 * 3600, policy=POLICY), asked_at=ASKED)
    asked = replace(asked, expires_at=ASKED + timedelta(hours=4))
    assert due(asked, ASKED + timedelta(minutes=61)) == ("remind", "escalate")
    assert next_at(asked) == ASKED + timedelta(minutes=10)
    assert standing(asked) == "Needs the answer of someone allowed as 'finance'."
    assert standing(replace(asked, policy=Approval(remind_after=60))) is None
