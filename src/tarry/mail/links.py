"""Signed one-click links: a question, the person a link was sent to, what it does, and until when.

A link's token is a value signed with ``itsdangerous`` under the deployment's secret: nobody without the
secret can make one, or change one without the signature failing. The inbox's ``/links/{token}`` page reads
it back ([`tarry.web.create_app`][tarry.web.create_app]'s ``link_secret``); following a link never decides by
itself, the page's form does.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from itsdangerous import BadSignature, URLSafeSerializer

from tarry.clock import utcnow
from tarry.principals import Principal, principal_of

__all__ = ["DEFAULT_TTL", "LINK_ACTIONS", "Link", "LinkAction", "LinkRefused", "LinkSigner"]

LinkAction = Literal["approve", "decline", "answer"]
"""What a link's page does: approve a call, decline a question, or answer one (a form's fields, a visited URL)."""
LINK_ACTIONS: tuple[LinkAction, ...] = ("approve", "decline", "answer")
DEFAULT_TTL = 7 * 24 * 3600.0
"""How long a link works unless told otherwise, in seconds: a week."""
MIN_SECRET = 16
"""The fewest characters (or bytes) a link secret may have."""


@dataclass(frozen=True)
class Link:
    """What a signed link says: which question, for whom, to do what, and until when."""

    question_id: str
    principal: Principal
    """The person the link was sent to; a decision made through it is theirs, verified (the link is the proof)."""
    action: LinkAction
    expires_at: datetime
    """After this the link is refused (the question itself may lapse sooner)."""


class LinkRefused(Exception):
    """A link that cannot be used: ``reason`` is ``"tampered"`` (not signed with this secret, or changed) or
    ``"expired"``; ``link`` is what an expired link said (``None`` for a tampered one)."""

    def __init__(self, reason: Literal["tampered", "expired"], link: Link | None = None) -> None:
        super().__init__(
            "the link was changed or not made by this inbox" if reason == "tampered" else "the link has expired"
        )
        self.reason = reason
        self.link = link


class LinkSigner:
    """Makes and reads signed links under ``secret`` (at least 16 characters; keep it private, the same in every
    process that sends mail or serves the inbox). Links last ``ttl`` seconds unless given their own expiry."""

    def __init__(self, secret: str | bytes, *, ttl: float = DEFAULT_TTL) -> None:
        if not isinstance(secret, str | bytes):
            raise TypeError(f"A link secret must be str or bytes, got {type(secret).__name__}")
        if len(secret) < MIN_SECRET:
            raise ValueError(f"A link secret needs at least {MIN_SECRET} characters, got {len(secret)}")
        if isinstance(ttl, bool) or not isinstance(ttl, int | float) or ttl <= 0:
            raise ValueError(f"A link's ttl must be a positive number of seconds, got {ttl!r}")
        self.ttl = float(ttl)
        self._links = URLSafeSerializer(secret, salt="tarry.link")
        self._forms = URLSafeSerializer(secret, salt="tarry.link-form")

    def sign(
        self, question_id: str, principal: Principal, action: LinkAction, *, expires_at: datetime | None = None
    ) -> str:
        """The token of a link to ``action`` on ``question_id`` as ``principal``, good until ``expires_at``
        (default: ``ttl`` from now)."""
        if not isinstance(question_id, str) or not question_id:
            raise ValueError(f"A link needs a question id, got {question_id!r}")
        if action not in LINK_ACTIONS:
            raise ValueError(f"A link's action must be one of {', '.join(LINK_ACTIONS)}; got {action!r}")
        if not isinstance(principal, Principal):
            raise TypeError(f"A link needs the Principal it is sent to, got {type(principal).__name__}")
        principal_of(principal)  # raises for an id or name the store cannot record
        until = expires_at if expires_at is not None else utcnow() + timedelta(seconds=self.ttl)
        if until.tzinfo is None:
            raise ValueError("A link's expires_at must be an aware datetime")
        payload = {"q": question_id, "p": principal.id, "n": principal.name, "a": action, "e": until.timestamp()}
        return self._links.dumps(payload)

    def read(self, token: str) -> Link:
        """What the link ``token`` says; raises [`LinkRefused`][tarry.mail.LinkRefused] when it was tampered with
        or has expired (by [`tarry.clock`][tarry.clock])."""
        try:
            payload: Any = self._links.loads(token)
            link = Link(
                question_id=str(payload["q"]),
                principal=Principal(str(payload["p"]), None if payload["n"] is None else str(payload["n"])),
                action=_action(payload["a"]),
                expires_at=datetime.fromtimestamp(float(payload["e"]), UTC),
            )
        except (BadSignature, KeyError, TypeError, ValueError):
            raise LinkRefused("tampered") from None
        if utcnow() >= link.expires_at:
            raise LinkRefused("expired", link)
        return link

    def form_token(self, token: str, nonce: str) -> str:
        """The hidden value of a link page's form: bound to the link ``token`` and the browser's cookie ``nonce``."""
        return self._forms.dumps([_digest(token), nonce])

    def form_valid(self, token: str, nonce: str | None, given: str | None) -> bool:
        """True when ``given`` is a form value this signer made for ``token`` and the cookie ``nonce``."""
        if not nonce or not given:
            return False
        try:
            digest, bound = self._forms.loads(given)
        except (BadSignature, TypeError, ValueError):
            return False
        return hmac.compare_digest(str(digest), _digest(token)) and hmac.compare_digest(str(bound), nonce)


def _action(value: object) -> LinkAction:
    for action in LINK_ACTIONS:
        if value == action:
            return action
    raise ValueError(f"not a link action: {value!r}")


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()[:32]
