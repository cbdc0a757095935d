"""OAuth logins to MCP servers, kept in tarry's store and answered from the inbox.

``OAuthLogin(store, url, redirect_uri=...)`` is the MCP SDK's ``OAuthClientProvider``
(discovery, dynamic registration or a pre-registered client, PKCE, scope step-up, refresh)
with two things made durable:

- **The login.** Where the SDK would open a browser and wait in this process for the
  redirect, tarry records the login (its ``state`` and PKCE verifier) in the store and the
  call that needed it parks with a URL question: listed by ``pending_questions()``, shown in
  the inbox. The redirect endpoint (``tarry.web``'s ``/oauth/callback``, or
  [`tarry.web.oauth.serve_callback`][tarry.web.serve_callback]) records the code on the login, once, and answers the
  question; whichever process carries the chat on next exchanges the code (with the stored
  verifier) and retries the call.
- **The tokens.** [`StoredTokens`][tarry.mcp.StoredTokens] keeps tokens and the client registration on one row
  per server and identity, so every worker uses the same login; an expired token is refreshed
  by one process (a claim with a lease) while the others wait and read the new one.

The SDK's flow is a coroutine that waits in one process for ``callback_handler``; that
cannot survive a restart, so ``OAuthLogin._perform_authorization`` is the one SDK step
replaced: it builds the authorization URL itself (keeping the verifier), and on a later
attempt exchanges the code that arrived. Everything else is the SDK's.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import secrets
import time
from collections.abc import AsyncGenerator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any, Protocol
from urllib.parse import urlencode, urljoin

import httpx2
from mcp.client.auth import OAuthClientProvider, PKCEParameters
from mcp.client.auth.utils import validate_authorization_response_iss
from mcp.shared.auth import OAuthClientInformationFull, OAuthClientMetadata, OAuthToken

from tarry.clock import utcnow
from tarry.errors import TarryError
from tarry.questions import AnswerNeeded, Question

logger = logging.getLogger("tarry.mcp")
LOGIN_KEY = "oauth-login:"
"""A login's URL question has this prefix and the login's ``state`` as its key (the store matches it)."""


class OAuthRecords(Protocol):
    """The store's OAuth rows as this module uses them (``store.oauth``, ``tarry.store.oauth``)."""

    async def credentials(self, server: str, identity: str = "") -> Any: ...
    async def save_tokens(
        self, server: str, identity: str, tokens: dict[str, Any], expires_at: datetime | None
    ) -> None: ...
    async def save_client_info(self, server: str, identity: str, client_info: dict[str, Any]) -> None: ...
    async def claim_refresh(self, server: str, identity: str, *, seconds: float) -> bool: ...
    async def release_refresh(self, server: str, identity: str) -> None: ...
    async def begin_login(
        self,
        server: str,
        identity: str,
        *,
        state: str,
        code_verifier: str,
        ttl: float,
        issuer: str | None = None,
        issuer_required: bool = False,
    ) -> None: ...
    async def take_code(self, server: str, identity: str) -> Any: ...


class HasOAuth(Protocol):
    """A store: anything with ``oauth`` rows ([`tarry.store.Store`][tarry.store.Store])."""

    @property
    def oauth(self) -> OAuthRecords: ...


class LoginRequired(AnswerNeeded):
    """A person must log in to an MCP server before tarry can use it.

    Raised where no tool call can wait for the login (opening the connection to list the
    server's tools). A stored chat parks on its ``question`` (a URL question of the chat, no
    call); a call that needs a login parks with a URL question of the call instead. ``url``
    is the authorization URL to open; once the redirect brought the code, the next attempt,
    in any process, finishes the login.
    """

    def __init__(self, server: str, url: str, state: str, ttl: float) -> None:
        question = Question(
            id="", kind="url", message=f"Log in to the MCP server at {server} so the chat can use its tools.",
            url=url, source=server, key=LOGIN_KEY + state, ttl=ttl,
        )  # fmt: skip
        super().__init__(
            f"A person must log in to the MCP server at {server} before tarry can use it: "
            "open the login URL (LoginRequired.url) in a browser, then try again.",
            question,
        )
        self.server = server
        self.url = url
        """The authorization URL a person opens to log in."""
        self.state = state
        self.ttl = ttl
        """Seconds the person has to log in."""

    def named(self, name: str) -> LoginRequired:
        """This login, its question naming the server as ``name`` (the ``MCPServer``'s name) rather than its URL."""
        self.question = replace(self.question, source=name, message=f"Log in to {name} so the chat can use its tools.")
        return self

    def __reduce__(self) -> tuple[Any, ...]:  # pickled by job runners with its own arguments
        return (type(self), (self.server, self.url, self.state, self.ttl))


class LoginRefusedError(TarryError):
    """The login a person made to an MCP server was refused, and why: nothing was kept as logged in.

    Raised by the next attempt to use the server after the redirect brought a refusal (the
    authorization server's own, or an answer from another issuer than the one the login was
    sent to); the attempt after it starts a new login.
    """

    def __init__(self, server: str, reason: str) -> None:
        super().__init__(f"The login to the MCP server at {server} was refused: {reason}")
        self.server = server
        self.reason = reason

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.server, self.reason))


def _not_a_login(record: logging.LogRecord) -> bool:
    """Drop the SDK's "OAuth flow error" report of a login tarry asked for: it is not an error."""
    return not (record.exc_info and isinstance(record.exc_info[1], LoginRequired))


logging.getLogger("mcp.client.auth.oauth2").addFilter(_not_a_login)
_started: contextvars.ContextVar[list[LoginRequired] | None] = contextvars.ContextVar("tarry_logins", default=None)


@contextmanager
def watch_logins() -> Iterator[list[LoginRequired]]:
    """Collect the logins started while the block runs (also by the transport's tasks it starts)."""
    started: list[LoginRequired] = []
    token = _started.set(started)
    try:
        yield started
    finally:
        _started.reset(token)


class StoredTokens:
    """The MCP SDK's ``TokenStorage`` on tarry's store: one row per server and identity.

    ``server`` is the MCP server's URL (its resource); ``user`` tells apart the logins of
    several people to one server (``None``: one login for everyone). ``expires_at`` is when
    the tokens last read or written expire (aware UTC), and ``version`` counts their writes.
    """

    def __init__(self, store: HasOAuth, server: str, *, user: str | None = None) -> None:
        if not server:
            raise ValueError("StoredTokens needs the MCP server's URL (server=...)")
        self.records = store.oauth
        self.server = server
        self.identity = user or ""
        self.expires_at: datetime | None = None
        self.version = 0

    async def get_tokens(self) -> OAuthToken | None:
        """The tokens kept for this server and identity, or ``None``."""
        kept = await self.records.credentials(self.server, self.identity)
        self.expires_at, self.version = kept.tokens_expire_at, kept.version
        return None if kept.tokens is None else OAuthToken.model_validate(kept.tokens)

    async def set_tokens(self, tokens: OAuthToken) -> None:
        """Keep new tokens (their expiry counted from now), ending a claim on refreshing them."""
        expires = None if tokens.expires_in is None else utcnow() + timedelta(seconds=int(tokens.expires_in))
        await self.records.save_tokens(self.server, self.identity, tokens.model_dump(mode="json"), expires)
        self.expires_at = expires
        self.version += 1
        logger.info("Kept new OAuth tokens for the MCP server at %s", self.server)

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        """The client registration kept for this server and identity, or ``None``."""
        kept = await self.records.credentials(self.server, self.identity)
        return None if kept.client_info is None else OAuthClientInformationFull.model_validate(kept.client_info)

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        """Keep the client registration."""
        await self.records.save_client_info(self.server, self.identity, client_info.model_dump(mode="json"))

    def expired(self, margin: float = 0.0) -> bool:
        """True when the tokens expire within ``margin`` seconds (by tarry's clock)."""
        return self.expires_at is not None and utcnow() >= self.expires_at - timedelta(seconds=margin)


@dataclass
class _Refresh:
    lease: float = 30.0
    poll: float = 0.1


class OAuthLogin(OAuthClientProvider):
    """OAuth for one MCP server, with the login and tokens kept in ``store``: ``MCPServer(url, auth=OAuthLogin(...))``.

    ``redirect_uri`` is where the authorization server sends the person back: the inbox's
    ``/oauth/callback`` (``create_app``), or [`tarry.web.oauth.serve_callback`][tarry.web.serve_callback]'s.
    ``scope`` is asked for unless the server says which; ``user`` keeps one login per person
    (``None``: one for everyone). A pre-registered client is given as ``client_id`` (and
    ``client_secret``, sent with HTTP Basic authentication, which every authorization server
    supports); else the client registers itself as a public client (or uses ``client_metadata_url``).
    ``login_ttl`` is how many seconds a person has to log in.
    """

    def __init__(
        self,
        store: HasOAuth,
        server_url: str,
        *,
        redirect_uri: str,
        scope: str | None = None,
        user: str | None = None,
        client_name: str = "tarry",
        client_id: str | None = None,
        client_secret: str | None = None,
        client_metadata_url: str | None = None,
        login_ttl: float = 600.0,
    ) -> None:
        if isinstance(login_ttl, bool) or not isinstance(login_ttl, int | float) or login_ttl <= 0:
            raise ValueError(f"login_ttl must be a positive number of seconds, got {login_ttl!r}")
        metadata = OAuthClientMetadata.model_validate(
            {
                "client_name": client_name, "redirect_uris": [redirect_uri], "scope": scope,
                "grant_types": ["authorization_code", "refresh_token"], "response_types": ["code"],
                "token_endpoint_auth_method": "client_secret_basic" if client_secret else "none",
            }
        )  # fmt: skip
        self.tokens = StoredTokens(store, server_url, user=user)
        """Where the tokens and client registration are kept."""
        super().__init__(server_url, metadata, self.tokens, client_metadata_url=client_metadata_url)
        self.login_ttl = float(login_ttl)
        self._registered: OAuthClientInformationFull | None = None
        if client_id is not None:
            self._registered = OAuthClientInformationFull(
                client_id=client_id, client_secret=client_secret, redirect_uris=metadata.redirect_uris,
                token_endpoint_auth_method=metadata.token_endpoint_auth_method,
            )  # fmt: skip
        self._refresh = _Refresh()

    @property
    def server(self) -> str:
        """The MCP server's URL."""
        return self.context.server_url

    async def _initialize(self) -> None:
        await super()._initialize()
        if self.context.client_info is None and self._registered is not None:
            self.context.client_info = self._registered
        self._sync_expiry()

    def _sync_expiry(self) -> None:
        """Give the SDK the stored expiry, on its wall clock (tarry's clock can be moved in tests)."""
        expires = self.tokens.expires_at
        self.context.token_expiry_time = None if expires is None else time.time() + (expires - utcnow()).total_seconds()

    async def _reload(self) -> None:
        self.context.current_tokens = await self.tokens.get_tokens()
        self._sync_expiry()

    async def _auth_flow(self, request: httpx2.Request) -> AsyncGenerator[httpx2.Request, httpx2.Response]:
        await self._before_flow()
        flow = super()._auth_flow(request)
        try:
            outgoing = await flow.__anext__()
            while True:
                response = yield outgoing
                outgoing = await flow.asend(response)
        except StopAsyncIteration:
            return
        finally:
            await flow.aclose()

    async def _before_flow(self) -> None:
        """Use tokens another process refreshed; refresh in one process only (a claim), the others wait."""
        if not self._initialized:
            await self._initialize()
        if self.context.current_tokens is None or not self.tokens.expired():
            return
        await self._reload()
        if not self.tokens.expired() or not self.context.can_refresh_token():
            return
        records, identity = self.tokens.records, self.tokens.identity
        if await records.claim_refresh(self.server, identity, seconds=self._refresh.lease):
            return  # the SDK refreshes now and set_tokens ends the claim
        seen = self.tokens.version
        deadline = asyncio.get_running_loop().time() + self._refresh.lease
        while asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(self._refresh.poll)  # polling the store: another process refreshes
            await self._reload()
            if self.tokens.version != seen:
                return

    async def _handle_refresh_response(self, response: httpx2.Response) -> bool:
        refreshed = await super()._handle_refresh_response(response)
        if not refreshed:  # let another process try at once rather than wait out the claim
            await self.tokens.records.release_refresh(self.server, self.tokens.identity)
        return refreshed

    async def _perform_authorization(self) -> httpx2.Request:
        """The token request for a code that arrived; else record a new login and raise
        [`LoginRequired`][tarry.mcp.LoginRequired]."""
        received = await self.tokens.records.take_code(self.server, self.tokens.identity)
        if received is not None:
            if received.refused is not None:
                raise LoginRefusedError(self.server, received.refused)
            validate_authorization_response_iss(received.issuer, self.context.oauth_metadata)
            return await self._exchange_token_authorization_code(received.code, received.code_verifier)
        url, state, verifier = self._authorization_url()
        metadata = self.context.oauth_metadata
        await self.tokens.records.begin_login(
            self.server, self.tokens.identity, state=state, code_verifier=verifier, ttl=self.login_ttl,
            issuer=None if metadata is None else str(metadata.issuer),
            issuer_required=bool(metadata is not None and metadata.authorization_response_iss_parameter_supported),
        )  # fmt: skip
        login = LoginRequired(self.server, url, state, self.login_ttl)
        started = _started.get()
        if started is not None:
            started.append(login)
        logger.info("The MCP server at %s needs a person to log in", self.server)
        raise login

    def _authorization_url(self) -> tuple[str, str, str]:
        """The authorization URL (RFC 6749 §4.1.1 with PKCE, RFC 8707's resource), its state and verifier."""
        context = self.context
        if context.client_info is None or not context.client_metadata.redirect_uris:
            raise TarryError(f"The OAuth client for {self.server} has no registration or redirect URI")
        metadata = context.oauth_metadata
        endpoint = (
            str(metadata.authorization_endpoint)
            if metadata is not None and metadata.authorization_endpoint
            else urljoin(context.get_authorization_base_url(self.server), "/authorize")
        )
        pkce = PKCEParameters.generate()
        state = secrets.token_urlsafe(32)
        query = {
            "response_type": "code",
            "client_id": context.client_info.client_id,
            "redirect_uri": str(context.client_metadata.redirect_uris[0]),
            "state": state,
            "code_challenge": pkce.code_challenge,
            "code_challenge_method": "S256",
        }
        if context.should_include_resource_param(context.protocol_version):
            query["resource"] = context.get_resource_url()
        scope = context.client_metadata.scope
        if scope:
            query["scope"] = scope
            if "offline_access" in scope.split():
                query["prompt"] = "consent"  # OpenID Connect asks consent for a refresh token
        return f"{endpoint}?{urlencode(query)}", state, pkce.code_verifier
