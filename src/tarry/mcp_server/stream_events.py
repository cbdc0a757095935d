"""Stream events: the messages a server sent on a stream, kept for a while so a client can resume.

An MCP server over streamable HTTP gives each SSE event an id; a client whose stream dropped
reconnects with ``Last-Event-ID`` and gets the events after it. Keeping them in the store's table
``tarry_stream_events`` (not in one process's memory) lets them outlive a slow client and leave the process's memory.

Every event belongs to a ``scope`` (whoever may read it back; the MCP server uses one per
session) and a stream within it. Its id is random, so only a client that was sent an id can
name it; a replay returns the later events of the same scope and stream only. Events expire
``ttl`` after they were stored; [`StreamEvents.reap`][tarry.mcp_server.StreamEvents.reap] deletes them (``add`` does it
now and then too).
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection, delete, select

from tarry.clock import utcnow
from tarry.store import Store
from tarry.store.tables import MAX_STREAM, stream_events
from tarry.text import unstorable


def stream_problem(stream: str) -> str | None:
    """Why ``stream`` cannot name a stream (too long, NUL characters, a lone surrogate), or ``None`` when it can."""
    if len(stream) > MAX_STREAM:
        return f"is longer than {MAX_STREAM} characters"
    held = unstorable(stream)
    return None if held is None else f"holds {held}"


REAP_EVERY = timedelta(minutes=1)
"""How often [`StreamEvents.add`][tarry.mcp_server.StreamEvents.add] also deletes expired events (at most)."""


@dataclass(frozen=True)
class StreamEvent:
    """One stored event: its id, and the message (``None`` for a stream's opening, which carries none)."""

    id: str
    message: dict[str, Any] | None


class StreamEvents:
    """The stream events of one store: store one, read those after one, reap the expired."""

    def __init__(self, store: Store, *, ttl: timedelta = timedelta(hours=1)) -> None:
        if ttl <= timedelta(0):
            raise ValueError(f"ttl must be positive, got {ttl}")
        self.store = store
        self.ttl = ttl
        self._reaped: datetime | None = None

    async def add(self, scope: str, stream: str, message: dict[str, Any] | None) -> str:
        """Keep ``message`` as the next event of ``stream`` in ``scope``; returns its new, unguessable id.

        Raises ``ValueError`` for a stream name the store cannot keep (``stream_problem``).
        """
        problem = stream_problem(stream)
        if problem is not None:
            raise ValueError(f"The stream name {stream[:40]!r} {problem}")
        now = utcnow()
        event_id = secrets.token_urlsafe(24)
        row = {"id": event_id, "scope": scope, "stream": stream, "message": message, "expires_at": now + self.ttl}
        reap = self._reaped is None or now - self._reaped >= REAP_EVERY
        if reap:
            self._reaped = now

        def write(connection: Connection) -> None:
            if reap:
                connection.execute(delete(stream_events).where(stream_events.c.expires_at <= now))
            connection.execute(stream_events.insert().values(**row))

        await self.store.db.run_write(write)
        return event_id

    async def after(self, scope: str, event_id: str) -> tuple[str, list[StreamEvent]] | None:
        """The stream of event ``event_id`` and its later events, oldest first; ``None`` when it is unknown here.

        An event of another scope, or an expired one, is unknown.
        """
        now = utcnow()

        def read(connection: Connection) -> tuple[str, list[StreamEvent]] | None:
            last = connection.execute(
                select(stream_events.c.seq, stream_events.c.stream).where(
                    stream_events.c.id == event_id, stream_events.c.scope == scope, stream_events.c.expires_at > now
                )
            ).one_or_none()
            if last is None:
                return None
            later = connection.execute(
                select(stream_events.c.id, stream_events.c.message)
                .where(
                    stream_events.c.scope == scope,
                    stream_events.c.stream == last.stream,
                    stream_events.c.seq > last.seq,
                    stream_events.c.expires_at > now,
                )
                .order_by(stream_events.c.seq)
            )
            return last.stream, [StreamEvent(row.id, row.message) for row in later]

        return await self.store.db.run_read(read)

    async def reap(self) -> int:
        """Delete every expired event; returns how many went."""
        now = utcnow()

        def write(connection: Connection) -> int:
            return int(connection.execute(delete(stream_events).where(stream_events.c.expires_at <= now)).rowcount or 0)

        return await self.store.db.run_write(write)
