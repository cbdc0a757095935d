"""PostgreSQL: a step's writes as one statement of data-modifying CTEs, sent without ``BEGIN`` and ``COMMIT``.

Each part reads the rows the part before it returned, so when a check fails (the turn or the call is
no longer held) nothing is written and nothing comes back. SQLite gets the same writes as separate
statements in one transaction, where a statement costs no round trip.

Parameter names differ from the columns' names: SQLAlchemy would make an UPDATE set a column whose
name a parameter matches.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from sqlalchemy import (
    Executable,
    Table,
    Update,
    and_,
    bindparam,
    case,
    exists,
    insert,
    literal,
    or_,
    select,
    true,
    update,
)

from tarry.calls import CallRecord
from tarry.clock import utcnow
from tarry.errors import ClaimLostError
from tarry.messages import Message
from tarry.store.cursor import Sendable, fetch_one
from tarry.store.moment import NOW, UNTIL, lease_values
from tarry.store.rows import call_values, message_values, question_values
from tarry.store.tables import OPEN_BY_KEY, chats, messages, questions, tool_calls

TURN_FREE = or_(chats.c.claimed_until.is_(None), chats.c.claimed_until < NOW)
"""No claim on the chat's turn holds now, by the lease clock (``tarry.store.moment``)."""
HELD_OPEN_CALL = (
    tool_calls.c.id == bindparam("row_id"),
    tool_calls.c.claimed_by == bindparam("owner"),
    OPEN_BY_KEY,
)
"""The call row ``row_id`` is open and ``owner`` holds its claim."""


def claiming_turn() -> tuple[dict[str, Any], Any]:
    """The values that claim the chat's turn for ``owner`` for a lease (``UNTIL``) when it is free now, and
    the ``claimed`` column to return, true when they did (the new row holds this statement's own deadline)."""
    until = UNTIL
    owner = bindparam("owner", type_=chats.c.claimed_by.type)
    values = {
        "claimed_by": case((TURN_FREE, owner), else_=chats.c.claimed_by),
        "claimed_until": case((TURN_FREE, until), else_=chats.c.claimed_until),
    }
    return values, and_(chats.c.claimed_by == owner, chats.c.claimed_until == until).label("claimed")


def save_reply(
    connection: Sendable, *, chat_id: str, holder: str, message: Message, records: Sequence[CallRecord]
) -> tuple[int, list[int]]:
    """Save the model's reply, its calls and their questions, and end ``holder``'s turn, in one statement.

    Raises [`ClaimLostError`][tarry.errors.ClaimLostError], writing nothing, when ``holder`` no longer holds the turn.
    Returns the chat's new version and the calls' row ids.
    """
    reply = message_values(message)
    values: dict[str, Any] = {"of_chat": chat_id, "holder": holder, "at": utcnow(), **_prefixed("m_", reply)}
    shape: list[int] = []
    call_columns: tuple[str, ...] = ()
    asked_columns: tuple[str, ...] = ()
    for number, record in enumerate(records):
        given = call_values(record)
        values.update(_prefixed(f"c{number}_", given))
        call_columns = tuple(given)
        for index, question in enumerate(record.questions):
            asked = question_values(question)
            values.update(_prefixed(f"q{number}_{index}_", asked))
            asked_columns = tuple(asked)
        shape.append(len(record.questions))
    statement = _reply_statement(tuple(reply), call_columns, tuple(shape), asked_columns)
    row = fetch_one(connection, statement, values)
    if row is None:
        raise ClaimLostError(f"The claim on the turn of chat {chat_id} was lost")
    version, *row_ids = row.values()
    return int(version), [int(row_id) for row_id in row_ids]


@functools.lru_cache(maxsize=64)  # one per shape of reply: how many calls, asking how many questions
def _reply_statement(
    message_columns: tuple[str, ...],
    call_columns: tuple[str, ...],
    questions_per_call: tuple[int, ...],
    question_columns: tuple[str, ...],
) -> Executable:
    """The statement of ``save_reply`` for calls asking ``questions_per_call`` questions each, built once.

    When the version bump finds the turn lost, it returns no row, so nothing is inserted.
    """
    bumped = (
        _one_more_message(chats.c.claimed_by == bindparam("holder"), claimed_by=None, claimed_until=None)
        .returning(*_BUMPED)
        .cte("bumped")
    )
    message = _message_after(bumped, message_columns)
    calls, asked = [], []
    for number, count in enumerate(questions_per_call):
        fixed = {"message_position": bumped.c.position, "version": literal(0), "chat_id": _CHAT_ID, "created_at": _AT}
        call = _insert_from(tool_calls, bumped, f"c{number}_", call_columns, **fixed)
        calls.append(call.returning(tool_calls.c.id).cte(f"call_{number}"))
        for index in range(count):
            fixed = {"chat_id": _CHAT_ID, "tool_call_id": calls[-1].c.id, "number": literal(index)}
            question = _insert_from(questions, calls[-1], f"q{number}_{index}_", question_columns, **fixed)
            asked.append(question.cte(f"q_{number}_{index}"))
    joined: Any = bumped
    for call_cte in calls:
        joined = joined.join(call_cte, true())
    found = select(bumped.c.version, *(call_cte.c.id for call_cte in calls)).select_from(joined)
    return found.add_cte(message.cte("message"), *asked)


def save_user_message(
    connection: Sendable, *, chat_id: str, seen: int, message: Message, owner: str, claim_turn: timedelta | None
) -> tuple[int, bool] | None:
    """Save the user's message if the chat is still at version ``seen``, in one statement.

    At that version the chat object holds every row, so it knows no call is open: no other write
    came in between to add one. With ``claim_turn`` (a lease) the statement also claims the turn
    for ``owner`` when it is free. Returns the chat's new version and whether the turn was claimed;
    ``None``, writing nothing, when the chat is at another version (or gone): the caller then takes
    the way of a transaction, which looks for open calls in the database.
    """
    now, columns = utcnow(), message_values(message)
    values: dict[str, Any] = {"of_chat": chat_id, "seen": seen, "at": now, **_prefixed("m_", columns)}
    if claim_turn is not None:
        values.update(owner=owner, **lease_values(claim_turn))
    row = fetch_one(connection, _user_message_statement(tuple(columns), claim_turn is not None), values)
    return None if row is None else (int(row["version"]), bool(row["claimed"]))


@functools.lru_cache(maxsize=8)
def _user_message_statement(message_columns: tuple[str, ...], claim: bool) -> Executable:
    """The statement of ``save_user_message`` for a message of ``message_columns``, built once.

    The version bump compares the chat's version (PostgreSQL checks it again on the newest row when
    it waited for another writer's lock), and a new question of the user ends an earlier cancellation.
    """
    claiming, claimed = claiming_turn() if claim else ({}, literal(False).label("claimed"))
    bumped = (
        _one_more_message(chats.c.version == bindparam("seen"), cancel_requested_at=None, **claiming)
        .returning(*_BUMPED, claimed)
        .cte("asking")
    )
    message = _message_after(bumped, message_columns)
    return select(bumped.c.version, bumped.c.claimed).add_cte(message.cte("message"))


def save_first_message(
    connection: Sendable, *, chat: dict[str, Any], message: Message, lease: timedelta | None = None
) -> None:
    """Insert a new chat's row (``chat``, with every column it sets) and its first message, in one statement.

    With ``lease``, the row's ``claimed_until`` is that lease from now by the lease clock (``UNTIL``).
    """
    columns = message_values(message)
    values = {"of_chat": chat["id"], "at": chat["created_at"], **_prefixed("ch_", chat), **_prefixed("m_", columns)}
    if lease is not None:
        values.update(lease_values(lease))
    fetch_one(connection, _first_message_statement(tuple(chat), tuple(columns), lease is not None), values)


@functools.lru_cache(maxsize=8)
def _first_message_statement(
    chat_columns: tuple[str, ...], message_columns: tuple[str, ...], leased: bool
) -> Executable:
    """The statement of ``save_first_message`` for a chat row of ``chat_columns``, built once."""
    given = {
        column: UNTIL if leased and column == "claimed_until" else bindparam("ch_" + column, type_=chats.c[column].type)
        for column in chat_columns
    }
    created = insert(chats).values(given).returning(*_BUMPED).cte("created")
    message = _message_after(created, message_columns)
    return select(created.c.version).add_cte(message.cte("message"))


def save_result(
    connection: Sendable,
    *,
    chat_id: str,
    row_id: int,
    owner: str,
    result: Message,
    claim_turn: timedelta | None,
    what: str,
) -> tuple[int, int, bool]:
    """Save the result of a call ``owner`` holds (``what`` names it), close and release the call, in one statement.

    The result message takes the chat's next position. With ``claim_turn`` (a lease) the statement
    also claims the chat's turn for ``owner`` when it is free, as ``bump_chat_claiming`` would.
    Raises [`ClaimLostError`][tarry.errors.ClaimLostError], writing nothing, when ``owner`` no longer holds the open
    call. Returns the chat's new version, the call's new version, and whether the turn was claimed.
    """
    now, columns = utcnow(), message_values(result)
    values: dict[str, Any] = {"of_chat": chat_id, "row_id": row_id, "owner": owner, "at": now}
    values.update(_prefixed("m_", columns))
    if claim_turn is not None:
        values.update(lease_values(claim_turn))
    statement = _result_statement(tuple(columns), claim_turn is not None)
    row = fetch_one(connection, statement, values)
    if row is None:
        raise ClaimLostError(f"The claim on {what} was lost")
    return int(row["chat_version"]), int(row["call_version"]), bool(row["claimed"])


@functools.lru_cache(maxsize=8)
def _result_statement(message_columns: tuple[str, ...], claim: bool) -> Executable:
    """The statement of ``save_result`` for a message of ``message_columns``, built once.

    It locks the held call first, as a decision does (the call's row, then the chat's), bumps the chat
    only if it found the call, inserts the message only if it bumped the chat, and closes the call with
    the message's id only if it inserted one.
    """
    held = select(tool_calls.c.id).where(*HELD_OPEN_CALL).with_for_update(key_share=True).cte("held")
    claiming, claimed = claiming_turn() if claim else ({}, literal(False).label("claimed"))
    bumped = _one_more_message(exists(held.select()), **claiming).returning(*_BUMPED, claimed).cte("bumped")
    message = _message_after(bumped, message_columns).returning(messages.c.id).cte("message")
    closed = (
        update(tool_calls)
        .where(tool_calls.c.id == bindparam("row_id"), exists(message.select()))
        .values(
            claimed_by=None,
            claimed_until=None,
            version=tool_calls.c.version + 1,
            result_message_id=select(message.c.id).scalar_subquery(),
        )
        .returning(tool_calls.c.version)
        .cte("closed")
    )
    return select(
        bumped.c.version.label("chat_version"), closed.c.version.label("call_version"), bumped.c.claimed
    ).select_from(bumped.join(closed, true()))


_CHAT_ID = bindparam("of_chat", type_=chats.c.id.type)
"""The chat every statement here writes to."""
_AT = bindparam("at", type_=messages.c.created_at.type)
"""When the statement's rows were created."""
_BUMPED = (chats.c.version, (chats.c.message_count - 1).label("position"))
"""What a bump by one message returns: the chat's new version and the position it reserved."""


def _one_more_message(*where: Any, **values: Any) -> Update:
    """The chat's version bump that reserves a position for one message, where ``where`` holds, also setting
    ``values``."""
    return (
        update(chats)
        .where(chats.c.id == _CHAT_ID, *where)
        .values(version=chats.c.version + 1, message_count=chats.c.message_count + 1, **values)
    )


def _message_after(bumped: Any, columns: tuple[str, ...]) -> Any:
    """The INSERT of one message (``columns`` from parameters named ``m_<column>``) at the position ``bumped``
    reserved, when it returned a row."""
    return _insert_from(messages, bumped, "m_", columns, chat_id=_CHAT_ID, position=bumped.c.position, created_at=_AT)


def _prefixed(prefix: str, values: dict[str, Any]) -> dict[str, Any]:
    """``values`` with each key behind ``prefix``: parameters that name no column."""
    return {prefix + key: value for key, value in values.items()}


def _insert_from(table: Table, source: Any, prefix: str, columns: tuple[str, ...], **fixed: Any) -> Any:
    """An INSERT into ``table`` of one row per row of ``source``: the ``fixed`` values, and for each of
    ``columns`` the parameter named ``prefix`` + the column's name."""
    given = [bindparam(prefix + column, type_=table.c[column].type) for column in columns]
    return insert(table).from_select([*fixed, *columns], select(*fixed.values(), *given).select_from(source))
