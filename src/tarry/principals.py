"""Who made a decision, and through what: a principal and a channel."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from tarry.text import unstorable

__all__ = ["CHANNELS", "MAX_IDENTITY", "Channel", "Principal", "check_channel", "principal_of"]

Channel = Literal["api", "web", "cli", "code", "mcp", "email", "slack", "grant", "policy"]
"""Through what a decision came: the JSON API, the inbox page, the ``tarry`` command, Python code, an MCP client,
a signed link sent by email, Slack, a standing grant ([`tarry.grants`][tarry.grants]), or an approval's policy (its
reminder, escalation or decline on timeout: [`Approval`][tarry.approvals.Approval]); only the store decides through
the last two."""
CHANNELS: tuple[Channel, ...] = ("api", "web", "cli", "code", "mcp", "email", "slack", "grant", "policy")
_STORE_ONLY = ("grant", "policy")
MAX_IDENTITY = 200
"""The most characters a principal's id or name holds: what the store keeps of who decided."""


@dataclass(frozen=True)
class Principal:
    """A person (or a service) who decides: a stable ``id`` and, for screens, a display ``name``.

    Two principals with the same ``id`` are the same person, whatever their names say; an
    approval policy counts distinct ids.

    ``verified`` says whether an identity source the deployment controls vouched for the ``id``
    (your application's code, its authentication, a per-user inbox token, a trusted proxy, the
    OS account running ``tarry``); ``False`` marks a name nobody checked (``tarry approve --as``,
    the shared inbox token). A self-declared principal may make a decision a plain approval
    allows, and is recorded under its name, but never satisfies a policy's ``by`` nor counts
    toward a ``count`` above one. It takes no part in equality, and is not stored: it matters
    at the moment of deciding.

    >>> Principal("u-17", "Ada Lovelace").label
    'Ada Lovelace'
    """

    id: str
    name: str | None = None
    verified: bool = field(default=True, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.id, str) or not self.id.strip():
            raise ValueError(f"A principal's id must be a non-empty str, got {self.id!r}")
        if self.name is not None and not isinstance(self.name, str):
            raise TypeError(f"A principal's name must be str or None, got {type(self.name).__name__}")
        if not isinstance(self.verified, bool):
            raise TypeError(f"A principal's verified must be a bool, got {type(self.verified).__name__}")

    @property
    def label(self) -> str:
        """The name when there is one, else the id."""
        return self.name or self.id

    def to_dict(self) -> dict[str, str | None]:
        """The principal as JSON-safe data."""
        return {"id": self.id, "name": self.name}


def principal_of(by: str | Principal | None) -> Principal | None:
    """The principal ``by`` names: a [`Principal`][tarry.principals.Principal], an identity string (its id), or
    ``None`` for nobody known.

    Raises ``ValueError`` for an id or name that the store cannot record: longer than
    [`MAX_IDENTITY`][tarry.principals.MAX_IDENTITY] characters, or holding NUL characters or a lone surrogate.
    """
    if by is None:
        return None
    if isinstance(by, str):
        by = Principal(by)
    if not isinstance(by, Principal):
        raise TypeError(f"by= takes an identity (str), a Principal or None, got {type(by).__name__}")
    for what, text in (("id", by.id), ("name", by.name)):
        if text is None:
            continue
        problem = f"takes at most {MAX_IDENTITY} characters, got {len(text)}" if len(text) > MAX_IDENTITY else None
        held = unstorable(text)
        if problem or held:
            raise ValueError(f"The decider's {what} {problem or f'cannot hold {held}'}: {text[:40]!r}…")
    return by


def check_channel(channel: str) -> Channel:
    """``channel`` when a caller may name it: one of [`CHANNELS`][tarry.principals.CHANNELS] but ``grant`` and
    ``policy``, which only the store's own decisions use; raises ``ValueError`` naming them otherwise."""
    given = [known for known in CHANNELS if known not in _STORE_ONLY]
    if channel == "grant":
        raise ValueError("channel 'grant' is for the decisions standing grants make; name your own channel")
    if channel == "policy":
        raise ValueError("channel 'policy' is for what approval policies record (a decline on timeout); name your own")
    for known in given:
        if channel == known:
            return known
    raise ValueError(f"channel must be one of {', '.join(given)}; got {channel!r}")
