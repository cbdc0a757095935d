"""The store's side of batched task checks: claiming, in one statement, the calls of due chats that wait on working
tasks and nothing else, and writing what checking them came to, many at once.

``tarry.jobs.checks`` asks these; only the store reads and writes its tables. A call's claim (``claimed_by``,
``claimed_until``) is the guard, as for a chat step: a call another process holds is not taken, and what a check
came to is saved only while this process still holds the call.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, and_, bindparam, case, exists, or_, select, update

from tarry.calls import Outcome
from tarry.errors import ClaimLostError
from tarry.store.journal import save_outcome, write_holding_claim
from tarry.store.moment import UNTIL, lease_values
from tarry.store.one_statement import HELD_OPEN_CALL
from tarry.store.schedule import check_by
from tarry.store.tables import chats, questions, tool_calls

if TYPE_CHECKING:
    from tarry.store.store import Store


@dataclass(frozen=True)
class HeldCheck:
    """An open call whose saved task this process claimed to check."""

    row_id: int
    chat_id: str
    call_id: str
    name: str
    arguments: dict[str, Any]
    state: dict[str, Any]


def _claim_statement(chat_ids: list[str]) -> Any:
    """Claim the open calls of those of ``chat_ids`` whose every open call waits on a saved task and on nothing else:
    no question of the call, no question of the chat undecided, no claim on any of its open calls or its turn, and no
    cancellation requested (read again here: one may have come since the chat was picked)."""
    open_call = and_(tool_calls.c.chat_id.in_(chat_ids), tool_calls.c.result_message_id.is_(None))
    other_work = select(tool_calls.c.chat_id).where(
        open_call,
        or_(
            tool_calls.c.state.is_(None),
            tool_calls.c.waiting_on.is_not(None),
            tool_calls.c.claimed_by.is_not(None),
            exists().where(questions.c.tool_call_id == tool_calls.c.id),
        ),
    )
    own_question = select(questions.c.chat_id).where(
        questions.c.chat_id.in_(chat_ids), questions.c.tool_call_id.is_(None), questions.c.decision.is_(None)
    )
    turn_held = select(chats.c.id).where(
        chats.c.id.in_(chat_ids), or_(chats.c.claimed_by.is_not(None), chats.c.cancel_requested_at.is_not(None))
    )
    return (
        update(tool_calls)
        .where(
            open_call,
            tool_calls.c.claimed_by.is_(None),
            tool_calls.c.chat_id.not_in(other_work),
            tool_calls.c.chat_id.not_in(own_question),
            tool_calls.c.chat_id.not_in(turn_held),
        )
        .values(claimed_by=bindparam("owner"), claimed_until=UNTIL)
        .returning(
            tool_calls.c.id,
            tool_calls.c.chat_id,
            tool_calls.c.call_id,
            tool_calls.c.name,
            tool_calls.c.arguments,
            tool_calls.c.state,
        )
    )


async def claim_checks(store: Store, chat_ids: Collection[str]) -> list[HeldCheck]:
    """Claim for this process every open call of those of ``chat_ids`` that only wait on their saved tasks, in one
    statement; a chat with any other work (a question, a call without a task, a claim another process holds on a
    call or the turn) keeps all its calls unclaimed, for a full step."""
    if not chat_ids:
        return []
    statement = _claim_statement(sorted(chat_ids))
    values = {"owner": store.owner, **lease_values(timedelta(seconds=store.lease))}
    rows = await store.db.run_write(lambda connection: connection.execute(statement, values).all())
    return [HeldCheck(row.id, row.chat_id, row.call_id, row.name, dict(row.arguments), dict(row.state)) for row in rows]


_STILL_WORKING = (
    update(tool_calls)
    .where(*HELD_OPEN_CALL)
    .values(
        state=bindparam("new_state", type_=tool_calls.c.state.type),
        waiting_on=None,
        claimed_by=None,
        claimed_until=None,
        version=tool_calls.c.version + 1,
    )
)
_seen = chats.c.schedule_version == bindparam("seen_version")
_NEXT_CHECK = (
    update(chats)
    .where(chats.c.id == bindparam("chat_id"))
    .values(
        version=chats.c.version + 1,
        next_check_at=case((_seen, bindparam("at")), else_=chats.c.next_check_at),
        schedule_version=case((_seen, chats.c.schedule_version + 1), else_=chats.c.schedule_version),
    )
)
_RELEASE = (
    update(tool_calls)
    .where(tool_calls.c.id.in_(bindparam("row_ids", expanding=True)), tool_calls.c.claimed_by == bindparam("owner"))
    .values(claimed_by=None, claimed_until=None)
)


_RENEW = (
    update(tool_calls)
    .where(tool_calls.c.id.in_(bindparam("row_ids", expanding=True)), tool_calls.c.claimed_by == bindparam("owner"))
    .values(claimed_until=UNTIL)
)


async def renew_checks(store: Store, row_ids: Collection[int]) -> None:
    """Push this process's claims on the calls ``row_ids`` (those it still holds) a lease ahead."""
    if row_ids:
        values = {"row_ids": sorted(row_ids), "owner": store.owner, **lease_values(timedelta(seconds=store.lease))}
        await store.db.run_write(lambda connection: connection.execute(_RENEW, values))


async def save_still_working(
    store: Store, tasks: Sequence[tuple[int, dict[str, Any]]], next_checks: Sequence[tuple[str, int, datetime]]
) -> int:
    """Save the new state of each still-working task (row id, ``Task.to_dict()``), releasing its call, and each
    chat's next check (id, the schedule version it was picked at, when), all in one transaction.

    A chat's version is bumped so that other processes' views of it see the change; its next check is written only
    if its schedule did not change since it was picked (a newer wake wins). A call whose claim this process lost
    (its lease ran out and another process took it over) is left as that process saves it. Returns how many tasks
    were saved. A passing fault of the database is waited out, as for a step's save.
    """
    owner = store.owner

    def write(connection: Connection) -> int:
        saved = 0
        if tasks:  # the call rows first, then the chats': the order a decision locks them in
            rows = [{"row_id": row_id, "owner": owner, "new_state": state} for row_id, state in sorted(tasks)]
            saved = int(connection.execute(_STILL_WORKING, rows).rowcount)
        if next_checks:
            checks = [{"chat_id": chat, "seen_version": seen, "at": at} for chat, seen, at in sorted(next_checks)]
            connection.execute(_NEXT_CHECK, checks)
        return saved

    return await write_holding_claim(store, write, f"{len(tasks)} batched task check(s)")


async def release_checks(store: Store, row_ids: Collection[int]) -> None:
    """Give back this process's claims on the calls ``row_ids``, unchanged."""
    if row_ids:
        values = {"row_ids": sorted(row_ids), "owner": store.owner}
        await store.db.run_write(lambda connection: connection.execute(_RELEASE, values))


_RELEASE_CHATS = (
    update(tool_calls)
    .where(
        tool_calls.c.chat_id.in_(bindparam("chat_ids", expanding=True)),
        tool_calls.c.result_message_id.is_(None),
        tool_calls.c.claimed_by == bindparam("owner"),
    )
    .values(claimed_by=None, claimed_until=None)
)


async def release_chats(store: Store, chat_ids: Collection[str]) -> None:
    """Give back, unchanged, every claim this process holds on an open call of ``chat_ids``: a batch that failed
    before it knew (or could save) which calls it claimed."""
    if chat_ids:
        values = {"chat_ids": sorted(chat_ids), "owner": store.owner}
        await store.db.run_write(lambda connection: connection.execute(_RELEASE_CHATS, values))


async def save_changed(store: Store, check: HeldCheck, outcome: Outcome, due: datetime) -> bool:
    """Save what checking ``check``'s task came to when it changed (a result, or a pause with questions) as a chat
    step saves it, releasing the call, and make its chat due at ``due`` (for the full step that goes on from there);
    ``False`` when this process no longer held the call (nothing saved)."""
    owner, chat_id, row_id = store.owner, check.chat_id, check.row_id
    what = f"the {check.name} call {check.call_id}"

    def write(connection: Connection) -> None:
        save_outcome(connection, chat_id=chat_id, row_id=row_id, owner=owner, outcome=outcome, what=what)
        check_by(connection, chat_id, due)

    try:
        await write_holding_claim(store, write, what)
    except ClaimLostError:
        return False
    return True
