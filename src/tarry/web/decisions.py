"""Recording a decision through the store, and what came of it, for the page and the API alike."""

from __future__ import annotations

import inspect
import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import urlsplit

from starlette.requests import Request

from tarry.decisions import check_seen
from tarry.errors import (
    ChatNotFoundError,
    InvalidAnswerError,
    NotAllowedError,
    NotDecidableError,
    NotRespondableError,
    ProposalChangedError,
    QuestionExpiredError,
    ToolCallRunningError,
    UnknownGrantError,
    UnknownQuestionError,
)
from tarry.grants import Allow, Grant
from tarry.principals import Channel, Principal
from tarry.questions import Question
from tarry.store import Store
from tarry.store.turn import shown_digests
from tarry.web.access import Access, ChatRef

logger = logging.getLogger("tarry.web")
OnAnswer = Callable[[Question], Awaitable[None] | None]
"""Runs after a decision was recorded through the inbox, with the decided question."""
Action = Literal["answer", "approve", "decline", "respond"]
"""What a person does: answer, approve, decline, or give the call's result in place of its tool (``respond``, whose
values are ``{"result": value}``)."""
DecisionOutcome = Literal[
    "answered",
    "approved",
    "counted",
    "declined",
    "responded",
    "taken",
    "yours",
    "expired",
    "unknown",
    "invalid",
    "running",
    "refused",
    "changed",
]
"""``counted``: an approval that needs more people was counted; ``taken``: someone else decided first;
``yours``: the same person already decided it through this app; ``refused``: its approval policy refused them;
``changed``: the approval said which arguments the person saw (``seen``), and someone changed them since (the
result holds the question as it stands, and under ``"seen"`` the error's message)."""
REMEMBERED = 10_000
"""How many recent decisions the app remembers the deciders of."""


@dataclass
class Result:
    """What came of one attempt to decide a question."""

    outcome: DecisionOutcome
    question: Question | None = None
    errors: dict[str, str] = field(default_factory=dict)

    @property
    def recorded(self) -> bool:
        """True when this attempt recorded the decision."""
        return self.outcome in ("answered", "approved", "counted", "declined", "responded")


TurnOutcome = Literal["approved", "nothing", "stopped", "unknown", "invalid"]
"""What came of approving a chat's whole turn: ``approved`` (every question), ``nothing`` (none waited),
``stopped`` (one question could not be approved, so none was), ``unknown`` (no such chat), ``invalid`` (an
identity the store cannot record, or a malformed ``seen``)."""


@dataclass
class TurnResult:
    """What came of approving a chat's whole turn at once."""

    outcome: TurnOutcome
    approved: list[Question] = field(default_factory=list)
    """The questions approved, in id order."""
    stopped: NotDecidableError | None = None
    """For ``stopped``: the error that names the question that stopped the turn, and why."""
    errors: dict[str, str] = field(default_factory=dict)


NOBODY_GRANTS = "A standing grant needs to know who grants it: this inbox does not say who you are."
"""Why a grant is not made or revoked for a request that identifies nobody."""
RevokeOutcome = Literal["revoked", "unknown", "invalid", "nobody"]
"""What came of revoking a standing grant: ``revoked``; ``unknown`` (no grant the person may see has the id);
``invalid`` (an identity the store cannot record); ``nobody`` (the inbox does not say who the person is)."""


@dataclass
class Revocation:
    """What came of one attempt to revoke a standing grant."""

    outcome: RevokeOutcome
    grant: Grant | None = None
    """For ``revoked``: the grant as it now stands."""
    problem: str | None = None
    """For ``invalid``: why the identity cannot be recorded."""


def safe_url(url: str | None) -> bool:
    """True for an absolute ``http`` or ``https`` URL: the only links the inbox offers to open."""
    if not url or any(character.isspace() or ord(character) < 32 for character in url):
        return False
    try:
        parts = urlsplit(url)
    except ValueError:
        return False
    return parts.scheme.lower() in ("http", "https") and bool(parts.netloc)


class Decider:
    """Records decisions through the store, checks who may make them, and runs ``on_answer``."""

    def __init__(self, store: Store, access: Access, on_answer: OnAnswer | None) -> None:
        self.store = store
        self.access = access
        self.on_answer = on_answer
        self._deciders: OrderedDict[str, str] = OrderedDict()

    async def decide(
        self,
        request: Request,
        question_id: str,
        action: Action,
        values: Mapping[str, Any] | None = None,
        note: str | None = None,
        channel: Channel = "web",
        allow: Allow | None = None,
        seen: str | None = None,
    ) -> Result:
        """Answer, approve, decline or respond as whoever ``Access.principal`` says; raises
        ``NotLoggedIn``/``Forbidden``.

        ``allow`` (with ``approve``) also makes the standing grant it says, in the decision's transaction.
        ``seen`` (with ``approve`` or ``respond``): the [`proposal_digest`][tarry.Question.proposal_digest] of the
        question as the person was shown it; the outcome is ``changed`` when its arguments changed since.

        One read of the question (to check who may see it), then the decision through
        [`Store.decide`][tarry.store.Store.decide], whose question the result holds; the question is read
        again only when another decision came first, to show it.
        """
        try:
            question = await self.store.question(question_id)
        except UnknownQuestionError:
            return Result("unknown")
        await self.access.require(request, question)
        problem = await self.access.identity_problem(request)
        if problem is not None:  # the host app's identity for this person is one the store cannot record
            return Result("invalid", question, {"identity": problem})
        by = await self.access.principal(request)
        try:
            seen = check_seen(seen) if action in ("approve", "respond") else None
        except (TypeError, ValueError) as error:
            return Result("invalid", question, {"seen": str(error)})
        try:
            decided = await self._record(question, action, values, note, by, channel, allow, seen)
        except (NotAllowedError, InvalidAnswerError, QuestionExpiredError, ToolCallRunningError) as error:
            return _refused(question, error)
        except ProposalChangedError as error:
            return Result("changed", await self.store.question(question.id), {"seen": str(error)})
        except NotRespondableError as error:
            return Result("invalid", question, {"result": str(error)})
        except UnknownQuestionError:
            return Result("unknown")
        except ValueError as error:  # the grant ``allow`` says cannot be made (no agent to name, no call's approval)
            if allow is None:
                raise
            return Result("invalid", question, {"allow": str(error)})
        return await self._outcome(request, question, action, decided)

    async def decide_as(
        self,
        question_id: str,
        action: Action,
        by: Principal,
        channel: Channel,
        values: Mapping[str, Any] | None = None,
        note: str | None = None,
    ) -> Result:
        """Answer, approve or decline as ``by``, whom the surface proved itself (a signed link names its person):
        no ``Access`` check, the same recording, rules and policy as ``decide``.

        Another decision that came first is ``yours`` when ``by`` made it, else ``taken``.
        """
        try:
            question = await self.store.question(question_id)
        except UnknownQuestionError:
            return Result("unknown")
        try:
            decided = await self._record(question, action, values, note, by, channel)
        except (NotAllowedError, InvalidAnswerError, QuestionExpiredError, ToolCallRunningError) as error:
            return _refused(question, error)
        except UnknownQuestionError:
            return Result("unknown")
        if decided is None:
            now = await self.store.question(question_id)
            mine = now.decided_by is not None and now.decided_by.id == by.id
            return Result("yours" if mine else "taken", now)
        if decided.decision is None:
            return Result("counted", decided)
        await self._after(decided)
        return Result(_RECORDED[action], decided)

    async def approve_all(
        self, request: Request, chat_id: str, channel: Channel = "web", seen: Mapping[str, str] | None = None
    ) -> TurnResult:
        """Approve the chat's whole turn ([`Store.approve_all`][tarry.store.Store.approve_all]) as whoever
        ``Access.principal`` says; raises ``NotLoggedIn``/``Forbidden``.

        ``seen``: the questions the person was shown, by id, each with its
        [`proposal_digest`][tarry.Question.proposal_digest] as shown; the turn stops (``stopped``) when one changed
        since or one was not shown, and is ``invalid`` (under ``"seen"``) when ``seen`` is malformed.

        The person must be allowed the chat and each question it waits on (``authorize``, item by item) before
        anything is recorded; ``on_answer`` runs for each approved question.
        """
        await self.access.require(request, ChatRef(chat_id))
        for question in await self.store.pending_questions(chat_id):
            await self.access.require(request, question)
        problem = await self.access.identity_problem(request)
        if problem is not None:
            return TurnResult("invalid", errors={"identity": problem})
        by = await self.access.principal(request)
        try:
            shown = shown_digests(seen)
        except (TypeError, ValueError) as error:
            return TurnResult("invalid", errors={"seen": str(error)})
        try:
            approved = await self.store.approve_all(chat_id, by=by, channel=channel, seen=shown)
        except ChatNotFoundError:
            return TurnResult("unknown")
        except NotDecidableError as error:
            return TurnResult("stopped", stopped=error)
        except ValueError as error:  # seen names a question that is not this chat's
            if shown is None:
                raise
            return TurnResult("invalid", errors={"seen": str(error)})
        who = self.access.who(request)
        for question in approved:
            if who is not None:
                self._remember(question.id, who)
            await self._after(question)
        return TurnResult("approved" if approved else "nothing", approved)

    async def shown_grants(self, request: Request, grants: Iterable[Grant]) -> list[Grant]:
        """The grants the request may see: those of chats it may see, and the inbox's own (no chat)."""
        return [
            grant
            for grant in grants
            if await self.access.allowed(request, None if grant.chat_id is None else ChatRef(grant.chat_id))
        ]

    async def revoke_grant(self, request: Request, grant_id: str) -> Revocation:
        """Revoke a standing grant the request may see, as whoever ``Access.principal`` says (the shared token's
        holder too: revoking only takes a permission away); the page and the API follow this one rule."""
        problem = await self.access.identity_problem(request)
        if problem is not None:
            return Revocation("invalid", problem=problem)
        by = await self.access.principal(request)
        if by is None:
            return Revocation("nobody")
        found = [grant for grant in await self.store.grants(include_ended=True) if grant.id == grant_id]
        if not await self.shown_grants(request, found):
            return Revocation("unknown")
        try:
            return Revocation("revoked", await self.store.revoke_grant(grant_id, by=by))
        except UnknownGrantError:
            return Revocation("unknown")

    def _remember(self, question_id: str, who: str) -> None:
        """Remember who decided ``question_id`` through this app, to tell them later it was them."""
        self._deciders[question_id] = who
        while len(self._deciders) > REMEMBERED:
            self._deciders.popitem(last=False)

    async def _record(
        self,
        question: Question,
        action: Action,
        values: Mapping[str, Any] | None,
        note: str | None,
        by: Principal | None,
        channel: Channel,
        allow: Allow | None = None,
        seen: str | None = None,
    ) -> Question | None:
        """Record the decision ``action`` makes (with ``allow``, an approval's grant too; ``seen``, the digest of the
        arguments an approver saw); the question as it left it, ``None`` when another came first."""
        if action == "decline":
            return await self.store.decide(question.id, "decline", note=note, by=by, channel=channel)
        if action == "respond":
            result = (values or {}).get("result")
            return await self.store.respond(question.id, result, by=by, channel=channel, seen=seen)
        if question.kind == "url" and not safe_url(question.url):
            raise InvalidAnswerError({"url": "only http and https links can be accepted"})
        if action == "approve":  # values, if any, change the call's arguments
            changes = dict(values) if values else None
            return await self.store.decide(
                question.id, "accept", by=by, channel=channel, allow=allow, arguments=changes, seen=seen
            )
        return await self.store.decide(question.id, "accept", dict(values or {}), by=by, channel=channel)

    async def _outcome(self, request: Request, question: Question, action: Action, decided: Question | None) -> Result:
        """What came of a decision that was not refused: recorded (``decided``), counted, or taken by another."""
        who = self.access.who(request)
        if decided is None:
            mine = who is not None and self._deciders.get(question.id) == who
            return Result("yours" if mine else "taken", await self.store.question(question.id))
        if who is not None:
            self._remember(question.id, who)
        if decided.decision is None:  # one approval of several counted: nothing is decided yet
            return Result("counted", decided)
        await self._after(decided)
        return Result(_RECORDED[action], decided)

    async def _after(self, question: Question) -> None:
        # The store already ran its decision hooks (the worker's wake-up, the Celery enqueue).
        if self.on_answer is None:
            return
        try:
            outcome = self.on_answer(question)
            if inspect.isawaitable(outcome):
                await outcome
        except Exception:
            logger.exception("on_answer failed for question %s", question.id)


_RECORDED: dict[Action, DecisionOutcome] = {
    "answer": "answered",
    "approve": "approved",
    "decline": "declined",
    "respond": "responded",
}
"""The outcome of each action that recorded its decision."""


def _refused(question: Question, error: Exception) -> Result:
    """The result of a decision the store refused with ``error``."""
    if isinstance(error, NotAllowedError):
        return Result("refused", question, {"policy": str(error)})
    if isinstance(error, InvalidAnswerError):
        return Result("invalid", question, error.errors)
    return Result("expired" if isinstance(error, QuestionExpiredError) else "running", question)
