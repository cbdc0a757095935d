"""Stored records that cannot be read back: found, reported and left out of listings, never fatal to others."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import Connection, select

from tarry.errors import CorruptStateError
from tarry.store.rows import Row, call_from_row, load_task, question_from_row, read_each, waiting_on
from tarry.store.tables import questions, tool_calls


@dataclass(frozen=True)
class Problem:
    """A record of an open tool call that cannot be read (tampered JSON, a bad schema, an unknown task status).

    Listings leave the call out; loading its chat raises [`CorruptStateError`][tarry.errors.CorruptStateError]
    with the same ``detail``. ``call_id`` is the provider's id of the call.
    """

    chat_id: str | None
    call_id: str | None
    detail: str

    @classmethod
    def of(cls, error: CorruptStateError) -> Problem:
        """The problem ``error`` reports."""
        return cls(error.chat_id, error.call_id, str(error))


def find_problems(connection: Connection) -> list[Problem]:
    """Every open call, and every question of one, that cannot be read; oldest call first."""
    errors: list[CorruptStateError] = []
    open_calls = select(tool_calls).where(tool_calls.c.result_message_id.is_(None)).order_by(tool_calls.c.id)
    read_each(connection.execute(open_calls).mappings(), _read_call, errors)
    asked = (
        select(questions, tool_calls.c.call_id, tool_calls.c.name, tool_calls.c.arguments)
        .join(tool_calls, questions.c.tool_call_id == tool_calls.c.id)
        .where(tool_calls.c.result_message_id.is_(None))
        .order_by(tool_calls.c.id, questions.c.number)
    )
    read_each(connection.execute(asked).mappings(), lambda row: question_from_row(row, call_from_row(row)), errors)
    return list(dict.fromkeys(Problem.of(error) for error in errors))


def _read_call(row: Row) -> None:
    call = call_from_row(row)
    waiting_on(row)
    load_task(row, call)
