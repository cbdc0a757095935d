"""Approval policies: who may decide a call's approval, and how many distinct people must approve it.

The policy itself ([`Approval`][tarry.approvals.Approval]) and the approvals counted toward it
([`Vote`][tarry.approvals.Vote]) are data a [`Question`][tarry.Question] holds, kept in ``tarry.policies``.
The rule is one pure function, [`judge`][tarry.approvals.judge], that both an in-memory chat and the store
apply under their lock, so a policy means the same wherever a decision is made.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any, Literal

from tarry.edits import approved_arguments, counted_votes
from tarry.errors import NotAllowedError
from tarry.policies import Approval, Vote
from tarry.principals import Principal
from tarry.questions import Decision, Question

__all__ = ["Approval", "MayDecide", "Verdict", "Vote", "check_may_decide", "judge", "refusal", "refusals", "standing"]

MayDecide = Callable[[Principal, Question], bool]
"""The application's check: may this principal decide this question? (See [`Approval`][tarry.approvals.Approval]
``by``.)

A plain function: it runs inside the decision's transaction. Only ``True`` admits."""


def check_may_decide(may_decide: MayDecide | None) -> MayDecide | None:
    """``may_decide`` when it can serve as the check; raises ``TypeError`` for anything else.

    A coroutine function is refused: the check runs inside the decision's transaction, where
    nothing can await it, and its unawaited coroutine must never read as a yes.
    """
    if may_decide is None:
        return None
    if not callable(may_decide):
        raise TypeError(f"may_decide must be a function (principal, question) -> bool, got {may_decide!r}")
    if inspect.iscoroutinefunction(may_decide) or inspect.iscoroutinefunction(type(may_decide).__call__):
        raise TypeError(
            f"may_decide must be a plain function returning a bool, not a coroutine function ({may_decide!r}): "
            "it runs inside the decision's transaction, where nothing awaits it. Look up what it needs beforehand."
        )
    return may_decide


Verdict = Literal["decide", "count"]
"""``decide``: record the decision; ``count``: record one more approval, the question stays open."""


def judge(
    question: Question,
    decision: Decision,
    principal: Principal | None,
    may_decide: MayDecide | None,
    answer: Mapping[str, Any] | None = None,
    *,
    through_grant: bool = False,
) -> Verdict:
    """Apply the question's approval policy to one decision; raises [`NotAllowedError`][tarry.errors.NotAllowedError]
    when it refuses.

    Call it under the lock, after the question was found open. A cancellation (the chat's own)
    is never refused. ``answer`` is the decision's answer: an approval with changed arguments holds them
    (``{"arguments": ...}``); without, an approval is for the arguments the question proposes now. Only the votes
    for the same arguments count toward the policy's ``count``. ``through_grant``: a standing grant approves, as
    ``principal`` (its granter): one approval, or all that is needed when the policy says ``grant_suffices``.
    """
    reason = refusal(question, decision, principal, may_decide, answer)
    if reason is not None:
        raise NotAllowedError(reason)
    policy = question.policy
    if policy is None or decision != "accept" or policy.count == 1 or (through_grant and policy.grant_suffices):
        return "decide"
    counted = counted_votes(question, approved_arguments(question, answer))
    return "decide" if len(counted) + 1 >= policy.count else "count"


def refusal(
    question: Question,
    decision: Decision,
    principal: Principal | None,
    may_decide: MayDecide | None,
    answer: Mapping[str, Any] | None = None,
) -> str | None:
    """Why the question's approval policy refuses this decision by ``principal``, or ``None`` when it allows it.

    What [`judge`][tarry.approvals.judge] raises; the inbox and ``tarry pending`` ask it too, to offer a decision
    only to those who may make it. Nobody known and a self-declared principal
    (``verified=False``) are alike here: neither satisfies ``by`` nor counts toward ``count > 1``.
    ``may_decide`` admits with ``True`` only; an awaitable it returns raises ``TypeError``. A person who approved
    may approve again only other arguments (``answer``, as for [`judge`][tarry.approvals.judge]).

    Once the question escalated ([`Question.escalated_at`][tarry.Question.escalated_at]), a verified principal whose id
    its policy's ``escalate_to`` names is admitted as ``by`` admits (``may_decide`` is not asked); the other checks
    apply to them as to anyone.
    """
    policy = question.policy
    if policy is None or decision == "cancel":
        return None
    what = f"the {question.tool_call.name} call" if question.tool_call is not None else "this question"
    if principal is None or not principal.verified:
        return _unverified(principal, policy, what)
    if policy.by is not None and principal.id not in question.escalated_to:
        reason = _not_admitted(principal, question, policy.by, may_decide, what)
        if reason is not None:
            return reason
    if decision != "accept" or policy.count == 1:
        return None
    counted = counted_votes(question, approved_arguments(question, answer))
    if any(vote.principal.id == principal.id for vote in counted):
        return f"{principal.label} already approved {what}; it needs {policy.count} different people"
    return None


def _unverified(principal: Principal | None, policy: Approval, what: str) -> str | None:
    """Why nobody known (``None``), or a self-declared ``principal``, may not decide under ``policy``, if they
    may not: a policy that names ``by`` or counts more than one person needs a verified identity."""
    if policy.by is None and policy.count == 1:
        return None
    needs = "names who may" if policy.by else f"needs {policy.count} people"
    if principal is None:
        return f"Deciding {what} needs to know who decides (by=...): its policy {needs}"
    return (
        f"{principal.label} is a self-declared name that nobody checked, and {what} needs a verified "
        f"identity: its policy {needs}"
    )


def _not_admitted(
    principal: Principal, question: Question, by: str, may_decide: MayDecide | None, what: str
) -> str | None:
    """Why ``may_decide`` does not admit ``principal`` to decide ``question`` as ``by``, or ``None`` when it does."""
    if may_decide is None:
        return f"Only {by!r} may decide {what}, and nothing checks who that is: give the store may_decide=..."
    verdict = may_decide(principal, question)
    if inspect.isawaitable(verdict):
        if inspect.iscoroutine(verdict):
            verdict.close()  # never awaited: a coroutine is no answer
        raise TypeError(
            f"may_decide returned {type(verdict).__name__}, an awaitable, for {what}: it must be a plain "
            "function returning a bool"
        )
    if verdict is True:
        return None
    odd = "" if verdict is False else f"; may_decide returned {verdict!r}, and only True admits"
    return f"{principal.label} may not decide {what} (it needs {by!r}{odd})"


def refusals(
    question: Question, principal: Principal | None, may_decide: MayDecide | None
) -> tuple[str | None, str | None]:
    """Why ``principal`` may not approve ``question``, and why they may not decline it (``None``: they may)."""
    return refusal(question, "accept", principal, may_decide), refusal(question, "decline", principal, may_decide)


def standing(question: Question) -> str | None:
    """The question's approval policy and the approvals counted so far, in words (``None`` without a policy).

    >>> from tarry.questions import Question
    >>> standing(Question("q", "approval", "Pay?", policy=Approval(count=2, by="finance")))
    "Needs 2 different people's approval, each allowed as 'finance'; 0 of 2 so far."
    """
    policy = question.policy
    if policy is None:
        return None
    allowed = f"allowed as {policy.by!r}" if policy.by else ""
    if question.kind != "approval":  # a tool's question: one answer settles it
        return f"Needs the answer of someone {allowed}." if allowed else None
    if policy.count == 1:
        return f"Needs the approval of someone {allowed}." if allowed else "Needs one person's approval."
    each = f", each {allowed}" if allowed else ""
    counted = counted_votes(question, question.proposal)
    labels = ", ".join(vote.principal.label for vote in counted)
    others = len(question.votes) - len(counted)
    other = f" ({others} for other arguments, not counted)" if others else ""
    return (
        f"Needs {policy.count} different people's approval{each}; "
        f"{len(counted)} of {policy.count} so far{': ' + labels if labels else ''}{other}."
    )
