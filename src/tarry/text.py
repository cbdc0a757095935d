"""Text that a database cannot hold as it is: NUL characters and lone surrogates.

PostgreSQL's ``text`` refuses NUL, and UTF-8, which both databases store, has no lone surrogate
(``"\\ud800"``: Python text may hold one, from a JSON ``\\ud800`` escape say). What people and
clients send (answers, notes, identities) is refused when it holds either; what models and tools
send is kept faithfully (``tarry.store.text``).
"""

from __future__ import annotations

import re

UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
"""Finds a character that no database text column can hold as it is."""


def unstorable(text: str) -> str | None:
    """What in ``text`` a database cannot hold as it is (NUL characters, a lone surrogate), or ``None``."""
    found = UNSTORABLE.search(text)
    if found is None:
        return None
    character = found.group()
    return "NUL characters" if character == "\x00" else f"a lone surrogate (U+{ord(character):04X})"
