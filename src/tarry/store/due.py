"""The store's scheduling queries for background work: which chats are due, picking them, writing when they next are.

``tarry.jobs`` asks these; only the store reads and writes its tables.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from sqlalchemy import Connection, and_, bindparam, func, or_, select, update

from tarry.clock import utcnow
from tarry.store.moment import NOW, lease_values
from tarry.store.tables import chats, tool_calls

if TYPE_CHECKING:
    from tarry.store.store import Store


@dataclass(frozen=True)
class ChatSchedule:
    """What a worker reads about a chat before carrying it on."""

    agent: str | None
    version: int
    cancel_requested_at: datetime | None


async def read_schedule(store: Store, chat_id: str) -> ChatSchedule | None:
    """The chat's agent, schedule version and cancellation request, or ``None`` for an unknown chat."""
    query = select(chats.c.agent, chats.c.schedule_version, chats.c.cancel_requested_at).where(chats.c.id == chat_id)
    row = await store.db.run_read(lambda connection: connection.execute(query).one_or_none())
    return None if row is None else ChatSchedule(row.agent, row.schedule_version, row.cancel_requested_at)


async def cancel_requested(store: Store, chat_id: str) -> bool:
    """Whether a cancellation of the chat is requested right now."""
    query = select(chats.c.cancel_requested_at).where(chats.c.id == chat_id)
    return await store.db.run_read(lambda connection: connection.scalar(query)) is not None


async def write_next_check(
    store: Store,
    chat_id: str,
    seen_version: int,
    if_free: Mapping[str, Sequence[datetime]],
    *,
    turn_due: bool,
    retry_at: datetime,
) -> datetime | None:
    """Set when the chat is next due, unless its schedule changed since ``seen_version`` (a newer wake wins).

    ``if_free`` holds, for each open call, when it next needs a look if no other process holds it;
    a call (or, with ``turn_due``, the model turn) another process holds is looked at again when
    its lease runs out. Reads those claims and writes the time in one transaction; returns the time.
    """

    def write(connection: Connection) -> datetime | None:
        claims = _live_claims(connection, chat_id)
        candidates: list[datetime] = []
        for call_id, free in if_free.items():
            held = claims.get(call_id)
            candidates.extend([held] if held is not None else free)
        if turn_due:
            candidates.append(claims.get(None, retry_at))
        at = min(candidates, default=None)
        connection.execute(
            update(chats)
            .where(chats.c.id == chat_id, chats.c.schedule_version == seen_version)
            .values(next_check_at=at, schedule_version=chats.c.schedule_version + 1)
        )
        return at

    return await store.db.run_write(write)


def _live_claims(connection: Connection, chat_id: str) -> dict[str | None, datetime]:
    """Until when other processes hold the chat's open calls (by call id) and its model turn (key ``None``), by
    the lease clock (``tarry.store.moment``)."""
    found: dict[str | None, datetime] = {}
    now = lease_values()
    rows = connection.execute(
        select(tool_calls.c.call_id, tool_calls.c.claimed_until).where(
            tool_calls.c.chat_id == chat_id,
            tool_calls.c.result_message_id.is_(None),
            tool_calls.c.claimed_until > NOW,
        ),
        now,
    )
    for row in rows:
        found[row.call_id] = row.claimed_until
    turn: datetime | None = connection.scalar(
        select(chats.c.claimed_until).where(chats.c.id == chat_id, chats.c.claimed_until > NOW), now
    )
    if turn is not None:
        found[None] = turn
    return found


async def pick_due(store: Store, agents: Collection[str], skip: Collection[str], limit: int) -> dict[str, ChatSchedule]:
    """Take up to ``limit`` due chats of ``agents``, with their schedules as taken.

    Each is pushed a lease ahead, so a worker that dies with it lets it fall due again.
    ``FOR UPDATE SKIP LOCKED`` on PostgreSQL; one writer at a time on SQLite.
    """
    if limit <= 0 or not agents:
        return {}
    now = utcnow()
    due = (
        select(chats.c.id)
        .where(chats.c.next_check_at <= now, chats.c.agent.in_(list(agents)))
        .order_by(chats.c.next_check_at)
        .limit(limit)
    )
    if skip:
        due = due.where(chats.c.id.not_in(list(skip)))
    if not store.db.is_sqlite:
        due = due.with_for_update(skip_locked=True, key_share=True)
    statement = (
        update(chats)
        .where(chats.c.id.in_(due.scalar_subquery()))
        .values(next_check_at=now + timedelta(seconds=store.lease), schedule_version=chats.c.schedule_version + 1)
        .returning(chats.c.id, chats.c.agent, chats.c.schedule_version, chats.c.cancel_requested_at)
    )
    rows = await store.db.run_write(lambda connection: connection.execute(statement).all())
    return {row.id: ChatSchedule(row.agent, row.schedule_version, row.cancel_requested_at) for row in rows}


async def earliest_due(store: Store, agents: Collection[str], skip: Collection[str]) -> datetime | None:
    """When the next chat of ``agents`` (other than ``skip``) falls due."""
    query = select(func.min(chats.c.next_check_at)).where(chats.c.agent.in_(list(agents)))
    if skip:
        query = query.where(chats.c.id.not_in(list(skip)))
    found: datetime | None = await store.db.run_read(lambda connection: connection.scalar(query))
    return found


async def wake_abandoned(store: Store, agents: Collection[str]) -> int:
    """Make chats due whose call or turn a dead process left claimed (its lease ran out); returns how many."""
    now = utcnow()
    abandoned_call = (
        select(tool_calls.c.chat_id)
        .where(
            tool_calls.c.result_message_id.is_(None),
            tool_calls.c.claimed_by.is_not(None),
            tool_calls.c.claimed_until < NOW,
        )
        .scalar_subquery()
    )
    statement = (
        update(chats)
        .where(
            chats.c.agent.in_(list(agents)),
            or_(chats.c.next_check_at.is_(None), chats.c.next_check_at > now),
            or_(
                chats.c.id.in_(abandoned_call),
                and_(chats.c.claimed_by.is_not(None), chats.c.claimed_until < NOW),
            ),
        )
        .values(next_check_at=now, schedule_version=chats.c.schedule_version + 1)
    )
    values = lease_values()
    return await store.db.run_write(lambda connection: int(connection.execute(statement, values).rowcount))


async def take_if_due(store: Store, chat_id: str, tolerance: float = 1.0) -> ChatSchedule | None:
    """Take the chat if its next check has come (within ``tolerance`` seconds): push it a lease ahead.

    Returns its schedule as taken, or ``None`` when it is not due: another run scheduled a later
    check, so that run's message carries it on. Of several messages due at once, one takes it.
    """
    now = utcnow()
    statement = (
        update(chats)
        .where(chats.c.id == chat_id, chats.c.next_check_at <= now + timedelta(seconds=tolerance))
        .values(next_check_at=now + timedelta(seconds=store.lease), schedule_version=chats.c.schedule_version + 1)
        .returning(chats.c.agent, chats.c.schedule_version, chats.c.cancel_requested_at)
    )
    row = await store.db.run_write(lambda connection: connection.execute(statement).one_or_none())
    return None if row is None else ChatSchedule(row.agent, row.schedule_version, row.cancel_requested_at)


async def overdue(store: Store, agents: Collection[str], grace: float) -> list[str]:
    """Chats of ``agents`` whose next check passed more than ``grace`` seconds ago."""
    query = select(chats.c.id).where(
        chats.c.agent.in_(list(agents)), chats.c.next_check_at < utcnow() - timedelta(seconds=grace)
    )
    return await store.db.run_read(lambda connection: list(connection.execute(query).scalars()))


async def give_back(store: Store, picked: Mapping[str, int]) -> None:
    """Make the chats ``picked`` (id: the schedule version they were taken at) due now again, unless a newer wake
    changed their schedule meanwhile: a worker took more than it had room for."""
    if not picked:
        return
    statement = (
        update(chats)
        .where(chats.c.id == bindparam("chat_id"), chats.c.schedule_version == bindparam("seen_version"))
        .values(next_check_at=bindparam("at"), schedule_version=chats.c.schedule_version + 1)
    )
    now = utcnow()
    rows = [{"chat_id": chat_id, "seen_version": version, "at": now} for chat_id, version in sorted(picked.items())]
    await store.db.run_write(lambda connection: connection.execute(statement, rows))
