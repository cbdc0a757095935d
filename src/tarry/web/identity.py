"""Who is asking, from sources the deployment controls: per-user tokens, an identity header from a trusted proxy."""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from starlette.requests import HTTPConnection
from starlette.types import ASGIApp, Receive, Scope, Send

from tarry.principals import Principal

__all__ = ["ProxyIdentity", "Users", "hash_token"]

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def hash_token(token: str) -> str:
    """The SHA-256 of ``token``, in hex: what a users file keeps instead of the token."""
    return hashlib.sha256(token.encode()).hexdigest()


class Users:
    """People who log in to the inbox with a token of their own: each token's hash names one principal.

    A users file holds one person a line: their id, the SHA-256 of their token in hex, then
    their display name if any (``ann 5e88…d1 Ann Archer``); blank lines and lines starting with
    ``#`` are skipped. The tokens themselves are never stored, and a token is compared by its
    hash in constant time. Every principal it names is verified: the deployment handed out the
    tokens.
    """

    def __init__(self, entries: Iterable[tuple[str, Principal]]) -> None:
        self._entries = list(entries)
        ids = [principal.id for _, principal in self._entries]
        if len(set(ids)) != len(ids):
            raise ValueError(f"A users list names someone twice: {sorted({i for i in ids if ids.count(i) > 1})}")
        self._by_id = {principal.id: principal for _, principal in self._entries}

    @classmethod
    def load(cls, path: str | Path) -> Users:
        """The users of the file at ``path``; raises ``ValueError`` naming the line that does not fit."""
        entries = []
        for number, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), start=1):
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            parts = line.split(maxsplit=2)
            digest = parts[1].lower() if len(parts) > 1 else ""
            if len(digest) != 64 or any(character not in "0123456789abcdef" for character in digest):
                raise ValueError(f"{path}, line {number}: expected 'ID SHA256_OF_TOKEN [NAME]', got {line!r}")
            entries.append((digest, Principal(parts[0], parts[2].strip() if len(parts) > 2 else None)))
        if not entries:
            raise ValueError(f"{path} names no user")
        return cls(entries)

    def __len__(self) -> int:
        return len(self._entries)

    def find(self, token: str | None) -> Principal | None:
        """Whose token ``token`` is, or ``None``."""
        if not token:
            return None
        given = hash_token(token).encode()
        found = None
        for digest, principal in self._entries:  # every entry, so the time does not tell which one matched
            if hmac.compare_digest(given, digest.encode()):
                found = principal
        return found

    def named(self, principal_id: str) -> Principal | None:
        """The user whose id is ``principal_id``, or ``None``."""
        return self._by_id.get(principal_id)


PEER = "tarry.peer"
"""Where [`remember_peer`][tarry.web.remember_peer] keeps the connecting peer's address in the ASGI scope."""


def remember_peer(app: ASGIApp) -> ASGIApp:
    """``app`` with the connecting peer's address kept in the scope before anything replaces it.

    A proxy-headers middleware (uvicorn's) replaces ``scope["client"]`` with the address a proxy
    names in ``X-Forwarded-For``; [`ProxyIdentity`][tarry.web.ProxyIdentity] must judge the proxy
    itself. Put this outside such a middleware: ``remember_peer(ProxyHeadersMiddleware(app))``.
    """

    async def kept(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket"):
            scope.setdefault(PEER, scope.get("client"))
        await app(scope, receive, send)

    return kept


@dataclass(frozen=True)
class ProxyIdentity:
    """An identity header set by an authenticating reverse proxy, honoured only from the proxy's addresses.

    A request from any other address may carry the header too (anybody can send it): it is
    ignored there. ``proxies`` are addresses or networks (``127.0.0.1``, ``10.0.0.0/8``).
    """

    header: str
    proxies: tuple[Network, ...]

    @classmethod
    def of(cls, header: str, proxies: Iterable[str]) -> ProxyIdentity:
        """The identity ``header`` trusted from ``proxies``; raises ``ValueError`` for a bad address or none."""
        networks = tuple(ipaddress.ip_network(proxy.strip(), strict=False) for proxy in proxies)
        if not header.strip():
            raise ValueError("The identity header needs a name")
        if not networks:
            raise ValueError(
                f"Trusting the identity header {header!r} needs the proxy's addresses: anybody can send that header"
            )
        return cls(header.strip().lower(), networks)

    def principal(self, connection: HTTPConnection) -> Principal | None:
        """The verified principal the proxy named, or ``None`` (not from a proxy, or no header)."""
        value = connection.headers.get(self.header, "").strip()
        peer = connection.scope.get(PEER) or connection.scope.get("client")
        if not value or len(value) > 200 or not peer:  # 200: the stored id's length
            return None
        try:
            address = ipaddress.ip_address(peer[0])
        except ValueError:  # a client that is no IP address (a Unix socket, a test transport)
            return None
        if not any(address in network for network in self.proxies):
            return None
        return Principal(value)
