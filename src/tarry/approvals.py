"""Approval policies: who may decide a call's approval, and how many distinct people must approve it.

The rule is one pure function, [`judge`][tarry.approvals.judge], that both an in-memory chat and the store apply
under their lock, so a policy means the same wherever a decision is made.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal

from tarry.errors import NotAllowedError
from tarry.principals import Principal

if TYPE_CHECKING:
    from tarry.questions import Decision, Question

__all__ = ["Approval", "MayDecide", "Verdict", "Vote", "judge"]

MayDecide = Callable[[Principal, "Question"], bool]
"""The application's check: may this principal decide this question? (See [`Approval`][tarry.approvals.Approval]
``by``.)"""


@dataclass(frozen=True)
class Approval:
    """What a tool's approval asks for: ``count`` distinct people, each one allowed by ``by``.

    ``requires_approval = Approval(count=2, by="finance")`` is the four-eyes rule: the call runs
    only after two different principals approved it, each admitted by the application's
    ``may_decide(principal, question)`` (given to the [`Store`][tarry.store.Store]), which reads
    ``question.policy.by`` to know which group is meant. Any one allowed decline ends the call.
    ``by=None`` lets anyone decide. A decision without an identity cannot satisfy a policy that
    names ``by`` or counts more than one person, and is refused.
    """

    count: int = 1
    by: str | None = None

    def __post_init__(self) -> None:
        if isinstance(self.count, bool) or not isinstance(self.count, int) or self.count < 1:
            raise ValueError(f"Approval count must be a positive int, got {self.count!r}")
        if self.by is not None and (not isinstance(self.by, str) or not self.by):
            raise ValueError(f"Approval by must be a non-empty str (a group or an identity) or None, got {self.by!r}")

    def to_dict(self) -> dict[str, Any]:
        """The policy as JSON-safe data."""
        return {"count": self.count, "by": self.by}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Approval:
        """The policy [`to_dict`][tarry.approvals.Approval.to_dict] wrote."""
        return cls(count=int(data.get("count", 1)), by=data.get("by"))


@dataclass(frozen=True)
class Vote:
    """One approval counted toward a policy's ``count``: who and when."""

    principal: Principal
    at: datetime

    def to_dict(self) -> dict[str, Any]:
        """The vote as JSON-safe data."""
        return {**self.principal.to_dict(), "at": self.at.isoformat()}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Vote:
        """The vote [`to_dict`][tarry.approvals.Vote.to_dict] wrote."""
        return cls(Principal(str(data["id"]), data.get("name")), datetime.fromisoformat(str(data["at"])))


Verdict = Literal["decide", "count"]
"""``decide``: record the decision; ``count``: record one more approval, the question stays open."""


def judge(
    question: Question,
    decision: Decision,
    principal: Principal | None,
    may_decide: MayDecide | None,
) -> Verdict:
    """Apply the question's approval policy to one decision; raises [`NotAllowedError`][tarry.errors.NotAllowedError]
    when it refuses.

    Call it under the lock, after the question was found open. A cancellation (the chat's own)
    is never refused.
    """
    policy = question.policy
    if policy is None or decision == "cancel":
        return "decide"
    what = f"the {question.tool_call.name} call" if question.tool_call is not None else "this question"
    if principal is None:
        if policy.by is not None or policy.count > 1:
            raise NotAllowedError(
                f"Deciding {what} needs to know who decides (by=...): "
                f"its policy {'names who may' if policy.by else f'needs {policy.count} people'}"
            )
        return "decide"
    if policy.by is not None:
        if may_decide is None:
            raise NotAllowedError(
                f"Only {policy.by!r} may decide {what}, and nothing checks who that is: give the store may_decide=..."
            )
        if not may_decide(principal, question):
            raise NotAllowedError(f"{principal.label} may not decide {what} (it needs {policy.by!r})")
    if decision != "accept" or policy.count == 1:
        return "decide"
    if any(vote.principal.id == principal.id for vote in question.votes):
        raise NotAllowedError(f"{principal.label} already approved {what}; it needs {policy.count} different people")
    return "decide" if len(question.votes) + 1 >= policy.count else "count"
