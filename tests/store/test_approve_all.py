"""``Store.approve_all``: a chat's whole turn approved in one transaction, all or nothing."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import update

from tarry import Principal, Question
from tarry.clock import utcnow
from tarry.errors import ChatNotFoundError, NotAllowedError, NotDecidableError, QuestionExpiredError
from tarry.store import Store
from tarry.store.tables import questions
from tests.store.approvers import Payout, may_decide
from tests.store.test_store import park
from tests.store.tools import TransferMoney, reactive_model

ANN = Principal("ann", "Ann Archer")


def transfer(to: str) -> dict[str, Any]:
    return {"name": "transfer_money", "arguments": {"to": to, "amount": 1}}


PAYOUT = {"name": "payout", "arguments": {"to": "Carol", "amount": 900}}


async def turn_of(store: Store, calls: list[dict[str, Any]]) -> tuple[str, list[Question]]:
    """A new chat parked on ``calls``: its id and its open questions, in the order of the calls."""
    chat = await store.create_chat(reactive_model(calls), [TransferMoney(), Payout()])
    await chat.ask("Pay them.")
    waiting = list(await store.pending_questions(chat.id))
    assert len(waiting) == len(calls)
    return chat.id, waiting


async def nothing_recorded(store: Store, chat_id: str, waiting: list[Question]) -> None:
    """Every question of the turn is still open, with no vote counted, and the trail is empty."""
    now = [await store.question(question.id) for question in waiting]
    assert [(question.decision, question.votes) for question in now] == [(None, ())] * len(waiting)
    assert await store.history(chat_id) == []


@pytest.fixture
async def finance(database_url: str) -> Any:
    async with Store(database_url, may_decide=may_decide) as opened:
        await opened.setup()
        yield opened


async def test_a_turn_of_three_approvals_is_recorded_in_one_go_each_on_the_trail(finance: Store) -> None:
    chat_id, waiting = await turn_of(finance, [transfer("Bob"), transfer("Dan"), transfer("Eve")])
    hooked: list[str] = []
    finance.decision_hooks.append(lambda question: hooked.append(question.id))
    version = await finance.chat_version(chat_id)

    approved = await finance.approve_all(chat_id, by=ANN, channel="web")

    ids = sorted(question.id for question in waiting)
    assert [question.id for question in approved] == ids
    assert all(q.decision == "accept" and q.decided_by == ANN and q.channel == "web" for q in approved)
    assert [q.tool_call.name for q in approved if q.tool_call] == ["transfer_money"] * 3
    assert list(await finance.pending_questions(chat_id)) == []
    stored = [await finance.question(question_id) for question_id in ids]
    assert [(q.decision, q.decided_by, q.channel) for q in stored] == [("accept", ANN, "web")] * 3
    assert sorted(hooked) == ids
    trail = await finance.history(chat_id)
    assert sorted((event.question_id, event.outcome, event.by) for event in trail) == [
        (question_id, "decided", ANN) for question_id in ids
    ]
    assert len({event.at for event in trail}) >= 1
    assert await finance.chat_version(chat_id) > version, "the chat was woken to carry its turn on"
    assert await finance.approve_all(chat_id) == [], "nothing waits any more"


async def test_an_approval_this_vote_would_only_count_stops_the_whole_turn(finance: Store) -> None:
    chat_id, waiting = await turn_of(finance, [transfer("Bob"), PAYOUT, transfer("Eve")])
    payout = waiting[1]

    with pytest.raises(NotDecidableError) as stopped:
        await finance.approve_all(chat_id, by="ann")

    assert stopped.value.question_id == payout.id and stopped.value.reason is None
    assert payout.id in str(stopped.value) and "(payout)" in str(stopped.value)
    assert "1 of 2" in str(stopped.value)
    await nothing_recorded(finance, chat_id, waiting)


async def test_a_person_the_policy_refuses_stops_the_whole_turn(finance: Store) -> None:
    chat_id, waiting = await turn_of(finance, [transfer("Bob"), PAYOUT, transfer("Eve")])
    with pytest.raises(NotDecidableError, match=f"question {waiting[1].id} \\(payout\\)") as stopped:
        await finance.approve_all(chat_id, by="carol")
    assert isinstance(stopped.value.reason, NotAllowedError) and stopped.value.question_id == waiting[1].id
    await nothing_recorded(finance, chat_id, waiting)


async def test_an_expired_question_stops_the_whole_turn(store: Store) -> None:
    chat_id, waiting = await turn_of(store, [transfer("Bob"), transfer("Dan"), transfer("Eve")])
    lapsed = waiting[2]
    past = utcnow() - timedelta(minutes=1)
    await store.db.run_write(
        lambda connection: connection.execute(
            update(questions).where(questions.c.id == lapsed.id).values(expires_at=past)
        )
    )
    with pytest.raises(NotDecidableError, match=f"question {lapsed.id} \\(transfer_money\\)") as stopped:
        await store.approve_all(chat_id, by="ann")
    assert isinstance(stopped.value.reason, QuestionExpiredError) and stopped.value.question_id == lapsed.id
    await nothing_recorded(store, chat_id, waiting)


async def test_a_form_in_the_turn_stops_it_before_any_attempt(store: Store) -> None:
    chat_id = await park(store)
    approval, colour = await store.pending_questions(chat_id)
    with pytest.raises(NotDecidableError, match="form to fill in") as stopped:
        await store.approve_all(chat_id)
    assert stopped.value.question_id == colour.id and "(pick_colour)" in str(stopped.value)
    await nothing_recorded(store, chat_id, [approval, colour])


async def test_an_unknown_chat_is_named_and_the_sync_twin_approves_from_a_thread(store: Store) -> None:
    with pytest.raises(ChatNotFoundError):
        await store.approve_all("no-such-chat")
    with pytest.raises(ChatNotFoundError):
        await store.approve_all("bad\x00id")
    chat_id, waiting = await turn_of(store, [transfer("Bob"), transfer("Dan")])

    def approve_from_a_thread() -> list[Question]:
        with Store(store.url) as other:
            return other.approve_all_sync(chat_id, by="bob", channel="cli")

    approved = await asyncio.to_thread(approve_from_a_thread)
    assert sorted(question.id for question in approved) == sorted(question.id for question in waiting)
    assert [event.outcome for event in await store.history(chat_id)] == ["decided", "decided"]
