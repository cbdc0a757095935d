"""Pages of pending questions: the query of a page, a cursor that marks where a page ended, and the page itself."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterable
from datetime import datetime
from functools import cache
from typing import Any, NamedTuple

from sqlalchemy import ColumnElement, Integer, Select, String, bindparam, cast, func, null, select, union_all

from tarry.questions import Question
from tarry.store.tables import LARGEST_ID, Json, questions, tool_calls

CURSOR_VERSION = "q1"
LARGEST_NUMBER = 2**31 - 1
"""The largest number a question's ``number`` column holds (a 32-bit integer on PostgreSQL)."""


class QuestionPage(list[Question]):
    """A list of questions that may be one page of many.

    ``next_cursor`` is ``None`` on the last page; otherwise pass it as ``cursor=`` to get the
    questions after this page. It is opaque text, safe in a URL, and stays valid while questions
    are asked and answered: the next page starts after the last question of this one, whatever
    happened to it since. A chat's own questions come first, then the calls' questions ordered by
    their call's row id, so a question asked after a page was read comes on a later page, with one
    exception on PostgreSQL: a call whose transaction took a smaller id but committed after the
    page was read sorts before the cursor, and shows from the next walk from the first page on.
    """

    def __init__(self, questions: Iterable[Question] = (), next_cursor: str | None = None) -> None:
        super().__init__(questions)
        self.next_cursor = next_cursor


class Position(NamedTuple):
    """Where a question sorts in the listing: its call's row id (0 for a chat's own), its number, its id.

    The id tells a chat's own questions apart (each chat numbers its own from 0); a call's
    question is told apart by its call and number alone, so its cursor leaves the id out.
    """

    call_row: int
    number: int
    question_id: str = ""


def encode_cursor(position: Position) -> str:
    """The cursor after the question at ``position``."""
    own = f":{position.question_id}" if position.call_row == 0 else ""
    text = f"{CURSOR_VERSION}:{position.call_row}:{position.number}{own}"
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


def decode_cursor(cursor: object) -> Position:
    """The position a cursor from ``encode_cursor`` holds.

    Checked strictly, since a cursor comes back from whoever holds the URL: each number must
    be one a row can have (a call's row id up to ``LARGEST_ID``, a
    question's number up to ``LARGEST_NUMBER``) and a question id printable ASCII of at
    most 36 characters. Raises ``ValueError`` naming the cursor and what is wrong with it
    otherwise, so a forged cursor never reaches the database.
    """
    if not isinstance(cursor, str):
        raise ValueError(f"A cursor is text from a page's next_cursor, not {type(cursor).__name__}")
    try:
        return _position(cursor)
    except ValueError as error:
        shown = cursor if len(cursor) <= 60 else f"{cursor[:60]}…"
        raise ValueError(f"{shown!r} is not a cursor from a page of pending questions: {error}") from None


def _position(cursor: str) -> Position:
    if not cursor.isascii() or len(cursor) > 200:
        raise ValueError("it is not URL-safe base64 of at most 200 characters")
    try:
        text = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode("ascii")
    except (ValueError, binascii.Error, UnicodeDecodeError):
        raise ValueError("it is not URL-safe base64 of ASCII text") from None
    version, *parts = text.split(":", 3)
    if version != CURSOR_VERSION or len(parts) not in (2, 3):
        raise ValueError(f"it is not a version {CURSOR_VERSION} cursor")
    call_row, number = _bounded(parts[0], LARGEST_ID), _bounded(parts[1], LARGEST_NUMBER)
    question_id = parts[2] if len(parts) == 3 else ""
    if (call_row == 0) != (len(parts) == 3):
        raise ValueError("a chat's own question's cursor holds its id, a call's question's does not")
    if question_id and not (len(question_id) <= 36 and question_id.isprintable()):
        raise ValueError("its question id is not an id")
    return Position(call_row, number, question_id)


def _bounded(text: str, largest: int) -> int:
    """``text`` as a whole number from 0 to ``largest``, written in decimal digits only."""
    if not (text.isdigit() and text.isascii() and len(text) <= len(str(largest)) and int(text) <= largest):
        raise ValueError(f"{text!r} is not a whole number from 0 to {largest}")
    return int(text)


def check_limit(limit: int | None) -> None:
    """Raise ``ValueError`` unless ``limit`` is ``None`` or a positive int."""
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise ValueError(f"limit must be a positive int or None, got {limit!r}")


def pending_query(
    now: datetime, chat_id: str | None, limit: int | None, after: Position | None
) -> tuple[Select[Any], dict[str, Any]]:
    """The statement and parameters of the undecided questions unexpired at ``now``, after ``after``, in order.

    Rows are question rows with their call's ``call_id``, ``name`` and ``arguments`` (``None`` for a
    chat's own questions), of every chat or of ``chat_id``'s, at most ``limit`` of them.
    """
    phase = "first" if after is None else "own" if after.call_row == 0 else "calls"
    parameters: dict[str, Any] = {"now": now, "chat_id": chat_id, "limit": limit}
    if after is not None:
        parameters.update(after._asdict())
    return _statement(chat_id is not None, limit is not None, phase), parameters


@cache
def _statement(one_chat: bool, limited: bool, phase: str) -> Select[Any]:
    # Built once per shape, with bound parameters: building and keying a statement costs more than running a page.
    # A chat's own questions and the calls' are two indexed branches of one statement, each walked in index
    # order and cut at the page's size (one outer join would filter on the optional side, which no index serves).
    limit = bindparam("limit", type_=Integer) if limited else None
    undecided: list[ColumnElement[bool]] = [
        questions.c.decision.is_(None),
        questions.c.expires_at.is_(None) | (questions.c.expires_at > bindparam("now")),
    ]
    if one_chat:
        undecided.append(questions.c.chat_id == bindparam("chat_id"))
    # "+ 0" keeps SQLite from walking the calls' result index (which pruning needs) and sorting what it finds: the
    # partial index of undecided questions, in the page's order, is the path that stops after one page.
    calls = (
        select(questions, tool_calls.c.call_id, tool_calls.c.name, tool_calls.c.arguments)
        .join(tool_calls, questions.c.tool_call_id == tool_calls.c.id)
        .where(*undecided, (tool_calls.c.result_message_id + 0).is_(None))
        .order_by(questions.c.tool_call_id, questions.c.number)
        .limit(limit)
    )
    if phase == "calls":
        return calls.where(*_after(questions.c.tool_call_id, "call_row", questions.c.number, "number"))
    own = (
        select(questions, cast(null(), String).label("call_id"), cast(null(), String).label("name"),
               cast(null(), Json).label("arguments"))
        .where(questions.c.tool_call_id.is_(None), *undecided)
        .order_by(questions.c.number, questions.c.id)
        .limit(limit)
    )  # fmt: skip
    if phase == "own":
        own = own.where(*_after(questions.c.number, "number", questions.c.id, "question_id"))
    both = union_all(select(own.subquery()), select(calls.subquery())).subquery()
    return select(both).order_by(func.coalesce(both.c.tool_call_id, 0), both.c.number, both.c.id).limit(limit)


def position_of(row: Any) -> Position:
    """The position of a row of ``pending_query``."""
    return Position(row["tool_call_id"] or 0, row["number"], row["id"] if row["tool_call_id"] is None else "")


def _after(first: Any, first_name: str, second: Any, second_name: str) -> tuple[ColumnElement[bool], ...]:
    # the row-value form (a, b) > (x, y), written so that both databases scan the index from x on
    return first >= bindparam(first_name), (first > bindparam(first_name)) | (second > bindparam(second_name))
