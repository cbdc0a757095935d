"""The trail's hash chains: which chain a row is in, what its hash covers, and how it is computed.

The trail is ``LANES`` chains ("lanes"), so that decisions in different chats need not take turns
to append: a row's lane is a stable function of its chat's id (``lane_of``). Each row of the trail
holds its lane, its place in that lane (``seq``, from 1) and the SHA-256, as 64 hex digits, of a
canonical text: a version line, the lane, the place, the hash of the lane's previous row
(``GENESIS`` for the first) and each field of ``FIELDS`` in that order, ``~`` for none, else its
length in characters, ``:`` and its text, one to a line. Times are UTC as
``YYYY-MM-DDTHH:MM:SS.ffffffZ``; JSON fields are the JSON text the database keeps. On PostgreSQL a
trigger (migration 0012) computes the same text in SQL as each row goes in, appending to a lane
under a lock of that lane only; on SQLite, whose writes take turns, tarry computes it before the
insert. Either way a lane never forks.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

GENESIS = "0" * 64
"""The "previous hash" of a lane's first row."""
LANES = 64
"""How many chains the trail is: decisions whose chats are in different lanes append without waiting for each
other."""
APPEND = 0
"""The place tarry writes for a new row on PostgreSQL: the trigger replaces it with the row's lane, place and hash. A
row written with no place (or another) keeps what it was written with, and shows as not of the chain."""
VERSION = "tarry-trail-1"
"""The first line of the hashed text, naming this way of writing it."""
FIELDS = (
    "at",
    "chat_id",
    "question_id",
    "call_id",
    "tool",
    "arguments",
    "kind",
    "message",
    "decision",
    "outcome",
    "answer",
    "note",
    "by_id",
    "by_name",
    "channel",
    "detail",
)
"""The content of a row that its hash covers, in the order hashed: every column but the id and the chain's own."""
JSON_FIELDS = frozenset({"arguments", "answer"})
"""The fields kept as JSON."""


def time_text(at: datetime) -> str:
    """``at`` as the hashed text has it: UTC, to the microsecond."""
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def json_text(value: Any) -> str | None:
    """The JSON text tarry writes for ``value`` (``None`` for none), as the database then keeps it."""
    return None if value is None else json.dumps(value)


def lane_of(chat_id: str | None) -> int:
    """The lane of a row of chat ``chat_id``: the first byte of the SHA-256 of its id (UTF-8) modulo ``LANES``;
    0 for none. Migration 0012's ``tarry_trail_lane`` is the same function in SQL."""
    if not chat_id:
        return 0
    return hashlib.sha256(chat_id.encode()).digest()[0] % LANES


def row_hash(lane: int, seq: int, previous: str, content: Mapping[str, str | None]) -> str:
    """The hash of the row at place ``seq`` of lane ``lane``, after a row whose hash is ``previous``; ``content``
    holds the text of each of ``FIELDS`` (``None`` for none)."""
    lines = [VERSION, str(lane), str(seq), previous]
    for name in FIELDS:
        value = content[name]
        lines.append("~" if value is None else f"{len(value)}:{value}")
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()


def content_of(values: Mapping[str, Any]) -> dict[str, str | None]:
    """The text of each of ``FIELDS`` from a row's values as tarry writes them (a datetime, JSON as data)."""
    found: dict[str, str | None] = {}
    for name in FIELDS:
        value = values.get(name)
        if name == "at":
            found[name] = time_text(values["at"])
        elif name in JSON_FIELDS:
            found[name] = json_text(value)
        else:
            found[name] = value
    return found
