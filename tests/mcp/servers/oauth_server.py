"""An OAuth-protected MCP server written with the official SDK, for tarry's tests.

Run: ``python oauth_server.py PORT``. The server is its own authorization server (the SDK's
auth routes: metadata, dynamic registration, ``/authorize``, ``/token``) with an in-memory
provider that approves every login at once: ``/authorize`` redirects straight to the
client's ``redirect_uri`` with a code, as a browser would after the person said yes.
Test-only routes: ``POST /test/revoke`` forgets every token (the next request needs a new
login), ``POST /test/expire`` ends every access token (the next request refreshes),
``GET /test/stats`` counts grants, registrations and tool runs. ``python oauth_server.py PORT ISSUER``
redirects with ``iss=ISSUER`` (RFC 9207), for the tests of an answer from another issuer.
"""

from __future__ import annotations

import secrets
import sys
import time

from mcp.server.auth.provider import (
    AccessToken,
    AuthorizationCode,
    AuthorizationParams,
    RefreshToken,
    TokenError,
    construct_redirect_uri,
)
from mcp.server.auth.settings import AuthSettings, ClientRegistrationOptions
from mcp.server.mcpserver import MCPServer
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

PORT = int(sys.argv[1]) if len(sys.argv) > 1 else 8765
BASE = f"http://127.0.0.1:{PORT}"
ISS = sys.argv[2] if len(sys.argv) > 2 else None
LIFETIME = 3600
stats = {"registrations": 0, "codes": 0, "refreshes": 0, "add_runs": 0}


class Provider:
    """Every login approved at once; tokens in memory."""

    def __init__(self) -> None:
        self.clients: dict[str, OAuthClientInformationFull] = {}
        self.codes: dict[str, AuthorizationCode] = {}
        self.access: dict[str, AccessToken] = {}
        self.refresh: dict[str, RefreshToken] = {}

    async def get_client(self, client_id: str) -> OAuthClientInformationFull | None:
        return self.clients.get(client_id)

    async def register_client(self, client_info: OAuthClientInformationFull) -> None:
        stats["registrations"] += 1
        assert client_info.client_id is not None
        self.clients[client_info.client_id] = client_info

    async def authorize(self, client: OAuthClientInformationFull, params: AuthorizationParams) -> str:
        code = secrets.token_urlsafe(24)
        self.codes[code] = AuthorizationCode(
            code=code, scopes=params.scopes or [], expires_at=time.time() + 300, client_id=client.client_id or "",
            code_challenge=params.code_challenge, redirect_uri=params.redirect_uri,
            redirect_uri_provided_explicitly=params.redirect_uri_provided_explicitly, resource=params.resource,
        )  # fmt: skip
        return construct_redirect_uri(str(params.redirect_uri), code=code, state=params.state, iss=ISS)

    async def load_authorization_code(self, client: OAuthClientInformationFull, code: str) -> AuthorizationCode | None:
        return self.codes.get(code)

    async def exchange_authorization_code(
        self, client: OAuthClientInformationFull, authorization_code: AuthorizationCode
    ) -> OAuthToken:
        del self.codes[authorization_code.code]
        stats["codes"] += 1
        return self._issue(client, authorization_code.scopes, authorization_code.resource)

    async def load_refresh_token(self, client: OAuthClientInformationFull, refresh_token: str) -> RefreshToken | None:
        return self.refresh.get(refresh_token)

    async def exchange_refresh_token(
        self, client: OAuthClientInformationFull, refresh_token: RefreshToken, scopes: list[str]
    ) -> OAuthToken:
        if self.refresh.pop(refresh_token.token, None) is None:
            raise TokenError("invalid_grant", "refresh token already used")
        stats["refreshes"] += 1
        return self._issue(client, scopes or refresh_token.scopes, None)

    async def load_access_token(self, token: str) -> AccessToken | None:
        found = self.access.get(token)
        if found is None or (found.expires_at is not None and found.expires_at < time.time()):
            return None
        return found

    async def revoke_token(self, token: AccessToken | RefreshToken) -> None:
        self.access.pop(token.token, None)
        self.refresh.pop(token.token, None)

    def _issue(self, client: OAuthClientInformationFull, scopes: list[str], resource: str | None) -> OAuthToken:
        access, refresh = secrets.token_urlsafe(24), secrets.token_urlsafe(24)
        client_id = client.client_id or ""
        self.access[access] = AccessToken(
            token=access, client_id=client_id, scopes=scopes, expires_at=int(time.time()) + LIFETIME, resource=resource
        )
        self.refresh[refresh] = RefreshToken(token=refresh, client_id=client_id, scopes=scopes)
        return OAuthToken(
            access_token=access, token_type="Bearer", expires_in=LIFETIME, refresh_token=refresh,
            scope=" ".join(scopes) or None,
        )  # fmt: skip


provider = Provider()
server = MCPServer(
    "guarded",
    auth_server_provider=provider,
    auth=AuthSettings(
        issuer_url=BASE, resource_server_url=f"{BASE}/mcp", validate_token_resource=False,
        client_registration_options=ClientRegistrationOptions(enabled=True),
    ),
)  # fmt: skip


@server.tool()
def add(a: int, b: int) -> str:
    """Adds two numbers."""
    stats["add_runs"] += 1
    return str(a + b)


@server.custom_route("/test/revoke", methods=["POST"])
async def revoke(request: Request) -> Response:
    provider.access.clear()
    provider.refresh.clear()
    return JSONResponse({"ok": True})


@server.custom_route("/test/expire", methods=["POST"])
async def expire(request: Request) -> Response:
    provider.access.clear()
    return JSONResponse({"ok": True})


@server.custom_route("/test/stats", methods=["GET"])
async def show_stats(request: Request) -> Response:
    return JSONResponse(stats)


if __name__ == "__main__":
    server.run("streamable-http", host="127.0.0.1", port=PORT)
