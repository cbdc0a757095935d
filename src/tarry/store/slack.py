"""Where a question's Slack messages went: saved when the Slack sender posts one, read to update them all."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Connection, select
from sqlalchemy.dialects import postgresql, sqlite

from tarry.clock import utcnow
from tarry.store.tables import slack_messages


@dataclass(frozen=True)
class SlackMessage:
    """One Slack message posted about a question: the Slack channel (a conversation id) and the message's ``ts``."""

    delivery_id: str
    """The delivery that posted it (stable across the delivery's attempts)."""
    question_id: str
    channel: str
    """The conversation Slack put the message in (``chat.postMessage``'s answer: a ``C…`` or ``D…`` id)."""
    ts: str
    """The message's timestamp, its id within the channel."""
    posted_at: datetime


def save_slack_message(connection: Connection, message: SlackMessage) -> bool:
    """Record ``message`` unless its delivery's message is recorded already; whether this call recorded it."""
    dialect = postgresql if connection.dialect.name == "postgresql" else sqlite
    values = {
        "delivery_id": message.delivery_id,
        "question_id": message.question_id,
        "channel": message.channel,
        "ts": message.ts,
        "posted_at": message.posted_at,
    }
    insert = dialect.insert(slack_messages).values(**values).on_conflict_do_nothing()
    return connection.scalar(insert.returning(slack_messages.c.delivery_id)) is not None


def read_slack_messages(connection: Connection, question_id: str) -> list[SlackMessage]:
    """The Slack messages posted about ``question_id``, oldest first."""
    query = (
        select(slack_messages)
        .where(slack_messages.c.question_id == question_id)
        .order_by(slack_messages.c.posted_at, slack_messages.c.delivery_id)
    )
    return [SlackMessage(**row) for row in connection.execute(query).mappings()]


def new_slack_message(delivery_id: str, question_id: str, channel: str, ts: str) -> SlackMessage:
    """A message just posted, stamped now; raises ``ValueError`` for an empty channel or ``ts``."""
    for name, value in (("delivery_id", delivery_id), ("channel", channel), ("ts", ts)):
        if not isinstance(value, str) or not value:
            raise ValueError(f"A Slack message's {name} must be a non-empty str, got {value!r}")
    return SlackMessage(delivery_id, question_id, channel, ts, utcnow())
