"""Text that a database cannot hold as it is, kept reversibly in the same text column.

PostgreSQL's ``text`` refuses NUL, and neither database can encode a lone surrogate (``"\\ud800"``,
which Python text may hold and UTF-8 cannot). What a model replies or a tool returns is its own:
such text is kept faithfully as ``ESCAPED`` followed by the text in Python's ``unicode_escape``
form (ASCII, every character its own escape), and read back exactly as it was. Text without them
is kept as it is, unless it starts with ``ESCAPED`` itself, which is escaped too so that reading
back is never ambiguous. What people send (answers, notes, identities) is refused instead, where
it comes in (``tarry.text``).
"""

from __future__ import annotations

from tarry.text import UNSTORABLE

ESCAPED = "\ufdd0"
"""Marks escaped text: a Unicode noncharacter, which text exchanged between programs does not start with."""


def stored_text(text: str) -> str:
    """``text`` as a text column keeps it: as it is, or escaped when a database could not hold it."""
    if UNSTORABLE.search(text) is None and not text.startswith(ESCAPED):
        return text
    return ESCAPED + text.encode("unicode_escape").decode("ascii")


def read_text(stored: str) -> str:
    """The text ``stored_text`` kept as ``stored``; raises ``ValueError`` for escaped text that is not."""
    if not stored.startswith(ESCAPED):
        return stored
    try:
        return stored[1:].encode("ascii").decode("unicode_escape")
    except UnicodeError as error:
        raise ValueError(f"escaped text that does not read back ({error})") from None
