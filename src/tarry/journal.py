"""Where a chat writes its changes: nowhere for an in-memory chat, a database for a stored one."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any, Protocol

from tarry.approvals import judge
from tarry.calls import CallRecord, Claim, Outcome, check_decision
from tarry.changes import Changes
from tarry.clock import utcnow
from tarry.edits import recorded_answer, vote_for
from tarry.errors import QuestionExpiredError
from tarry.live import EarlierRun
from tarry.messages import Message
from tarry.principals import Channel, Principal
from tarry.questions import Decision, Question, Verdict
from tarry.tracing import decision_attributes, mark


class Journal(Protocol):
    """The small interface one chat object writes through. Each method that writes is one transaction.

    It speaks ids and values, never the chat: the chat asks, the journal records and answers
    with what changed, and the chat changes its own objects afterwards, so a failed write
    leaves both the database and the chat as they were. What the journal keeps to do its work
    (versions read, whether its own last write was the latest, claims held) is its own.

    The chat acts on what it sees (``ask()``, ``complete()``, ``step()``, a stream, a decision,
    ``cancel()``) within a [`session`][tarry.journal.Journal.session]: what the journal takes ahead
    for the run (a turn claimed with a write, a call claimed with the decision that freed it)
    belongs to the session, and what the run did not use is given back when it ends.
    """

    def session(self) -> AbstractAsyncContextManager[None]:
        """Scope one run of the chat: on exit, give back what the journal took ahead for it and the run did not use.

        Sessions may nest (the outermost one's exit gives back); what the journal knows of the chat
        as current holds only within a session.
        """
        ...

    def refresh(self, start: int) -> AbstractAsyncContextManager[Changes | None]:
        """Yield what other processes recorded since the chat last looked, from message ``start`` on.

        Yields ``None`` when nothing changed: also, within a session, without a look when the journal
        knows the chat holds everything (its own last write was the latest, or it has just read or
        confirmed the chat's version). The chat takes the changes in within the block;
        the journal counts them as held only when the block ends without an error. Outside a
        session the chat only shows what it holds (it lists what it waits on), so a journal that
        has just read every row may answer from them.
        """
        ...

    async def append(self, message: Message, records: Sequence[CallRecord] = (), *, claim_turn: bool = False) -> None:
        """Save a new user or assistant message, with the records of the calls it makes.

        With ``claim_turn`` the same transaction also claims the turn, when it is free, for the
        next ``hold_turn``. A journal whose write turns out to be the latest (no other process wrote
        since the chat last looked) may answer the next ``refresh`` of the session without a look.
        """
        ...

    def hold_call(self, call_id: str) -> AbstractAsyncContextManager[Claim]:
        """Claim the call for as long as the block runs (renewing the lease), then release it.

        The chat may carry its calls on as it sees them, without looking first: a claim on a view that
        proved stale (the call, or the chat, changed since the chat last looked) is ``STALE``, and the
        chat looks again, then plans again.
        """
        ...

    def hold_turn(self) -> AbstractAsyncContextManager[bool]:
        """Claim the chat around one model request; yields ``False`` when another process holds it."""
        ...

    async def save_call(self, call_id: str, outcome: Outcome, *, first_question: int, claim_turn: bool = False) -> None:
        """Save what running a call came to: its result message, or its new pause and questions.

        The new questions are numbered from ``first_question`` (how many the call asked before).
        With ``claim_turn`` the same transaction claims the turn, when it is free, for the next
        ``hold_turn`` (the chat asks for it when this result closes its last open call).
        """
        ...

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
        """Record a decision on ``question`` unless another came first; checks as ``check_decision``.

        ``running`` and ``closed`` say whether the question's call runs right now, or has ended,
        as far as the chat knows. Then applies the question's approval policy
        ([`judge`][tarry.approvals.judge]): raises [`NotAllowedError`][tarry.errors.NotAllowedError], or only
        counts an approval (the question stays open) while more people must approve. Returns the
        question as the attempt left it (decided, or with one more vote), ``None`` when another
        decision came first; ``question`` itself is left alone, for the chat to update.

        ``carry_on``: the decision frees the question's call and the chat carries it on next, in the
        open session. The journal may then start the call along with the decision: the call is the
        session's from then on (its next ``hold_call`` takes it as it is), and the session gives it
        back if the run does not carry it on after all. Outside a session it means nothing.

        ``seen``: the digest of the arguments the decider was shown; when the question proposes others now, raises
        [`ProposalChangedError`][tarry.errors.ProposalChangedError], recording nothing.
        """
        ...

    async def add_question(self, call_id: str, number: int, question: Question) -> None:
        """Save question ``number`` of a call that asks it while it runs (already minted).

        Used by ``tarry.live.LiveCall.ask`` (an MCP server's push elicitation); the call
        stays claimed meanwhile, and the question is listed and answered like any other.
        """
        ...

    async def close_unused(self, call_id: str, questions: Sequence[Question], note: str) -> list[Question]:
        """Cancel ``questions``, through the ``code`` channel with ``note``: open questions that an earlier run
        of the call asked while it ran, which the run this process holds now does not ask again.

        Returns them as recorded (without those another decision came first to, or that expired). A
        stored journal cancels them only while this process holds the open call, and otherwise raises
        [`ClaimLostError`][tarry.errors.ClaimLostError], cancelling nothing: a run that stopped must not close
        what the run holding the call now waits on.
        """
        ...

    async def add_chat_question(self, number: int, question: Question) -> bool:
        """Save question ``number`` of the chat itself (no tool call; already minted), parking the chat on it.

        Returns ``False`` when this journal cannot keep such a question where other processes
        answer it; the chat then raises the ``AnswerNeeded`` it came from.
        """
        ...

    async def start_run(self, call_id: str) -> EarlierRun | None:
        """Mark, in a transaction of its own, the run of closed call ``call_id``'s tool by the framework the chat's
        model runs (a bridge) started; ``None`` when this marked it, else what an earlier run of it recorded
        (in any process), marking nothing: so at most one run of the call's tool starts."""
        ...

    async def finish_run(self, call_id: str, result: Any) -> None:
        """Record ``result`` (JSON) as what the run of call ``call_id``'s tool, marked started, returned."""
        ...

    async def wait_for_decision(self, question: Question) -> Question:
        """Wait until a decision on ``question`` is recorded (in any process) or it expires.

        Returns the question as recorded then (``question`` itself when nothing was decided).
        A stored journal polls the question's row, and raises [`ClaimLostError`][tarry.errors.ClaimLostError]
        once another process holds the question's call (or closed it): no decision can come then.
        """
        ...


class MemoryJournal:
    """The journal of one in-memory chat: it keeps only which calls run, the turn's lock and who awaits a decision."""

    def __init__(self) -> None:
        self._waiters: dict[str, asyncio.Future[Question]] = {}
        self._running: set[str] = set()
        """The ids of the calls held right now."""
        self._turn = asyncio.Lock()
        """Held around a model request of the one chat this journal serves."""
        self._runs: dict[str, EarlierRun] = {}
        """The runs of calls' tools a bridge's framework started, by call id."""

    @asynccontextmanager
    async def refresh(self, start: int) -> AsyncIterator[Changes | None]:
        """Nothing to read: this process made every change."""
        yield None

    @asynccontextmanager
    async def session(self) -> AsyncIterator[None]:
        """Nothing is taken ahead: the chat made every change itself."""
        yield

    async def append(self, message: Message, records: Sequence[CallRecord] = (), *, claim_turn: bool = False) -> None:
        """Nothing to write; the chat made every change itself, so it is always current."""

    @asynccontextmanager
    async def hold_call(self, call_id: str) -> AsyncIterator[Claim]:
        """Hold the call for the block, unless it is held already."""
        if call_id in self._running:
            yield Claim.BUSY
            return
        self._running.add(call_id)
        try:
            yield Claim.GRANTED
        finally:
            self._running.discard(call_id)

    @asynccontextmanager
    async def hold_turn(self) -> AsyncIterator[bool]:
        """Hold this journal's lock around a model request."""
        if self._turn.locked():
            yield False
            return
        async with self._turn:
            yield True

    async def save_call(self, call_id: str, outcome: Outcome, *, first_question: int, claim_turn: bool = False) -> None:
        """Nothing to write; the turn is the chat's own lock, taken by ``hold_turn``."""

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
        """Check the decision against the question as the chat holds it; return the question that records it.

        An in-memory chat has no ``may_decide``: a policy that names ``by`` needs a store.
        """
        now = utcnow()
        if not check_decision(question, decision, running=running, closed=closed, now=now, seen=seen):
            return None
        verdict = judge(question, decision, by, None, answer)
        decided = question
        if question.policy is not None and by is not None and decision == "accept":
            decided = question.with_vote(vote_for(question, by, now, answer, channel))
        if verdict == "count":
            return decided
        if decision == "accept":
            answer = recorded_answer(question, answer)
        decided = decided.decided_with(Verdict(decision, now, answer, note, by, channel))
        mark(f"decision {decision}", decision_attributes(decided))
        waiter = self._waiters.get(question.id)
        if waiter is not None and not waiter.done():
            waiter.set_result(decided)
        return decided

    async def add_question(self, call_id: str, number: int, question: Question) -> None:
        """Nothing to write."""

    async def close_unused(self, call_id: str, questions: Sequence[Question], note: str) -> list[Question]:
        """Cancel each as ``decide`` would (an in-memory chat's call is never taken over, so this is not used)."""
        closed = []
        for question in questions:
            with contextlib.suppress(QuestionExpiredError):
                decided = await self.decide(question, "cancel", None, note, None, "code", running=True, closed=False)
                if decided is not None:
                    closed.append(decided)
        return closed

    async def start_run(self, call_id: str) -> EarlierRun | None:
        """Mark the run started unless one was; what that one recorded otherwise."""
        earlier = self._runs.get(call_id)
        if earlier is None:
            self._runs[call_id] = EarlierRun(finished=False)
        return earlier

    async def finish_run(self, call_id: str, result: Any) -> None:
        """Keep the run's result."""
        self._runs[call_id] = EarlierRun(finished=True, result=result)

    async def add_chat_question(self, number: int, question: Question) -> bool:
        """Refuse: only a store keeps a login where the redirect endpoint answers it, so the chat raises."""
        return False

    async def wait_for_decision(self, question: Question) -> Question:
        """Wait for ``decide`` to record a decision on the question, until its time to live ends."""
        if question.decision is not None or question.expired(utcnow()):
            return question
        waiter = self._waiters[question.id] = asyncio.get_running_loop().create_future()
        left = None if question.expires_at is None else max((question.expires_at - utcnow()).total_seconds(), 0.0)
        try:
            return await asyncio.wait_for(waiter, left)
        except TimeoutError:
            return question
        finally:
            self._waiters.pop(question.id, None)
