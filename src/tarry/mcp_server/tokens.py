"""Fixed bearer tokens for ``tarry mcp serve``: the SDK's token checks without an authorization server.

Each token is a client of its own, named by a digest of the token (the same in every process,
and never the token itself), so tasks and request states are bound to the token that made them.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable

from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings

MIN_TOKEN_LENGTH = 16
UNUSED_ISSUER = "http://127.0.0.1/"
"""The SDK's ``AuthSettings`` needs an issuer; with no resource URL it is never advertised nor used."""


def token_client(token: str) -> str:
    """The client id a bearer token stands for: ``token:`` and 16 hex digits of its SHA-256."""
    return f"token:{hashlib.sha256(token.encode()).hexdigest()[:16]}"


class BearerTokens:
    """The SDK's ``TokenVerifier`` for a fixed set of bearer tokens, each a client of its own.

    Refuses a token shorter than ``MIN_TOKEN_LENGTH`` characters, or none at all.
    """

    def __init__(self, tokens: Iterable[str]) -> None:
        self._clients = {token: token_client(token) for token in tokens}
        if not self._clients:
            raise ValueError("Bearer token authentication needs at least one token")
        short = [token for token in self._clients if len(token) < MIN_TOKEN_LENGTH]
        if short:
            raise ValueError(f"A bearer token needs at least {MIN_TOKEN_LENGTH} characters; one has {len(short[0])}")

    async def verify_token(self, token: str) -> AccessToken | None:
        """The access of ``token`` when it is one of the tokens, else ``None`` (the request gets 401)."""
        found = None
        for known, client in self._clients.items():  # each compared in constant time
            if hmac.compare_digest(known.encode(), token.encode()):
                found = client
        return None if found is None else AccessToken(token=token, client_id=found, scopes=[])

    def auth(self) -> AuthSettings:
        """The ``AuthSettings`` that put ``serve()`` behind these tokens (no OAuth metadata is served)."""
        return AuthSettings(issuer_url=UNUSED_ISSUER, resource_server_url=None)
