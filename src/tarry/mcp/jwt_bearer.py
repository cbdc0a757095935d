"""The RFC 7523 JWT-bearer grant for workloads (SEP-1933, workload identity federation).

A workload (a CI job, a pod) holds a JWT its platform issued; :class:`JWTBearerLogin` trades it
for an access token at the MCP server's authorization server, as a public client: no secret,
no person, no redirect. The MCP SDK 2.3 has no provider for this grant (its
``IdentityAssertionOAuthProvider`` serves confidential clients only), so this one is the SDK's
``OAuthClientProvider`` (discovery, token storage, the bearer header) with only the token
request replaced. A refused grant is reported as the SDK reports any token error, and is
not retried with another grant.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import httpx2
from mcp.client.auth import OAuthClientProvider, TokenStorage
from mcp.shared.auth import OAuthClientInformationFull, OAuthClientMetadata

JWT_BEARER = "urn:ietf:params:oauth:grant-type:jwt-bearer"
"""The grant type of RFC 7523 §2.1."""
Assertion = Callable[[str], Awaitable[str]]
"""Gives the workload's JWT for an audience (the authorization server's issuer)."""


class JWTBearerLogin(OAuthClientProvider):
    """``MCPServer(url=..., auth=JWTBearerLogin(url, storage, client_id, assertion))``: a workload's JWT for a token.

    ``assertion(audience)`` returns the JWT to present; the audience is the authorization
    server's issuer (the platform usually mints a fresh short-lived token per call).
    ``client_id`` names the workload's public client; ``scope`` is asked for when given.
    """

    def __init__(
        self,
        server_url: str,
        storage: TokenStorage,
        client_id: str,
        assertion: Assertion,
        *,
        scope: str | None = None,
    ) -> None:
        if not client_id:
            raise ValueError("JWTBearerLogin needs the workload's client_id")
        metadata = OAuthClientMetadata(
            redirect_uris=None, grant_types=[JWT_BEARER], token_endpoint_auth_method="none", scope=scope
        )
        super().__init__(server_url, metadata, storage)
        self._client = OAuthClientInformationFull(
            redirect_uris=None, client_id=client_id, grant_types=[JWT_BEARER], token_endpoint_auth_method="none",
            scope=scope,
        )  # fmt: skip
        self._assertion = assertion

    async def _initialize(self) -> None:
        self.context.current_tokens = await self.context.storage.get_tokens()
        self.context.client_info = self._client  # pre-registered: no dynamic registration
        self._initialized = True

    async def _perform_authorization(self) -> httpx2.Request:
        """The token request of RFC 7523 §2.1: the grant type, the workload's JWT, the client id."""
        context = self.context
        metadata = context.oauth_metadata
        audience = str(metadata.issuer) if metadata is not None else context.get_authorization_base_url(self.server)
        data: dict[str, Any] = {
            "grant_type": JWT_BEARER,
            "assertion": await self._assertion(audience.rstrip("/")),
            "client_id": self._client.client_id,
        }
        if context.should_include_resource_param(context.protocol_version):
            data["resource"] = context.get_resource_url()
        if context.client_metadata.scope:
            data["scope"] = context.client_metadata.scope
        headers = {"Content-Type": "application/x-www-form-urlencoded"}
        return httpx2.Request("POST", self._get_token_endpoint(), data=data, headers=headers)

    @property
    def server(self) -> str:
        """The MCP server's URL."""
        return self.context.server_url
