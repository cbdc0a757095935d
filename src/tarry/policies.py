"""An approval policy and the approvals counted toward it: the data a question holds.

The rules that apply a policy to a decision are [`tarry.approvals`][tarry.approvals], which also exports
these names.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal

from tarry.principals import Channel, Principal

__all__ = ["ON_TIMEOUT", "Approval", "OnTimeout", "Vote"]

OnTimeout = Literal["expire", "decline"]
"""What becomes of an approval nobody decided before its time to live ran out: ``expire`` (the call lapses, and the
model is told nobody decided in time) or ``decline`` (a decline is recorded, by the policy). Never an approval."""
ON_TIMEOUT: tuple[OnTimeout, ...] = ("expire", "decline")


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

    Reminders, escalation and a default (a store's [`sweep_reminders`][tarry.store.Store.sweep_reminders] applies
    them, once each): ``remind_after`` (a ``timedelta`` or seconds after the question was asked) records a reminder;
    ``escalate_after`` records an escalation, after which each principal whose id ``escalate_to`` names may decide
    too, as if ``by`` admitted them (verified identities only; ``count`` still counts distinct people);
    ``on_timeout`` says what becomes of the approval when its time to live (the tool's ``approval_ttl``) runs out
    undecided: ``"expire"`` (the default) or ``"decline"``. An approval is never implicit.
    """

    count: int = 1
    by: str | None = None
    grant_suffices: bool = False
    remind_after: timedelta | None = None
    escalate_after: timedelta | None = None
    escalate_to: tuple[str, ...] = ()
    on_timeout: OnTimeout = "expire"

    def __post_init__(self) -> None:
        if isinstance(self.count, bool) or not isinstance(self.count, int) or self.count < 1:
            raise ValueError(f"Approval count must be a positive int, got {self.count!r}")
        if self.by is not None and (not isinstance(self.by, str) or not self.by):
            raise ValueError(f"Approval by must be a non-empty str (a group or an identity) or None, got {self.by!r}")
        if not isinstance(self.grant_suffices, bool):
            raise TypeError(f"Approval grant_suffices must be a bool, got {type(self.grant_suffices).__name__}")
        object.__setattr__(self, "remind_after", _span("remind_after", self.remind_after))
        object.__setattr__(self, "escalate_after", _span("escalate_after", self.escalate_after))
        object.__setattr__(self, "escalate_to", _escalated_to(self.escalate_to))
        if bool(self.escalate_to) != (self.escalate_after is not None):
            raise ValueError(
                "Approval escalate_after and escalate_to go together: escalate_after says when, escalate_to to whom "
                f"(got escalate_after={self.escalate_after!r}, escalate_to={self.escalate_to!r})"
            )
        if self.on_timeout not in ON_TIMEOUT:
            implicit = " (an approval is never implicit)" if self.on_timeout in ("approve", "accept") else ""
            raise ValueError(f"Approval on_timeout must be 'expire' or 'decline'{implicit}; got {self.on_timeout!r}")

    def to_dict(self) -> dict[str, Any]:
        """The policy as JSON-safe data (spans of time in seconds)."""
        data: dict[str, Any] = {"count": self.count, "by": self.by}
        # Each written only when set: a policy stored before it existed reads back the same.
        if self.grant_suffices:
            data["grant_suffices"] = True
        if self.remind_after is not None:
            data["remind_after"] = self.remind_after.total_seconds()
        if self.escalate_after is not None:
            data["escalate_after"] = self.escalate_after.total_seconds()
            data["escalate_to"] = list(self.escalate_to)
        if self.on_timeout != "expire":
            data["on_timeout"] = self.on_timeout
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Approval:
        """The policy [`to_dict`][tarry.approvals.Approval.to_dict] wrote."""
        return cls(
            count=int(data.get("count", 1)),
            by=data.get("by"),
            grant_suffices=data.get("grant_suffices") is True,
            remind_after=_seconds(data.get("remind_after")),
            escalate_after=_seconds(data.get("escalate_after")),
            escalate_to=tuple(data.get("escalate_to") or ()),
            on_timeout=data.get("on_timeout", "expire"),
        )


def _span(name: str, value: object) -> timedelta | None:
    """``value`` as a positive span of time (a ``timedelta``, or a number of seconds), or ``None``."""
    if value is None:
        return None
    if isinstance(value, int | float) and not isinstance(value, bool):
        value = timedelta(seconds=value)
    if not isinstance(value, timedelta):
        raise TypeError(f"Approval {name} must be a timedelta, a number of seconds or None, got {value!r}")
    if value <= timedelta():
        raise ValueError(f"Approval {name} must be a positive span of time, got {value!r}")
    return value


def _escalated_to(value: object) -> tuple[str, ...]:
    """``value`` as the ids of the principals an approval escalates to."""
    if isinstance(value, str):
        raise TypeError(f"Approval escalate_to takes principals' ids (a tuple or list of str), got the str {value!r}")
    if not isinstance(value, tuple | list):
        raise TypeError(f"Approval escalate_to takes principals' ids (a tuple or list of str), got {value!r}")
    for item in value:
        if not isinstance(item, str) or not item.strip():
            raise ValueError(f"Approval escalate_to takes non-empty principal ids, got {item!r}")
    return tuple(value)


def _seconds(value: Any) -> timedelta | None:
    """A span of time ``to_dict`` wrote as seconds (``None`` for none)."""
    return None if value is None else timedelta(seconds=float(value))


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
    channel: Channel | None = None
    """Through what the approval came (``None`` in votes recorded before votes carried it)."""

    def to_dict(self) -> dict[str, Any]:
        """The vote as JSON-safe data."""
        bound = {"digest": self.digest} if self.digest is not None else {}
        edited = {"arguments": self.arguments} if self.arguments is not None else {}
        through = {"channel": self.channel} if self.channel is not None else {}
        return {**self.principal.to_dict(), "at": self.at.isoformat(), **bound, **edited, **through}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Vote:
        """The vote [`to_dict`][tarry.approvals.Vote.to_dict] wrote."""
        digest, arguments = data.get("digest"), data.get("arguments")
        return cls(
            Principal(str(data["id"]), data.get("name")),
            datetime.fromisoformat(str(data["at"])),
            digest if isinstance(digest, str) else None,
            dict(arguments) if isinstance(arguments, Mapping) else None,
            data.get("channel"),
        )
