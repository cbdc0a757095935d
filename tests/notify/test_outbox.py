"""The outbox: each change to a question writes its notice in its own transaction, on every path, on both databases;
a change rolled back writes none."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import Connection, select, update

from tarry import Principal
from tarry.clock import utcnow
from tarry.errors import NotAllowedError, NotDecidableError
from tarry.jobs.notifier import Notifier
from tarry.notices import Delivery
from tarry.store import Store
from tarry.store.tables import notices, questions
from tests.store.approvers import may_decide
from tests.store.test_approve_all import PAYOUT, transfer, turn_of
from tests.store.tools import TransferMoney, all_tools, reactive_model

ANN = Principal("ann", "Ann Archer")


async def notices_of(store: Store) -> set[tuple[str, str]]:
    """Every notice's (question id, event)."""

    def read(connection: Connection) -> set[tuple[str, str]]:
        return {(row.question_id, row.event) for row in connection.execute(select(notices))}

    return await store.db.run_read(read)


class Kept:
    """A sender to one endpoint that keeps what it is given (the webhook's own tests use a real receiver)."""

    channel = "kept"
    endpoint = True

    def __init__(self) -> None:
        self.got: list[Delivery] = []

    async def send(self, delivery: Delivery) -> None:
        self.got.append(delivery)


async def test_a_reply_that_asks_writes_one_notice_per_question(store: Store) -> None:
    _, waiting = await turn_of(store, [transfer("Bob"), transfer("Dan")])

    assert await notices_of(store) == {(question.id, "asked") for question in waiting}


@pytest.mark.parametrize("decide", ["approve", "decline", "decide", "approve_all"])
async def test_every_way_of_deciding_writes_a_decided_notice(store: Store, decide: str) -> None:
    chat_id, waiting = await turn_of(store, [transfer("Bob"), transfer("Dan")])
    first = waiting[0]
    if decide == "approve":  # by id: PostgreSQL's one statement
        assert await store.approve(first.id, by=ANN)
    elif decide == "decline":
        assert await store.decline(first.id, "no", by=ANN)
    elif decide == "decide":
        assert await store.decide(first.id, "accept", by=ANN, channel="web") is not None
    else:
        await store.approve_all(chat_id, by=ANN)
    decided = {question.id for question in waiting} if decide == "approve_all" else {first.id}

    got = await notices_of(store)

    assert {pair for pair in got if pair[1] == "decided"} == {(question_id, "decided") for question_id in decided}


async def test_a_chat_objects_approval_writes_its_notice(store: Store) -> None:
    chat = await store.create_chat(reactive_model([transfer("Bob")]), all_tools())
    await chat.ask("Pay Bob.")
    (question,) = await chat.pending_questions()

    await chat.approve(question)

    assert await notices_of(store) == {(question.id, "asked"), (question.id, "decided")}


async def test_a_standing_grant_deciding_as_the_reply_is_recorded_writes_both_notices(store: Store) -> None:
    await store.grant("transfer_money", by=ANN)
    chat = await store.create_chat(reactive_model([transfer("Bob")]), [TransferMoney()])
    await chat.ask("Pay Bob.")
    (event,) = await store.history(chat.id)
    assert event.channel == "grant"

    assert await notices_of(store) == {(event.question_id, "asked"), (event.question_id, "decided")}


async def test_a_turn_that_cannot_be_approved_whole_rolls_back_with_no_notice_of_a_decision(
    database_url: str,
) -> None:
    async with Store(database_url, may_decide=may_decide) as finance:
        await finance.setup()
        chat_id, waiting = await turn_of(finance, [transfer("Bob"), PAYOUT, transfer("Eve")])

        with pytest.raises(NotDecidableError):
            await finance.approve_all(chat_id, by=ANN)

        assert await notices_of(finance) == {(question.id, "asked") for question in waiting}


async def test_a_vote_counted_writes_a_counted_notice_and_the_deciding_vote_a_decided_one(database_url: str) -> None:
    async with Store(database_url, may_decide=may_decide) as finance:  # the locked path: a policy of two votes
        await finance.setup()
        _, (question,) = await turn_of(finance, [PAYOUT])

        assert await finance.approve(question.id, by="ann")
        assert (await finance.question(question.id)).decision is None, "one vote of two counted"
        assert await notices_of(finance) == {(question.id, "asked"), (question.id, "counted")}
        with pytest.raises(NotAllowedError):  # her vote again is refused: no new notice
            await finance.approve(question.id, by="ann")

        assert await finance.approve(question.id, by="bob")
        assert (await finance.question(question.id)).decision == "accept"
        assert await notices_of(finance) == {(question.id, event) for event in ("asked", "counted", "decided")}

        def ids(connection: Connection) -> set[str]:
            return {row.id for row in connection.execute(select(notices.c.id))}

        assert f"{question.id}.counted.1" in await finance.db.run_read(ids)


async def test_a_decision_that_loses_writes_no_second_notice(store: Store) -> None:
    chat_id, (question,) = await turn_of(store, [transfer("Bob")])
    assert await store.approve(question.id)

    assert not await store.decline(question.id, "too late")

    assert await notices_of(store) == {(question.id, "asked"), (question.id, "decided")}
    events = [event.outcome for event in await store.history(chat_id)]
    assert events == ["decided", "lost"], "the losing attempt is on the trail, and wrote no notice"


async def test_a_cancelled_chat_writes_a_cancelled_notice(store: Store) -> None:
    chat = await store.create_chat(reactive_model([transfer("Bob")]), all_tools())
    await chat.ask("Pay Bob.")
    (question,) = await chat.pending_questions()

    await chat.cancel()  # what a worker does for a chat whose cancellation was asked (Store.cancel)

    assert await notices_of(store) == {(question.id, "asked"), (question.id, "cancelled")}


async def test_a_question_whose_time_ran_out_gets_one_expired_notice_from_the_notifier(store: Store) -> None:
    _, (question, other) = await turn_of(store, [transfer("Bob"), transfer("Dan")])
    kept = Kept()
    notifier = Notifier(store, [kept], expiry_interval=0)
    assert await notifier.deliver() == 2
    past = utcnow() - timedelta(seconds=1)
    await store.db.run_write(
        lambda connection: connection.execute(
            update(questions).where(questions.c.id == question.id).values(expires_at=past)
        )
    )

    assert await notifier.deliver() == 1
    assert await notifier.deliver() == 0, "one notice of an expiry, however many sweeps"

    assert [(delivery.question.id, delivery.event) for delivery in kept.got[2:]] == [(question.id, "expired")]
    assert (other.id, "expired") not in await notices_of(store)


def _events(got: list[Delivery]) -> list[tuple[str, str]]:
    return sorted((delivery.question.id, delivery.event) for delivery in got)


async def test_notices_become_one_delivery_each_per_channel_and_person(store: Store) -> None:
    class Routes:
        def recipients(self, question: Any) -> list[Principal]:
            return [ANN, Principal("bo", "Bo"), ANN]

        def address(self, principal: Principal, channel: str) -> str | None:
            return None if principal.id == "bo" else f"{principal.id}@example.com"

    class Mail(Kept):
        channel = "mail"
        endpoint = False

    chat_id, (question,) = await turn_of(store, [transfer("Bob")])
    kept, mail = Kept(), Mail()
    notifier = Notifier(store, [kept, mail], Routes())

    assert await notifier.deliver() == 2
    assert await notifier.deliver() == 0, "each delivery is sent once"

    assert [(d.event, d.recipient, d.address) for d in kept.got] == [("asked", None, None)]
    assert [(d.event, d.recipient, d.address) for d in mail.got] == [("asked", ANN, "ann@example.com")]
    listed = await store.deliveries()
    assert sorted((d.channel, d.state, d.attempts) for d in listed) == [("kept", "sent", 1), ("mail", "sent", 1)]
    assert {d.id for d in listed} == {kept.got[0].id, mail.got[0].id}
    assert all(d.question_id == question.id and d.chat_id == chat_id for d in listed)
