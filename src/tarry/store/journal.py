"""The journal of a stored chat: every change is one transaction, claims are leases on rows.

Each transaction is a plain function of a SQLAlchemy ``Connection`` run by
``Database.run_write`` or ``Database.run_read``; it reads and writes rows only. What
it read reaches the chat as a ``Changes`` value, which the chat takes in
itself afterwards, on the event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any, Protocol, TypeVar, cast

from sqlalchemy import Connection, Executable, Table, and_, bindparam, exists, insert, or_, select, text, update

from tarry.calls import CallRecord, Claim, Outcome
from tarry.changes import CallChange, Changes
from tarry.clock import utcnow
from tarry.errors import (
    ChatNotFoundError,
    ClaimLostError,
    PendingToolCallsError,
    ProposalChangedError,
    StoreConflictError,
    StoreFullError,
    StoreReadOnlyError,
    StoreUnavailableError,
)
from tarry.live import EarlierRun
from tarry.messages import Message
from tarry.principals import Channel, Principal
from tarry.questions import Decision, Question
from tarry.store.cursor import Sendable, fetch_one, fetch_value, run
from tarry.store.deciding import AnswerOf, Attempt, ClaimAlong, Settled, decide_question
from tarry.store.engine import Database
from tarry.store.moment import NOW, UNTIL, lease_values
from tarry.store.one_statement import (
    HELD_OPEN_CALL,
    TURN_FREE,
    claiming_turn,
    save_first_message,
    save_reply,
    save_result,
    save_user_message,
)
from tarry.store.rows import (
    Row,
    call_from_row,
    call_values,
    message_from_row,
    message_values,
    question_from_row,
    question_values,
    saved_state,
    waiting_on,
)
from tarry.store.schedule import DEFAULT_POLL_INTERVAL, check_by
from tarry.store.tables import OPEN_BY_KEY, UTCDateTime, chats, messages, questions, tool_calls
from tarry.store.view import ChatView
from tarry.tasks import Task


class Host(Protocol):
    """What a ``StoreJournal`` uses of its [`Store`][tarry.store.Store] (read each time: they may change)."""

    db: Database
    owner: str
    lease: float
    poll_interval: float

    async def _decide(
        self,
        question_id: str,
        decision: Decision,
        answer_of: AnswerOf,
        note: str | None,
        by: str | Principal | None,
        channel: Channel,
        known: Question | None = None,
        *,
        claim: ClaimAlong | None = None,
        on_claimed: Callable[[], None] | None = None,
        seen: str | None = None,
    ) -> Settled: ...

    async def _announce(self, settled: Settled, decision: Decision) -> Settled: ...

    async def _apply_grants(self, chat_id: str, asked: Sequence[Question]) -> bool: ...


logger = logging.getLogger("tarry.store")
T = TypeVar("T")
_PASSING = (StoreUnavailableError, StoreConflictError, StoreReadOnlyError, StoreFullError)
"""The database errors that may pass within moments (a failover, a deadlock broken, space freed): a finished
call's save tries again through them."""


@dataclass
class CallRow:
    """What the store keeps of one call: its row's id, the tool's name, the row version read, and the claim held."""

    id: int
    name: str
    version: int = -1
    """The row version this process last read (-1, which no row has, before it read the row)."""
    claimed: bool = False
    """True while this process holds the call's claim and must release it."""
    renewal: asyncio.Task[None] | None = None
    """The renewal of a claim a decision took (``decide`` with ``carry_on`` in a session), until
    ``StoreJournal.hold_call`` uses it."""
    held_until: datetime | None = None
    """Until when that claim is known to hold: each renewal that finds it pushes this on (``None``: lost)."""


FRESH_FOR = 1.0
"""Seconds after [`Store.load_chat`][tarry.store.Store.load_chat] during which the chat's first look outside a session
(a listing) takes the load's rows."""


class StoreJournal:
    """The journal of one stored chat object: writes its changes and reads back what other processes wrote.

    What the store keeps to do that lives here, typed: the chat version this object holds in
    full, the turn it holds or claimed early, and the ``CallRow`` of each call by call id.
    """

    def __init__(
        self, store: Host, chat_id: str, *, seen: int | None = None, loaded: tuple[int, Tail] | None = None
    ) -> None:
        self.store = store
        self.db = store.db
        self.chat_id = chat_id
        self._view = ChatView(seen)
        """How current the chat object is, as far as this journal knows."""
        self._unsaved: dict[str, Any] | None = None
        """The row of a chat not yet in the database, written with its first message
        ([`Store.start_chat`][tarry.store.Store.start_chat])."""
        self._loaded = loaded
        """Rows read when the chat was loaded, handed over by the first ``refresh`` without a statement."""
        self._holding_turn = False
        self._sessions = 0
        """How many sessions are open (they nest): what the journal took ahead is given back when the last ends."""
        self._claimed_early: int | None = None
        """The version a write wrote when it claimed the turn for the next ``hold_turn``."""
        self._calls: dict[str, CallRow] = {}
        """The row behind each call this journal saved or read, by call id."""

    def save_with_first_message(self, chat: dict[str, Any]) -> None:
        """Write ``chat``, the new chat's row, with its first message rather than now
        ([`Store.start_chat`][tarry.store.Store.start_chat])."""
        self._unsaved = chat

    @property
    def unsaved(self) -> bool:
        """Whether the chat's row still waits to be written with its first message."""
        return self._unsaved is not None

    @asynccontextmanager
    async def session(self) -> AsyncIterator[None]:
        """One run of the chat: when the outermost session ends, give back the turn a write claimed and no
        ``hold_turn`` used, and the calls decisions claimed and no ``hold_call`` used, and forget that the chat
        was current."""
        self._sessions += 1
        try:
            yield
        finally:
            self._sessions -= 1
            if not self._sessions:
                self._view.current = False
                await self._release_unused()

    @asynccontextmanager
    async def refresh(self, start: int) -> AsyncIterator[Changes | None]:
        """Re-read the current turn (the messages from ``start``, the last assistant message, on, and its calls).

        One cheap query when nothing changed since the chat last looked, and none at all while the
        journal knows, within a session, that the chat holds everything (see ``append``). The versions
        read count as held once the chat took the changes in (the block ended without an error). The
        first look right after [`Store.load_chat`][tarry.store.Store.load_chat] (within ``FRESH_FOR`` seconds,
        before any other step) outside a session asks nothing either: the chat only lists what the load has just
        read. A look within a session, where the chat acts on what it finds, reads.
        """
        loaded, self._loaded = self._loaded, None
        if loaded is None and self._view.may_skip_look(in_session=self._sessions > 0):
            yield None
            return
        version, tail = loaded if loaded is not None else await self._read(start)
        yield None if tail is None else tail.changes(self._calls)
        for row in () if tail is None else tail.calls:
            self._calls.setdefault(row["call_id"], CallRow(row["id"], row["name"])).version = row["version"]
        self._view.took_in(version, in_session=self._sessions > 0, fresh_for=None if loaded is None else FRESH_FOR)

    async def _read(self, start: int) -> tuple[int, Tail | None]:
        """The chat's version and, when it is not the one held, its rows from ``start`` on (one snapshot)."""
        chat_id, known = self.chat_id, self._view.seen

        def look(connection: Sendable) -> int:
            version = fetch_value(connection, CHAT_VERSION, {"chat_id": chat_id})
            if version is None:
                raise ChatNotFoundError(f"Chat {chat_id} is no longer in the database")
            return int(version)

        def read(connection: Connection) -> tuple[int, Tail | None]:
            version = look(connection)
            return version, None if version == known else fetch_tail(connection, chat_id, start)

        if self.db.is_sqlite:
            return await self.db.run_read(read)  # the version and the rows, in one snapshot
        if known is not None and await self.db.run_direct(look, write=False) == known:
            return known, None  # one statement without BEGIN and COMMIT
        row, tail = await self.db.run_direct(partial(fetch_chat, chat_id=chat_id, start=start), write=False)
        if row is None:
            raise ChatNotFoundError(f"Chat {chat_id} is no longer in the database")
        return int(row["version"]), tail

    async def append(self, message: Message, records: Sequence[CallRecord] = (), *, claim_turn: bool = False) -> None:
        """Save a user or assistant message and the records of the calls it makes.

        Ends the turn claim in the same transaction when the message is the reply it was held for;
        raises [`ClaimLostError`][tarry.errors.ClaimLostError], recording nothing, when another process holds the turn
        by then. With ``claim_turn`` (a user message) it claims the turn for the model's reply instead.
        When no other process wrote to the chat since the chat object last looked, the session's next
        ``refresh`` asks nothing. The approvals the records ask are then decided by the standing grants that
        match them, if any (``Store._apply_grants``).
        """
        self._view.unsure()
        if self._unsaved is not None:
            version = await self._create_with(self._unsaved, message, claim_turn=claim_turn)
        else:
            alone = await self._append_user_alone(message, claim_turn=claim_turn)
            version = alone if alone is not None else await self._append(message, records, claim_turn=claim_turn)
        self._view.current = self._view.wrote(version) and self._sessions > 0
        asked = [question for record in records for question in record.questions if question.kind == "approval"]
        if asked and await self.store._apply_grants(self.chat_id, asked):
            self._view.behind()  # a standing grant decided: the chat reads the decision back before it plans

    async def _append_user_alone(self, message: Message, *, claim_turn: bool) -> int | None:
        """PostgreSQL, at a known version: save a user message in one statement (no ``BEGIN``, no ``COMMIT``);
        the chat's new version, or ``None`` when it was not saved so (the chat changed since: the caller writes
        it in a transaction, which also tells why)."""
        seen = self._view.seen
        if message.role != "user" or seen is None or self.db.is_sqlite:
            return None
        lease = self._lease if claim_turn else None
        save = partial(save_user_message, chat_id=self.chat_id, seen=seen, message=message, owner=self.store.owner)
        saved = await self._claim(
            partial(save, claim_turn=lease), lambda saved: saved is not None and saved[1], chats, self.chat_id
        )
        if saved is None:
            return None
        if saved[1]:
            self._claimed_early = saved[0]
        return saved[0]

    async def _append(self, message: Message, records: Sequence[CallRecord], *, claim_turn: bool) -> int:
        """Save the message and its calls' records (one statement for a reply on PostgreSQL); the chat's version."""
        held = self._holding_turn and message.role == "assistant"
        one_statement = (
            held
            and not self.db.is_sqlite
            and not any(question.expires_at for record in records for question in record.questions)
        )
        if one_statement:  # no BEGIN, no COMMIT, one round trip
            reply = partial(save_reply, chat_id=self.chat_id, holder=self.store.owner, message=message, records=records)
            (version, row_ids), claimed = await self.db.run_direct(reply, write=True), False
        else:
            claim = (self.store.owner, self._lease) if claim_turn else None
            holder = self.store.owner if held else None
            write = partial(append_rows, chat_id=self.chat_id, message=message, records=records)
            version, row_ids, claimed = await self.db.run_write(partial(write, claim=claim, holder=holder))
        for record, row_id in zip(records, row_ids, strict=True):
            self._calls[record.call.id] = CallRow(row_id, record.call.name, 0)
        if held:
            self._holding_turn = False
        if claimed:
            self._claimed_early = version
        return version

    async def _create_with(self, row: dict[str, Any], message: Message, *, claim_turn: bool) -> int:
        """Write the new chat's ``row`` with its first message, in one statement on PostgreSQL; its version.

        With ``claim_turn`` the row holds the turn for the model's reply: nobody else knows the chat yet.
        """
        chat = {**row, "version": 1, "message_count": 1}
        if claim_turn:
            chat.update(claimed_by=self.store.owner, claimed_until=chat["created_at"] + self._lease)
        if self.db.is_sqlite:

            def write(connection: Connection) -> None:
                run(connection, INSERT_CHAT, chat)
                values = {"chat_id": chat["id"], "position": 0, "created_at": chat["created_at"]}
                run(connection, _INSERT_MESSAGE, {**values, **message_values(message)})

            await self.db.run_write(write)
        else:
            create = partial(save_first_message, chat=chat, message=message, lease=self._lease if claim_turn else None)
            await self._claim(create, lambda _: claim_turn, chats, self.chat_id)  # a cancelled caller gives it back
        self._unsaved = None
        if claim_turn:
            self._claimed_early = 1
        return 1

    @asynccontextmanager
    async def hold_call(self, call_id: str) -> AsyncIterator[Claim]:
        """Claim the call's row (a lease renewed while the block runs).

        The claim holds only if the row is still at the version this process read, so nobody
        acts on a pause state another process has replaced: ``STALE`` then asks for a re-read.
        Unless the journal knows the chat holds everything recorded (it has just looked, or its own
        write was the latest), the claim also holds only while the chat is at the version the chat
        object holds: a chat that carries its calls on as it sees them learns here that it saw an old
        view. When the journal knows that view is behind, the claim is ``STALE`` without a statement.
        A claim that the decision freeing the call took (``decide`` with ``carry_on``) is used as it
        is, without a statement of its own.
        """
        row = self._calls[call_id]
        claim, renewal = await self._take_claim(row)
        if renewal is None:
            yield claim
            return
        try:
            yield claim
        except BaseException:
            # Tool code may have run (a sync tool's thread even goes on): keep the lease, unrenewed, so
            # the call is closed as interrupted when it runs out (or run again if the tool is idempotent).
            row.claimed = False
            raise
        finally:
            renewal.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await renewal
            claimed, row.claimed = row.claimed, False
            if claimed:
                await self._release(tool_calls, row.id)

    async def _take_claim(self, row: CallRow) -> tuple[Claim, asyncio.Task[None] | None]:
        """Claim ``row``'s call as ``hold_call`` says; the claim, and the renewal of one held (``None`` otherwise)."""
        may_claim, check = self._view.claim_check()
        if not may_claim:
            return Claim.STALE, None  # the chat's view is known to be behind: it looks first
        renewal = await self._take_early_claim(row)
        if renewal is not None:  # the decision that freed the call claimed it
            return Claim.GRANTED, renewal
        row_id, version, owner, lease = row.id, row.version, self.store.owner, self._lease
        chat = None if check is None else (self.chat_id, check)
        claim = await self._claim(
            lambda c: claim_call(c, row_id, version, owner, lease, chat), lambda claim: claim.held, tool_calls, row_id
        )
        self._view.claimed(stale=claim is Claim.STALE, checked=check)
        if not claim.held:
            return claim, None
        row.claimed = True
        return claim, asyncio.create_task(self._renew(tool_calls, row_id))

    @asynccontextmanager
    async def hold_turn(self) -> AsyncIterator[bool]:
        """Claim the chat around one model request; yields ``False`` when another process holds it.

        A turn that ``append`` or ``save_call`` already claimed costs no write here.
        """
        owner, lease, chat_id = self.store.owner, self._lease, self.chat_id
        version, self._claimed_early = self._claimed_early, None
        if version is None:
            version = await self._claim(
                lambda c: take_turn(c, chat_id, owner, lease), lambda version: version is not None, chats, chat_id
            )
        if version is None:
            yield False
            return
        self._view.turn_claimed(version)
        self._holding_turn = True
        renewal = asyncio.create_task(self._renew(chats, chat_id))
        try:
            yield True
        finally:
            renewal.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await renewal
            if self._holding_turn:
                self._holding_turn = False
                await self._release(chats, chat_id)

    async def _release_unused(self) -> None:
        """Give back every call a decision claimed that no ``hold_call`` used, and a turn claimed by a write
        and never held (the chat did not ask the model after all).

        A call that cannot be given back is logged, not raised (the caller may be raising already): its
        claim runs out with its lease.
        """
        unused = [row for row in self._calls.values() if row.renewal is not None]
        for row in unused:
            await self._stop_renewal(row)
        for row in unused:
            try:
                await self._release(tool_calls, row.id)
            except Exception:
                logger.exception("Could not give back the claim on the %s call; it runs out with its lease", row.name)
        if self._claimed_early is not None:
            self._claimed_early = None
            await self._release(chats, self.chat_id)

    async def _stop_renewal(self, row: CallRow) -> None:
        """Stop renewing the claim a decision took on ``row``'s call; this process no longer counts it as held."""
        renewal, row.renewal, row.claimed, row.held_until = row.renewal, None, False, None
        if renewal is not None:
            renewal.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await renewal

    def _keep_claim(self, row: CallRow, until: datetime) -> None:
        """Keep the claim a decision just took on ``row``'s call, until ``until``: renew it until ``hold_call``
        uses it."""
        row.claimed, row.held_until = True, until
        row.renewal = asyncio.create_task(self._renew(tool_calls, row.id, row))

    async def _take_early_claim(self, row: CallRow) -> asyncio.Task[None] | None:
        """The renewal of the claim a decision took on ``row``'s call, now the caller's to hold; ``None`` when there
        is none, or it may have run out.

        While renewals keep it well ahead of its lease it holds: no other process may take a claim
        before it runs out. Otherwise (the database was away, the loop was blocked) one statement asks
        whether it is still this process's: another process may have taken the call over meanwhile.
        """
        if row.renewal is None:
            return None
        margin = timedelta(seconds=self.store.lease / 3)
        if row.held_until is not None and utcnow() < row.held_until - margin:
            renewal, row.renewal, row.held_until = row.renewal, None, None
            return renewal
        await self._stop_renewal(row)
        if await self._extend(tool_calls, row.id) is None:
            return None
        row.claimed = True
        return asyncio.create_task(self._renew(tool_calls, row.id))

    async def save_call(self, call_id: str, outcome: Outcome, *, first_question: int, claim_turn: bool = False) -> None:
        """Save a call's result, or its new pause and questions; releases the claim in the same transaction.

        With ``claim_turn`` it also claims the turn for the next ``hold_turn``, when it is free.
        """
        row = self._calls[call_id]
        row_id, owner, chat_id, lease = row.id, self.store.owner, self.chat_id, self._lease
        what = f"the {row.name} call {call_id}"
        turn = lease if claim_turn else None
        try:
            if outcome.result is not None and not self.db.is_sqlite:  # no BEGIN, no COMMIT, one round trip
                save = partial(
                    save_result, chat_id=chat_id, row_id=row_id, owner=owner, result=outcome.result, what=what
                )
                chat_version, version, claimed = await self._write_holding_claim(
                    partial(save, claim_turn=turn), what, alone=True
                )
            else:
                write = partial(
                    save_outcome, chat_id=chat_id, row_id=row_id, owner=owner, outcome=outcome, what=what,
                    first_question=first_question, claim_turn=turn,
                )  # fmt: skip
                chat_version, version, claimed = await self._write_holding_claim(write, what)
        except BaseException:
            self._view.unsure()  # the call was taken over, or the database is away: the chat looks again
            raise
        row.claimed, row.version = False, version
        if claimed:
            self._claimed_early = chat_version
        self._view.wrote(chat_version)

    async def _write_holding_claim(self, write: Callable[[Connection], T], what: str, *, alone: bool = False) -> T:
        """``write_holding_claim`` on this journal's store."""
        return await write_holding_claim(self.store, write, what, alone=alone)

    async def decide(
        self,
        question: Question,
        decision: Decision,
        answer: dict[str, Any] | None,
        note: str | None,
        by: Principal | None,
        channel: Channel,
        *,
        running: bool,
        closed: bool,
        carry_on: bool = False,
        seen: str | None = None,
    ) -> Question | None:
        """Record the decision under the question's row lock (which checks the call as stored, not ``running``).

        When the chat held everything recorded before, it still does: the decision changed only
        the question and the versions, so the next ``refresh`` need not read the rows again.
        With ``carry_on`` in a session (the decision frees the call, and the chat carries it on next)
        the decision claims the call too when it stands as the chat holds it (PostgreSQL in its statement, SQLite
        in its transaction), so ``hold_call`` need not; the session gives it back if the chat does not carry it on
        after all.
        """
        self._view.unsure()  # a decision that lost or was refused shows another writer
        row = None if question.tool_call is None else self._calls.get(question.tool_call.id)
        along, kept = None, None
        carries = carry_on and self._sessions > 0
        held = self._view.seen
        if carries and row is not None and not row.claimed and held is not None:
            along = ClaimAlong(row.id, row.version, held, self.store.owner, utcnow() + self._lease, self._lease)
            kept = partial(self._keep_claim, row, along.until)
        made = (question.id, decision, lambda _: answer, note, by, channel, question)
        try:
            settled = await self.store._decide(*made, claim=along, on_claimed=kept, seen=seen)
        except ProposalChangedError:
            # The question changed in what the chat's version does not count (an approval counted elsewhere): the
            # next look reads the rows, so the chat shows what the question proposes now.
            self._view.behind()
            raise
        decided = settled.question
        if decided is None:
            return None
        if settled.versions is not None:
            chat_version, call_version = settled.versions
            if row is not None and call_version == row.version + 1 and self._view.seen == chat_version - 1:
                self._view.seen, row.version = chat_version, call_version
            else:
                # The chat changed in more than this decision: read it all again. A claim the decision took
                # stands (its statement checked the call's own row): the chat uses it if it still runs the call.
                self._view.behind()
        return decided

    async def add_question(self, call_id: str, number: int, question: Question) -> None:
        """Save a question the running call asks while it runs (or the approval asked again of a call a person changed,
        which the standing grants that match the call as changed then decide, if any: ``Store._apply_grants``).

        Raises [`ClaimLostError`][tarry.errors.ClaimLostError], saving nothing, when this process no longer holds the
        open call (its lease ran out and another process took the call over, or closed it).
        """
        row = self._calls[call_id]
        row_id, owner, chat_id = row.id, self.store.owner, self.chat_id
        self._view.unsure()

        def write(connection: Connection) -> int:
            # The call's row first, then the chat's: the order every other write takes them in.
            if connection.scalar(_HOLD_OPEN_CALL, {"row_id": row_id, "owner": owner}) is None:
                raise ClaimLostError(f"The claim on the {row.name} call {call_id} was lost: its question is not saved")
            version, _ = bump_chat(connection, chat_id)
            insert_questions(connection, chat_id, row_id, number, [question])
            return version

        self._view.wrote(await self.db.run_write(write))
        # An approval asked again of a call a person changed: a standing grant that matches the call as changed
        # decides it, as one that matches a call of the model's reply decides its approval (``append``).
        again = question.kind == "approval" and question.changed_arguments is not None
        if again and await self.store._apply_grants(self.chat_id, [question]):
            self._view.behind()

    async def close_unused(self, call_id: str, questions: Sequence[Question], note: str) -> list[Question]:
        """Cancel the questions in one transaction, only while this process holds the open call.

        Locks the questions first, in id order, then checks the call: the order every decision takes
        the rows in (question, call, chat), so a person deciding one of them meanwhile waits, or wins.
        """
        row = self._calls[call_id]
        row_id, owner, postgres = row.id, self.store.owner, not self.db.is_sqlite
        attempts = [Attempt(question.id, "cancel", lambda _: None, note, None, "code") for question in questions]
        ids = sorted(question.id for question in questions)

        def write(connection: Connection) -> list[Settled]:
            connection.execute(_LOCK_QUESTIONS, {"ids": ids})
            if connection.scalar(_HOLD_OPEN_CALL, {"row_id": row_id, "owner": owner}) is None:
                raise ClaimLostError(f"The claim on the {row.name} call {call_id} was lost: nothing is cancelled")
            return [decide_question(connection, attempt, None, postgres=postgres) for attempt in attempts]

        self._view.behind()  # the decisions bumped the chat: read it again
        closed = []
        for settled in await self.db.run_write(write):
            if settled.question is not None and settled.refusal is None:
                await self.store._announce(settled, "cancel")
                closed.append(settled.question)
        return closed

    async def start_run(self, call_id: str) -> EarlierRun | None:
        """Mark the run started in one statement that writes only a call row no run was marked on; read the mark
        when none was written (another run marked it first, in this process or another)."""
        where = {"the_chat": self.chat_id, "the_call": call_id, "new_ran": {"started_at": utcnow().isoformat()}}

        def write(connection: Connection) -> EarlierRun | None:
            if connection.execute(_START_RUN, where).rowcount:
                return None
            row = connection.execute(_RAN, where).mappings().first()
            if row is None:
                raise ValueError(f"Chat {self.chat_id} has no call {call_id!r} to run")
            ran = row["ran"] if isinstance(row["ran"], dict) else {}
            return EarlierRun(finished="finished_at" in ran, result=ran.get("result"))

        return await self.db.run_write(write)

    async def finish_run(self, call_id: str, result: Any) -> None:
        """Record the result on the call's row, keeping when the run started."""
        where = {"the_chat": self.chat_id, "the_call": call_id}

        def write(connection: Connection) -> None:
            row = connection.execute(_RAN, where).mappings().first()
            started = row["ran"] if row is not None and isinstance(row["ran"], dict) else {}
            ran = {**started, "finished_at": utcnow().isoformat(), "result": result}
            connection.execute(_FINISH_RUN, {**where, "new_ran": ran})

        await self.db.run_write(write)

    async def add_chat_question(self, number: int, question: Question) -> bool:
        """Save a question of the chat itself (a login), parking the chat on it, in one transaction."""
        chat_id = self.chat_id
        self._view.unsure()

        def write(connection: Connection) -> int:
            version, _ = bump_chat(connection, chat_id)
            insert_questions(connection, chat_id, None, number, [question])
            return version

        self._view.wrote(await self.db.run_write(write))
        return True

    async def wait_for_decision(self, question: Question) -> Question:
        """Poll the question's row until a decision is recorded in any process, or its time runs out.

        Raises [`ClaimLostError`][tarry.errors.ClaimLostError] once this process no longer holds the question's open
        call (another process took it over, or closed it), also when the answer is there: the process that holds the
        call now acts on it (a tool it runs again asks the same question and gets the same answer). An answer that
        finds this process's lease run out is taken only once the lease is renewed: else the process that
        takes the call over next would act on it too.
        """
        query = (
            select(
                questions,
                tool_calls.c.claimed_by.label("call_claimed_by"),
                tool_calls.c.claimed_until.label("call_claimed_until"),
                tool_calls.c.result_message_id,
                NOW.label("now"),
            )
            .outerjoin(tool_calls, tool_calls.c.id == questions.c.tool_call_id)
            .where(questions.c.id == question.id)
        )
        while question.is_open(utcnow()):
            row = await self.db.run_alone(
                lambda connection: connection.execute(query, lease_values()).mappings().one(), write=False
            )
            held = row["call_claimed_by"] == self.store.owner and row["result_message_id"] is None
            if row["tool_call_id"] is not None and not held:  # an answer, too, is then the new run's to act on
                raise ClaimLostError(
                    f"The call of question {question.id} is no longer this process's (another process took it over, "
                    "or it was closed): its answer cannot come here"
                )
            if row["decision"] is not None:
                lapsed = row["call_claimed_until"] is not None and row["call_claimed_until"] <= row["now"]
                if lapsed and await self._extend(tool_calls, row["tool_call_id"]) is None:
                    raise ClaimLostError(f"The call of question {question.id} was taken over as its answer came")
                return question_from_row(row, question.tool_call)
            await asyncio.sleep(self.store.poll_interval)
        return question

    @property
    def _lease(self) -> timedelta:
        return timedelta(seconds=self.store.lease)

    async def _claim(self, take: Callable[[Sendable], T], granted: Callable[[T], bool], table: Table, key: Any) -> T:
        """Run the claim statement ``take``; a caller cancelled meanwhile gives back what it turns out to have claimed.

        The statement commits by itself and goes on when the caller is cancelled (on a worker
        thread, or shielded on the event loop): without this, a claim granted just then would keep
        the call (or the turn) from every process, this one too, until its lease ran out.
        """
        attempt = asyncio.ensure_future(self.db.run_direct(take, write=True))
        try:
            return await asyncio.shield(attempt)
        except asyncio.CancelledError:
            with contextlib.suppress(Exception):
                if granted(await attempt):
                    await self._release(table, key)
            raise

    async def _renew(self, table: Table, key: Any, early: CallRow | None = None) -> None:
        """Renew this process's claim on ``table``'s row ``key`` every third of a lease, for as long as it runs.

        ``early``: the call whose claim a decision took; each renewal records until when the claim
        holds, and one that finds it gone (another process took the call over) stops.
        """
        while True:
            await asyncio.sleep(self.store.lease / 3)
            try:
                until = await self._extend(table, key)
            except Exception:
                logger.exception("Renewing a lease failed; it will run out if this goes on")
                continue
            if early is not None:
                early.held_until = until
                if until is None:
                    return

    async def _extend(self, table: Table, key: Any) -> datetime | None:
        """Push this process's claim on ``table``'s row ``key`` a lease ahead; until when it now holds, or ``None``
        when it is not this process's any more."""
        values = {"key": key, "owner": self.store.owner, **lease_values(self._lease)}
        until: datetime = values["until"]  # by this process's clock: only compared with it (_take_early_claim)
        renewed = await self.db.run_direct(partial(run, statement=_RENEW[table.name], values=values), write=True)
        return until if renewed else None

    async def _release(self, table: Table, key: Any) -> None:
        values = {"key": key, "owner": self.store.owner}
        await self.db.run_direct(partial(run, statement=_RELEASE[table.name], values=values), write=True)


async def write_holding_claim(store: Host, write: Callable[[Connection], T], what: str, *, alone: bool = False) -> T:
    """Run ``write`` for a call this process holds (``what`` names it), trying again while the database is away.

    ``alone``: ``write`` is one statement sent through ``tarry.store.cursor`` without a transaction
    around it (``run_direct``).

    The tool has already run, so its result must not be lost to a passing fault of the database: a
    dropped connection, a deadlock it broke by ending this write, a moment read-only (a failover) or
    full. The write saved nothing, and is tried again with backoff (on a new connection: the engine
    replaces one that answered read-only or full; the lease is renewed meanwhile, once the database
    takes writes again) for up to five leases, then the error is raised and logged. A write whose
    commit went through before the connection dropped finds the claim released on its next try and
    raises [`ClaimLostError`][tarry.errors.ClaimLostError]; the chat then reads the saved result back. So does a
    write whose lease ran out while the database was away and another process closed the call as interrupted.
    """
    deadline = asyncio.get_running_loop().time() + 5 * store.lease
    pause = 0.05
    while True:
        try:
            if alone:
                return await store.db.run_direct(cast("Callable[[Sendable], T]", write), write=True)
            return await store.db.run_write(write)
        except _PASSING as error:  # each saved nothing
            if asyncio.get_running_loop().time() + pause > deadline:
                logger.error(
                    "Could not save what %s came to within five leases (%s). "
                    "Its tool ran; once the lease runs out the call is closed as interrupted.",
                    what,
                    error,
                )
                raise
            if isinstance(error, StoreConflictError):  # a deadlock the database broke by ending this write
                logger.warning("Saving %s met another transaction; trying again in %.2f s", what, pause)
            elif isinstance(error, StoreUnavailableError):
                logger.warning("Lost the database while saving %s; trying again in %.2f s", what, pause)
            else:
                logger.warning("The database refused to save %s (%s); trying again in %.2f s", what, error, pause)
            await asyncio.sleep(pause)
            pause = min(pause * 2, 2.0)


def save_outcome(
    connection: Connection,
    *,
    chat_id: str,
    row_id: int,
    owner: str,
    outcome: Outcome,
    what: str,
    first_question: int = 0,
    claim_turn: timedelta | None = None,
) -> tuple[int, int, bool]:
    """Save what carrying the call row ``row_id``, which ``owner`` holds, came to (``what`` names the call): its
    result, or its new pause and questions (numbered from ``first_question``), releasing the claim, in the caller's
    transaction. With ``claim_turn`` (a lease) it also claims the chat's turn, when it is free.

    Returns the chat's new version, the call's new version and whether the turn was claimed; raises
    [`ClaimLostError`][tarry.errors.ClaimLostError] (rolling the transaction back) when ``owner`` no longer holds
    the call.
    """
    changes: dict[str, Any] = {"row_id": row_id, "owner": owner}
    if outcome.task is not None:  # the call's row first, then the chat's: the order a decision locks them in
        changes["new_state"] = outcome.task.to_dict()
        changes["new_waiting_on"] = [question.id for question in outcome.task.questions] or None
        version = connection.scalar(_PAUSE_CALL, changes)
        if version is None:  # raising rolls the whole transaction back
            raise ClaimLostError(f"The claim on {what} was lost")
    new_messages = int(outcome.result is not None)
    if claim_turn is not None:
        chat_version, position, claimed = bump_chat_claiming(
            connection, chat_id, owner, claim_turn, new_messages=new_messages
        )
    else:
        claimed = False
        chat_version, position = bump_chat(connection, chat_id, new_messages=new_messages)
    if outcome.result is not None:  # on SQLite, which locks the whole database, the order makes no odds
        changes["new_result_message_id"] = connection.scalar(
            _INSERT_MESSAGE_RETURNING_ID,
            {
                "chat_id": chat_id,
                "position": position,
                "created_at": utcnow(),
                **message_values(outcome.result),
            },
        )
        version = connection.scalar(_CLOSE_CALL, changes)
        if version is None:
            raise ClaimLostError(f"The claim on {what} was lost")
    else:  # after the claim check: a retried save that had committed adds nothing
        assert outcome.task is not None
        insert_questions(connection, chat_id, row_id, first_question, outcome.questions)
        schedule_check(connection, chat_id, outcome.task)
    return chat_version, version, claimed


def append_rows(
    connection: Connection,
    *,
    chat_id: str,
    message: Message,
    records: Sequence[CallRecord],
    claim: tuple[str, timedelta] | None,
    holder: str | None,
) -> tuple[int, list[int], bool]:
    """Save ``message`` and its calls' records in the caller's transaction; the chat's new version, the calls'
    row ids, and whether the turn was claimed.

    ``claim`` (an owner and a lease): also claim the turn when it is free. ``holder``: only while ``holder``
    holds the turn, which this message (its reply) ends. A user message ends an earlier cancellation, and is
    refused ([`PendingToolCallsError`][tarry.errors.PendingToolCallsError]) while a call is open.
    """
    changes: dict[str, Any] = {"cancel_requested_at": None} if message.role == "user" else {}
    if holder is not None:
        changes.update(claimed_by=None, claimed_until=None)
    claimed = False
    if claim is not None:
        version, position, claimed = bump_chat_claiming(connection, chat_id, *claim, new_messages=1, **changes)
    else:
        version, position = bump_chat(connection, chat_id, new_messages=1, holder=holder, **changes)
    if message.role == "user" and fetch_value(connection, _OPEN_CALL, {"chat_id": chat_id}) is not None:
        # Another process's reply with calls came in after this one looked: record nothing.
        raise PendingToolCallsError("Tool calls of this chat still wait; answer them before asking again")
    values = {"chat_id": chat_id, "position": position, "created_at": utcnow(), **message_values(message)}
    connection.execute(_INSERT_MESSAGE, values)
    return version, [insert_call(connection, chat_id, position, record) for record in records], claimed


def bump_chat(
    connection: Connection, chat_id: str, *, new_messages: int = 0, holder: str | None = None, **changes: Any
) -> tuple[int, int]:
    """Bump the chat's version (row-locking it) and reserve ``new_messages`` positions.

    With ``holder``, only while ``holder`` holds the turn: else [`ClaimLostError`][tarry.errors.ClaimLostError] (the
    turn claim lapsed while the model was asked and another process took the turn over).
    Returns the new version and the first reserved position.
    """
    row = _bump(connection, chat_id, new_messages, holder, None, changes)
    return int(row["version"]), int(row["message_count"]) - new_messages


def bump_chat_claiming(
    connection: Connection, chat_id: str, owner: str, lease: timedelta, *, new_messages: int = 0, **changes: Any
) -> tuple[int, int, bool]:
    """``bump_chat`` that in the same statement claims the turn for ``owner``, as ``take_turn`` would.

    Returns the new version, the first reserved position, and whether the turn was claimed.
    """
    row = _bump(connection, chat_id, new_messages, None, {"owner": owner, **lease_values(lease)}, changes)
    return int(row["version"]), int(row["message_count"]) - new_messages, bool(row["claimed"])


def _bump(
    connection: Connection,
    chat_id: str,
    new_messages: int,
    holder: str | None,
    claim: dict[str, Any] | None,
    changes: dict[str, Any],
) -> Row:
    values = {
        "chat_id": chat_id,
        "new_messages": new_messages,
        "holder": holder,
        **(claim or {}),
        **{f"new_{key}": value for key, value in changes.items()},
    }
    statement = _bump_statement(tuple(sorted(changes)), holder is not None, claim is not None)
    row = fetch_one(connection, statement, values)
    if row is None and holder is not None:
        raise ClaimLostError(f"The claim on the turn of chat {chat_id} was lost")
    if row is None:
        raise ChatNotFoundError(f"Chat {chat_id} is no longer in the database")
    return row


@functools.cache
def _bump_statement(columns: tuple[str, ...], held: bool, claim: bool) -> Executable:
    """The chat's version bump that also sets ``columns`` (from ``new_<column>`` parameters), built once.

    ``held``: only while the ``holder`` parameter holds the turn. ``claim``: also claim the turn for
    ``owner`` for a lease when no claim holds now (``TURN_FREE``), and return whether it did.
    """
    held_by = (chats.c.claimed_by == bindparam("holder"),) if held else ()
    claiming, claimed = claiming_turn() if claim else ({}, None)
    return (
        update(chats)
        .where(chats.c.id == bindparam("chat_id"), *held_by)
        .values(
            version=chats.c.version + 1,
            message_count=chats.c.message_count + bindparam("new_messages"),
            **claiming,
            **{column: bindparam(f"new_{column}") for column in columns},
        )
        .returning(chats.c.version, chats.c.message_count, *([] if claimed is None else [claimed]))
    )


def take_turn(connection: Sendable, chat_id: str, owner: str, lease: timedelta) -> int | None:
    """Claim the chat's turn for ``owner`` unless another claim holds; returns the chat's version, or ``None``."""
    version: int | None = fetch_value(
        connection, _TAKE_TURN, {"chat_id": chat_id, "owner": owner, **lease_values(lease)}
    )
    return version


def claim_call(
    connection: Sendable,
    row_id: int,
    version: int,
    owner: str,
    lease: timedelta,
    chat: tuple[str, int] | None = None,
) -> Claim:
    """Claim a call row at ``version`` for ``owner``: one statement when it is free, as it mostly is, and one
    more to learn why not (the call changed, the chat changed, or another process holds it).

    With ``chat`` (its id and a version) the claim holds only while the chat is at that version
    too, and is ``STALE`` otherwise.
    """
    values = {"row_id": row_id, "read_version": version, "owner": owner, **lease_values(lease)}
    free, lapsed, state = _CLAIMS_AT_CHAT_VERSION if chat is not None else _CLAIMS
    if chat is not None:
        values |= {"held_chat": chat[0], "held_version": chat[1]}  # not the names of tool_calls' columns
    if fetch_value(connection, free, values) is not None:
        return Claim.GRANTED
    why = _why_not_claimed(fetch_one(connection, state, values), version, chat)
    if why is not None:
        return why
    if fetch_value(connection, lapsed, values) is not None:  # its lease ran out: take it over
        return Claim.RECLAIMED
    return _why_not_claimed(fetch_one(connection, state, values), version, chat) or Claim.BUSY


def _why_not_claimed(row: Row | None, version: int, chat: tuple[str, int] | None) -> Claim | None:
    """``STALE`` or ``BUSY`` as a call's row (and its chat's version) shows, or ``None`` when it is free or
    its lease ran out (by the lease clock, which the row's ``now`` reads)."""
    assert row is not None  # a call's row is never deleted
    if row["version"] != version or row["result_message_id"] is not None:
        return Claim.STALE
    if chat is not None and row["chat_version"] != chat[1]:
        return Claim.STALE
    if row["claimed_by"] is not None and row["claimed_until"] >= row["now"]:
        return Claim.BUSY
    return None


def insert_call(connection: Connection, chat_id: str, position: int, record: CallRecord) -> int:
    """Insert a new call's row and its approval question; returns the row's id."""
    values = {
        "chat_id": chat_id,
        "message_position": position,
        **call_values(record),
        "version": 0,
        "created_at": utcnow(),
    }
    row_id: int = fetch_value(connection, _INSERT_CALL, values)
    insert_questions(connection, chat_id, row_id, 0, record.questions)
    return row_id


def insert_questions(
    connection: Connection, chat_id: str, row_id: int | None, first: int, new: Sequence[Question]
) -> None:
    """Insert question rows for one call (``row_id``; ``None``: the chat's own), numbered from ``first``.

    A question with a time limit schedules a check.
    """
    if new:
        connection.execute(
            _INSERT_QUESTION,
            [
                {"chat_id": chat_id, "tool_call_id": row_id, "number": first + index, **question_values(question)}
                for index, question in enumerate(new)
            ],
        )
        expiries = [question.expires_at for question in new if question.expires_at is not None]
        if expiries:
            check_by(connection, chat_id, min(expiries))


def schedule_check(connection: Connection, chat_id: str, task: Task) -> None:
    """Make the chat due when its paused task should next be checked (or expires)."""
    if not task.waits_on_person():
        interval = task.poll_interval if task.poll_interval is not None else DEFAULT_POLL_INTERVAL
        check_by(connection, chat_id, utcnow() + timedelta(seconds=interval))
    if task.expires_at is not None:
        check_by(connection, chat_id, task.expires_at)


@dataclass
class Tail:
    """The rows of a chat from one position on: its messages, their calls and the calls' questions."""

    start: int
    messages: Sequence[Row]
    calls: Sequence[Row]
    questions: dict[int, list[Row]]
    chat_questions: Sequence[Row] = ()
    """The rows of the chat's own questions (no call), oldest first."""

    @classmethod
    def of(cls, start: int, messages: Sequence[Row], calls: Sequence[Row], asked: Iterable[Row]) -> Tail:
        """The tail of these rows, with the questions ``asked`` (oldest first) grouped by call, the chat's own apart."""
        grouped: dict[int, list[Row]] = {row["id"]: [] for row in calls}
        own: list[Row] = []
        for row in asked:
            (own if row["tool_call_id"] is None else grouped[row["tool_call_id"]]).append(row)
        return cls(start, messages, calls, grouped, own)

    def waits_on_own_question(self) -> bool:
        """True when one of the chat's own questions is undecided and has time left."""
        now = utcnow()
        return any(
            row["decision"] is None and (row["expires_at"] is None or row["expires_at"] > now)
            for row in self.chat_questions
        )

    def changes(self, known: Mapping[str, CallRow]) -> Changes:
        """What the rows hold, as the values a chat takes in; ``known`` holds the rows of the calls read before.

        A call whose row version differs from the one read before (or that was never read)
        carries its saved state, for the chat to rebuild its task. Raises
        [`CorruptStateError`][tarry.errors.CorruptStateError] naming what cannot be read.
        """
        tail: list[Message] = []
        by_row_id: dict[int, Message] = {}
        for row in self.messages:
            if row["position"] != self.start + len(tail):
                chat_id = row["chat_id"]
                raise ValueError(f"Chat {chat_id} has a gap in its messages at position {self.start + len(tail)}")
            message = message_from_row(row)
            tail.append(message)
            by_row_id[row["id"]] = message
        chat_questions = tuple(question_from_row(row, None) for row in self.chat_questions)
        calls: list[CallChange] = []
        for row in self.calls:
            call = call_from_row(row)
            asked = tuple(question_from_row(question, call) for question in self.questions[row["id"]])
            read = known.get(call.id)
            changed = read is None or read.version != row["version"]
            state = saved_state(row) if changed else None
            waits = frozenset(waiting_on(row)) if row["state"] is not None else frozenset()
            result = None if row["result_message_id"] is None else by_row_id[row["result_message_id"]]
            calls.append(CallChange(call, bool(row["needs_approval"]), asked, changed, state, waits, result))
        return Changes(self.start, tuple(tail), chat_questions, tuple(calls))


def fetch_tail(connection: Connection, chat_id: str, start: int) -> Tail:
    """Read a chat's rows from message ``start`` on."""
    where = {"chat_id": chat_id, "start": start}
    message_rows = list(connection.execute(_TAIL_MESSAGES, where).mappings())
    call_rows: list[Row] = list(connection.execute(_TAIL_CALLS, where).mappings())
    asked = {"row_ids": [row["id"] for row in call_rows], "chat_id": chat_id}
    return Tail.of(start, message_rows, call_rows, connection.execute(_TAIL_QUESTIONS, asked).mappings())


def fetch_chat(connection: Sendable, chat_id: str, start: int) -> tuple[Row | None, Tail]:
    """The chat's row (``None`` for an unknown id) and its rows from message ``start`` on, in one snapshot.

    On PostgreSQL one statement reads them all, without ``BEGIN`` and ``COMMIT`` (a statement sees one
    snapshot): each table's rows come back as JSON, read into the values the tables' own reads give.
    Elsewhere it is one statement per table, in the caller's read transaction.
    """
    if isinstance(connection, Connection):  # SQLite, in the caller's read transaction
        chat_row = connection.execute(_CHAT_ROW, {"chat_id": chat_id}).mappings().one_or_none()
        return chat_row, fetch_tail(connection, chat_id, start)
    found = fetch_one(connection, _CHAT_AT_ONCE, {"chat_id": chat_id, "start": start})
    assert found is not None  # a SELECT of subqueries gives one row
    chat = None if found["chat"] is None else _from_json(chats, [found["chat"]])[0]
    message_rows, call_rows = _from_json(messages, found["messages"]), _from_json(tool_calls, found["calls"])
    return chat, Tail.of(start, message_rows, call_rows, _from_json(questions, found["questions"]))


def _from_json(table: Table, rows: list[list[Any]] | None) -> list[Row]:
    """Rows PostgreSQL sent as JSON arrays (in the table's column order), as mappings of the values the table's
    own reads give: its times read back into aware datetimes."""
    names, times = table.c.keys(), _TIMES[table.name]
    read: list[Row] = []
    for values in rows or ():
        row = dict(zip(names, values, strict=True))
        for column in times:
            if row[column] is not None:
                row[column] = datetime.fromisoformat(row[column]).astimezone(UTC)
        read.append(row)
    return read


# The statements of every step, built once: building one costs more than running it on SQLite.
CHAT_VERSION = select(chats.c.version).where(chats.c.id == bindparam("chat_id"))
_TAKE_TURN = (
    update(chats)
    .where(chats.c.id == bindparam("chat_id"), TURN_FREE)
    .values(claimed_by=bindparam("owner"), claimed_until=UNTIL)
    .returning(chats.c.version)
)
_OPEN_CALL = (
    select(tool_calls.c.id)
    .where(tool_calls.c.chat_id == bindparam("chat_id"), tool_calls.c.result_message_id.is_(None))
    .limit(1)
)
INSERT_CHAT = insert(chats)
_INSERT_MESSAGE = insert(messages)
_INSERT_MESSAGE_RETURNING_ID = insert(messages).returning(messages.c.id)
_INSERT_CALL = insert(tool_calls).returning(tool_calls.c.id)
_INSERT_QUESTION = insert(questions)
_THE_CALL = (tool_calls.c.chat_id == bindparam("the_chat"), tool_calls.c.call_id == bindparam("the_call"))
_RAN = select(tool_calls.c.ran).where(*_THE_CALL)
_FINISH_RUN = update(tool_calls).where(*_THE_CALL).values(ran=bindparam("new_ran", type_=tool_calls.c.ran.type))
_START_RUN = _FINISH_RUN.where(tool_calls.c.ran.is_(None))
_HOLD_OPEN_CALL = select(tool_calls.c.id).where(*HELD_OPEN_CALL).with_for_update(key_share=True)
"""Locks the call row ``row_id`` while it is open and ``owner`` holds it (``FOR NO KEY UPDATE``: see docs/store.md)."""
_LOCK_QUESTIONS = (
    select(questions.c.id)
    .where(questions.c.id.in_(bindparam("ids", expanding=True)))
    .order_by(questions.c.id)
    .with_for_update(key_share=True)
)
"""The questions named, locked in id order."""
_SAVE_HELD_CALL = (
    update(tool_calls)
    .where(*HELD_OPEN_CALL)
    .values(claimed_by=None, claimed_until=None, version=tool_calls.c.version + 1)  # released, and changed
    .returning(tool_calls.c.version)
)
_CLOSE_CALL = _SAVE_HELD_CALL.values(result_message_id=bindparam("new_result_message_id"))
_PAUSE_CALL = _SAVE_HELD_CALL.values(
    state=bindparam("new_state", type_=tool_calls.c.state.type),
    waiting_on=bindparam("new_waiting_on", type_=tool_calls.c.waiting_on.type),
)
_OPEN_AT_VERSION = (
    tool_calls.c.id == bindparam("row_id"),
    tool_calls.c.version == bindparam("read_version"),
    OPEN_BY_KEY,
)
_CLAIM_CALL = update(tool_calls).values(claimed_by=bindparam("owner"), claimed_until=UNTIL)
_CLAIM_FREE_CALL = _CLAIM_CALL.where(*_OPEN_AT_VERSION, tool_calls.c.claimed_by.is_(None)).returning(tool_calls.c.id)
_CLAIM_LAPSED_CALL = _CLAIM_CALL.where(
    *_OPEN_AT_VERSION, tool_calls.c.claimed_by.is_not(None), tool_calls.c.claimed_until < NOW
).returning(tool_calls.c.id)
_CALL_STATE = select(
    tool_calls.c.version,
    tool_calls.c.result_message_id,
    tool_calls.c.claimed_by,
    tool_calls.c.claimed_until,
    NOW.label("now"),
).where(tool_calls.c.id == bindparam("row_id"))
_CLAIMS = (_CLAIM_FREE_CALL, _CLAIM_LAPSED_CALL, _CALL_STATE)
_CHAT_AT_VERSION = exists().where(chats.c.id == bindparam("held_chat"), chats.c.version == bindparam("held_version"))
_CLAIMS_AT_CHAT_VERSION = (
    _CLAIM_FREE_CALL.where(_CHAT_AT_VERSION),
    _CLAIM_LAPSED_CALL.where(_CHAT_AT_VERSION),
    _CALL_STATE.add_columns(
        select(chats.c.version).where(chats.c.id == bindparam("held_chat")).scalar_subquery().label("chat_version")
    ),
)
_RENEW = {
    table.name: update(table)
    .where(table.c.id == bindparam("key"), table.c.claimed_by == bindparam("owner"))
    .values(claimed_until=UNTIL)
    for table in (chats, tool_calls)
}
_RELEASE = {
    table.name: update(table)
    .where(table.c.id == bindparam("key"), table.c.claimed_by == bindparam("owner"))
    .values(claimed_by=None, claimed_until=None)
    for table in (chats, tool_calls)
}
_TAIL_MESSAGES = (
    select(messages)
    .where(messages.c.chat_id == bindparam("chat_id"), messages.c.position >= bindparam("start"))
    .order_by(messages.c.position)
)
_TAIL_CALLS = (
    select(tool_calls)
    .where(tool_calls.c.chat_id == bindparam("chat_id"), tool_calls.c.message_position >= bindparam("start"))
    .order_by(tool_calls.c.id)
)
_TAIL_QUESTIONS = (  # the calls' questions and the chat's own (few: one per login it needed)
    select(questions)
    .where(
        or_(
            questions.c.tool_call_id.in_(bindparam("row_ids", expanding=True)),
            and_(questions.c.chat_id == bindparam("chat_id"), questions.c.tool_call_id.is_(None)),
        )
    )
    .order_by(questions.c.number)
)
_CHAT_ROW = select(chats).where(chats.c.id == bindparam("chat_id"))
_CALLS_FROM = "SELECT t.id FROM tarry_tool_calls AS t WHERE t.chat_id = :chat_id AND t.message_position >= :start"


def _as_array(table: Table, alias: str) -> str:
    """SQL for a row of ``table`` (as ``alias``) as a JSON array of its columns, named one by one: a missing
    column is an error (which the store names), not a missing key."""
    columns = ", ".join(f'{alias}."{column.name}"' for column in table.c)
    return f"json_build_array({columns})"


_CHAT_AT_ONCE = text(
    f"SELECT (SELECT {_as_array(chats, 'c')} FROM tarry_chats AS c WHERE c.id = :chat_id) AS chat, "
    f"(SELECT json_agg({_as_array(messages, 'm')} ORDER BY m.position) FROM tarry_messages AS m"
    " WHERE m.chat_id = :chat_id AND m.position >= :start) AS messages, "
    f"(SELECT json_agg({_as_array(tool_calls, 't')} ORDER BY t.id) FROM tarry_tool_calls AS t"
    " WHERE t.chat_id = :chat_id AND t.message_position >= :start) AS calls, "
    f"(SELECT json_agg({_as_array(questions, 'q')} ORDER BY q.number) FROM"
    f" (SELECT * FROM tarry_questions WHERE tool_call_id IN ({_CALLS_FROM}) UNION ALL"
    "  SELECT * FROM tarry_questions WHERE chat_id = :chat_id AND tool_call_id IS NULL) AS q) AS questions"
)
"""PostgreSQL: the chat's row and every row ``fetch_tail`` reads, as JSON arrays, in one statement.

The questions are the calls' and the chat's own, each found through its index: written as one ``OR``,
PostgreSQL scanned every question in the database.
"""
_TIMES = {
    table.name: tuple(column.name for column in table.c if isinstance(column.type, UTCDateTime))
    for table in (chats, messages, tool_calls, questions)
}
