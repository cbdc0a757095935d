"""SlackSender at the HTTP boundary: what it posts and updates through Slack's Web API, and what it records."""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from typing import Any

import pytest
from slack_sdk.errors import SlackApiError

from tarry.clock import utcnow
from tarry.errors import UnknownQuestionError
from tarry.jobs.notifier import Notifier
from tarry.mail import EmailSender
from tarry.notices import Delivery
from tarry.principals import Principal
from tarry.questions import Question
from tarry.store import Store
from tarry.testing import ScriptedModel
from tarry.web.slack import SlackSender
from tests.slack.fake_slack import BOT_TOKEN, FakeSlack
from tests.slack.tools import ADA, BOB, TOOLS, delivery, parked
from tests.slack.waiting import until


def actions_of(blocks: list[dict[str, Any]]) -> list[str]:
    """The action ids of a message's buttons."""
    return [element["action_id"] for block in blocks if block["type"] == "actions" for element in block["elements"]]


def text_of(blocks: list[dict[str, Any]]) -> str:
    """All the mrkdwn text of a message's sections and contexts."""
    texts = [block["text"]["text"] for block in blocks if block["type"] == "section"]
    texts += [element["text"] for block in blocks if block["type"] == "context" for element in block["elements"]]
    return "\n".join(texts)


async def test_asked_posts_the_call_with_its_buttons_and_records_where_once(
    store: Store, sender: SlackSender, slack_api: FakeSlack
) -> None:
    question = await parked(store, "refund", order="A-17", amount=40)

    await sender.send(delivery(question, "asked"))
    await sender.send(delivery(question, "asked"))  # the worker tried again: the message is recorded, none is posted

    (posted,) = slack_api.of("chat.postMessage")
    assert posted["channel"] == "U0ADA"
    assert actions_of(posted["blocks"]) == ["tarry_approve", "tarry_decline"]
    assert "`refund`" in text_of(posted["blocks"]) and '"order": "A-17"' in text_of(posted["blocks"])
    assert "refund" in posted["text"] and question.id in text_of(posted["blocks"])
    assert slack_api.calls[0].authorization == f"Bearer {BOT_TOKEN}"
    (recorded,) = await store.slack_messages(question.id)
    assert (recorded.channel, recorded.ts) == ("D0ADA", "1764880000.000001")  # the DM Slack answered with


async def test_a_form_question_has_an_answer_button_and_no_approve_when_a_field_needs_a_value(
    store: Store, sender: SlackSender, slack_api: FakeSlack
) -> None:
    question = await parked(store, "book", restaurant="Chez Tarry")

    await sender.send(delivery(question, "asked", address="C0OPS"))

    (posted,) = slack_api.of("chat.postMessage")
    assert posted["channel"] == "C0OPS"
    assert actions_of(posted["blocks"]) == ["tarry_answer", "tarry_decline"]
    assert "How should I book Chez Tarry?" in text_of(posted["blocks"])


async def test_decided_elsewhere_updates_every_message_without_buttons(
    store: Store, sender: SlackSender, slack_api: FakeSlack
) -> None:
    question = await parked(store, "refund", order="A-17", amount=40)
    await sender.send(delivery(question, "asked", address="U0ADA"))
    await sender.send(delivery(question, "asked", address="C0OPS", number=2))

    decided = await store.decide(question.id, "accept", by=BOB)
    assert decided is not None
    await sender.send(delivery(decided, "decided"))

    updates = slack_api.of("chat.update")
    assert [(update["channel"], update["ts"]) for update in updates] == [
        ("D0ADA", "1764880000.000001"),
        ("C0OPS", "1764880000.000002"),
    ]
    for update in updates:
        assert actions_of(update["blocks"]) == []
        assert "*Approved* by Bob Babbage via code at " in text_of(update["blocks"])


@pytest.mark.parametrize(("event", "says"), [("expired", "*Expired* at "), ("cancelled", "*Cancelled*")])
async def test_expired_and_cancelled_questions_lose_their_buttons(
    store: Store, sender: SlackSender, slack_api: FakeSlack, event: Any, says: str
) -> None:
    question = await parked(store, "refund", order="A-17", amount=40)
    await sender.send(delivery(question, "asked"))
    lapsed = dataclasses.replace(question, expires_at=utcnow() - timedelta(minutes=1))

    await sender.send(delivery(lapsed, event))

    (update,) = slack_api.of("chat.update")
    assert actions_of(update["blocks"]) == [] and says in text_of(update["blocks"])


async def test_a_question_decided_before_its_notice_is_posted_settled(
    store: Store, sender: SlackSender, slack_api: FakeSlack
) -> None:
    question = await parked(store, "refund", order="A-17", amount=40)
    decided = await store.decide(question.id, "decline", note="not this month", by=BOB)
    assert decided is not None

    await sender.send(delivery(decided, "asked"))

    (posted,) = slack_api.of("chat.postMessage")
    assert actions_of(posted["blocks"]) == []
    assert "*Declined* by Bob Babbage via code" in text_of(posted["blocks"]) and "not this month" in posted["text"]


async def test_slack_errors_ask_for_another_attempt_but_a_deleted_message_is_skipped(
    store: Store, sender: SlackSender, slack_api: FakeSlack
) -> None:
    question = await parked(store, "refund", order="A-17", amount=40)
    slack_api.fail_next["chat.postMessage"] = "ratelimited"
    with pytest.raises(SlackApiError):
        await sender.send(delivery(question, "asked"))
    assert await store.slack_messages(question.id) == []
    await sender.send(delivery(question, "asked"))  # the next attempt posts
    await sender.send(delivery(question, "asked", address="C0OPS", number=2))
    decided = await store.decide(question.id, "accept", by=BOB)
    assert decided is not None

    slack_api.fail_next["chat.update"] = "message_not_found"
    await sender.send(delivery(decided, "decided"))  # the first message was deleted in Slack: the second is updated
    assert [update["channel"] for update in slack_api.of("chat.update")] == ["D0ADA", "C0OPS"]
    slack_api.fail_next["chat.update"] = "internal_error"
    with pytest.raises(SlackApiError):
        await sender.send(delivery(decided, "decided"))


async def test_bad_deliveries_and_records_are_refused_by_name(store: Store, sender: SlackSender) -> None:
    question = await parked(store, "refund", order="A-17", amount=40)
    with pytest.raises(ValueError, match="channel 'slack'"):
        await sender.send(dataclasses.replace(delivery(question, "asked"), channel="email"))
    with pytest.raises(ValueError, match="no address"):
        await sender.send(delivery(question, "asked", address=None))
    with pytest.raises(UnknownQuestionError):
        await store.save_slack_message("no-such-question", delivery_id="d1", channel="C0OPS", ts="1.2")
    with pytest.raises(ValueError, match="ts"):
        await store.save_slack_message(question.id, delivery_id="d1", channel="C0OPS", ts="")
    assert await store.save_slack_message(question.id, delivery_id="d1", channel="C0OPS", ts="1.2") is True
    assert await store.save_slack_message(question.id, delivery_id="d1", channel="C0ELSE", ts="9.9") is False
    assert [(m.channel, m.ts) for m in await store.slack_messages(question.id)] == [("C0OPS", "1.2")]


async def test_a_pruned_chat_takes_its_slack_messages_along(
    store: Store, sender: SlackSender, slack_api: FakeSlack
) -> None:
    chat = await store.create_chat(
        ScriptedModel([[{"name": "refund", "arguments": {"order": "A-17", "amount": 40}}], "Done."]), TOOLS
    )
    await chat.ask("Refund it.")
    (question,) = await store.pending_questions(chat.id)
    await sender.send(delivery(question, "asked"))
    assert await store.decide(question.id, "accept", by=BOB) is not None
    await chat.complete()
    assert not chat.waiting and len(await store.slack_messages(question.id)) == 1

    done = utcnow()
    await until(lambda: utcnow() > done, "the clock to move past the chat's end")
    report = await store.prune(finished_before=utcnow())

    assert report.chats == 1
    assert await store.slack_messages(question.id) == []


class OnlyAda:
    """Routes: Ada hears of every question, in Slack (her user id) and by email."""

    def recipients(self, question: Question) -> list[Principal]:
        return [ADA]

    def address(self, principal: Principal, channel: str) -> str | None:
        return {"slack": "U0ADA", "email": principal.id}.get(channel)


class MailOutbox:
    """The email channel, recording what it is given instead of mailing; it takes the events an ``EmailSender`` does."""

    channel = "email"
    events = EmailSender.events

    def __init__(self) -> None:
        self.events_sent: list[str] = []

    async def send(self, delivery: Delivery) -> None:
        """Record the delivery's event."""
        self.events_sent.append(delivery.event)


async def test_an_approval_counted_from_email_updates_the_slack_message_through_the_outbox(
    store: Store, sender: SlackSender, slack_api: FakeSlack
) -> None:
    question = await parked(store, "payout", supplier="Acme", amount=900)
    mail = MailOutbox()
    notifier = Notifier(store, [sender, mail], OnlyAda())
    assert await notifier.deliver() == 2  # asked: posted to Ada in Slack, and mailed
    assert len(slack_api.of("chat.postMessage")) == 1

    counted = await store.decide(question.id, "accept", by=ADA, channel="email")  # her email's link: 1 of 2
    assert counted is not None and counted.decision is None
    assert await notifier.deliver() == 1  # the counted notice goes to Slack only

    (update,) = slack_api.of("chat.update")
    assert "1 of 2 approvals: Ada Lovelace (email)" in text_of(update["blocks"])
    assert actions_of(update["blocks"]) == ["tarry_approve", "tarry_decline"]  # still open: its buttons stay
    assert [vote.channel for vote in (await store.question(question.id)).votes] == ["email"]

    decided = await store.decide(question.id, "accept", by=BOB, channel="api")
    assert decided is not None and decided.decision == "accept"
    assert await notifier.deliver() == 2
    assert mail.events_sent == ["asked", "decided"]
    final = slack_api.of("chat.update")[-1]
    assert actions_of(final["blocks"]) == [] and "Ada Lovelace (email), Bob Babbage (api)" in text_of(final["blocks"])
    assert await notifier.deliver() == 0  # each notice once
