"""Standing grants: "always allow" as a durable record that approves matching calls at once.

A [`Grant`][tarry.grants.Grant] names a tool, optional constraints on its call's arguments
([`Equal`][tarry.grants.Equal], [`Within`][tarry.grants.Within]), a scope (one chat, the chats of one agent,
or everywhere), who granted it, and when it ends. A stored chat whose model makes a call the grant matches
has its approval decided at once, through the same single-use decision as any other, by the granter through
the ``grant`` channel (see ``tarry.store``). [`Allow`][tarry.grants.Allow] says what grant a decision makes
along with an approval ("approve, and allow this for this chat for an hour").
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal

from tarry.messages import ToolCall
from tarry.principals import MAX_IDENTITY, Principal

__all__ = [
    "Allow",
    "Constraint",
    "Equal",
    "Grant",
    "GrantScope",
    "Within",
    "constraint_from_dict",
    "constraints_of",
    "expiry_of",
    "same_json",
]

GrantScope = Literal["chat", "agent", "everywhere"]
"""Where a grant made along with a decision applies: the decided question's chat, the chats of that chat's agent,
or every chat."""
_SCOPES: tuple[GrantScope, ...] = ("chat", "agent", "everywhere")


def _number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def same_json(left: object, right: object) -> bool:
    """Whether two JSON values are equal as JSON: ``1 == 1.0``, but ``true`` is no number and ``"1"`` is no ``1``."""
    kind = _json_kind(left)
    if kind != _json_kind(right):
        return False
    if isinstance(left, list) and isinstance(right, list):
        return len(left) == len(right) and all(same_json(a, b) for a, b in zip(left, right, strict=True))
    if isinstance(left, dict) and isinstance(right, dict):
        return left.keys() == right.keys() and all(same_json(left[key], right[key]) for key in left)
    return left == right


def _json_kind(value: object) -> str:
    """What kind of JSON value ``value`` is (``bool`` apart from numbers, ``int`` and ``float`` alike)."""
    if isinstance(value, bool):
        return "boolean"
    return "number" if _number(value) else type(value).__name__


def _check_json(value: object, where: str) -> None:
    """Raise ``ValueError`` unless ``value`` is a JSON value (objects with str keys, finite numbers)."""
    if value is None or isinstance(value, str | bool):
        return
    if _number(value):
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"{where} must be a finite number, got {value!r}")
        return
    if isinstance(value, list):
        for item in value:
            _check_json(item, where)
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise ValueError(f"{where} holds an object key that is not a str: {key!r}")
            _check_json(item, where)
        return
    raise ValueError(f"{where} must be a JSON value, got {type(value).__name__}")


def _check_name(name: object) -> str:
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"A constraint names an argument: a non-empty str, got {name!r}")
    return name


@dataclass(frozen=True)
class Equal:
    """The call's argument ``name`` must equal ``value`` (compared as JSON: ``1`` equals ``1.0``, not ``true``)."""

    name: str
    value: Any

    def __post_init__(self) -> None:
        _check_name(self.name)
        _check_json(self.value, f"The value argument {self.name!r} must equal")

    def admits(self, arguments: Mapping[str, Any]) -> bool:
        """Whether ``arguments`` hold ``name`` equal to ``value``."""
        return self.name in arguments and same_json(arguments[self.name], self.value)

    def to_dict(self) -> dict[str, Any]:
        """The constraint as JSON-safe data."""
        return {"name": self.name, "equal": self.value}


@dataclass(frozen=True)
class Within:
    """The call's argument ``name`` must be a number from ``min`` to ``max``, both included (``None``: unbounded)."""

    name: str
    min: float | None = None
    max: float | None = None

    def __post_init__(self) -> None:
        _check_name(self.name)
        for which, bound in (("min", self.min), ("max", self.max)):
            if bound is not None and (not _number(bound) or not math.isfinite(bound)):
                raise ValueError(f"The {which} bound of argument {self.name!r} must be a finite number, got {bound!r}")
        if self.min is None and self.max is None:
            raise ValueError(f"Bounds on argument {self.name!r} need a min, a max or both")
        if self.min is not None and self.max is not None and self.min > self.max:
            raise ValueError(f"The bounds of argument {self.name!r} are reversed: min {self.min} > max {self.max}")

    def admits(self, arguments: Mapping[str, Any]) -> bool:
        """Whether ``arguments`` hold ``name`` as a number within the bounds."""
        value = arguments.get(self.name)
        if not isinstance(value, int | float) or isinstance(value, bool):
            return False
        return (self.min is None or value >= self.min) and (self.max is None or value <= self.max)

    def to_dict(self) -> dict[str, Any]:
        """The constraint as JSON-safe data."""
        return {"name": self.name, "min": self.min, "max": self.max}


Constraint = Equal | Within
"""One condition a grant sets on a call's arguments."""


def constraint_from_dict(data: Mapping[str, Any]) -> Constraint:
    """The constraint ``to_dict`` wrote."""
    if "equal" in data:
        return Equal(data["name"], data["equal"])
    return Within(data["name"], data.get("min"), data.get("max"))


def constraints_of(
    equal: Mapping[str, Any] | None = None, within: Mapping[str, tuple[float | None, float | None]] | None = None
) -> tuple[Constraint, ...]:
    """The constraints that ``equal`` (argument name to value) and ``within`` (argument name to ``(min, max)``) say.

    >>> constraints_of(equal={"currency": "EUR"}, within={"amount": (0, 100)})
    (Equal(name='currency', value='EUR'), Within(name='amount', min=0, max=100))
    """
    found: list[Constraint] = []
    for name, value in (equal or {}).items():
        found.append(Equal(name, value))
    for name, bounds in (within or {}).items():
        if not isinstance(bounds, tuple | list) or len(bounds) != 2:
            raise ValueError(f"The bounds of argument {name!r} are a (min, max) pair, got {bounds!r}")
        found.append(Within(name, bounds[0], bounds[1]))
    names = [constraint.name for constraint in found]
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise ValueError(f"Each argument takes one constraint; given twice: {', '.join(twice)}")
    return tuple(found)


def _checked_ttl(ttl: float) -> float:
    if not _number(ttl) or not math.isfinite(ttl) or ttl <= 0:
        raise ValueError(f"A grant's ttl must be a positive number of seconds, got {ttl!r}")
    return ttl


def expiry_of(now: datetime, ttl: float | None, expires_at: datetime | None) -> datetime | None:
    """When a grant made at ``now`` ends: ``ttl`` seconds on, or at ``expires_at`` (at most one given), or never.

    Raises ``ValueError`` for both, a ``ttl`` that is not a positive number, or an ``expires_at`` that is naive or
    not after ``now``.
    """
    if ttl is not None and expires_at is not None:
        raise ValueError("A grant takes ttl or expires_at, not both")
    if ttl is not None:
        return now + timedelta(seconds=_checked_ttl(ttl))
    if expires_at is None:
        return None
    if not isinstance(expires_at, datetime) or expires_at.tzinfo is None:
        raise ValueError(f"A grant's expires_at must be an aware datetime, got {expires_at!r}")
    if expires_at <= now:
        raise ValueError(f"A grant's expires_at is in the past: {expires_at.isoformat()}")
    return expires_at


@dataclass(frozen=True)
class Grant:
    """A standing approval of calls of ``tool`` whose arguments meet every one of ``constraints``.

    Its scope is one chat (``chat_id``), the chats of one agent (``agent``, the name a chat records), or, with
    neither, every chat. It approves as ``granted_by`` from ``granted_at`` until ``expires_at`` (``None``:
    never) or until revoked. ``question_id`` names the decision it was made with, if any.

    >>> from datetime import UTC, datetime
    >>> grant = Grant("g1", "pay", Principal("ada"), datetime(2030, 1, 1, tzinfo=UTC), (Within("amount", max=100),))
    >>> grant.matches(ToolCall("c1", "pay", {"amount": 40}), "chat-1", None, datetime(2030, 1, 2, tzinfo=UTC))
    True
    >>> grant.matches(ToolCall("c2", "pay", {"amount": 400}), "chat-1", None, datetime(2030, 1, 2, tzinfo=UTC))
    False
    """

    id: str
    tool: str
    granted_by: Principal
    granted_at: datetime
    constraints: tuple[Constraint, ...] = ()
    chat_id: str | None = None
    agent: str | None = None
    expires_at: datetime | None = None
    revoked_at: datetime | None = None
    revoked_by: Principal | None = None
    question_id: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.tool, str) or not self.tool.strip() or len(self.tool) > MAX_IDENTITY:
            raise ValueError(f"A grant names a tool: a non-empty str of at most {MAX_IDENTITY} characters")
        if self.chat_id is not None and self.agent is not None:
            raise ValueError("A grant's scope is one chat or one agent, not both")
        for what, value in (("chat_id", self.chat_id), ("agent", self.agent)):
            if value is not None and (not isinstance(value, str) or not value.strip()):
                raise ValueError(f"A grant's {what} must be a non-empty str or None, got {value!r}")
        if not isinstance(self.constraints, tuple) or not all(
            isinstance(constraint, Equal | Within) for constraint in self.constraints
        ):
            raise TypeError("A grant's constraints are a tuple of Equal and Within")

    @property
    def scope(self) -> str:
        """Where the grant applies, in words: ``chat <id>``, ``agent <name>`` or ``everywhere``."""
        if self.chat_id is not None:
            return f"chat {self.chat_id}"
        if self.agent is not None:
            return f"agent {self.agent}"
        return "everywhere"

    def live(self, now: datetime) -> bool:
        """Whether the grant applies at ``now``: not revoked, not expired."""
        return self.revoked_at is None and (self.expires_at is None or now < self.expires_at)

    def matches(self, call: ToolCall, chat_id: str, agent: str | None, now: datetime) -> bool:
        """Whether the grant approves ``call``, made in chat ``chat_id`` of agent ``agent`` (``None``: no agent),
        at ``now``."""
        if not self.live(now) or call.name != self.tool:
            return False
        if self.chat_id is not None and self.chat_id != chat_id:
            return False
        if self.agent is not None and self.agent != agent:
            return False
        return all(constraint.admits(call.arguments) for constraint in self.constraints)

    def to_dict(self) -> dict[str, Any]:
        """The grant as JSON-safe data (times as ISO 8601 text)."""

        def moment(value: datetime | None) -> str | None:
            return None if value is None else value.isoformat()

        return {
            "id": self.id,
            "tool": self.tool,
            "constraints": [constraint.to_dict() for constraint in self.constraints],
            "chat_id": self.chat_id,
            "agent": self.agent,
            "scope": self.scope,
            "granted_by": self.granted_by.to_dict(),
            "granted_at": self.granted_at.isoformat(),
            "expires_at": moment(self.expires_at),
            "revoked_at": moment(self.revoked_at),
            "revoked_by": None if self.revoked_by is None else self.revoked_by.to_dict(),
            "question_id": self.question_id,
        }


@dataclass(frozen=True)
class Allow:
    """The grant a decision makes along with its approval: ``approve(id, allow=Allow("chat", ttl=3600))``.

    The grant is for the decided call's tool, in the ``scope`` of the decided question (its chat, its chat's
    agent, or everywhere), with the constraints ``equal`` and ``within`` say (as
    [`constraints_of`][tarry.grants.constraints_of]), for ``ttl`` seconds (``None``: until revoked).
    """

    scope: GrantScope = "chat"
    equal: Mapping[str, Any] | None = None
    within: Mapping[str, tuple[float | None, float | None]] | None = None
    ttl: float | None = None

    def __post_init__(self) -> None:
        if self.scope not in _SCOPES:
            raise ValueError(f"A grant's scope is one of {', '.join(_SCOPES)}; got {self.scope!r}")
        constraints_of(self.equal, self.within)
        if self.ttl is not None:
            _checked_ttl(self.ttl)
