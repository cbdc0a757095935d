"""tarry's Slack endpoint over HTTP: signed interaction requests as Slack sends them, decided through the store."""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

from tarry.clock import utcnow
from tarry.questions import Question
from tarry.store import Store
from tarry.web.slack import SlackSender
from tests.slack.conftest import Endpoint
from tests.slack.fake_slack import FakeSlack
from tests.slack.signing import SIGNING_SECRET, click, signed, submit
from tests.slack.tools import ADA, BOB, delivery, parked
from tests.slack.waiting import until


async def posted(sender: SlackSender, store: Store, question: Question) -> tuple[str, str]:
    """Post ``question`` to Ada through the sender; where Slack put it (channel, ts)."""
    await sender.send(delivery(question, "asked"))
    (message,) = await store.slack_messages(question.id)
    return message.channel, message.ts


def ephemerals(slack_api: FakeSlack, user: str) -> list[str]:
    """The texts of the ephemeral messages sent to ``user``."""
    return [body["text"] for body in slack_api.of("chat.postEphemeral") if body["user"] == user]


async def test_a_forged_signature_and_a_replayed_request_are_refused(
    store: Store, sender: SlackSender, endpoint: Endpoint
) -> None:
    question = await parked(store, "refund", order="A-17", amount=40)
    channel, ts = await posted(sender, store, question)
    payload = click("tarry_approve", question.id, user="U0ADA", channel=channel, ts=ts)

    forged = await endpoint.http.post(endpoint.url, **signed(payload, secret="not-the-signing-secret"))
    replayed = await endpoint.http.post(endpoint.url, **signed(payload, at=time.time() - 6 * 60))
    unsigned = await endpoint.http.post(endpoint.url, content=signed(payload)["content"])

    assert (forged.status_code, replayed.status_code, unsigned.status_code) == (401, 401, 401)
    assert (await store.question(question.id)).decision is None
    assert await store.history(question_id=question.id) == []


async def test_approve_from_slack_decides_once_and_updates_the_message(
    store: Store, sender: SlackSender, endpoint: Endpoint, slack_api: FakeSlack
) -> None:
    question = await parked(store, "refund", order="A-17", amount=40)
    channel, ts = await posted(sender, store, question)

    first = await endpoint.http.post(
        endpoint.url, **signed(click("tarry_approve", question.id, user="U0ADA", channel=channel, ts=ts))
    )
    second = await endpoint.http.post(
        endpoint.url, **signed(click("tarry_approve", question.id, user="U0BOB", channel=channel, ts=ts))
    )

    assert (first.status_code, second.status_code) == (200, 200)
    decided = await store.question(question.id)
    assert (decided.decision, decided.decided_by, decided.channel) == ("accept", ADA, "slack")
    trail = await store.history(question_id=question.id)
    assert [(event.outcome, event.by, event.channel) for event in trail] == [
        ("decided", ADA, "slack"),
        ("lost", BOB, "slack"),
    ]
    await until(lambda: len(ephemerals(slack_api, "U0BOB")) == 1, "Bob to be told he was too late")
    (told,) = ephemerals(slack_api, "U0BOB")
    assert "decided already" in told and "Ada Lovelace" in told
    await until(lambda: len(slack_api.of("chat.update")) >= 1, "the message to be updated")
    update = slack_api.of("chat.update")[0]
    assert (update["channel"], update["ts"]) == (channel, ts)
    assert "Approved* by Ada Lovelace via slack" in str(update["blocks"])
    assert not [block for block in update["blocks"] if block["type"] == "actions"]


async def test_a_two_person_rule_counts_a_slack_vote_as_one(
    store: Store, sender: SlackSender, endpoint: Endpoint, slack_api: FakeSlack
) -> None:
    question = await parked(store, "payout", supplier="Acme", amount=900)
    channel, ts = await posted(sender, store, question)

    answered = await endpoint.http.post(
        endpoint.url, **signed(click("tarry_approve", question.id, user="U0ADA", channel=channel, ts=ts))
    )
    assert answered.status_code == 200
    counted = await store.question(question.id)
    assert counted.decision is None and [vote.principal for vote in counted.votes] == [ADA]
    await until(lambda: len(ephemerals(slack_api, "U0ADA")) == 1, "Ada to be told her vote counted")
    assert "counted (1 of 2)" in ephemerals(slack_api, "U0ADA")[0]
    await until(lambda: len(slack_api.of("chat.update")) == 1, "the message to show the vote")
    assert "1 of 2 approvals: Ada Lovelace" in str(slack_api.of("chat.update")[0]["blocks"])

    decided = await store.decide(question.id, "accept", by=BOB, channel="api")
    assert decided is not None and decided.decision == "accept"
    await sender.send(delivery(decided, "decided", number=2))

    trail = await store.history(question_id=question.id)
    assert [(event.outcome, event.by, event.channel) for event in trail] == [
        ("counted", ADA, "slack"),
        ("decided", BOB, "api"),
    ]
    assert "Approved* by Bob Babbage via api" in str(slack_api.of("chat.update")[-1]["blocks"])


async def test_decline_with_a_note_from_the_modal(
    store: Store, sender: SlackSender, endpoint: Endpoint, slack_api: FakeSlack
) -> None:
    question = await parked(store, "refund", order="A-17", amount=40)
    channel, ts = await posted(sender, store, question)

    clicked = await endpoint.http.post(
        endpoint.url, **signed(click("tarry_decline", question.id, user="U0ADA", channel=channel, ts=ts))
    )
    assert clicked.status_code == 200
    (opened,) = slack_api.of("views.open")
    assert opened["trigger_id"] and opened["view"]["callback_id"] == "tarry_decline"
    assert (await store.question(question.id)).decision is None  # opening the modal decides nothing

    note = {"note": {"note": {"type": "plain_text_input", "value": "Refund half, not all of it."}}}
    closed = await endpoint.http.post(endpoint.url, **signed(submit(opened["view"], note, user="U0ADA")))

    assert closed.status_code == 200 and closed.content == b""  # an empty 200 closes the modal
    declined = await store.question(question.id)
    assert (declined.decision, declined.note, declined.decided_by, declined.channel) == (
        "decline",
        "Refund half, not all of it.",
        ADA,
        "slack",
    )
    await until(lambda: len(slack_api.of("chat.update")) == 1, "the message to be updated")
    assert "Refund half, not all of it." in str(slack_api.of("chat.update")[0]["blocks"])


def form_state(time_index: str, party: str) -> dict[str, Any]:
    """``view.state.values`` of the booking modal as Slack sends it."""
    return {
        "time": {"value": {"type": "static_select", "selected_option": {"text": {}, "value": time_index}}},
        "party": {"value": {"type": "number_input", "value": party}},
        "terrace": {"value": {"type": "radio_buttons", "selected_option": {"text": {}, "value": "true"}}},
        "notes": {"value": {"type": "plain_text_input", "value": "By the window"}},
    }


async def test_a_form_answered_from_its_modal(
    store: Store, sender: SlackSender, endpoint: Endpoint, slack_api: FakeSlack
) -> None:
    question = await parked(store, "book", restaurant="Chez Tarry")
    channel, ts = await posted(sender, store, question)
    await endpoint.http.post(
        endpoint.url, **signed(click("tarry_answer", question.id, user="U0ADA", channel=channel, ts=ts))
    )
    (opened,) = slack_api.of("views.open")
    view = opened["view"]
    elements = {block["block_id"]: block["element"] for block in view["blocks"] if block["type"] == "input"}
    assert {name: element["type"] for name, element in elements.items()} == {
        "time": "static_select",
        "party": "number_input",
        "terrace": "radio_buttons",
        "notes": "plain_text_input",
    }
    assert [option["text"]["text"] for option in elements["time"]["options"]] == ["Seven", "Eight"]
    assert (elements["party"]["min_value"], elements["party"]["max_value"]) == ("1", "12")

    too_many = await endpoint.http.post(endpoint.url, **signed(submit(view, form_state("1", "40"), user="U0ADA")))
    assert too_many.json()["response_action"] == "errors" and set(too_many.json()["errors"]) == {"party"}
    assert (await store.question(question.id)).decision is None

    answered = await endpoint.http.post(endpoint.url, **signed(submit(view, form_state("1", "4"), user="U0ADA")))

    assert answered.status_code == 200 and answered.content == b""
    decided = await store.question(question.id)
    assert decided.answer == {"time": "20:00", "party": 4, "terrace": True, "notes": "By the window"}
    assert (decided.decided_by, decided.channel) == (ADA, "slack")
    await until(lambda: len(slack_api.of("chat.update")) == 1, "the message to be updated")
    assert "*Answered* by Ada Lovelace via slack" in str(slack_api.of("chat.update")[0]["blocks"])


async def test_someone_principal_for_does_not_know_is_refused_in_an_ephemeral_message(
    store: Store, sender: SlackSender, endpoint: Endpoint, slack_api: FakeSlack
) -> None:
    question = await parked(store, "refund", order="A-17", amount=40)
    channel, ts = await posted(sender, store, question)

    answered = await endpoint.http.post(
        endpoint.url, **signed(click("tarry_approve", question.id, user="U0EVE", channel=channel, ts=ts))
    )

    assert answered.status_code == 200
    await until(lambda: len(ephemerals(slack_api, "U0EVE")) == 1, "Eve to be refused")
    assert "does not know who you are" in ephemerals(slack_api, "U0EVE")[0]
    assert (await store.question(question.id)).decision is None
    assert await store.history(question_id=question.id) == []


async def test_a_modal_for_a_question_decided_meanwhile_is_not_opened(
    store: Store, sender: SlackSender, endpoint: Endpoint, slack_api: FakeSlack
) -> None:
    question = await parked(store, "refund", order="A-17", amount=40)
    channel, ts = await posted(sender, store, question)
    assert await store.decide(question.id, "accept", by=BOB) is not None

    await endpoint.http.post(
        endpoint.url, **signed(click("tarry_decline", question.id, user="U0ADA", channel=channel, ts=ts))
    )

    await until(lambda: len(ephemerals(slack_api, "U0ADA")) == 1, "Ada to be told it was decided")
    assert "Bob Babbage" in ephemerals(slack_api, "U0ADA")[0]
    assert slack_api.of("views.open") == []
    assert SIGNING_SECRET not in str(slack_api.calls)


async def test_a_decision_the_policy_refuses_is_explained_and_not_recorded(
    store: Store, sender: SlackSender, endpoint: Endpoint, slack_api: FakeSlack
) -> None:
    store.may_decide = lambda principal, question: principal == BOB  # Bob is finance, Ada is not
    question = await parked(store, "wire", to="Acme", amount=5000)
    channel, ts = await posted(sender, store, question)

    await endpoint.http.post(
        endpoint.url, **signed(click("tarry_approve", question.id, user="U0ADA", channel=channel, ts=ts))
    )

    await until(lambda: len(ephemerals(slack_api, "U0ADA")) == 1, "Ada to be told why")
    assert ephemerals(slack_api, "U0ADA")[0].startswith("Your decision was not recorded: ")
    assert (await store.question(question.id)).decision is None
    assert [event.outcome for event in await store.history(question_id=question.id)] == ["refused"]

    await endpoint.http.post(
        endpoint.url, **signed(click("tarry_approve", question.id, user="U0BOB", channel=channel, ts=ts))
    )
    decided = await store.question(question.id)
    assert (decided.decision, decided.decided_by) == ("accept", BOB)


async def test_an_expired_question_is_explained_and_its_message_settled(
    store: Store, sender: SlackSender, endpoint: Endpoint, slack_api: FakeSlack
) -> None:
    question = await parked(store, "launch", rocket="Tarry-1")
    channel, ts = await posted(sender, store, question)
    assert question.expires_at is not None
    await until(lambda: utcnow() > question.expires_at + timedelta(milliseconds=200), "the approval to lapse")

    await endpoint.http.post(
        endpoint.url, **signed(click("tarry_approve", question.id, user="U0ADA", channel=channel, ts=ts))
    )

    await until(lambda: len(ephemerals(slack_api, "U0ADA")) == 1, "Ada to be told it expired")
    assert "*Expired* at " in ephemerals(slack_api, "U0ADA")[0]
    await until(lambda: len(slack_api.of("chat.update")) == 1, "the message to lose its buttons")
    assert "*Expired* at " in str(slack_api.of("chat.update")[0]["blocks"])
    assert (await store.question(question.id)).decision is None


async def test_a_modal_slack_will_not_open_is_explained(
    store: Store, sender: SlackSender, endpoint: Endpoint, slack_api: FakeSlack
) -> None:
    question = await parked(store, "refund", order="A-17", amount=40)
    channel, ts = await posted(sender, store, question)
    slack_api.fail_next["views.open"] = "expired_trigger_id"

    clicked = await endpoint.http.post(
        endpoint.url, **signed(click("tarry_decline", question.id, user="U0ADA", channel=channel, ts=ts))
    )

    assert clicked.status_code == 200
    await until(lambda: len(ephemerals(slack_api, "U0ADA")) == 1, "Ada to be told")
    assert "expired_trigger_id" in ephemerals(slack_api, "U0ADA")[0]


async def test_several_choices_an_email_and_a_no_from_the_modal(
    store: Store, sender: SlackSender, endpoint: Endpoint, slack_api: FakeSlack
) -> None:
    question = await parked(store, "order", table=7)
    channel, ts = await posted(sender, store, question)
    await endpoint.http.post(
        endpoint.url, **signed(click("tarry_answer", question.id, user="U0BOB", channel=channel, ts=ts))
    )
    (opened,) = slack_api.of("views.open")
    elements = {block["block_id"]: block["element"] for block in opened["view"]["blocks"] if block["type"] == "input"}
    assert elements["dishes"]["type"] == "multi_static_select" and elements["dishes"]["max_selected_items"] == 2
    assert elements["receipt"]["type"] == "email_text_input"
    state = {
        "dishes": {"value": {"type": "multi_static_select", "selected_options": [{"value": "0"}, {"value": "2"}]}},
        "receipt": {"value": {"type": "email_text_input", "value": "bob@example.com"}},
        "spicy": {"value": {"type": "radio_buttons", "selected_option": {"value": "false"}}},
    }

    answered = await endpoint.http.post(endpoint.url, **signed(submit(opened["view"], state, user="U0BOB")))

    assert answered.status_code == 200
    decided = await store.question(question.id)
    assert decided.answer == {"dishes": ["pasta", "salad"], "receipt": "bob@example.com", "spicy": False}
