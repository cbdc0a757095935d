"""Where a chat writes its changes: nowhere for an in-memory chat, a database for a stored one."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any, Protocol, TypeVar

from tarry.approvals import Vote, judge
from tarry.calls import CallRecord, Claim, Outcome, check_decision
from tarry.clock import utcnow
from tarry.messages import Message
from tarry.principals import Channel, Principal
from tarry.questions import Decision, Question
from tarry.tracing import decision_attributes, mark

ChatT = TypeVar("ChatT", contravariant=True)
"""The chat a journal serves: :class:`tarry.Chat` (named by type, so this module need not import it)."""


class Records(Protocol):
    """What :class:`MemoryJournal` asks of its chat: the record of a question's call."""

    def record_of(self, question: Question) -> CallRecord | None:
        """The record of the call that asked ``question``, if the chat holds it."""
        ...


class Journal(Protocol[ChatT]):
    """The small interface a chat writes through. Each method that writes is one transaction.

    The chat changes its own objects after a write succeeds, so a failed write leaves
    both the database and the chat as they were.
    """

    async def refresh(self, chat: ChatT) -> None:
        """Bring the chat up to date with what other processes recorded."""
        ...

    async def append(
        self, chat: ChatT, message: Message, records: Sequence[CallRecord] = (), *, claim_turn: bool = False
    ) -> bool:
        """Save a new user or assistant message, with the records of the calls it makes.

        With ``claim_turn`` the same transaction also claims the turn, when it is free, for the
        next :meth:`hold_turn`. Returns whether the chat now holds everything recorded (no other
        process wrote since it last looked), so the chat can skip its next :meth:`refresh`.
        """
        ...

    def hold_call(self, chat: ChatT, record: CallRecord) -> AbstractAsyncContextManager[Claim]:
        """Claim ``record`` for as long as the block runs (renewing the lease), then release it."""
        ...

    def hold_turn(self, chat: ChatT) -> AbstractAsyncContextManager[bool]:
        """Claim the chat around one model request; yields ``False`` when another process holds it."""
        ...

    async def save_call(self, chat: ChatT, record: CallRecord, outcome: Outcome, *, claim_turn: bool = False) -> None:
        """Save what running a call came to: its result message, or its new pause and question.

        With ``claim_turn`` the same transaction claims the turn, when it is free, for the next
        :meth:`hold_turn` (the chat asks for it when this result closes its last open call).
        """
        ...

    async def release_turn(self, chat: ChatT) -> None:
        """Give back a turn that :meth:`append` or :meth:`save_call` claimed and no :meth:`hold_turn` used."""
        ...

    async def decide(
        self,
        chat: ChatT,
        question: Question,
        decision: Decision,
        answer: dict[str, Any] | None,
        note: str | None,
        by: Principal | None,
        channel: Channel,
    ) -> bool:
        """Record a decision unless another came first (``False``); checks as :func:`check_decision`.

        Then applies the question's approval policy (:func:`~tarry.approvals.judge`): raises
        :class:`~tarry.errors.NotAllowedError`, or only counts an approval (``True``, the
        question stays open) while more people must approve.
        """
        ...

    async def add_question(self, chat: ChatT, record: CallRecord, question: Question) -> None:
        """Save a question that the running call of ``record`` asks while it runs (already minted).

        Used by :meth:`tarry.live.LiveCall.ask` (an MCP server's push elicitation); the call
        stays claimed meanwhile, and the question is listed and answered like any other.
        """
        ...

    async def add_chat_question(self, chat: ChatT, question: Question) -> bool:
        """Save a question of the chat itself (no tool call; already minted), parking the chat on it.

        Returns ``False`` when this journal cannot keep such a question where other processes
        answer it; the chat then raises the :class:`~tarry.questions.AnswerNeeded` it came from.
        """
        ...

    async def wait_for_decision(self, chat: ChatT, question: Question) -> Question:
        """Wait until a decision on ``question`` is recorded (in any process) or it expires; return it.

        Sets ``decision``, ``answer``, ``note`` and ``decided_at`` on ``question`` from the
        record. A stored journal polls the question's row (or listens for a notification).
        """
        ...


class MemoryJournal:
    """The journal of one in-memory chat: it keeps nothing, and claims are flags on the records and a lock."""

    def __init__(self) -> None:
        self._decided: dict[str, asyncio.Event] = {}
        self._turn = asyncio.Lock()
        """Held around a model request of the one chat this journal serves."""

    async def refresh(self, chat: Records) -> None:
        """Nothing to read: this process made every change."""

    async def append(
        self, chat: Records, message: Message, records: Sequence[CallRecord] = (), *, claim_turn: bool = False
    ) -> bool:
        """Nothing to write; the chat made every change itself, so it is always current."""
        return True

    @asynccontextmanager
    async def hold_call(self, chat: Records, record: CallRecord) -> AsyncIterator[Claim]:
        """Mark the record as running for the block, unless it already is."""
        if record.running:
            yield Claim.BUSY
            return
        record.running = True
        try:
            yield Claim.GRANTED
        finally:
            record.running = False

    @asynccontextmanager
    async def hold_turn(self, chat: Records) -> AsyncIterator[bool]:
        """Hold this journal's lock around a model request."""
        if self._turn.locked():
            yield False
            return
        async with self._turn:
            yield True

    async def save_call(self, chat: Records, record: CallRecord, outcome: Outcome, *, claim_turn: bool = False) -> None:
        """Nothing to write; the turn is the chat's own lock, taken by :meth:`hold_turn`."""

    async def release_turn(self, chat: Records) -> None:
        """Nothing claimed early."""

    async def decide(
        self,
        chat: Records,
        question: Question,
        decision: Decision,
        answer: dict[str, Any] | None,
        note: str | None,
        by: Principal | None,
        channel: Channel,
    ) -> bool:
        """Check and record the decision on the question object itself.

        An in-memory chat has no ``may_decide``: a policy that names ``by`` needs a store.
        """
        record = chat.record_of(question)
        now = utcnow()
        running, closed = (record.running, not record.open) if record is not None else (False, False)
        if not check_decision(question, decision, running=running, closed=closed, now=now):
            return False
        if judge(question, decision, by, None) == "count":
            assert by is not None
            question.votes.append(Vote(by, now))
            return True
        if question.policy is not None and by is not None and decision == "accept":
            question.votes.append(Vote(by, now))
        question.decision, question.answer, question.note, question.decided_at = decision, answer, note, now
        question.decided_by, question.channel = by, channel
        mark(f"decision {decision}", decision_attributes(question))
        if (event := self._decided.get(question.id)) is not None:
            event.set()
        return True

    async def add_question(self, chat: Records, record: CallRecord, question: Question) -> None:
        """Nothing to write."""

    async def add_chat_question(self, chat: Records, question: Question) -> bool:
        """Refuse: only a store keeps a login where the redirect endpoint answers it, so the chat raises."""
        return False

    async def wait_for_decision(self, chat: Records, question: Question) -> Question:
        """Wait on an event that :meth:`decide` sets, until the question's time to live ends."""
        event = self._decided.setdefault(question.id, asyncio.Event())
        try:
            while question.decision is None and not question.expired(utcnow()):
                left = None if question.expires_at is None else (question.expires_at - utcnow()).total_seconds()
                try:
                    await asyncio.wait_for(event.wait(), None if left is None else max(left, 0.0))
                except TimeoutError:
                    break
        finally:
            self._decided.pop(question.id, None)
        return question
