"""May this decision be recorded? The ordered checks, each with what it says when it stops the decision.

One table, [`RULES`][tarry.decision_rules.RULES], read first to last: the first rule that stops a
decision says what came of it. An in-memory chat checks a decision with it (``tarry.calls.check_decision``),
and so does the store under its row lock; the store's statements that decide without the lock hold each
rule's SQL form, kept in the same order under the same name (``tarry.store.decision_sql``), and write only
when none stops the decision.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from tarry.errors import ProposalChangedError, QuestionExpiredError, TarryError, ToolCallRunningError
from tarry.questions import Decision, Question

__all__ = ["RULES", "SEEING", "Facts", "Rule", "RuleOutcome", "first_stop"]

RuleOutcome = Literal["lost", "expired", "running", "changed", "judged"]
"""What a rule that stops a decision makes of it: ``lost`` (another decision came
first, or the call ended: nothing is recorded), ``expired``, ``running`` and ``changed`` (refused, with an error),
``judged``
(the question's approval policy decides: [`judge`][tarry.approvals.judge])."""


@dataclass(frozen=True)
class Facts:
    """What a decision is checked against: the question as stored, the decision, its call's state, and the time."""

    question: Question
    decision: Decision
    running: bool
    """The question's call runs right now (someone holds its claim, and the claim has not run out)."""
    closed: bool
    """The question's call has ended (it has its result)."""
    now: datetime
    seen: str | None = None
    """The digest of the arguments the decider was shown ([`Question.proposal_digest`][tarry.Question.proposal_digest]
    as they saw it), or ``None`` when the decision does not say."""


@dataclass(frozen=True)
class Rule:
    """One check of a decision: ``stops`` tells whether it stops the decision, ``outcome`` what that makes of it,
    and ``error`` (for a refusal) the error raised."""

    name: str
    outcome: RuleOutcome
    stops: Callable[[Facts], bool]
    error: Callable[[Facts], TarryError] | None = None


def _decided(facts: Facts) -> bool:
    return facts.question.decision is not None


def _expired(facts: Facts) -> bool:
    expires_at = facts.question.expires_at
    return expires_at is not None and facts.now >= expires_at


def _expired_error(facts: Facts) -> TarryError:
    question = facts.question
    return QuestionExpiredError(f"Question {question.id} expired at {question.expires_at:%Y-%m-%d %H:%M:%S} UTC")


def _ended(facts: Facts) -> bool:
    return facts.closed


def _declines_running(facts: Facts) -> bool:
    # A question the running call itself asked and waits on may be declined: the call reads the decline.
    return facts.decision == "decline" and facts.running and not facts.question.awaited


def _running_error(facts: Facts) -> TarryError:
    question = facts.question
    name = question.tool_call.name if question.tool_call else "its"
    return ToolCallRunningError(f"Cannot decline question {question.id}: the {name} call is running right now")


SEEING: tuple[Decision, ...] = ("accept", "respond")
"""The decisions a digest of the arguments seen (``seen``) may stop: those that let the call go on or close it with
a person's result. A decline or a cancellation stops the call whatever its arguments are now."""


def _changed(facts: Facts) -> bool:
    # A question that proposes no arguments (not a call's approval) has no digest: any digest given misses it.
    seen = facts.seen
    return seen is not None and facts.decision in SEEING and seen != facts.question.proposal_digest


def _changed_error(facts: Facts) -> TarryError:
    question = facts.question
    proposal = question.proposal
    if proposal is None:
        return ProposalChangedError(
            f"Question {question.id} proposes no arguments, so no digest of them was seen", proposal=None, digest=None
        )
    now = json.dumps(proposal, ensure_ascii=False, sort_keys=True, default=str)
    return ProposalChangedError(
        f"The arguments of question {question.id} changed since you saw them: it now proposes {now}",
        proposal=proposal,
        digest=question.proposal_digest,
    )


def _has_policy(facts: Facts) -> bool:
    return facts.question.policy is not None


RULES: tuple[Rule, ...] = (
    Rule("decided", "lost", _decided),
    Rule("expired", "expired", _expired, _expired_error),
    Rule("ended", "lost", _ended),
    Rule("running", "running", _declines_running, _running_error),
    Rule("changed", "changed", _changed, _changed_error),
    Rule("policy", "judged", _has_policy),
)
"""The checks of a decision, in this order: decided already, expired, its call ended, declining a call that
runs, a decision that saw other arguments than the question proposes now (``seen``), and last the question's
approval policy, which only [`judge`][tarry.approvals.judge] can apply."""


def first_stop(facts: Facts) -> Rule | None:
    """The first of [`RULES`][tarry.decision_rules.RULES] that stops the decision, or ``None`` when none does."""
    return next((rule for rule in RULES if rule.stops(facts)), None)
