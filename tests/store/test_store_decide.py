"""``Store.decide``: one verb for every decision by id, returning the question as the decision left it."""

from __future__ import annotations

from typing import Any

import pytest

from tarry.errors import InvalidAnswerError, NotAllowedError, UnknownQuestionError
from tarry.principals import Principal
from tarry.store import Store
from tests.store.approvers import may_decide
from tests.store.test_accountable import payout_question
from tests.store.test_store import park


def same(returned: Any, stored: Any) -> None:
    """The returned question records what the store holds."""
    assert returned.to_dict() == stored.to_dict()


async def test_decide_returns_the_question_each_decision_left_and_none_once_another_came_first(store: Store) -> None:
    chat_id = await park(store)
    approval, colour = await store.pending_questions(chat_id)

    approved = await store.decide(approval.id, "accept", by=Principal("ann", "Ann"), channel="web")
    assert approved is not None
    assert (approved.decision, approved.answer, approved.decided_by, approved.channel) == (
        "accept",
        {},
        Principal("ann", "Ann"),
        "web",
    )
    assert approved.tool_call is not None and approved.tool_call.arguments == {"to": "Bob", "amount": 5}
    same(approved, await store.question(approval.id))
    assert await store.decide(approval.id, "decline", note="too late") is None
    assert await store.approve(approval.id) is False

    answered = await store.decide(colour.id, "accept", {"colour": "blue"}, by="bob", channel="cli")
    assert answered is not None and answered.decision == "accept"
    assert answered.answer is not None and answered.answer["colour"] == "blue"
    same(answered, await store.question(colour.id))
    history = await store.history(chat_id)
    assert [(event.question_id, event.outcome) for event in history] == [
        (approval.id, "decided"),
        (approval.id, "lost"),
        (approval.id, "lost"),
        (colour.id, "decided"),
    ]


async def test_a_decline_returns_its_note_and_the_wrappers_return_what_they_did(store: Store) -> None:
    chat_id = await park(store)
    approval, colour = await store.pending_questions(chat_id)
    declined = await store.decide(approval.id, "decline", note="not now", by="carol")
    assert declined is not None and (declined.decision, declined.note, declined.answer) == ("decline", "not now", None)
    same(declined, await store.question(approval.id))
    assert await store.answer(colour.id, {"colour": "red"}) is True
    assert await store.answer(colour.id, {"colour": "green"}) is False
    assert (await store.question(colour.id)).answer == {"colour": "red", "coats": 1}


async def test_decide_raises_what_the_wrappers_raise_and_refuses_mixed_up_arguments(store: Store) -> None:
    chat_id = await park(store)
    approval, colour = await store.pending_questions(chat_id)
    with pytest.raises(UnknownQuestionError):
        await store.decide("no-such-question", "accept")
    with pytest.raises(InvalidAnswerError) as invalid:
        await store.decide(colour.id, "accept", {"colour": "purple"})
    assert set(invalid.value.errors) == {"colour"}
    with pytest.raises(ValueError, match="no answer"):
        await store.decide(approval.id, "decline", {"why": "no"})
    with pytest.raises(ValueError, match="decline only"):
        await store.decide(approval.id, "accept", note="fine")
    with pytest.raises(ValueError, match="'accept', 'decline' or 'respond'"):
        await store.decide(approval.id, "cancel")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        await store.decide(approval.id, "decline", note=5)  # type: ignore[arg-type]
    assert [question.id for question in await store.pending_questions(chat_id)] == [approval.id, colour.id]
    assert await store.history(chat_id) == [], "nothing refused before its check is on the trail"


async def test_an_approval_counted_under_a_policy_comes_back_undecided_with_its_vote(database_url: str) -> None:
    async with Store(database_url, may_decide=may_decide) as finance:
        await finance.setup()
        _, question_id = await payout_question(finance)
        counted = await finance.decide(question_id, "accept", by="ann")
        assert counted is not None and counted.decision is None
        assert [vote.principal.id for vote in counted.votes] == ["ann"]
        same(counted, await finance.question(question_id))
        with pytest.raises(NotAllowedError):
            await finance.decide(question_id, "accept", by="mallory")
        decided = await finance.decide(question_id, "accept", by="bob")
        assert decided is not None and decided.decision == "accept"
        assert [vote.principal.id for vote in decided.votes] == ["ann", "bob"]
        same(decided, await finance.question(question_id))
