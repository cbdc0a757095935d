"""Stored chats listed with what they wait on, for screens and commands that show many chats."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Connection, func, literal_column, select, union

from tarry.clock import utcnow
from tarry.store.tables import chats, questions, tool_calls


@dataclass(frozen=True)
class ChatSummary:
    """One stored chat: who made it, how long it is, and what it waits on.

    ``open_calls`` counts tool calls with no result yet (the chat is waiting while it is not
    zero); ``questions`` counts the undecided, unexpired questions among them, and the chat's own
    (a login it waits on before it can list an MCP server's tools).
    ``cancel_requested_at`` is set while a cancellation request waits for a process to act on it.
    """

    id: str
    agent: str | None
    model: str | None
    created_at: datetime
    messages: int
    open_calls: int
    questions: int
    cancel_requested_at: datetime | None
    instructions: str | None = None
    """The chat's system instructions, as recorded."""

    @property
    def waiting(self) -> bool:
        """True while tool calls of the chat wait for a result, or the chat waits on a question of its own."""
        return self.open_calls > 0 or self.questions > 0


def list_chats(connection: Connection, *, waiting: bool = False, chat_id: str | None = None) -> list[ChatSummary]:
    """Chats oldest first, with counts of their open calls and undecided questions."""
    one = chat_id is not None  # one chat: count its rows alone
    open_calls = (
        select(tool_calls.c.chat_id, func.count().label("open_calls"))
        .where(tool_calls.c.result_message_id.is_(None), *([tool_calls.c.chat_id == chat_id] if one else []))
        .group_by(tool_calls.c.chat_id)
        .subquery()
    )
    # On SQLite, "+chat_id" keeps the planner from reading all of the questions' chat index (which pruning needs)
    # in chat order to spare the GROUP BY a sort: it reads the partial index of undecided questions instead.
    by_chat = literal_column("+tarry_questions.chat_id") if connection.dialect.name == "sqlite" else questions.c.chat_id
    undecided = (
        select(questions.c.chat_id, func.count().label("questions"))
        .outerjoin(tool_calls, questions.c.tool_call_id == tool_calls.c.id)
        .where(
            questions.c.decision.is_(None),
            tool_calls.c.result_message_id.is_(None),
            questions.c.expires_at.is_(None) | (questions.c.expires_at > utcnow()),
            *([questions.c.chat_id == chat_id] if one else []),
        )
        .group_by(by_chat)
        .subquery()
    )
    query = (
        select(
            chats.c.id,
            chats.c.agent,
            chats.c.model,
            chats.c.created_at,
            chats.c.message_count,
            chats.c.cancel_requested_at,
            chats.c.instructions,
            func.coalesce(open_calls.c.open_calls, 0).label("open_calls"),
            func.coalesce(undecided.c.questions, 0).label("questions"),
        )
        .outerjoin(open_calls, open_calls.c.chat_id == chats.c.id)
        .outerjoin(undecided, undecided.c.chat_id == chats.c.id)
        .order_by(chats.c.created_at, chats.c.id)
    )
    if waiting:  # found from the waiting rows' indexes, not by reading every chat
        query = query.where(chats.c.id.in_(union(select(open_calls.c.chat_id), select(undecided.c.chat_id))))
    if chat_id is not None:
        query = query.where(chats.c.id == chat_id)
    return [
        ChatSummary(
            id=row.id,
            agent=row.agent,
            model=row.model,
            created_at=row.created_at,
            messages=row.message_count,
            open_calls=int(row.open_calls),
            questions=int(row.questions),
            cancel_requested_at=row.cancel_requested_at,
            instructions=row.instructions,
        )
        for row in connection.execute(query)
    ]
