"""Stored chats listed with what they wait on, for screens and commands that show many chats."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from functools import cache
from typing import Any

from sqlalchemy import BindParameter, Connection, Select, bindparam, func, select, union_all

from tarry.clock import utcnow
from tarry.store.tables import chats, constant, questions, tool_calls


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
    rows = connection.execute(_listing(waiting, chat_id is not None), {"now": utcnow(), "chat_id": chat_id}).all()
    # Unpacked by place: a thousand rows' nine columns looked up by name cost the listing as much as its statement.
    return [ChatSummary(i, a, m, t, n, int(o), int(q), c, s) for i, a, m, t, n, o, q, c, s in rows]


@cache
def _listing(waiting: bool, one: bool) -> Select[Any]:
    """The listing's statement, built once (its parameters ``now`` and ``chat_id``): built at each call, it and its
    cache key cost a listing of a thousand chats a fifth of its time. ``one``: one chat's, whose rows alone are
    counted."""
    chat_id: BindParameter[str] = bindparam("chat_id")
    # Started from what waits (the partial indexes of open calls and undecided questions), read once: the open calls
    # are counted and they tell which calls' questions count, without looking each question's call up by its key.
    open_calls = (
        select(tool_calls.c.id, tool_calls.c.chat_id)
        .where(tool_calls.c.result_message_id.is_(None), *([tool_calls.c.chat_id == chat_id] if one else []))
        .cte("open_calls")
    )
    undecided = select(questions.c.chat_id, constant(0), constant(1)).where(
        questions.c.decision.is_(None),
        questions.c.tool_call_id.is_(None) | questions.c.tool_call_id.in_(select(open_calls.c.id)),
        questions.c.expires_at.is_(None) | (questions.c.expires_at > bindparam("now")),
        *([questions.c.chat_id == chat_id] if one else []),
    )
    waits = union_all(
        select(open_calls.c.chat_id, constant(1).label("call"), constant(0).label("question")), undecided
    ).subquery("waits")
    counts = (
        select(
            waits.c.chat_id,
            func.sum(waits.c.call).label("open_calls"),
            func.sum(waits.c.question).label("questions"),
        )
        .group_by(waits.c.chat_id)
        .subquery("counts")
    )
    query = (
        select(
            chats.c.id,
            chats.c.agent,
            chats.c.model,
            chats.c.created_at,
            chats.c.message_count,
            func.coalesce(counts.c.open_calls, 0).label("open_calls"),
            func.coalesce(counts.c.questions, 0).label("questions"),
            chats.c.cancel_requested_at,
            chats.c.instructions,
        )  # in the order of ChatSummary's fields
        .join(counts, counts.c.chat_id == chats.c.id, isouter=not waiting)  # waiting: only the chats counted
        .order_by(chats.c.created_at, chats.c.id)
    )
    return query.where(chats.c.id == chat_id) if one else query
