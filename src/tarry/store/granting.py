"""Standing grants in SQL: writing one, revoking one, and reading those that may approve a chat's calls.

Each function is one step of a transaction the store runs (``Database.run_write`` or ``run_read``). The matching
itself is the domain's ([`Grant.matches`][tarry.grants.Grant.matches]); here are the rows.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Executable, bindparam, insert, or_, select, update

from tarry.errors import CorruptStateError, UnknownGrantError
from tarry.grants import Grant, constraint_from_dict
from tarry.principals import Principal
from tarry.store.cursor import Sendable, fetch_all
from tarry.store.rows import Row
from tarry.store.tables import chats, grants


def grant_values(grant: Grant) -> dict[str, Any]:
    """The row that keeps ``grant``."""
    return {
        "id": grant.id,
        "tool": grant.tool,
        "constraints": [constraint.to_dict() for constraint in grant.constraints] or None,
        "chat_id": grant.chat_id,
        "agent": grant.agent,
        "granted_by": grant.granted_by.id,
        "granted_by_name": grant.granted_by.name,
        "granted_at": grant.granted_at,
        "expires_at": grant.expires_at,
        "revoked_at": grant.revoked_at,
        "revoked_by": None if grant.revoked_by is None else grant.revoked_by.id,
        "revoked_by_name": None if grant.revoked_by is None else grant.revoked_by.name,
        "question_id": grant.question_id,
    }


def grant_from_row(row: Row) -> Grant:
    """The grant a row of ``tarry_grants`` keeps; raises [`CorruptStateError`][tarry.errors.CorruptStateError] for
    one that cannot be read."""
    try:
        revoked_by = None if row["revoked_by"] is None else Principal(row["revoked_by"], row["revoked_by_name"])
        return Grant(
            id=row["id"],
            tool=row["tool"],
            granted_by=Principal(row["granted_by"], row["granted_by_name"]),
            granted_at=row["granted_at"],
            constraints=tuple(constraint_from_dict(data) for data in row["constraints"] or ()),
            chat_id=row["chat_id"],
            agent=row["agent"],
            expires_at=row["expires_at"],
            revoked_at=row["revoked_at"],
            revoked_by=revoked_by,
            question_id=row["question_id"],
        )
    except (ValueError, TypeError, KeyError, AttributeError) as error:
        raise CorruptStateError(f"The grant {row['id']} cannot be read: {error}") from error


def insert_grant(connection: Connection, grant: Grant) -> None:
    """Write ``grant``'s row."""
    connection.execute(insert(grants), grant_values(grant))


def read_grants(connection: Connection, *, live_at: datetime | None) -> list[Grant]:
    """Every grant, oldest first; only those neither revoked nor expired at ``live_at`` unless it is ``None``."""
    query = select(grants).order_by(grants.c.granted_at, grants.c.id)
    if live_at is not None:
        query = query.where(
            grants.c.revoked_at.is_(None), or_(grants.c.expires_at.is_(None), grants.c.expires_at > live_at)
        )
    return [grant_from_row(row) for row in connection.execute(query).mappings()]


def revoke(connection: Connection, grant_id: str, by: Principal, at: datetime) -> Grant:
    """Revoke the grant ``grant_id`` as ``by`` at ``at``, unless it was revoked already (the first revocation stands);
    the grant as it now stands. Raises [`UnknownGrantError`][tarry.errors.UnknownGrantError] for an unknown id."""
    connection.execute(
        update(grants)
        .where(grants.c.id == grant_id, grants.c.revoked_at.is_(None))
        .values(revoked_at=at, revoked_by=by.id, revoked_by_name=by.name)
    )
    row = connection.execute(select(grants).where(grants.c.id == grant_id)).mappings().one_or_none()
    if row is None:
        raise UnknownGrantError(f"No grant has the id {grant_id!r}")
    return grant_from_row(row)


_CHAT_AGENT = select(chats.c.agent).where(chats.c.id == bindparam("chat_id")).scalar_subquery()


@functools.lru_cache(maxsize=16)
def _grants_for(tools: int) -> Executable:
    """The grants of ``tools`` tools (parameters ``tool_0``…) that are live at ``now`` and whose scope takes in chat
    ``chat_id``, each with the agent that chat records: one statement, which needs no transaction, with a parameter
    for each tool (an expanding ``IN`` list could not be sent from the event loop)."""
    return (
        select(grants, _CHAT_AGENT.label("chat_agent"))
        .where(
            grants.c.tool.in_([bindparam(f"tool_{number}") for number in range(tools)]),
            grants.c.revoked_at.is_(None),
            or_(grants.c.expires_at.is_(None), grants.c.expires_at > bindparam("now")),
            or_(grants.c.chat_id.is_(None), grants.c.chat_id == bindparam("chat_id")),
            or_(grants.c.agent.is_(None), grants.c.agent == _CHAT_AGENT),
        )
        .order_by(grants.c.granted_at, grants.c.id)
    )


def grants_for(
    connection: Sendable, chat_id: str, tools: Iterable[str], now: datetime
) -> tuple[str | None, list[Grant]]:
    """The agent chat ``chat_id`` records (``None`` when no grant is found), and the grants of ``tools`` that are
    live at ``now`` and whose scope takes in that chat, oldest first. A grant that cannot be read approves nothing
    (the listing raises its error)."""
    names = sorted(set(tools))
    values = {"chat_id": chat_id, "now": now, **{f"tool_{number}": name for number, name in enumerate(names)}}
    rows = fetch_all(connection, _grants_for(len(names)), values)
    found = []
    for row in rows:
        try:
            found.append(grant_from_row(row))
        except CorruptStateError:
            continue
    return (rows[0]["chat_agent"] if rows else None), found
