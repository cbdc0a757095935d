"""Who made a decision, and through what: a principal and a channel."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = ["CHANNELS", "Channel", "Principal", "check_channel", "principal_of"]

Channel = Literal["api", "web", "cli", "code", "mcp"]
"""Through what a decision came: the JSON API, the inbox page, the ``tarry`` command, Python code, an MCP client."""
CHANNELS: tuple[Channel, ...] = ("api", "web", "cli", "code", "mcp")


@dataclass(frozen=True)
class Principal:
    """A person (or a service) who decides: a stable ``id`` and, for screens, a display ``name``.

    Two principals with the same ``id`` are the same person, whatever their names say; an
    approval policy counts distinct ids.

    >>> Principal("u-17", "Ada Lovelace").label
    'Ada Lovelace'
    """

    id: str
    name: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.id, str) or not self.id.strip():
            raise ValueError(f"A principal's id must be a non-empty str, got {self.id!r}")
        if self.name is not None and not isinstance(self.name, str):
            raise TypeError(f"A principal's name must be str or None, got {type(self.name).__name__}")

    @property
    def label(self) -> str:
        """The name when there is one, else the id."""
        return self.name or self.id

    def to_dict(self) -> dict[str, str | None]:
        """The principal as JSON-safe data."""
        return {"id": self.id, "name": self.name}


def principal_of(by: str | Principal | None) -> Principal | None:
    """The principal ``by`` names: a [`Principal`][tarry.principals.Principal], an identity string (its id), or
    ``None`` for nobody known."""
    if by is None or isinstance(by, Principal):
        return by
    if isinstance(by, str):
        return Principal(by)
    raise TypeError(f"by= takes an identity (str), a Principal or None, got {type(by).__name__}")


def check_channel(channel: str) -> Channel:
    """``channel`` when it is one of [`CHANNELS`][tarry.principals.CHANNELS]; raises ``ValueError`` naming them
    otherwise."""
    for known in CHANNELS:
        if channel == known:
            return known
    raise ValueError(f"channel must be one of {', '.join(CHANNELS)}; got {channel!r}")
