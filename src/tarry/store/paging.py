"""Pages of pending questions: a cursor that marks where a page ended, and the page itself."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterable

from tarry.questions import Question

CURSOR_VERSION = "q1"


class QuestionPage(list[Question]):
    """A list of questions that may be one page of many.

    ``next_cursor`` is ``None`` on the last page; otherwise pass it as ``cursor=`` to get the
    questions after this page. It is opaque text, safe in a URL, and stays valid while questions
    are asked and answered: the next page starts after the last question of this one, whatever
    happened to it since. Questions are ordered by their call's row id, so a question asked after
    a page was read comes on a later page, with one exception on PostgreSQL: a call whose
    transaction took a smaller id but committed after the page was read sorts before the cursor,
    and shows from the next walk from the first page on.
    """

    def __init__(self, questions: Iterable[Question] = (), next_cursor: str | None = None) -> None:
        super().__init__(questions)
        self.next_cursor = next_cursor


def encode_cursor(call_row: int, number: int) -> str:
    """The cursor after the question ``number`` of the tool call whose row id is ``call_row``."""
    text = f"{CURSOR_VERSION}:{call_row}:{number}"
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[int, int]:
    """The call row id and question number a cursor from :func:`encode_cursor` holds.

    Raises :class:`ValueError` naming the cursor when it was not made by :func:`encode_cursor`.
    """
    try:
        text = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        version, call_row, number = text.split(":")
        if version != CURSOR_VERSION:
            raise ValueError(version)
        return int(call_row), int(number)
    except (ValueError, binascii.Error, UnicodeDecodeError):
        raise ValueError(f"{cursor!r} is not a cursor from a page of pending questions") from None


def check_limit(limit: int | None) -> None:
    """Raise :class:`ValueError` unless ``limit`` is ``None`` or a positive int."""
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise ValueError(f"limit must be a positive int or None, got {limit!r}")
