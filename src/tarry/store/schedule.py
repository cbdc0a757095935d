"""When a background worker should next look at a chat: written by the journal and by decisions.

A chat row holds ``next_check_at`` (the earliest moment something may progress) and a
``schedule_version`` that every change of the schedule bumps, so a worker that computed a
later check from an older view cannot overwrite a newer wake (see ``tarry.jobs``).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, Connection, Update, bindparam, func, or_, update

from tarry.clock import utcnow
from tarry.store.tables import chats, constant

DEFAULT_POLL_INTERVAL = 5.0
"""Seconds until a working task that names no ``poll_interval`` is checked again."""
WAKE_CHANNEL = "tarry_chats"
"""The PostgreSQL ``NOTIFY`` channel on which a wake sends the chat's id."""


def wake(connection: Connection, chat_id: str, *, postgres: bool) -> int | None:
    """Make the chat due now (a decision or a cancellation arrived) and, on PostgreSQL, notify listeners.

    Also bumps the chat's version, so chat objects in every process read the change; returns
    the new version (``None`` when no chat has the id).
    """
    values = {"woken_chat": chat_id, "moment": utcnow()}
    version: int | None = connection.scalar(WAKE_NOTIFY if postgres else WAKE, values)
    return version


def wake_of(chat_id: ColumnElement[Any]) -> Update:
    """The wake of ``wake`` for the chat ``chat_id`` names (a parameter, or a value of a statement around
    it); it returns the chat's new version."""
    return wake_where(chats.c.id == chat_id)


def wake_where(condition: ColumnElement[bool]) -> Update:
    """The wake of ``wake`` for each chat that meets ``condition``; it returns each one's new version."""
    return (
        update(chats)
        .where(condition)
        .values(
            next_check_at=bindparam("moment", type_=chats.c.next_check_at.type),
            schedule_version=chats.c.schedule_version + constant(1),
            version=chats.c.version + constant(1),
        )
        .returning(chats.c.version)
    )


WAKE = wake_of(bindparam("woken_chat"))
"""The wake of ``wake``, built once.

Its parameters' names are no column's: a DML statement executed with a parameter named like a
column of its table would also set that column.
"""
NOTIFIED = func.pg_notify(constant(WAKE_CHANNEL), chats.c.id)
"""What a wake returns on PostgreSQL to notify the chat's listeners too."""
WAKE_NOTIFY = WAKE.returning(NOTIFIED)
"""``WAKE`` that also notifies listeners (PostgreSQL): the notification rides on the update, one round trip."""


def check_by(connection: Connection, chat_id: str, at: datetime) -> None:
    """Make the chat due at ``at`` at the latest (keeps an earlier check)."""
    connection.execute(
        update(chats)
        .where(chats.c.id == chat_id, or_(chats.c.next_check_at.is_(None), chats.c.next_check_at > at))
        .values(next_check_at=at, schedule_version=chats.c.schedule_version + 1)
    )
