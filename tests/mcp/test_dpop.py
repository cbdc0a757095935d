"""DPoP proofs (RFC 9449 §4.2) as ``tarry.mcp.DPoP`` signs them: read back and verified with the key they carry.

The flow around them (the token request's proof, the DPoP scheme, a server's nonce) runs
against the official conformance suite's ``auth/dpop`` and ``auth/dpop-nonce`` (test_conformance.py).
"""

from __future__ import annotations

import base64
import hashlib
import time
from typing import Any

import httpx2
import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import ec
from mcp.client.auth import OAuthClientProvider
from mcp.shared.auth import OAuthClientInformationFull, OAuthClientMetadata, OAuthToken

from tarry.mcp import DPoP

URL = "https://mcp.example/mcp"


class Memory:
    """The SDK's ``TokenStorage``, empty."""

    async def get_tokens(self) -> OAuthToken | None:
        return None

    async def set_tokens(self, tokens: OAuthToken) -> None: ...

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return None

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None: ...


def provider() -> OAuthClientProvider:
    metadata = OAuthClientMetadata(redirect_uris=["http://localhost/callback"])  # type: ignore[list-item]
    return OAuthClientProvider(URL, metadata, Memory())


def verified(proof: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The proof's header and claims, its signature checked with the public key in its own header."""
    header = jwt.get_unverified_header(proof)
    key = jwt.PyJWK(header["jwk"], algorithm="ES256").key
    return header, jwt.decode(proof, key, algorithms=["ES256"])


def test_a_proof_names_the_request_and_carries_the_public_key() -> None:
    dpop = DPoP(provider())
    before = int(time.time())
    header, claims = verified(dpop.proof("post", "https://as.example/token?x=1#frag"))

    assert header["typ"] == "dpop+jwt" and header["alg"] == "ES256"
    assert header["jwk"] == dpop.public_jwk and "d" not in header["jwk"]
    assert header["jwk"]["kty"] == "EC" and header["jwk"]["crv"] == "P-256"
    assert claims["htm"] == "POST"
    assert claims["htu"] == "https://as.example/token"  # no query, no fragment (§4.2)
    assert before <= claims["iat"] <= int(time.time())
    assert isinstance(claims["jti"], str) and len(claims["jti"]) >= 16
    assert "ath" not in claims and "nonce" not in claims


def test_a_resource_proof_hashes_the_token_and_carries_the_nonce() -> None:
    dpop = DPoP(provider())
    _, claims = verified(dpop.proof("POST", URL, access_token="the-token", nonce="n-1"))
    expected = base64.urlsafe_b64encode(hashlib.sha256(b"the-token").digest()).rstrip(b"=").decode()
    assert claims["ath"] == expected
    assert claims["nonce"] == "n-1"
    assert claims["htu"] == URL


def test_every_proof_is_fresh_and_signed_with_the_logins_own_key() -> None:
    dpop, other = DPoP(provider()), DPoP(provider())
    first, second = dpop.proof("POST", URL), dpop.proof("POST", URL)
    assert verified(first)[1]["jti"] != verified(second)[1]["jti"]
    assert other.public_jwk != dpop.public_jwk
    with pytest.raises(jwt.InvalidSignatureError):  # another login's key does not verify it
        jwt.decode(first, jwt.PyJWK(other.public_jwk, algorithm="ES256").key, algorithms=["ES256"])


def test_a_given_key_signs_the_proofs() -> None:
    key = ec.generate_private_key(ec.SECP256R1())
    dpop = DPoP(provider(), key=key)
    _, claims = verified(dpop.proof("GET", URL))
    assert claims["htm"] == "GET"
    jwt.decode(dpop.proof("GET", URL), key.public_key(), algorithms=["ES256"])


def test_bad_input_is_refused_by_name() -> None:
    with pytest.raises(TypeError, match=r"httpx2\.Auth"):
        DPoP("not a provider")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="P-256"):
        DPoP(provider(), key=ec.generate_private_key(ec.SECP384R1()))
    assert isinstance(DPoP(httpx2.Auth()).public_jwk["x"], str)  # any httpx2.Auth can be wrapped
