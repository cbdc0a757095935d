"""``SlackSender``: posts a question to Slack when it is asked, and updates each of its messages when it settles."""

from __future__ import annotations

import logging
from typing import Any

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from tarry.clock import utcnow
from tarry.notices import Delivery, NoticeEvent
from tarry.questions import Question
from tarry.store import Store
from tarry.web.slack.blocks import asked_message, settled_message

logger = logging.getLogger("tarry.web.slack")
SETTLING: tuple[NoticeEvent, ...] = ("decided", "expired", "cancelled")
"""The events after which a question's messages lose their buttons and say what became of it."""
POSTING: tuple[NoticeEvent, ...] = ("asked", "reminded", "escalated")
"""The events that post a message with the question's buttons (a reminder or an escalation posts another)."""
GONE = frozenset({"message_not_found", "cant_update_message", "channel_not_found", "is_archived"})
"""``chat.update`` errors retrying cannot mend: the message or its conversation is gone, or no longer ours."""


class SlackSender:
    """Sends tarry's notices to Slack through ``client`` (an ``AsyncWebClient`` with a bot token).

    ``asked`` (also ``reminded`` and ``escalated``) posts the question to the delivery's ``address`` (a
    user id, for a direct message, or a channel id) with its buttons (Approve, Answer for a form,
    Decline) and records where the message went ([`Store.save_slack_message`][tarry.store.Store.save_slack_message]);
    ``decided``, ``expired`` and ``cancelled`` update every message posted about the question
    (``chat.update``): what became of it, who decided, through what and when, and no buttons; ``counted`` (an
    approval counted from any channel while more are needed) updates them to show the approvals so far, each with
    its channel, and keeps the buttons. A
    delivery whose question was decided before it was posted posts the settled message, without buttons.

    A Slack error raises ``SlackApiError``, so the delivery is tried again later; a message deleted in Slack
    meanwhile is skipped when updating. A delivery tried again after its message was posted and recorded
    posts nothing more.
    """

    channel = "slack"
    """The channel's name, as deliveries name it."""

    def __init__(self, store: Store, client: AsyncWebClient) -> None:
        self.store = store
        self.client = client

    async def send(self, delivery: Delivery) -> None:
        """Post or update the question's Slack messages as ``delivery``'s event asks; raises to be tried again."""
        if delivery.channel != self.channel:
            raise ValueError(f"SlackSender sends deliveries of the channel 'slack', got {delivery.channel!r}")
        if delivery.event in SETTLING:
            await self.update(delivery.question, delivery.event)
        elif delivery.event == "counted":  # an approval counted from any channel: every message shows the votes
            await self._edit_all(delivery.question, _as_it_stands(delivery.question))
        else:
            await self.post(delivery)

    async def post(self, delivery: Delivery) -> None:
        """Post the question to ``delivery.address`` and record the message, unless this delivery's is recorded."""
        if not delivery.address:
            raise ValueError(f"Delivery {delivery.id} to Slack has no address (a Slack user or channel id)")
        question = delivery.question
        if any(message.delivery_id == delivery.id for message in await self.store.slack_messages(question.id)):
            return  # posted and recorded by an earlier attempt
        shown = _as_it_stands(question)
        answer = await self.client.chat_postMessage(channel=delivery.address, **shown)
        channel, ts = str(answer["channel"]), str(answer["ts"])
        await self.store.save_slack_message(question.id, delivery_id=delivery.id, channel=channel, ts=ts)
        logger.info("Posted question %s to Slack %s at %s", question.id, channel, ts)

    async def update(self, question: Question, event: NoticeEvent = "decided") -> None:
        """Show what became of ``question`` on every message posted about it (the votes so far, while it is open)."""
        shown = asked_message(question) if question.verdict is None and event == "decided" else None
        await self._edit_all(question, shown or settled_message(question, event))

    async def _edit_all(self, question: Question, content: dict[str, Any]) -> None:
        for message in await self.store.slack_messages(question.id):
            await self._edit(message.channel, message.ts, content)

    async def _edit(self, channel: str, ts: str, content: dict[str, Any]) -> None:
        try:
            await self.client.chat_update(channel=channel, ts=ts, **content)
        except SlackApiError as error:
            if error.response.get("error") not in GONE:
                raise
            logger.warning("Slack message %s in %s can no longer be updated: %s", ts, channel, error.response["error"])


def _as_it_stands(question: Question) -> dict[str, Any]:
    """The message for a question being posted: with its buttons while it is open, else what became of it."""
    if question.verdict is not None:
        return settled_message(question, "decided")
    if question.expired(utcnow()):
        return settled_message(question, "expired")
    return asked_message(question)
