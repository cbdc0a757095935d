"""DPoP (RFC 9449) for MCP servers: access tokens bound to a key the client holds (SEP-1932).

``MCPServer(url=..., auth=DPoP(provider))`` wraps any of the MCP SDK's OAuth providers
(``OAuthClientProvider`` and its subclasses, tarry's [`OAuthLogin`][tarry.mcp.OAuthLogin] and
[`JWTBearerLogin`][tarry.mcp.JWTBearerLogin]). The provider does what it always does (discovery,
registration, the login, refresh); the wrapper adds to what it sends:

- a DPoP proof (a JWT signed with the key, ES256, its public key in the header) on every
  token request and on every request that carries the access token, fresh for each (its
  own ``jti``), naming the method and URL, and on resource requests the token's hash (``ath``);
- the ``DPoP`` authorization scheme instead of ``Bearer``;
- a server's nonce: one answer ``use_dpop_nonce`` (a token endpoint's 400, a resource
  server's 401) with a ``DPoP-Nonce`` is retried once with the nonce in a new proof, and
  the latest nonce of each origin goes into every later proof to it.

The SDK 2.3 knows only bearer tokens (its ``OAuthToken`` refuses ``token_type: DPoP``), so a
token response of type DPoP reaches the provider as type ``Bearer``: the wrapper presents
every token it holds with the DPoP scheme. The key lives in memory, one per wrapper (give
``key=`` to keep it elsewhere): a process that starts with a new key holds tokens bound to
the old one, which the server refuses, and the provider logs in again.
"""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
import time
from collections.abc import AsyncGenerator, Generator
from typing import Any
from urllib.parse import parse_qs

import httpx2
import jwt
from cryptography.hazmat.primitives.asymmetric import ec
from jwt.algorithms import ECAlgorithm

NONCE_ERROR = "use_dpop_nonce"
"""The error of RFC 9449 §8 and §9: the server wants a proof with the nonce it sent."""
_FORM = "application/x-www-form-urlencoded"


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


class DPoP(httpx2.Auth):
    """``DPoP(provider)``: the SDK OAuth ``provider``'s tokens bound to a key by RFC 9449 proofs.

    ``key`` is the P-256 private key that signs the proofs (``None``: a new one, kept in
    memory for the life of this object). [`public_jwk`][tarry.mcp.DPoP.public_jwk] is its public key as a JWK.
    """

    requires_response_body = True  # the token endpoint's use_dpop_nonce is in the body

    def __init__(self, provider: httpx2.Auth, *, key: ec.EllipticCurvePrivateKey | None = None) -> None:
        if not isinstance(provider, httpx2.Auth):
            raise TypeError(f"DPoP wraps an httpx2.Auth such as the MCP SDK's OAuthClientProvider, got {provider!r}")
        if key is None:
            key = ec.generate_private_key(ec.SECP256R1())
        elif not isinstance(key, ec.EllipticCurvePrivateKey) or not isinstance(key.curve, ec.SECP256R1):
            raise ValueError(f"DPoP signs with ES256: key= must be a P-256 private key, got {key!r}")
        self.provider = provider
        """The wrapped OAuth provider."""
        self._key = key
        self.public_jwk: dict[str, Any] = ECAlgorithm.to_jwk(key.public_key(), as_dict=True)
        """The public key every proof carries (and a DPoP-bound token's ``cnf.jkt`` names)."""
        self._nonces: dict[str, str] = {}

    def proof(self, method: str, url: str, *, access_token: str | None = None, nonce: str | None = None) -> str:
        """A fresh DPoP proof (RFC 9449 §4.2) for a ``method`` request to ``url``, the query and fragment left out."""
        target = httpx2.URL(url)
        claims: dict[str, Any] = {
            "jti": secrets.token_urlsafe(16),
            "htm": method.upper(),
            "htu": str(target.copy_with(query=None, fragment=None)),
            "iat": int(time.time()),
        }
        if access_token is not None:
            claims["ath"] = _b64(hashlib.sha256(access_token.encode("ascii")).digest())
        if nonce is not None:
            claims["nonce"] = nonce
        return jwt.encode(claims, self._key, algorithm="ES256", headers={"typ": "dpop+jwt", "jwk": self.public_jwk})

    def sync_auth_flow(self, request: httpx2.Request) -> Generator[httpx2.Request, httpx2.Response, None]:
        """Refused: the SDK's providers (and so the proofs) work on ``httpx2.AsyncClient`` only."""
        raise TypeError("DPoP is an async auth flow: use it with httpx2.AsyncClient (as MCPServer does)")

    async def async_auth_flow(self, request: httpx2.Request) -> AsyncGenerator[httpx2.Request, httpx2.Response]:
        """The provider's flow, each request it sends given a proof, and a nonce a server asks for given once."""
        flow = self.provider.async_auth_flow(request)
        try:
            outgoing = await flow.__anext__()
            while True:
                token_request = self._sign(outgoing)
                response = yield outgoing
                self._keep_nonce(response)
                if await self._wants_nonce(response):  # once: the proof now carries the server's nonce
                    self._sign(outgoing)
                    response = yield outgoing
                    self._keep_nonce(response)
                if token_request:
                    response = await self._as_bearer(response)
                outgoing = await flow.asend(response)
        except StopAsyncIteration:
            return
        finally:
            await flow.aclose()

    def _sign(self, request: httpx2.Request) -> bool:
        """Put a fresh proof on a token request or one carrying the token (rescheming it); True for a token request."""
        nonce = self._nonces.get(_origin(request.url))
        scheme, _, token = request.headers.get("Authorization", "").partition(" ")
        if scheme.lower() in ("bearer", "dpop") and token:
            request.headers["Authorization"] = f"DPoP {token}"
            request.headers["DPoP"] = self.proof(request.method, str(request.url), access_token=token, nonce=nonce)
            return False
        if _is_token_request(request):
            request.headers["DPoP"] = self.proof(request.method, str(request.url), nonce=nonce)
            return True
        return False

    def _keep_nonce(self, response: httpx2.Response) -> None:
        nonce = response.headers.get("DPoP-Nonce")
        if nonce:
            self._nonces[_origin(response.request.url)] = nonce

    @staticmethod
    async def _wants_nonce(response: httpx2.Response) -> bool:
        if "DPoP-Nonce" not in response.headers:
            return False
        if response.status_code == 401:
            return NONCE_ERROR in response.headers.get("WWW-Authenticate", "")
        if response.status_code == 400:
            try:
                return bool(json.loads(await response.aread()).get("error") == NONCE_ERROR)
            except (ValueError, AttributeError):
                return False
        return False

    @staticmethod
    async def _as_bearer(response: httpx2.Response) -> httpx2.Response:
        """A token response of type DPoP as the SDK accepts it (type ``Bearer``; the wrapper presents it as DPoP)."""
        if response.status_code not in (200, 201):
            return response
        try:
            body = json.loads(await response.aread())
        except ValueError:
            return response
        if not isinstance(body, dict) or str(body.get("token_type", "")).lower() != "dpop":
            return response
        body["token_type"] = "Bearer"
        headers = [
            (name, value)
            for name, value in response.headers.multi_items()
            if name.lower() not in ("content-length", "content-encoding", "transfer-encoding")
        ]
        return httpx2.Response(response.status_code, headers=headers, json=body, request=response.request)


def _origin(url: httpx2.URL) -> str:
    return f"{url.scheme}://{url.netloc.decode('ascii')}"


def _is_token_request(request: httpx2.Request) -> bool:
    """A POST of a form with a ``grant_type``: a request to a token endpoint (RFC 6749 §3.2)."""
    if request.method != "POST" or not request.headers.get("Content-Type", "").startswith(_FORM):
        return False
    try:
        body = request.content
    except httpx2.RequestNotRead:
        return False
    return "grant_type" in parse_qs(body.decode("utf-8", "replace"))
