"""The OAuth redirect endpoint: malformed and forged redirects, refused logins, and its headers when served alone."""

from __future__ import annotations

import socket

import httpx
import pytest

from tarry.store import Store
from tarry.web.guard import SECURITY_HEADERS
from tarry.web.oauth import serve_callback
from tests.web.client import Inbox
from tests.web.tools import run

SERVER = "http://127.0.0.1:1/mcp"
ATTACKER = "Your account is locked: call +1 555 0100 <b>now</b>"


def begin(url: str, state: str, issuer: str | None = "https://auth.example", required: bool = False) -> None:
    """Record a login waiting for its redirect, as ``OAuthLogin`` does."""

    async def begun() -> None:
        async with Store(url) as store:
            await store.oauth.begin_login(
                SERVER, "", state=state, code_verifier="v" * 43, ttl=600, issuer=issuer, issuer_required=required
            )

    run(begun)


def taken(url: str) -> tuple[str, str | None] | None:
    """What the next attempt to use the server finds: the code and the refusal, or ``None``."""

    async def take() -> tuple[str, str | None] | None:
        async with Store(url) as store:
            received = await store.oauth.take_code(SERVER, "")
            return None if received is None else (received.code, received.refused)

    return run(take)


@pytest.mark.parametrize(
    "query",
    ["state=%00", "state=%00&code=c", "state=s&code=%00", "state=s&code=c&iss=%00", "error=x&state=%00", "%00=1"],
)
def test_a_nul_in_the_redirect_is_a_clear_400(any_database: str, query: str) -> None:
    inbox = Inbox(any_database)
    with inbox.client as client:
        page = client.get(f"/oauth/callback?{query}")
        assert page.status_code == 400
        assert "Not a login link" in page.text and "NUL" in page.text and "Traceback" not in page.text
        client.portal.call(inbox.store.close)  # type: ignore[union-attr]


def test_the_store_names_a_nul_in_a_login(any_database: str) -> None:
    async def receive() -> None:
        async with Store(any_database) as store:
            await store.oauth.receive_code("s\x00", "code")

    with pytest.raises(ValueError, match="state cannot hold a NUL"):
        run(receive)


@pytest.mark.parametrize("state", ["", "no-such-login"])
def test_an_error_redirect_without_a_waiting_login_shows_none_of_its_text(inbox: Inbox, state: str) -> None:
    params = {"error": "access_denied", "error_description": ATTACKER, "state": state}
    page = inbox.client.get("/oauth/callback", params=params)
    assert page.status_code == 400 and "Login refused" in page.text
    assert "555" not in page.text and "locked" not in page.text and "access_denied" not in page.text


def test_an_error_redirect_of_a_waiting_login_says_why_escaped_and_keeps_nothing(inbox: Inbox) -> None:
    begin(inbox.url, "waiting-state")
    params = {"error": "access_denied", "error_description": ATTACKER + "\u202e", "state": "waiting-state"}
    page = inbox.client.get("/oauth/callback", params=params)
    assert page.status_code == 400 and "The authorization server refused the login: Your account" in page.text
    assert "&lt;b&gt;now&lt;/b&gt;" in page.text and "<b>" not in page.text
    assert "\u202e" not in page.text and "\\u202e" in page.text
    again = inbox.client.get("/oauth/callback", params=params)  # the login waits no more: its text is not shown
    assert again.status_code == 400 and "locked" not in again.text
    assert taken(inbox.url) == ("", f"{ATTACKER}\\u202e")


@pytest.mark.parametrize(
    ("iss", "required", "why"),
    [
        ("https://evil.example", False, "came from the issuer 'https://evil.example', not from 'https://auth.example'"),
        (None, True, "did not say which issuer sent it"),
    ],
)
def test_a_redirect_from_another_issuer_is_refused_and_says_why(
    any_database: str, iss: str | None, required: bool, why: str
) -> None:
    inbox = Inbox(any_database)
    begin(any_database, "the-state", required=required)
    with inbox.client as client:
        params = {"state": "the-state", "code": "the-code"} | ({"iss": iss} if iss else {})
        page = client.get("/oauth/callback", params=params)
        assert page.status_code == 400
        assert "Logged in" not in page.text and "Login refused" in page.text
        assert why.replace("'", "&#x27;") in page.text
        client.portal.call(inbox.store.close)  # type: ignore[union-attr]
    code, refused = taken(any_database) or ("", None)
    assert code == "" and refused is not None and why in refused  # the code was not kept
    assert taken(any_database) is None  # reported once


def test_a_redirect_from_the_right_issuer_logs_in(inbox: Inbox) -> None:
    begin(inbox.url, "the-state", required=True)
    params = {"state": "the-state", "code": "the-code", "iss": "https://auth.example"}
    page = inbox.client.get("/oauth/callback", params=params)
    assert page.status_code == 200 and "Logged in" in page.text
    assert taken(inbox.url) == ("the-code", None)


def test_the_callback_served_alone_sends_the_inbox_security_headers(inbox: Inbox) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]

    async def fetch() -> list[httpx.Response]:
        async with (
            Store(inbox.url) as store,
            serve_callback(store, port=port) as redirect_uri,
            httpx.AsyncClient() as client,
        ):
            return [await client.get(redirect_uri, params=params) for params in ({}, {"error": "x"})]

    expected = {name: inbox.client.get("/oauth/callback").headers[name] for name in SECURITY_HEADERS}
    for response in run(fetch):
        assert response.status_code in (400, 404)
        assert {name: response.headers.get(name) for name in SECURITY_HEADERS} == expected
        assert "frame-ancestors 'none'" in response.headers["content-security-policy"]
        assert response.headers["cache-control"] == "no-store"
