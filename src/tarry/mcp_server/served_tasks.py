"""The tasks tarry serves as an MCP server: one row per task, any process answers for it.

A served task is the server's side of an MCP task (seed 002): an unguessable id, a status
that only moves along the spec's transitions, a time to live measured from ``created_at``,
and the result kept for polling until that time ends. The work behind it is a stored chat
(``chat_id``) whose one tool call runs the tool, so tarry's worker carries it on under the
chat's leases; the task's row (``tarry_served_tasks``, in the store's schema and its migrations) only says
what the MCP client sees.

An expired task is not found: every read treats it as gone, and
[`ServedTasks.reap`][tarry.mcp_server.served_tasks.ServedTasks.reap] deletes the rows.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal

from sqlalchemy import Connection, delete, or_, select, update

from tarry.clock import utcnow
from tarry.errors import TarryError
from tarry.store import Store
from tarry.store.tables import served_tasks
from tarry.text import unstorable

ServedStatus = Literal["working", "input_required", "completed", "failed", "cancelled"]
TERMINAL: frozenset[str] = frozenset({"completed", "failed", "cancelled"})
TRANSITIONS: dict[str, frozenset[str]] = {
    "working": frozenset({"input_required", "completed", "failed", "cancelled"}),
    "input_required": frozenset({"working", "completed", "failed", "cancelled"}),
    "completed": frozenset(),
    "failed": frozenset(),
    "cancelled": frozenset(),
}
"""Which status may follow which (MCP 2025-11-25 tasks): a terminal status never changes."""
ID_BYTES = 32
"""Random bytes in a task id (256 bits, from ``secrets``): the id is the handle, so it must be unguessable."""


class TaskTransitionError(TarryError, ValueError):
    """A served task was asked to move to a status its current one cannot reach (a terminal one, say)."""


@dataclass(frozen=True)
class ServedTask:
    """One task as the MCP client sees it (all times aware UTC, durations in milliseconds as MCP has them)."""

    id: str
    chat_id: str
    tool: str
    status: ServedStatus
    status_message: str | None
    ttl_ms: int | None
    poll_interval_ms: int | None
    created_at: datetime
    last_updated_at: datetime
    owner: str | None
    result: dict[str, Any] | None

    def done(self) -> bool:
        """Whether the status is terminal (completed, failed or cancelled)."""
        return self.status in TERMINAL

    @property
    def expires_at(self) -> datetime | None:
        """When the task stops existing: ``created_at`` plus its time to live (``None``: never)."""
        return None if self.ttl_ms is None else self.created_at + timedelta(milliseconds=self.ttl_ms)


def _task_of(row: Any) -> ServedTask:
    return ServedTask(
        id=row["id"],
        chat_id=row["chat_id"],
        tool=row["tool"],
        status=row["status"],
        status_message=row["status_message"],
        ttl_ms=row["ttl_ms"],
        poll_interval_ms=row["poll_interval_ms"],
        created_at=row["created_at"],
        last_updated_at=row["last_updated_at"],
        owner=row["owner"],
        result=row["result"],
    )


def _alive(now: datetime) -> Any:
    return or_(served_tasks.c.expires_at.is_(None), served_tasks.c.expires_at > now)


def _check_ms(name: str, value: int | None) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
        raise ValueError(f"{name} must be a non-negative number of milliseconds or None, got {value!r}")


class ServedTasks:
    """The served tasks of one store: create, read, list, move along the transitions, reap.

    Every write is one transaction; a status change is a conditional update on the status it
    read, so two processes cannot both move a task (the loser gets ``None`` or an error).
    ``owner`` binds a task to the auth context that created it: reads with another owner find
    nothing.
    """

    def __init__(self, store: Store) -> None:
        self.store = store

    async def create(
        self,
        chat_id: str,
        tool: str,
        *,
        ttl_ms: int | None,
        poll_interval_ms: int | None = None,
        owner: str | None = None,
        status_message: str | None = None,
    ) -> ServedTask:
        """Record a new ``working`` task for the chat that does its work; its id is 256 random bits."""
        _check_ms("ttl_ms", ttl_ms)
        _check_ms("poll_interval_ms", poll_interval_ms)
        now = utcnow()
        row = {
            "id": secrets.token_urlsafe(ID_BYTES),
            "chat_id": chat_id,
            "tool": tool,
            "status": "working",
            "status_message": status_message,
            "ttl_ms": ttl_ms,
            "poll_interval_ms": poll_interval_ms,
            "created_at": now,
            "last_updated_at": now,
            "expires_at": None if ttl_ms is None else now + timedelta(milliseconds=ttl_ms),
            "owner": owner,
            "result": None,
        }
        await self.store.db.run_write(lambda connection: connection.execute(served_tasks.insert().values(**row)))
        return _task_of(row)

    async def get(self, task_id: str, *, owner: str | None = None) -> ServedTask | None:
        """The task, or ``None`` when it is unknown, expired, or another owner's."""
        if not isinstance(task_id, str) or unstorable(task_id):
            return None
        query = select(served_tasks).where(served_tasks.c.id == task_id, _alive(utcnow()), _owned_by(owner))
        row = await self.store.db.run_read(lambda connection: connection.execute(query).mappings().one_or_none())
        return None if row is None else _task_of(row)

    async def list(self, *, owner: str | None = None, after: str | None = None, limit: int = 100) -> list[ServedTask]:
        """Unexpired tasks of ``owner``, oldest first, starting after the task ``after`` (a cursor)."""
        now = utcnow()

        def read(connection: Connection) -> list[ServedTask]:
            query = select(served_tasks).where(_alive(now), _owned_by(owner))
            if after is not None:
                start = connection.execute(
                    select(served_tasks.c.created_at, served_tasks.c.id).where(served_tasks.c.id == after)
                ).one_or_none()
                if start is None:
                    raise ValueError(f"Unknown cursor {after!r}")
                query = query.where(
                    or_(
                        served_tasks.c.created_at > start.created_at,
                        (served_tasks.c.created_at == start.created_at) & (served_tasks.c.id > start.id),
                    )
                )
            query = query.order_by(served_tasks.c.created_at, served_tasks.c.id).limit(limit)
            return [_task_of(row) for row in connection.execute(query).mappings()]

        return await self.store.db.run_read(read)

    async def move(
        self,
        task_id: str,
        status: ServedStatus,
        *,
        status_message: str | None = None,
        result: dict[str, Any] | None = None,
    ) -> ServedTask:
        """Move the task to ``status`` (with its message and, when terminal, its result), in one transaction.

        Staying in a non-terminal status only updates the message. Raises
        [`TaskTransitionError`][tarry.mcp_server.served_tasks.TaskTransitionError] when the task's status cannot reach
        ``status`` (a terminal one never changes) and ``LookupError`` when the task is gone.
        """
        if status not in TRANSITIONS:
            raise ValueError(f"Unknown task status {status!r}; one of {', '.join(TRANSITIONS)}")
        now = utcnow()

        def write(connection: Connection) -> ServedTask:
            row = (
                connection.execute(
                    select(served_tasks).where(served_tasks.c.id == task_id, _alive(now)).with_for_update()
                )
                .mappings()
                .one_or_none()
            )
            if row is None:
                raise LookupError(f"No served task has the id {task_id!r}")
            current = row["status"]
            if status != current and status not in TRANSITIONS[current]:
                raise TaskTransitionError(f"Task {task_id} is {current}: it cannot become {status}")
            if status == current and current in TERMINAL:
                raise TaskTransitionError(f"Task {task_id} is already {current}")
            values: dict[str, Any] = {"status": status, "status_message": status_message, "last_updated_at": now}
            if status in TERMINAL:
                values["result"] = result
            changed = connection.execute(
                update(served_tasks)
                .where(served_tasks.c.id == task_id, served_tasks.c.status == current)
                .values(**values)
            )
            if changed.rowcount != 1:  # pragma: no cover - the row lock (or BEGIN IMMEDIATE) rules this out
                raise TaskTransitionError(f"Task {task_id} changed while it was being moved to {status}")
            return _task_of({**row, **values})

        return await self.store.db.run_write(write)

    async def reap(self) -> int:
        """Delete every expired task (its chat stays); returns how many went."""
        now = utcnow()

        def write(connection: Connection) -> int:
            done = connection.execute(
                delete(served_tasks).where(served_tasks.c.expires_at.is_not(None), served_tasks.c.expires_at <= now)
            )
            return int(done.rowcount or 0)

        return await self.store.db.run_write(write)


def _owned_by(owner: str | None) -> Any:
    return served_tasks.c.owner.is_(None) if owner is None else served_tasks.c.owner == owner
