"""The RFC 7523 JWT-bearer grant: for workloads (SEP-1933) and for enterprise-managed logins (SEP-990).

A workload (a CI job, a pod) holds a JWT its platform issued; [`JWTBearerLogin`][tarry.mcp.JWTBearerLogin] trades it
for an access token at the MCP server's authorization server, as a public client: no secret,
no person, no redirect. The MCP SDK 2.3 has no provider for this grant (its
``IdentityAssertionOAuthProvider`` serves confidential clients only), so this one is the SDK's
``OAuthClientProvider`` (discovery, token storage, the bearer header) with only the token
request replaced. A refused grant is reported as the SDK reports any token error, and is
not retried with another grant.

Enterprise-managed authorization (SEP-990) is two legs: the person's ID token from the
enterprise identity provider is exchanged there for an identity assertion grant (an ID-JAG,
RFC 8693 token exchange), which the SDK's ``IdentityAssertionOAuthProvider`` then presents to
the MCP server's authorization server. The SDK leaves the first leg to the deployment;
``id_jag_exchange`` is that leg, as the provider's ``assertion_provider``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import httpx2
from mcp.client.auth import OAuthClientProvider, OAuthTokenError, TokenStorage
from mcp.shared.auth import JWT_BEARER_GRANT_TYPE, OAuthClientInformationFull, OAuthClientMetadata

TOKEN_EXCHANGE = "urn:ietf:params:oauth:grant-type:token-exchange"
"""The grant type of RFC 8693 §2.1."""
ID_TOKEN = "urn:ietf:params:oauth:token-type:id_token"
ID_JAG = "urn:ietf:params:oauth:token-type:id-jag"
"""The token types of a SEP-990 exchange: the person's ID token in, an identity assertion grant out."""
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
            redirect_uris=None, grant_types=[JWT_BEARER_GRANT_TYPE], token_endpoint_auth_method="none", scope=scope
        )
        super().__init__(server_url, metadata, storage)
        self._client = OAuthClientInformationFull(
            redirect_uris=None, client_id=client_id, grant_types=[JWT_BEARER_GRANT_TYPE],
            token_endpoint_auth_method="none", scope=scope,
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
            "grant_type": JWT_BEARER_GRANT_TYPE,
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


def id_jag_exchange(
    token_endpoint: str, id_token: str, client_id: str, *, client_secret: str | None = None
) -> Callable[[str, str], Awaitable[str]]:
    """The first leg of SEP-990: trade the person's ``id_token`` for an ID-JAG at the identity provider.

    Returns the ``assertion_provider(audience, resource)`` of the SDK's
    ``IdentityAssertionOAuthProvider``: each call posts an RFC 8693 token exchange to the
    identity provider's ``token_endpoint`` as ``client_id`` (with ``client_secret`` when the
    identity provider gave one) and returns the ID-JAG it issues for that authorization server
    (``audience``) and MCP server (``resource``). A refusal raises ``OAuthTokenError`` with the
    identity provider's reason.
    """
    if not token_endpoint or not id_token or not client_id:
        raise ValueError("id_jag_exchange needs the identity provider's token_endpoint, an id_token and a client_id")

    async def exchange(audience: str, resource: str) -> str:
        data = {
            "grant_type": TOKEN_EXCHANGE, "subject_token": id_token, "subject_token_type": ID_TOKEN,
            "requested_token_type": ID_JAG, "audience": audience, "resource": resource, "client_id": client_id,
        }  # fmt: skip
        if client_secret is not None:
            data["client_secret"] = client_secret
        async with httpx2.AsyncClient() as client:
            response = await client.post(token_endpoint, data=data)
        body = response.json() if response.headers.get("content-type", "").startswith("application/json") else {}
        issued = body.get("access_token") if isinstance(body, dict) else None
        if response.status_code != 200 or body.get("issued_token_type") != ID_JAG or not isinstance(issued, str):
            reason = body.get("error_description") or body.get("error") or f"HTTP {response.status_code}"
            raise OAuthTokenError(f"The identity provider refused to issue an ID-JAG: {reason}")
        return issued

    return exchange
