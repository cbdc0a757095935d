"""The journal of a stored chat: every change is one transaction, claims are leases on rows."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from sqlalchemy import func, insert, or_, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from tarry.calls import CallRecord, Claim, Outcome
from tarry.chat import Chat
from tarry.errors import ClaimLostError
from tarry.journal import utcnow
from tarry.messages import Message
from tarry.questions import Decision, Question
from tarry.store.rows import apply_call_row, call_from_row, message_from_row, message_values, question_values
from tarry.store.schedule import check_by
from tarry.store.tables import chats, messages, questions, tool_calls
from tarry.tasks import Task

if TYPE_CHECKING:
    from tarry.store.store import Store

logger = logging.getLogger("tarry.store")


class StoreJournal:
    """Writes a chat's changes to the store and reads back what other processes wrote."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.db = store.db

    async def refresh(self, chat: Chat) -> None:
        """Re-read the current turn: the messages from the last assistant message on, and its calls."""
        start = _tail_start(chat)
        async with self.db.read() as connection:
            await read_tail(connection, chat, start)

    async def append(self, chat: Chat, message: Message, records: Sequence[CallRecord] = ()) -> None:
        """Save a user or assistant message and the records of the calls it makes."""
        async with self.db.write() as connection:
            position = await next_position(connection, chat.id, self.db.is_sqlite)
            await connection.execute(
                insert(messages).values(
                    chat_id=chat.id, position=position, created_at=utcnow(), **message_values(message)
                )
            )
            for record in records:
                await insert_call(connection, chat.id, position, record)
            if message.role == "user":  # a new question of the user ends an earlier cancellation
                await connection.execute(update(chats).where(chats.c.id == chat.id).values(cancel_requested_at=None))

    @asynccontextmanager
    async def hold_call(self, chat: Chat, record: CallRecord) -> AsyncIterator[Claim]:
        """Claim the call's row (a lease renewed while the block runs); yields ``BUSY`` when another holds it."""
        row_id = record.extra["row_id"]
        now = utcnow()
        async with self.db.write() as connection:
            row = (
                (await connection.execute(select(tool_calls).where(tool_calls.c.id == row_id).with_for_update()))
                .mappings()
                .one()
            )
            if row["result_message_id"] is not None or (
                row["claimed_until"] is not None and row["claimed_until"] > now
            ):
                claim = Claim.BUSY
            else:
                claim = Claim.RECLAIMED if row["claimed_by"] is not None else Claim.GRANTED
                await connection.execute(
                    update(tool_calls)
                    .where(tool_calls.c.id == row_id)
                    .values(claimed_by=self.store.owner, claimed_until=now + self._lease)
                )
                question_rows = await _question_rows(connection, [row_id])
                apply_call_row(record, row, question_rows.get(row_id, []), chat.tools.get(record.call.name))
        if claim is Claim.BUSY:
            yield claim
            return
        record.extra["claimed"] = True
        record.running = True
        renewal = asyncio.create_task(self._renew(tool_calls, row_id))
        try:
            yield claim
        finally:
            renewal.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await renewal
            record.running = False
            if record.extra.pop("claimed", False):
                await self._release(tool_calls, row_id)

    @asynccontextmanager
    async def hold_turn(self, chat: Chat) -> AsyncIterator[bool]:
        """Claim the chat around one model request; yields ``False`` when another process holds it."""
        now = utcnow()
        async with self.db.write() as connection:
            result = await connection.execute(
                update(chats)
                .where(chats.c.id == chat.id, or_(chats.c.claimed_until.is_(None), chats.c.claimed_until < now))
                .values(claimed_by=self.store.owner, claimed_until=now + self._lease)
            )
        if result.rowcount != 1:
            yield False
            return
        renewal = asyncio.create_task(self._renew(chats, chat.id))
        try:
            yield True
        finally:
            renewal.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await renewal
            await self._release(chats, chat.id)

    async def save_call(self, chat: Chat, record: CallRecord, outcome: Outcome) -> None:
        """Save a call's result, or its new pause and questions; releases the claim in the same transaction."""
        row_id = record.extra["row_id"]
        async with self.db.write() as connection:
            changes: dict[str, Any] = {"claimed_by": None, "claimed_until": None, "version": tool_calls.c.version + 1}
            if outcome.result is not None:
                position = await next_position(connection, chat.id, self.db.is_sqlite)
                inserted = await connection.execute(
                    insert(messages)
                    .values(chat_id=chat.id, position=position, created_at=utcnow(), **message_values(outcome.result))
                    .returning(messages.c.id)
                )
                changes["result_message_id"] = inserted.scalar_one()
            else:
                assert outcome.task is not None
                changes["state"] = outcome.task.to_dict()
                changes["waiting_on"] = [question.id for question in outcome.task.questions] or None
                await insert_questions(connection, chat.id, row_id, len(record.questions), outcome.questions)
                await _schedule_check(connection, chat.id, outcome.task)
            result = await connection.execute(
                update(tool_calls)
                .where(
                    tool_calls.c.id == row_id,
                    tool_calls.c.claimed_by == self.store.owner,
                    tool_calls.c.result_message_id.is_(None),
                )
                .values(**changes)
                .returning(tool_calls.c.version)
            )
            version = result.scalar_one_or_none()
            if version is None:
                raise ClaimLostError(f"The claim on the {record.call.name} call {record.call.id} was lost")
        record.extra.pop("claimed", None)
        record.extra["version"] = version

    async def decide(
        self,
        chat: Chat,
        question: Question,
        decision: Decision,
        answer: dict[str, Any] | None,
        note: str | None,
    ) -> bool:
        """Record the decision under the question's row lock, then update the question object."""
        return await self.store.record_decision(question, decision, answer, note)

    async def add_question(self, chat: Chat, record: CallRecord, question: Question) -> None:
        """Save a question the running call asks while it runs."""
        async with self.db.write() as connection:
            await insert_questions(connection, chat.id, record.extra["row_id"], len(record.questions), [question])

    async def wait_for_decision(self, chat: Chat, question: Question) -> Question:
        """Poll the question's row until a decision is recorded in any process, or its time runs out."""
        while question.decision is None and not question.expired(utcnow()):
            async with self.db.read() as connection:
                row = (
                    (await connection.execute(select(questions).where(questions.c.id == question.id))).mappings().one()
                )
            if row["decision"] is not None:
                question.decision, question.answer, question.note, question.decided_at = (
                    row["decision"],
                    row["answer"],
                    row["note"],
                    row["decided_at"],
                )
                break
            await asyncio.sleep(self.store.poll_interval)
        return question

    @property
    def _lease(self) -> timedelta:
        return timedelta(seconds=self.store.lease)

    async def _renew(self, table: Any, key: Any) -> None:
        while True:
            await asyncio.sleep(self.store.lease / 3)
            try:
                async with self.db.write() as connection:
                    await connection.execute(
                        update(table)
                        .where(table.c.id == key, table.c.claimed_by == self.store.owner)
                        .values(claimed_until=utcnow() + self._lease)
                    )
            except Exception:
                logger.exception("Renewing a lease failed; it will run out if this goes on")

    async def _release(self, table: Any, key: Any) -> None:
        async with self.db.write() as connection:
            await connection.execute(
                update(table)
                .where(table.c.id == key, table.c.claimed_by == self.store.owner)
                .values(claimed_by=None, claimed_until=None)
            )


def _tail_start(chat: Chat) -> int:
    for index in range(len(chat.messages) - 1, -1, -1):
        if chat.messages[index].role == "assistant":
            return index
    return 0


async def next_position(connection: AsyncConnection, chat_id: str, is_sqlite: bool) -> int:
    """The position of the chat's next message; locks the chat row first on PostgreSQL."""
    if not is_sqlite:
        await connection.execute(select(chats.c.id).where(chats.c.id == chat_id).with_for_update())
    last = await connection.scalar(select(func.max(messages.c.position)).where(messages.c.chat_id == chat_id))
    return 0 if last is None else int(last) + 1


async def insert_call(connection: AsyncConnection, chat_id: str, position: int, record: CallRecord) -> None:
    """Insert a new call's row and its approval question; remembers the row id on the record."""
    call = record.call
    inserted = await connection.execute(
        insert(tool_calls)
        .values(
            chat_id=chat_id,
            message_position=position,
            call_id=call.id,
            name=call.name,
            arguments=dict(call.arguments),
            needs_approval=record.needs_approval,
            version=0,
            created_at=utcnow(),
        )
        .returning(tool_calls.c.id)
    )
    row_id = inserted.scalar_one()
    record.extra["row_id"] = row_id
    record.extra["version"] = 0
    await insert_questions(connection, chat_id, row_id, 0, record.questions)


async def insert_questions(
    connection: AsyncConnection, chat_id: str, row_id: int, first: int, new: Sequence[Question]
) -> None:
    """Insert question rows for one call, numbered from ``first``."""
    if new:
        await connection.execute(
            insert(questions),
            [
                {"chat_id": chat_id, "tool_call_id": row_id, "number": first + index, **question_values(question)}
                for index, question in enumerate(new)
            ],
        )
        expiries = [question.expires_at for question in new if question.expires_at is not None]
        if expiries:
            await check_by(connection, chat_id, min(expiries))


async def _schedule_check(connection: AsyncConnection, chat_id: str, task: Task) -> None:
    """Make the chat due when its paused task should next be checked (or expires)."""
    if not task.waits_on_person():
        await check_by(connection, chat_id, utcnow() + timedelta(seconds=task.poll_interval or 0))
    if task.expires_at is not None:
        await check_by(connection, chat_id, task.expires_at)


async def _question_rows(connection: AsyncConnection, row_ids: Sequence[int]) -> dict[int, list[Any]]:
    grouped: dict[int, list[Any]] = {row_id: [] for row_id in row_ids}
    if row_ids:
        found = await connection.execute(
            select(questions).where(questions.c.tool_call_id.in_(row_ids)).order_by(questions.c.number)
        )
        for row in found.mappings():
            grouped[row["tool_call_id"]].append(row)
    return grouped


async def read_tail(connection: AsyncConnection, chat: Chat, start: int) -> None:
    """Replace the chat's messages from ``start`` on, and the records of their calls, with what the database holds."""
    message_rows = (
        await connection.execute(
            select(messages.c.id, messages)
            .where(messages.c.chat_id == chat.id, messages.c.position >= start)
            .order_by(messages.c.position)
        )
    ).mappings()
    tail: list[Message] = []
    by_row_id: dict[int, Message] = {}
    for row in message_rows:
        if row["position"] != start + len(tail):
            raise ValueError(f"Chat {chat.id} has a gap in its messages at position {start + len(tail)}")
        message = message_from_row(row)
        tail.append(message)
        by_row_id[row["id"]] = message
    call_rows = list(
        (
            await connection.execute(
                select(tool_calls)
                .where(tool_calls.c.chat_id == chat.id, tool_calls.c.message_position >= start)
                .order_by(tool_calls.c.id)
            )
        ).mappings()
    )
    question_rows = await _question_rows(connection, [row["id"] for row in call_rows])
    chat.messages[start:] = tail
    for row in call_rows:
        call = call_from_row(row)
        record = chat.records.get(call.id)
        if record is None:
            record = chat.records[call.id] = CallRecord(call, extra={"row_id": row["id"]})
        apply_call_row(record, row, question_rows[row["id"]], chat.tools.get(call.name))
        if row["result_message_id"] is not None:
            record.result = by_row_id[row["result_message_id"]]
