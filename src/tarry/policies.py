"""An approval policy and the approvals counted toward it: the data a question holds.

The rules that apply a policy to a decision are [`tarry.approvals`][tarry.approvals], which also exports
these names.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from tarry.principals import Principal

__all__ = ["Approval", "Vote"]


@dataclass(frozen=True)
class Approval:
    """What a tool's approval asks for: ``count`` distinct people, each one allowed by ``by``.

    ``requires_approval = Approval(count=2, by="finance")`` is the four-eyes rule: the call runs
    only after two different principals approved it, each admitted by the application's
    ``may_decide(principal, question)`` (given to the [`Store`][tarry.store.Store]), which reads
    ``question.policy.by`` to know which group is meant. Any one allowed decline ends the call.
    ``by=None`` lets anyone decide. A decision without an identity, or by a self-declared one
    (a [`Principal`][tarry.principals.Principal] with ``verified=False``), cannot satisfy a policy
    that names ``by`` or counts more than one person, and is refused.

    A standing grant ([`tarry.grants`][tarry.grants]) that approves a call counts as one approval, its
    granter's; ``grant_suffices=True`` lets it approve the call alone, whatever ``count`` says.
    """

    count: int = 1
    by: str | None = None
    grant_suffices: bool = False

    def __post_init__(self) -> None:
        if isinstance(self.count, bool) or not isinstance(self.count, int) or self.count < 1:
            raise ValueError(f"Approval count must be a positive int, got {self.count!r}")
        if self.by is not None and (not isinstance(self.by, str) or not self.by):
            raise ValueError(f"Approval by must be a non-empty str (a group or an identity) or None, got {self.by!r}")
        if not isinstance(self.grant_suffices, bool):
            raise TypeError(f"Approval grant_suffices must be a bool, got {type(self.grant_suffices).__name__}")

    def to_dict(self) -> dict[str, Any]:
        """The policy as JSON-safe data."""
        data: dict[str, Any] = {"count": self.count, "by": self.by}
        if self.grant_suffices:  # written only when set: a policy stored before grants reads back the same
            data["grant_suffices"] = True
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Approval:
        """The policy [`to_dict`][tarry.approvals.Approval.to_dict] wrote."""
        return cls(
            count=int(data.get("count", 1)), by=data.get("by"), grant_suffices=data.get("grant_suffices") is True
        )


@dataclass(frozen=True)
class Vote:
    """One approval counted toward a policy's ``count``: who, when, and for which arguments of the call.

    ``digest`` is [`arguments_digest`][tarry.edits.arguments_digest] of the arguments approved (``None``, as in votes
    recorded before votes carried one: the call's arguments as the model sent them); ``arguments`` holds them when
    the approver changed them (``None``: as the model sent them).
    """

    principal: Principal
    at: datetime
    digest: str | None = None
    arguments: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        """The vote as JSON-safe data."""
        bound = {"digest": self.digest} if self.digest is not None else {}
        edited = {"arguments": self.arguments} if self.arguments is not None else {}
        return {**self.principal.to_dict(), "at": self.at.isoformat(), **bound, **edited}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Vote:
        """The vote [`to_dict`][tarry.approvals.Vote.to_dict] wrote."""
        digest, arguments = data.get("digest"), data.get("arguments")
        return cls(
            Principal(str(data["id"]), data.get("name")),
            datetime.fromisoformat(str(data["at"])),
            digest if isinstance(digest, str) else None,
            dict(arguments) if isinstance(arguments, Mapping) else None,
        )
