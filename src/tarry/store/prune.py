"""Pruning: removing finished chats with everything they own, in short transactions (``Store.prune``).

A chat is finished when nothing of it waits, works or is due: none of its calls is open, none of its
questions is open (undecided and unexpired), no task the MCP server serves for it is unfinished, no
process holds its turn or one of its calls, no worker is looking at it (``next_check_at`` is not ahead),
and its last message is the model's reply (or a cancellation was carried out). A chat with no messages
has nothing to carry on, and counts as finished too. Its last activity is the latest of its creation,
its last message and its cancellation request.

Each batch is one transaction that finds its chats and deletes them under their rows' locks: on
PostgreSQL it locks the batch's chat rows (``FOR UPDATE SKIP LOCKED``: a chat another transaction holds
is passed over) and checks each chat again, with what committed meanwhile, before it deletes; on SQLite
the batch is one write transaction, which no other writer interleaves. A chat that a decision, a worker
or a new message touches in the meantime is kept whole: anything that writes to it or adds a row to it
takes its row's lock.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar

from sqlalchemy import ColumnElement, Connection, Engine, Table, and_, delete, exists, not_, or_, select

from tarry.clock import utcnow
from tarry.errors import StoreConflictError, StoreError
from tarry.store.audit import TRAIL
from tarry.store.moment import NOW, lease_values
from tarry.store.tables import chats, messages, questions, served_tasks, tool_calls

if TYPE_CHECKING:
    from tarry.store.store import Store

T = TypeVar("T")
OWNED: tuple[tuple[Table, ColumnElement[Any]], ...] = (
    (questions, questions.c.chat_id),
    (served_tasks, served_tasks.c.chat_id),
    (tool_calls, tool_calls.c.chat_id),
    (messages, messages.c.chat_id),
    (chats, chats.c.id),
)
"""The tables that hold a chat's rows, in the order a prune deletes them (calls before the messages they point to)."""
RECLAIM_PAGES = 2000
"""Free pages a SQLite transaction gives back at most (a few milliseconds of holding the write lock)."""
RETRIES = 3
"""Tries of a batch that the database ended to break a deadlock (with a late decision on one of its chats)."""


@dataclass
class PruneReport:
    """What a prune removed: ``chats`` (how many), ``rows`` (rows deleted per table: the chats' own, never the
    audit trail's, which a prune keeps), and ``skipped`` (chats that were finished when a batch found them,
    but that another process touched before the batch deleted them: they stay whole)."""

    chats: int = 0
    rows: dict[str, int] = field(default_factory=dict)
    skipped: int = 0

    def add(self, other: PruneReport) -> None:
        """Count ``other`` (one batch's report) in."""
        self.chats += other.chats
        self.skipped += other.skipped
        for table, count in other.rows.items():
            self.rows[table] = self.rows.get(table, 0) + count


def check_prune(finished_before: datetime, batch_size: int) -> None:
    """Raise ``ValueError``/``TypeError`` naming what is wrong with a prune's arguments."""
    if not isinstance(finished_before, datetime):
        raise TypeError(f"finished_before must be a datetime, got {finished_before!r}")
    if finished_before.tzinfo is None:
        raise ValueError(
            f"finished_before must be an aware datetime (with a time zone, e.g. UTC), got the naive {finished_before!r}"
        )
    if finished_before > utcnow():
        raise ValueError(f"finished_before must not be in the future, got {finished_before.isoformat()}")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be a whole number of at least 1, got {batch_size!r}")


async def prune_chats(store: Store, finished_before: datetime, *, batch_size: int) -> PruneReport:
    """Remove the chats that finished before ``finished_before``, a batch at a time (``Store.prune``); the audit
    trail stays (append-only and tamper-evident: its rows name the chat by id)."""
    check_prune(finished_before, batch_size)
    report = PruneReport()
    after: str | None = ""
    postgres = not store.db.is_sqlite
    while after is not None:
        work = partial(_prune_batch, after=after, cutoff=finished_before, size=batch_size, postgres=postgres)
        batch, after = await _with_retries(partial(store.db.run_write, work, may_block=True))
        report.add(batch)
        await asyncio.sleep(0)  # between two batches, the store's other work goes first
    if not postgres:
        await _reclaim(store)
    return report


async def _reclaim(store: Store) -> None:
    """Give the pages the prune freed back, a few at a time (SQLite with ``auto_vacuum=INCREMENTAL``)."""
    more = True
    while more:
        more = await store.db.run_write(_reclaim_some)
        await asyncio.sleep(0)


async def _with_retries(run: Callable[[], Awaitable[T]]) -> T:
    for attempt in range(RETRIES):
        try:
            return await run()
        except StoreConflictError:
            if attempt == RETRIES - 1:
                raise
    raise AssertionError("unreachable")  # pragma: no cover


def _finished(cutoff: datetime) -> ColumnElement[bool]:
    """The chats that finished before ``cutoff``: nothing waits, works or is due (the module's docstring)."""
    last_message = exists().where(
        messages.c.chat_id == chats.c.id,
        messages.c.position == chats.c.message_count - 1,
        messages.c.created_at < cutoff,
        or_(messages.c.role == "assistant", chats.c.cancel_requested_at.is_not(None)),
    )
    open_call = exists().where(tool_calls.c.chat_id == chats.c.id, tool_calls.c.result_message_id.is_(None))
    held_call = exists().where(tool_calls.c.chat_id == chats.c.id, tool_calls.c.claimed_until > NOW)
    open_question = exists().where(
        questions.c.chat_id == chats.c.id,
        questions.c.decision.is_(None),
        or_(questions.c.expires_at.is_(None), questions.c.expires_at > NOW),
    )
    served_task_working = exists().where(
        served_tasks.c.chat_id == chats.c.id,
        served_tasks.c.status.in_(["working", "input_required"]),
        or_(served_tasks.c.expires_at.is_(None), served_tasks.c.expires_at > NOW),
    )
    return and_(
        chats.c.created_at < cutoff,
        or_(chats.c.cancel_requested_at.is_(None), chats.c.cancel_requested_at < cutoff),
        or_(chats.c.claimed_until.is_(None), chats.c.claimed_until < NOW),
        or_(chats.c.next_check_at.is_(None), chats.c.next_check_at <= NOW),
        or_(chats.c.message_count == 0, last_message),
        not_(open_call),
        not_(held_call),
        not_(open_question),
        not_(served_task_working),
    )


def _prune_batch(
    connection: Connection,
    *,
    after: str,
    cutoff: datetime,
    size: int,
    postgres: bool,
) -> tuple[PruneReport, str | None]:
    """Delete up to ``size`` finished chats whose ids come after ``after``, in one transaction.

    Returns what it removed and the last id it looked at (``None``: no chat is left to look at).
    """
    now = lease_values()
    found = select(chats.c.id).where(chats.c.id > after, _finished(cutoff)).order_by(chats.c.id).limit(size)
    if postgres:
        found = found.with_for_update(of=chats, skip_locked=True)
    ids = list(connection.scalars(found, now))
    if not ids:
        return PruneReport(), None
    doomed = ids
    if postgres:  # what committed since the statement began (a message, a claim) counts: look again, under the locks
        doomed = list(connection.scalars(select(chats.c.id).where(chats.c.id.in_(ids), _finished(cutoff)), now))
    report = PruneReport(chats=len(doomed), skipped=len(ids) - len(doomed))
    if doomed:
        for table, chat_id in OWNED:
            report.rows[table.name] = connection.execute(delete(table).where(chat_id.in_(doomed))).rowcount
    return report, ids[-1]


def _reclaim_some(connection: Connection) -> bool:
    """On SQLite with ``auto_vacuum=INCREMENTAL``, give up to ``RECLAIM_PAGES`` of the pages a prune freed back to
    the file system; whether some are left."""
    if connection.exec_driver_sql("PRAGMA auto_vacuum").scalar() != 2:  # not INCREMENTAL
        return False
    free = int(connection.exec_driver_sql("PRAGMA freelist_count").scalar() or 0)
    for _ in range(min(free, RECLAIM_PAGES)):
        connection.exec_driver_sql("PRAGMA incremental_vacuum")  # Python's sqlite3 runs it one page a time
    return free > RECLAIM_PAGES


@dataclass(frozen=True)
class Space:
    """How many bytes a SQLite database's file holds (``size``) and how many of them are free pages (``free``)."""

    size: int
    free: int


async def sqlite_space(store: Store) -> Space | None:
    """The SQLite file's size and free bytes, or ``None`` on PostgreSQL."""
    if not store.db.is_sqlite:
        return None

    def read(connection: Connection) -> Space:
        page = int(connection.exec_driver_sql("PRAGMA page_size").scalar() or 0)
        pages = int(connection.exec_driver_sql("PRAGMA page_count").scalar() or 0)
        free = int(connection.exec_driver_sql("PRAGMA freelist_count").scalar() or 0)
        return Space(page * pages, page * free)

    return await store.db.run_read(read)


async def vacuum_file(store: Store) -> None:
    """Rewrite a SQLite database's file without its free pages (``VACUUM``), making later prunes give their
    space back at once (``auto_vacuum=INCREMENTAL``). It takes the database for itself while it runs, and needs
    free disk space about the size of the file. Does nothing on PostgreSQL, whose autovacuum reuses the space."""
    if store.db.is_sqlite:
        await store.db.check_schema()
        await asyncio.to_thread(_vacuum, store.db.sync_engine)


def _vacuum(engine: Engine) -> None:
    connection = engine.raw_connection()  # VACUUM runs outside a transaction, so not through Database's BEGIN
    try:
        connection.driver_connection.execute("PRAGMA auto_vacuum=INCREMENTAL")  # type: ignore[union-attr]
        connection.driver_connection.execute("VACUUM")  # type: ignore[union-attr]
    except sqlite3.Error as error:
        raise StoreError(f"VACUUM of {engine.url.database} failed: {error}") from error
    finally:
        connection.close()


ROW_NAMES: Mapping[str, str] = {
    "tarry_chats": "chats",
    "tarry_messages": "messages",
    "tarry_tool_calls": "tool calls",
    "tarry_questions": "questions",
    "tarry_served_tasks": "served MCP tasks",
    TRAIL: "trail events",  # always 0: a prune keeps the trail
}
"""What each table's rows are, as the command line says them."""
